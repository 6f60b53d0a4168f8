// Integer flags checked on their text, before CLI11 converts them.
#include "cli/flag_checks.h"

#include <charconv>
#include <string>

#include "common/error.h"

namespace pipeplan::cli {
namespace {

// Whether `text` is written as a decimal integer: an optional '-' (when `signed_flag`), then
// digits, the first of them no '0' unless it is the only one; and whether it fits 64 bits.
bool is_decimal_integer(const std::string& text, bool signed_flag) {
  const size_t first_digit = signed_flag && !text.empty() && text.front() == '-' ? 1 : 0;
  const std::string_view digits = std::string_view(text).substr(first_digit);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos ||
      (digits.front() == '0' && digits.size() > 1))
    return false;
  const char* end = text.data() + text.size();
  if (signed_flag) {
    int64_t value = 0;
    return std::from_chars(text.data(), end, value).ec == std::errc();
  }
  uint64_t value = 0;
  return std::from_chars(text.data(), end, value).ec == std::errc();
}

CLI::Validator decimal_integer(bool signed_flag) {
  auto check = [signed_flag](std::string& text) -> std::string {
    if (is_decimal_integer(text, signed_flag)) return "";
    return detail::concat(quote(text), " is not a decimal integer (digits",
                          signed_flag ? " after an optional '-'" : "",
                          ", no leading zero or base prefix, within 64 bits)");
  };
  // No description: the type (INT) already says it in --help.
  return CLI::Validator(check, "");
}

}  // namespace

CLI::Validator integer_in(int64_t min_value, int64_t max_value) {
  auto check = [min_value, max_value](const std::string& text) -> std::string {
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [parsed_to, error] = std::from_chars(text.data(), end, value);
    if (error == std::errc() && parsed_to == end && value >= min_value && value <= max_value)
      return "";
    return detail::concat(quote(text), " is not an integer from ", min_value, " to ", max_value);
  };
  return CLI::Validator(check, detail::concat("INT in [", min_value, " - ", max_value, "]"));
}

void check_integer_flags_are_decimal(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* option : sub->get_options()) {
      // The type name as CLI11 derives it from the option's variable, validators after a ':'.
      const std::string type = option->get_type_name();
      const bool is_signed = type == "INT" || type.rfind("INT:", 0) == 0;
      const bool is_unsigned = type == "UINT" || type.rfind("UINT:", 0) == 0;
      if (is_signed || is_unsigned) option->check(decimal_integer(is_signed));
    }
}

}  // namespace pipeplan::cli
