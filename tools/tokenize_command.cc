// `tierflow tokenize`: a text's token ids, or ids' text, through the same
// tokenizer loading and encoding the trainer uses (data/tokenizer.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "data/token_id_text.h"
#include "data/tokenizer.h"
#include "io/file_reader.h"
#include "tools/commands.h"

namespace tierflow::cli {
namespace {

// Standard input read whole is capped like a text file; larger text belongs
// in a file (and in `tierflow train`, a token file).
constexpr size_t kMaxInputBytes = size_t{1} << 30;

struct TokenizeFlags {
  std::string tokenizer;
  std::string text_file;
  bool decode = false;
  bool json = false;
  bool special = false;
};

StatusOr<std::string> ReadInput(const std::string& path) {
  if (!path.empty() && path != "-") return ReadFileToString(path, kMaxInputBytes);
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const size_t n = std::fread(buffer, 1, sizeof(buffer), stdin);
    text.append(buffer, n);
    if (text.size() > kMaxInputBytes) {
      return InvalidArgumentError("standard input is over 1 GiB; put the text in a file");
    }
    if (n < sizeof(buffer)) break;
  }
  if (std::ferror(stdin)) return IoError("reading standard input failed");
  return text;
}

Status Run(const TokenizeFlags& f) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(f.tokenizer));
  TF_ASSIGN_OR_RETURN(std::string input, ReadInput(f.text_file));
  if (f.decode) {
    TF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIdText(input, tokenizer->vocab_size()));
    const std::string text = tokenizer->Decode(ids);
    if (f.json) {
      std::printf("%s\n", nlohmann::json(text)
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return Status::Ok();
  }
  StatusOr<std::vector<int32_t>> ids =
      f.special ? tokenizer->EncodeWithSpecialTokens(input) : tokenizer->Encode(input);
  if (!ids.ok()) {
    return ids.status().WithContext(f.text_file.empty() || f.text_file == "-" ? "standard input"
                                                                              : f.text_file);
  }
  if (f.json) {
    std::printf("%s\n", nlohmann::json(*ids).dump().c_str());
  } else {
    std::string line;
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i > 0) line += ' ';
      line += std::to_string((*ids)[i]);
    }
    std::printf("%s\n", line.c_str());
  }
  return Status::Ok();
}

}  // namespace

void AddTokenize(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Print the token ids of a text (or, with --decode, the text of token ids) with the "
      "tokenizer `tierflow train` would use");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "byte | tokenizer.json | tokenizer.model | a model or tokenizer directory")
      ->required();
  cmd->add_option("--text-file", f->text_file,
                  "The text (or, with --decode, the ids) to read; default: standard input");
  cmd->add_flag("--decode", f->decode,
                "Read token ids (a JSON array, or integers separated by spaces/commas) and print "
                "their text");
  cmd->add_flag("--json", f->json, "Print one JSON array of ids (with --decode: a JSON string)");
  cmd->add_flag("--special", f->special,
                "Add the tokens the tokenizer puts around a text (e.g. Llama's BOS), as Hugging "
                "Face's add_special_tokens=True");
  cmd->callback([f, exit_code] {
    if (Status s = Run(*f); !s.ok()) {
      std::fprintf(stderr, "tierflow tokenize: %s\n", s.ToString().c_str());
      *exit_code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  });
}

}  // namespace tierflow::cli
