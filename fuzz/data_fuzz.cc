// Fuzz entry points for the data pipeline's inputs: tokenizer files, text
// to encode, token files and saved data-loader positions.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/gpt2_pretokenize.h"
#include "data/hf_tokenizer.h"
#include "data/token_source.h"
#include "fuzz/entry_points.h"
#include "fuzz/fuzz_check.h"

namespace tierflow::fuzz {
namespace {

// Texts every accepted tokenizer must round-trip (its vocabulary holds all
// 256 bytes, so any valid UTF-8 encodes).
constexpr std::string_view kProbeTexts[] = {"Hello world, it's 2024!",
                                            "  héllo\n\n  wörld <|endoftext|> ok", "",
                                            "\t \xe4\xb8\xad\xe6\x96\x87"};

void CheckRoundTrips(const Gpt2BpeTokenizer& tok) {
  FUZZ_CHECK(tok.eot_token() >= 0 && tok.eot_token() < tok.vocab_size());
  for (std::string_view text : kProbeTexts) {
    StatusOr<std::vector<int32_t>> ids = tok.Encode(text);
    FUZZ_CHECK(ids.ok());
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    FUZZ_CHECK(tok.Decode(*ids) == text);
  }
}

// Independent well-formedness check (Unicode 14 table 3-7): the oracle for
// the pre-tokenizer's UTF-8 errors. Returns the offset of the first bad byte,
// or npos.
size_t FirstBadUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t c = b(i);
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0) {
      len = 3;
      lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      len = 3;
    else if (c == 0xED) {
      len = 3;
      hi = 0x9F;
    } else if (c == 0xF0) {
      len = 4;
      lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4) {
      len = 4;
      hi = 0x8F;
    } else
      return i;
    if (len > 1) {
      if (i + 1 >= s.size() || b(i + 1) < lo || b(i + 1) > hi) return i;
      for (size_t k = 2; k < len; ++k) {
        if (i + k >= s.size() || b(i + k) < 0x80 || b(i + k) > 0xBF) return i;
      }
    }
    i += len;
  }
  return std::string_view::npos;
}

// A GPT-2-style tokenizer built once: all bytes, <|endoftext|>, and a few
// merges ("h"+"e", "he"+"l", " "+"t", "l"+"l"), so Encode exercises BPE.
const Gpt2BpeTokenizer& SmallTokenizer() {
  static const std::unique_ptr<Gpt2BpeTokenizer> tok = [] {
    std::vector<Gpt2BpeTokenizer::Token> vocab;
    for (int b = 0; b < 256; ++b) vocab.push_back({std::string(1, static_cast<char>(b)), b});
    int64_t id = 256;
    std::vector<Gpt2BpeTokenizer::Merge> merges;
    for (auto [l, r] :
         {std::pair<const char*, const char*>{"h", "e"}, {"he", "l"}, {" ", "t"}, {"l", "l"}}) {
      merges.push_back({l, r, "merge " + std::to_string(id)});
      vocab.push_back({std::string(l) + r, id++});
    }
    vocab.push_back({"<|endoftext|>", id++});
    StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> t =
        Gpt2BpeTokenizer::Create(std::move(vocab), std::move(merges), "fuzz vocabulary");
    FUZZ_CHECK(t.ok());
    return std::move(*t);
  }();
  return *tok;
}

}  // namespace

// Any tokenizer.json that loads encodes the probes to ids in its vocabulary
// or refuses with a message (a normalizer may rewrite text, and a vocabulary
// without byte fallback may lack a character, so round trips are not owed),
// and decodes any ids, in range or not.
void FuzzTokenizerJson(std::string_view data) {
  StatusOr<std::unique_ptr<HfTokenizer>> tok =
      HfTokenizer::Create(data, "fuzz/tokenizer.json", nullptr);
  if (!tok.ok()) {
    FUZZ_CHECK(!tok.status().message().empty());
    return;
  }
  const HfTokenizer& t = **tok;
  FUZZ_CHECK(t.eot_token() >= 0 && t.eot_token() < t.vocab_size());
  for (std::string_view text : kProbeTexts) {
    StatusOr<std::vector<int32_t>> ids = t.EncodeWithSpecialTokens(text);
    if (!ids.ok()) {
      FUZZ_CHECK(!ids.status().message().empty());
      continue;
    }
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < t.vocab_size());
    (void)t.Decode(*ids);
  }
  const int32_t odd[] = {-1, t.vocab_size(), 0, INT32_MAX};
  (void)t.Decode(odd);
}

