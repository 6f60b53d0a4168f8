// Tests for plans/run.h: run.json round trip and validation. (`pipeplan::Run`, since gtest's
// Test has a member named Run.)
#include "plans/run.h"

#include <gtest/gtest.h>

#include <functional>

#include "common/error.h"

namespace pipeplan {
namespace {

pipeplan::Run sample_run() {
  pipeplan::Run run;
  run.tool_version = "0.1.0";
  run.plan_path = "plan.json";
  run.plan_hash = "fnv1a64:0000000000000001";
  run.world_size = 2;
  run.steps = 10;
  run.steps_per_epoch = 5;
  run.final_loss = 0.5;
  run.test_accuracy = {{1, 5, 0.75}, {2, 10, 0.8}};
  run.measured.iteration_ms = 12;
  run.measured.samples_per_s = 1000;
  run.measured.bubble_fraction = 0.25;
  run.measured.stages.resize(2);
  run.measured.stages[1].fwd_ms = 1.5;
  run.measured.ranks.resize(2);
  run.measured.ranks[1].rank = 1;
  run.measured.ranks[1].stage = 1;
  run.measured.ranks[1].peak_memory_bytes = 1 << 20;
  run.measured.ranks[1].load_ms = 0.25;
  run.measured.stages[0].allreduce_ms = 0.5;
  run.measured.timeline_step = 7;
  run.measured.timeline.rank_stages = {0, 1};
  run.measured.timeline.iteration_ms = 11.5;
  run.measured.timeline.events = {{0, TimelineKind::kLoad, 0, 0, 0.5, -1},
                                  {1, TimelineKind::kRecvWait, 0, 0, 2.5, 0}};
  run.measured.step_times = {
      {7, 11.5, {{{1, 1.25}, {2, 2.5}, {}, 0, 0.5}, {{1.5, 1}, {2, 2}, {0.5, 0.5}, 0, 0.25}}}};
  return run;
}

TEST(RunTest, RoundTripsThroughJson) {
  const pipeplan::Run run = sample_run();
  const Json json = to_json(run);
  EXPECT_EQ(json.at("schema"), kRunSchema);
  const pipeplan::Run back = run_from_json(json, "run.json");
  EXPECT_EQ(to_json(back), json);
  EXPECT_EQ(back.measured.ranks[1].peak_memory_bytes, 1 << 20);
  EXPECT_EQ(back.test_accuracy[1].test_accuracy, 0.8);
  EXPECT_EQ(back.measured.ranks[1].load_ms, 0.25);
  EXPECT_EQ(back.measured.stages[0].allreduce_ms, 0.5);
  EXPECT_EQ(back.measured.timeline_step, 7);
  ASSERT_EQ(back.measured.timeline.events.size(), 2u);
  EXPECT_EQ(back.measured.timeline.events[1].peer, 0);
  ASSERT_EQ(back.measured.step_times.size(), 1u);
  EXPECT_EQ(back.measured.step_times[0].ranks[0].fwd_ms, (std::vector<double>{1, 1.25}));
  EXPECT_EQ(back.measured.step_times[0].ranks[1].recompute_ms, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(back.measured.step_times[0].ranks[1].optimizer_ms, 0.25);
  EXPECT_EQ(run_hash(back), run_hash(run));
  pipeplan::Run other = run;
  other.measured.iteration_ms = 13;
  EXPECT_NE(run_hash(other), run_hash(run));
}

TEST(RunTest, ValidationNamesTheField) {
  pipeplan::Run run = sample_run();
  run.measured.ranks.pop_back();
  try {
    run.validate("run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured.ranks"), std::string::npos) << e.what();
  }
  pipeplan::Run bubble = sample_run();
  bubble.measured.bubble_fraction = 1.5;
  EXPECT_THROW(bubble.validate("run.json"), Error);
  pipeplan::Run timeline = sample_run();
  timeline.measured.timeline.rank_stages = {0};
  EXPECT_THROW(timeline.validate("run.json"), Error);
  Json wrong = to_json(sample_run());
  wrong["schema"] = "pipeplan.run/9";
  EXPECT_THROW(run_from_json(wrong, "run.json"), Error);
  pipeplan::Run steps = sample_run();
  steps.measured.step_times[0].ranks[1].bwd_ms.pop_back();
  try {
    steps.validate("run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured.step_times[0].ranks[1]"), std::string::npos)
        << e.what();
  }
  Json negative = to_json(sample_run());
  negative["measured"]["step_times"][0]["ranks"][0]["fwd_ms"][1] = -1.0;
  try {
    run_from_json(negative, "run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fwd_ms"), std::string::npos) << e.what();
  }
}

