// GPT-2's byte-to-unicode alphabet: how vocab.json and merges.txt write bytes.
//
// GPT-2's vocabulary files store each token's bytes as printable characters:
// bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves, and the other 68 bytes map in order to U+0100..U+0143 (so the
// space 0x20 is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). This is bytes_to_unicode()
// from OpenAI's encoder.py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// The code point that stands for byte `b`.
char32_t Gpt2ByteToCodePoint(uint8_t b);
// The byte that code point `cp` stands for, or -1 when `cp` is not one of the
// 256 characters of the alphabet.
int Gpt2CodePointToByte(char32_t cp);

// Raw bytes -> the UTF-8 text vocab.json uses for them (" the" -> "Ġthe").
std::string Gpt2BytesToVocabText(std::string_view bytes);
// The inverse. Errors: InvalidArgument when `text` is not UTF-8 or holds a
// character outside the alphabet (naming it as U+XXXX).
StatusOr<std::string> Gpt2VocabTextToBytes(std::string_view text);

}  // namespace tierflow
