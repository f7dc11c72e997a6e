// Packed samples (MicroBatch::positions): two samples laid end to end in one
// row must train exactly as the same two samples in rows of their own: the
// same loss (the mean over the same targets) and the same gradients, so
// positions restart and attention never crosses from one sample into the
// other. Checked for a Llama-family model with GQA and one with Qwen2's
// biases and a tied head, with and without activation checkpointing. (RoPE
// scores depend only on the distance between positions, so with attention
// kept within samples the restart itself changes only rounding here; the
// kernels' tests check the restarted rotation against the reference.)
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using testing_util::DirectUnitAccess;
using testing_util::InitialFlat;
using testing_util::MakeCpuDevice;

using testing_util::RunForwardBackward;

struct PackingCase {
  ModelConfig config;
  bool checkpoint;
};

class Packing : public ::testing::TestWithParam<PackingCase> {};

TEST_P(Packing, APackedRowTrainsAsItsSamplesInRowsOfTheirOwn) {
  ModelConfig config = GetParam().config;
  config.max_seq_len = 32;                      // RoPE: only a limit
  constexpr int kA = 9, kB = 11, kT = kA + kB;  // input slots of each sample; the packed row
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  TrainShape shape{.batch = 2,
                   .seq_len = kT,
                   .checkpoint_activations = GetParam().checkpoint,
                   .dtype = DType::kF32};
  TransformerInit init;
  init.init_std = 0.3f;  // wide, so every position's loss carries signal
  auto model = TransformerModel::Create(*device, config, shape, init);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  DirectUnitAccess access(*device, *stream, (*model)->Units(), DType::kF32);
  ASSERT_TRUE(access.SetWeights(InitialFlat(**model)).ok());

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size) - 1);
  std::vector<int32_t> a_in(kA), a_tg(kA), b_in(kB), b_tg(kB);
  for (auto* v : {&a_in, &a_tg, &b_in, &b_tg}) {
    for (int32_t& x : *v) x = token(rng);
  }
  a_tg[0] = b_tg[2] = b_tg[3] = -100;  // prompts are masked in real data

  // Packed: one row [A | B], positions restarting at B.
  std::vector<int32_t> in(a_in), tg(a_tg), pos;
  in.insert(in.end(), b_in.begin(), b_in.end());
  tg.insert(tg.end(), b_tg.begin(), b_tg.end());
  for (int j = 0; j < kA; ++j) pos.push_back(j);
  for (int j = 0; j < kB; ++j) pos.push_back(j);
  MicroBatch packed{.inputs = in.data(), .targets = tg.data(), .batch = 1, .seq_len = kT};
  packed.positions = pos.data();
  auto p = RunForwardBackward(**model, access, *stream, packed);
  ASSERT_TRUE(p.ok()) << p.status().ToString();

  // Separate: A padded to B's length (padding ignored), then B.
  std::vector<int32_t> sep_in(2 * kB, 0), sep_tg(2 * kB, -100);
  std::copy(a_in.begin(), a_in.end(), sep_in.begin());
  std::copy(a_tg.begin(), a_tg.end(), sep_tg.begin());
  std::copy(b_in.begin(), b_in.end(), sep_in.begin() + kB);
  std::copy(b_tg.begin(), b_tg.end(), sep_tg.begin() + kB);
  MicroBatch separate{.inputs = sep_in.data(), .targets = sep_tg.data(), .batch = 2, .seq_len = kB};
  auto q = RunForwardBackward(**model, access, *stream, separate);
  ASSERT_TRUE(q.ok()) << q.status().ToString();

  EXPECT_NEAR(p->loss, q->loss, 2e-6 * std::fabs(q->loss));
  ASSERT_EQ(p->grads.size(), q->grads.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < p->grads.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(p->grads[i] - q->grads[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(q->grads[i])));
  }
  EXPECT_LT(worst, 1e-5 * scale) << "largest gradient difference " << worst << " of " << scale;

  // Without its positions the packed row is another computation: B then
  // sees A and sits at positions 9..19.
  packed.positions = nullptr;
  auto plain = RunForwardBackward(**model, access, *stream, packed);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(std::fabs(plain->loss - q->loss), 1e-4 * std::fabs(q->loss));
}

INSTANTIATE_TEST_SUITE_P(Models, Packing,
                         ::testing::Values(PackingCase{testing_util::TinyLlama(), false},
                                           PackingCase{testing_util::TinyLlama(), true},
                                           PackingCase{testing_util::TinyQwenTied(), false}),
                         [](const auto& info) {
                           std::string name = info.param.config.name.substr(5);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name + (info.param.checkpoint ? "_checkpointed" : "");
                         });

TEST(PackingErrors, LearnedPositionsAndPositionsThatDoNotCountUpAreRefused) {
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  std::vector<int32_t> in(8, 1), tg(8, 2), pos = {0, 1, 2, 0, 1, 2, 3, 4};
  MicroBatch mb{.inputs = in.data(), .targets = tg.data(), .batch = 1, .seq_len = 8};
  mb.positions = pos.data();

  const ModelConfig gpt2 = testing_util::TinyGpt2();
  auto g =
      TransformerModel::Create(*device, gpt2, {.batch = 1, .seq_len = 8, .dtype = DType::kF32});
  ASSERT_TRUE(g.ok());
  DirectUnitAccess ga(*device, *stream, (*g)->Units(), DType::kF32);
  Status s = (*g)->ForwardBackward(*stream, mb, 1.0f, ga);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("need a RoPE model"), std::string::npos) << s.message();

  const ModelConfig llama = testing_util::TinyLlama();
  auto l =
      TransformerModel::Create(*device, llama, {.batch = 1, .seq_len = 8, .dtype = DType::kF32});
  ASSERT_TRUE(l.ok());
  DirectUnitAccess la(*device, *stream, (*l)->Units(), DType::kF32);
  pos[5] = 7;
  s = (*l)->ForwardBackward(*stream, mb, 1.0f, la);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("position 7 at row 0, token 5"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tierflow
