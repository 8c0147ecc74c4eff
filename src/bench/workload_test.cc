// SPDX-License-Identifier: Apache-2.0

#include "bench/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "bench/stats.h"

namespace pmtree::bench {
namespace {

TEST(MixTest, ParsesRatiosAndFormatsThemBack) {
  auto m = ParseMix("read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->ratio[0], 0.5);
  EXPECT_DOUBLE_EQ(m->ratio[4], 0.05);
  EXPECT_EQ(m->ToString(), "read=0.5,insert=0.3,update=0.1,remove=0.05,scan=0.05");
}

TEST(MixTest, RejectsUnknownOperationListingValidOnes) {
  auto m = ParseMix("read=0.5,upsert=0.5");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("read, insert, update, remove, scan"), std::string_view::npos);
}

TEST(MixTest, RejectsRatiosThatDoNotSumToOne) {
  EXPECT_FALSE(ParseMix("read=0.5,insert=0.3").ok());
  EXPECT_FALSE(ParseMix("read=1.5").ok());
  EXPECT_FALSE(ParseMix("read=0.5,read=0.5").ok());
  EXPECT_FALSE(ParseMix("read").ok());
  EXPECT_FALSE(ParseMix("").ok());
  EXPECT_TRUE(ParseMix("insert=1").ok());
}

TEST(DistributionTest, UnknownNameListsValidOnes) {
  auto d = ParseDist("pareto");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("uniform, zipfian, selfsimilar, latest, sequential, hotzone"),
            std::string_view::npos);
  EXPECT_EQ(*ParseDist("hotzone"), DistKind::kHotZone);
}

TEST(DistributionTest, ParametersOutsideTheirRangeAreRejected) {
  Distribution d;
  d.kind = DistKind::kZipfian;
  d.theta = 0;
  EXPECT_FALSE(d.Validate().ok());
  d.theta = 0.99;
  EXPECT_TRUE(d.Validate().ok());
  d.kind = DistKind::kSelfSimilar;
  d.h = 0.7;
  EXPECT_FALSE(d.Validate().ok());
  d.kind = DistKind::kHotZone;
  d.hot_fraction = 0;
  EXPECT_FALSE(d.Validate().ok());
}

TEST(KeySizeTest, ParsesIntegerFixedAndVariableForms) {
  uint32_t lo, hi;
  ASSERT_TRUE(ParseKeySize("8", &lo, &hi).ok());
  EXPECT_EQ(lo, 0u);
  ASSERT_TRUE(ParseKeySize("25", &lo, &hi).ok());
  EXPECT_EQ(lo, 25u);
  EXPECT_EQ(hi, 25u);
  ASSERT_TRUE(ParseKeySize("8-64", &lo, &hi).ok());
  EXPECT_EQ(lo, 8u);
  EXPECT_EQ(hi, 64u);
  EXPECT_FALSE(ParseKeySize("4", &lo, &hi).ok());
  EXPECT_FALSE(ParseKeySize("64-8", &lo, &hi).ok());
  EXPECT_FALSE(ParseKeySize("5000", &lo, &hi).ok());
  EXPECT_FALSE(ParseKeySize("x", &lo, &hi).ok());
}

TEST(ZipfianTest, TopRankFrequenciesMatchTheta) {
  for (double theta : {0.5, 0.8, 0.99}) {
    Zipfian z(1000, theta);
    Rng rng(42);
    constexpr int kDraws = 1'000'000;
    std::vector<uint64_t> hits(1000);
    for (int i = 0; i < kDraws; i++) hits[z.Next(rng)]++;
    // Every one of the top ranks within 4 standard deviations of its
    // binomial expectation.
    for (uint64_t r = 0; r < 20; r++) {
      double p = z.Probability(r);
      double sd = std::sqrt(kDraws * p * (1 - p));
      EXPECT_NEAR(static_cast<double>(hits[r]), kDraws * p, 4 * sd) << "theta " << theta << " rank " << r;
    }
    // The slope of log-frequency vs log-rank over the head is -theta.
    double f1 = static_cast<double>(hits[0]), f2 = static_cast<double>(hits[1]);
    EXPECT_NEAR(std::log(f2 / f1) / std::log(2.0), -theta, 0.05) << "theta " << theta;
  }
}

TEST(ZipfianTest, ThetaAboveOneAndHugeRangesWork) {
  Zipfian big(1ull << 40, 0.99);  // O(1) set-up: no zeta over 2^40 terms
  Zipfian steep(1000, 1.5);
  Rng rng(9);
  for (int i = 0; i < 10000; i++) {
    EXPECT_LT(big.Next(rng), 1ull << 40);
    EXPECT_LT(steep.Next(rng), 1000u);
  }
}

TEST(ZipfianTest, SkewGrowsWithTheta) {
  auto top10 = [](double theta) {
    Zipfian z(100000, theta);
    Rng rng(7);
    int top = 0;
    for (int i = 0; i < 200000; i++) top += z.Next(rng) < 10;
    return top;
  };
  EXPECT_LT(top10(0.5), top10(0.8));
  EXPECT_LT(top10(0.8), top10(0.99));
}

TEST(SelfSimilarTest, FractionHOfKeysGetsOneMinusHOfAccesses) {
  Rng rng(3);
  int low = 0;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; i++) low += SelfSimilar(rng, 1000, 0.2) < 200;
  EXPECT_NEAR(static_cast<double>(low) / kDraws, 0.8, 0.02);
}

