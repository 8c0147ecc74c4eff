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
import socket
import sys

BATCH = 500


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError("error reply: " + rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("bad reply line %r" % line)

    def pipeline(self, commands):
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        return [self.reply() for _ in commands]


def dump(conn):
    keys, cursor = [], b"0"
    while True:
        cursor, batch = conn.pipeline([("SCAN", cursor, "COUNT", "1000")])[0]
        keys.extend(batch)
        if cursor == b"0":
            break
    keys = sorted(set(keys))
    lines = []
    for i in range(0, len(keys), BATCH):
        chunk = keys[i:i + BATCH]
        types = conn.pipeline([("TYPE", k) for k in chunk])
        reads = []
        for k, t in zip(chunk, types):
            if t == b"string":
                reads.append(("GET", k))
            elif t == b"hash":
                reads.append(("HGETALL", k))
            elif t == b"zset":
                reads.append(("ZRANGEBYSCORE", k, "-inf", "+inf", "WITHSCORES"))
            else:
                raise RuntimeError("key %r has type %r (not string, hash or zset)" % (k, t))
        for k, t, v in zip(chunk, types, conn.pipeline(reads)):
            if t == b"hash":
                v = sorted(zip(v[0::2], v[1::2]))
            elif t == b"zset":
                v = [(m, float(s)) for m, s in zip(v[0::2], v[1::2])]
            lines.append("%s %r %r" % (t.decode(), k, v))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", help="write the dump here (default stdout)")
    args = ap.parse_args()
    try:
        lines = dump(Conn(args.port))
    except (OSError, EOFError, RuntimeError) as e:
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
