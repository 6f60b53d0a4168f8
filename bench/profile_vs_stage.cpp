// Is a stage in training slower than the profiler's layers, in one process at one time? Alternates
// rounds of the profiler's chain measurement (every layer of MODEL, warmup 2, repeats R; sum of
// the layers' median forward and backward) with rounds of the executor's StageRuntime over the
// same layers (one stage of a pp=1 plan; M micro-batches forward, then M backward, as GPipe
// does; mean per micro-batch). Both build their layers with the same seed. Prints one line per
// round and the median ratio stage / profile. The machine's speed drifts over minutes (steal,
// the host's other guests), so only rounds taken next to each other are compared. With GAP_US
// above 0, each round also times the stage sleeping GAP_US before every action, as a rank that
// waits for its neighbour's message does, and prints that ratio too.
//   profile_vs_stage PLAN.json ROUNDS [REPEATS] [M] [GAP_US]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/blas_env.h"
#include "common/stats.h"
#include "executor/stage.h"
#include "models/model.h"
#include "plans/plan.h"
#include "profiler/layer_profiler.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr const char* kUsage =
    "usage: profile_vs_stage PLAN.json ROUNDS [REPEATS] [M] [GAP_US]\n"
    "Alternates ROUNDS rounds of the profiler's chain measurement of every layer of the pp=1\n"
    "plan's model (REPEATS repeats, default 10) with the executor's stage over the same layers\n"
    "(M micro-batches forward then backward, default 8), one thread, and prints each round's\n"
    "stage / profile ratio and their median. GAP_US > 0 (default 0) also times the stage\n"
    "sleeping GAP_US microseconds before every action. Figures: bench/RESULTS.md.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace pipeplan;
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  reexec_with_best_blas_kernels(argv);
  if (argc < 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const Plan plan = read_plan(argv[1]);
  const int rounds = std::atoi(argv[2]);
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 10;
  const int micro_batches = argc > 4 ? std::atoi(argv[4]) : 8;
  const int gap_us = argc > 5 ? std::atoi(argv[5]) : 0;
  at::set_num_threads(1);
  const models::Model model = models::make_model_from_config(plan.model.name, plan.model.config);
  const int num_layers = static_cast<int>(model.layers.size());
  const int64_t batch = plan.micro_batch_size;
  auto [input, target] = models::random_batch(model, batch, 0);

  std::vector<models::LayerPtr> built = models::build_layers(model, 0, num_layers, 0);
  std::vector<models::Layer*> layers;
  for (auto& layer : built) {
    layer->train();
    layers.push_back(layer.get());
  }
  profiler::LayerSettings settings;
  settings.warmup = 2;
  settings.repeats = repeats;
  profiler::LayerProfiler layer_profiler(settings);
  const profiler::LossFn loss = [&](const torch::Tensor& output) {
    return models::compute_loss(model, output, target);
  };
  executor::StageRuntime stage(model, plan, 0, torch::Device(torch::kCPU), 0);

  // The stage's mean forward and backward per micro-batch, sleeping `gap` before each action.
  struct StageTimes {
    double fwd = 0, bwd = 0, median_fwd = 0, median_bwd = 0;
  };
  const auto time_stage = [&](std::chrono::microseconds gap) {
    std::vector<double> fwd, bwd;
    for (int pass = 0; pass < 1 + repeats / micro_batches + 1; ++pass) {
      stage.begin_iteration(micro_batches);
      for (int mb = 0; mb < micro_batches; ++mb) {
        if (gap.count() > 0) std::this_thread::sleep_for(gap);
        const double start = now_ms();
        stage.forward(mb, input, target, 1);
        if (pass > 0) fwd.push_back(now_ms() - start);
      }
      for (int mb = 0; mb < micro_batches; ++mb) {
        if (gap.count() > 0) std::this_thread::sleep_for(gap);
        const double start = now_ms();
        stage.backward(mb, torch::Tensor(), 1.0 / micro_batches);
        if (pass > 0) bwd.push_back(now_ms() - start);
      }
      stage.gradients().zero_();
    }
    StageTimes times;
    for (double v : fwd) times.fwd += v / static_cast<double>(fwd.size());
    for (double v : bwd) times.bwd += v / static_cast<double>(bwd.size());
    times.median_fwd = median(fwd);
    times.median_bwd = median(bwd);
    return times;
  };

  std::vector<double> ratios, gap_ratios;
  for (int round = 0; round < rounds; ++round) {
    const auto measured = layer_profiler.measure_chain(layers, input, false, loss);
    double profile_fwd = 0, profile_bwd = 0;
    for (const auto& m : measured) {
      profile_fwd += m.point.fwd_ms;
      profile_bwd += m.point.bwd_ms;
    }
    const StageTimes times = time_stage(std::chrono::microseconds(0));
    const double ratio = (times.fwd + times.bwd) / (profile_fwd + profile_bwd);
    ratios.push_back(ratio);
    std::printf(
        "round %d profile fwd %.3f bwd %.3f | stage mean fwd %.3f bwd %.3f median fwd %.3f bwd "
        "%.3f | ratio %.3f",
        round, profile_fwd, profile_bwd, times.fwd, times.bwd, times.median_fwd, times.median_bwd,
        ratio);
    if (gap_us > 0) {
      const StageTimes gapped = time_stage(std::chrono::microseconds(gap_us));
      gap_ratios.push_back((gapped.fwd + gapped.bwd) / (profile_fwd + profile_bwd));
      std::printf(" | with %d us gaps: mean fwd %.3f bwd %.3f | ratio %.3f", gap_us, gapped.fwd,
                  gapped.bwd, gap_ratios.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (gap_us > 0)
    std::printf("median ratio stage with %d us gaps/profile %.3f over %d rounds\n", gap_us,
                median(gap_ratios), rounds);
  std::printf("median ratio stage/profile %.3f over %d rounds\n", median(ratios), rounds);
  return 0;
}
