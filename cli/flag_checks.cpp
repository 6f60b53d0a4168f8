// Integer flags checked on their text, before CLI11 converts them.
#include "cli/flag_checks.h"

#include <charconv>
#include <string>

#include "common/error.h"

namespace pipeplan::cli {

CLI::Validator integer_in(int64_t min_value, int64_t max_value) {
  auto check = [min_value, max_value](std::string& text) -> std::string {
    const bool negative = !text.empty() && text.front() == '-';
    const size_t first_digit = negative ? 1 : 0;
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [parsed_to, error] = std::from_chars(text.data(), end, value);
    const bool decimal = text.size() > first_digit &&
                         text.find_first_not_of("0123456789", first_digit) == std::string::npos;
    if (decimal && error == std::errc() && parsed_to == end && value >= min_value &&
        value <= max_value) {
      text = std::to_string(value);  // without leading zeros: CLI11 would read them as octal
      return "";
    }
    return detail::concat(quote(text), " is not an integer from ", min_value, " to ", max_value);
  };
  return CLI::Validator(check, detail::concat("INT in [", min_value, " - ", max_value, "]"));
}

}  // namespace pipeplan::cli
