# SPDX-License-Identifier: Apache-2.0
"""Turns the server suite's raw results (scripts/bench_server.sh) into
server_suite.md and server_suite.json, each table beside the seeds' claims.

Input: a tab-separated file, one record per line, first field the kind:
  row   ROW DURABILITY STATUS SERVER
  rb    ROW TEST SIZE OPS_PER_S P50_US P99_US          (redis-benchmark)
  ycsb  ROW WORKLOAD OPS_PER_S OP COUNT P50_US P99_US NOT_OK
  mem   ROW KEYS USED_MEMORY RSS_BEFORE RSS_AFTER ANON_AFTER POOL_BYTES  ("-" = none)
"""

import argparse
import json
import os
import sys

BASELINE = "redis-always"

# The seeds' words, with the section and figure they come from
# (/work/shared/seeds; see docs/server_bench.md).
CLAIMS = {
    "SET": ("Tembo (Venkataraman, CDDS thesis, Sec. 5.5, Fig. 5.5): \"as the value size is "
            "increased, Tembo performs up to 30% better than Redis integrated with the STX "
            "B-Tree\"; slower than hashtable Redis at 256 B, \"almost equivalent for 1 KB values "
            "and is 15% faster for 4 KB values\" (1M inserts per client, Redis AOF on tmpfs)."),
    "GET": "No seed claim for reads alone (the Tembo comparison is inserts).",
    "INCR": ("No seed claim. A read-modify-write of one key: each reply waits for its own write's "
             "persist, so it shows the durability path without value copies."),
    "a": ("NV-Tree paper (Yang et al.), Sec. 6.6, Fig. 9c: NV-Store \"can improve the throughput "
          "by up to 7.3X over Redis\" on SessionStore (YCSB A; Redis 2.8.13, AOF on an NVDIMM "
          "RAMDisk). Circ-Tree paper, Sec. 6.6, Figs. 10-11: YCSB A p99 latencies of KV stores "
          "on four trees, relative only: insertion p99 \"29.3% and 25.4% shorter\" than NV-tree "
          "and FAST+FAIR (2 KB nodes, two threads), 23.7% and 47.4% (4 KB nodes, eight threads); "
          "search/update p99 \"comparable\"; no absolute numbers in the text, no Redis row."),
    "d": ("NV-Tree paper, Sec. 6.6, Fig. 9b: \"NV-Store improve the throughput by up to 4.7X "
          "over both volatile and consistent Redis\" on StatusUpdate (YCSB D)."),
}

WRITE_OP = {"a": "UPDATE", "b": "UPDATE", "d": "INSERT", "e": "INSERT",
            "f": "READ-MODIFY-WRITE"}


def load(path):
    out = {"row": [], "rb": [], "ycsb": [], "mem": []}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields and fields[0] in out:
                out[fields[0]].append(fields[1:])
    return out


def num(text):
    if text in ("", "-"):
        return None
    value = float(text)
    return int(value) if value.is_integer() else value


def fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def ratio(value, base):
    if value is None or not base:
        return "n/a"
    return f"{value / base:.2f}x"


def mib(value):
    return "n/a" if value is None else f"{value / 2**20:,.1f} MiB"


def build(raw):
    rows = [{"row": r[0], "durability": r[1], "status": r[2], "server": r[3]}
            for r in raw["row"]]
    durability = {r["row"]: r["durability"] for r in rows}
    rb = [{"row": r[0], "durability": durability.get(r[0]), "test": r[1], "size": int(r[2]),
           "ops_per_s": num(r[3]), "p50_us": num(r[4]), "p99_us": num(r[5])} for r in raw["rb"]]
    ycsb = [{"row": r[0], "durability": durability.get(r[0]), "workload": r[1],
             "ops_per_s": num(r[2]), "op": r[3], "count": num(r[4]), "p50_us": num(r[5]),
             "p99_us": num(r[6]), "not_ok": num(r[7])} for r in raw["ycsb"]]
    mem = []
    for r in raw["mem"]:
        keys, used, rss0, rss1 = int(r[1]), num(r[2]), num(r[3]), num(r[4])
        anon, pool = num(r[5]), num(r[6])
        mem.append({"row": r[0], "durability": durability.get(r[0]), "keys": keys,
                    "used_memory": used, "rss_before": rss0, "rss_after": rss1,
                    "rss_anon_after": anon, "pool_bytes": pool,
                    "rss_growth_per_key": (rss1 - rss0) / keys if rss1 is not None else None})
    return {"rows": rows, "redis_benchmark": rb, "ycsb": ycsb, "memory": mem, "claims": CLAIMS}


