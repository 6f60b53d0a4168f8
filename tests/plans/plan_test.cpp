// Tests for plans/plan.h: the JSON round trip is lossless and validate() names each bad field.
#include "plans/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <limits>

#include "common/units.h"
#include "tests/common/error_of.h"
#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

using testing::error_of;

// A plan in which every field differs from its default.
Plan full_plan() {
  Plan plan = testing::make_test_plan(/*dp=*/2, /*pp=*/2, /*num_micro_batches=*/3, Schedule::kGpipe,
                                      /*devices_per_node=*/2,
                                      /*extra_layers=*/1);
  plan.model.config = Json{{"hidden", 128}, {"layers", 4}};
  plan.model.input_dtype = "int64";
  plan.cluster.device_kind = "cuda";
  plan.cluster.intra_node_bandwidth_bytes_per_s = 1.25e11;
  plan.cluster.inter_node_bandwidth_bytes_per_s = 1.25e10;
  plan.cluster.latency_ms = 0.0123456789;
  plan.precision = Precision::kAmpBf16;
  plan.optimizer = OptimizerSettings::defaults_for(OptimizerKind::kAdamw);
  plan.optimizer.warmup_steps = 7;
  plan.optimizer.min_lr_fraction = 0.05;
  plan.partition = "uniform";
  plan.stages[0].input_dtype = "int64";  // the model's input
  plan.stages[1].checkpoint = true;
  plan.stages[1].output_dtype = "bfloat16";
  for (RankAssignment& rank : plan.ranks) rank.device = "cuda:" + std::to_string(rank.local_rank);
  Predictions& p = plan.predictions;
  p.iteration_ms = 123.456789012345;
  p.samples_per_s = samples_per_s(plan.global_batch, p.iteration_ms);
  p.bubble_fraction = 0.1 / 3;
  p.allreduce_ms = 1.5;
  p.optimizer_ms = 2.25;
  p.notes = {"micro-batch 64 is beyond the profiled 1..32: extrapolated"};
  for (int stage_idx = 0; stage_idx < 2; ++stage_idx) {
    StagePrediction& s = p.stages[stage_idx];
    s.fwd_ms = 1.0 / 3 + stage_idx;
    s.bwd_ms = 2.0 / 3;
    s.recompute_ms = stage_idx;
    s.p2p_ms = 0.01;
    s.compute_ms = plan.num_micro_batches * (s.fwd_ms + s.bwd_ms + s.recompute_ms);
    s.allreduce_ms = 1.5;
    s.optimizer_ms = 2.25;
    s.busy_ms = 11.125;
    s.idle_ms = 3.0 / 7;
    s.fwd_cv = 0.125 * (stage_idx + 1);
    s.bwd_cv = 0.0625;
    MemoryTerms& m = s.memory;
    m = {1, 2, 3, 4, 5, 6, /*in_flight=*/3, /*activations_bytes=*/18, 9, 10, 11, 12,
         /*calibration_bytes=*/-13, /*total_bytes=*/62};
    s.peak_memory_bytes = m.total_bytes;
  }
  Calibration calibration;
  calibration.run_path = "run.json";
  calibration.run_hash = "fnv1a64:0000000000000002";
  calibration.plan_hash = "fnv1a64:0000000000000003";
  calibration.configuration = "dp=2 pp=2 b=2 m=3 gpipe stages 0:1,1:3c";
  calibration.optimizer = "adamw";
  calibration.stages = {{0, 1, 1.25, 0.75, 1.5, -4096}, {1, 3, 2.0 / 3, 1.0, 1.0, 65536}};
  calibration.profile_latency_ms = 0.02;
  calibration.latency_ms = 0.125;
  calibration.latency_note = "fitted";
  plan.calibration = calibration;
  return plan;
}

