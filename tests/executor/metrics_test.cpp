// Tests for executor/metrics.h: timing records, the run summary, step checks, the timeline, the
// steps log kept on --resume.
#include "executor/metrics.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "executor/comm.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::executor {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Issue 46: --resume read a FIFO log forever and /dev/zero until memory ran out, and dropped the
// lines it could not read without a word.
TEST(MetricsTest, ResumeKeepsTheLogUpToItsStepAndSaysWhatItDrops) {
  const std::string dir = testing::fresh_dir("resumed_log");
  const std::string log = dir + "/steps.jsonl";
  const std::string step_1 = R"({"step": 1, "loss": 2.3})";
  const std::string epoch_1 = R"({"epoch": 1, "step": 2, "test_accuracy": 0.5})";
  std::ofstream(log) << step_1 << "\n" << epoch_1 << "\n{\"step\": 3}\nnot json\n{\"step\": 2.5}\n";
  ::testing::internal::CaptureStderr();
  truncate_log_after(log, 2);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(read_text(log), step_1 + "\n" + epoch_1 + "\n");
  EXPECT_NE(warning.find("--log '" + log +
                         "': dropped 2 lines that are no step record (the first: line 4)"),
            std::string::npos)
      << warning;
  // Devices and pipes are written in place, never read back.
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  truncate_log_after(fifo, 2);
  truncate_log_after("/dev/zero", 2);
  truncate_log_after(dir + "/absent.jsonl", 2);
  EXPECT_FALSE(std::filesystem::exists(dir + "/absent.jsonl"));
}

TEST(MetricsTest, RecorderMeasuresOnlyStepsAfterTheWarmUp) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/1);
  for (int64_t step = 1; step <= 3; ++step) {
    recorder.begin_step(step);
    const double fwd_ms = step == 1 ? 100.0 : 2.0 * static_cast<double>(step);
    recorder.record(TimelineKind::kLoad, 0, 0, 0.125);
    recorder.record(TimelineKind::kForward, 0, 0, fwd_ms);
    recorder.record(TimelineKind::kBackward, 0, fwd_ms, fwd_ms + 1);
    recorder.record(TimelineKind::kRecvWait, 1, 0, 0.5, /*peer=*/1);
    recorder.record(TimelineKind::kAllReduce, -1, 0, 0.5);
    recorder.record(TimelineKind::kOptimizer, -1, 0, 0.25);
    const StepTiming timing = recorder.end_step();
    EXPECT_DOUBLE_EQ(timing.compute_ms, fwd_ms + 1);
    EXPECT_DOUBLE_EQ(timing.busy_ms, fwd_ms + 1.75);  // compute, all-reduce, optimizer; no load
    EXPECT_DOUBLE_EQ(timing.load_ms, 0.125);
    EXPECT_DOUBLE_EQ(timing.recv_wait_ms, 0.5);
  }
  const RankMeasurement m = recorder.summarize(RankAssignment{0, 1, 0, 0, 0, "cpu"});
  EXPECT_DOUBLE_EQ(m.fwd_ms, 5.0);  // steps 2 and 3: 4 and 6 ms; step 1 is warm-up
  EXPECT_DOUBLE_EQ(m.bwd_ms, 1.0);
  EXPECT_DOUBLE_EQ(m.load_ms, 0.125);
  EXPECT_EQ(m.stage, 1);
  ASSERT_EQ(recorder.kept_steps().size(), 2u);  // the measured steps 2 and 3
  EXPECT_EQ(recorder.kept_steps().front().step, 2);
  ASSERT_EQ(recorder.kept_steps().front().events.size(), 6u);
  EXPECT_EQ(recorder.kept_steps().front().events[3].peer, 1);
}

TEST(MetricsTest, TimesPerMicroBatchAreMeansOfEachStepsMean) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/0);
  // Every step's first forward is slow, the last step's much slower: the step means (3, 3.5,
  // 10) add up to each step's compute.
  const double slow_ms[] = {5.0, 6.0, 19.0};
  for (int64_t step = 1; step <= 3; ++step) {
    recorder.begin_step(step);
    recorder.record(TimelineKind::kForward, 0, 0, slow_ms[step - 1]);
    recorder.record(TimelineKind::kForward, 1, 0, 1.0);
    EXPECT_DOUBLE_EQ(recorder.end_step().fwd_ms, (slow_ms[step - 1] + 1.0) / 2);
  }
  const RankMeasurement m = recorder.summarize(RankAssignment{});
  // The median of the step means would say 3.5, the median over the six forwards 3.
  EXPECT_DOUBLE_EQ(m.fwd_ms, 5.5);
  EXPECT_DOUBLE_EQ(m.compute_ms, 2 * m.fwd_ms);
}

