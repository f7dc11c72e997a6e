// Every option of `tierflow train`, declared once: its setting's name, its
// `tierflow.KEY` in a config file, its command-line flag, its DeepSpeed key
// where one sets the same thing, its help, the TrainConfig field it sets
// (whose type is its typed parser), and its range. The flags of `train`
// (tools/train_command.cc), the "tierflow" block of a config
// (train_config.cc), the per-option range checks of ValidateTrainConfig,
// `train --help` and docs/DEEPSPEED_CONFIG.md's key table all come from it.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "train/train_config.h"

namespace tierflow {

// The TrainConfig field an option sets; its type says how text and JSON
// become its value.
using OptionField = std::variant<
    std::string TrainConfig::*, bool TrainConfig::*, int TrainConfig::*, int64_t TrainConfig::*,
    uint32_t TrainConfig::*, uint64_t TrainConfig::*, float TrainConfig::*, double TrainConfig::*,
    DType TrainConfig::*, std::optional<DType> TrainConfig::*, OffloadPlacement TrainConfig::*,
    ParamOffload TrainConfig::*, DeviceSpec TrainConfig::*, std::optional<int> TrainConfig::*,
    std::optional<uint64_t> TrainConfig::*, std::vector<std::string> TrainConfig::*,
    std::vector<int64_t> TrainConfig::*, TrainOptimizer TrainConfig::*,
    TrainPipeline TrainConfig::*, TrainCollectives TrainConfig::*, FinalSave TrainConfig::*,
    Truncation TrainConfig::*, TrainDataFormat TrainConfig::*, TrainTokenDtype TrainConfig::*,
    TrainChatTemplate TrainConfig::*, ActivationOffload TrainConfig::*, GradOffload TrainConfig::*>;

// How a flag's text reads (a config key holds the number itself).
enum class FlagText : uint8_t {
  kPlain,     // the field's type
  kCount,     // a count with suffixes (common/units.h ParseCount), "auto" for an optional
  kByteSize,  // a size (ParseByteSize), kept as text in a string field
};

// The values a number may take: [min, max], either end open. NaN never.
struct OptionRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::max();
  bool min_open = false;
  bool max_open = false;
  const char* wanted = "";  // what the error says to use, e.g. "1 or more"
};

struct TrainOption {
  const char* name;       // the setting: config.origins' key, the name errors give
  const char* json_key;   // tierflow.KEY; "" = none
  const char* flag;       // "--flag"; "" = none
  const char* deepspeed;  // the DeepSpeed key of the same setting; "" = none
  std::string help;
  OptionField field;
  std::optional<OptionRange> range = std::nullopt;  // checked for flags and config alike
  FlagText flag_text = FlagText::kPlain;
  // A switch flag (bool field): the value it sets ("--no-shuffle" sets false).
  bool switch_value = true;
  // Integers from a config below this are refused as they are read.
  int64_t json_min = std::numeric_limits<int64_t>::min();
  bool show_default = true;    // `--help` and the doc table say the default
  bool json_any_case = false;  // a config's text is lower-cased first
};

// The table, in `--help` order.
std::span<const TrainOption> TrainOptions();
// The option with this tierflow.KEY, or nullptr.
const TrainOption* FindTrainOptionByKey(std::string_view json_key);
// The option whose DeepSpeed key is `key` inside the DeepSpeed block `block`
// ("fp16", "zero_optimization.offload_optimizer"; "" for the top level), or
// nullptr. A key holding a '.' or '[' names no option.
const TrainOption* FindTrainOptionByDeepSpeedKey(std::string_view block, std::string_view key);

// The field's value as a user would type it, for help and the doc table.
std::string OptionValueText(const TrainOption& option, const TrainConfig& config);

// Sets the option's field from the text of its flag (FlagText) or of a
// config string. Errors: InvalidArgument "WHERE: what is wrong; what to use".
Status SetOptionFromText(const TrainOption& option, std::string_view where, std::string_view text,
                         TrainConfig* config);

// The option's range check on `config`: Ok, or "is VALUE; use WANTED".
std::optional<std::string> OptionRangeError(const TrainOption& option, const TrainConfig& config);

// docs/DEEPSPEED_CONFIG.md's table of tierflow keys and flags, generated.
std::string TrainOptionsMarkdown();

}  // namespace tierflow
