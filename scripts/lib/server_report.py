# SPDX-License-Identifier: Apache-2.0
"""Turns the server suite's raw results (scripts/bench_server.sh) into
server_suite.md and server_suite.json, each table beside the seeds' claims.

Input: a tab-separated file, one record per line, first the kind, then the
round (1..N) it was measured in:
  row   ROUND ROW DURABILITY STATUS SERVER
  rb    ROUND ROW TEST SIZE OPS_PER_S P50_US P99_US          (redis-benchmark)
  ycsb  ROUND ROW WORKLOAD OPS_PER_S OP COUNT P50_US P99_US NOT_OK
  mem   ROUND ROW KEYS USED_MEMORY RSS_BEFORE RSS_AFTER ANON_AFTER POOL_BYTES  ("-" = none)

Every number in the tables is the median over the rounds that measured it
(the lower middle value for an even count, so it is a value some round
measured). A ratio to redis-always is the median of the rounds' own ratios
(each from one stretch of time, both rows measured back to back), and the
tables list each round's ratio beside it; the JSON keeps every round's
values.
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
    """Records by kind, each as (round, fields after the round)."""
    out = {"row": [], "rb": [], "ycsb": [], "mem": []}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) > 1 and fields[0] in out:
                out[fields[0]].append((int(fields[1]), fields[2:]))
    return out


def median(values):
    """The lower middle of the values that are not None (None if none)."""
    known = sorted(v for v in values if v is not None)
    return known[(len(known) - 1) // 2] if known else None


def num(text):
    if text in ("", "-"):
        return None
    value = float(text)
    return int(value) if value.is_integer() else value


def fmt(value, digits=0):
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def ratios(per_round, base_per_round):
    """Each round's value / the baseline's in the same round, by round."""
    return {r: v / base_per_round[r] for r, v in sorted(per_round.items())
            if v is not None and base_per_round.get(r)}


def ratio_text(by_round):
    """'1.08x (1.08, 0.75, 0.73)': the median ratio, then each round's."""
    if not by_round:
        return "n/a"
    text = f"{median(by_round.values()):.2f}x"
    if len(by_round) > 1:
        text += " (" + ", ".join(f"{v:.2f}" for v in by_round.values()) + ")"
    return text


def mib(value):
    return "n/a" if value is None else f"{value / 2**20:,.1f} MiB"


