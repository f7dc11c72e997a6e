// Capability skips that a machine can turn into failures.
//
// A test that needs something this machine may lack (a GPU, a memlock limit
// to exceed, tmpfs, SSE4.2, a real GPT-2 vocabulary) skips, visibly, with the
// reason. On a machine that is known to have the capability, a skip would
// hide a broken detection or setup, so TIERFLOW_REQUIRE (a comma-separated
// list such as "gpu,memlock") turns the skip of each named capability into a
// failure:
//
//   if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
//
// Capabilities in use: gpu, memlock, tmpfs, sse42, nvme, gpt2-vocab.
// An unknown name in TIERFLOW_REQUIRE fails every test that checks one, so a
// typo cannot silently require nothing.
#pragma once

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace tierflow::testing_common {

inline const std::set<std::string>& KnownCapabilities() {
  static const std::set<std::string> known = {"gpu",   "memlock", "tmpfs",
                                              "sse42", "nvme",    "gpt2-vocab"};
  return known;
}

// The capabilities `list` (TIERFLOW_REQUIRE's syntax) names.
inline std::set<std::string> ParseRequiredCapabilities(std::string_view list) {
  std::set<std::string> out;
  std::stringstream in{std::string(list)};
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.insert(item.substr(b, e - b + 1));
  }
  return out;
}

// True when TIERFLOW_REQUIRE names `capability`, or names something unknown.
inline bool CapabilityRequired(std::string_view capability) {
  const char* env = std::getenv("TIERFLOW_REQUIRE");
  if (env == nullptr) return false;
  for (const std::string& c : ParseRequiredCapabilities(env)) {
    if (c == capability || KnownCapabilities().count(c) == 0) return true;
  }
  return false;
}

inline std::string CapabilityNote(std::string_view capability) {
  return CapabilityRequired(capability)
             ? "TIERFLOW_REQUIRE names '" + std::string(capability) +
                   "' (or an unknown capability), but this machine lacks it"
             : "skipped: this machine lacks '" + std::string(capability) + "'";
}

}  // namespace tierflow::testing_common

// Skips the current test (or fails it when the capability is required);
// stream the reason into it. Like GTEST_SKIP, returns from the function.
#define TIERFLOW_SKIP_WITHOUT(capability)                                                          \
  return ::testing::internal::AssertHelper(                                                        \
             ::tierflow::testing_common::CapabilityRequired(capability)                            \
                 ? ::testing::TestPartResult::kFatalFailure                                        \
                 : ::testing::TestPartResult::kSkip,                                               \
             __FILE__, __LINE__, ::tierflow::testing_common::CapabilityNote(capability).c_str()) = \
             ::testing::Message()
