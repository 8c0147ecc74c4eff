// SPDX-License-Identifier: Apache-2.0
package org.pmtree.ycsb;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisShardInfo;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.ShardedJedis;
import redis.clients.jedis.Tuple;
import redis.clients.util.Sharded;
import redis.clients.jedis.exceptions.JedisException;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * A YCSB binding for any server speaking the Redis protocol: redis-server and
 * {@code pmtree serve} alike, so one run measures both with the same client.
 *
 * <p>Record layout (the layout of YCSB's own Redis binding, so results compare):
 * <ul>
 *   <li>each record is one hash: key = the YCSB key, one hash field per YCSB field;
 *   <li>a sorted set {@code _indices} holds every key, scored by the key's Java
 *       {@code String.hashCode()}; a scan reads up to n keys from the start key's
 *       score upwards, so scan order is hash order, not key order.
 * </ul>
 * The YCSB table name is ignored (one table per server).
 *
 * <p>Ordering, so that a concurrent scan never sees a key without its record:
 * insert writes the hash before the index entry; delete removes the index entry
 * before the hash.
 *
 * <p>Properties (the names YCSB's Redis binding uses, so a command line written
 * for it works here): {@code redis.host} (default 127.0.0.1), {@code redis.port}
 * (default 6379), {@code redis.password} (AUTH when set), {@code redis.timeout}
 * (socket timeout in ms, default 10000).
 *
 * <p>Client-side sharding: {@code redis.shards=host:port,host:port,...} (replaces
 * {@code redis.host}/{@code redis.port}) spreads the records over those servers
 * with Jedis's {@link ShardedJedis}: consistent hashing (MurmurHash, 160 virtual
 * nodes per server) with {@code {tag}} hash tags, as Tembo's clients sharded.
 * Every server then keeps its own {@code _indices} for the keys it holds (the
 * index entry goes to the record's server), and a scan asks every server for
 * its first n index entries from the start key's score, merges them by score and
 * keeps the first n: the same records a single server would return, for one
 * round trip per server.  The list order fixes the key-to-server map, so every
 * client must list the servers in the same order.
 *
 * <p>YCSB creates one instance per client thread, so each holds its own connection
 * (one per server when sharded).
 */
public final class PmtreeRedisClient extends DB {
  /** Name of the sorted set that indexes every record for scans. */
  static final String INDEX_KEY = "_indices";

  /** The one server's connection; null when sharded. */
  private Jedis jedis;
  /** The shards' connections; null when not sharded. */
  private ShardedJedis sharded;

  @Override
  public void init() throws DBException {
    Properties props = getProperties();
    int timeoutMs = parseInt(props, "redis.timeout", 10000);
    String password = props.getProperty("redis.password");
    String shards = props.getProperty("redis.shards");
    if (shards != null && !shards.trim().isEmpty()) {
      initSharded(shards, timeoutMs, password);
      return;
    }
    String host = props.getProperty("redis.host", "127.0.0.1");
    int port = parseInt(props, "redis.port", 6379);
    try {
      jedis = new Jedis(host, port, timeoutMs);
      jedis.connect();
      if (password != null && !password.isEmpty()) {
        jedis.auth(password);
      }
      jedis.ping();
    } catch (JedisException e) {
      throw new DBException("cannot reach a Redis-protocol server at " + host + ":" + port
          + ": " + e.getMessage(), e);
    }
  }

  /** Connects to every server of {@code redis.shards} and checks each answers PING. */
  private void initSharded(String list, int timeoutMs, String password) throws DBException {
    List<JedisShardInfo> infos = new ArrayList<>();
    for (String entry : list.split(",")) {
      String hostPort = entry.trim();
      int colon = hostPort.lastIndexOf(':');
      int port;
      try {
        port = colon > 0 ? Integer.parseInt(hostPort.substring(colon + 1)) : -1;
      } catch (NumberFormatException e) {
        port = -1;
      }
      if (port < 1 || port > 65535) {
        throw new DBException("redis.shards wants host:port,host:port,..., got '" + entry + "'");
      }
      JedisShardInfo info = new JedisShardInfo(hostPort.substring(0, colon), port, timeoutMs);
      if (password != null && !password.isEmpty()) {
        info.setPassword(password);
      }
      infos.add(info);
    }
    sharded = new ShardedJedis(infos, Sharded.DEFAULT_KEY_TAG_PATTERN);
    for (Jedis shard : sharded.getAllShards()) {
      try {
        shard.ping();
      } catch (JedisException e) {
        throw new DBException("cannot reach the shard " + shard.getClient().getHost() + ":"
            + shard.getClient().getPort() + ": " + e.getMessage(), e);
      }
    }
  }

  @Override
  public void cleanup() throws DBException {
    try {
      if (jedis != null) {
        jedis.close();
      }
      if (sharded != null) {
        sharded.close();
      }
    } catch (JedisException e) {
      throw new DBException("closing the connection: " + e.getMessage(), e);
    }
  }

  /** The connection to the server that holds {@code key} and its index entry. */
  private Jedis serverOf(String key) {
    return sharded == null ? jedis : sharded.getShard(key);
  }

  /** Every server's connection: one, or one per shard. */
  private Collection<Jedis> servers() {
    return sharded == null ? Collections.singletonList(jedis) : sharded.getAllShards();
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
                     Map<String, ByteIterator> result) {
    try {
      return fill(readRecord(key, fields), result);
    } catch (JedisException e) {
      return error("read " + key, e);
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      if (!writeFields(key, values)) {
        return Status.ERROR;
      }
      serverOf(key).zadd(INDEX_KEY, score(key), key);
      return Status.OK;
    } catch (JedisException e) {
      return error("insert " + key, e);
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      return writeFields(key, values) ? Status.OK : Status.ERROR;
    } catch (JedisException e) {
      return error("update " + key, e);
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      Jedis server = serverOf(key);
      server.zrem(INDEX_KEY, key);
      return server.del(key) == 1 ? Status.OK : Status.NOT_FOUND;
    } catch (JedisException e) {
      return error("delete " + key, e);
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    try {
      List<String> keys = firstIndexed(score(startkey), recordcount);
      // One round trip per server for all the records instead of one per key.
      Map<Jedis, Pipeline> pipelines = new HashMap<>();
      List<Response<?>> replies = new ArrayList<>(keys.size());
      for (String key : keys) {
        Pipeline pipeline = pipelines.computeIfAbsent(serverOf(key), Jedis::pipelined);
        replies.add(fields == null ? pipeline.hgetAll(key)
                                   : pipeline.hmget(key, fields.toArray(new String[0])));
      }
      for (Pipeline pipeline : pipelines.values()) {
        pipeline.sync();
      }
      for (Response<?> reply : replies) {
        Map<String, String> record = toRecord(reply.get(), fields);
        if (record.isEmpty()) {
          continue;  // Deleted between the index read and the record read.
        }
        HashMap<String, ByteIterator> row = new HashMap<>();
        StringByteIterator.putAllAsByteIterators(row, record);
        result.add(row);
      }
      return Status.OK;
    } catch (JedisException e) {
      return error("scan from " + startkey, e);
    }
  }

  /**
   * The first {@code count} keys of the scan index from score {@code from} on,
   * in score order, over every server's index.
   */
  private List<String> firstIndexed(double from, int count) {
    List<Tuple> entries = new ArrayList<>();
    for (Jedis server : servers()) {
      entries.addAll(server.zrangeByScoreWithScores(INDEX_KEY, from, Double.POSITIVE_INFINITY,
                                                    0, count));
    }
    // Equal scores order by member, as within one sorted set.
    entries.sort(Comparator.comparingDouble(Tuple::getScore).thenComparing(Tuple::getElement));
    List<String> keys = new ArrayList<>(Math.min(count, entries.size()));
    for (Tuple entry : entries.subList(0, Math.min(count, entries.size()))) {
      keys.add(entry.getElement());
    }
    return keys;
  }

  /** The score of a key in the scan index: its Java hash, as YCSB's Redis binding does. */
  static double score(String key) {
    return key.hashCode();
  }

  /**
   * Writes the given fields of a record (HMSET), leaving its other fields as
   * they are: YCSB's update changes a subset.  True when the server said OK.
   */
  private boolean writeFields(String key, Map<String, ByteIterator> values) {
    return "OK".equals(serverOf(key).hmset(key, StringByteIterator.getStringMap(values)));
  }

  /** Reads one record: all fields (HGETALL) or the named ones (HMGET). */
  private Map<String, String> readRecord(String key, Set<String> fields) {
    Jedis server = serverOf(key);
    if (fields == null) {
      return server.hgetAll(key);
    }
    return toRecord(server.hmget(key, fields.toArray(new String[0])), fields);
  }

  /**
   * Turns an HGETALL reply (a map) or an HMGET reply (values in the order of
   * {@code fields}, null for a missing field) into field -> value.
   */
  @SuppressWarnings("unchecked")
  private static Map<String, String> toRecord(Object reply, Set<String> fields) {
    if (fields == null) {
      return (Map<String, String>) reply;
    }
    List<String> values = (List<String>) reply;
    Map<String, String> record = new HashMap<>();
    int i = 0;
    for (String field : fields) {
      String value = values.get(i++);
      if (value != null) {
        record.put(field, value);
      }
    }
    return record;
  }

  private static Status fill(Map<String, String> record, Map<String, ByteIterator> result) {
    if (record.isEmpty()) {
      return Status.NOT_FOUND;
    }
    StringByteIterator.putAllAsByteIterators(result, record);
    return Status.OK;
  }

  private static Status error(String what, JedisException e) {
    System.err.println("PmtreeRedisClient: " + what + ": " + e.getMessage());
    return Status.ERROR;
  }

  private static int parseInt(Properties props, String name, int fallback) throws DBException {
    String text = props.getProperty(name);
    if (text == null) {
      return fallback;
    }
    try {
      return Integer.parseInt(text.trim());
    } catch (NumberFormatException e) {
      throw new DBException(name + " must be an integer, got '" + text + "'", e);
    }
  }
}
