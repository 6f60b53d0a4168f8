// Which backend carries a plan's traffic: decided from the plan alone, so that the executor
// that opens it and the simulator that predicts its cost agree.
#pragma once

#include <string>

#include "plans/plan.h"

namespace pipeplan {

/// What carries a run's pipeline and data-parallel traffic.
enum class CommBackend {
  kSingleProcess,    ///< world size 1: nothing to communicate
  kGloo,             ///< CPU tensors over Gloo
  kNccl,             ///< CUDA tensors over NCCL; every rank has a GPU of its own
  kGlooHostStaging,  ///< ranks share a GPU: GPU -> host -> Gloo -> host -> GPU
};

/// "single-process", "gloo", "nccl", "gloo-host-staging".
std::string to_string(CommBackend backend);

/// The backend `plan` needs: kGloo on CPU; on CUDA kNccl when every rank has its own
/// (node, device) in the rank map and kGlooHostStaging when some ranks share one.
CommBackend choose_backend(const Plan& plan);

/// Whether a point-to-point send on `backend` can hold up the sending rank until its message is
/// on its way. Gloo's send call writes the message into the socket on the caller's thread when
/// the peer's receive is already posted (receives are posted ahead, kRecvLookahead of each
/// kind); a send made before that is written later in the background, and holds nobody. NCCL
/// queues the transfer on a stream and returns at once.
bool send_occupies_sender(CommBackend backend);

}  // namespace pipeplan