def build(raw):
    """Per-round records, then their medians over the rounds."""
    rows = {}
    for rnd, r in raw["row"]:
        row = rows.setdefault(r[0], {"row": r[0], "durability": r[1], "server": r[3],
                                     "status_by_round": {}})
        row["status_by_round"][rnd] = r[2]
    for row in rows.values():
        statuses = set(row["status_by_round"].values())
        row["status"] = statuses.pop() if len(statuses) == 1 else "; ".join(
            f"round {k}: {v}" for k, v in sorted(row["status_by_round"].items()))
    durability = {name: row["durability"] for name, row in rows.items()}

    rb = {}
    for rnd, r in raw["rb"]:
        e = rb.setdefault((r[0], r[1], int(r[2])), {"row": r[0], "durability": durability.get(r[0]),
                                                    "test": r[1], "size": int(r[2]), "rounds": {}})
        e["rounds"][rnd] = {"ops_per_s": num(r[3]), "p50_us": num(r[4]), "p99_us": num(r[5])}
    for e in rb.values():
        base = rb.get((BASELINE, e["test"], e["size"]))
        e["ratio_by_round"] = ratios({k: v["ops_per_s"] for k, v in e["rounds"].items()},
                                     {k: v["ops_per_s"] for k, v in base["rounds"].items()} if base else {})

    ycsb = {}
    for rnd, r in raw["ycsb"]:
        e = ycsb.setdefault((r[0], r[1]), {"row": r[0], "durability": durability.get(r[0]),
                                           "workload": r[1], "rounds": {}})
        per = e["rounds"].setdefault(rnd, {"ops_per_s": num(r[2]), "ops": {}})
        per["ops"][r[3]] = {"count": num(r[4]), "p50_us": num(r[5]), "p99_us": num(r[6]),
                            "not_ok": num(r[7])}
    for e in ycsb.values():
        base = ycsb.get((BASELINE, e["workload"]))
        e["ratio_by_round"] = ratios({k: v["ops_per_s"] for k, v in e["rounds"].items()},
                                     {k: v["ops_per_s"] for k, v in base["rounds"].items()} if base else {})

    mem = {}
    for rnd, r in raw["mem"]:
        keys, rss0, rss1 = int(r[1]), num(r[3]), num(r[4])
        e = mem.setdefault(r[0], {"row": r[0], "durability": durability.get(r[0]), "keys": keys,
                                  "rounds": {}})
        e["rounds"][rnd] = {"used_memory": num(r[2]), "rss_before": rss0, "rss_after": rss1,
                            "rss_anon_after": num(r[5]), "pool_bytes": num(r[6]),
                            "rss_growth_per_key": (rss1 - rss0) / keys if rss1 is not None else None}

    # The medians the tables show, beside the rounds they come from.
    def med(rounds, field):
        return median(v[field] for v in rounds.values())

    for e in rb.values():
        e.update({f: med(e["rounds"], f) for f in ("ops_per_s", "p50_us", "p99_us")})
        e["ratio"] = median(e["ratio_by_round"].values())
    for e in ycsb.values():
        e["ops_per_s"] = med(e["rounds"], "ops_per_s")
        e["ratio"] = median(e["ratio_by_round"].values())
        names = {op for per in e["rounds"].values() for op in per["ops"]}
        e["ops"] = {}
        for op in sorted(names):
            seen = [per["ops"][op] for per in e["rounds"].values() if op in per["ops"]]
            e["ops"][op] = {"count": median(o["count"] for o in seen),
                            "p50_us": median(o["p50_us"] for o in seen),
                            "p99_us": median(o["p99_us"] for o in seen),
                            "not_ok": sum(o["not_ok"] or 0 for o in seen)}
    for e in mem.values():
        e.update({f: med(e["rounds"], f) for f in ("used_memory", "rss_before", "rss_after",
                                                     "rss_anon_after", "pool_bytes",
                                                     "rss_growth_per_key")})
    rounds = max([rnd for kind in raw.values() for rnd, _ in kind] or [0])
    return {"rounds": rounds, "rows": list(rows.values()), "redis_benchmark": list(rb.values()),
            "ycsb": list(ycsb.values()), "memory": list(mem.values()), "claims": CLAIMS}


def markdown(data, meta):
    n = data["rounds"]
    lines = [
        "# Server suite: pmtree serve vs redis-server",
        "",
        f"Run {meta['started']} on {meta['machine']}.  ",
        f"Command: `{meta['command']}`.  ",
        (f"Every number is the median of {n} rounds, the rows alternating within each; a ratio "
         "is the median of the rounds' own ratios to redis-always, each round's in brackets. "
         if n > 1 else "One round: indicative only. ") +
        "Clients and servers share the cores. On tmpfs, fdatasync is almost free, so "
        "`appendfsync always` measures Redis's AOF write path, not device latency.",
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
            for name in order:
                if name in sel:
                    r = sel[name]
                    size_text = f"{size} B" if size else "-"
                    lines.append(f"| {size_text} | {name} | {r['durability']} | "
                                 f"{fmt(r['ops_per_s'])} | {fmt(r['p50_us'])} | "
                                 f"{fmt(r['p99_us'])} | {ratio_text(r['ratio_by_round'])} |")
        lines += ["", f"Seed claim: {CLAIMS[test]}"]

    for w in sorted({r["workload"] for r in data["ycsb"]}):
        per_row = {r["row"]: r for r in data["ycsb"] if r["workload"] == w}
        write = WRITE_OP.get(w, "SCAN")
        read = "SCAN" if w == "e" else "READ"
        lines += ["", f"## YCSB workload {w.upper()} through the binding", "",
                  f"| row | durability | ops/s | {read} p50 (us) | {read} p99 (us) | "
                  f"{write} p50 (us) | {write} p99 (us) | not OK | vs redis-always |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name in order:
            e = per_row.get(name)
            if not e:
                continue
            rd, wr = e["ops"].get(read, {}), e["ops"].get(write, {})
            bad = sum(o["not_ok"] for o in e["ops"].values())
            lines.append(f"| {name} | {e['durability']} | {fmt(e['ops_per_s'])} | "
                         f"{fmt(rd.get('p50_us'))} | {fmt(rd.get('p99_us'))} | "
                         f"{fmt(wr.get('p50_us'))} | {fmt(wr.get('p99_us'))} | {bad} | "
                         f"{ratio_text(e['ratio_by_round'])} |")
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
