// The one place where LibTorch 1.13 and 2.x differ for pipeplan; everything else calls these.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

namespace pipeplan::compat {

/// True when built against LibTorch 2.x or later.
inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

}  // namespace pipeplan::compat
