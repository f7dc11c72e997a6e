// A run's model and data, read as `tierflow train` reads them: the model's
// configuration and source files, the tokenizer, and the data loader (whose
// host bytes the plan counts). `tierflow plan --config` reads them the same
// way, so its plan counts the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/data_loader.h"
#include "data/tokenizer.h"
#include "model/hf_model.h"
#include "tierflow/status.h"
#include "train/checkpoint.h"
#include "train/train_config.h"

namespace tierflow {

struct RunData {
  ResolvedModel model;
  bool model_is_dir = false;  // a Hugging Face directory (not a preset or a config.json)
  // What every saved model keeps from a Hugging Face source directory.
  SourceModelFiles source_files;
  std::unique_ptr<Tokenizer> tokenizer;  // null for token files
  std::optional<DataLoader> loader;      // set on success
  std::string note;                      // instruction data: what was kept, for the log
};

// Where a rank's instruction data may grow: `host_memory_bytes` (0: the
// usable memory detected) shared by the node's `local_ranks` of `ranks`.
struct RunDataBudget {
  uint64_t host_memory_bytes = 0;
  int local_ranks = 1;
  int ranks = 1;
};

// Errors: the model's (NotFound listing the presets, a bad config.json), the
// tokenizer's (and one larger than the model's vocabulary), the data's
// (named, with its line), instruction data over the budget.
StatusOr<RunData> LoadRunData(const TrainConfig& config, const RunDataBudget& budget);

}  // namespace tierflow
