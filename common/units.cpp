// Sizes and units: parsing and printing.
#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/error.h"

namespace pipeplan {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Multiplier for a lower-case unit, or 0 when unknown.
double unit_multiplier(const std::string& unit) {
  struct Unit {
    const char* name;
    double bytes;
  };
  static const Unit kUnits[] = {
      {"", 1},         {"b", 1},          {"kb", 1e3},       {"mb", 1e6},
      {"gb", 1e9},     {"tb", 1e12},      {"kib", 1024.0},   {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},      {"tib", 1024.0 * 1024 * 1024 * 1024},
  };
  for (const Unit& u : kUnits)
    if (unit == u.name) return u.bytes;
  return 0;
}

}  // namespace

int64_t parse_size(std::string_view text, std::string_view field) {
  const std::string expected = " (expected a size such as 24GiB, 512MiB, 1.5GB or plain bytes)";
  PIPEPLAN_CHECK(!text.empty(), field, ": empty size", expected);
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.'))
    ++pos;
  const std::string number(text.substr(0, pos));
  std::string unit = lower(text.substr(pos));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  PIPEPLAN_CHECK(!number.empty() && number != "." && number.find('.') == number.rfind('.'), field,
                 ": ", quote(text), " is not a size", expected);
  const double multiplier = unit_multiplier(unit);
  PIPEPLAN_CHECK(multiplier > 0, field, ": unknown unit ", quote(unit), " in ", quote(text),
                 expected);
  const double bytes = std::stod(number) * multiplier;
  PIPEPLAN_CHECK(std::isfinite(bytes) && bytes < 9.2e18, field, ": ", quote(text), " is too large");
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_size(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < kKiB && bytes > -kKiB) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit_idx = -1;
  while ((value >= 1024.0 || value <= -1024.0) && unit_idx < 3) {
    value /= 1024.0;
    ++unit_idx;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %s", value, kUnits[unit_idx]);
  return buffer;
}

std::vector<int64_t> parse_positive_list(std::string_view text, std::string_view field) {
  PIPEPLAN_CHECK(!text.empty(), field, ": empty list (expected positive integers such as 1,2,4,8)");
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string item(text.substr(start, end - start));
    bool digits = !item.empty();
    for (char c : item) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    PIPEPLAN_CHECK(digits && item.size() < 18, field, ": ", quote(item), " in ", quote(text),
                   " is not a positive integer");
    const int64_t value = std::stoll(item);
    PIPEPLAN_CHECK(value >= 1, field, ": ", quote(item), " must be at least 1");
    values.push_back(value);
    start = end + 1;
  }
  return values;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t dim = 0; dim < shape.size(); ++dim)
    text += (dim ? ", " : "") + std::to_string(shape[dim]);
  return text + "]";
}

std::string format_dims(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t dim : shape) text += (text.empty() ? "" : "x") + std::to_string(dim);
  return text;
}

std::string format_fixed(double value, int decimals) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace pipeplan
