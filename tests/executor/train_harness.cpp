// Test harness for the executor: hand-built plans and rank processes.
#include "tests/executor/train_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "executor/checkpoint.h"
#include "executor/launcher.h"
#include "models/model.h"
#include "plans/plan.h"
#include "runtime/device.h"

extern char** environ;

namespace pipeplan::testing {
namespace {

namespace fs = std::filesystem;

constexpr auto kPollInterval = std::chrono::milliseconds(20);

// Per-sample output shape and dtype of every layer, from one forward of two samples.
std::vector<std::pair<std::vector<int64_t>, std::string>> layer_outputs(const models::Model& model) {
  torch::NoGradGuard no_grad;
  auto layers = models::build_layers(model, 0, static_cast<int>(model.layers.size()), /*seed=*/0);
  torch::Tensor x = models::random_batch(model, /*batch_size=*/2, /*seed=*/0).first;
  std::vector<std::pair<std::vector<int64_t>, std::string>> outputs;
  for (const models::LayerPtr& layer : layers) {
    x = layer->forward(x);
    outputs.push_back({x.sizes().slice(1).vec(), runtime::dtype_name(x.scalar_type())});
  }
  return outputs;
}

// This process's environment with `overrides` replacing or adding variables.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (overrides.count(name) == 0 && name != "RANK" && name != "WORLD_SIZE" &&
        name != "LOCAL_RANK" && name != "MASTER_ADDR" && name != "MASTER_PORT")
      entries.push_back(text);
  }
  for (const auto& [name, value] : overrides) entries.push_back(name + "=" + value);
  return entries;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& stderr_path) {
  std::vector<char*> argv_ptrs, env_ptrs;
  for (const std::string& arg : argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  for (const std::string& entry : env) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, argv_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  PIPEPLAN_ASSERT(rc == 0, "posix_spawn ", argv[0], " failed: ", rc);
  return pid;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Waits for every process; kills those still running after `timeout` (their exit code is -1).
std::vector<RankExit> wait_all(const std::vector<pid_t>& pids, std::chrono::seconds timeout) {
  std::vector<RankExit> exits(pids.size());
  std::vector<bool> done(pids.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t running = pids.size(); running > 0;) {
    for (size_t idx = 0; idx < pids.size(); ++idx) {
      int status = 0;
      if (done[idx] || ::waitpid(pids[idx], &status, WNOHANG) != pids[idx]) continue;
      done[idx] = true;
      --running;
      exits[idx].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t idx = 0; idx < pids.size(); ++idx)
        if (!done[idx]) ::kill(pids[idx], SIGKILL);
    }
    if (running > 0) std::this_thread::sleep_for(kPollInterval);
  }
  return exits;
}

}  // namespace

OptimizerSettings TestPlanSpec::test_optimizer() {
  OptimizerSettings settings = OptimizerSettings::defaults_for(OptimizerKind::kSgd);
  settings.base_lr = 0.8;  // 0.05 at a global batch of 16
  settings.base_batch = 256;
  settings.warmup_steps = 1;
  settings.min_lr_fraction = 0.1;
  return settings;
}

TestPlanSpec split_spec(int dp, int pp, Schedule schedule) {
  TestPlanSpec spec;
  spec.dp = dp;
  spec.pp = pp;
  spec.num_micro_batches = 4 / dp;
  spec.schedule = schedule;
  return spec;
}