void FuzzVocabMerges(std::string_view data) {
  const size_t nul = data.find('\0');
  const std::string_view vocab = data.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos ? "" : data.substr(nul + 1);
  StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> tok =
      Gpt2BpeTokenizer::FromVocabAndMergesText(vocab, merges, "fuzz/vocab.json", "fuzz/merges.txt");
  if (!tok.ok()) {
    FUZZ_CHECK(!tok.status().message().empty());
    return;
  }
  CheckRoundTrips(**tok);
}

void FuzzGpt2Encode(std::string_view data) {
  const size_t bad = FirstBadUtf8(data);
  StatusOr<std::vector<std::string_view>> pieces = SplitGpt2Pieces(data);
  FUZZ_CHECK(pieces.ok() == (bad == std::string_view::npos));
  if (pieces.ok()) {
    std::string joined;
    for (std::string_view p : *pieces) {
      FUZZ_CHECK(!p.empty());
      joined += p;
    }
    FUZZ_CHECK(joined == data);
  } else {
    FUZZ_CHECK(pieces.status().message().find(std::to_string(bad)) != std::string::npos);
  }
  const Gpt2BpeTokenizer& tok = SmallTokenizer();
  StatusOr<std::vector<int32_t>> ids = tok.Encode(data);
  FUZZ_CHECK(ids.ok() == pieces.ok());
  if (ids.ok()) {
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    FUZZ_CHECK(tok.Decode(*ids) == data);
  }
}

void FuzzTokenFile(std::string_view data) {
  constexpr int32_t kVocab = 50257;
  const std::string path = WriteFuzzFile("tokens.bin", data);
  for (std::optional<TokenDtype> dtype :
       {std::optional<TokenDtype>(), std::optional<TokenDtype>(TokenDtype::kU32)}) {
    StatusOr<TokenSource> src = OpenTokenFile(path, dtype, kVocab);
    if (!src.ok()) {
      FUZZ_CHECK(!src.status().message().empty());
      continue;
    }
    // Accepted: a positive number of ids, all inside the vocabulary, that
    // fit in the file.
    FUZZ_CHECK(src->size() > 0);
    FUZZ_CHECK(static_cast<uint64_t>(src->size()) * src->element_bytes() <= data.size());
    std::vector<int32_t> ids(static_cast<size_t>(src->size()));
    src->Read(0, src->size(), ids.data());
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < kVocab);
  }
}

void FuzzDataLoaderState(std::string_view data) {
  static const TokenSource tokens = [] {
    std::vector<int32_t> ids(200);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 97);
    StatusOr<TokenSource> t = TokenSource::FromTokens(std::move(ids), "fuzz tokens", 97);
    FUZZ_CHECK(t.ok());
    return *t;
  }();
  const nlohmann::json state = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded()) return;
  for (bool shuffle : {true, false}) {
    DataLoaderOptions options;
    options.batch = 2;
    options.seq_len = 4;
    options.shuffle = shuffle;
    options.seed = 7;
    options.eval_fraction = 0.1;
    StatusOr<DataLoader> loader = DataLoader::Create(tokens, options);
    FUZZ_CHECK(loader.ok());
    const Status restored = loader->RestoreState(state);
    if (!restored.ok()) {
      FUZZ_CHECK(!restored.message().empty());
      continue;
    }
    // Accepted: the position is one the loader can serve from.
    const DataPosition p = loader->position();
    FUZZ_CHECK(p.epoch >= 0 && p.index >= 0 && p.index < loader->batches_per_epoch());
    TokenBatch batch;
    loader->Next(&batch);
    FUZZ_CHECK(batch.inputs.size() == 8 && batch.targets.size() == 8);
    FUZZ_CHECK(loader->SaveState().dump().size() > 0);
  }
}

}  // namespace tierflow::fuzz
