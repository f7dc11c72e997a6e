// The numeric flags' range checks (CLI11 validators) and their audit.
#include "tools/flag_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "common/printable.h"
#include "common/units.h"

namespace tierflow::cli {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

// The text as CLI11 got it, quoted and printable (it comes from the user).
std::string Shown(const std::string& text) { return "'" + PrintableText(text) + "'"; }

// A finite number within [min, max], or the error CLI11 prefixes with the flag.
std::string CheckNumber(const std::string& text, double min, double max,
                        const std::string& wanted) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return Shown(text) + " is not a number; give " + wanted;
  }
  if (!std::isfinite(v) || errno == ERANGE) {
    return Shown(text) + " is not a finite number; give " + wanted;
  }
  if (v < min || v > max) return text + " is out of range; give " + wanted;
  return {};
}

CLI::Validator Numeric(double min, double max, const std::string& wanted, std::string description) {
  return CLI::Validator([=](std::string& text) { return CheckNumber(text, min, max, wanted); },
                        std::move(description), kRangeCheck);
}

}  // namespace

CLI::Validator AtLeast(double min) {
  return Numeric(min, HUGE_VAL, "a number of at least " + Num(min), ">=" + Num(min));
}

CLI::Validator InRange(double min, double max) {
  return Numeric(min, max, "a number from " + Num(min) + " to " + Num(max),
                 "in [" + Num(min) + ", " + Num(max) + "]");
}

CLI::Validator Positive() {
  // The smallest positive double: 0 is out, any positive finite value in.
  return Numeric(std::nextafter(0.0, 1.0), HUGE_VAL, "a positive number", ">0");
}

CLI::Validator AnyValue() {
  return CLI::Validator([](std::string&) { return std::string(); }, "", kRangeCheck);
}

CLI::Validator ByteSizeAtLeast(uint64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        StatusOr<uint64_t> n = ParseByteSize(text);
        if (!n.ok()) return n.status().message();
        if (*n < min) {
          return Shown(text) + " is too small; give " +
                 (min <= 1
                      ? std::string("a positive size")
                      : "at least " + FormatBytes(min) + " (" + std::to_string(min) + " bytes)");
        }
        return {};
      },
      "SIZE>=" + std::to_string(min), kRangeCheck);
}

CLI::Validator CountAtLeast(uint64_t min, const std::string& keyword) {
  return CLI::Validator(
      [min, keyword](std::string& text) -> std::string {
        if (!keyword.empty() && text == keyword) return {};
        StatusOr<uint64_t> n = ParseCount(text);
        if (!n.ok()) return n.status().message();
        if (*n < min) {
          return Shown(text) + " is too small; give a count of at least " + std::to_string(min) +
                 (keyword.empty() ? "" : ", or " + keyword);
        }
        return {};
      },
      "COUNT>=" + std::to_string(min), kRangeCheck);
}

std::vector<std::string> UncheckedNumericFlags(const CLI::App& app) {
  std::vector<std::string> out;
  auto visit = [&](const CLI::App& a, const std::string& path, auto&& self) -> void {
    for (const CLI::Option* opt : a.get_options()) {
      const std::string type = opt->get_type_name();
      const bool numeric = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 ||
                           type.rfind("FLOAT", 0) == 0 || type.rfind("NUMBER", 0) == 0;
      if (!numeric) continue;
      // get_validator is not const in CLI11 2.1; it only looks the name up.
      bool checked = true;
      try {
        const_cast<CLI::Option*>(opt)->get_validator(kRangeCheck);
      } catch (const CLI::OptionNotFound&) {
        checked = false;
      }
      if (!checked) out.push_back(path + opt->get_name());
    }
    for (const CLI::App* sub : a.get_subcommands([](const CLI::App*) { return true; })) {
      self(*sub, path + sub->get_name() + " ", self);
    }
  };
  visit(app, "", visit);
  return out;
}

}  // namespace tierflow::cli