Plan make_test_plan(const TestPlanSpec& spec) {
  const models::Model model = models::make_model(spec.model, spec.model_args);
  const auto outputs = layer_outputs(model);
  const int num_layers = static_cast<int>(model.layers.size());
  Plan plan;
  plan.tool_version = "test";
  plan.profile_path = "none";
  plan.profile_hash = "none";
  plan.model = models::model_ref(model);
  plan.cluster.devices = spec.dp * spec.tp * spec.pp;
  plan.cluster.device_memory_bytes = int64_t{1} << 30;
  plan.cluster.devices_per_node = plan.cluster.devices;  // all ranks on this machine
  plan.dp = spec.dp;
  plan.pp = spec.pp;
  plan.tensor_parallel.tp = spec.tp;
  plan.micro_batch_size = spec.micro_batch_size;
  plan.num_micro_batches = spec.num_micro_batches;
  plan.global_batch = spec.dp * spec.num_micro_batches * spec.micro_batch_size;
  plan.schedule = spec.schedule;
  plan.virtual_stages = spec.virtual_stages;
  plan.optimizer = spec.optimizer;
  plan.partition = "uniform";
  const int num_chunks = spec.pp * spec.virtual_stages;
  for (int stage_idx = 0; stage_idx < num_chunks; ++stage_idx) {
    StagePlan stage;
    stage.first = num_layers * stage_idx / num_chunks;
    stage.last = num_layers * (stage_idx + 1) / num_chunks;
    stage.checkpoint = !spec.checkpoint.empty() && spec.checkpoint.at(stage_idx);
    if (!spec.recompute_positions.empty())
      for (int position : spec.recompute_positions.at(stage_idx))
        stage.recompute_layers.push_back(stage.first + position);
    stage.input_sample_shape = stage.first == 0 ? plan.model.input_shape : outputs[stage.first - 1].first;
    stage.input_dtype = stage.first == 0 ? plan.model.input_dtype : outputs[stage.first - 1].second;
    stage.output_sample_shape = outputs[stage.last - 1].first;
    stage.output_dtype = outputs[stage.last - 1].second;
    plan.stages.push_back(stage);
  }
  for (int rank = 0; rank < plan.cluster.devices; ++rank) {
    const int group = rank / spec.tp;  // tp innermost
    plan.ranks.push_back({rank, group % spec.pp, group / spec.pp, 0, rank, "cpu", rank % spec.tp});
  }
  plan.predictions.stages.resize(static_cast<size_t>(spec.pp));
  if (spec.virtual_stages > 1)
    for (StagePrediction& stage : plan.predictions.stages)
      stage.chunks.resize(static_cast<size_t>(spec.virtual_stages));
  plan.validate("test plan");
  return plan;
}

std::vector<RankExit> run_ranks(int world_size, const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env, int timeout_s,
                                int only_rank) {
  const std::string binary = std::string(PIPEPLAN_BINARY_DIR) + "/cli/pipeplan";
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string port = std::to_string(executor::pick_free_port());
  const int processes = only_rank >= 0 ? 1 : std::max(world_size, 1);
  const std::string log_dir = fresh_dir("stderr");
  std::vector<pid_t> pids;
  for (int process = 0; process < processes; ++process) {
    const int rank = only_rank >= 0 ? only_rank : process;
    std::map<std::string, std::string> overrides = env;
    overrides.emplace("OMP_NUM_THREADS", "1");
    if (world_size > 0) {
      overrides.emplace("RANK", std::to_string(rank));
      overrides.emplace("WORLD_SIZE", std::to_string(world_size));
      overrides.emplace("LOCAL_RANK", std::to_string(rank));
      overrides.emplace("MASTER_ADDR", "127.0.0.1");
      overrides.emplace("MASTER_PORT", port);
    }
    pids.push_back(spawn(argv, environment_with(overrides), log_dir + "/" + std::to_string(process)));
  }
  std::vector<RankExit> exits = wait_all(pids, std::chrono::seconds(timeout_s));
  for (int process = 0; process < processes; ++process)
    exits[process].stderr_text = read_text(log_dir + "/" + std::to_string(process));
  return exits;
}

std::string fresh_dir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info == nullptr ? "none" : std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : test)
    if (c == '/') c = '_';
  static int counter = 0;
  const fs::path dir = fs::path(PIPEPLAN_BINARY_DIR) / "test_runs" / test /
                       (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::vector<Json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<Json> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(Json::parse(line));
  return lines;
}

std::vector<double> step_losses(const std::string& log_path) {
  std::vector<double> losses;
  for (const Json& line : read_json_lines(log_path))
    if (line.contains("loss")) losses.push_back(line.at("loss").get<double>());
  return losses;
}

