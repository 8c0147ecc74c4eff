# SPDX-License-Identifier: Apache-2.0
"""Tests of the server suite's report (scripts/lib/server_report.py).

Feeds it a results file of three rounds, as scripts/bench_server.sh writes
them, and checks the medians, the per-round ratios to redis-always and the
statuses in both the Markdown and the JSON it writes.

    python3 python/tests/test_server_report.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "..", "scripts", "lib", "server_report.py")

# Round 2 ran the rows backward, as the suite does; the machine slowed in
# round 3 (both rows), so only per-round ratios compare like with like.
RESULTS = """\
row\t1\tredis-always\talways\tok\tredis-server 7.0.15
row\t1\tpmtree-lbtree\tpool-flush\tok\tpmtree serve --tree lbtree
rb\t1\tredis-always\tSET\t100\t500000\t1500\t2600
rb\t1\tpmtree-lbtree\tSET\t100\t550000\t1400\t2300
ycsb\t1\tredis-always\ta\t30000\tREAD\t25000\t200\t900\t0
ycsb\t1\tredis-always\ta\t30000\tUPDATE\t25000\t250\t1000\t0
ycsb\t1\tpmtree-lbtree\ta\t33000\tREAD\t25000\t180\t800\t0
ycsb\t1\tpmtree-lbtree\ta\t33000\tUPDATE\t25000\t240\t1200\t1
mem\t1\tredis-always\t1000\t200000\t1000000\t1300000\t1200000\t-
mem\t1\tpmtree-lbtree\t1000\t-\t2000000\t2400000\t600000\t1073741824
rb\t2\tpmtree-lbtree\tSET\t100\t520000\t1450\t2500
rb\t2\tredis-always\tSET\t100\t400000\t1600\t2900
row\t2\tpmtree-lbtree\tpool-flush\tfailed (see stderr)\tpmtree serve --tree lbtree
row\t2\tredis-always\talways\tok\tredis-server 7.0.15
rb\t3\tredis-always\tSET\t100\t300000\t1700\t3100
rb\t3\tpmtree-lbtree\tSET\t100\t270000\t1800\t3000
ycsb\t3\tredis-always\ta\t20000\tREAD\t25000\t300\t950\t0
ycsb\t3\tredis-always\ta\t20000\tUPDATE\t25000\t350\t1100\t0
ycsb\t3\tpmtree-lbtree\ta\t24000\tREAD\t25000\t280\t700\t0
ycsb\t3\tpmtree-lbtree\ta\t24000\tUPDATE\t25000\t300\t1000\t0
row\t3\tredis-always\talways\tok\tredis-server 7.0.15
row\t3\tpmtree-lbtree\tpool-flush\tok\tpmtree serve --tree lbtree
"""


class ServerReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="server_report_test.")
        results = os.path.join(self.dir, "results.tsv")
        with open(results, "w", encoding="utf-8") as f:
            f.write(RESULTS)
        subprocess.run([sys.executable, REPORT, "--results", results, "--out", self.dir,
                        "--machine", "test machine", "--command", "bench_server.sh --rounds 3",
                        "--started", "2026-12-07T00:00:00Z"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(self.dir, "server_suite.md"), encoding="utf-8") as f:
            self.md = f.read()
        with open(os.path.join(self.dir, "server_suite.json"), encoding="utf-8") as f:
            self.json = json.load(f)

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def rb(self, row):
        return next(e for e in self.json["redis_benchmark"] if e["row"] == row)

    def test_numbers_are_medians_over_the_rounds(self):
        pm = self.rb("pmtree-lbtree")
        self.assertEqual(pm["ops_per_s"], 520000)
        self.assertEqual(pm["p50_us"], 1450)
        self.assertEqual(pm["p99_us"], 2500)
        self.assertEqual(self.rb("redis-always")["ops_per_s"], 400000)
        self.assertEqual(self.json["rounds"], 3)

    def test_a_ratio_is_the_median_of_the_rounds_own_ratios(self):
        pm = self.rb("pmtree-lbtree")
        # 1.10, 1.30, 0.90: median 1.10 -- not 520000 / 400000 = 1.30.
        self.assertAlmostEqual(pm["ratio"], 1.1)
        self.assertIn("| 100 B | pmtree-lbtree | pool-flush | 520,000 | 1,450 | 2,500 | 1.10x (1.10, 1.30, 0.90) |",
                      self.md)
        self.assertIn("| 100 B | redis-always | always | 400,000 | 1,600 | 2,900 | 1.00x (1.00, 1.00, 1.00) |",
                      self.md)

    def test_ycsb_takes_medians_of_the_rounds_that_ran_it(self):
        e = next(e for e in self.json["ycsb"] if e["row"] == "pmtree-lbtree")
        # Two rounds: the lower middle, a value one round measured.
        self.assertEqual(e["ops_per_s"], 24000)
        self.assertEqual(e["ops"]["UPDATE"]["p99_us"], 1000)
        self.assertEqual(e["ops"]["UPDATE"]["not_ok"], 1)
        self.assertEqual(sorted(e["ratio_by_round"]), ["1", "3"])
        self.assertIn("| pmtree-lbtree | pool-flush | 24,000 | 180 | 700 | 240 | 1,000 | 1 | 1.10x (1.10, 1.20) |",
                      self.md)

    def test_a_row_that_failed_in_one_round_says_which(self):
        row = next(r for r in self.json["rows"] if r["row"] == "pmtree-lbtree")
        self.assertEqual(row["status"], "round 1: ok; round 2: failed (see stderr); round 3: ok")
        redis = next(r for r in self.json["rows"] if r["row"] == "redis-always")
        self.assertEqual(redis["status"], "ok")

    def test_memory_of_the_one_round_that_measured_it(self):
        m = next(m for m in self.json["memory"] if m["row"] == "pmtree-lbtree")
        self.assertEqual(m["rss_anon_after"], 600000)
        self.assertIsNone(m["used_memory"])
        self.assertIn("Every number is the median of 3 rounds", self.md)


if __name__ == "__main__":
    unittest.main(verbosity=2)
