// Tests for executor/data_parallel.h and executor/bucket_collectives.h: buckets tile the flat
// buffers in backward order, ZeRO-1's pieces tile each bucket, the Gloo ring reduce-scatter and
// the padded all-gather over three ranks, and through the built `pipeplan train`: dp=2 with
// overlap, ZeRO-1 or both (pp=1, pp=2, zb-h1) trains as one process, ZeRO-1 keeps 1/dp of the
// optimizer state, resumes exactly, and refuses a checkpoint of another zero setting.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "executor/bucket_collectives.h"
#include "executor/checkpoint.h"
#include "executor/data_parallel.h"
#include "models/model.h"
#include "plans/run.h"
#include "plans/schedule.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::testing {
namespace {

// A few KiB: mlp_tiny's and gpt_tiny's stages then have several buckets each.
constexpr int64_t kSmallBucketBytes = 4096;
constexpr int kSteps = 4;
constexpr double kRelativeTolerance = 1e-5;

// Buckets of stage `stage_idx` of `spec`'s plan with kSmallBucketBytes.
struct BuiltStage {
  Plan plan;
  models::Model model;
  std::unique_ptr<executor::StageRuntime> stage;
  std::vector<executor::FlatBucket> buckets;
};

BuiltStage build_stage(const TestPlanSpec& spec, int stage_idx) {
  BuiltStage built;
  built.plan = make_test_plan(spec);
  built.plan.data_parallel.bucket_bytes = kSmallBucketBytes;
  built.model = models::make_model(spec.model, spec.model_args);
  built.stage = std::make_unique<executor::StageRuntime>(built.model, built.plan, stage_idx,
                                                         torch::kCPU, /*seed=*/1);
  const std::vector<Action> actions =
      expand_schedule(built.plan).at(static_cast<size_t>(stage_idx));
  built.buckets = executor::flat_buckets(built.plan, *built.stage, actions);
  return built;
}

// Buckets tile the flat buffers once; within a chunk they run from its last layers to its first;
// their gradient bytes add up to the trainable parameters', each counted once.
void expect_buckets_tile_the_stage(const BuiltStage& built, const std::string& what) {
  std::set<std::pair<int64_t, int64_t>> ranges;
  int64_t gradient_bytes = 0;
  for (size_t idx = 0; idx < built.buckets.size(); ++idx) {
    const executor::FlatBucket& bucket = built.buckets[idx];
    ranges.insert({bucket.offset, bucket.offset + bucket.elements});
    gradient_bytes += bucket.gradient_bytes;
    int64_t parameter_bytes = 0;
    for (const torch::Tensor& parameter : bucket.parameters) {
      EXPECT_GE(parameter.storage_offset(), bucket.offset) << what;
      EXPECT_LE(parameter.storage_offset() + parameter.numel(), bucket.offset + bucket.elements)
          << what;
      parameter_bytes += parameter.numel() * 4;
    }
    EXPECT_EQ(parameter_bytes, bucket.gradient_bytes) << what << " bucket " << idx;
    if (idx > 0 && built.buckets[idx - 1].chunk == bucket.chunk) {
      EXPECT_EQ(bucket.last_layer, built.buckets[idx - 1].first_layer) << what;
    }
  }
  int64_t end = 0;
  for (const auto& [begin, stop] : ranges) {
    EXPECT_EQ(begin, end) << what;
    end = stop;
  }
  EXPECT_EQ(end, built.stage->parameters().numel()) << what;
  std::set<const void*> trainable;
  int64_t trainable_bytes = 0;
  for (const models::LayerPtr& layer : built.stage->layers())
    for (const torch::Tensor& parameter : layer->parameters())
      if (parameter.requires_grad() && trainable.insert(parameter.data_ptr()).second)
        trainable_bytes += parameter.numel() * 4;
  EXPECT_EQ(gradient_bytes, trainable_bytes) << what;
}

TEST(FlatBucketsTest, TileTheFlatBuffersInBackwardOrder) {
  TestPlanSpec mlp;
  const BuiltStage whole = build_stage(mlp, 0);
  EXPECT_GT(whole.buckets.size(), 2u);
  expect_buckets_tile_the_stage(whole, "mlp_tiny pp=1");
  // The first bucket holds the last layer: its gradient is complete first in a backward.
  EXPECT_EQ(whole.buckets.front().last_layer, static_cast<int>(whole.stage->layers().size()));
  TestPlanSpec gpt;
  gpt.model = "gpt_tiny";
  gpt.pp = 2;
  expect_buckets_tile_the_stage(build_stage(gpt, 1), "gpt_tiny stage 1 of 2");
  // interleaved-1f1b: chunk 1's last backward comes before chunk 0's, so its buckets start first.
  TestPlanSpec interleaved = mlp;
  interleaved.model_args = {"layers=8"};
  interleaved.pp = 2;
  interleaved.schedule = Schedule::kInterleaved1F1B;
  interleaved.virtual_stages = 2;
  const BuiltStage chunks = build_stage(interleaved, 0);
  expect_buckets_tile_the_stage(chunks, "mlp_tiny interleaved stage 0");
  EXPECT_EQ(chunks.buckets.front().chunk, 1);
  EXPECT_EQ(chunks.buckets.back().chunk, 0);
}

TEST(FlatBucketsTest, ShardPiecesTileEachBucketOnce) {
  TestPlanSpec spec;
  const BuiltStage built = build_stage(spec, 0);
  for (int dp : {2, 3}) {
    int64_t shard_total = 0;
    for (int replica = 0; replica < dp; ++replica) {
      const auto segments = executor::shard_segments(built.buckets, *built.stage, replica, dp);
      ASSERT_EQ(segments.size(), built.buckets.size());
      for (size_t idx = 0; idx < segments.size(); ++idx) {
        const executor::FlatBucket& bucket = built.buckets[idx];
        EXPECT_LE(segments[idx].parameters.numel(), (bucket.elements + dp - 1) / dp);
        shard_total += segments[idx].parameters.numel();
      }
    }
    EXPECT_EQ(shard_total, built.stage->parameters().numel()) << "dp=" << dp;
  }
  const executor::ShardPieces pieces = executor::shard_pieces(/*elements=*/2, /*group_size=*/3);
  EXPECT_EQ(pieces.length(0), 1);
  EXPECT_EQ(pieces.length(2), 0);
  EXPECT_EQ(pieces.begin(2), 2);
}

// Three Gloo ranks as threads: the ring reduce-scatter leaves each rank its piece's sum (pieces of
// 4, 4 and 2 elements, and of 1, 1 and 0), and the all-gather gives every rank every piece.
TEST(BucketCollectiveTest, RingReduceScatterAndAllGatherOverThreeRanks) {
  constexpr int kRanks = 3;
  const auto store = c10::make_intrusive<c10d::HashStore>();
  auto device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
        options->devices = {device};
        const auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
            c10::make_intrusive<c10d::PrefixStore>("test", store), rank, kRanks, options);
        const auto wait = [](const executor::BucketCollective::WorkPtr& work) { work->wait(); };
        int tag = 0;
        for (int64_t elements : {10, 2}) {
          // Rank r holds r + 1 + element index · 10: sums are 6 + 30 · index.
          torch::Tensor values = torch::arange(elements, torch::kFloat32) * 10 + (rank + 1);
          executor::BucketCollective reduce(executor::BucketOp::kReduceScatter, group, rank, kRanks,
                                            values, /*ring=*/true, tag++);
          reduce.finish(wait);
          const executor::ShardPieces pieces = executor::shard_pieces(elements, kRanks);
          const torch::Tensor expected = torch::arange(elements, torch::kFloat32) * 30 + 6;
          const auto mine = [&](const torch::Tensor& t) {
            return t.narrow(0, pieces.begin(rank), pieces.length(rank));
          };
          if (!torch::equal(mine(values), mine(expected)))
            errors[rank] += "reduce-scatter differs; ";
          // Every rank keeps only its piece right; the all-gather restores the whole.
          torch::Tensor gathered = torch::full({elements}, -1.0f);
          mine(gathered).copy_(mine(expected));
          executor::BucketCollective gather(executor::BucketOp::kAllGather, group, rank, kRanks,
                                            gathered, /*ring=*/true, tag++);
          gather.finish(wait);
          if (!torch::equal(gathered, expected)) errors[rank] += "all-gather differs; ";
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

// The elements of optimizer state tensor "optimizer.<name>" in a checkpoint file.
int64_t optimizer_state_elements(const std::string& path, const std::string& name) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::Tensor state;
  archive.read("optimizer." + name, state);
  return state.numel();
}

// A dp=2 plan of `spec` with kSmallBucketBytes and the given overlap and zero.
Plan data_parallel_plan(TestPlanSpec spec, bool overlap, int zero) {
  spec.dp = 2;
  spec.num_micro_batches /= 2;
  Plan plan = make_test_plan(spec);
  plan.data_parallel = {overlap, kSmallBucketBytes, zero};
  plan.validate("data-parallel test plan");
  return plan;
}

struct DataParallelCase {
  std::string model;
  std::vector<std::string> model_args;
};

void PrintTo(const DataParallelCase& test, std::ostream* out) { *out << test.model; }

class SerialDataParallelTrainTest : public ::testing::TestWithParam<DataParallelCase> {};

// dp=2 over pp=1 and pp=2, with overlap, ZeRO-1 or both, trains as the one-process run of the
// same micro-batches: the same losses and parameters after the steps. Under ZeRO-1 each
// replica's optimizer state is 1/dp of the replicated state and run.json has the all-gather.
TEST_P(SerialDataParallelTrainTest, MatchesTheSingleProcessRun) {
  TestPlanSpec reference_spec;
  reference_spec.model = GetParam().model;
  reference_spec.model_args = GetParam().model_args;
  const TrainRun reference = train_new(make_test_plan(reference_spec), "reference", kSteps);
  expect_success(reference);
  const std::vector<double> reference_losses = step_losses(reference.log);
  ASSERT_EQ(reference_losses.size(), static_cast<size_t>(kSteps));
  const auto reference_parameters = final_parameters(reference, 1, kSteps);
  struct Setting {
    bool overlap;
    int zero;
  };
  for (int pp : {1, 2})
    for (const Setting& setting : {Setting{true, 0}, Setting{false, 1}, Setting{true, 1}}) {
      TestPlanSpec spec = reference_spec;
      spec.pp = pp;
      const Plan plan = data_parallel_plan(spec, setting.overlap, setting.zero);
      const std::string what = GetParam().model + " dp=2 pp=" + std::to_string(pp) +
                               (setting.overlap ? " overlap" : "") +
                               (setting.zero ? " zero-1" : "");
      const TrainRun run = train_new(plan, "dp2", kSteps);
      expect_success(run);
      expect_same_losses(step_losses(run.log), reference_losses, kRelativeTolerance, what);
      expect_same_parameters(final_parameters(run, pp, kSteps), reference_parameters, what);
      if (setting.zero == 0) continue;
      const pipeplan::Run result = read_run(run.run_json);
      for (const StageMeasurement& stage : result.measured.stages)
        EXPECT_GT(stage.allgather_ms, 0) << what;
      for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
        // The replicated state of the stage is as long as its flat parameters.
        const auto stage_parameters = executor::read_checkpoint_parameters(
            executor::checkpoint_stage_path(run.checkpoints, kSteps, stage_idx));
        int64_t total = 0;
        for (const auto& [name, tensor] : stage_parameters) total += tensor.numel();
        int64_t shards = 0;
        for (int replica = 0; replica < 2; ++replica) {
          const int64_t elements = optimizer_state_elements(
              executor::checkpoint_shard_path(run.checkpoints, kSteps, stage_idx, replica),
              "momentum");
          EXPECT_LE(elements, total / 2 + 64)
              << what << " stage " << stage_idx;  // 64: bucket rounding
          shards += elements;
        }
        EXPECT_EQ(shards, total) << what << " stage " << stage_idx;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Models, SerialDataParallelTrainTest,
                         ::testing::Values(DataParallelCase{"mlp_tiny", {}},
                                           DataParallelCase{"gpt_tiny", {}}),
                         [](const ::testing::TestParamInfo<DataParallelCase>& info) {
                           return info.param.model;
                         });

// zb-h1 and interleaved-1f1b (V=2) over dp=2 pp=2 with overlap, with and without ZeRO-1: the
// buckets start in each chunk's last W (zb-h1), or in each chunk's last backward, chunk 1's in
// the cool-down while chunk 0's backwards still run (interleaved-1f1b: its kAllReduceStart
// mid-list).
TEST(SerialDataParallelTrainTest, ZeroBubbleAndInterleavedWithOverlapMatchTheSingleProcessRun) {
  TestPlanSpec reference_spec;
  reference_spec.model_args = {"layers=8"};
  reference_spec.num_micro_batches = 8;
  const TrainRun reference = train_new(make_test_plan(reference_spec), "reference", kSteps);
  expect_success(reference);
  for (Schedule schedule : {Schedule::kZeroBubbleH1, Schedule::kInterleaved1F1B}) {
    for (int zero : {0, 1}) {
      TestPlanSpec spec = reference_spec;
      spec.pp = 2;
      spec.schedule = schedule;
      if (schedule == Schedule::kInterleaved1F1B) spec.virtual_stages = 2;
      const std::string what = to_string(schedule) + " dp=2 pp=2 overlap" + (zero ? " zero-1" : "");
      const Plan plan = data_parallel_plan(spec, /*overlap=*/true, zero);
      int starts = 0;
      const std::vector<std::vector<Action>> expanded = expand_schedule(plan);
      for (const Action& action : expanded[0])
        starts += action.kind == ActionKind::kAllReduceStart ? 1 : 0;
      EXPECT_EQ(starts, plan.virtual_stages) << what;
      const TrainRun run = train_new(plan, "overlap", kSteps);
      expect_success(run);
      expect_same_losses(step_losses(run.log), step_losses(reference.log), kRelativeTolerance,
                         what);
      expect_same_parameters(final_parameters(run, 2, kSteps),
                             final_parameters(reference, 1, kSteps), what);
    }
  }
}

// A ZeRO-1 run interrupted after its checkpoint resumes to the uninterrupted run's numbers bit
// for bit (each replica reloads its own optimizer shard); a plan without ZeRO-1 is refused.
TEST(SerialDataParallelTrainTest, ResumesFromAZeroCheckpointExactly) {
  TestPlanSpec spec;
  spec.pp = 2;
  spec.optimizer = OptimizerSettings::defaults_for(OptimizerKind::kAdamw);
  const Plan plan = data_parallel_plan(spec, /*overlap=*/true, /*zero=*/1);
  const int steps = 5;
  const TrainRun full = train_new(plan, "uninterrupted", steps);
  expect_success(full);
  TrainRun broken = in_dir(fresh_dir("interrupted"));
  train(&broken, plan, steps, {"--checkpoint-every", "2"}, {{"PIPEPLAN_TEST_FAIL_AT_STEP", "4"}});
  for (const RankExit& exit : broken.exits) expect_one_line_error(exit, 1, "before step 4");
  Plan replicated = plan;
  replicated.data_parallel.zero = 0;
  train(&broken, replicated, steps, {"--checkpoint-every", "2", "--resume"});
  for (const RankExit& exit : broken.exits)
    expect_one_line_error(exit, 2,
                          "was saved with dp=2 and data_parallel.zero=1, this plan has "
                          "dp=2 and data_parallel.zero=0");
  train(&broken, plan, steps, {"--checkpoint-every", "2", "--resume"});
  expect_success(broken);
  expect_same_losses(step_losses(broken.log), step_losses(full.log), 0, "resumed");
  expect_same_parameters(final_parameters(broken, 2, steps), final_parameters(full, 2, steps),
                         "resumed");
  EXPECT_EQ(read_run(broken.run_json).resumed_from_step, 2);
}

}  // namespace
}  // namespace pipeplan::testing
