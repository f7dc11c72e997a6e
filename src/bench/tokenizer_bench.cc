// RunTokenizerBench.
#include "bench/tokenizer_bench.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

namespace tierflow {
namespace {

using Clock = std::chrono::steady_clock;

// `text` cut after a newline near each 1/n mark (a chunk never splits a
// UTF-8 character: newlines are single bytes).
std::vector<std::string_view> Chunks(std::string_view text, int n) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  for (int i = 1; i <= n && begin < text.size(); ++i) {
    size_t end = i == n ? text.size() : text.size() * static_cast<size_t>(i) / n;
    if (end < begin) end = begin;
    const size_t nl = text.find('\n', end);
    end = i == n || nl == std::string_view::npos ? text.size() : nl + 1;
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

// Encodes every chunk on its own thread, `iterations` times after a warm-up;
// the best wall time, and the tokens of one pass.
StatusOr<std::pair<double, int64_t>> TimeChunks(const Tokenizer& tokenizer,
                                                const std::vector<std::string_view>& chunks,
                                                int iterations) {
  double best = 0;
  int64_t tokens = 0;
  for (int it = 0; it <= iterations; ++it) {
    std::vector<Status> status(chunks.size());
    std::vector<int64_t> counts(chunks.size(), 0);
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (size_t c = 0; c < chunks.size(); ++c) {
      threads.emplace_back([&, c] {
        auto ids = tokenizer.Encode(chunks[c]);
        if (!ids.ok()) {
          status[c] = ids.status().WithContext("chunk " + std::to_string(c));
          return;
        }
        counts[c] = static_cast<int64_t>(ids->size());
      });
    }
    for (std::thread& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (const Status& s : status) TF_RETURN_IF_ERROR(s);
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    if (it == 0) {
      tokens = total;  // the untimed warm-up pass
      continue;
    }
    if (total != tokens) {
      return InternalError("the tokenizer gave " + std::to_string(total) + " tokens, then " +
                           std::to_string(tokens) + " for the same text");
    }
    best = best == 0 ? seconds : std::min(best, seconds);
  }
  return std::pair{best, tokens};
}

}  // namespace

StatusOr<TokenizerBenchResult> RunTokenizerBench(const Tokenizer& tokenizer,
                                                 const std::string& text,
                                                 const TokenizerBenchOptions& options) {
  if (text.empty()) return InvalidArgumentError("bench tokenizer: the text is empty");
  if (options.iterations < 1) {
    return InvalidArgumentError("bench tokenizer: iterations must be at least 1");
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::vector<std::string_view> chunks = Chunks(text, threads);
  TokenizerBenchResult r;
  r.tokenizer = tokenizer.Describe();
  r.text_bytes = static_cast<int64_t>(text.size());
  r.threads = static_cast<int>(chunks.size());
  // One thread over the same chunks, one after another.
  double single_seconds = 0;
  for (std::string_view chunk : chunks) {
    TF_ASSIGN_OR_RETURN(auto one, TimeChunks(tokenizer, {chunk}, options.iterations));
    single_seconds += one.first;
  }
  TF_ASSIGN_OR_RETURN(auto all, TimeChunks(tokenizer, chunks, options.iterations));
  r.tokens = all.second;
  const double mb = static_cast<double>(text.size()) / 1e6;
  r.single_mb_per_s = mb / std::max(single_seconds, 1e-9);
  r.all_mb_per_s = mb / std::max(all.first, 1e-9);
  r.scaling = r.all_mb_per_s / (r.threads * r.single_mb_per_s);
  r.bytes_per_token = r.tokens > 0 ? static_cast<double>(text.size()) / r.tokens : 0;
  return r;
}

}  // namespace tierflow
