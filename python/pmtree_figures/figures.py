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


PROFILE_KINDS = ("heatmap", "cdf", "timeline")


def load_profile(row, folder=""):
    """The write profile a row names (pmtree bench --write-profile), or None.

    A relative or moved path is also looked up beside the data (folder)."""
    path = field(row, "write_profile.path")
    if not path:
        return None
    for cand in (path, os.path.join(folder, path), os.path.join(folder, os.path.basename(path))):
        if cand and os.path.exists(cand):
            with open(cand) as f:
                return json.load(f)
    return None


def _draw_profile(ax, fig, kind, rows, folder):
    """The write-profile figures (CDDS thesis, Figures 6.1-6.4); returns drawn."""
    profiles = [(field(r, "label"), p) for r in rows for p in [load_profile(r, folder)] if p]
    if not profiles:
        return False
    if kind == "heatmap":
        # Writes (store calls) per allocated block, in allocation order, laid
        # out row by row: the thesis's heat map of writes per B-tree node.
        label, prof = profiles[0]
        blocks = sorted(prof.get("blocks", []), key=lambda b: (b[2], b[0]))
        if not blocks:
            return False
        cols = max(1, int(math.ceil(math.sqrt(len(blocks)))))
        grid = [[float("nan")] * cols for _ in range((len(blocks) + cols - 1) // cols)]
        for i, b in enumerate(blocks):
            grid[i // cols][i % cols] = b[3]
        im = ax.imshow(grid, cmap="inferno", aspect="auto", interpolation="nearest")
        fig.colorbar(im, ax=ax, label="writes (store calls) per block")
        ax.set_xlabel("%s: %d blocks in allocation order, %d per row" % (label, len(blocks), cols))
        ax.set_ylabel("row")
        return True
    if kind == "cdf":
        # Distribution of writes per touched 4 KiB page, one line per tree.
        for label, prof in profiles:
            w = sorted(p[1] for p in prof.get("pages", []))
            if not w:
                continue
            ax.plot(w, [(i + 1) / len(w) for i in range(len(w))], drawstyle="steps-post",
                    label="%s (max %d, median %d, min %d)" % (label, w[-1], w[len(w) // 2], w[0]))
        ax.set_xscale("symlog")
        ax.set_xlabel("writes (store calls) per page")
        ax.set_ylabel("fraction of pages")
        return True
    # timeline: writes per window of operations, allocations on a second axis.
    label, prof = profiles[0]
    series = prof.get("series", [])
    if not series:
        return False
    w = prof.get("window_ops", 1)
    xs = [w * (i + 1) for i in range(len(series))]
    ax.plot(xs, [s[0] for s in series], label="%s: writes (store calls)" % label)
    ax.plot(xs, [s[1] for s in series], label="%s: flushed lines" % label)
    ax2 = ax.twinx()
    ax2.bar(xs, [s[2] for s in series], width=w * 0.8, color="tab:red", alpha=0.35, label="allocations")
    ax2.set_ylabel("allocations per window")
    ax.set_xlabel("operations (window of %d)" % w)
    return True


def draw_one(spec, rows, out_path, command="", source="", folder=""):
    rows = [r for r in rows if _usable(r)]
    if spec.get("filter"):
        rows = [r for r in rows if str(field(r, spec["filter"])) == str(spec.get("filter_value"))]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    kind = spec.get("kind", "bars")
    drawn = False
    if kind in PROFILE_KINDS:
        drawn = _draw_profile(ax, fig, kind, rows, folder)
        if spec.get("ylabel"):
            ax.set_ylabel(spec["ylabel"])
    elif kind == "series":
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
    if kind not in PROFILE_KINDS:
        ax.set_ylabel(spec.get("ylabel") or spec["y"])
    if spec.get("logy") and drawn:
        ax.set_yscale("log")
    ax.set_title(spec.get("title", ""))
    if drawn:
        if kind != "heatmap":
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
            if not draw_one(spec, rows, os.path.join(folder, spec["file"]), spec.get("command", ""), source, folder):
                problems.append("%s: no data" % spec["file"])
            n += 1
        except Exception as e:  # one bad figure must not hide the others
            problems.append("%s: %s" % (spec["file"], e))
    return n, problems