TEST(MetricsTest, RecorderKeepsOnlyTheLastSteps) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/0);
  for (int64_t step = 1; step <= Recorder::kMaxKeptSteps + 5; ++step) {
    recorder.begin_step(step);
    recorder.record(TimelineKind::kForward, 0, 0, 1);
    recorder.end_step();
  }
  ASSERT_EQ(recorder.kept_steps().size(), static_cast<size_t>(Recorder::kMaxKeptSteps));
  EXPECT_EQ(recorder.kept_steps().front().step, 6);
}

// The ranks' means and the run's median iteration time cover the same steps: the last
// kMaxMeasuredSteps measured ones.
TEST(MetricsTest, MeansAndMediansCoverTheLastMeasuredStepsOnly) {
  // Slow for the first kWindow steps, then fast for 0.9·kWindow: the last kWindow are 0.1·kWindow
  // slow steps and 0.9·kWindow fast ones.
  constexpr int kWindow = Recorder::kMaxMeasuredSteps;
  constexpr int kSteps = kWindow + kWindow * 9 / 10;
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/0);
  for (int64_t step = 1; step <= kSteps; ++step) {
    recorder.begin_step(step);
    recorder.record(TimelineKind::kForward, 0, 0, step <= kWindow ? 100.0 : 1.0);
    recorder.end_step();
  }
  EXPECT_NEAR(recorder.summarize(RankAssignment{}).fwd_ms, 0.1 * 100.0 + 0.9 * 1.0, 1e-9);
  std::vector<double> slowest(kWindow, 100.0);
  slowest.resize(kSteps, 10.0);
  const Plan plan = testing::make_test_plan(testing::split_spec(/*dp=*/1, /*pp=*/1));
  const Measurements m = combine_measurements(plan, {RankMeasurement{}}, slowest, 0);
  EXPECT_DOUBLE_EQ(m.iteration_ms, 10.0);
  EXPECT_EQ(m.measured_steps, kSteps);
}

TEST(MetricsTest, RepresentativeStepIsTheLowerMedianAmongKeptSteps) {
  const std::vector<std::pair<int64_t, double>> slowest = {
      {4, 30.0}, {5, 10.0}, {6, 50.0}, {7, 20.0}, {8, 40.0}};
  EXPECT_EQ(representative_step(slowest, {4, 5, 6, 7, 8}), 4);  // 30 ms is the median
  EXPECT_EQ(representative_step(slowest, {5, 6, 7, 8}), 7);     // 10 20 | 40 50: lower median 20
  EXPECT_EQ(representative_step(slowest, {}), 0);
}

