// Replays fuzz inputs: the seed corpora through the fuzz entry points
// (fuzz/entry_points.h), which abort on a crash or a broken parser contract,
// so "the test finishes" is the assertion; and every input a fuzzer once
// crashed on, saved as inputs/<target>/<bug-name>, in a test named after the
// bug that pins what the parser must answer (a Status error, or a clean
// result) and then replays it through the entry point too.
//
// A test for a bug not fixed yet is DISABLED_ (it would crash or fail);
// whoever fixes the parser enables it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/data_loader.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "offload/swap_format.h"
#include "tierflow/model_config.h"
#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
#include "train/train_config.h"
#endif
#if TIERFLOW_FUZZ_HAVE_CHECKPOINT
#include "checkpoint/checkpoint_verify.h"
#endif
#if TIERFLOW_FUZZ_HAVE_TIER
#include "tier/tier_export.h"
#include "tier/tier_verify.h"
#endif

#include "fuzz/entry_points.h"

namespace tierflow::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;  // the fuzz executable, = the corpus folder
  void (*entry)(std::string_view);
};

const std::vector<Target>& Targets() {
  static const std::vector<Target> targets = {
    {"fuzz_safetensors_header", FuzzSafetensorsHeader},
    {"fuzz_hf_index", FuzzHfIndex},
    {"fuzz_model_config", FuzzModelConfig},
    {"fuzz_swap_header", FuzzSwapHeader},
    {"fuzz_swap_block_table", FuzzSwapBlockTable},
    {"fuzz_tokenizer_json", FuzzTokenizerJson},
    {"fuzz_hf_normalizer", FuzzHfNormalizer},
    {"fuzz_hf_pre_tokenizer", FuzzHfPreTokenizer},
    {"fuzz_hf_added_tokens", FuzzHfAddedTokens},
    {"fuzz_instruction_jsonl", FuzzInstructionJsonl},
    {"fuzz_vocab_merges", FuzzVocabMerges},
    {"fuzz_gpt2_encode", FuzzGpt2Encode},
    {"fuzz_token_file", FuzzTokenFile},
    {"fuzz_data_loader_state", FuzzDataLoaderState},
#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
    {"fuzz_train_config", FuzzTrainConfig},
#endif
#if TIERFLOW_FUZZ_HAVE_CHECKPOINT
    {"fuzz_checkpoint_state", FuzzCheckpointState},
#endif
#if TIERFLOW_FUZZ_HAVE_TIER
    {"fuzz_tier_checkpoint", FuzzTierCheckpoint},
#endif
  };
  return targets;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Feeds every file under dir/<target>/ to the target; returns how many.
int ReplayDir(const fs::path& dir, const Target& target) {
  const fs::path sub = dir / target.name;
  if (!fs::is_directory(sub)) return 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(sub)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    target.entry(ReadFile(f));
  }
  return static_cast<int>(files.size());
}

class FuzzReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplayTest, SeedCorpusIsHandledCleanly) {
  EXPECT_GT(ReplayDir(TIERFLOW_FUZZ_CORPUS_DIR, GetParam()), 0)
      << "no seed inputs in fuzz/corpus/" << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FuzzReplayTest, ::testing::ValuesIn(Targets()),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

TEST(FuzzEntryPointsTest, EmptyAndTinyInputsAreHandledCleanly) {
  for (const Target& t : Targets()) {
    SCOPED_TRACE(t.name);
    for (std::string_view input :
         {std::string_view(""), std::string_view("\0", 1), std::string_view("{}"),
          std::string_view("[]"), std::string_view("null"), std::string_view("\xff\xfe")}) {
      t.entry(input);
    }
  }
}

// ---- one test per bug a fuzzer found ----

std::string Input(const std::string& target, const std::string& bug) {
  const fs::path path = fs::path(TIERFLOW_FUZZ_REGRESSION_DIR) / target / bug;
  EXPECT_TRUE(fs::is_regular_file(path)) << path;
  return ReadFile(path);
}

// src/model/hf_config_json.cc ParseModelConfigJson catches only
// json::parse_error; a number too large for a double ("1e400") makes
// nlohmann throw out_of_range.406, which escapes as an exception and
// terminates the process. Found by fuzz_model_config within seconds.
TEST(FuzzRegressionTest, ModelConfigNumberOverflowIsAnError) {
  const std::string text = Input("fuzz_model_config", "number_overflow_throws");
  StatusOr<ModelConfig> parsed = ParseModelConfigJson(text, "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  FuzzModelConfig(text);
}

#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
// src/train/train_config.cc ParseTrainConfig: the same escape (catches only
// Json::parse_error), e.g. "lr": 1e400 in a DeepSpeed config.
TEST(FuzzRegressionTest, TrainConfigNumberOverflowIsAnError) {
  const std::string text = Input("fuzz_train_config", "number_overflow_throws");
  StatusOr<TrainConfig> parsed = ParseTrainConfig(text, "ds_config.json", TrainConfig{});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  FuzzTrainConfig(text);
}
#endif

// offload/swap_format.cc DecodeBlockTable with num_logical_blocks == 0 (a
// directory that holds no block of any tensor) memcpy's into the empty
// vectors' data(), a null pointer: undefined behaviour that UBSan reports
// (nonnull-attribute), at swap_format.cc:215-216; EncodeBlockTable does the
// same from an empty table. The table itself is valid and must decode.
// Found by fuzz_swap_block_table within seconds.
TEST(FuzzRegressionTest, SwapBlockTableWithZeroBlocksDecodes) {
  const std::string bytes = Input("fuzz_swap_block_table", "zero_blocks_null_memcpy");
  ASSERT_FALSE(bytes.empty());
  ASSERT_EQ(bytes[0], '\0');  // the entry point's block count byte
  const std::span<const uint8_t> table(reinterpret_cast<const uint8_t*>(bytes.data()) + 1,
                                       bytes.size() - 1);
  StatusOr<offload::BlockTable> decoded = offload::DecodeBlockTable(table, 0, "swap", 4096);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_TRUE(decoded->physical.empty());
  EXPECT_TRUE(decoded->crc.empty());
  FuzzSwapBlockTable(bytes);
}

// offload/swap_format.cc DecodeSwapHeader checks a header's consistency with
// unsigned sums that wrap around, so a header with a valid CRC32C but
// impossible values passes, and the state store then uses them as block
// indexes (state_store.cc: local_block = first_local_block + k / num_dirs):
//   first_local_block_wraps   first_local_block = 2^64-1: first_local_block +
//                             BlocksInDirectory(...) wraps to 0 <= num_logical_blocks
//   num_bytes_rounding_wraps  num_bytes = 2^64-1: (num_bytes + block_size - 1)
//                             wraps, so num_blocks = 0 is accepted
//   block_table_end_wraps     block_table_offset_bytes = 2^64-4096:
//                             offset + 2 * copy size wraps below data_offset_bytes
// Each must be DataLoss. Found by checking fuzz_swap_header's invariants
// (fuzz/swap_fuzz.cc CheckAcceptedHeader) on crafted inputs; the inputs were
// written with fuzz/make_seeds.py's swap_header().
TEST(FuzzRegressionTest, SwapHeaderWithWrappingSumsIsDataLoss) {
  for (const char* bug :
       {"first_local_block_wraps", "num_bytes_rounding_wraps", "block_table_end_wraps"}) {
    SCOPED_TRACE(bug);
    const std::string bytes = Input("fuzz_swap_header", bug);
    StatusOr<offload::SwapFileHeader> h = offload::DecodeSwapHeader(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        "swap");
    if (h.ok()) {
      ADD_FAILURE() << bug << " was accepted";
      continue;
    }
    EXPECT_EQ(h.status().code(), StatusCode::kDataLoss);
    FuzzSwapHeader(bytes);
  }
}

// fuzz/safetensors_fuzz.cc FuzzHfIndex assumed an accepted index lists all
// three tensors of its two shards; an index that lists only shard 1's "a" is a
// valid checkpoint of one tensor (Open accepts it; validating against the full
// list names what is missing). The harness was wrong, not the loader: it now
// checks exactly that. Found by fuzz_hf_index in a local CI run.
TEST(FuzzRegressionTest, HfIndexListingOneShardOfTwoIsAPartialCheckpoint) {
  const std::string bytes = Input("fuzz_hf_index", "index_lists_one_shard_of_two");
  ASSERT_NE(bytes.find("weight_map"), std::string::npos);
  FuzzHfIndex(bytes);
}

// src/data/gpt2_bpe_tokenizer.cc Gpt2BpeTokenizer::Create sized its
// id -> token table by the largest id, which may be up to 2^31 - 2, so a
// vocab.json of one token {"a": 1000000000} allocated 32 GB (ASan: allocator
// out of memory, 0x77358d180 bytes). Ids must now stay within the token count
// plus a bounded number of holes. Found by fuzz_vocab_merges in CI.
TEST(FuzzRegressionTest, VocabWithHugeIdIsAnErrorNotATable) {
  const std::string bytes = Input("fuzz_vocab_merges", "huge_id_allocates_table");
  const size_t nul = bytes.find('\0');
  ASSERT_NE(nul, std::string::npos);
  StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> tok = Gpt2BpeTokenizer::FromVocabAndMergesText(
      bytes.substr(0, nul), bytes.substr(nul + 1), "vocab.json", "merges.txt");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("1000000000"), std::string::npos) << tok.status().message();
  FuzzVocabMerges(bytes);
}

#if TIERFLOW_FUZZ_HAVE_CHECKPOINT
// VerifyCheckpoint (then in src/train/checkpoint.cc: ReadCheckpointState,
// CheckCheckpointFile) reads trainer_state.json fields with
// nlohmann::json::value(key, default), which throws type_error.302 when the
// key holds another type ("version": "1", "format": 1, "bytes": "2"; likewise
// "step", "optimizer_layout", "path", "crc32c" and the "tensors" entries). The
// exception escapes VerifyCheckpoint, which returns a CheckpointInfo and is
// called on every checkpoint directory by ListCheckpoints and resume, so one
// damaged state file terminates `tierflow train --resume` instead of being
// skipped as unverified. Found by reading the code behind fuzz_checkpoint_state.
TEST(FuzzRegressionTest, CheckpointStateWithMistypedFieldsIsUnverified) {
  for (const char* bug : {"version_is_string", "format_is_number", "file_bytes_is_string"}) {
    SCOPED_TRACE(bug);
    const std::string text = Input("fuzz_checkpoint_state", bug);
    EXPECT_NO_THROW(FuzzCheckpointState(text));
    // The entry point left `text` as the state of this checkpoint directory.
    const std::string dir = FuzzTempDir() + "/step-00000001";
    CheckpointInfo info;
    EXPECT_NO_THROW(info = VerifyCheckpoint(dir));
    EXPECT_FALSE(info.verified);
    EXPECT_FALSE(info.problem.empty());
  }
}
#endif

#if TIERFLOW_FUZZ_HAVE_TIER
// Replays `bug` of fuzz_tier_checkpoint (the entry point checks that nothing
// outside the export changes), then asks `tier verify` and `tier export`
// directly: verify must refuse, naming `field`, and so must export unless
// `export_reads_it` (export reads the units, not the "files" list).
void ExpectTierRefuses(const std::string& bug, const std::string& field,
                       bool export_reads_it = true) {
  SCOPED_TRACE(bug);
  EXPECT_NO_THROW(FuzzTierCheckpoint(Input("fuzz_tier_checkpoint", bug)));
  const std::string ckpt = FuzzTempDir() + "/tier/out/checkpoints/step-00000001";
  const CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_FALSE(info.verified);
  EXPECT_NE(info.problem.find(field), std::string::npos) << info.problem;
  auto report = tier::VerifyTierPath(ckpt);
  if (report.ok()) {
    EXPECT_FALSE(report->ok());
  }
  if (!export_reads_it) return;
  const std::string out = FuzzTempDir() + "/tier/export/regression.safetensors";
  std::error_code ec;
  fs::remove(out, ec);
  auto exported = tier::ExportCheckpoint(ckpt, out);
  EXPECT_FALSE(exported.ok());
  EXPECT_FALSE(fs::exists(out, ec));
}

// The valid seed verifies and exports, so the fuzzer starts from a state
// that reaches the reads it guards (fuzz/make_seeds.py and fuzz/tier_fuzz.cc
// build the same unit file).
TEST(FuzzRegressionTest, TierCheckpointValidSeedVerifiesAndExports) {
  FuzzTierCheckpoint(ReadFile(fs::path(TIERFLOW_FUZZ_CORPUS_DIR) / "fuzz_tier_checkpoint/valid"));
  const std::string ckpt = FuzzTempDir() + "/tier/out/checkpoints/step-00000001";
  const CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;
  auto exported = tier::ExportCheckpoint(ckpt, FuzzTempDir() + "/tier/export/valid.safetensors");
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  EXPECT_EQ(exported->num_bytes, 24u);
  std::error_code ec;
  fs::remove(FuzzTempDir() + "/tier/export/valid.safetensors", ec);
}

// A unit name in trainer_state.json was used as a path component unchecked:
// "../../../../outside/u" made `tier export` (and `migrate --to nvme`) read
// optimizer/../../../../outside/u.safetensors, outside the checkpoint, and
// `tier verify` (which checked only the "files" list) said OK.
TEST(FuzzRegressionTest, TierCheckpointUnitNameEscapingCheckpointIsRejected) {
  ExpectTierRefuses("unit_name_escapes_checkpoint", "units[0].name");
}

// A "files" entry naming a file outside the checkpoint through "..": verify
// refuses it (export never reads "files", and its unit is inside).
TEST(FuzzRegressionTest, TierCheckpointFilesPathEscapingCheckpointIsRejected) {
  ExpectTierRefuses("files_path_escapes_checkpoint", "is not a path inside the checkpoint",
                    /*export_reads_it=*/false);
}

// A unit whose file is a symlink out of the checkpoint: every checksum
// matched (the link's target is an identical copy), so verify said OK and
// export read through it.
TEST(FuzzRegressionTest, TierCheckpointUnitFileSymlinkedOutIsRejected) {
  ExpectTierRefuses("unit_file_is_symlink_out", "is a symbolic link");
}

// num_params of 2^62 or 2^64-1: `tier export` allocated that many floats and
// died of bad_alloc (or, with * 4 wrapping, read a 0-byte swap tensor) while
// `tier verify` said OK. Now bounded by the unit's file before allocating.
TEST(FuzzRegressionTest, TierCheckpointAbsurdNumParamsIsRejected) {
  ExpectTierRefuses("num_params_absurd", "units[0].num_params");
  ExpectTierRefuses("num_params_max", "units[0].num_params");
}

// Mistyped fields made nlohmann::json::value() throw type_error out of
// `tier ls`/`tier export` and out of retention during a training save.
TEST(FuzzRegressionTest, TierCheckpointMistypedFieldsAreRejected) {
  ExpectTierRefuses("num_params_is_string", "units[0].num_params must be a non-negative integer");
  ExpectTierRefuses("optimizer_layout_is_number", "optimizer_layout must be a string, not 7");
  ExpectTierRefuses("run_id_is_number", "swap_set.run_id must be a string, not 7");
}

// A run id that climbs out of DIR/tierflow-swap.
TEST(FuzzRegressionTest, TierCheckpointRunIdEscapingSwapRootIsRejected) {
  ExpectTierRefuses("run_id_escapes", "swap_set.run_id");
}

// trainer_state.json nested deeper than kMaxJsonDepth is rejected at the parse.
TEST(FuzzRegressionTest, TierCheckpointDeeplyNestedStateIsRejected) {
  ExpectTierRefuses("deeply_nested_data", "nested deeper");
}
#endif

}  // namespace
}  // namespace tierflow::fuzz
