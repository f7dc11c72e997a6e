// Which NVMe settings a run uses and why: aio keys override the profile and
// the probe, setting by setting; a tuned profile is used (its block capped at
// the largest sub-group); without one the start-up probe chooses among its
// candidates and leaves nothing behind; bad profiles are refused by file and
// field. Then through RunTraining: every aio key takes effect in the rings
// the tier really builds (observed through the I/O backend), and the choice
// is in the result and the first metrics record.
#include "train/nvme_io_choice.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "offload/io_uring_backend.h"
#include "plan/hardware_profile.h"
#include "tests/common/scratch_dir.h"
#include "train/trainer.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_common::ScratchDir;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

std::string WriteProfile(const ScratchDir& dir, const NvmeStoreProfile& p) {
  const std::string path = dir / "profile.json";
  nlohmann::json j = {{"version", 1}, {"nvme_store", NvmeStoreProfileToJson(p)}};
  std::ofstream(path) << j.dump();
  return path;
}

NvmeStoreProfile Tuned() {
  NvmeStoreProfile p;
  p.io = {16u << 20, 8, 2};
  p.in_flight = 4;
  return p;
}

// `tuned`: the profile's nvme_store as DescribeMachine read it.
NvmeIoChoiceInput Input(const std::string& dir, uint64_t largest = 48u << 20,
                        std::optional<NvmeStoreProfile> tuned = std::nullopt) {
  NvmeIoChoiceInput in;
  in.nvme_paths = {dir};
  in.largest_tensor_bytes = largest;
  in.tuned = tuned;
  return in;
}

TEST(NvmeIoChoice, AioKeysOverrideTheProfileSettingBySetting) {
  ScratchDir dir;
  TrainConfig c;
  c.profile = WriteProfile(dir, Tuned());
  c.aio_block_size = 4u << 20;
  c.aio_threads = 3;
  auto ch = ChooseNvmeIo(c, Input(dir.path(), 48u << 20, Tuned()));
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_EQ(ch->io.block_size_bytes, 4u << 20);
  EXPECT_EQ(ch->block_source, "aio.block_size");
  EXPECT_EQ(ch->io.queue_depth, 8u);  // not given: the profile's
  EXPECT_THAT(ch->queue_depth_source, HasSubstr("profile " + c.profile));
  EXPECT_EQ(ch->io.num_rings, 3u);
  EXPECT_EQ(ch->rings_source, "aio.thread_count");
  EXPECT_EQ(ch->buffer_count, 6);  // the profile's 4 in flight + held + free
  EXPECT_FALSE(ch->probed);
  c.aio_queue_depth = 5;
  c.buffer_count = 3;
  ch = ChooseNvmeIo(c, Input(dir.path(), 48u << 20, Tuned()));
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(ch->io.queue_depth, 5u);
  EXPECT_EQ(ch->buffer_count, 3);
  EXPECT_EQ(ch->buffer_count_source, "tierflow.buffer_count");
  // An explicit aio block size is used as given, even above the largest sub-group.
  c.aio_block_size = 64u << 20;
  ch = ChooseNvmeIo(c, Input(dir.path(), 1u << 20, Tuned()));
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(ch->io.block_size_bytes, 64u << 20);
}

TEST(NvmeIoChoice, ATunedProfileIsUsedWithItsBlockCappedAtTheLargestSubGroup) {
  ScratchDir dir;
  TrainConfig c;
  c.profile = WriteProfile(dir, Tuned());
  auto ch = ChooseNvmeIo(c, Input(dir.path(), 48u << 20, Tuned()));
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_EQ(ch->io, Tuned().io);
  EXPECT_EQ(ch->in_flight, 4u);
  EXPECT_EQ(ch->block_source, "profile " + c.profile);
  EXPECT_FALSE(ch->probed);
  ch = ChooseNvmeIo(c, Input(dir.path(), 5u << 20, Tuned()));  // sub-groups of 5 MiB
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(ch->io.block_size_bytes, 5u << 20);
  EXPECT_THAT(ch->block_source, HasSubstr("capped at the largest sub-group's state"));
  EXPECT_THAT(ch->Describe(), AllOf(HasSubstr("5 MiB blocks, queue depth 8, 2 rings"),
                                    HasSubstr("profile " + c.profile)));
  const nlohmann::json j = ch->ToJson();
  EXPECT_EQ(j["block_size_bytes"], 5u << 20);
  EXPECT_EQ(j["buffer_count"], 6);
  EXPECT_THAT(j["sources"]["queue_depth"].get<std::string>(), HasSubstr(c.profile));
}

