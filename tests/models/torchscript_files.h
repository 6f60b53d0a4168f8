// Test helper: the TorchScript models of the tests, written by a Python script with python3-torch.
#pragma once

#include <cstdint>
#include <string>

namespace pipeplan::testing {

/// The Python with torch that CMake found (Debian's python3-torch, which scripts/setup.sh
/// installs), or "" when it found none: then the tests that need the files skip.
std::string torch_python();

/// Why the tests that need the files skip, for GTEST_SKIP when torch_python() is "".
inline constexpr const char* kNoTorchPython =
    "no Python with torch was found when CMake ran (install Debian's python3-torch with "
    "scripts/setup.sh, or configure with -DPIPEPLAN_TORCH_PYTHON=/path/to/python3)";

/// The folder holding the files of tests/models/make_torchscript_models.py (mlp.pt, cnn.pt,
/// layers_list.pt, layers_sequential.pt, residual.pt, tokens.pt, shared.pt, float64.pt,
/// big_first.pt, state_dict.pt); mlp.pt carries the weights of the zoo's mlp_tiny built with
/// build_layers(..., `mlp_seed`). The script runs once per content of script and weights: the
/// folder is named by their hash and shared by test processes, so treat it as read-only.
/// Sets `error` to what went wrong (with the script's output) and returns "" on failure,
/// including when torch_python() is "".
std::string test_models_dir(uint64_t mlp_seed, std::string* error);

}  // namespace pipeplan::testing
