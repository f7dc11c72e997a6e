// `tierflow bench tokenizer`: how fast a tokenizer encodes text, in MB of
// UTF-8 per second, on one thread and on N at once.
//
// The text (a file, or the bundled corpus) is cut at line ends into N chunks
// of about equal size; each thread encodes its chunk `iterations` times
// (after one untimed pass, so piece caches are warm as in a long run) and
// the best wall time counts. The single-thread figure encodes the whole text
// on one thread the same way. Scaling is the N-thread rate over N times the
// single-thread rate (1.0: perfect). Token counts are checked to agree: the
// chunks' tokens add up to what one pass over the same chunks gives.
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer.h"
#include "tierflow/status.h"

namespace tierflow {

struct TokenizerBenchOptions {
  int threads = 0;     // N; 0 = every hardware thread. Default: 0
  int iterations = 3;  // timed passes (>= 1). Default: 3
};

struct TokenizerBenchResult {
  std::string tokenizer;  // Describe()
  int64_t text_bytes = 0;
  int64_t tokens = 0;  // of one pass over the chunks
  int threads = 0;
  double single_mb_per_s = 0;
  double all_mb_per_s = 0;
  double scaling = 0;  // all / (threads * single)
  double bytes_per_token = 0;
};

// Errors: InvalidArgument for an empty text or iterations < 1; the
// tokenizer's error for text it refuses (naming the chunk).
StatusOr<TokenizerBenchResult> RunTokenizerBench(const Tokenizer& tokenizer,
                                                 const std::string& text,
                                                 const TokenizerBenchOptions& options);

}  // namespace tierflow
