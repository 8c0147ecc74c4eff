# SPDX-License-Identifier: Apache-2.0
"""Tests of pmtree_figures over real `pmtree bench` output.

Runs a short `pmtree bench` (JSON lines and CSV), then draws every figure
kind from it, both through a suite-style figures.json manifest and through
the single-figure command line, and checks that each PNG is written and
names the command that produced its data (the caption is drawn as pixels;
the same text is stored in the PNG's text chunks, which is what is checked).

    /usr/bin/python3 python/tests/test_figures.py --pmtree build/pmtree

Exits 77 (ctest: skipped) with a message when matplotlib is not importable
by this interpreter or the pmtree binary is not given.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # python/, which holds pmtree_figures
PMTREE = None


def png_text(path):
    """The text chunks (tEXt, zTXt, iTXt) of a PNG file as a dict."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError("%s is not a PNG" % path)
    out, pos = {}, 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _translated, _, text = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode("utf-8")
        elif kind == b"IEND":
            break
    return out


def run_bench(out_path, fmt, tmp):
    """A short real benchmark: a volatile and a persistent tree, two thread counts."""
    cmd = [PMTREE, "bench", "--tree", "volatile,fastfair", "--records", "2000", "--ops", "100000",
           "--duration", "0.05", "--window-ms", "10", "--threads", "1,2", "--mix", "read=0.5,insert=0.5",
           "--pool", os.path.join("/dev/shm", "pmtree-figures-test-%d-%s.pool" % (os.getpid(), fmt)),
           "--pool-size", "64M", "--no-progress", "--" + fmt, "--output", out_path]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp, timeout=120)
    if r.returncode != 0:
        raise AssertionError("pmtree bench failed (%d): %s" % (r.returncode, r.stderr.decode()[-2000:]))


def figures_cli(args, tmp):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pmtree_figures"] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=tmp, env=env, timeout=120)


class FiguresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pmtree-figures-test-")
        cls.jsonl = os.path.join(cls.tmp, "rows.jsonl")
        cls.csv = os.path.join(cls.tmp, "rows.csv")
        run_bench(cls.jsonl, "json", cls.tmp)
        run_bench(cls.csv, "csv", cls.tmp)
        with open(cls.jsonl) as f:
            cls.rows = [json.loads(line) for line in f if line.strip()]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_names_command(self, png, command):
        self.assertTrue(os.path.getsize(png) > 0, png)
        text = png_text(png)
        self.assertIn("Description", text, "%s carries no command text" % png)
        self.assertIn(command, text["Description"], png)

    def test_bench_rows_carry_what_the_figures_read(self):
        self.assertEqual(len(self.rows), 4)  # 2 trees x 2 thread counts
        for r in self.rows:
            self.assertNotIn("error", r)
            self.assertIn("pmtree bench", r["command"])
            self.assertTrue(r["series_ops_s"], "no throughput series")
        persistent = [r for r in self.rows if r["tree"] == "fastfair"]
        self.assertTrue(persistent and persistent[0]["per_op"]["flushes"] is not None)
        self.assertIn("insert", persistent[0]["per_op_no_alloc"])

    def test_manifest_draws_every_figure_kind_naming_the_command(self):
        folder = os.path.join(self.tmp, "suite")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "demo.jsonl"), "w") as f:
            for r in self.rows:
                f.write(json.dumps(dict(r, experiment="demo")) + "\n")
        command = self.rows[0]["command"]
        base = {"data": "demo.jsonl", "experiment": "demo", "command": command, "group": "tree"}
        specs = [
            dict(base, file="bars.png", kind="bars", x="tree", y="throughput_ops_s", title="bars"),
            dict(base, file="lines.png", kind="lines", x="threads", y="latency_ns.p99", title="lines"),
            dict(base, file="flushes.png", kind="bars", x="tree", y="per_op_no_alloc.insert.lines",
                 title="split-free lines", filter="threads", filter_value="1", logy=True),
            dict(base, file="series.png", kind="series", x="", y="series_ops_s", group="label", title="series"),
        ]
        with open(os.path.join(folder, "figures.json"), "w") as f:
            json.dump(specs, f)
        r = figures_cli([folder], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertNotIn(b"no data", r.stderr)
        for spec in specs:
            self.assert_names_command(os.path.join(folder, spec["file"]), command)

    def test_write_profile_figures_from_a_profiled_run(self):
        prefix = os.path.join(self.tmp, "wp")
        rows_path = os.path.join(self.tmp, "profiled.jsonl")
        cmd = [PMTREE, "bench", "--tree", "cdds,fastfair", "--records", "0", "--ops", "1000", "--mix", "insert=1",
               "--dist", "uniform", "--write-profile", prefix, "--profile-window", "20",
               "--pool", os.path.join("/dev/shm", "pmtree-figures-test-%d-wp.pool" % os.getpid()),
               "--pool-size", "64M", "--no-progress", "--json", "--output", rows_path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.tmp, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode()[-2000:])
        with open(rows_path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        self.assertEqual(len(rows), 2)
        for row in rows:
            wp = row["write_profile"]
            self.assertTrue(os.path.exists(wp["path"]), wp["path"])
            self.assertGreater(wp["blocks"], 1)
            self.assertGreaterEqual(wp["page_max"], wp["page_median"])
            with open(wp["path"]) as f:
                prof = json.load(f)
            self.assertEqual(prof["ops"], 1000)
            self.assertEqual(len(prof["series"]), 1000 // 20)
            self.assertEqual(sum(p[1] for p in prof["pages"]), prof["totals"]["stores"])
        for kind in ("heatmap", "cdf", "timeline"):
            out = os.path.join(self.tmp, "wp-%s.png" % kind)
            r = figures_cli(["--data", rows_path, "--kind", kind, "--out", out], self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            self.assert_names_command(out, "--write-profile")

    def test_single_figure_from_json_lines_names_the_command(self):
        out = os.path.join(self.tmp, "one-json.png")
        r = figures_cli(["--data", self.jsonl, "--x", "tree", "--y", "per_op.flushes", "--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assert_names_command(out, self.rows[0]["command"])

    def test_single_figure_from_csv_names_the_command(self):
        out = os.path.join(self.tmp, "one-csv.png")
        r = figures_cli(["--data", self.csv, "--x", "threads", "--y", "throughput_ops_s", "--kind", "lines",
                         "--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assert_names_command(out, "pmtree bench")
        self.assert_names_command(out, "--csv")


def main():
    global PMTREE
    p = argparse.ArgumentParser()
    p.add_argument("--pmtree", default=os.environ.get("PMTREE_CLI"))
    args, rest = p.parse_known_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIPPED: matplotlib is not importable by %s (Debian: apt-get install python3-matplotlib, "
              "importable by /usr/bin/python3 only)" % sys.executable)
        return SKIP
    if not args.pmtree or not os.access(args.pmtree, os.X_OK):
        print("SKIPPED: no pmtree binary (give --pmtree PATH or set PMTREE_CLI)")
        return SKIP
    PMTREE = os.path.abspath(args.pmtree)
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
