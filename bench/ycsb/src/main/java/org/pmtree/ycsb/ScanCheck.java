// SPDX-License-Identifier: Apache-2.0
package org.pmtree.ycsb;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Vector;

import site.ycsb.ByteIterator;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * Checks the binding's scans against a model: inserts records whose field0 is
 * their own key, then runs scans from random start keys and compares the keys
 * returned, in order, with the first n keys by (score, key) from the start
 * key's score on.  Meant for client-side sharding, where a scan merges every
 * shard's index; it works against one server as well.  Start it on empty
 * servers (it inserts and then deletes its records).
 *
 * <p>Usage: {@code java -cp ... org.pmtree.ycsb.ScanCheck RECORDS SCANS [-p key=value]...}
 * with the binding's properties, e.g. {@code -p redis.shards=127.0.0.1:7001,127.0.0.1:7002}.
 * Exits 0 when every scan matched, 1 on a mismatch or error, 2 on bad arguments.
 */
public final class ScanCheck {
  private ScanCheck() {}

  public static void main(String[] args) throws DBException {
    Properties props = new Properties();
    List<String> counts = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("-p") && i + 1 < args.length && args[i + 1].contains("=")) {
        String[] kv = args[++i].split("=", 2);
        props.setProperty(kv[0], kv[1]);
      } else {
        counts.add(args[i]);
      }
    }
    int records;
    int scans;
    try {
      records = Integer.parseInt(counts.get(0));
      scans = Integer.parseInt(counts.get(1));
    } catch (IndexOutOfBoundsException | NumberFormatException e) {
      System.err.println("usage: ScanCheck RECORDS SCANS [-p key=value]...");
      System.exit(2);
      return;
    }
    System.exit(run(props, records, scans));
  }

  private static int run(Properties props, int records, int scans) throws DBException {
    PmtreeRedisClient db = new PmtreeRedisClient();
    db.setProperties(props);
    db.init();
    try {
      List<String> keys = new ArrayList<>();
      for (int i = 0; i < records; i++) {
        String key = "scancheck" + i;
        Map<String, String> record = new HashMap<>();
        record.put("field0", key);
        if (db.insert("usertable", key, StringByteIterator.getByteIteratorMap(record)) != Status.OK) {
          System.err.println("ScanCheck: insert of " + key + " failed");
          return 1;
        }
        keys.add(key);
      }
      // The model: every key in index order (score, then key, as a sorted set orders).
      keys.sort(Comparator.comparingDouble(PmtreeRedisClient::score)
                    .thenComparing(Comparator.naturalOrder()));
      Random random = new Random(42);
      int failures = 0;
      for (int s = 0; s < scans; s++) {
        String start = keys.get(random.nextInt(records));
        int n = 1 + random.nextInt(100);
        Vector<HashMap<String, ByteIterator>> rows = new Vector<>();
        if (db.scan("usertable", start, n, null, rows) != Status.OK) {
          System.err.println("ScanCheck: scan from " + start + " failed");
          return 1;
        }
        List<String> got = new ArrayList<>();
        for (HashMap<String, ByteIterator> row : rows) {
          got.add(row.get("field0").toString());
        }
        List<String> want = expected(keys, start, n);
        if (!got.equals(want) && failures++ < 3) {
          System.err.println("ScanCheck: scan of " + n + " from " + start + ": got " + got
              + ", want " + want);
        }
      }
      for (String key : keys) {
        db.delete("usertable", key);
      }
      System.out.println("ScanCheck: " + scans + " scans over " + records + " records, "
          + failures + " mismatched");
      return failures == 0 ? 0 : 1;
    } finally {
      db.cleanup();
    }
  }

  /** The first n keys of the sorted model whose score is at least the start key's. */
  private static List<String> expected(List<String> sorted, String start, int n) {
    double from = PmtreeRedisClient.score(start);
    List<String> want = new ArrayList<>();
    for (String key : sorted) {
      if (PmtreeRedisClient.score(key) >= from && want.size() < n) {
        want.add(key);
      }
    }
    return want;
  }
}
