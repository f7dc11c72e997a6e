// `tierflow bench engine --offload-param` end to end on a tiny synthetic
// model on the CPU device: host offload reports the h2d_params stage and the
// streamed bytes; bad values exit non-zero naming the flag. No timing is
// asserted.
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/run_command.h"

namespace tierflow {
namespace {

using Output = testing_common::CommandOutput;

const char kTiny[] =
    " --device cpu --params 64Ki --units 4 --tokens 4 --steps 1 --rounds 1 --sub-group-size 8Ki";

Output BenchEngine(const std::string& args, bool with_stderr) {
  return testing_common::RunCommand(std::string(TIERFLOW_BINARY) + " bench engine" + kTiny + " " +
                                    args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

TEST(BenchEngineCli, HostParamOffloadReportsTheStreamedStageAndBytes) {
  Output r = BenchEngine("--offload-param host --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["offload_param"], "host");
  EXPECT_TRUE(j["stages"].contains("h2d_params")) << j.dump();
  EXPECT_EQ(j["streamed_units"], nlohmann::json({1, 3}));
  EXPECT_EQ(j["param_slots"], 3);
  EXPECT_EQ(j["prefetch_depth"], 2);
  EXPECT_GT(j["param_h2d_bytes"].get<uint64_t>(), 0u);
  // The text report names the stage and the bytes.
  Output text = BenchEngine("--offload-param cpu --streamed-units 0,2 --param-slots 2", false);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("h2d_params"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("streamed weights per step"), std::string::npos) << text.output;
}

TEST(BenchEngineCli, BadParamOffloadValuesAreRefusedNamingTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--offload-param auto", "--offload-param"},
      {"--offload-param sideways", "--offload-param"},
      {"--param-slots 4", "--param-slots"},  // nothing streams
      {"--offload-param host --param-slots 1", "--param-slots"},
      {"--offload-param host --streamed-units 1,x", "--streamed-units"},
      {"--offload-param host --streamed-units 7", "--streamed-units"},
      {"--streamed-units 1", "--streamed-units"},  // nothing streams
      {"--offload-param nvme", "--nvme-path"},
  };
  for (const auto& [args, flag] : cases) {
    Output r = BenchEngine(args, true);
    EXPECT_NE(r.exit_code, 0) << args << " was accepted";
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
  }
}

}  // namespace
}  // namespace tierflow
