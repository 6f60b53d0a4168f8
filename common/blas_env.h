// BLAS checks: which BLAS this process loaded, and a fix for OpenBLAS misdetecting a
// virtualised CPU (it falls back to generic "Prescott" kernels, far slower at matrix products).
#pragma once

#include <string>
#include <vector>

namespace pipeplan {

/// The kernel family OpenBLAS picked ("SkylakeX", "Haswell", "Prescott", ...), or "" when no
/// OpenBLAS is loaded in this process.
std::string openblas_core_name();

/// Real paths of the loaded shared objects whose file name contains "blas" (e.g.
/// ".../openblas-openmp/libblas.so.3"), for reporting what LibTorch actually uses.
std::vector<std::string> loaded_blas_libraries();

/// The OPENBLAS_CORETYPE this CPU supports best ("SkylakeX", "Haswell"), or "" if none better
/// than the generic kernels.
std::string best_openblas_core_type();

/// Called first in every `main`: when OpenBLAS is loaded with generic kernels, the CPU supports
/// better ones and the user has not set OPENBLAS_CORETYPE, sets it and re-executes the program
/// (OpenBLAS reads it only at load time). Returns normally in every other case.
void reexec_with_best_blas_kernels(char** argv);

}  // namespace pipeplan
