// The numeric flags' range checks: NaN, infinities and out-of-range values
// refused naming the flag, and the audit that finds a numeric flag without a
// check (tools/main.cc refuses to run while it finds one).
#include "tools/flag_checks.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tierflow::cli {
namespace {

// Parses `args` (after the program name) into `app`; "" when accepted, else
// the error CLI11 throws.
std::string Parse(CLI::App& app, std::vector<std::string> args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(FlagChecks, NanInfinityAndValuesOutOfRangeAreRefusedNamingTheFlag) {
  const struct {
    CLI::Validator check;
    std::vector<std::string> refused, accepted;
  } cases[] = {
      {Positive(),
       {"nan", "NaN", "-nan", "inf", "-inf", "1e400", "0", "-0", "-1", "", "x"},
       {"1e-300", "0.5", "200"}},
      {AtLeast(1), {"nan", "inf", "0", "-4", "0.999", "1x"}, {"1", "4", "1e9"}},
      {AtLeast(0), {"nan", "-inf", "-1", "-1e-9"}, {"0", "7"}},
      {InRange(0, 1), {"nan", "inf", "-0.1", "1.5"}, {"0", "0.25", "1"}},
      {ByteSizeAtLeast(1), {"0", "-1", "lots", "nan"}, {"1", "4KiB", "2GiB"}},
      {CountAtLeast(2, "auto"), {"0", "1", "nan", "automatic"}, {"2", "4Mi", "auto"}},
  };
  for (const auto& c : cases) {
    for (const std::string& v : c.refused) {
      CLI::App app;
      double x = 0;
      app.add_option("--rate", x)->check(c.check);
      const std::string error = Parse(app, {"--rate", v});
      EXPECT_NE(error.find("--rate"), std::string::npos) << "'" << v << "': " << error;
    }
    for (const std::string& v : c.accepted) {
      CLI::App app;
      std::string x;
      app.add_option("--rate", x)->check(c.check);
      EXPECT_EQ(Parse(app, {"--rate", v}), "") << v;
    }
  }
}

TEST(FlagChecks, TheAuditFindsEveryNumericFlagWithoutACheck) {
  CLI::App app;
  int cores = 0;
  double tflops = 0, lr = 0;
  uint64_t seed = 0;
  std::vector<int64_t> steps;
  std::string name;
  bool json = false;
  CLI::App* plan = app.add_subcommand("plan");
  plan->add_option("--cores", cores);  // unchecked
  plan->add_option("--device-tflops", tflops)->check(Positive());
  plan->add_option("--model", name);  // text: not numeric
  plan->add_flag("--json", json);     // a flag: not numeric
  CLI::App* train = app.add_subcommand("train");
  train->add_option("--lr", lr)->check(CLI::PositiveNumber);  // CLI11's lets NaN through
  train->add_option("--seed", seed)->check(AnyValue());
  train->add_option("--trace-steps", steps);  // a list of numbers: numeric
  EXPECT_EQ(UncheckedNumericFlags(app),
            (std::vector<std::string>{"plan --cores", "train --lr", "train --trace-steps"}));
}

}  // namespace
}  // namespace tierflow::cli