TEST(NvmeIoChoice, WithoutATunedProfileTheProbeChoosesAmongItsCandidatesAndCleansUp) {
  ScratchDir dir;
  std::ofstream(dir / "old.json") << R"({"version": 1, "nvme_read_gb_per_second": 3})";
  TrainConfig c;
  c.profile = dir / "old.json";  // rates only: not tuned
  const std::string swap = dir / "swap";
  fs::create_directories(swap);
  const uint64_t largest = 5u << 20;
  const std::vector<uint32_t> candidates = ProbeCandidates(largest);
  ASSERT_EQ(candidates, (std::vector<uint32_t>{1u << 20, 4u << 20}));
  auto ch = ChooseNvmeIo(c, Input(swap, largest));
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_TRUE(ch->probed);
  ASSERT_EQ(ch->probe_points.size(), 2u);
  double best = 1e300;
  uint32_t best_block = 0;
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json& p = ch->probe_points[i];
    EXPECT_EQ(p["block_size_bytes"], candidates[i]);
    const double t =
        1 / p["write_gb_per_second"].get<double>() + 1 / p["read_gb_per_second"].get<double>();
    if (t < best) best = t, best_block = candidates[i];
  }
  EXPECT_EQ(ch->io.block_size_bytes, best_block) << "the least write+read time";
  EXPECT_EQ(ch->io.queue_depth, best_block == (1u << 20) ? 32u : 16u);
  EXPECT_THAT(ch->block_source, AllOf(HasSubstr("start-up probe"), HasSubstr("not tuned")));
  EXPECT_THAT(ch->Describe(), HasSubstr("probe ("));
  EXPECT_TRUE(Entries(swap).empty()) << ::testing::PrintToString(Entries(swap));
}

TEST(NvmeIoChoice, ProbeCandidatesFitTheSubGroups) {
  EXPECT_EQ(ProbeCandidates(480u << 10), (std::vector<uint32_t>{480u << 10}));
  EXPECT_EQ(ProbeCandidates(1200u << 10), (std::vector<uint32_t>{1u << 20}));
  EXPECT_EQ(ProbeCandidates(48u << 20),
            (std::vector<uint32_t>{1u << 20, 4u << 20, 16u << 20, 48u << 20}));
  EXPECT_EQ(ProbeCandidates(1u << 30),
            (std::vector<uint32_t>{1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20}));
}

TEST(NvmeIoChoice, NothingToProbeOrBufferedMeansNoProbe) {
  ScratchDir dir;
  TrainConfig c;
  auto small = ChooseNvmeIo(c, Input(dir.path(), 100000));
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_FALSE(small->probed);
  EXPECT_EQ(small->io.block_size_bytes, 102400u);  // 100000 rounded up to 4 KiB
  NvmeIoChoiceInput buffered = Input(dir.path());
  buffered.buffered = true;
  auto b = ChooseNvmeIo(c, buffered);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->probed);
  EXPECT_THAT(b->block_source, HasSubstr("buffered I/O is not probed"));
}

// Records what the engine asks of each ring: the queue depth it is built
// with, and the size of every operation.
struct IoRecord {
  std::mutex mu;
  std::vector<uint32_t> ring_queue_depths;
  std::set<uint32_t> op_bytes;
};

class RecordingBackend : public offload::IoBackend {
 public:
  RecordingBackend(std::unique_ptr<offload::IoBackend> inner, std::shared_ptr<IoRecord> record)
      : inner_(std::move(inner)), record_(std::move(record)) {}
  Status RegisterFiles(std::span<const int> fds) override { return inner_->RegisterFiles(fds); }
  Status UnregisterFiles() override { return inner_->UnregisterFiles(); }
  Status RegisterBuffers(std::span<const iovec> b) override { return inner_->RegisterBuffers(b); }
  Status UnregisterBuffers() override { return inner_->UnregisterBuffers(); }
  Status Submit(std::span<const offload::IoOp> ops, size_t* n) override {
    {
      std::lock_guard<std::mutex> lock(record_->mu);
      for (const offload::IoOp& op : ops) record_->op_bytes.insert(op.num_bytes);
    }
    return inner_->Submit(ops, n);
  }
  StatusOr<size_t> Reap(std::span<offload::IoCompletion> out, uint32_t min_complete) override {
    return inner_->Reap(out, min_complete);
  }

 private:
  std::unique_ptr<offload::IoBackend> inner_;
  std::shared_ptr<IoRecord> record_;
};