TEST(PlanTest, JsonRoundTripIsEqual) {
  const Plan plan = full_plan();
  const Json json = to_json(plan);
  const Plan back = plan_from_json(Json::parse(json.dump()), "plan.json");
  EXPECT_EQ(to_json(back), json);
  EXPECT_EQ(plan_hash(back), plan_hash(plan));
  EXPECT_EQ(back.predictions.stages[1].memory.in_flight, 3);
  EXPECT_EQ(back.predictions.stages[0].idle_ms, 3.0 / 7);
  EXPECT_EQ(back.predictions.stages[1].fwd_cv, 0.25);
  EXPECT_EQ(back.predictions.stages[0].bwd_cv, 0.0625);
  EXPECT_EQ(back.stages[1].output_dtype, "bfloat16");
  EXPECT_EQ(back.precision, Precision::kAmpBf16);
  EXPECT_EQ(back.optimizer.kind, OptimizerKind::kAdamw);
  EXPECT_EQ(back.ranks[3].device, "cuda:1");
  EXPECT_EQ(back.predictions.stages[1].memory.calibration_bytes, -13);
  ASSERT_TRUE(back.calibration.has_value());
  EXPECT_EQ(back.calibration->stages[0].memory_correction_bytes, -4096);
  EXPECT_EQ(back.calibration->stages[1].fwd_scale, 2.0 / 3);
}

// Issue 22/23's optional keys: a dp=2 plan's data_parallel object, an inference plan's mode and
// latency; each read back equal, each refused in one line where it contradicts the plan.
TEST(PlanTest, DataParallelAndInferenceKeysRoundTripAndAreChecked) {
  Plan plan = testing::make_test_plan(2, 2, 2, Schedule::kOneFOneB);
  plan.data_parallel = {true, 4096, 1};
  Plan back = plan_from_json(Json::parse(to_json(plan).dump()), "plan.json");
  EXPECT_TRUE(back.data_parallel.overlap);
  EXPECT_EQ(back.data_parallel.bucket_bytes, 4096);
  EXPECT_EQ(back.data_parallel.zero, 1);
  EXPECT_FALSE(to_json(testing::make_test_plan(1, 2, 2, Schedule::kOneFOneB)).contains("data_parallel"));
  plan.data_parallel.bucket_bytes = 2;
  EXPECT_EQ(error_of([&] { plan.validate("plan.json"); }),
            "plan.json: data_parallel.bucket_bytes: 2: expected an integer in [4, 1125899906842624]");

  Plan inference = testing::make_test_plan(1, 2, 4, Schedule::kGpipe);
  inference.mode = PlanMode::kInference;
  inference.predictions.iteration_ms = 2;
  inference.predictions.samples_per_s = samples_per_s(inference.global_batch, 2);
  inference.predictions.latency_ms = 3;
  back = plan_from_json(Json::parse(to_json(inference).dump()), "plan.json");
  EXPECT_EQ(back.mode, PlanMode::kInference);
  EXPECT_EQ(back.predictions.latency_ms, 3);
  EXPECT_NE(plan_hash(back), plan_hash(testing::make_test_plan(1, 2, 4, Schedule::kGpipe)));
  inference.schedule = Schedule::kOneFOneB;
  EXPECT_EQ(error_of([&] { inference.validate("plan.json"); }),
            "plan.json: schedule: 1f1b: expected gpipe with mode inference (micro-batches stream "
            "forward in order)");
  inference.schedule = Schedule::kGpipe;
  inference.predictions.latency_ms = 1;
  EXPECT_EQ(error_of([&] { inference.validate("plan.json"); }),
            "plan.json: predictions.latency_ms: 1: expected a request's time through the "
            "pipeline, at least iteration_ms = 2 (the interval between requests)");
}

