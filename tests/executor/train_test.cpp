// Tests for executor/trainer.h through the built `pipeplan train`: pipeline (zb-h1 and
// interleaved-1f1b too) and data-parallel runs reproduce the single-process run, resume
// continues identically, bad plans are refused, NaN stops the run, checkpointing changes nothing,
// and the outputs are complete.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>

#include "executor/checkpoint.h"
#include "executor/launcher.h"
#include "models/torch_compat.h"
#include "plans/run.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::testing {
namespace {

// Models of the split-equivalence test: float image input (mlp_tiny) and int64 token input with
// a next-token loss (gpt_tiny).
const std::vector<std::string> kEquivalenceModels = {"mlp_tiny", "gpt_tiny"};
constexpr int kSteps = 5;
constexpr double kLossRelativeTolerance = 1e-5;


class SerialTrainEquivalenceTest : public ::testing::TestWithParam<std::string> {};

// The reference: one process, pp=1, dp=1, with all dp·m micro-batches of the same size.
TEST_P(SerialTrainEquivalenceTest, SplitsMatchTheSingleProcessRun) {
  TestPlanSpec reference_spec;
  reference_spec.model = GetParam();
  const TrainRun reference = train_new(make_test_plan(reference_spec), "reference", kSteps);
  expect_success(reference);
  const std::vector<double> reference_losses = step_losses(reference.log);
  ASSERT_EQ(reference_losses.size(), static_cast<size_t>(kSteps));
  const auto reference_parameters = final_parameters(reference, 1, kSteps);
  const double reference_accuracy = read_run(reference.run_json).test_accuracy.back().test_accuracy;
  struct Split { int dp, pp; Schedule schedule; };
  for (const Split& split : {Split{1, 2, Schedule::kGpipe}, Split{1, 2, Schedule::kOneFOneB},
                             Split{2, 1, Schedule::kOneFOneB}, Split{2, 2, Schedule::kGpipe},
                             Split{2, 2, Schedule::kOneFOneB}}) {
    TestPlanSpec spec = reference_spec;
    spec.dp = split.dp;
    spec.pp = split.pp;
    spec.schedule = split.schedule;
    spec.num_micro_batches = reference_spec.num_micro_batches / split.dp;
    const std::string what = GetParam() + " dp=" + std::to_string(split.dp) + " pp=" +
                             std::to_string(split.pp) + " " + to_string(split.schedule);
    const TrainRun run = train_new(make_test_plan(spec), "split", kSteps);
    expect_success(run);
    expect_same_losses(step_losses(run.log), reference_losses, kLossRelativeTolerance, what);
    expect_same_parameters(final_parameters(run, split.pp, kSteps), reference_parameters, what);
    EXPECT_NEAR(read_run(run.run_json).test_accuracy.back().test_accuracy, reference_accuracy, 2e-3)
        << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SerialTrainEquivalenceTest, ::testing::ValuesIn(kEquivalenceModels),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// zb-h1 (B and W apart) on a zoo model: which extra splits run beside dp=1 pp=2, so that each
// costs one model's runs only.
struct ZeroBubbleCase {
  std::string model;
  std::vector<std::string> model_args;
  bool dp2 = false;         // dp=2 × pp=2 (4 ranks) against the m=8 reference
  bool checkpoint = false;  // both stages checkpointed, against the m=4 reference
};

// How GoogleTest (and so ctest's test list) names a case: its model, not its bytes.
void PrintTo(const ZeroBubbleCase& test, std::ostream* out) { *out << test.model; }

const std::vector<ZeroBubbleCase> kZeroBubbleCases = {
    {"mlp_tiny", {"layers=8"}, /*dp2=*/true, /*checkpoint=*/false},
    {"gpt_tiny", {}, /*dp2=*/false, /*checkpoint=*/true}};
constexpr int kZeroBubbleSteps = 4;

// run.json of a zb-h1 run of `m` micro-batches per replica: B and W measured apart, both in the
// compute, and W by micro-batch in the step times.
void expect_split_backward_measured(const pipeplan::Run& run, int m, const std::string& what) {
  for (size_t stage_idx = 0; stage_idx < run.measured.stages.size(); ++stage_idx) {
    const StageMeasurement& stage = run.measured.stages[stage_idx];
    const std::string where = what + " stage " + std::to_string(stage_idx);
    EXPECT_GT(stage.bwd_ms, 0) << where;
    EXPECT_GT(stage.bwd_weight_ms, 0) << where;
    EXPECT_NEAR(stage.compute_ms,
                m * (stage.fwd_ms + stage.bwd_ms + stage.bwd_weight_ms + stage.recompute_ms),
                1e-6 * stage.compute_ms)
        << where;
    EXPECT_GE(stage.busy_ms, stage.compute_ms) << where;
  }
  ASSERT_FALSE(run.measured.step_times.empty()) << what;
  for (const RankStepTimes& rank : run.measured.step_times.back().ranks) {
    EXPECT_EQ(rank.bwd_ms.size(), static_cast<size_t>(m)) << what;
    ASSERT_EQ(rank.bwd_weight_ms.size(), static_cast<size_t>(m)) << what;
    EXPECT_GT(*std::min_element(rank.bwd_weight_ms.begin(), rank.bwd_weight_ms.end()), 0) << what;
  }
  std::set<int> ranks_with_w;
  for (const TimelineEvent& event : run.measured.timeline.events)
    if (event.kind == TimelineKind::kBackwardWeight) ranks_with_w.insert(event.rank);
  EXPECT_EQ(ranks_with_w.size(), run.measured.ranks.size()) << what;
}

class SerialZeroBubbleTrainTest : public ::testing::TestWithParam<ZeroBubbleCase> {};

// zb-h1 over pp=2 (m=4 and m=8) trains as the one-process run of the same micro-batches: the
// same losses and, after the steps, the same parameters.
TEST_P(SerialZeroBubbleTrainTest, MatchesTheSingleProcessRun) {
  const ZeroBubbleCase& test = GetParam();
  for (int m : {4, 8}) {
    TestPlanSpec reference_spec;
    reference_spec.model = test.model;
    reference_spec.model_args = test.model_args;
    reference_spec.num_micro_batches = m;
    const TrainRun reference = train_new(make_test_plan(reference_spec), "reference", kZeroBubbleSteps);
    expect_success(reference);
    const std::vector<double> reference_losses = step_losses(reference.log);
    ASSERT_EQ(reference_losses.size(), static_cast<size_t>(kZeroBubbleSteps));
    const auto reference_parameters = final_parameters(reference, 1, kZeroBubbleSteps);
    const pipeplan::Run reference_run = read_run(reference.run_json);
    EXPECT_EQ(reference_run.measured.stages.at(0).bwd_weight_ms, 0);
    EXPECT_TRUE(reference_run.measured.step_times.back().ranks.at(0).bwd_weight_ms.empty());
    struct Split { int dp; bool checkpoint; };
    std::vector<Split> splits = {{1, false}};
    if (test.dp2 && m == 8) splits.push_back({2, false});
    if (test.checkpoint && m == 4) splits.push_back({1, true});
    for (const Split& split : splits) {
      TestPlanSpec spec = reference_spec;
      spec.dp = split.dp;
      spec.pp = 2;
      spec.schedule = Schedule::kZeroBubbleH1;
      spec.num_micro_batches = m / split.dp;
      if (split.checkpoint) spec.checkpoint = {true, true};
      const std::string what = test.model + " dp=" + std::to_string(split.dp) +
                               " pp=2 zb-h1 m=" + std::to_string(spec.num_micro_batches) +
                               (split.checkpoint ? " checkpointed" : "");
      const TrainRun run = train_new(make_test_plan(spec), "zb-h1", kZeroBubbleSteps);
      expect_success(run);
      expect_same_losses(step_losses(run.log), reference_losses, kLossRelativeTolerance, what);
      expect_same_parameters(final_parameters(run, 2, kZeroBubbleSteps), reference_parameters, what);
      const pipeplan::Run result = read_run(run.run_json);
      expect_split_backward_measured(result, spec.num_micro_batches, what);
      if (split.checkpoint) {
        EXPECT_GT(result.measured.stages.at(0).recompute_ms, 0) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SerialZeroBubbleTrainTest, ::testing::ValuesIn(kZeroBubbleCases),
                         [](const ::testing::TestParamInfo<ZeroBubbleCase>& info) {
                           return info.param.model;
                         });

// interleaved-1f1b (V = 2 chunks per stage) on a zoo model: which extra splits run beside
// dp=1 pp=2, as for zb-h1.
struct InterleavedCase {
  std::string model;
  std::vector<std::string> model_args;
  bool dp2 = false;         // dp=2 × pp=2 (4 ranks) against the m=8 reference
  bool checkpoint = false;  // every chunk checkpointed, against the m=4 reference
  bool pp4 = false;         // pp=4 (middle stages, a wrap edge between distinct ranks), m=4
};

void PrintTo(const InterleavedCase& test, std::ostream* out) { *out << test.model; }

const std::vector<InterleavedCase> kInterleavedCases = {
    {"mlp_tiny", {"layers=8"}, /*dp2=*/true, /*checkpoint=*/false, /*pp4=*/true},
    {"gpt_tiny", {}, /*dp2=*/false, /*checkpoint=*/true, /*pp4=*/false}};
constexpr int kInterleavedSteps = 4;
constexpr int kInterleavedChunks = 2;

// run.json of an interleaved run of `m` micro-batches per replica: step times of every chunk's
// micro-batches (V·m entries), per-micro-batch times summed over the chunks, events of chunk 1.
void expect_chunks_measured(const pipeplan::Run& run, int m, const std::string& what) {
  for (size_t stage_idx = 0; stage_idx < run.measured.stages.size(); ++stage_idx) {
    const StageMeasurement& stage = run.measured.stages[stage_idx];
    const std::string where = what + " stage " + std::to_string(stage_idx);
    EXPECT_GT(stage.fwd_ms, 0) << where;
    EXPECT_GT(stage.bwd_ms, 0) << where;
    EXPECT_NEAR(stage.compute_ms, m * (stage.fwd_ms + stage.bwd_ms + stage.recompute_ms),
                1e-6 * stage.compute_ms)
        << where;
  }
  ASSERT_FALSE(run.measured.step_times.empty()) << what;
  const size_t entries = static_cast<size_t>(kInterleavedChunks * m);
  for (const RankStepTimes& rank : run.measured.step_times.back().ranks) {
    ASSERT_EQ(rank.fwd_ms.size(), entries) << what;
    ASSERT_EQ(rank.bwd_ms.size(), entries) << what;
    EXPECT_GT(*std::min_element(rank.fwd_ms.begin(), rank.fwd_ms.end()), 0) << what;
    EXPECT_GT(*std::min_element(rank.bwd_ms.begin(), rank.bwd_ms.end()), 0) << what;
  }
  std::set<std::pair<int, int>> forward_chunks;  // (rank, chunk)
  for (const TimelineEvent& event : run.measured.timeline.events)
    if (event.kind == TimelineKind::kForward) forward_chunks.insert({event.rank, event.chunk});
  EXPECT_EQ(forward_chunks.size(), run.measured.ranks.size() * kInterleavedChunks) << what;
}

class SerialInterleavedTrainTest : public ::testing::TestWithParam<InterleavedCase> {};

// interleaved-1f1b over pp=2 with V=2 (m=4 and m=8; pp=4 too where the case asks) trains as the
// one-process run of the same micro-batches: the same losses, parameters after the steps and
// test accuracy (its evaluation runs chunk by chunk).
TEST_P(SerialInterleavedTrainTest, MatchesTheSingleProcessRun) {
  const InterleavedCase& test = GetParam();
  for (int m : {4, 8}) {
    TestPlanSpec reference_spec;
    reference_spec.model = test.model;
    reference_spec.model_args = test.model_args;
    reference_spec.num_micro_batches = m;
    const TrainRun reference =
        train_new(make_test_plan(reference_spec), "reference", kInterleavedSteps);
    expect_success(reference);
    const std::vector<double> reference_losses = step_losses(reference.log);
    ASSERT_EQ(reference_losses.size(), static_cast<size_t>(kInterleavedSteps));
    const auto reference_parameters = final_parameters(reference, 1, kInterleavedSteps);
    const double reference_accuracy =
        read_run(reference.run_json).test_accuracy.back().test_accuracy;
    struct Split {
      int dp, pp;
      bool checkpoint;
    };
    std::vector<Split> splits = {{1, 2, false}};
    if (test.dp2 && m == 8) splits.push_back({2, 2, false});
    if (test.checkpoint && m == 4) splits.push_back({1, 2, true});
    if (test.pp4 && m == 4) splits.push_back({1, 4, false});
    for (const Split& split : splits) {
      TestPlanSpec spec = reference_spec;
      spec.dp = split.dp;
      spec.pp = split.pp;
      spec.schedule = Schedule::kInterleaved1F1B;
      spec.virtual_stages = kInterleavedChunks;
      spec.num_micro_batches = m / split.dp;
      if (split.checkpoint) spec.checkpoint.assign(split.pp * kInterleavedChunks, true);
      const std::string what = test.model + " dp=" + std::to_string(split.dp) +
                               " pp=" + std::to_string(split.pp) +
                               " interleaved-1f1b V=2 m=" + std::to_string(spec.num_micro_batches) +
                               (split.checkpoint ? " checkpointed" : "");
      const TrainRun run = train_new(make_test_plan(spec), "interleaved", kInterleavedSteps);
      expect_success(run);
      expect_same_losses(step_losses(run.log), reference_losses, kLossRelativeTolerance, what);
      expect_same_parameters(final_parameters(run, split.pp, kInterleavedSteps),
                             reference_parameters, what);
      const pipeplan::Run result = read_run(run.run_json);
      EXPECT_NEAR(result.test_accuracy.back().test_accuracy, reference_accuracy, 2e-3) << what;
      expect_chunks_measured(result, spec.num_micro_batches, what);
      if (split.checkpoint) {
        EXPECT_GT(result.measured.stages.at(0).recompute_ms, 0) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SerialInterleavedTrainTest, ::testing::ValuesIn(kInterleavedCases),
                         [](const ::testing::TestParamInfo<InterleavedCase>& info) {
                           return info.param.model;
                         });

TEST(SerialTrainTest, ResumingReproducesTheUninterruptedRun) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  const int steps = 6;
  const TrainRun full = train_new(plan, "uninterrupted", steps);
  expect_success(full);
  TrainRun broken = in_dir(fresh_dir("interrupted"));
  train(&broken, plan, steps, {"--checkpoint-every", "3"}, {{"PIPEPLAN_TEST_FAIL_AT_STEP", "5"}});
  for (const RankExit& exit : broken.exits) expect_one_line_error(exit, 1, "before step 5");
  train(&broken, plan, steps, {"--checkpoint-every", "3", "--resume"});
  expect_success(broken);
  // Bit for bit: the same computation from the same stored numbers.
  expect_same_losses(step_losses(broken.log), step_losses(full.log), 0, "resumed");
  expect_same_parameters(final_parameters(broken, 2, steps), final_parameters(full, 2, steps), "resumed");
  EXPECT_EQ(read_run(broken.run_json).resumed_from_step, 3);
}

TEST(SerialTrainTest, ResumeRefusesACheckpointOfAnotherPlanOrACorruptOne) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  TrainRun run = in_dir(fresh_dir("run"));
  train(&run, plan, 2);
  expect_success(run);
  Plan other = plan;
  other.optimizer.base_lr *= 2;
  train(&run, other, 2, {"--resume"});
  for (const RankExit& exit : run.exits) expect_one_line_error(exit, 2, "another plan");
  std::ofstream(executor::checkpoint_stage_path(run.checkpoints, 2, 1), std::ios::trunc) << "garbage";
  train(&run, plan, 2, {"--resume"});
  expect_one_line_error(run.exits[1], 2, "corrupt");
}

// Flips `count` bytes of the first tensor of a stage file where they lie in the file.
void flip_weight_bytes(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const torch::Tensor first = executor::read_checkpoint_parameters(path).begin()->second.contiguous();
  ASSERT_GE(first.nbytes(), count);
  const size_t at = bytes.find(std::string(static_cast<const char*>(first.data_ptr()), count));
  ASSERT_NE(at, std::string::npos);
  for (size_t idx = at; idx < at + count; ++idx) bytes[idx] = static_cast<char>(~bytes[idx]);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(SerialTrainTest, ResumeRefusesFlippedWeightsAndAStageFileOfAnotherStep) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  TrainRun run = in_dir(fresh_dir("run"));
  train(&run, plan, 4, {"--checkpoint-every", "2"});
  expect_success(run);
  const std::string stage_file = executor::checkpoint_stage_path(run.checkpoints, 4, 1);
  const std::string intact = [&] {
    std::ifstream in(stage_file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  flip_weight_bytes(stage_file, 16);
  train(&run, plan, 4, {"--checkpoint-every", "2", "--resume"});
  expect_one_line_error(run.exits[1], 2, "checkpoint '" + stage_file + "': its tensors hash to");
  std::ofstream(stage_file, std::ios::binary | std::ios::trunc) << intact;
  std::filesystem::copy_file(executor::checkpoint_stage_path(run.checkpoints, 2, 1), stage_file,
                             std::filesystem::copy_options::overwrite_existing);
  train(&run, plan, 4, {"--checkpoint-every", "2", "--resume"});
  expect_one_line_error(run.exits[1], 2, "holds step '2', not step 4");
  // A stray folder among the checkpoints ended the run with "error: stoll": it is ignored.
  std::ofstream(stage_file, std::ios::binary | std::ios::trunc) << intact;
  std::filesystem::create_directories(std::filesystem::path(run.checkpoints) / "step-abc");
  train(&run, plan, 4, {"--checkpoint-every", "2", "--resume"});
  expect_success(run);
}

// torchrun's static rendezvous: its agent serves the store on MASTER_PORT (here the test does)
// and sets TORCHELASTIC_USE_AGENT_STORE; both ranks join it as clients under its worker prefix.
TEST(SerialTrainTest, TrainsWithTorchrunsAgentStore) {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(120);
  const auto agent = compat::make_tcp_store("127.0.0.1", options);
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  TrainRun run = in_dir(fresh_dir("agent"));
  train(&run, plan, 3, {},
        {{"MASTER_PORT", std::to_string(agent->getPort())},
         {"TORCHELASTIC_USE_AGENT_STORE", "True"},
         {"TORCHELASTIC_RESTART_COUNT", "0"},
         {"TORCHELASTIC_RUN_ID", "none"}});
  expect_success(run);
  EXPECT_EQ(step_losses(run.log).size(), 3u);
  EXPECT_TRUE(agent->check({"/worker/attempt_0/pipeplan/joined"}));
}

// torchrun itself (torch.distributed.run of the Python with torch, static rendezvous, its agent
// serving the store) starting two ranks of `pipeplan train`. `--redirects 1 --tee 1`: torch
// 1.13's default "0" fails on Python 3.11 (Std.from_str finds no member for 0 and returns None).
// Debian 13's torch 2.6 has no libuv, and its torchrun's static rendezvous asks for it whatever
// USE_LIBUV says: torchrun_without_libuv.py runs torchrun with the agent's store made without it
// (USE_LIBUV=0; 1.13 runs torchrun unchanged). The ranks join whichever server the agent starts.
TEST(SerialTrainTest, TrainsUnderTorchrun) {
  const std::string python = PIPEPLAN_TORCH_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python with torch (PIPEPLAN_TORCH_PYTHON is empty)";
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  const TrainRun run = in_dir(fresh_dir("torchrun"));
  write_plan(run.dir + "/plan.json", plan);
  const std::string command =
      "USE_LIBUV=0 " + python + " " + PIPEPLAN_SOURCE_DIR +
      "/tests/executor/torchrun_without_libuv.py --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 " +
      "--master_port " + std::to_string(executor::pick_free_port()) + " --redirects 1 --tee 1 " +
      "--log_dir " + run.dir + "/torchrun_logs --no_python " +
      PIPEPLAN_BINARY_DIR + "/cli/pipeplan train --plan " + run.dir + "/plan.json " +
      "--data synthetic --steps 3 --log " + run.log + " -o " + run.run_json + " > " + run.dir +
      "/torchrun.txt 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream output(run.dir + "/torchrun.txt");
  const std::string text((std::istreambuf_iterator<char>(output)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_EQ(step_losses(run.log).size(), 3u);
  EXPECT_EQ(read_run(run.run_json).world_size, 2);
}

TEST(SerialTrainTest, CheckpointingStagesGivesTheSameLosses) {
  TestPlanSpec spec = split_spec(/*dp=*/1, /*pp=*/2, Schedule::kGpipe);
  const TrainRun plain = train_new(make_test_plan(spec), "plain", kSteps);
  spec.checkpoint = {true, true};
  const TrainRun checkpointed = train_new(make_test_plan(spec), "checkpointed", kSteps);
  expect_success(plain);
  expect_success(checkpointed);
  expect_same_losses(step_losses(checkpointed.log), step_losses(plain.log), 1e-6, "checkpointed");
  expect_same_parameters(final_parameters(checkpointed, 2, kSteps), final_parameters(plain, 2, kSteps),
                         "checkpointed");
  const pipeplan::Run run = read_run(checkpointed.run_json);
  EXPECT_GT(run.measured.stages.at(0).recompute_ms, 0);
  EXPECT_EQ(read_run(plain.run_json).measured.stages.at(0).recompute_ms, 0);
}

TEST(SerialTrainTest, ANanStopsEveryRankNamingStepStageAndRank) {
  TestPlanSpec spec = split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB);
  spec.optimizer.base_lr = 1e6;  // the largest a plan accepts: the weights overflow
  spec.optimizer.warmup_steps = 0;
  const TrainRun run = train_new(make_test_plan(spec), "nan", kSteps);
  for (const RankExit& exit : run.exits) {
    expect_one_line_error(exit, 1, "NaN or Inf on stage ");
    EXPECT_NE(exit.stderr_text.find("step "), std::string::npos);
    EXPECT_NE(exit.stderr_text.find("(rank "), std::string::npos);
  }
}

TEST(SerialTrainTest, AMissingPeerEndsWithARuntimeErrorInsteadOfAHang) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  const TrainRun run = in_dir(fresh_dir("alone"));
  write_plan(run.dir + "/plan.json", plan);
  const auto exits = run_ranks(2, {"train", "--plan", run.dir + "/plan.json", "--data", "synthetic",
                                   "--timeout-s", "2", "-o", run.run_json},
                               {}, /*timeout_s=*/60, /*only_rank=*/0);
  expect_one_line_error(exits.at(0), 1, "rendezvous");
}

TEST(SerialTrainTest, WritesTheLogRunAndTrace) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  const int steps = 30;
  TrainRun run = in_dir(fresh_dir("outputs"));
  train(&run, plan, steps, {"--trace", run.dir + "/trace.json"});
  expect_success(run);
  // The log: one line per step, then the end-of-run evaluation.
  const std::vector<Json> lines = read_json_lines(run.log);
  ASSERT_EQ(lines.size(), static_cast<size_t>(steps + 1));
  for (const char* key : {"step", "epoch", "loss", "lr", "iteration_ms", "samples_per_s"})
    EXPECT_TRUE(lines.front().contains(key)) << key;
  EXPECT_LT(lines[steps - 1].at("loss").get<double>(), lines[0].at("loss").get<double>());
  EXPECT_EQ(lines.back().at("step"), steps);
  EXPECT_GT(lines.back().at("test_accuracy").get<double>(), 0.5);
  // run.json: validated on reading; the measured keys of the plan's predictions.
  const pipeplan::Run result = read_run(run.run_json);
  EXPECT_EQ(result.world_size, 2);
  EXPECT_EQ(result.measured.ranks.size(), 2u);
  ASSERT_EQ(result.measured.stages.size(), 2u);
  EXPECT_GT(result.measured.iteration_ms, 0);
  EXPECT_GT(result.measured.samples_per_s, 0);
  EXPECT_LT(result.measured.bubble_fraction, 1);
  for (const StageMeasurement& stage : result.measured.stages) {
    EXPECT_GT(stage.fwd_ms, 0);
    EXPECT_GT(stage.bwd_ms, 0);
    EXPECT_GT(stage.peak_memory_bytes, 0);
    EXPECT_NEAR(stage.busy_ms + stage.idle_ms, result.measured.iteration_ms, 1e-6);
  }
  EXPECT_EQ(result.final_loss, lines[steps - 1].at("loss").get<double>());
  // The trace: every rank's forwards and backwards of the traced steps, in µs.
  const Json trace = read_json_file(run.dir + "/trace.json");
  std::set<std::pair<int, std::string>> seen;
  for (const Json& event : trace.at("traceEvents"))
    if (event.at("ph") == "X") seen.insert({event.at("pid").get<int>(), event.at("cat").get<std::string>()});
  for (int rank = 0; rank < 2; ++rank)
    for (const char* kind : {"forward", "backward", "optimizer"})
      EXPECT_EQ(seen.count({rank, kind}), 1u) << "rank " << rank << " " << kind;
  EXPECT_EQ(seen.count({1, "recv-wait"}), 1u);
  EXPECT_EQ(seen.count({0, "load"}), 1u);
  // run.json's representative step: every rank's events of one measured step, from time 0.
  const Timeline& timeline = result.measured.timeline;
  EXPECT_GT(result.measured.timeline_step, result.measured.warmup_steps);
  EXPECT_LE(result.measured.timeline_step, steps);
  EXPECT_EQ(timeline.rank_stages, (std::vector<int>{0, 1}));
  std::set<std::pair<int, TimelineKind>> kinds;
  double earliest_ms = timeline.iteration_ms;
  for (const TimelineEvent& event : timeline.events) {
    kinds.insert({event.rank, event.kind});
    earliest_ms = std::min(earliest_ms, event.start_ms);
    EXPECT_LE(event.end_ms, timeline.iteration_ms + 1e-9);
  }
  EXPECT_GE(earliest_ms, 0);
  EXPECT_EQ(kinds.count({0, TimelineKind::kSend}), 1u);
  EXPECT_EQ(kinds.count({1, TimelineKind::kBackward}), 1u);
  EXPECT_GT(timeline.bubble_fraction, 0);
  EXPECT_LT(timeline.bubble_fraction, 1);
  // Step times for compare's replay: the last 20 measured steps, every rank's every action.
  const std::vector<StepTimes>& step_times = result.measured.step_times;
  ASSERT_EQ(step_times.size(), 20u);
  EXPECT_EQ(step_times.back().step, steps);
  for (const StepTimes& step : step_times) {
    EXPECT_GT(step.iteration_ms, 0);
    ASSERT_EQ(step.ranks.size(), 2u);
    for (const RankStepTimes& rank : step.ranks) {
      ASSERT_EQ(rank.fwd_ms.size(), static_cast<size_t>(plan.num_micro_batches));
      EXPECT_GT(*std::min_element(rank.fwd_ms.begin(), rank.fwd_ms.end()), 0);
      EXPECT_GT(*std::min_element(rank.bwd_ms.begin(), rank.bwd_ms.end()), 0);
      EXPECT_GT(rank.optimizer_ms, 0);
    }
  }
}

TEST(TrainRefusalTest, RefusesAPlanForAnotherModel) {
  Plan plan = make_test_plan(TestPlanSpec());
  plan.model.hash = "fnv1a64:0123456789abcdef";
  const TrainRun run = train_new(plan, "hash", 1);
  expect_one_line_error(run.exits.at(0), 2, "model.hash");
}

TEST(TrainRefusalTest, RefusesAPlanWithOtherLayers) {
  Plan plan = make_test_plan(TestPlanSpec());
  plan.model.num_layers += 1;
  plan.stages.back().last += 1;
  const TrainRun run = train_new(plan, "layers", 1);
  expect_one_line_error(run.exits.at(0), 2, "num_layers");
}

TEST(TrainRefusalTest, RefusesAWorldSizeOtherThanThePlans) {
  const Plan plan = make_test_plan(split_spec(/*dp=*/1, /*pp=*/2, Schedule::kOneFOneB));
  const TrainRun run = in_dir(fresh_dir("world"));
  write_plan(run.dir + "/plan.json", plan);
  const auto exits = run_ranks(0, {"train", "--plan", run.dir + "/plan.json", "--data",
                                   "synthetic", "-o", run.run_json});
  expect_one_line_error(exits.at(0), 2, "WORLD_SIZE=1");
}

TEST(TrainRefusalTest, ALogThatCannotBeWrittenEndsTheRunNamingIt) {
  const Plan plan = make_test_plan(TestPlanSpec());
  const TrainRun run = in_dir(fresh_dir("log"));
  write_plan(run.dir + "/plan.json", plan);
  const auto exits = run_ranks(0, {"train", "--plan", run.dir + "/plan.json", "--data",
                                   "synthetic", "--steps", "2", "--log", "/dev/full", "-o",
                                   run.run_json});
  expect_one_line_error(exits.at(0), 1, "cannot write '/dev/full': No space left on device");
  EXPECT_FALSE(std::filesystem::exists(run.run_json));
}

TEST(TrainRefusalTest, RefusesMalformedRendezvousVariables) {
  const Plan plan = make_test_plan(TestPlanSpec());
  const TrainRun run = in_dir(fresh_dir("env"));
  write_plan(run.dir + "/plan.json", plan);
  const auto exits = run_ranks(0, {"train", "--plan", run.dir + "/plan.json", "--data",
                                   "synthetic", "-o", run.run_json},
                               {{"RANK", "zero"}, {"WORLD_SIZE", "2"}});
  expect_one_line_error(exits.at(0), 2, "RANK='zero'");
}

}  // namespace
}  // namespace pipeplan::testing
