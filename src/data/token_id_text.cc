// ParseTokenIdText.
#include "data/token_id_text.h"

#include <charconv>
#include <string>

namespace tierflow {

StatusOr<std::vector<int32_t>> ParseTokenIdText(std::string_view text, int32_t vocab_size) {
  // A JSON array is the same list with brackets: strip them, then read items.
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    const size_t last = text.find_last_not_of(" \t\r\n");
    if (text[last] != ']') {
      return InvalidArgumentError("token ids: a JSON array that does not end with ']'");
    }
    text = text.substr(first + 1, last - first - 1);
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = text.find_first_not_of(" \t\r\n,", pos);
    if (begin == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t\r\n,", begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(begin, end - begin);
    int64_t value = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    const std::string where = "token ids: item " + std::to_string(ids.size() + 1) + " (\"" +
                              std::string(item.substr(0, 32)) + "\")";
    if (ec != std::errc() || ptr != item.data() + item.size()) {
      return InvalidArgumentError(where + " is not an integer");
    }
    if (value < 0 || value >= vocab_size) {
      return InvalidArgumentError(where + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(value));
    pos = end;
  }
  return ids;
}

}  // namespace tierflow
