// tokenizer_config.json, the transformers-side companion of tokenizer.json:
// which tokens are BOS/EOS/padding, whether BOS/EOS are added, and the chat
// template.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

struct HfTokenizerConfig {
  // Token texts; unset when absent or null. transformers writes either a
  // string or an AddedToken object ({"content": ...}); both are read.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  // Set only when the file says so (LlamaTokenizerFast then rebuilds the
  // post-processor from them).
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // The Jinja chat template (the "default" one where the file lists several),
  // or empty.
  std::string chat_template;
};

// Errors: InvalidArgument naming `name` and the field for a malformed file.
StatusOr<HfTokenizerConfig> ParseHfTokenizerConfig(std::string_view text, const std::string& name);

}  // namespace tierflow
