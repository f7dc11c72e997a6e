// The bundled corpus the default `tierflow train` uses: plain ASCII, big
// enough, and loadable through the byte tokenizer into tiny-preset batches
// with a held-out split.
#include <string>

#include <gtest/gtest.h>

#include "data/byte_tokenizer.h"
#include "data/data_loader.h"
#include "data/text_dataset.h"
#include "io/file_reader.h"

namespace tierflow {
namespace {

const std::string kCorpus = std::string(TIERFLOW_SOURCE_DIR) + "/data/tiny_corpus.txt";

TEST(TinyCorpus, IsPlainAsciiAndAtLeast100KB) {
  auto text = ReadFileToString(kCorpus, size_t{64} << 20);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_GE(text->size(), 100u * 1000u);
  EXPECT_LE(text->size(), 300u * 1024u);
  for (size_t i = 0; i < text->size(); ++i) {
    const auto c = static_cast<unsigned char>((*text)[i]);
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7F)) << "byte " << int(c) << " at offset " << i;
  }
}

TEST(TinyCorpus, LoadsIntoTinyPresetBatches) {
  ByteTokenizer byte;
  DatasetOptions o;
  o.path = kCorpus;
  o.vocab_size = 256;  // tiny-gpt2 / tiny-llama
  auto tokens = LoadTokens(o, &byte);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  DataLoaderOptions lo;
  lo.batch = 8;
  lo.seq_len = 256;  // the tiny presets' max_seq_len
  auto loader = DataLoader::Create(*tokens, lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_GE(loader->batches_per_epoch(), 40);
  EXPECT_GE(loader->num_eval_batches(), 2);
  TokenBatch b;
  loader->Next(&b);
  EXPECT_EQ(byte.Decode(b.targets).size(), b.targets.size());  // ASCII: one byte per token
}

}  // namespace
}  // namespace tierflow
