// DataLoader: the llm.c no-shuffle layout (hand-checked indices), epoch wrap,
// the held-out split, shuffle as a per-epoch permutation, bit-exact resume
// through SaveState/RestoreState, and the configuration errors.
#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/data_loader.h"

namespace tierflow {
namespace {

using V = std::vector<int32_t>;

// Token i has id i, so a batch shows which positions it read.
TokenSource Positions(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  auto s = TokenSource::FromTokens(std::move(ids), "positions", n);
  EXPECT_TRUE(s.ok());
  return *s;
}

DataLoader Make(int n, DataLoaderOptions o) {
  auto d = DataLoader::Create(Positions(n), o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

DataLoaderOptions NoShuffle(int b, int t, double eval_fraction = 0.0) {
  DataLoaderOptions o;
  o.batch = b;
  o.seq_len = t;
  o.shuffle = false;
  o.eval_fraction = eval_fraction;
  return o;
}

TEST(DataLoader, NoShuffleFollowsTheLlmcConvention) {
  // B=2, T=4: micro-batch k takes the 9 tokens starting at 8k.
  DataLoader d = Make(50, NoShuffle(2, 4));
  TokenBatch b;
  d.Next(&b);  // k = 0: tokens 0..8
  EXPECT_EQ(b.batch, 2);
  EXPECT_EQ(b.seq_len, 4);
  EXPECT_EQ(b.inputs, (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.targets, (V{1, 2, 3, 4, 5, 6, 7, 8}));
  d.Next(&b);  // k = 1: tokens 8..16
  EXPECT_EQ(b.inputs, (V{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(b.targets, (V{9, 10, 11, 12, 13, 14, 15, 16}));
  d.Next(&b);  // k = 2: tokens 16..24
  EXPECT_EQ(b.inputs, (V{16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(b.targets, (V{17, 18, 19, 20, 21, 22, 23, 24}));
  EXPECT_EQ(d.position(), (DataPosition{0, 3}));
}

TEST(DataLoader, NoShuffleWrapsToTheStartAndCountsEpochs) {
  // 50 tokens, 8 per micro-batch plus one: floor(49 / 8) = 6 micro-batches,
  // the last taking tokens 40..48; the 7th would need token 56, so it wraps.
  DataLoader d = Make(50, NoShuffle(2, 4));
  EXPECT_EQ(d.batches_per_epoch(), 6);
  TokenBatch b;
  for (int k = 0; k < 6; ++k) {
    d.Next(&b);
    EXPECT_EQ(b.inputs[0], 8 * k);
  }
  EXPECT_EQ(b.targets.back(), 48);
  EXPECT_EQ(d.position(), (DataPosition{1, 0}));
  d.Next(&b);
  EXPECT_EQ(b.inputs, (V{0, 1, 2, 3, 4, 5, 6, 7}));
  // Exactly B*T+1 tokens: one micro-batch per epoch, using every token.
  DataLoader tight = Make(9, NoShuffle(2, 4));
  EXPECT_EQ(tight.batches_per_epoch(), 1);
  tight.Next(&b);
  EXPECT_EQ(b.targets.back(), 8);
}

TEST(DataLoader, HeldOutSplitIsTheTailAndDisjointFromTrain) {
  // 100 tokens, 10% held out: train is tokens 0..89, eval 90..99.
  DataLoader d = Make(100, NoShuffle(2, 4, 0.1));
  EXPECT_EQ(d.num_train_tokens(), 90);
  EXPECT_EQ(d.num_eval_tokens(), 10);
  EXPECT_EQ(d.num_eval_batches(), 1);
  TokenBatch b;
  d.EvalBatch(0, &b);
  EXPECT_EQ(b.inputs, (V{90, 91, 92, 93, 94, 95, 96, 97}));
  EXPECT_EQ(b.targets, (V{91, 92, 93, 94, 95, 96, 97, 98}));
  d.Next(&b);  // train still starts at token 0
  EXPECT_EQ(b.inputs[0], 0);

  // With shuffling, over several epochs, no train batch touches the tail and
  // no eval batch touches the head.
  DataLoaderOptions o;
  o.batch = 3;
  o.seq_len = 5;
  o.seed = 11;
  o.eval_fraction = 0.2;
  DataLoader s = Make(1000, o);
  EXPECT_EQ(s.num_train_tokens(), 800);
  for (int i = 0; i < 4 * s.batches_per_epoch(); ++i) {
    s.Next(&b);
    for (int32_t id : b.inputs) EXPECT_LT(id, 800);
    for (int32_t id : b.targets) EXPECT_LT(id, 800);
  }
  ASSERT_EQ(s.num_eval_batches(), (200 - 1) / 15);
  for (int64_t i = 0; i < s.num_eval_batches(); ++i) {
    s.EvalBatch(i, &b);
    for (int32_t id : b.inputs) EXPECT_GE(id, 800);
    EXPECT_EQ(b.inputs[0], 800 + 15 * i);
  }
  // The minimum held-out size is one micro-batch, even for a tiny fraction.
  DataLoader min_eval = Make(100, NoShuffle(2, 4, 0.001));
  EXPECT_EQ(min_eval.num_eval_tokens(), 9);
  EXPECT_EQ(min_eval.num_eval_batches(), 1);
}

TEST(DataLoader, ShuffleIsAPermutationOfSequencesPerEpoch) {
  DataLoaderOptions o;
  o.batch = 4;
  o.seq_len = 8;
  o.seed = 3;
  o.eval_fraction = 0;
  // S = floor(999 / 8) = 124 sequences, 31 micro-batches of 4.
  DataLoader d = Make(1000, o);
  ASSERT_EQ(d.batches_per_epoch(), 31);
  TokenBatch b;
  std::vector<std::vector<int32_t>> epoch_starts(2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 31; ++i) {
      d.Next(&b);
      for (int r = 0; r < 4; ++r) {
        const int32_t start = b.inputs[r * 8];
        EXPECT_EQ(start % 8, 0);
        for (int c = 0; c < 8; ++c) {  // each row is T+1 consecutive tokens
          EXPECT_EQ(b.inputs[r * 8 + c], start + c);
          EXPECT_EQ(b.targets[r * 8 + c], start + c + 1);
        }
        epoch_starts[epoch].push_back(start);
      }
    }
    std::set<int32_t> unique(epoch_starts[epoch].begin(), epoch_starts[epoch].end());
    EXPECT_EQ(unique.size(), 124u) << "a sequence repeated within epoch " << epoch;
  }
  EXPECT_NE(epoch_starts[0], epoch_starts[1]);  // reshuffled each epoch
  std::vector<int32_t> in_order(124);
  for (int i = 0; i < 124; ++i) in_order[i] = 8 * i;
  EXPECT_NE(epoch_starts[0], in_order);

  // Same seed, same batches; another seed, other batches.
  DataLoader again = Make(1000, o);
  o.seed = 4;
  DataLoader other = Make(1000, o);
  TokenBatch b1, b2, b3;
  DataLoader first = Make(1000, [&] {
    auto p = o;
    p.seed = 3;
    return p;
  }());
  first.Next(&b1);
  again.Next(&b2);
  other.Next(&b3);
  EXPECT_EQ(b1.inputs, b2.inputs);
  EXPECT_NE(b1.inputs, b3.inputs);
}

TEST(DataLoader, ResumeMidEpochReplaysTheSameBatches) {
  DataLoaderOptions o;
  o.batch = 2;
  o.seq_len = 16;
  o.seed = 1234567890123ull;
  o.eval_fraction = 0.05;
  DataLoader straight = Make(2000, o);
  const int64_t per_epoch = straight.batches_per_epoch();
  const int64_t total = per_epoch * 2 + 5;  // crosses two epoch boundaries
  std::vector<TokenBatch> expected(static_cast<size_t>(total));
  for (auto& b : expected) straight.Next(&b);

  for (int64_t stop : {int64_t{0}, int64_t{7}, per_epoch - 1, per_epoch, per_epoch + 3}) {
    DataLoader first = Make(2000, o);
    TokenBatch b;
    for (int64_t i = 0; i < stop; ++i) first.Next(&b);
    // Through text, as a checkpoint stores it.
    const std::string saved = first.SaveState().dump();
    DataLoader resumed = Make(2000, o);
    ASSERT_TRUE(resumed.RestoreState(nlohmann::json::parse(saved)).ok());
    EXPECT_EQ(resumed.position(), first.position());
    for (int64_t i = stop; i < total; ++i) {
      resumed.Next(&b);
      ASSERT_EQ(b.inputs, expected[i].inputs) << "resumed at " << stop << ", batch " << i;
      ASSERT_EQ(b.targets, expected[i].targets);
    }
  }
}

TEST(DataLoader, RestoreRefusesStateFromOtherSettings) {
  DataLoaderOptions o;
  o.batch = 2;
  o.seq_len = 4;
  o.seed = 9;
  DataLoader d = Make(500, o);
  TokenBatch b;
  d.Next(&b);
  const nlohmann::json state = d.SaveState();

  auto expect_mismatch = [&](DataLoaderOptions other, int n, const std::string& what) {
    DataLoader r = Make(n, other);
    Status s = r.RestoreState(state);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_EQ(r.position(), (DataPosition{0, 0}));  // unchanged on error
  };
  auto with = [&](auto change) {
    DataLoaderOptions p = o;
    change(p);
    return p;
  };
  expect_mismatch(with([](auto& p) { p.batch = 3; }), 500, "batch 2");
  expect_mismatch(with([](auto& p) { p.seq_len = 5; }), 500, "seq_len 4");
  expect_mismatch(with([](auto& p) { p.seed = 10; }), 500, "seed 9");
  expect_mismatch(with([](auto& p) { p.shuffle = false; }), 500, "shuffle on");
  expect_mismatch(o, 501, "500 tokens");
  expect_mismatch(with([](auto& p) { p.eval_fraction = 0.2; }), 500, "train split");

  DataLoader r = Make(500, o);
  nlohmann::json broken = state;
  broken.erase("epoch");
  EXPECT_EQ(r.RestoreState(broken).code(), StatusCode::kInvalidArgument);
  broken = state;
  broken["format"] = "something else";
  EXPECT_EQ(r.RestoreState(broken).code(), StatusCode::kInvalidArgument);
  broken["format"] = 5;  // mistyped values are errors, not exceptions
  EXPECT_EQ(r.RestoreState(broken).code(), StatusCode::kInvalidArgument);
  broken = state;
  broken["seed"] = "nine";
  EXPECT_EQ(r.RestoreState(broken).code(), StatusCode::kInvalidArgument);
  broken = state;
  broken["index"] = r.batches_per_epoch();
  EXPECT_EQ(r.RestoreState(broken).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.RestoreState(nlohmann::json::array()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Seek({-1, 0}).code(), StatusCode::kInvalidArgument);
}

TEST(DataLoader, ConfigurationErrorsNameTheDataAndTheFix) {
  auto create = [](int n, DataLoaderOptions o) { return DataLoader::Create(Positions(n), o); };
  auto too_short = create(8, NoShuffle(2, 4));
  ASSERT_FALSE(too_short.ok());
  EXPECT_EQ(too_short.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_short.status().message().find("positions has 8 tokens"), std::string::npos);
  EXPECT_NE(too_short.status().message().find("batch * seq_len + 1 = 9"), std::string::npos)
      << too_short.status().message();

  auto no_room = create(12, NoShuffle(2, 4, 0.05));  // 9 held out leaves 3
  ASSERT_FALSE(no_room.ok());
  EXPECT_NE(no_room.status().message().find("lower the eval fraction"), std::string::npos)
      << no_room.status().message();

  EXPECT_FALSE(create(100, NoShuffle(0, 4)).ok());
  EXPECT_FALSE(create(100, NoShuffle(2, -1)).ok());
  auto bad_fraction = create(100, NoShuffle(2, 4, 1.0));
  ASSERT_FALSE(bad_fraction.ok());
  EXPECT_NE(bad_fraction.status().message().find("eval_fraction"), std::string::npos);
}

}  // namespace
}  // namespace tierflow