TEST(PlanTest, PlansWithoutCalibrationReadAsBefore) {
  Plan plan = full_plan();
  plan.calibration.reset();
  for (StagePrediction& stage : plan.predictions.stages) {  // as before calibration existed
    stage.memory.total_bytes -= stage.memory.calibration_bytes;
    stage.memory.calibration_bytes = 0;
    stage.peak_memory_bytes = stage.memory.total_bytes;
  }
  Json json = to_json(plan);
  EXPECT_TRUE(json.at("calibration").is_null());
  json.erase("calibration");
  for (Json& stage : json["predictions"]["stages"]) {
    stage["memory"].erase("calibration_bytes");
    stage.erase("fwd_cv");  // nor the spread of the action times
    stage.erase("bwd_cv");
  }
  const Plan back = plan_from_json(json, "plan.json");
  EXPECT_FALSE(back.calibration.has_value());
  EXPECT_EQ(back.predictions.stages[0].memory.calibration_bytes, 0);
  EXPECT_EQ(back.predictions.stages[1].fwd_cv, 0.0);
  EXPECT_EQ(back.predictions.stages[1].bwd_cv, 0.0);
  // Such a plan written again has no spread fields: its hash is the one its runs recorded.
  Plan without_spread = full_plan();
  for (StagePrediction& stage : without_spread.predictions.stages) stage.fwd_cv = stage.bwd_cv = 0;
  for (const Json& stage : to_json(without_spread)["predictions"]["stages"])
    EXPECT_FALSE(stage.contains("fwd_cv") || stage.contains("bwd_cv"));
}

// predictions.iteration_estimate is written where it is not what its absence reads as (draws
// when a stage's times vary, else mean-times), so that plans written before it keep their hash;
// draws without varying times are refused.
TEST(PlanTest, IterationEstimateIsWrittenWhereItIsNotImplied) {
  Plan plan = full_plan();  // fwd_cv > 0
  plan.predictions.iteration_estimate = IterationEstimate::kDraws;
  Json json = to_json(plan);
  EXPECT_FALSE(json["predictions"].contains("iteration_estimate"));
  EXPECT_EQ(plan_from_json(json, "plan.json").predictions.iteration_estimate,
            IterationEstimate::kDraws);
  plan.predictions.iteration_estimate = IterationEstimate::kMeanTimes;  // past the draw budget
  json = to_json(plan);
  EXPECT_EQ(json["predictions"]["iteration_estimate"], "mean-times");
  EXPECT_EQ(plan_from_json(json, "plan.json").predictions.iteration_estimate,
            IterationEstimate::kMeanTimes);
  Plan steady = testing::make_test_plan(1, 2, 2, Schedule::kOneFOneB);  // no fwd_cv or bwd_cv
  EXPECT_FALSE(to_json(steady)["predictions"].contains("iteration_estimate"));
  EXPECT_EQ(plan_from_json(to_json(steady), "plan.json").predictions.iteration_estimate,
            IterationEstimate::kMeanTimes);
  steady.predictions.iteration_estimate = IterationEstimate::kDraws;
  EXPECT_EQ(error_of([&] { steady.validate("plan.json"); }),
            "plan.json: predictions.iteration_estimate: draws: expected mean-times when no "
            "stage's times vary (every fwd_cv and bwd_cv is 0)");
  json["predictions"]["iteration_estimate"] = "folded";
  EXPECT_EQ(error_of([&] { plan_from_json(json, "plan.json"); }),
            "plan.json: predictions.iteration_estimate: 'folded': expected one of mean-times, "
            "draws");
}

TEST(PlanTest, CalibrationMemoryCorrectionsFollowTheStageCount) {
  const Calibration& calibration = *full_plan().calibration;
  EXPECT_EQ(calibration.memory_corrections(2), (std::vector<int64_t>{-4096, 65536}));
  EXPECT_EQ(calibration.memory_corrections(3), (std::vector<int64_t>{65536, 65536, 65536}));
}

