// The tool version written into every file pipeplan produces.
#pragma once

#include <string>

namespace pipeplan {

/// pipeplan's version, "MAJOR.MINOR.PATCH" (from the CMake project version).
std::string version();

}  // namespace pipeplan
