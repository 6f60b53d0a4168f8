// The backend of a plan, from its cluster and rank map.
#include "plans/comm_backend.h"

#include <set>
#include <utility>

#include "common/words.h"

namespace pipeplan {

std::string to_string(CommBackend backend) {
  static constexpr std::pair<const char*, CommBackend> kWords[] = {
      {"single-process", CommBackend::kSingleProcess},
      {"gloo", CommBackend::kGloo},
      {"nccl", CommBackend::kNccl},
      {"gloo-host-staging", CommBackend::kGlooHostStaging}};
  return word_of(backend, kWords);
}

CommBackend choose_backend(const Plan& plan) {
  if (plan.ranks.size() == 1) return CommBackend::kSingleProcess;
  if (plan.cluster.device_kind != "cuda") return CommBackend::kGloo;
  std::set<std::pair<int, std::string>> devices;
  for (const RankAssignment& assignment : plan.ranks)
    if (!devices.insert({assignment.node, assignment.device}).second)
      return CommBackend::kGlooHostStaging;
  return CommBackend::kNccl;
}

bool send_occupies_sender(CommBackend backend) {
  return backend == CommBackend::kGloo || backend == CommBackend::kGlooHostStaging;
}

}  // namespace pipeplan
