// UTF-8 decoding and the character classes GPT-2's pre-tokenizer regex uses.
//
// GPT-2 splits text with the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// which needs three classes of code points: letters (\p{L}: general categories
// Lu, Ll, Lt, Lm, Lo), numbers (\p{N}: Nd, Nl, No) and whitespace (\s). The
// letter and number tables are generated from Unicode 14.0 (see
// gen_unicode_tables.py), so they are exact for that version, ASCII included.
// Whitespace is Unicode's White_Space property, which is what \s means in
// Python's `regex` module that GPT-2's encoder.py uses.
#pragma once

#include <cstddef>
#include <string_view>

namespace tierflow::data_internal {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass ClassifyCodePoint(char32_t cp);

// Decodes the UTF-8 sequence starting at text[pos] (REQUIRES pos < size) into
// *cp and returns its length in bytes (1-4). Returns 0 when the bytes there are
// not well-formed UTF-8: a stray continuation byte, a truncated sequence, an
// overlong form, a surrogate, or a value above U+10FFFF.
int DecodeUtf8(std::string_view text, size_t pos, char32_t* cp);

// The byte offset of the first byte of `text` that is not well-formed UTF-8,
// or std::string_view::npos when all of it is.
size_t FindInvalidUtf8(std::string_view text);

// For well-formed UTF-8 `text`: the first offset at or after `pos` that does
// not start a white-space character, and the last offset at or before `end`
// that does not follow one.
size_t SkipSpaceForward(std::string_view text, size_t pos);
size_t SkipSpaceBackward(std::string_view text, size_t end);

// A letter, a number or '_' (the word characters of tokenizers' single_word
// added tokens).
bool IsWordCodePoint(char32_t cp);

}  // namespace tierflow::data_internal