TEST(LoadKeyTest, LoadKeysAreDistinctEvenAndBelowTwoToThe63) {
  auto keys = SortedLoadKeys(100000);
  EXPECT_TRUE(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
  for (uint64_t k : keys) {
    EXPECT_EQ(k & 1, 0u);
    EXPECT_LT(k, 1ull << 63);
  }
}

Workload MakeWorkload(const char* mix, DistKind kind) {
  Workload w;
  w.mix = *ParseMix(mix);
  w.dist.kind = kind;
  w.seed = 5;
  return w;
}

TEST(StreamTest, SameSeedGivesSameStreams) {
  auto keys = SortedLoadKeys(1000);
  Workload w = MakeWorkload("read=0.5,insert=0.5", DistKind::kZipfian);
  auto a = BuildStreams(w, keys, 2, 500);
  auto b = BuildStreams(w, keys, 2, 500);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < 500; i++) {
      EXPECT_EQ((*a)[t].ops[i].key, (*b)[t].ops[i].key);
      EXPECT_EQ((*a)[t].ops[i].type, (*b)[t].ops[i].type);
    }
}

TEST(StreamTest, MixRatiosAreRespectedAndInsertKeysAreNew) {
  auto keys = SortedLoadKeys(1000);
  std::set<uint64_t> loaded(keys.begin(), keys.end());
  Workload w = MakeWorkload("read=0.6,insert=0.4", DistKind::kUniform);
  auto s = BuildStreams(w, keys, 1, 20000);
  ASSERT_TRUE(s.ok());
  int inserts = 0;
  for (const Op& op : (*s)[0].ops) {
    if (op.type == OpType::kInsert) {
      inserts++;
      EXPECT_FALSE(loaded.count(op.key));
    } else {
      EXPECT_TRUE(loaded.count(op.key));
    }
  }
  EXPECT_NEAR(inserts / 20000.0, 0.4, 0.02);
}

TEST(StreamTest, SequentialInsertsAreMonotonicAboveEveryLoadedKey) {
  auto keys = SortedLoadKeys(1000);
  Workload w = MakeWorkload("insert=1", DistKind::kSequential);
  auto s = BuildStreams(w, keys, 1, 1000);
  ASSERT_TRUE(s.ok());
  uint64_t prev = keys.back();
  for (const Op& op : (*s)[0].ops) {
    EXPECT_GT(op.key, prev);
    prev = op.key;
  }
}

TEST(StreamTest, HotZoneStaysInsideItsZoneAndShiftsMidRun) {
  auto keys = SortedLoadKeys(10000);
  Workload w = MakeWorkload("update=1", DistKind::kHotZone);
  w.dist.hot_fraction = 0.05;
  w.dist.hot_shift_at = 0.5;
  auto s = BuildStreams(w, keys, 1, 4000);
  ASSERT_TRUE(s.ok());
  auto rank = [&](uint64_t k) { return std::lower_bound(keys.begin(), keys.end(), k) - keys.begin(); };
  std::set<long> first, second;
  for (size_t i = 0; i < 4000; i++) (i < 2000 ? first : second).insert(rank((*s)[0].ops[i].key));
  EXPECT_LE(*first.rbegin() - *first.begin(), 500);
  EXPECT_LE(*second.rbegin() - *second.begin(), 500);
  EXPECT_GT(*second.begin(), *first.rbegin());  // moved to another part of the key space
}

TEST(StreamTest, BytesKeysPreserveTheIntegerOrder) {
  auto keys = SortedLoadKeys(2000);
  Workload w = MakeWorkload("read=1", DistKind::kUniform);
  w.key_min = 8;
  w.key_max = 40;
  auto s = BuildStreams(w, keys, 1, 2000);
  ASSERT_TRUE(s.ok());
  const Stream& st = (*s)[0];
  for (size_t i = 1; i < st.ops.size(); i++) {
    auto a = st.BytesKey(st.ops[i - 1]), b = st.BytesKey(st.ops[i]);
    EXPECT_GE(a.size(), 8u);
    EXPECT_LE(b.size(), 40u);
    EXPECT_EQ(st.ops[i - 1].key < st.ops[i].key, a < b);
  }
}

TEST(StatsTest, PercentilesAreNearestRankAndGeomeanIsGeometric) {
  std::vector<double> v;
  for (int i = 1; i <= 1000; i++) v.push_back(i);
  LatencySummary s = Summarize(&v);
  EXPECT_EQ(s.p50, 500);
  EXPECT_EQ(s.p90, 900);
  EXPECT_EQ(s.p99, 990);
  EXPECT_EQ(s.p999, 999);
  EXPECT_EQ(s.p9999, 1000);
  EXPECT_EQ(s.max, 1000);
  std::vector<double> g = {10, 1000};
  EXPECT_NEAR(Summarize(&g).geomean, 100, 1e-9);
  Spread sp = SpreadOf({3, 1, 2});
  EXPECT_EQ(sp.min, 1);
  EXPECT_EQ(sp.median, 2);
  EXPECT_EQ(sp.max, 3);
}

TEST(StatsTest, ClockIsCalibratedNotAssumed) {
  const TickClock& c = TickClock::Get();
  EXPECT_GT(c.ns_per_tick(), 0);
  uint64_t a = TickClock::Now();
  uint64_t b = TickClock::Now();
  EXPECT_GE(b, a);
}

}  // namespace
}  // namespace pmtree::bench
