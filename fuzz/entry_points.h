// The fuzz entry points: one per parser of outside input.
//
// Each takes arbitrary bytes, feeds them to one parser (in memory where the
// parser has an in-memory entry point, through a private temporary file where
// it only reads files), and, when the parser accepts them, checks what it
// returned against its contract (FUZZ_CHECK aborts on a violation). A parser
// that rejects its input must do so with a Status: an exception, a sanitizer
// report or an abort is a bug. The same functions drive the libFuzzer
// executables (fuzz_main.cc) and the regression test
// (tests/fuzz_regressions), which replays every input that once crashed.
//
// Not thread-safe: entry points that use a temporary directory share one per
// process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tierflow::fuzz {

// src/io/safetensors.h: ParseSafetensorsHeader on a whole file.
void FuzzSafetensorsHeader(std::string_view data);
// src/io/hf_checkpoint.h: HfCheckpoint::Open on a directory whose
// model.safetensors.index.json is `data`, beside two valid shards.
void FuzzHfIndex(std::string_view data);
// include/tierflow/model_config.h: ParseModelConfigJson (config.json).
void FuzzModelConfig(std::string_view data);
// offload/swap_format.h: SwapHeaderSize and DecodeSwapHeader.
void FuzzSwapHeader(std::string_view data);
// offload/swap_format.h: DecodeBlockTable; the first byte picks the number of
// logical blocks, the rest is the table copy.
void FuzzSwapBlockTable(std::string_view data);
// src/data/hf_tokenizer.h: HfTokenizer::Create (tokenizer.json).
void FuzzTokenizerJson(std::string_view data);
// src/data/hf_normalizer.h, hf_pre_tokenizer.h, hf_added_tokens.h: one
// tokenizer.json component (its JSON: a normalizer, a pre_tokenizer or the
// added_tokens list), a NUL byte, then a text it is run on; checks the growth,
// regex-work and matching bounds besides the results (see
// tokenizer_components_fuzz.cc).
void FuzzHfNormalizer(std::string_view data);
void FuzzHfPreTokenizer(std::string_view data);
void FuzzHfAddedTokens(std::string_view data);
// src/data/gpt2_bpe_tokenizer.h: FromVocabAndMergesText; `data` is vocab.json,
// a NUL byte, then merges.txt (no NUL: all of it is vocab.json).
void FuzzVocabMerges(std::string_view data);
// src/data/gpt2_pretokenize.h and Gpt2BpeTokenizer::Encode on arbitrary bytes.
void FuzzGpt2Encode(std::string_view data);
// src/data/instruction_data.h: ParseInstructionData; bytes 0-3 pick the
// format, the chat template, truncation/packing and seq_len, the rest is the
// JSONL.
void FuzzInstructionJsonl(std::string_view data);
// src/data/token_source.h: OpenTokenFile on a file holding `data`.
void FuzzTokenFile(std::string_view data);
// src/data/data_loader.h: DataLoader::RestoreState on `data` parsed as JSON.
void FuzzDataLoaderState(std::string_view data);
#if TIERFLOW_FUZZ_HAVE_TRAIN_CONFIG
// src/train/train_config.h: ParseTrainConfig (tierflow / DeepSpeed JSON).
void FuzzTrainConfig(std::string_view data);
#endif
#if TIERFLOW_FUZZ_HAVE_CHECKPOINT
// src/checkpoint: VerifyCheckpoint on a checkpoint directory whose
// trainer_state.json is `data` (beside one small file it may list), and
// ParseTrainerState on what it accepts; a first byte 0x01 seals the rest
// with a correct CRC32C first.
void FuzzCheckpointState(std::string_view data);
#endif
#if TIERFLOW_FUZZ_HAVE_TIER
// src/tier: `tier ls`, `tier verify` and `tier export` on a checkpoint whose
// trainer_state.json is `data`, beside a unit file it may name, a copy of it
// outside the checkpoint and a symlink pointing there; checks that nothing
// outside the export's output changes and no accepted state names a unit
// that is not a plain file name.
void FuzzTierCheckpoint(std::string_view data);
#endif

// A directory private to this process, created on first use and removed at
// exit, for the parsers that only read files.
const std::string& FuzzTempDir();
// Writes `data` to FuzzTempDir()/`name` (replacing it); aborts on failure,
// which is the harness's fault, not the parser's.
std::string WriteFuzzFile(std::string_view name, std::string_view data);

}  // namespace tierflow::fuzz
