// `tierflow bench tokenizer`: MB/s of text a tokenizer encodes, on one
// thread and on all (bench/tokenizer_bench.h).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/tokenizer_bench.h"
#include "io/file_reader.h"
#include "io/json_util.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

constexpr size_t kMaxBenchTextBytes = size_t{1} << 30;

struct TokenizerFlags {
  std::string tokenizer;
  std::string text_file;
  TokenizerBenchOptions bench;
  bool json = false;
};

Status Run(const TokenizerFlags& f) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(f.tokenizer));
  std::string text;
  if (f.text_file.empty()) {
    // The bundled corpus, 32 times over (about 3 MB).
    TF_ASSIGN_OR_RETURN(std::string corpus,
                        ReadFileToString(std::string(TIERFLOW_SOURCE_DIR) + "/data/tiny_corpus.txt",
                                         kMaxBenchTextBytes));
    for (int i = 0; i < 32; ++i) text += corpus;
  } else {
    TF_ASSIGN_OR_RETURN(text, ReadFileToString(f.text_file, kMaxBenchTextBytes));
  }
  TF_ASSIGN_OR_RETURN(TokenizerBenchResult r, RunTokenizerBench(*tokenizer, text, f.bench));
  if (f.json) {
    nlohmann::json j = {{"tokenizer", r.tokenizer},
                        {"text_bytes", r.text_bytes},
                        {"tokens", r.tokens},
                        {"bytes_per_token", r.bytes_per_token},
                        {"threads", r.threads},
                        {"single_thread_mb_per_s", r.single_mb_per_s},
                        {"all_threads_mb_per_s", r.all_mb_per_s},
                        {"scaling", r.scaling}};
    std::printf("%s\n", JsonOutput(j).c_str());
    return Status::Ok();
  }
  std::printf("tokenizer: %s\ntext: %.2f MB, %lld tokens (%.2f bytes/token)\n", r.tokenizer.c_str(),
              static_cast<double>(r.text_bytes) / 1e6, static_cast<long long>(r.tokens),
              r.bytes_per_token);
  std::printf("1 thread:   %8.2f MB/s\n%d threads: %8.2f MB/s (scaling %.2f of linear)\n",
              r.single_mb_per_s, r.threads, r.all_mb_per_s, r.scaling);
  return Status::Ok();
}

}  // namespace

void AddBenchTokenizer(CLI::App& bench, int* exit_code) {
  auto f = std::make_shared<TokenizerFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "tokenizer", "MB/s of text a tokenizer encodes, on one thread and on all at once");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "byte | tokenizer.json | tokenizer.model | a model or tokenizer directory")
      ->required();
  cmd->add_option("--text-file", f->text_file, "Text to encode (default: the bundled corpus x32)");
  cmd->add_option("--threads", f->bench.threads, "Threads for the parallel figure (0 = all)")
      ->capture_default_str()
      ->check(AtLeast(0));
  cmd->add_option("--iterations", f->bench.iterations, "Timed passes (the best counts)")
      ->capture_default_str()
      ->check(AtLeast(1));
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([f, exit_code] {
    if (Status s = Run(*f); !s.ok()) {
      std::fprintf(stderr, "tierflow bench tokenizer: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