// Partial checkpointing's optional key: read back equal, written only when some layers are
// recomputed (other plans keep their hashes), named in the configuration, refused in one line
// where it contradicts the stage, the schedule or the mode.
TEST(PlanTest, RecomputeLayersRoundTripAndAreChecked) {
  Plan plan = testing::make_test_plan(1, 2, 2, Schedule::kOneFOneB, 1 << 20, /*extra_layers=*/3);
  const std::string plain_hash = plan_hash(plan);
  EXPECT_FALSE(to_json(plan).at("stages").at(1).contains("recompute_layers"));
  plan.stages[1].recompute_layers = {1, 3};
  EXPECT_NO_THROW(plan.validate("plan.json"));
  const Plan back = plan_from_json(Json::parse(to_json(plan).dump()), "plan.json");
  EXPECT_EQ(back.stages[1].recompute_layers, (std::vector<int>{1, 3}));
  EXPECT_NE(plan_hash(back), plain_hash);
  EXPECT_EQ(plan_configuration(back), "dp=1 pp=2 b=2 m=2 1f1b stages 0:1,1:5r1.3");
  const auto refusal = [&](const std::vector<int>& layers) {
    Plan bad = plan;
    bad.stages[1].recompute_layers = layers;
    return error_of([&] { bad.validate("plan.json"); });
  };
  EXPECT_EQ(refusal({3, 1}),
            "plan.json: stages[1].recompute_layers[1]: 1: expected a layer in [4, 5) (the "
            "stage's layers, ascending, each once)");
  EXPECT_EQ(refusal({0}),
            "plan.json: stages[1].recompute_layers[0]: 0: expected a layer in [1, 5) (the "
            "stage's layers, ascending, each once)");
  EXPECT_EQ(refusal({1, 2, 3, 4}),
            "plan.json: stages[1].recompute_layers: 4 layers: expected fewer than the stage's 4 "
            "(all of them: checkpoint true)");
  Plan both = plan;
  both.stages[1].checkpoint = true;
  EXPECT_EQ(error_of([&] { both.validate("plan.json"); }),
            "plan.json: stages[1].recompute_layers: 2 layers: expected none with checkpoint true "
            "(the whole stage is recomputed)");
  Plan zero_bubble = plan;
  zero_bubble.schedule = Schedule::kZeroBubbleH1;
  EXPECT_EQ(error_of([&] { zero_bubble.validate("plan.json"); }),
            "plan.json: stages[1].recompute_layers: 2 layers: expected none with schedule zb-h1 "
            "(checkpoint the whole stage)");
  Json json = to_json(plan);
  json["stages"][1]["recompute_layers"] = Json::array({1, -2});
  EXPECT_NE(error_of([&] { plan_from_json(json, "plan.json"); }).find("stages[1].recompute_layers"),
            std::string::npos);
}

// A plan of dp = 2 replicas of pp = 2 stages, each stage split over `tp` ranks, tp innermost.
Plan tensor_parallel_plan(int tp, int devices_per_node) {
  Plan plan = testing::make_test_plan(/*dp=*/2, /*pp=*/2, /*num_micro_batches=*/2,
                                      Schedule::kOneFOneB, devices_per_node);
  plan.tensor_parallel.tp = tp;
  plan.cluster.devices = 4 * tp;
  plan.ranks.clear();
  for (int rank = 0; rank < 4 * tp; ++rank) {
    RankAssignment assignment;
    assignment.rank = rank;
    assignment.tp_rank = rank % tp;
    assignment.stage = (rank / tp) % 2;
    assignment.replica = rank / tp / 2;
    assignment.node = rank / devices_per_node;
    assignment.local_rank = rank % devices_per_node;
    plan.ranks.push_back(assignment);
  }
  return plan;
}