// Issue 18: a run whose fields parse but mean nothing is refused naming the value; an iteration
// of 1e308 ms reached an internal assertion of the partitioner through `plan --calibrate`.
TEST(RunTest, MeaninglessRunsAreRefusedNamingTheValue) {
  const Json json = to_json(sample_run());
  const auto refusal = [&](const std::function<void(Json&)>& spoil) {
    Json bad = json;
    spoil(bad);
    try {
      run_from_json(bad, "run.json");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["iteration_ms"] = 1e308; }),
            "run.json: measured.iteration_ms: 1e+308: expected a number in [0, 6.5536e+12]");
  EXPECT_EQ(refusal([](Json& j) { j["world_size"] = int64_t{4294967298}; }),
            "run.json: world_size: 4294967298: expected an integer in [1, 16384]");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["stages"].push_back(j["measured"]["stages"][0]); }),
            "run.json: measured.stages: 3 entries: expected a divisor of world_size = 2");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["ranks"][1]["stage"] = 0; }),
            "run.json: measured.ranks[1].stage: stage 0 of replica 0: expected on one rank only");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["measured_steps"] = 11; }),
            "run.json: measured.measured_steps: 11: expected, with 0 warm-up steps, at most "
            "steps = 10");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["stages"][1]["fwd_ms"] = 2e9; }),
            "run.json: measured.stages[1].fwd_ms: 2e+09: expected a time in ms in [0, 1e+08]");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["step_times"][0]["step"] = 11; }),
            "run.json: measured.step_times[0].step: 11: expected a step in [1, steps = 10]");
  EXPECT_EQ(refusal([](Json& j) { j["data"]["kind"] = "imagenet"; }),
            "run.json: data.kind: 'imagenet': expected fashion-mnist, cifar10 or synthetic");
  EXPECT_EQ(refusal([](Json& j) { j["measured"]["timeline"]["events"][1]["peer"] = 2; }),
            "run.json: measured.timeline.events[1].peer: 2: expected an integer in [-1, 1]");
  EXPECT_EQ(refusal([](Json& j) { j["test_accuracy"][0]["test_accuracy"] = 75; }),
            "run.json: test_accuracy[0].test_accuracy: 75: expected a number in [0, 1]");
}

// Issue 46: a run whose second rank had no Ws under zb-h1 reached the simulator's internal
// assertion through `compare`.
TEST(RunTest, EveryRankSplitsItsBackwardsOrNoneDoesAsThePlansScheduleSays) {
  Json json = to_json(sample_run());
  json["measured"]["step_times"][0]["ranks"][0]["bwd_weight_ms"] = {0.5, 0.5};
  try {
    run_from_json(json, "run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_EQ(std::string(e.what()),
              "run.json: measured.step_times[0].ranks[1].bwd_weight_ms: 0 Ws: expected 2 as "
              "measured.step_times[0].ranks[0] (every rank of a zb-h1 run splits its backwards "
              "into B and W, no rank of another run does)");
  }
  json["measured"]["step_times"][0]["ranks"][1]["bwd_weight_ms"] = {0.5, 0.5};
  const pipeplan::Run split = run_from_json(json, "run.json");
  Plan plan;
  plan.schedule = Schedule::kOneFOneB;
  try {
    check_step_times_of_plan(plan, split, "run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "run.json: measured.step_times[0].ranks[0].bwd_weight_ms: 2 Ws: expected none for "
              "a plan of schedule 1f1b (compare a run with the plan it ran)");
  }
  plan.schedule = Schedule::kZeroBubbleH1;
  EXPECT_NO_THROW(check_step_times_of_plan(plan, split, "run.json"));
  EXPECT_THROW(check_step_times_of_plan(plan, sample_run(), "run.json"), Error);
}

// step_times is optional: a run.json without it reads, with no steps to replay.
TEST(RunTest, RunsWithoutStepTimesStillRead) {
  Json json = to_json(sample_run());
  json["measured"].erase("step_times");
  EXPECT_TRUE(run_from_json(json, "run.json").measured.step_times.empty());
}

}  // namespace
}  // namespace pipeplan
