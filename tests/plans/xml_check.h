// A small well-formedness check for the SVG documents pipeplan writes (tests only).
#pragma once

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

namespace pipeplan::testing {

/// Checks that tags nest and close, attribute values are quoted and no bare '&' or '<' is in
/// text. Returns "" or the first problem.
inline std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  size_t pos = 0;
  while ((pos = text.find('<', pos)) != std::string::npos) {
    const size_t end = text.find('>', pos);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = text.substr(pos + 1, end - pos - 1);
    const size_t next_open = text.find('<', pos + 1);
    if (next_open != std::string::npos && next_open < end) return "'<' inside a tag: " + tag;
    if (tag.front() == '?') {
      if (tag.back() != '?') return "bad processing instruction";
    } else if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "unbalanced </" + tag.substr(1) + ">";
      open.pop_back();
    } else {
      if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unquoted attribute: " + tag;
      const std::string name = tag.substr(0, tag.find_first_of(" /"));
      if (tag.back() != '/') open.push_back(name);
    }
    pos = end + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  const std::regex bare_amp("&(?!(amp|lt|gt|quot|apos);)");
  if (std::regex_search(text, bare_amp)) return "bare '&'";
  return "";
}

}  // namespace pipeplan::testing