std::string describe(const std::vector<RankExit>& exits) {
  std::string text;
  for (size_t rank = 0; rank < exits.size(); ++rank)
    text += "rank " + std::to_string(rank) + " exit " + std::to_string(exits[rank].exit_code) +
            ": " + exits[rank].stderr_text + "\n";
  return text;
}

TrainRun in_dir(const std::string& dir) {
  return TrainRun{dir, dir + "/steps.jsonl", dir + "/run.json", dir + "/checkpoints", {}};
}

void train(TrainRun* run, const Plan& plan, int steps, std::vector<std::string> extra_args,
           const std::map<std::string, std::string>& env) {
  const std::string plan_path = run->dir + "/plan.json";
  write_plan(plan_path, plan);
  std::vector<std::string> args{"train", "--plan", plan_path, "--data", "synthetic",
                                "--steps", std::to_string(steps), "--seed",
                                std::to_string(kTrainSeed), "--log", run->log,
                                "--checkpoint-dir", run->checkpoints, "-o", run->run_json};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const int world = static_cast<int>(plan.ranks.size());
  run->exits = run_ranks(world == 1 ? 0 : world, args, env);
}

TrainRun train_new(const Plan& plan, const std::string& name, int steps,
                   std::vector<std::string> extra_args) {
  TrainRun run = in_dir(fresh_dir(name));
  train(&run, plan, steps, std::move(extra_args));
  return run;
}

void expect_success(const std::vector<RankExit>& exits) {
  for (const RankExit& exit : exits) EXPECT_EQ(exit.exit_code, 0) << describe(exits);
}

void expect_success(const TrainRun& run) { expect_success(run.exits); }

void expect_memory_predicted(const std::string& dir, int pp, double percent) {
  expect_success(run_ranks(0, {"compare", "--plan", dir + "/plan.json", "--run", dir + "/run.json",
                               "--json", dir + "/compare.json"}));
  std::ifstream compare_file(dir + "/compare.json");
  const Json compare = Json::parse(compare_file);
  for (int stage = 0; stage < pp; ++stage) {
    const Json& memory = compare.at("stages").at(stage).at("peak_memory_bytes");
    EXPECT_LT(std::abs(memory.at("error_percent").get<double>()), percent)
        << "stage " << stage << ": " << memory.dump();
  }
}

std::map<std::string, torch::Tensor> final_parameters(const TrainRun& run, int pp, int64_t step) {
  std::map<std::string, torch::Tensor> all;
  for (int stage = 0; stage < pp; ++stage)
    for (auto& [name, tensor] : executor::read_checkpoint_parameters(
             executor::checkpoint_stage_path(run.checkpoints, step, stage)))
      all[name] = tensor;
  return all;
}

void expect_same_losses(const std::vector<double>& actual, const std::vector<double>& expected,
                        double relative, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t step = 0; step < actual.size(); ++step)
    EXPECT_NEAR(actual[step], expected[step], relative * std::abs(expected[step]))
        << what << ": step " << step + 1;
}

void expect_same_parameters(const std::map<std::string, torch::Tensor>& actual,
                            const std::map<std::string, torch::Tensor>& expected,
                            const std::string& what, double relative, double absolute) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, tensor] : expected) {
    ASSERT_EQ(actual.count(name), 1u) << what << ": " << name;
    EXPECT_TRUE(torch::allclose(actual.at(name), tensor, relative, absolute))
        << what << ": " << name << " differs by "
        << (actual.at(name) - tensor).abs().max().item<double>();
  }
}

void expect_one_line_error(const RankExit& exit, int exit_code, const std::string& needle) {
  EXPECT_EQ(exit.exit_code, exit_code) << exit.stderr_text;
  EXPECT_EQ(exit.stderr_text.rfind("pipeplan: error: ", 0), 0u) << exit.stderr_text;
  EXPECT_EQ(std::count(exit.stderr_text.begin(), exit.stderr_text.end(), '\n'), 1)
      << exit.stderr_text;
  EXPECT_NE(exit.stderr_text.find(needle), std::string::npos) << exit.stderr_text;
}

}  // namespace pipeplan::testing
