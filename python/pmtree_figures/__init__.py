# SPDX-License-Identifier: Apache-2.0
"""Figures from `pmtree bench` output.

Reads only what the benchmark wrote (JSON lines or CSV) and never runs a
benchmark.  Two entry points:

  python -m pmtree_figures DIR
      draws every figure listed in DIR/figures.json (written by
      `pmtree bench --suite ...`) from the suite's JSONL data into DIR.

  python -m pmtree_figures --data FILE --x FIELD --y FIELD [--group FIELD] --out PNG
      one figure from any `pmtree bench --json` (or --csv) output.

Every figure carries, below the plot, the command that produced its data.
Needs matplotlib (Debian: python3-matplotlib, importable by /usr/bin/python3).
"""

from .figures import draw_manifest, draw_one, load_rows  # noqa: F401