TEST(MetricsTest, MeasuredTimelineStartsAtTheEarliestRankAndCountsBusyKinds) {
  const Plan plan = testing::make_test_plan(testing::split_spec(/*dp=*/1, /*pp=*/2));
  std::vector<std::vector<StepEvents>> ranks(2);
  ranks[0].push_back({7, 100.0, 110.0,
                      {{0, TimelineKind::kLoad, 0, 100.0, 101.0, -1},
                       {0, TimelineKind::kForward, 0, 101.0, 103.0, -1},
                       {0, TimelineKind::kSend, 0, 103.0, 103.5, 1},
                       {0, TimelineKind::kRecvWait, 0, 103.5, 107.0, 1},
                       {0, TimelineKind::kBackward, 0, 107.0, 110.0, -1}}});
  ranks[1].push_back({7, 100.5, 109.0,
                      {{1, TimelineKind::kRecvWait, 0, 100.5, 103.5, 0},
                       {1, TimelineKind::kForward, 0, 103.5, 105.0, -1},
                       {1, TimelineKind::kBackward, 0, 105.0, 107.0, -1}}});
  const Timeline timeline = measured_timeline(plan, ranks, "measured");
  EXPECT_EQ(timeline.rank_stages, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(timeline.iteration_ms, 10.0);
  ASSERT_EQ(timeline.events.size(), 8u);
  EXPECT_DOUBLE_EQ(timeline.events[0].start_ms, 0.0);
  EXPECT_DOUBLE_EQ(timeline.events[5].start_ms, 0.5);
  EXPECT_EQ(timeline.events[5].peer, 0);
  // busy: rank 0 forward 2 + backward 3 = 5, rank 1 1.5 + 2 = 3.5; idle 5 + 6.5 of 2 × 10.
  EXPECT_DOUBLE_EQ(timeline.bubble_fraction, 11.5 / 20.0);
}

// Step times hold each rank's actions by micro-batch, only for steps every rank reported and
// that have an iteration time, the last max_steps of them in step order.
TEST(MetricsTest, StepTimesAreEachRanksActionsOfStepsEveryRankReported) {
  const auto step = [](int64_t number, int rank, double slow) {
    return StepEvents{number,
                      0,
                      20,
                      {{rank, TimelineKind::kForward, 1, 0, 2, -1},
                       {rank, TimelineKind::kForward, 0, 2, 2 + slow, -1},
                       {rank, TimelineKind::kRecvWait, 0, 4, 5, 1 - rank},
                       {rank, TimelineKind::kBackward, 0, 5, 8, -1},
                       {rank, TimelineKind::kBackward, 1, 8, 12, -1},
                       {rank, TimelineKind::kOptimizer, -1, 12, 12.5, -1}}};
  };
  std::vector<std::vector<StepEvents>> ranks(2);
  ranks[0] = {step(4, 0, 1), step(5, 0, 1), step(6, 0, 7), step(7, 0, 1)};
  ranks[1] = {step(5, 1, 1), step(6, 1, 1), step(7, 1, 1)};
  const std::vector<std::pair<int64_t, double>> slowest = {{4, 20}, {5, 21}, {6, 22}};
  const std::vector<StepTimes> times = step_times(ranks, slowest, 10);
  ASSERT_EQ(times.size(), 2u);  // step 4: rank 1 did not report it; step 7: no iteration time
  EXPECT_EQ(times[0].step, 5);
  EXPECT_EQ(times[1].step, 6);
  EXPECT_DOUBLE_EQ(times[1].iteration_ms, 22);
  ASSERT_EQ(times[1].ranks.size(), 2u);
  EXPECT_EQ(times[1].ranks[0].fwd_ms, (std::vector<double>{7, 2}));
  EXPECT_EQ(times[1].ranks[0].bwd_ms, (std::vector<double>{3, 4}));
  EXPECT_TRUE(times[1].ranks[0].recompute_ms.empty());
  EXPECT_TRUE(times[1].ranks[0].bwd_weight_ms.empty());
  EXPECT_DOUBLE_EQ(times[1].ranks[1].optimizer_ms, 0.5);
  const std::vector<StepTimes> last = step_times(ranks, slowest, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].step, 6);
}

// zb-h1: B counts as the backward, W apart; both are compute and busy, by micro-batch.
TEST(MetricsTest, SplitBackwardsMeasureBAndWApart) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/0);
  recorder.begin_step(1);
  recorder.record(TimelineKind::kForward, 0, 0, 1);
  recorder.record(TimelineKind::kForward, 1, 1, 2);
  recorder.record(TimelineKind::kBackwardInput, 0, 2, 4);
  recorder.record(TimelineKind::kBackwardWeight, 0, 4, 7);
  recorder.record(TimelineKind::kBackwardInput, 1, 7, 9);
  recorder.record(TimelineKind::kBackwardWeight, 1, 9, 14);
  recorder.record(TimelineKind::kOptimizer, -1, 14, 14.5);
  const StepTiming timing = recorder.end_step();
  EXPECT_DOUBLE_EQ(timing.bwd_ms, 2);
  EXPECT_DOUBLE_EQ(timing.bwd_weight_ms, 4);
  EXPECT_DOUBLE_EQ(timing.compute_ms, 14);
  EXPECT_DOUBLE_EQ(timing.busy_ms, 14.5);
  const RankMeasurement m = recorder.summarize(RankAssignment{});
  EXPECT_DOUBLE_EQ(m.bwd_ms, 2);
  EXPECT_DOUBLE_EQ(m.bwd_weight_ms, 4);
  const std::vector<StepEvents> steps(recorder.kept_steps().begin(), recorder.kept_steps().end());
  const std::vector<StepTimes> times = step_times({steps}, {{1, 14.5}}, 1);
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].ranks.at(0).bwd_ms, (std::vector<double>{2, 2}));
  EXPECT_EQ(times[0].ranks.at(0).bwd_weight_ms, (std::vector<double>{3, 5}));
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

