#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Deterministic string keys over the Redis protocol, for the sharding test.

redis-cli --pipe cannot go through twemproxy (it ends with ECHO, which the
proxy refuses by closing the connection), so this speaks RESP itself, in
pipelined batches on one connection.  Each key's value is derived from the
key, so a later read can check it without keeping the values.

  resp_keys.py --port P set   --prefix K --first A --count N --acked FILE
      SET K<i> for i in [A, A+N); appends every key the server acknowledged
      with +OK to FILE and prints "acked <n> refused <m>" (m = error replies,
      e.g. twemproxy's "-ERR Connection refused" for a dead shard).
  resp_keys.py --port P check --keys FILE
      GET every key in FILE; prints "checked <n>" and exits 1 naming the first
      few keys whose value is missing or wrong.
  resp_keys.py --port P count --keys FILE
      prints how many keys of FILE exist on that server (EXISTS).
"""

import argparse
import hashlib
import socket
import sys

BATCH = 200


def value_of(key):
    """The value stored under key: 64 bytes that only this key produces."""
    return ("v:" + hashlib.sha256(key.encode()).hexdigest())[:64]


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Connection:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        """One reply: str for +simple, Exception for -error, int, bytes or None for bulk, a list for an array."""
        line = self._line()
        kind, rest = line[:1], line[1:].decode()
        if kind == b"+":
            return rest
        if kind == b"-":
            return RuntimeError(rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ConnectionError("unexpected reply %r" % line[:80])

    def pipeline(self, commands):
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        return [self.reply() for _ in commands]


def batches(items):
    for i in range(0, len(items), BATCH):
        yield items[i:i + BATCH]


def read_keys(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def cmd_set(conn, args):
    keys = ["%s%d" % (args.prefix, i) for i in range(args.first, args.first + args.count)]
    acked = refused = 0
    with open(args.acked, "a") as out:
        for batch in batches(keys):
            replies = conn.pipeline([("SET", k, value_of(k)) for k in batch])
            for key, reply in zip(batch, replies):
                if reply == "OK":
                    out.write(key + "\n")
                    acked += 1
                else:
                    refused += 1
    print("acked %d refused %d" % (acked, refused))
    return 0


def cmd_check(conn, args):
    keys = read_keys(args.keys)
    bad = []
    for batch in batches(keys):
        for key, reply in zip(batch, conn.pipeline([("GET", k) for k in batch])):
            if not isinstance(reply, bytes) or reply.decode() != value_of(key):
                bad.append("%s=%r" % (key, reply))
    print("checked %d" % len(keys))
    if bad:
        print("%d keys lost or wrong, e.g. %s" % (len(bad), ", ".join(bad[:5])), file=sys.stderr)
        return 1
    return 0


def cmd_count(conn, args):
    found = 0
    for batch in batches(read_keys(args.keys)):
        found += sum(r for r in conn.pipeline([("EXISTS", k) for k in batch]) if isinstance(r, int))
    print(found)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=30.0, help="socket timeout in seconds")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("set")
    p.add_argument("--prefix", required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--acked", required=True)
    for name in ("check", "count"):
        sub.add_parser(name).add_argument("--keys", required=True)
    args = parser.parse_args()
    try:
        conn = Connection(args.host, args.port, args.timeout)
        return {"set": cmd_set, "check": cmd_check, "count": cmd_count}[args.command](conn, args)
    except (OSError, ConnectionError) as e:
        print("resp_keys.py: %s:%d: %s" % (args.host, args.port, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
