# SPDX-License-Identifier: Apache-2.0
"""Command line: see the package docstring."""

import argparse
import os
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m pmtree_figures", description=__doc__)
    p.add_argument("dir", nargs="?", help="suite report folder holding figures.json")
    p.add_argument("--data", help="a JSON-lines or CSV file from pmtree bench")
    p.add_argument("--x", default="tree")
    p.add_argument("--y", default="throughput_ops_s")
    p.add_argument("--group", default="label")
    p.add_argument("--kind", default="bars", choices=["bars", "lines", "series", "heatmap", "cdf", "timeline"],
                   help="heatmap/cdf/timeline draw the write profiles the rows name (bench --write-profile)")
    p.add_argument("--title", default="")
    p.add_argument("--out", default="figure.png")
    args = p.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("pmtree_figures: matplotlib is not importable by %s; install python3-matplotlib "
              "(Debian's is importable by /usr/bin/python3) or set PMTREE_PYTHON" % sys.executable,
              file=sys.stderr)
        return 2
    from . import figures
    if args.dir:
        n, problems = figures.draw_manifest(args.dir)
        for msg in problems:
            print("pmtree_figures: " + msg, file=sys.stderr)
        print("pmtree_figures: drew %d figure(s) in %s" % (n, args.dir), file=sys.stderr)
        return 0
    if not args.data:
        p.error("give a report folder or --data FILE")
    rows = figures.load_rows(args.data)
    profile_titles = {"heatmap": "writes per allocated block", "cdf": "writes per page, distribution",
                      "timeline": "writes and allocations over operations"}
    if args.kind in profile_titles:
        spec = {"kind": args.kind, "title": args.title or profile_titles[args.kind], "file": args.out}
    else:
        spec = {"kind": args.kind, "x": args.x, "y": args.y, "group": args.group,
                "title": args.title or "%s by %s" % (args.y, args.x), "file": args.out, "ylabel": args.y}
    command = next((r["command"] for r in rows if r.get("command")), "(not recorded in %s)" % args.data)
    figures.draw_one(spec, rows, args.out, command=command, source=args.data,
                     folder=os.path.dirname(os.path.abspath(args.data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
