// Tests for executor/metrics.h: timing records, the run summary, step checks, the trace.
#include "executor/metrics.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "executor/comm.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::executor {
namespace {

TEST(MetricsTest, RecorderMeasuresOnlyStepsAfterTheWarmUp) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/1);
  for (int64_t step = 1; step <= 3; ++step) {
    recorder.begin_step(step);
    const double fwd_ms = step == 1 ? 100.0 : 2.0 * static_cast<double>(step);
    recorder.record(EventKind::kForward, 0, 0, fwd_ms);
    recorder.record(EventKind::kBackward, 0, fwd_ms, fwd_ms + 1);
    recorder.record(EventKind::kRecvWait, 1, 0, 0.5);
    recorder.record(EventKind::kOptimizer, -1, 0, 0.25);
    const StepTiming timing = recorder.end_step();
    EXPECT_DOUBLE_EQ(timing.compute_ms, fwd_ms + 1);
    EXPECT_DOUBLE_EQ(timing.busy_ms, fwd_ms + 1.25);
    EXPECT_DOUBLE_EQ(timing.recv_wait_ms, 0.5);
  }
  const RankMeasurement m = recorder.summarize(RankAssignment{0, 1, 0, 0, 0, "cpu"});
  EXPECT_DOUBLE_EQ(m.fwd_ms, 5.0);  // steps 2 and 3: 4 and 6 ms; step 1 is warm-up
  EXPECT_DOUBLE_EQ(m.bwd_ms, 1.0);
  EXPECT_EQ(m.stage, 1);
  EXPECT_EQ(recorder.events().size(), 8u);  // 4 events of each measured step
}

TEST(MetricsTest, CombinedIdleTimeCompletesEveryRanksIteration) {
  const Plan plan = testing::make_test_plan(testing::split_spec(/*dp=*/1, /*pp=*/2));
  std::vector<RankMeasurement> ranks(2);
  ranks[0].rank = 0;
  ranks[0].busy_ms = 6;
  ranks[0].peak_memory_bytes = 100;
  ranks[1].rank = 1;
  ranks[1].stage = 1;
  ranks[1].busy_ms = 8;
  const Measurements m = combine_measurements(plan, ranks, {9.0, 10.0, 11.0}, /*warmup_steps=*/2);
  EXPECT_DOUBLE_EQ(m.iteration_ms, 10.0);
  EXPECT_DOUBLE_EQ(m.samples_per_s, 16 * 1000.0 / 10.0);
  EXPECT_DOUBLE_EQ(m.stages[0].idle_ms, 4.0);
  EXPECT_DOUBLE_EQ(m.stages[1].idle_ms, 2.0);
  EXPECT_DOUBLE_EQ(m.bubble_fraction, 6.0 / 20.0);
  EXPECT_EQ(m.stages[0].peak_memory_bytes, 100);
  EXPECT_EQ(m.measured_steps, 3);
}

TEST(MetricsTest, StepReducerNamesStepStageAndRankOfANan) {
  const Plan plan = testing::make_test_plan(testing::TestPlanSpec());
  auto comm = Comm::connect(RendezvousEnv(), plan, torch::kCPU, std::chrono::seconds(5));
  StepReducer reducer(*comm, plan);
  EXPECT_FALSE(reducer.push({/*step=*/1, /*loss_sum=*/8.0, true, true, 3.0}).has_value());
  StepValues bad{/*step=*/2, /*loss_sum=*/NAN, /*loss_finite=*/false, true, 3.0};
  const std::optional<StepReport> first = reducer.push(bad);
  ASSERT_TRUE(first.has_value());
  EXPECT_DOUBLE_EQ(first->loss, 8.0 / 4);  // mean over dp·m = 4 micro-batches
  EXPECT_DOUBLE_EQ(first->slowest_iteration_ms, 3.0);
  try {
    reducer.flush();
    FAIL() << "no error for a NaN loss";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_EQ(std::string(e.what()).rfind("step 2: the loss is NaN or Inf on stage 0 (rank 0", 0), 0u)
        << e.what();
  }
}

TEST(MetricsTest, TraceHasOneCompleteEventPerActionInMicroseconds) {
  const Plan plan = testing::make_test_plan(testing::split_spec(/*dp=*/1, /*pp=*/2));
  const std::string path = testing::fresh_dir("trace") + "/trace.json";
  write_chrome_trace(path, {{0, EventKind::kForward, 3, 7, 1.5, 2.0}, {1, EventKind::kAllReduce, -1, 7, 2.0, 2.25}}, plan);
  const Json trace = read_json_file(path);
  std::vector<Json> complete;
  for (const Json& event : trace.at("traceEvents"))
    if (event.at("ph") == "X") complete.push_back(event);
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].at("name"), "forward 3");
  EXPECT_DOUBLE_EQ(complete[0].at("ts").get<double>(), 1500.0);
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 500.0);
  EXPECT_EQ(complete[1].at("pid"), 1);
  EXPECT_EQ(complete[1].at("name"), "all-reduce");
}

}  // namespace
}  // namespace pipeplan::executor
