// The options table of `tierflow train` (train/train_options.h): one row
// per option, read the same way from a flag's text and a config key, and
// docs/DEEPSPEED_CONFIG.md's table generated from it.
#include "train/train_options.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tierflow {
namespace {

using ::testing::HasSubstr;

const TrainOption& Option(std::string_view name) {
  for (const TrainOption& o : TrainOptions()) {
    if (name == o.name) return o;
  }
  ADD_FAILURE() << "no option " << name;
  return TrainOptions().front();
}

// The table between the markers in docs/DEEPSPEED_CONFIG.md.
std::string DocTable() {
  std::ifstream in(std::string(TIERFLOW_SOURCE_DIR) + "/docs/DEEPSPEED_CONFIG.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.find("<!-- train-options:begin");
  const size_t end = doc.find("<!-- train-options:end -->");
  if (begin == std::string::npos || end == std::string::npos) return "(no markers)";
  const size_t first = doc.find('\n', begin) + 1;
  return doc.substr(first, end - first);
}

TEST(TrainOptions, TheDocsTableIsTheGeneratedOne) {
  EXPECT_EQ(DocTable(), TrainOptionsMarkdown())
      << "docs/DEEPSPEED_CONFIG.md's options table is stale: replace it with the output of "
         "`tierflow train --options-markdown`";
}

TEST(TrainOptions, NamesKeysAndFlagsAreEachDeclaredOnce) {
  std::set<std::string> names, keys, flags;
  for (const TrainOption& o : TrainOptions()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    if (*o.json_key != '\0') {
      EXPECT_TRUE(keys.insert(o.json_key).second) << o.json_key;
    }
    if (*o.flag != '\0') {
      EXPECT_TRUE(flags.insert(o.flag).second) << o.flag;
    }
    EXPECT_FALSE(std::string(o.help).empty()) << o.name;
    if (o.range.has_value()) {
      EXPECT_FALSE(std::string(o.range->wanted).empty()) << o.name;
    }
  }
  EXPECT_EQ(FindTrainOptionByKey("lr"), &Option("lr"));
  EXPECT_EQ(FindTrainOptionByKey("no_such_key"), nullptr);
  EXPECT_EQ(FindTrainOptionByKey(""), nullptr);  // resume_from has a flag and no key
}

// Each tierflow key, given its default as a config would write it, is read
// and recorded as where the setting came from.
TEST(TrainOptions, EveryKeyReadsItsDefaultBack) {
  const TrainConfig defaults;
  for (const TrainOption& o : TrainOptions()) {
    if (*o.json_key == '\0' || std::string_view(o.name) == "dtype") continue;
    const std::string text = OptionValueText(o, defaults);
    if (text == "auto" ||
        std::holds_alternative<std::vector<std::string> TrainConfig::*>(o.field) ||
        std::holds_alternative<std::vector<int64_t> TrainConfig::*>(o.field)) {
      continue;  // "auto" keeps the value; lists are read as arrays (train_config_test)
    }
    nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    if (value.is_discarded() || value.is_string()) value = text;
    if (value.is_number_integer() && value.get<int64_t>() < o.json_min) {
      continue;  // a default of 0 = "not given" (aio_*, buffer_count), not a config's value
    }
    const std::string json = nlohmann::json{{"tierflow", {{o.json_key, value}}}}.dump();
    StatusOr<TrainConfig> c = ParseTrainConfig(json, "config.json", defaults);
    ASSERT_TRUE(c.ok()) << json << ": " << c.status().ToString();
    EXPECT_EQ(OptionValueText(o, *c), text) << json;
    EXPECT_EQ(c->origins[o.name], std::string("config.json: tierflow.") + o.json_key) << json;
  }
}

TEST(TrainOptions, FlagTextIsReadAsTheFieldsType) {
  TrainConfig c;
  ASSERT_TRUE(SetOptionFromText(Option("steps"), "--steps", "12", &c).ok());
  EXPECT_EQ(c.steps, 12);
  EXPECT_THAT(SetOptionFromText(Option("steps"), "--steps", "1.5", &c).message(),
              HasSubstr("--steps: '1.5' is not an integer"));
  ASSERT_TRUE(SetOptionFromText(Option("pipeline"), "--pipeline", "sync", &c).ok());
  EXPECT_EQ(c.pipeline, TrainPipeline::kSync);
  // A count flag: suffixes, and the flag's rule over a config's.
  c.sub_group_cut = SubGroupCut::kWholeTensors;
  ASSERT_TRUE(SetOptionFromText(Option("sub_group_size"), "--sub-group-size", "4Mi", &c).ok());
  EXPECT_EQ(c.sub_group_size, uint64_t{4} << 20);
  EXPECT_EQ(c.sub_group_cut, SubGroupCut::kSlices);
  c.speculation_params = 5;
  ASSERT_TRUE(SetOptionFromText(Option("speculation_params"), "--speculation", "auto", &c).ok());
  EXPECT_FALSE(c.speculation_params.has_value());
  EXPECT_THAT(SetOptionFromText(Option("device_memory"), "--device-memory", "0", &c).message(),
              HasSubstr("--device-memory: '0' is 0 bytes"));
  EXPECT_THAT(SetOptionFromText(Option("offload"), "--offload-optimizer", "disk", &c).message(),
              HasSubstr("--offload-optimizer: unknown optimizer placement 'disk'"));
}

TEST(TrainOptions, RangesSayWhatToUse) {
  TrainConfig c;
  EXPECT_FALSE(OptionRangeError(Option("lr"), c).has_value());
  c.lr = 0;
  EXPECT_EQ(OptionRangeError(Option("lr"), c), "is 0; use a positive, finite learning rate");
  c.beta1 = 1.0f;
  EXPECT_EQ(OptionRangeError(Option("beta1"), c), "is 1; use a value in [0, 1) (e.g. 0.9)");
  c.param_slots = 65;
  EXPECT_THAT(OptionRangeError(Option("param_slots"), c).value_or(""),
              HasSubstr("is 65; use 2 to 64"));
  c.param_slots.reset();  // unset: the planner's choice, no range to check
  EXPECT_FALSE(OptionRangeError(Option("param_slots"), c).has_value());
}

}  // namespace
}  // namespace tierflow