TEST(PlanTest, TensorParallelKeysRoundTripAndAreChecked) {
  const Plan plain = testing::make_test_plan(2, 2, 2, Schedule::kOneFOneB);
  EXPECT_FALSE(to_json(plain).contains("tensor_parallel"));
  EXPECT_FALSE(to_json(plain).at("ranks").at(0).contains("tp_rank"));
  const Plan plan = tensor_parallel_plan(/*tp=*/2, /*devices_per_node=*/4);
  EXPECT_NO_THROW(plan.validate("plan.json"));
  const Plan back = plan_from_json(Json::parse(to_json(plan).dump()), "plan.json");
  EXPECT_EQ(back.tp(), 2);
  EXPECT_EQ(back.tensor_parallel.vocabulary, "replicated");
  ASSERT_EQ(back.ranks.size(), 8u);
  EXPECT_EQ(back.ranks[5].tp_rank, 1);
  EXPECT_EQ(rank_of(back, /*stage=*/0, /*replica=*/1, /*tp_rank=*/1), 5);
  EXPECT_EQ(plan_configuration(back), "dp=2 tp=2 pp=2 b=2 m=2 1f1b stages 0:1,1:2");
  EXPECT_NE(plan_hash(back), plan_hash(plain));
  const auto refusal = [](const Plan& bad) { return error_of([&] { bad.validate("plan.json"); }); };
  EXPECT_EQ(refusal(tensor_parallel_plan(/*tp=*/4, /*devices_per_node=*/6)),
            "plan.json: tensor_parallel.tp: 4: expected a divisor of "
            "cluster.devices_per_node = 6 (a tensor-parallel group never spans nodes)");
  Plan devices = plan;
  devices.cluster.devices = 4;
  EXPECT_EQ(refusal(devices), "plan.json: cluster.devices: 4: expected dp*tp*pp = 8");
  Plan shuffled = plan;
  std::swap(shuffled.ranks[1].tp_rank, shuffled.ranks[2].tp_rank);
  EXPECT_EQ(refusal(shuffled),
            "plan.json: ranks[1].tp_rank: 0: expected rank % tp = 1 (a tensor-parallel group is "
            "tp consecutive ranks)");
  Plan split = plan;
  std::swap(split.ranks[1].stage, split.ranks[3].stage);
  EXPECT_EQ(refusal(split),
            "plan.json: ranks[1].stage: 1 of replica 0: expected stage 0 of replica 0 as rank 0 "
            "(the ranks of a tensor-parallel group run one stage)");
  Plan vocabulary = plan;
  vocabulary.tensor_parallel.vocabulary = "split";
  EXPECT_NE(refusal(vocabulary).find("tensor_parallel.vocabulary: 'split': expected 'replicated'"),
            std::string::npos);
  Plan zero = plan;
  zero.data_parallel.zero = 1;
  EXPECT_NE(refusal(zero).find("data_parallel.zero: 1: expected 0 with tensor_parallel.tp = 2"),
            std::string::npos);
}

TEST(PlanTest, ConfigurationNamesEverythingARunDependsOn) {
  const Plan plan = full_plan();
  EXPECT_EQ(plan_configuration(plan), "dp=2 pp=2 b=2 m=3 gpipe stages 0:1,1:3c");
  Plan other = plan;
  other.stages[0].last = 2;
  other.stages[1].first = 2;
  EXPECT_NE(plan_configuration(other), plan_configuration(plan));
}

TEST(PlanTest, FileRoundTripIsEqual) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "pipeplan_plan_test.json").string();
  write_plan(path, full_plan());
  EXPECT_EQ(to_json(read_plan(path)), to_json(full_plan()));
  std::filesystem::remove(path);
}

TEST(PlanTest, ValidatesTheFullPlan) { EXPECT_NO_THROW(full_plan().validate("plan.json")); }

