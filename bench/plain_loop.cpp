// The baseline for pipeplan's executor: a plain LibTorch training loop over a zoo model (the
// whole model in one process, one batch per step, torch::optim::SGD), timed the way run.json
// times iterations: the median step after WARMUP untimed ones (run.json: 3). Prints one line:
//   plain_loop model=NAME batch=B steps=N iteration_ms=T samples_per_s=S
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/blas_env.h"
#include "common/stats.h"
#include "models/model.h"

namespace {

constexpr const char* kUsage =
    "usage: plain_loop MODEL BATCH STEPS [WARMUP]\n"
    "Trains zoo model MODEL (whole, one process) on random batches of BATCH samples for STEPS\n"
    "steps and prints the median step time after WARMUP untimed steps (default 3).\n"
    "bench/cpu_runs.py --only plain_loop runs it beside `pipeplan train` (bench/RESULTS.md).\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  pipeplan::reexec_with_best_blas_kernels(argv);
  if (argc < 4) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string name = argv[1];
  const int64_t batch = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  const int warmup = argc > 4 ? std::atoi(argv[4]) : 3;
  const pipeplan::models::Model model = pipeplan::models::make_model(name);
  const auto layers =
      pipeplan::models::build_layers(model, 0, static_cast<int>(model.layers.size()), 0);
  std::vector<torch::Tensor> params;
  for (const auto& layer : layers) {
    layer->train();
    for (const torch::Tensor& param : layer->parameters()) params.push_back(param);
  }
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(0.1 * batch / 256.0)
                                          .momentum(0.9)
                                          .weight_decay(5e-4));
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    auto [input, target] = pipeplan::models::random_batch(model, batch, step);
    optimizer.zero_grad();
    torch::Tensor loss = pipeplan::models::compute_loss(
        model, pipeplan::models::forward_layers(layers, input), target);
    loss.backward();
    optimizer.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (step >= warmup) times.push_back(ms);
  }
  const double median = pipeplan::median(times);
  std::printf("plain_loop model=%s batch=%lld steps=%d iteration_ms=%.3f samples_per_s=%.1f\n",
              name.c_str(), static_cast<long long>(batch), steps, median, 1e3 * batch / median);
  return 0;
}