def markdown(data, meta):
    lines = [
        "# Server suite: pmtree serve vs redis-server",
        "",
        f"Run {meta['started']} on {meta['machine']}.  ",
        f"Command: `{meta['command']}`.  ",
        "Indicative only: one run on a shared machine; clients and servers share the cores. "
        "On tmpfs, fdatasync is almost free, so `appendfsync always` measures Redis's AOF "
        "write path, not device latency.",
        "",
        "## Rows",
        "",
        "| row | durability | status | server |",
        "|---|---|---|---|",
    ]
    for r in data["rows"]:
        lines.append(f"| {r['row']} | {r['durability']} | {r['status']} | {r['server']} |")
    order = [r["row"] for r in data["rows"]]

    for test in sorted({r["test"] for r in data["redis_benchmark"]}, key=lambda t: t != "SET"):
        lines += ["", f"## redis-benchmark {test} (-P 16 -c 50 -r 100000)", "",
                  "| value size | row | durability | ops/s | p50 (us) | p99 (us) | vs redis-always |",
                  "|---|---|---|---|---|---|---|"]
        for size in sorted({r["size"] for r in data["redis_benchmark"] if r["test"] == test}):
            sel = {r["row"]: r for r in data["redis_benchmark"]
                   if r["test"] == test and r["size"] == size}
            base = sel.get(BASELINE, {}).get("ops_per_s")
            for name in order:
                if name in sel:
                    r = sel[name]
                    size_text = f"{size} B" if size else "-"
                    lines.append(f"| {size_text} | {name} | {r['durability']} | "
                                 f"{fmt(r['ops_per_s'])} | {fmt(r['p50_us'])} | "
                                 f"{fmt(r['p99_us'])} | {ratio(r['ops_per_s'], base)} |")
        lines += ["", f"Seed claim: {CLAIMS[test]}"]

    for w in sorted({r["workload"] for r in data["ycsb"]}):
        per_row = {}
        for r in data["ycsb"]:
            if r["workload"] == w:
                per_row.setdefault(r["row"], {})[r["op"]] = r
        write = WRITE_OP.get(w, "SCAN")
        read = "SCAN" if w == "e" else "READ"
        base = next(iter(per_row.get(BASELINE, {}).values()), {}).get("ops_per_s")
        lines += ["", f"## YCSB workload {w.upper()} through the binding", "",
                  f"| row | durability | ops/s | {read} p50 (us) | {read} p99 (us) | "
                  f"{write} p50 (us) | {write} p99 (us) | not OK | vs redis-always |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name in order:
            ops = per_row.get(name)
            if not ops:
                continue
            any_op = next(iter(ops.values()))
            rd, wr = ops.get(read, {}), ops.get(write, {})
            bad = sum(o["not_ok"] or 0 for o in ops.values())
            lines.append(f"| {name} | {any_op['durability']} | {fmt(any_op['ops_per_s'])} | "
                         f"{fmt(rd.get('p50_us'))} | {fmt(rd.get('p99_us'))} | "
                         f"{fmt(wr.get('p50_us'))} | {fmt(wr.get('p99_us'))} | {bad} | "
                         f"{ratio(any_op['ops_per_s'], base)} |")
        if w in CLAIMS:
            lines += ["", f"Seed claim: {CLAIMS[w]}"]

    if data["memory"]:
        keys = data["memory"][0]["keys"]
        lines += ["", f"## DRAM after {keys:,} SETs of 100 B values", "",
                  "| row | used_memory | RSS | of which anonymous | RSS growth per key | "
                  "RSS growth per 1M keys | pool file (allocated) |",
                  "|---|---|---|---|---|---|---|"]
        for name in order:
            for m in data["memory"]:
                if m["row"] == name:
                    per_key = m["rss_growth_per_key"]
                    lines.append(f"| {name} | {mib(m['used_memory'])} | {mib(m['rss_after'])} | "
                                 f"{mib(m['rss_anon_after'])} | {fmt(per_key)} B | "
                                 f"{mib(per_key * 1e6 if per_key is not None else None)} | "
                                 f"{mib(m['pool_bytes'])} |")
        lines += ["", "used_memory is Redis's own count of its heap; RSS is the process's "
                  "resident set (VmRSS). pmtree keeps records in the pool file, mapped from "
                  "/dev/shm, so the pool's pages count in its RSS as shared memory; the "
                  "anonymous part (RssAnon: heap, stacks) is the DRAM a server needs beside "
                  "its persistent copy, and the pool file's allocated size is shown beside it."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--started", required=True)
    args = parser.parse_args()
    data = build(load(args.results))
    meta = {"started": args.started, "machine": args.machine, "command": args.command}
    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "server_suite.md")
    json_path = os.path.join(args.out, "server_suite.json")
    text = markdown(data, meta)
    with open(md_path, "w", encoding="utf-8") as f:
        f.write(text)
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({**meta, **data}, f, indent=2)
        f.write("\n")
    sys.stdout.write(text)
    print(f"\nwrote {md_path} and {json_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