TEST(PlanTest, ValidateRejectsEachInconsistencyNamingTheField) {
  struct Case {
    const char* field;
    std::function<void(Plan&)> spoil;
  };
  const Case cases[] = {
      {"cluster.devices", [](Plan& p) { p.cluster.devices = 5; }},
      {"calibration.stages", [](Plan& p) { p.calibration->stages[1].last = 2; }},
      {"calibration.stages[0].fwd_scale", [](Plan& p) { p.calibration->stages[0].fwd_scale = 0; }},
      {"cluster.devices_per_node", [](Plan& p) { p.cluster.devices_per_node = 0; }},
      {"cluster.device_memory_bytes", [](Plan& p) { p.cluster.device_memory_bytes = 0; }},
      {"cluster.device_kind", [](Plan& p) { p.cluster.device_kind = "tpu"; }},
      {"dp", [](Plan& p) { p.dp = 0; }},
      {"pp", [](Plan& p) { p.pp = 0; }},
      {"micro_batch_size", [](Plan& p) { p.micro_batch_size = 0; }},
      {"num_micro_batches", [](Plan& p) { p.num_micro_batches = 0; }},
      {"global_batch", [](Plan& p) { p.global_batch += 1; }},
      {"stages", [](Plan& p) { p.stages.pop_back(); }},
      {"stages[1].first", [](Plan& p) { p.stages[1].first = 2; }},
      {"stages[0].last", [](Plan& p) { p.stages[0].last = 0; }},
      {"stages[1].last: 2: expected 3", [](Plan& p) { p.stages[1].last = 2; }},
      {"stages[1].output_dtype", [](Plan& p) { p.stages[1].output_dtype = "float64"; }},
      {"stages[0].input_sample_shape", [](Plan& p) { p.stages[0].input_sample_shape = {0}; }},
      {"ranks: 3 ranks", [](Plan& p) { p.ranks.pop_back(); }},
      {"ranks[2].rank", [](Plan& p) { p.ranks[2].rank = 3; }},
      {"ranks[1].stage", [](Plan& p) { p.ranks[1].stage = 2; }},
      {"ranks[1].replica", [](Plan& p) { p.ranks[1].replica = 2; }},
      {"ranks[1]: stage 0 of replica 0: expected each stage of each replica on one rank",
       [](Plan& p) { p.ranks[1].stage = 0; }},
      {"ranks[2].node", [](Plan& p) { p.ranks[2].node = 0; }},
      {"ranks[3].local_rank", [](Plan& p) { p.ranks[3].local_rank = 0; }},
      {"predictions.stages", [](Plan& p) { p.predictions.stages.pop_back(); }},
      {"model.num_layers", [](Plan& p) { p.model.num_layers = 0; }},
      {"optimizer.base_lr: 0: expected", [](Plan& p) { p.optimizer.base_lr = 0; }},
      // Inputs that parse but mean nothing (issue 18).
      {"pp: 4: expected an integer in [1, 3]", [](Plan& p) { p.pp = 4; }},
      {"num_micro_batches: 10000000: expected an integer in [1, 16384]",
       [](Plan& p) { p.num_micro_batches = 10000000; }},
      {"cluster.devices: 32768: expected at most 16384",
       [](Plan& p) { p.dp = 16384, p.cluster.devices = 32768; }},
      {"stages[1].last: 4: expected a layer in [2, 3]", [](Plan& p) { p.stages[1].last = 4; }},
      {"stages[1].input_sample_shape: [64] float32: expected [128] float32",
       [](Plan& p) { p.stages[1].input_sample_shape = {64}; }},
      {"stages[0].input_sample_shape: [1, 28, 28] float32: expected [1, 28, 28] int64",
       [](Plan& p) { p.stages[0].input_dtype = "float32"; }},
      {"stages[0].output_sample_shape: []: expected", [](Plan& p) {
         p.stages[0].output_sample_shape = {};
       }},
      {"stages[0].output_sample_shape: [1099511627776, 1099511627776]",
       [](Plan& p) { p.stages[0].output_sample_shape = {int64_t{1} << 40, int64_t{1} << 40}; }},
      {"ranks[1].device: 'cpu': expected 'cuda:N'", [](Plan& p) { p.ranks[1].device = "cpu"; }},
      {"optimizer.momentum: -0.5: expected a value in [0, 1]",
       [](Plan& p) { p.optimizer.momentum = -0.5; }},
      {"partition: 'fastest': expected", [](Plan& p) { p.partition = "fastest"; }},
      {"predictions.stages[0].compute_ms: 9.5: expected",
       [](Plan& p) { p.predictions.stages[0].compute_ms = 9.5; }},
      {"predictions.stages[1].fwd_ms: 1e+13: expected a time in ms in [0, 1e+08]",
       [](Plan& p) { p.predictions.stages[1].fwd_ms = 1e13; }},
      {"predictions.stages[0].memory.total_bytes: 63: expected the sum of the terms, 62",
       [](Plan& p) { p.predictions.stages[0].memory.total_bytes = 63; }},
      {"predictions.stages[0].peak_memory_bytes: 1: expected memory.total_bytes = 62",
       [](Plan& p) { p.predictions.stages[0].peak_memory_bytes = 1; }},
      {"predictions.samples_per_s: 1: expected global_batch / iteration_ms",
       [](Plan& p) { p.predictions.samples_per_s = 1; }},
      {"predictions.bubble_fraction: 1.5: expected a fraction in [0, 1]",
       [](Plan& p) { p.predictions.bubble_fraction = 1.5; }},
      {"model.config.hidden: -128: expected a finite number >= 0",
       [](Plan& p) { p.model.config["hidden"] = -128; }},
  };
  for (const Case& c : cases) {
    Plan plan = full_plan();
    c.spoil(plan);
    const std::string message = error_of([&] { plan.validate("plan.json"); });
    EXPECT_NE(message.find(std::string("plan.json: ") + c.field), std::string::npos)
        << "field " << c.field << ": got '" << message << "'";
  }
}

