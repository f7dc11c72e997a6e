// Outside text (a path, a JSON key, a command-line argument, an environment
// variable) made safe to quote into an error message or a JSON document.
//
// Outside bytes need not be UTF-8: printed raw they garble a terminal (or
// drive it, through escape sequences), and nlohmann-json refuses to dump a
// string holding them (a type_error that would end the command as a bug).
// Every place that quotes outside text goes through these: Status messages
// (tierflow/status.h), the warnings of a config, the command line's parse
// errors, and each command's --json output (io/json_util.h, JsonOutput).
#pragma once

#include <string>
#include <string_view>

namespace tierflow {

// `text` with every byte that is not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF)
// written as the four characters \xNN. Well-formed UTF-8 is kept as is, so
// valid text (names in any script) reads unchanged.
std::string EscapeInvalidUtf8(std::string_view text);

// EscapeInvalidUtf8, and control characters (C0, DEL, C1) other than newline
// and tab written as \xNN too: text that is safe to print on a terminal.
// Idempotent: already printable text comes back unchanged.
std::string PrintableText(std::string_view text);

}  // namespace tierflow
