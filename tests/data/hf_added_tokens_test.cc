// AddedTokenMatcher and its automaton (longest_match.h) against plain
// references: the longest string at each position by comparing every string,
// and the matcher as it was before the automaton (every token compared at
// every position, longest first), on random texts and token sets built to
// overlap, nest and share prefixes and suffixes.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/hf_added_tokens.h"
#include "data/longest_match.h"
#include "data/unicode_class.h"

namespace tierflow {
namespace {

// Random strings over a small alphabet (so they overlap), with spaces, a
// word character class mix and a two-byte character.
std::string RandomText(std::mt19937& rng, size_t max_len) {
  static const char* kPieces[] = {"a", "b", "<", ">", " ", "_", "1", "\xC3\xA9"};
  std::string s;
  const size_t len = 1 + rng() % max_len;
  while (s.size() < len) s += kPieces[rng() % 8];
  return s;
}

// REQUIRES: max_len >= 2 (there are only 8 strings of one piece).
std::vector<std::string> RandomStrings(std::mt19937& rng, size_t count, size_t max_len) {
  std::vector<std::string> out;
  while (out.size() < count) {
    std::string s = RandomText(rng, max_len);
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

TEST(LongestMatchFinder, FindsTheLongestStringAtEveryPositionAsComparingAllDoes) {
  std::mt19937 rng(1);
  for (int round = 0; round < 300; ++round) {
    const std::vector<std::string> strings = RandomStrings(rng, 1 + rng() % 12, 2 + rng() % 5);
    const std::vector<std::string_view> views(strings.begin(), strings.end());
    const LongestMatchFinder finder(views);
    const std::string text = RandomText(rng, 200);
    std::vector<LongestMatchFinder::Match> expected;
    for (size_t i = 0; i < text.size(); ++i) {
      int best = -1;
      for (size_t k = 0; k < strings.size(); ++k) {
        if (text.compare(i, strings[k].size(), strings[k]) == 0 &&
            (best < 0 || strings[k].size() > strings[best].size())) {
          best = static_cast<int>(k);
        }
      }
      if (best >= 0) expected.push_back({i, static_cast<uint32_t>(best)});
    }
    uint64_t steps = 0;
    const auto got = finder.FindLongestAt(text, &steps);
    ASSERT_EQ(got.size(), expected.size()) << "round " << round;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].begin, expected[k].begin);
      EXPECT_EQ(got[k].string, expected[k].string) << "at " << got[k].begin;
    }
    EXPECT_LE(steps, 2 * text.size());
  }
  EXPECT_TRUE(LongestMatchFinder().FindLongestAt("abc").empty());
}

// The matcher before the automaton (hf_added_tokens.cc at the time of issue
// #40): every token compared at every position, longest first.
std::vector<TextSegment> ReferenceSplit(const std::vector<AddedToken>& tokens,
                                        std::string_view text) {
  const auto word_before = [&](size_t pos) {
    if (pos == 0) return false;
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    char32_t cp = 0;
    return data_internal::DecodeUtf8(text, start, &cp) > 0 && data_internal::IsWordCodePoint(cp);
  };
  const auto word_after = [&](size_t pos) {
    char32_t cp = 0;
    return pos < text.size() && data_internal::DecodeUtf8(text, pos, &cp) > 0 &&
           data_internal::IsWordCodePoint(cp);
  };
  std::vector<const AddedToken*> longest_first;
  for (const AddedToken& t : tokens) longest_first.push_back(&t);
  std::stable_sort(longest_first.begin(), longest_first.end(),
                   [](const AddedToken* a, const AddedToken* b) {
                     return a->content.size() > b->content.size();
                   });
  std::vector<TextSegment> out;
  size_t plain_begin = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken* t : longest_first) {
      if (text.compare(pos, t->content.size(), t->content) == 0) {
        match = t;
        break;
      }
    }
    if (match != nullptr && match->single_word &&
        (word_before(pos) || word_after(pos + match->content.size()))) {
      match = nullptr;
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + match->content.size();
    if (match->lstrip) begin = std::max(plain_begin, data_internal::SkipSpaceBackward(text, begin));
    if (match->rstrip) end = data_internal::SkipSpaceForward(text, end);
    if (begin > plain_begin) out.push_back({plain_begin, begin, -1});
    out.push_back({begin, end, match->id});
    plain_begin = pos = end;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
  return out;
}

TEST(AddedTokenMatcher, SplitsAsComparingEveryTokenDid) {
  std::mt19937 rng(2);
  for (int round = 0; round < 400; ++round) {
    std::vector<AddedToken> tokens;
    int32_t id = 10;
    for (const std::string& content : RandomStrings(rng, 1 + rng() % 8, 2 + rng() % 4)) {
      AddedToken t;
      t.id = id++;
      t.content = content;
      t.lstrip = rng() % 3 == 0;
      t.rstrip = rng() % 3 == 0;
      t.single_word = rng() % 3 == 0;
      tokens.push_back(t);
    }
    const AddedTokenMatcher matcher(tokens);
    const std::string text = RandomText(rng, 120);
    const std::vector<TextSegment> got = matcher.Split(text);
    const std::vector<TextSegment> expected = ReferenceSplit(tokens, text);
    ASSERT_EQ(got.size(), expected.size()) << "round " << round << " text \"" << text << "\"";
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].begin, expected[k].begin) << "round " << round;
      EXPECT_EQ(got[k].end, expected[k].end) << "round " << round;
      EXPECT_EQ(got[k].token, expected[k].token) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace tierflow
