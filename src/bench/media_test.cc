// SPDX-License-Identifier: Apache-2.0
//
// Media profiles (media.h) and the suites' use of them: names, validation,
// that a profile's latency reaches the pool of a real run, and the suites'
// media choice, counting pass and pool sizes.

#include "bench/media.h"

#include <gtest/gtest.h>

#include <vector>

#include "bench/driver.h"
#include "bench/suites.h"

namespace pmtree::bench {
namespace {

TEST(MediaTest, ProfilesCarryTheirPapersLatencies) {
  ASSERT_NE(FindMedia("dram"), nullptr);
  EXPECT_EQ(FindMedia("dram")->write_latency_ns, 0u);
  EXPECT_EQ(FindMedia("pcm-300")->write_latency_ns, 300u);
  EXPECT_EQ(FindMedia("pcm-600")->write_latency_ns, 600u);
  EXPECT_EQ(FindMedia("optane")->write_latency_ns, 160u);
  EXPECT_EQ(FindMedia("xpoint"), nullptr);
  EXPECT_EQ(MediaNames(), "dram, pcm-300, pcm-600, optane");
  for (const MediaProfile& p : MediaProfiles()) {
    EXPECT_NE(std::string(p.source), "") << p.name;
    // Every emulated medium says what the emulation leaves out.
    if (p.write_latency_ns) {
      EXPECT_NE(std::string(p.not_captured), "") << p.name;
    }
  }
}

TEST(MediaTest, UnknownProfileIsRejectedListingValidOnes) {
  Status s = ValidateMedia("xpoint");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dram, pcm-300, pcm-600, optane"), std::string_view::npos) << s.message();
  BenchConfig c;
  c.targets = {"volatile"};
  c.media = "xpoint";
  EXPECT_FALSE(c.Validate().ok());
}

TEST(MediaTest, ProfileAndAnotherLatencyTogetherAreRejected) {
  BenchConfig c;
  c.targets = {"volatile"};
  c.media = "optane";
  c.write_latency_ns = 50;
  Status s = c.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("optane"), std::string_view::npos) << s.message();
  c.write_latency_ns = 160;
  EXPECT_TRUE(c.Validate().ok());
}

// The profile's latency reaches the pool of a real run (the pool describes
// its per-line latency), and the emulated media time follows from the
// counted flushed lines, not from a clock.
TEST(MediaTest, ProfileReachesThePoolAndChargesEveryFlushedLine) {
  BenchConfig c = SuiteContext::OnMedia(BenchConfig(), "optane");
  c.targets = {"fastfair"};
  c.records = 200;
  c.ops = 300;
  c.pool_size = 16ull << 20;
  c.progress = false;
  c.workload.mix = *ParseMix("insert=1");
  std::vector<Measurement> rows;
  ASSERT_TRUE(RunBench(c, [&](const Measurement& m) { rows.push_back(m); }).ok());
  ASSERT_EQ(rows.size(), 1u);
  const Measurement& m = rows[0];
  ASSERT_TRUE(m.error.empty()) << m.error;
  EXPECT_EQ(m.media, "optane");
  EXPECT_EQ(m.write_latency_ns, 160u);
  EXPECT_NE(m.pool.find("+160ns/line"), std::string::npos) << m.pool;
  ASSERT_TRUE(m.counted);
  EXPECT_GE(m.lines, 1.0);  // every insert persists at least one line
  EXPECT_DOUBLE_EQ(EmulatedMediaNs(*FindMedia("optane"), m.lines), 160 * m.lines);
  // Without a profile the row names its latency instead.
  BenchConfig d;
  d.write_latency_ns = 180;
  EXPECT_EQ(MediaLabel(d), "+180ns/line");
  EXPECT_EQ(MediaLabel(BenchConfig()), "dram");
}

TEST(SuiteMediaTest, SuitesRunThePapersMediumAndDramUnlessTheUserChoseOne) {
  SuiteOptions o;
  SuiteContext ctx(o, "lbtree", "", nullptr);
  EXPECT_EQ(ctx.Media("optane"), (std::vector<std::string>{"optane", "dram"}));
  EXPECT_EQ(ctx.Media("dram"), (std::vector<std::string>{"dram"}));
  SuiteOptions chosen;
  chosen.base = SuiteContext::OnMedia(chosen.base, "pcm-300");
  SuiteContext user(chosen, "lbtree", "", nullptr);
  EXPECT_EQ(user.Media("optane"), (std::vector<std::string>{""}));
  EXPECT_EQ(SuiteContext::OnMedia(BenchConfig(), "").write_latency_ns, 0u);
}

TEST(SuiteMediaTest, CountingPassCountsEveryTargetAndMeasuresNothing) {
  SuiteOptions o;
  SuiteProgress progress;
  progress.counting = true;
  SuiteContext ctx(o, "overview", "", nullptr, &progress);
  BenchConfig c;
  c.targets = {"volatile", "fastfair", "lmdb"};
  EXPECT_TRUE(ctx.Run("x", c).empty());
  EXPECT_TRUE(ctx.rows().empty());
  EXPECT_EQ(progress.total, 3u);
  EXPECT_EQ(progress.done, 0u);
  EXPECT_TRUE(ctx.counting());
}

TEST(SuiteMediaTest, SuitePoolsAreSizedByTheirKeysUpToTheUsersPoolSize) {
  BenchConfig c;
  c.records = 100000;
  c.ops = 100000;
  const uint64_t small = SuitePoolSize(c);
  EXPECT_EQ(small % 4096, 0u);
  EXPECT_GE(small, 200000u * 512);
  EXPECT_LT(small, uint64_t{1} << 30);
  c.value_size = 2048;
  EXPECT_GE(SuitePoolSize(c), 200000u * 4096);
  c.records = 10000000;
  EXPECT_GT(SuitePoolSize(c), kDefaultPoolSize);  // Run caps it at the user's --pool-size
}

}  // namespace
}  // namespace pmtree::bench
