// Errors: message helpers behind the check macros.
#include "common/error.h"

namespace pipeplan {

std::string quote(std::string_view value) { return detail::concat("'", value, "'"); }

namespace detail {
void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorKind::kInternal, concat("internal error at ", file, ":", line, ": ", cond,
                                          msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}
}  // namespace detail

}  // namespace pipeplan
