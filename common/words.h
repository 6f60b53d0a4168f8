// Enums named by words: one table of (word, value) pairs per enum, read both ways.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"

namespace pipeplan {

template <typename Enum, size_t N>
using WordTable = std::pair<const char*, Enum>[N];

/// The value `text` names in `words`; nullopt if none.
template <typename Enum, size_t N>
std::optional<Enum> find_word(std::string_view text, const WordTable<Enum, N>& words) {
  for (const auto& [word, value] : words)
    if (text == word) return value;
  return std::nullopt;
}

/// The table's words in its order, joined by ", ".
template <typename Enum, size_t N>
std::string joined_words(const WordTable<Enum, N>& words) {
  std::string joined;
  for (const auto& [word, value] : words)
    joined += (joined.empty() ? "" : ", ") + std::string(word);
  return joined;
}

/// The value `text` names; otherwise throws Error(kBadInput) "FIELD: "TEXT": expected one of ...".
template <typename Enum, size_t N>
Enum parse_word(std::string_view text, std::string_view field, const WordTable<Enum, N>& words) {
  if (const std::optional<Enum> value = find_word(text, words)) return *value;
  throw Error(ErrorKind::kBadInput, detail::concat(field, ": ", quote(text), ": expected one of ",
                                                   joined_words(words)));
}

/// The word of `value`, which the table must hold.
template <typename Enum, size_t N>
std::string word_of(Enum value, const WordTable<Enum, N>& words) {
  for (const auto& [word, candidate] : words)
    if (candidate == value) return word;
  PIPEPLAN_ASSERT(false, "enum value without a word");
}

}  // namespace pipeplan
