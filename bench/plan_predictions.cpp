// plan_predictions: prints the top plans of a fixed set of searches with their predictions at
// full precision, so that two builds of the planner can be compared (compare_predictions.py):
// a change that should not move predictions is checked against the build before it.
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/synthetic_profile.h"
#include "common/error.h"
#include "common/units.h"
#include "planner/search.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan::bench {
namespace {

constexpr const char* kUsage =
    "usage: plan_predictions [--profile FILE]... [--large]\n"
    "Searches each profile FILE (tests/data/resnet_tiny_cpu_profile_fixture.json, profiles of\n"
    "the zoo) on 1 to 16 devices, random hand-built profiles with and without time variation,\n"
    "and synthetic GPT-like profiles; prints one line per top plan:\n"
    "  scenario rank dp pp b m schedule split iteration_ms bubble simulate_ms\n"
    "(split: each stage's last layer, c when checkpointed; simulate_ms: the best plan\n"
    "re-simulated as `pipeplan simulate` does, else -). --large adds the 1,000-layer synthetic\n"
    "profile on 1,024 devices. bench/compare_predictions.py compares two outputs.\n";

struct Scenario {
  std::string name;
  const Profile* profile = nullptr;
  int devices = 1;
  int64_t device_memory_bytes = 0;
  int64_t global_batch = 1;
  int devices_per_node = 1;
  OptimizerKind optimizer = OptimizerKind::kSgd;
};

std::string split_of(const Plan& plan) {
  std::string text;
  for (const StagePlan& stage : plan.stages)
    text += detail::concat(text.empty() ? "" : ",", stage.last, stage.checkpoint ? "c" : "",
                           recompute_marker(stage.recompute_layers));
  return text;
}

void print_search(const Scenario& s) {
  PlanningContext context;
  context.profile = s.profile;
  context.profile_path = "profile.json";
  context.cluster = make_cluster(*s.profile, s.devices, s.device_memory_bytes, s.devices_per_node,
                                 kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = s.global_batch;
  context.optimizer = s.optimizer;
  context.precision = parse_precision(s.profile->settings.precision, "profile");
  const SearchResult result = search(context, SearchOptions{});
  if (result.plans.empty()) std::printf("%s none\n", s.name.c_str());
  for (size_t idx = 0; idx < result.plans.size(); ++idx) {
    const Plan& plan = result.plans[idx];
    std::string simulated = "-";
    if (idx == 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%.12g",
                    simulate(simulation_input(plan), SimulationOptions{}).iteration_ms);
      simulated = text;
    }
    std::printf("%s %zu %d %d %lld %d %s %s %.12g %.9g %s\n", s.name.c_str(), idx + 1, plan.dp,
                plan.pp, static_cast<long long>(plan.micro_batch_size), plan.num_micro_batches,
                to_string(plan.schedule).c_str(), split_of(plan).c_str(),
                plan.predictions.iteration_ms, plan.predictions.bubble_fraction, simulated.c_str());
    std::fflush(stdout);
  }
}

// A random hand-built profile whose p90 times lie `spread` above the medians.
Profile random_profile(uint64_t seed, int layers, double spread) {
  std::mt19937_64 rng(seed);
  Profile profile =
      testing::make_profile(testing::random_layers(rng, layers), {1, 2, 4, 8}, 32, 1000, 0.02, 5e6);
  for (LayerProfile& layer : profile.layers)
    for (LayerPoint& point : layer.points) {
      point.fwd_ms_p90 = point.fwd_ms * (1 + spread);
      point.bwd_ms_p90 = point.bwd_ms * (1 + spread);
    }
  return profile;
}

void run(const std::vector<std::string>& profile_paths, bool large) {
  std::vector<Scenario> scenarios;
  std::vector<Profile> files;
  for (const std::string& path : profile_paths) files.push_back(read_profile(path));
  for (size_t file_idx = 0; file_idx < files.size(); ++file_idx)
    for (int devices : {1, 2, 4, 8, 16})
      for (int64_t batch : {16, 64, 256})
        for (OptimizerKind optimizer : {OptimizerKind::kSgd, OptimizerKind::kAdamw})
          scenarios.push_back(
              {detail::concat(std::filesystem::path(profile_paths[file_idx]).stem().string(), "/d",
                              devices, "/B", batch, "/", to_string(optimizer)),
               &files[file_idx], devices, 512 * kMiB, batch, 2, optimizer});
  std::vector<Profile> randoms;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    for (double spread : {0.0, 0.03, 0.3}) randoms.push_back(random_profile(seed, 12, spread));
  for (size_t idx = 0; idx < randoms.size(); ++idx)
    for (int devices : {4, 8, 32})
      scenarios.push_back({detail::concat("random", idx, "/d", devices), &randoms[idx], devices,
                           kGiB, 64, 4, OptimizerKind::kAdamw});
  std::vector<Profile> synthetic;
  synthetic.push_back(synthetic_profile({150, 1024}));
  synthetic.push_back(synthetic_profile({300, 2048}));
  if (large) synthetic.push_back(synthetic_profile({1000, 2048}));
  scenarios.push_back(
      {"synthetic150/d64", &synthetic[0], 64, 80 * kGiB, 512, 8, OptimizerKind::kAdamw});
  scenarios.push_back(
      {"synthetic150/d256", &synthetic[0], 256, 80 * kGiB, 2048, 8, OptimizerKind::kAdamw});
  scenarios.push_back(
      {"synthetic300/d256", &synthetic[1], 256, 80 * kGiB, 1024, 8, OptimizerKind::kAdamw});
  if (large)
    scenarios.push_back(
        {"synthetic1000/d1024", &synthetic[2], 1024, 80 * kGiB, 4096, 8, OptimizerKind::kAdamw});
  for (const Scenario& scenario : scenarios) print_search(scenario);
}

}  // namespace
}  // namespace pipeplan::bench

int main(int argc, char** argv) {
  std::vector<std::string> profiles;
  bool large = false;
  for (int idx = 1; idx < argc; ++idx) {
    const std::string_view arg = argv[idx];
    if (arg == "--profile" && idx + 1 < argc) {
      profiles.push_back(argv[++idx]);
    } else if (arg == "--large") {
      large = true;
    } else {
      std::fputs(pipeplan::bench::kUsage, arg == "--help" ? stdout : stderr);
      return arg == "--help" ? 0 : 2;
    }
  }
  try {
    pipeplan::bench::run(profiles, large);
  } catch (const pipeplan::Error& error) {
    std::fprintf(stderr, "plan_predictions: error: %s\n", error.what());
    return error.exit_code();
  }
  return 0;
}
