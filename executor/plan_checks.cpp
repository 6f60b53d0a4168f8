// Before a rank waits on anyone: does the plan fit the model, the job and this machine?
#include "executor/plan_checks.h"

#include <ATen/Parallel.h>

#include <cerrno>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"
#include "common/units.h"

namespace pipeplan::executor {
namespace {

// Most intra-op threads a rank accepts from OMP_NUM_THREADS: more than any machine's cores.
constexpr long kMaxThreads = 1024;

}  // namespace

void check_plan_matches_model(const Plan& plan, const models::Model& model,
                              const std::string& document) {
  PIPEPLAN_CHECK(plan.model.hash == model.hash, document, ": model.hash: ", quote(plan.model.hash),
                 " is not the hash of model ", quote(model.name), " built from the plan's config (",
                 quote(model.hash), "); re-create the plan for this model");
  PIPEPLAN_CHECK(plan.model.num_layers == static_cast<int>(model.layers.size()), document,
                 ": model.num_layers: ", plan.model.num_layers, " but model ", quote(model.name),
                 " has ", model.layers.size(), " layers; re-create the plan for this model");
  PIPEPLAN_CHECK(plan.precision == Precision::kFp32 || plan.cluster.device_kind == "cuda", document,
                 ": precision: ", quote(to_string(plan.precision)),
                 " needs cuda devices; use fp32 on cpu");
  // Plan::validate chained the stages from the plan's model.input_shape; this is the built model's.
  const ModelRef ref = models::model_ref(model);
  const StagePlan& first = plan.stages.front();
  PIPEPLAN_CHECK(
      first.input_sample_shape == ref.input_shape && first.input_dtype == ref.input_dtype, document,
      ": stages[0].input_sample_shape: ", format_shape(first.input_sample_shape), " ",
      first.input_dtype, " is not the model's input ", format_shape(ref.input_shape), " ",
      ref.input_dtype, "; re-create the plan for this model");
  models::check_tensor_parallel(model, plan.tp(), document + ": tensor_parallel.tp");
}

void check_world(const Plan& plan, const RendezvousEnv& env, const std::string& document) {
  const int needed = static_cast<int>(plan.ranks.size());
  const std::string tp = plan.tp() > 1 ? detail::concat(", tp=", plan.tp()) : std::string();
  PIPEPLAN_CHECK(env.world_size == needed, "WORLD_SIZE=", env.world_size, " but ", document,
                 " needs ", plan.tp() > 1 ? "dp*tp*pp=" : "dp*pp=", needed, " ranks (dp=", plan.dp,
                 tp, ", pp=", plan.pp, "); start ", needed, " ranks, e.g. pipeplan launch --nproc ",
                 needed, " -- pipeplan train ...");
}

torch::Device rank_device(const Plan& plan, const RendezvousEnv& env, const std::string& document) {
  const RankAssignment& me = plan.ranks.at(static_cast<size_t>(env.rank));
  const std::string field = document + ": ranks[" + std::to_string(env.rank) + "].device";
  // Plan::validate made the device 'cpu' in a cpu plan and 'cuda:N' in a cuda one.
  if (plan.cluster.device_kind == "cpu") return torch::Device(torch::kCPU);
  PIPEPLAN_CHECK(torch::cuda::is_available(), field, ": ", quote(me.device),
                 " but this LibTorch or machine has no CUDA device");
  const int index = visible_cuda_index(torch::Device(me.device).index(),
                                       static_cast<int>(torch::cuda::device_count()), field);
  PIPEPLAN_CHECK(me.local_rank == env.local_rank, document, ": ranks[", env.rank, "].local_rank: ",
                 me.local_rank, " but this process has LOCAL_RANK=", env.local_rank,
                 "; launch ranks in the plan's order");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int visible_cuda_index(int planned_index, int visible_device_count, const std::string& field) {
  const std::string planned = "'cuda:" + std::to_string(planned_index) + "'";
  PIPEPLAN_CHECK(visible_device_count >= 1, field, ": ", planned,
                 " but this process sees no CUDA device (check CUDA_VISIBLE_DEVICES)");
  if (visible_device_count == 1) return 0;
  PIPEPLAN_CHECK(planned_index >= 0 && planned_index < visible_device_count, field, ": ", planned,
                 " but this process sees ", visible_device_count,
                 " CUDA devices (check CUDA_VISIBLE_DEVICES)");
  return planned_index;
}

void set_threads_from_env() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  const long threads = std::strtol(text, &end, 10);
  PIPEPLAN_CHECK(end != nullptr && *end == '\0' && errno == 0 && threads >= 1 &&
                     threads <= kMaxThreads,
                 "OMP_NUM_THREADS=", quote(text), " is not an integer from 1 to ", kMaxThreads);
  at::set_num_threads(static_cast<int>(threads));
}

}  // namespace pipeplan::executor
