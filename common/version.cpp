// The tool version, set by CMake.
#include "common/version.h"

namespace pipeplan {

std::string version() { return PIPEPLAN_VERSION_STRING; }

}  // namespace pipeplan