offload::IoBackendFactory RecordingFactory(std::shared_ptr<IoRecord> record) {
  return [record](
             const offload::IoBackendOptions& o) -> StatusOr<std::unique_ptr<offload::IoBackend>> {
    {
      std::lock_guard<std::mutex> lock(record->mu);
      record->ring_queue_depths.push_back(o.queue_depth);
    }
    TF_ASSIGN_OR_RETURN(std::unique_ptr<offload::IoBackend> inner,
                        offload::CreateIoUringBackend(o));
    return std::unique_ptr<offload::IoBackend>(new RecordingBackend(std::move(inner), record));
  };
}

TrainConfig TinyNvmeRun(const std::string& out) {
  TrainConfig c;
  c.model = "tiny-llama";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.steps = 2;
  c.offload = OffloadPlacement::kNvme;
  c.nvme_paths = {out + "/nvme"};
  c.sub_group_size = 100000;
  c.checkpoint_every = 0;
  c.eval_every = 0;
  c.out_dir = out;
  c.device.choice = DeviceChoice::kCpu;
  return c;
}

TEST(NvmeIoChoiceInTraining, EveryAioKeyTakesEffectInTheRingsTheTierBuilds) {
  ScratchDir out;
  TrainConfig c = TinyNvmeRun(out.path());
  c.aio_block_size = 64u << 10;
  c.aio_queue_depth = 3;
  c.aio_threads = 2;
  c.buffer_count = 5;
  auto record = std::make_shared<IoRecord>();
  TrainHooks hooks;
  hooks.nvme_backend_factory = RecordingFactory(record);
  TrainReporter quiet;
  auto r = RunTraining(c, quiet, nullptr, &hooks);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(record->ring_queue_depths, (std::vector<uint32_t>{3, 3})) << "2 rings of depth 3";
  ASSERT_FALSE(record->op_bytes.empty());
  EXPECT_EQ(*record->op_bytes.rbegin(), 64u << 10) << "no request above the block size";
  ASSERT_TRUE(r->nvme_io.is_object());
  EXPECT_EQ(r->nvme_io["block_size_bytes"], 64u << 10);
  EXPECT_EQ(r->nvme_io["buffer_count"], 5);
  EXPECT_EQ(r->nvme_io["sources"]["block_size"], "aio.block_size");
  EXPECT_EQ(r->nvme_io["sources"]["queue_depth"], "aio.queue_depth");
  EXPECT_EQ(r->nvme_io["sources"]["num_rings"], "aio.thread_count");
  EXPECT_EQ(r->nvme_io["sources"]["buffer_count"], "tierflow.buffer_count");
  // The first metrics record says the same; later ones do not repeat it.
  std::ifstream metrics(out / "metrics.jsonl");
  std::string first, second;
  ASSERT_TRUE(std::getline(metrics, first) && std::getline(metrics, second));
  EXPECT_EQ(nlohmann::json::parse(first)["nvme_io"], r->nvme_io);
  EXPECT_FALSE(nlohmann::json::parse(second).contains("nvme_io"));
}

TEST(NvmeIoChoiceInTraining, AProfilesSettingsRunAndAreReported) {
  ScratchDir out;
  NvmeStoreProfile p;
  p.io = {256u << 10, 6, 1};
  p.in_flight = 2;
  TrainConfig c = TinyNvmeRun(out.path());
  c.profile = WriteProfile(out, p);
  auto record = std::make_shared<IoRecord>();
  TrainHooks hooks;
  hooks.nvme_backend_factory = RecordingFactory(record);
  TrainReporter quiet;
  auto r = RunTraining(c, quiet, nullptr, &hooks);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(record->ring_queue_depths, (std::vector<uint32_t>{6}));
  EXPECT_EQ(*record->op_bytes.rbegin(), 256u << 10);
  EXPECT_EQ(r->nvme_io["sources"]["block_size"], "profile " + c.profile);
  EXPECT_EQ(r->nvme_io["buffer_count"], 4);
}

// The profile is read once, where the machine is described: a bad one stops
// the run before anything is written, naming the file and the field.
TEST(NvmeIoChoiceInTraining, ABadProfileIsRefusedNamingFileAndField) {
  ScratchDir out;
  NvmeStoreProfile bad;
  bad.io = {256u << 10, 5000, 1};
  TrainConfig c = TinyNvmeRun(out.path());
  c.profile = WriteProfile(out, bad);
  TrainReporter quiet;
  auto r = RunTraining(c, quiet, nullptr, nullptr);
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr(c.profile), HasSubstr("nvme_store.queue_depth")));
  c.profile = out / "missing.json";
  EXPECT_EQ(RunTraining(c, quiet, nullptr, nullptr).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tierflow
