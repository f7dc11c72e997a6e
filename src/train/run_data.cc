// The model, tokenizer and data loader of a run.
#include "train/run_data.h"

#include <algorithm>
#include <filesystem>

#include "common/checked_math.h"
#include "common/units.h"
#include "data/instruction_data.h"
#include "data/text_dataset.h"
#include "io/hf_side_files.h"
#include "plan/hardware_detect.h"
#include "plan/memory_model.h"

#ifndef TIERFLOW_SOURCE_DIR
#define TIERFLOW_SOURCE_DIR "."
#endif

namespace tierflow {
namespace fs = std::filesystem;
namespace {

std::string BundledCorpus() { return std::string(TIERFLOW_SOURCE_DIR) + "/data/tiny_corpus.txt"; }

std::string DescribeInstructionData(const InstructionOptions& o, const InstructionStats& s) {
  std::string out =
      "instruction data " + o.path + " (" + std::string(InstructionFormatName(o.format)) + ", " +
      (s.chat_template.empty() ? std::string("plain prompt + response")
                               : s.chat_template + " chat template") +
      "): " + std::to_string(s.samples) + " samples, " + std::to_string(s.kept) + " kept";
  if (s.truncated > 0) out += " (" + std::to_string(s.truncated) + " truncated at seq_len)";
  if (s.dropped_long > 0) {
    out += ", " + std::to_string(s.dropped_long) + " dropped as longer than seq_len";
  }
  if (s.dropped_untrained > 0) {
    out += ", " + std::to_string(s.dropped_untrained) + " dropped with no response within seq_len";
  }
  if (s.dropped_system_messages > 0) {
    out += ", " + std::to_string(s.dropped_system_messages) +
           " system messages not shown by the mistral template";
  }
  out += "; " + std::to_string(s.trained_tokens) + " of " + std::to_string(s.tokens) +
         " tokens trained on, in " + std::to_string(s.rows) + (o.packing ? " packed" : "") +
         " rows of " + std::to_string(o.seq_len);
  return out;
}

// What a rank's instruction data may take while it is read: the node's
// usable host memory (as the planner will count it) shared by the node's
// ranks, each with its process overhead. The plan, made once the data is
// read, then counts its exact bytes beside everything else the run holds.
Status SetInstructionBudget(const RunDataBudget& b, InstructionOptions& options) {
  uint64_t host = b.host_memory_bytes;
  if (host == 0) {
    TF_ASSIGN_OR_RETURN(HostMemoryInfo mem, DetectHostMemory("/"));
    host = mem.usable_bytes;
  }
  const uint64_t sharing = static_cast<uint64_t>(std::clamp(b.local_ranks, 1, b.ranks));
  const uint64_t share = host / sharing;
  options.memory_budget_bytes =
      share > kHostProcessOverheadBytes ? share - kHostProcessOverheadBytes : 0;
  options.memory_budget_source =
      FormatBytes(host) + " of usable host memory" +
      (sharing > 1 ? " shared by " + std::to_string(sharing) + " ranks" : "") + ", less " +
      FormatBytes(kHostProcessOverheadBytes) + " for the process";
  return Status::Ok();
}

Status ReadSourceFiles(const TrainConfig& config, RunData& d) {
  if (config.allow_unused_tensors && d.model.weights_dir.empty()) {
    return InvalidArgumentError(
        "allow_unused_tensors (--allow-unused-tensors) applies to a Hugging Face model directory "
        "with weights, and --model " +
        config.model + " has none (its weights are initialised); drop it");
  }
  // (A config.json path names only a config: its directory may hold another model.)
  if (!d.model_is_dir) return Status::Ok();
  d.source_files.config_json = d.model.config_json;
  TF_ASSIGN_OR_RETURN(d.source_files.side, ReadHfSideFiles(config.model));
  if (!d.model.weights_dir.empty()) {
    TF_ASSIGN_OR_RETURN(d.source_files.weights,
                        ReadHfSourceLayout(d.model.weights_dir, d.model.config));
  }
  return Status::Ok();
}

Status LoadTokenizerFor(const TrainConfig& config, RunData& d) {
  if (config.token_dtype != TrainTokenDtype::kNone) return Status::Ok();
  std::string spec = config.tokenizer;
  if (spec.empty()) spec = d.model_is_dir ? config.model : "byte";
  TF_ASSIGN_OR_RETURN(d.tokenizer, LoadTokenizer(spec));
  if (d.tokenizer->vocab_size() > d.model.config.vocab_size) {
    return InvalidArgumentError("tokenizer '" + spec + "' has " +
                                std::to_string(d.tokenizer->vocab_size()) + " tokens but model '" +
                                config.model + "' only " +
                                std::to_string(d.model.config.vocab_size) +
                                "; use the model's own tokenizer (--tokenizer)");
  }
  return Status::Ok();
}

StatusOr<DataLoader> LoadInstructions(const TrainConfig& config, InstructionFormat format,
                                      int32_t vocab, const DataLoaderOptions& loader_options,
                                      const RunDataBudget& budget, RunData& d) {
  if (config.data.empty()) {
    return InvalidArgumentError("--format " + std::string(ChoiceName(config.data_format)) +
                                " needs --data: a JSONL file of instruction samples");
  }
  InstructionOptions options;
  options.path = config.data;
  options.format = format;
  if (config.chat_template != TrainChatTemplate::kTokenizers) {
    TF_ASSIGN_OR_RETURN(options.chat_template,
                        ParseChatTemplateKind(ChoiceName(config.chat_template)));
  }
  options.seq_len = config.seq_len;
  options.drop_long = config.truncation == Truncation::kDrop;
  options.packing = config.packing;
  options.vocab_size = vocab;
  options.max_sample_bytes = config.max_sample_bytes;
  TF_RETURN_IF_ERROR(SetInstructionBudget(budget, options));
  TF_ASSIGN_OR_RETURN(InstructionData data, LoadInstructionData(options, *d.tokenizer));
  d.note = DescribeInstructionData(options, data.stats);
  return DataLoader::CreateFromRows(std::move(data.rows), loader_options);
}

StatusOr<DataLoader> LoadTokenStream(const TrainConfig& config, int32_t vocab,
                                     const DataLoaderOptions& loader_options, RunData& d) {
  DatasetOptions dataset;
  dataset.path = config.data.empty() ? BundledCorpus() : config.data;
  dataset.text_field = config.text_field;
  dataset.vocab_size = vocab;
  if (config.data_format != TrainDataFormat::kByFileName) {
    TF_ASSIGN_OR_RETURN(dataset.format, ParseDataFormat(ChoiceName(config.data_format)));
  }
  if (config.token_dtype != TrainTokenDtype::kNone) {
    TF_ASSIGN_OR_RETURN(TokenDtype td, ParseTokenDtype(ChoiceName(config.token_dtype)));
    dataset.token_dtype = td;
    dataset.format = DataFormat::kTokens;
  }
  TF_ASSIGN_OR_RETURN(TokenSource tokens, LoadTokens(dataset, d.tokenizer.get()));
  return DataLoader::Create(std::move(tokens), loader_options);
}

}  // namespace

StatusOr<RunData> LoadRunData(const TrainConfig& config, const RunDataBudget& budget) {
  RunData d;
  TF_ASSIGN_OR_RETURN(d.model, ResolveTrainableModel(config.model));
  d.model_is_dir = fs::is_directory(config.model);
  TF_RETURN_IF_ERROR(ReadSourceFiles(config, d));
  TF_RETURN_IF_ERROR(LoadTokenizerFor(config, d));
  TF_ASSIGN_OR_RETURN(const int32_t vocab,
                      CheckedNarrow<int32_t>(d.model.config.vocab_size, "the model's vocab_size"));
  DataLoaderOptions loader_options;
  loader_options.batch = config.micro_batch;
  loader_options.seq_len = config.seq_len;
  loader_options.shuffle = config.shuffle;
  loader_options.seed = config.seed;
  loader_options.eval_fraction = config.eval_fraction;
  if (auto instruction = ParseInstructionFormat(ChoiceName(config.data_format)); instruction.ok()) {
    TF_ASSIGN_OR_RETURN(d.loader,
                        LoadInstructions(config, *instruction, vocab, loader_options, budget, d));
  } else {
    TF_ASSIGN_OR_RETURN(d.loader, LoadTokenStream(config, vocab, loader_options, d));
  }
  return d;
}

}  // namespace tierflow
