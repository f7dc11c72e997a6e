// A model's tokenizer, generation and chat-template files (io/hf_side_files.h).
#include "io/hf_side_files.h"

#include <filesystem>
#include <system_error>

#include "io/file_reader.h"

namespace tierflow {

const std::vector<std::string>& HfSideFileNames() {
  static const std::vector<std::string> kNames = {
      "tokenizer.json",    "tokenizer_config.json",  "special_tokens_map.json",
      "added_tokens.json", "tokenizer.model",        "vocab.json",
      "merges.txt",        "generation_config.json", "chat_template.jinja",
      "chat_template.json"};
  return kNames;
}

size_t HfSideFiles::bytes() const {
  size_t n = 0;
  for (const auto& [name, contents] : files) n += contents.size();
  return n;
}

StatusOr<HfSideFiles> ReadHfSideFiles(const std::string& source_dir) {
  namespace stdfs = std::filesystem;
  HfSideFiles side;
  for (const std::string& name : HfSideFileNames()) {
    const stdfs::path from = stdfs::path(source_dir) / name;
    std::error_code ec;
    if (!stdfs::exists(from, ec)) {
      if (ec && ec != std::errc::no_such_file_or_directory) {
        return IoError("look for " + from.string() + ": " + ec.message());
      }
      continue;
    }
    const size_t left = kMaxHfSideFilesBytes - side.bytes();
    auto contents = ReadFileToString(from.string(), left);
    if (!contents.ok()) {
      return contents.status().WithContext(
          "the model's side files (tokenizer, generation config) may hold " +
          std::to_string(kMaxHfSideFilesBytes >> 20) + " MiB together");
    }
    side.files.emplace_back(name, std::move(contents).value());
  }
  return side;
}

Status WriteHfSideFiles(const HfSideFiles& side, const std::string& dest_dir, FileSystem* fs) {
  for (const auto& [name, contents] : side.files) {
    TF_RETURN_IF_ERROR(WriteStringToFileAtomically(
        fs, (std::filesystem::path(dest_dir) / name).string(), contents));
  }
  return Status::Ok();
}

}  // namespace tierflow
