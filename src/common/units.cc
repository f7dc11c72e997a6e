// Parsing and printing of byte sizes and counts.
#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace tierflow {
namespace {

bool ParseNumberPrefix(std::string_view text, double* value, std::string_view* rest) {
  std::string s(text);
  const char* begin = s.c_str();
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(v) || v < 0) return false;
  *value = v;
  *rest = text.substr(static_cast<size_t>(end - begin));
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  double v = 0;
  std::string_view rest;
  auto bad = [&] {
    return InvalidArgumentError("cannot read '" + std::string(text) +
                                "' as a byte size: write e.g. 4096, 512MiB, 2GiB, 1TB");
  };
  if (text.empty() || !ParseNumberPrefix(text, &v, &rest)) return bad();
  std::string suffix = Lower(rest);
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);
  double mult = 1;
  if (suffix.empty() || suffix == "b")
    mult = 1;
  else if (suffix == "k" || suffix == "kib" || suffix == "ki")
    mult = 1024.0;
  else if (suffix == "m" || suffix == "mib" || suffix == "mi")
    mult = 1024.0 * 1024;
  else if (suffix == "g" || suffix == "gib" || suffix == "gi")
    mult = 1024.0 * 1024 * 1024;
  else if (suffix == "t" || suffix == "tib" || suffix == "ti")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (suffix == "kb")
    mult = 1e3;
  else if (suffix == "mb")
    mult = 1e6;
  else if (suffix == "gb")
    mult = 1e9;
  else if (suffix == "tb")
    mult = 1e12;
  else
    return bad();
  double bytes = v * mult;
  if (bytes > 1.8e19) return bad();
  return static_cast<uint64_t>(std::llround(bytes));
}

StatusOr<uint64_t> ParseCount(std::string_view text) {
  double v = 0;
  std::string_view rest;
  auto bad = [&] {
    return InvalidArgumentError("cannot read '" + std::string(text) +
                                "' as a count: write e.g. 1000, 64M (64*10^6), 7B (7*10^9), "
                                "1e9 or 4Mi (4*2^20)");
  };
  if (text.empty() || !ParseNumberPrefix(text, &v, &rest)) return bad();
  const std::string suffix = Lower(rest);
  double mult = 1;
  if (suffix.empty())
    mult = 1;
  else if (suffix == "k")
    mult = 1e3;
  else if (suffix == "m")
    mult = 1e6;
  else if (suffix == "b" || suffix == "g")
    mult = 1e9;
  else if (suffix == "t")
    mult = 1e12;
  else if (suffix == "ki")
    mult = 1024.0;
  else if (suffix == "mi")
    mult = 1024.0 * 1024;
  else if (suffix == "gi")
    mult = 1024.0 * 1024 * 1024;
  else if (suffix == "ti")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return bad();
  double n = v * mult;
  if (n > 1.8e19) return bad();
  return static_cast<uint64_t>(std::llround(n));
}

std::string FormatBytes(uint64_t num_bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(num_bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(num_bytes));
  else
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace tierflow
