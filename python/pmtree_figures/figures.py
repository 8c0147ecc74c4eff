# SPDX-License-Identifier: Apache-2.0
"""Drawing: one function per figure kind, all fed by benchmark rows."""

import csv
import json
import math
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_rows(path):
    """Rows of a JSON-lines or CSV file as dicts (CSV values stay strings)."""
    rows = []
    with open(path) as f:
        if path.endswith(".csv"):
            for r in csv.DictReader(f):
                rows.append(r)
        else:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


def field(row, path):
    """A dotted path ("latency_ns.p99"), or "label" = tree[/variant]."""
    if path == "label":
        v = row.get("variant") or ""
        return row.get("tree", "?") + ("/" + v if v else "")
    cur = row
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _num(v):
    try:
        f = float(v)
        return f if math.isfinite(f) else None
    except (TypeError, ValueError):
        return None


def _usable(row):
    return not row.get("error") and row.get("rep") != "summary"


def _caption(fig, command, source):
    text = "data: %s\ncommand: %s" % (source, command)
    fig.text(0.01, 0.01, "\n".join(textwrap.wrap(text, 150, replace_whitespace=False)), fontsize=6,
             va="bottom", ha="left", family="monospace")


def _sort_key(v):
    n = _num(v)
    return (0, n, "") if n is not None else (1, 0, str(v))


def draw_one(spec, rows, out_path, command="", source=""):
    rows = [r for r in rows if _usable(r)]
    if spec.get("filter"):
        rows = [r for r in rows if str(field(r, spec["filter"])) == str(spec.get("filter_value"))]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    kind = spec.get("kind", "bars")
    drawn = False
    if kind == "series":
        for r in rows:
            s = r.get("series_ops_s") or []
            w = (r.get("window_ms") or 100) / 1000.0
            if s:
                ax.plot([w * (i + 1) for i in range(len(s))], s, label=field(r, spec.get("group", "label")))
                drawn = True
        ax.set_xlabel("time (s)")
    else:
        groups, xs = {}, []
        for r in rows:
            x, y = field(r, spec["x"]), _num(field(r, spec["y"]))
            if x is None or y is None:
                continue
            g = str(field(r, spec.get("group", "label")))
            groups.setdefault(g, {})[x] = y  # the last row for (group, x) wins
            if x not in xs:
                xs.append(x)
        xs.sort(key=_sort_key)
        if kind == "lines":
            numeric = all(_num(x) is not None for x in xs)
            for g, pts in sorted(groups.items()):
                px = [x for x in xs if x in pts]
                ax.plot([_num(x) if numeric else xs.index(x) for x in px], [pts[x] for x in px], marker="o", label=g)
                drawn = True
            if not numeric:
                ax.set_xticks(range(len(xs)))
                ax.set_xticklabels([str(x) for x in xs], rotation=20, fontsize=8)
        else:
            names = sorted(groups)
            width = 0.8 / max(1, len(names))
            for i, g in enumerate(names):
                pos = [j + i * width for j, x in enumerate(xs) if x in groups[g]]
                ax.bar(pos, [groups[g][x] for x in xs if x in groups[g]], width, label=g)
                drawn = True
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(xs))])
            ax.set_xticklabels([str(x) for x in xs], rotation=20, fontsize=8)
        ax.set_xlabel(spec["x"])
    ax.set_ylabel(spec.get("ylabel") or spec["y"])
    if spec.get("logy") and drawn:
        ax.set_yscale("log")
    ax.set_title(spec.get("title", ""))
    if drawn:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no data (trees missing or runs failed)", ha="center", va="center", transform=ax.transAxes)
    ax.grid(True, alpha=0.3)
    fig.subplots_adjust(bottom=0.22)
    _caption(fig, command, source)
    # The caption is pixels; the same text goes into the PNG's text chunks so
    # tools (and the tests) can read which command produced the figure.
    fig.savefig(out_path, dpi=110, metadata={"Description": "command: %s" % command, "Source": source or "-"})
    plt.close(fig)
    return drawn


def draw_manifest(folder):
    """Draws every figure of folder/figures.json; returns (count, problems)."""
    with open(os.path.join(folder, "figures.json")) as f:
        specs = json.load(f)
    cache, problems, n = {}, [], 0
    for spec in specs:
        data = os.path.join(folder, spec["data"])
        if data not in cache:
            cache[data] = load_rows(data) if os.path.exists(data) else []
        rows = [r for r in cache[data] if r.get("experiment") == spec["experiment"]]
        source = "%s, experiment %s" % (spec["data"], spec["experiment"])
        try:
            if not draw_one(spec, rows, os.path.join(folder, spec["file"]), spec.get("command", ""), source):
                problems.append("%s: no data" % spec["file"])
            n += 1
        except Exception as e:  # one bad figure must not hide the others
            problems.append("%s: %s" % (spec["file"], e))
    return n, problems