TEST(PlanTest, ReaderRejectsUnknownSchemaAndBadWords) {
  Json json = to_json(full_plan());
  json["schema"] = "pipeplan.plan/2";
  EXPECT_NE(error_of([&] { plan_from_json(json, "plan.json"); })
                .find("plan.json: schema: \"pipeplan.plan/2\": unsupported"),
            std::string::npos);
  json = to_json(full_plan());
  json["schedule"] = "zero-bubble";
  EXPECT_NE(error_of([&] { plan_from_json(json, "plan.json"); }).find("'zero-bubble'"),
            std::string::npos);
  json = to_json(full_plan());
  json["predictions"]["notes"] = "not a list";
  EXPECT_NE(error_of([&] { plan_from_json(json, "plan.json"); }).find("predictions.notes"),
            std::string::npos);
}

// Issue 18: integers of 32 bits or more were cut (dp 4294967298 read as 2), and a long string
// was echoed whole in the error line.
TEST(PlanTest, ReaderRefusesIntegersItWouldCutAndQuotesLongValuesShortened) {
  Json json = to_json(full_plan());
  json["dp"] = int64_t{4294967298};
  EXPECT_EQ(error_of([&] { plan_from_json(json, "plan.json"); }),
            "plan.json: dp: 4294967298: expected an integer in [1, 16384]");
  json = to_json(full_plan());
  json["ranks"][1]["stage"] = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(error_of([&] { plan_from_json(json, "plan.json"); }),
            "plan.json: ranks[1].stage: 18446744073709551615: expected an integer in [0, 16383]");
  json = to_json(full_plan());
  json["num_micro_batches"] = 3.0;
  EXPECT_EQ(error_of([&] { plan_from_json(json, "plan.json"); }),
            "plan.json: num_micro_batches: 3.0: expected an integer in [1, 16384]");
  json = to_json(full_plan());
  json["partition"] = std::string(size_t{1} << 20, 'z');
  const std::string message = error_of([&] { plan_from_json(json, "plan.json"); });
  EXPECT_LT(message.size(), 200u) << message;
  EXPECT_NE(message.find("plan.json: partition: 'zzz"), std::string::npos) << message;
  EXPECT_NE(message.find("' (1048576 characters): expected optimal"), std::string::npos)
      << message;
}

