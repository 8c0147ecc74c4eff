#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A server's whole data set as canonical text, for comparing replicas.

  resp_dump.py --port P [--out FILE]

Walks SCAN 0 .. 0, asks TYPE of every key, then GET (string), HGETALL (hash,
fields sorted) or ZRANGEBYSCORE -inf +inf WITHSCORES (sorted set, scores
printed as Python floats, so "1.5" and "1.50" agree) -- pipelined on one
connection.  Prints one line per key, sorted:  <type> <key> <value...>
(bytes rendered with repr, so binary keys cannot break a line), and on
stderr the number of keys.  Any other type, or an error reply, exits 1.
"""

import argparse
import sys

from resp_keys import Connection

BATCH = 500


def checked(replies):
    for r in replies:
        if isinstance(r, Exception):
            raise RuntimeError("error reply: %s" % r)
    return replies


def dump(conn):
    keys, cursor = [], b"0"
    while True:
        cursor, batch = checked(conn.pipeline([("SCAN", cursor, "COUNT", "1000")]))[0]
        keys.extend(batch)
        if cursor == b"0":
            break
    keys = sorted(set(keys))
    lines = []
    for i in range(0, len(keys), BATCH):
        chunk = keys[i:i + BATCH]
        types = checked(conn.pipeline([("TYPE", k) for k in chunk]))
        reads = []
        for k, t in zip(chunk, types):
            if t == "string":
                reads.append(("GET", k))
            elif t == "hash":
                reads.append(("HGETALL", k))
            elif t == "zset":
                reads.append(("ZRANGEBYSCORE", k, "-inf", "+inf", "WITHSCORES"))
            else:
                raise RuntimeError("key %r has type %r (not string, hash or zset)" % (k, t))
        for k, t, v in zip(chunk, types, checked(conn.pipeline(reads))):
            if t == "hash":
                v = sorted(zip(v[0::2], v[1::2]))
            elif t == "zset":
                v = [(m, float(s)) for m, s in zip(v[0::2], v[1::2])]
            lines.append("%s %r %r" % (t, k, v))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", help="write the dump here (default stdout)")
    args = ap.parse_args()
    try:
        lines = dump(Connection("127.0.0.1", args.port, 60))
    except (OSError, RuntimeError) as e:
        print("resp_dump.py: port %d: %s" % (args.port, e), file=sys.stderr)
        return 1
    text = "".join(line + "\n" for line in lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print("resp_dump.py: port %d: %d keys" % (args.port, len(lines)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