// Issue 18: one stage is no pipeline; its ranks' idle time is no bubble, as the plan predicts.
TEST(MetricsTest, OneStageMeasuresNoBubble) {
  const Plan plan = testing::make_test_plan(testing::split_spec(/*dp=*/2, /*pp=*/1));
  std::vector<RankMeasurement> ranks(2);
  ranks[0].busy_ms = 6;
  ranks[1].rank = 1;
  ranks[1].replica = 1;
  ranks[1].busy_ms = 8;
  const Measurements m = combine_measurements(plan, ranks, {10.0}, /*warmup_steps=*/0);
  EXPECT_DOUBLE_EQ(m.stages[0].idle_ms, 3.0);
  EXPECT_DOUBLE_EQ(m.bubble_fraction, 0.0);
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

// interleaved-1f1b: a micro-batch's time sums the rank's chunks (only the checkpointed one
// recomputes); step times go to index chunk · m + micro-batch; reports keep the chunk.
TEST(MetricsTest, ChunksOfOneMicroBatchAddUp) {
  Recorder recorder(/*rank=*/0, /*warmup_steps=*/0);
  recorder.begin_step(1);
  for (int chunk = 0; chunk < 2; ++chunk)
    for (int mb = 0; mb < 2; ++mb)
      recorder.record(TimelineKind::kForward, mb, 0, 1 + chunk, /*peer=*/-1, chunk);
  for (int mb = 0; mb < 2; ++mb) {
    recorder.record(TimelineKind::kRecompute, mb, 0, 0.5, /*peer=*/-1, /*chunk=*/1);
    for (int chunk = 0; chunk < 2; ++chunk)
      recorder.record(TimelineKind::kBackward, mb, 0, 2 + mb, /*peer=*/-1, chunk);
  }
  const StepTiming timing = recorder.end_step();
  EXPECT_DOUBLE_EQ(timing.fwd_ms, 3);          // 1 + 2 over the chunks
  EXPECT_DOUBLE_EQ(timing.bwd_ms, 5);          // (2 + 3) · 2 chunks / 2 micro-batches
  EXPECT_DOUBLE_EQ(timing.recompute_ms, 0.5);  // chunk 1 alone
  EXPECT_DOUBLE_EQ(timing.compute_ms, 2 * (timing.fwd_ms + timing.bwd_ms + timing.recompute_ms));
  const std::vector<StepEvents> steps(recorder.kept_steps().begin(), recorder.kept_steps().end());
  const std::vector<StepTimes> times = step_times({steps}, {{1, 20}}, 1, /*num_micro_batches=*/2);
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].ranks.at(0).fwd_ms, (std::vector<double>{1, 1, 2, 2}));
  EXPECT_EQ(times[0].ranks.at(0).bwd_ms, (std::vector<double>{2, 3, 2, 3}));
  EXPECT_EQ(times[0].ranks.at(0).recompute_ms, (std::vector<double>{0, 0, 0.5, 0.5}));
  RankMeasurement back;
  std::vector<StepEvents> steps_back;
  parse_rank_report(rank_report_json(RankMeasurement{}, steps), &back, &steps_back);
  ASSERT_EQ(steps_back.at(0).events.size(), steps[0].events.size());
  for (size_t idx = 0; idx < steps[0].events.size(); ++idx)
    EXPECT_EQ(steps_back[0].events[idx].chunk, steps[0].events[idx].chunk) << idx;
}

TEST(MetricsTest, RankReportsRoundTripTheirSteps) {
  RankMeasurement measurement;
  measurement.rank = 1;
  measurement.stage = 1;
  const std::vector<StepEvents> steps = {
      {9, 1.0, 4.0, {{1, TimelineKind::kSendWait, -1, 3.0, 3.5, -1}}}};
  RankMeasurement back;
  std::vector<StepEvents> steps_back;
  parse_rank_report(rank_report_json(measurement, steps), &back, &steps_back);
  EXPECT_EQ(back.rank, 1);
  ASSERT_EQ(steps_back.size(), 1u);
  EXPECT_EQ(steps_back[0].step, 9);
  EXPECT_DOUBLE_EQ(steps_back[0].end_ms, 4.0);
  ASSERT_EQ(steps_back[0].events.size(), 1u);
  EXPECT_EQ(steps_back[0].events[0].kind, TimelineKind::kSendWait);
  EXPECT_EQ(steps_back[0].events[0].rank, 1);
}

}  // namespace
}  // namespace pipeplan::executor