// Issue 18: a plan of 1e7 micro-batches made `simulate` grow past 6 GB; the count is bounded,
// and so is the count times the stages (the simulator's work).
// interleaved-1f1b: pp·V chunk ranges and V chunk predictions per stage round-trip; the optional
// keys stay out of other plans; each inconsistency is named.
TEST(PlanTest, InterleavedPlansRoundTripAndTheirInconsistenciesAreNamed) {
  Plan plan = testing::make_test_plan(1, 2, 4, Schedule::kInterleaved1F1B, 1 << 20, 2);
  testing::make_interleaved(&plan, 2);
  plan.predictions.stages[0].chunks = {{1, 2, 0, 0.5}, {1.5, 2.5, 0, 0.25}};
  plan.predictions.stages[0].fwd_ms = 2.5;
  plan.predictions.stages[0].bwd_ms = 4.5;
  plan.predictions.stages[0].p2p_ms = 0.75;
  plan.predictions.stages[0].compute_ms = 4 * 7.0;
  plan.predictions.iteration_ms = 40;
  plan.predictions.samples_per_s = plan.global_batch / 0.04;
  ASSERT_NO_THROW(plan.validate("plan.json"));
  const Json json = to_json(plan);
  EXPECT_EQ(json.at("virtual_stages"), 2);
  const Plan back = plan_from_json(Json::parse(json.dump()), "plan.json");
  EXPECT_EQ(to_json(back), json);
  EXPECT_EQ(back.predictions.stages[0].chunks[1].bwd_ms, 2.5);
  EXPECT_NE(plan_configuration(back).find("interleaved-1f1b v=2 stages 0:1,1:2,2:3,3:4"),
            std::string::npos);
  EXPECT_FALSE(to_json(full_plan()).contains("virtual_stages"));
  auto refused = [](const Plan& bad, const std::string& expected) {
    try {
      bad.validate("plan.json");
      ADD_FAILURE() << "no error; expected " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  Plan odd = plan;
  odd.num_micro_batches = 3;
  odd.global_batch = 6;
  refused(odd, "num_micro_batches: 3: expected a multiple of pp = 2 with interleaved-1f1b");
  Plan one_chunk = plan;
  one_chunk.virtual_stages = 1;
  refused(one_chunk, "virtual_stages: 1: expected an integer in [2, 8] with interleaved-1f1b");
  Plan not_interleaved = plan;
  not_interleaved.schedule = Schedule::kOneFOneB;
  refused(not_interleaved, "virtual_stages: 2: expected 1 with schedule 1f1b");
  Plan missing_chunk = plan;
  missing_chunk.stages.pop_back();
  refused(missing_chunk, "stages: 3 stages: expected pp*virtual_stages = 4");
  Plan sums = plan;
  sums.predictions.stages[0].chunks[0].fwd_ms = 2;
  refused(sums, "predictions.stages[0].fwd_ms: 2.5: expected the sum over the stage's chunks, 3.5");
  Plan no_chunks = plan;
  no_chunks.predictions.stages[1].chunks.clear();
  refused(no_chunks, "predictions.stages[1].chunks: 0 entries: expected virtual_stages = 2");
}

TEST(PlanTest, MicroBatchesTimesStagesAreBounded) {
  EXPECT_NO_THROW(testing::make_test_plan(1, 16, 1024, Schedule::kOneFOneB).validate("plan.json"));
  EXPECT_EQ(error_of([] {
              testing::make_test_plan(1, 128, 16384, Schedule::kOneFOneB).validate("plan.json");
            }),
            "plan.json: num_micro_batches: 16384: expected at most 8192 with pp=128 (at most "
            "1048576 micro-batches times stages)");
}

TEST(PlanTest, ActivationBytesFollowShapeDtypeAndBatch) {
  EXPECT_EQ(activation_bytes({3, 4}, "float32", 5), 3 * 4 * 5 * 4);
  EXPECT_EQ(activation_bytes({7}, "int64", 2), 7 * 2 * 8);
  EXPECT_EQ(activation_bytes({7}, "bfloat16", 2), 7 * 2 * 2);
  EXPECT_NE(error_of([] { dtype_bytes("float64", "x"); }).find("'float64'"), std::string::npos);
  // Beyond kMaxBytes (and beyond 64 bits on the way): refused, not wrapped around.
  EXPECT_NE(error_of([] { activation_bytes({int64_t{1} << 40, int64_t{1} << 40}, "float32", 2); })
                .find("expected at most 1125899906842624"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
