// A setting with a fixed set of values, as an enum with one name table:
// ChoiceNames<E>::kTable pairs each value with the text that names it in
// config files, flags, help and messages. Text becomes the enum here, at the
// edge (train_config.cc, tools/train_command.cc, plan_command.cc), and nowhere else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

template <typename E>
struct NamedChoice {
  std::string_view name;
  E value;
};

// Specialised per enum (train/train_choices.h) with
//   static constexpr NamedChoice<E> kTable[] = {{"name", E::kValue}, ...};
template <typename E>
struct ChoiceNames;

template <typename E>
std::string_view ChoiceName(E value) {
  for (const NamedChoice<E>& n : ChoiceNames<E>::kTable) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The names a user may write, "a, b or c" (an empty name, "not given", is
// left out).
template <typename E>
std::string ChoiceList() {
  std::vector<std::string_view> names;
  for (const NamedChoice<E>& n : ChoiceNames<E>::kTable) {
    if (!n.name.empty()) names.push_back(n.name);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

// The value `text` names. Errors: InvalidArgument "'TEXT' is not valid; use
// a, b or c" (the caller prefixes where the text came from).
template <typename E>
StatusOr<E> ParseChoice(std::string_view text) {
  for (const NamedChoice<E>& n : ChoiceNames<E>::kTable) {
    if (n.name == text) return n.value;
  }
  return InvalidArgumentError("'" + std::string(text) + "' is not valid; use " + ChoiceList<E>());
}

}  // namespace tierflow
