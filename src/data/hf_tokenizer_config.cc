// tokenizer_config.json's fields tierflow uses.
#include "data/hf_tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "io/json_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

Status ReadTokenField(const Json& root, const JsonReader& reader, std::string_view key,
                      std::optional<std::string>* out) {
  const Json* value = JsonReader::Find(root, key);
  if (value == nullptr) return Status::Ok();
  std::string text;
  if (value->is_object()) {
    const Json* content = JsonReader::Find(*value, "content");
    if (content == nullptr) return reader.Error(std::string(key) + ".content", "is missing");
    TF_RETURN_IF_ERROR(reader.String(*content, std::string(key) + ".content", &text));
  } else {
    TF_RETURN_IF_ERROR(reader.String(*value, key, &text));
  }
  *out = std::move(text);
  return Status::Ok();
}

}  // namespace

StatusOr<HfTokenizerConfig> ParseHfTokenizerConfig(std::string_view text, const std::string& name) {
  // Depth-limited (a deep file would overflow the stack); duplicate keys
  // lenient, as Python, which wrote it, reads them.
  JsonParseOptions options;
  options.reject_duplicate_keys = false;
  Json root;
  if (Status parsed = ParseJson(text, name, options, &root); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  const JsonReader reader(name);
  TF_RETURN_IF_ERROR(reader.Object(root, "(the document)"));
  HfTokenizerConfig config;
  TF_RETURN_IF_ERROR(ReadTokenField(root, reader, "bos_token", &config.bos_token));
  TF_RETURN_IF_ERROR(ReadTokenField(root, reader, "eos_token", &config.eos_token));
  TF_RETURN_IF_ERROR(ReadTokenField(root, reader, "pad_token", &config.pad_token));
  for (auto [key, field] : {std::pair{"add_bos_token", &config.add_bos_token},
                            std::pair{"add_eos_token", &config.add_eos_token}}) {
    if (const Json* value = JsonReader::Find(root, key)) {
      bool flag = false;
      TF_RETURN_IF_ERROR(reader.Bool(*value, key, &flag));
      *field = flag;
    }
  }
  if (const Json* tmpl = JsonReader::Find(root, "chat_template")) {
    if (tmpl->is_array()) {
      // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (size_t i = 0; i < tmpl->size(); ++i) {
        const Json& item = (*tmpl)[i];
        const std::string path = "chat_template[" + std::to_string(i) + "]";
        TF_RETURN_IF_ERROR(reader.Object(item, path));
        std::string entry_name, entry;
        if (const Json* n = JsonReader::Find(item, "name")) {
          TF_RETURN_IF_ERROR(reader.String(*n, path + ".name", &entry_name));
        }
        if (const Json* t = JsonReader::Find(item, "template")) {
          TF_RETURN_IF_ERROR(reader.String(*t, path + ".template", &entry));
        }
        if (entry_name == "default" || config.chat_template.empty()) config.chat_template = entry;
      }
    } else {
      TF_RETURN_IF_ERROR(reader.String(*tmpl, "chat_template", &config.chat_template));
    }
  }
  return config;
}

}  // namespace tierflow
