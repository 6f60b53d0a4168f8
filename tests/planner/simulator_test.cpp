// Tests for planner/simulator.h: the m/(m+pp−1) utilisation of equal stages, timelines
// worked out by hand for unequal stages, communication, link serialisation and all-reduce,
// and the draws of varying action times.
#include "planner/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/bounds.h"
#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

SimulationInput pipeline(Schedule schedule, int pp, int m, const std::vector<StageCosts>& stages,
                         double transfer_ms = 0, int dp = 1) {
  SimulationInput in;
  in.schedule = schedule;
  in.pp = pp;
  in.dp = dp;
  in.num_micro_batches = m;
  in.stages = stages;
  for (int replica = 0; replica < dp; ++replica) {
    in.activation_ms.emplace_back(pp - 1, transfer_ms);
    in.gradient_ms.emplace_back(pp - 1, transfer_ms);
    std::vector<int> ranks;
    for (int stage = 0; stage < pp; ++stage) ranks.push_back(replica * pp + stage);
    in.ranks.push_back(ranks);
  }
  return in;
}

// An interleaved-1f1b pipeline of pp stages, each of V chunks of `chunk` costs.
SimulationInput interleaved(int pp, int v, int m, const StageCosts& chunk, double transfer_ms = 0) {
  SimulationInput in = pipeline(Schedule::kInterleaved1F1B, pp, m,
                                std::vector<StageCosts>(pp, StageCosts{}), transfer_ms);
  in.virtual_stages = v;
  in.chunks.assign(pp * v, chunk);
  in.activation_ms.assign(1, std::vector<double>(pp * v - 1, transfer_ms));
  in.gradient_ms = in.activation_ms;
  return in;
}

// The events of `rank` of `kind`, as (micro-batch, start, end), in time order.
std::vector<std::tuple<int, double, double>> events(const SimulationResult& result, int rank,
                                                    TimelineKind kind) {
  std::vector<std::tuple<int, double, double>> out;
  for (const TimelineEvent& e : result.timeline.events)
    if (e.rank == rank && e.kind == kind) out.emplace_back(e.micro_batch, e.start_ms, e.end_ms);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return std::get<1>(a) < std::get<1>(b); });
  return out;
}

using Spans = std::vector<std::tuple<int, double, double>>;

TEST(SimulatorTest, EqualStagesWithFreeCommunicationGiveMOverMPlusPpMinusOne) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB})
    for (int pp : {1, 2, 3, 4, 6, 8})
      for (int m : {1, 2, 3, 5, 8, 16}) {
        const std::vector<StageCosts> stages(pp, StageCosts{0.7, 1.3, 0, 0, 0});
        const SimulationResult result = simulate(pipeline(schedule, pp, m, stages));
        const double expected = static_cast<double>(m) / (m + pp - 1);
        double busy = 0;
        for (double rank_busy : result.busy_ms) busy += rank_busy;
        EXPECT_NEAR(busy / (pp * result.iteration_ms), expected, 1e-12)
            << to_string(schedule) << " pp=" << pp << " m=" << m;
        EXPECT_NEAR(1 - result.bubble_fraction, expected, 1e-12);
        EXPECT_NEAR(result.iteration_ms, (m + pp - 1) * 2.0, 1e-9);
      }
}

// Narayanan et al. (SC 2021): with V chunks per stage the warm-up and cool-down shrink by V, so
// equal chunks with free communication take (m + (pp − 1)/V) · (t_f + t_b) of a stage's whole
// forward and backward, a bubble of (pp − 1)/V over m + (pp − 1)/V.
TEST(SimulatorTest, InterleavedEqualChunksShrinkTheBubbleByV) {
  for (int pp : {2, 3, 4, 8})
    for (int v : {2, 3, 4})
      for (int rounds : {1, 2, 4}) {
        const int m = rounds * pp;
        const double fwd = 0.7, bwd = 1.3;  // a whole stage's; each chunk runs 1/V of it
        const SimulationResult result =
            simulate(interleaved(pp, v, m, StageCosts{fwd / v, bwd / v, 0, 0, 0}));
        const double expected = (m + (pp - 1.0) / v) * (fwd + bwd);
        EXPECT_NEAR(result.iteration_ms, expected, 1e-9) << "pp=" << pp << " V=" << v << " m=" << m;
        EXPECT_NEAR(result.bubble_fraction, (pp - 1.0) / v / (m + (pp - 1.0) / v), 1e-9);
      }
}

// pp=2, V=2, m=2, each chunk's forward 1 ms and backward 2 ms, every transfer 0.5 ms. Stage 0
// warms up through all four forwards (F0 F1 F0v1 F1v1), stage 1 through two; stage 1's chunk 0
// feeds stage 0's chunk 1 over the wrap-around link, whose gradients come back over it:
//   stage 0: F0 0-1, F1 1-2, F0v1 3-4, F1v1 4-5, B0v1 8-10, B1v1 11-13, B0 13-15, B1 16-18
//   stage 1: F0 1.5-2.5, F1 2.5-3.5, F0v1 4.5-5.5, B0v1 5.5-7.5, F1v1 7.5-8.5, B1v1 8.5-10.5,
//            B0 10.5-12.5, B1 13.5-15.5
TEST(SimulatorTest, InterleavedByHand) {
  SimulationInput in = interleaved(2, 2, 2, StageCosts{1, 2, 0, 0, 0}, 0.5);
  const SimulationResult result = simulate(in);
  EXPECT_NEAR(result.iteration_ms, 18, 1e-12);
  std::vector<std::tuple<int, int, double, double>> backwards;  // (mb, chunk, start, end)
  for (const TimelineEvent& e : result.timeline.events)
    if (e.rank == 0 && e.kind == TimelineKind::kBackward)
      backwards.emplace_back(e.micro_batch, e.chunk, e.start_ms, e.end_ms);
  std::sort(backwards.begin(), backwards.end(),
            [](const auto& a, const auto& b) { return std::get<2>(a) < std::get<2>(b); });
  const std::vector<std::tuple<int, int, double, double>> expected = {
      {0, 1, 8, 10}, {1, 1, 11, 13}, {0, 0, 13, 15}, {1, 0, 16, 18}};
  EXPECT_EQ(backwards, expected);
  Spans forwards;
  for (const TimelineEvent& e : result.timeline.events)
    if (e.rank == 1 && e.kind == TimelineKind::kForward && e.chunk == 1)
      forwards.emplace_back(e.micro_batch, e.start_ms, e.end_ms);
  std::sort(forwards.begin(), forwards.end());
  EXPECT_EQ(forwards, (Spans{{0, 4.5, 5.5}, {1, 7.5, 8.5}}));
  // The ranks' own times, chunk-major (chunk · m + micro-batch), replay the same iteration; a
  // slower chunk 1 on stage 1 (its last-chunk backwards) delays it.
  RankStepTimes times;
  times.fwd_ms = {1, 1, 1, 1};
  times.bwd_ms = {2, 2, 2, 2};
  in.rank_times = {times, times};
  EXPECT_NEAR(simulate(in).iteration_ms, 18, 1e-12);
  in.rank_times[1].bwd_ms = {2, 2, 3, 3};
  EXPECT_GT(simulate(in).iteration_ms, 18);
}

// The simulator plays exactly the expansion's order: each rank's compute events, in time order,
// are its list's forwards and backwards (micro-batch and chunk), unequal chunks and all.
TEST(SimulatorTest, InterleavedPlaysTheExpansionsOrder) {
  for (int pp : {2, 3, 4})
    for (int v : {2, 3})
      for (int m : {pp, 3 * pp}) {
        SimulationInput in = interleaved(pp, v, m, StageCosts{1, 2, 0, 0, 0}, 0.25);
        for (size_t c = 0; c < in.chunks.size(); ++c) in.chunks[c].fwd_ms = 0.5 + 0.1 * c;
        const SimulationResult result = simulate(in);
        for (int stage = 0; stage < pp; ++stage) {
          std::vector<std::tuple<double, std::string>> played;
          for (const TimelineEvent& e : result.timeline.events)
            if (e.rank == stage &&
                (e.kind == TimelineKind::kForward || e.kind == TimelineKind::kBackward))
              played.emplace_back(e.start_ms, (e.kind == TimelineKind::kForward ? "F" : "B") +
                                                  std::to_string(e.micro_batch) + "v" +
                                                  std::to_string(e.chunk));
          std::sort(played.begin(), played.end());
          std::string order, expected;
          for (const auto& [start, name] : played) order += name + " ";
          for (const Action& a : stage_actions(Schedule::kInterleaved1F1B, pp, stage, m, {}, v))
            if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward)
              expected += (a.kind == ActionKind::kForward ? "F" : "B") +
                          std::to_string(a.micro_batch) + "v" + std::to_string(a.chunk) + " ";
          EXPECT_EQ(order, expected) << "pp=" << pp << " V=" << v << " m=" << m;
        }
      }
}

// Varying chunk times are drawn like a stage's (fwd_cv and bwd_cv of the stage).
TEST(SimulatorTest, InterleavedDrawsVaryingChunkTimes) {
  SimulationInput in = interleaved(2, 2, 4, StageCosts{1, 2, 0, 0, 0}, 0.1);
  in.dp = 2;
  in.activation_ms.push_back(in.activation_ms[0]);
  in.gradient_ms.push_back(in.gradient_ms[0]);
  in.ranks.push_back({2, 3});
  for (StageCosts& stage : in.stages) stage.fwd_cv = stage.bwd_cv = 0.3;
  const SimulationResult result = simulate(in);
  EXPECT_EQ(result.variability_draws, kVariabilityDraws);
  EXPECT_GT(result.iteration_ms, result.mean_times_iteration_ms);
  EXPECT_LT(result.iteration_ms, 2 * result.mean_times_iteration_ms);
}

TEST(SimulatorTest, UnequalStagesByHand) {
  // Stage 0: f = b = 1; stage 1: f = b = 0.5; m = 2; free communication.
  const std::vector<StageCosts> stages{{1, 1, 0, 0, 0}, {0.5, 0.5, 0, 0, 0}};
  // gpipe:  stage 0  F0 [0,1] F1 [1,2] ....... B0 [3,4] B1 [4,5]
  //         stage 1       F0 [1,1.5] F1 [2,2.5] B0 [2.5,3] B1 [3,3.5]
  const SimulationResult gpipe = simulate(pipeline(Schedule::kGpipe, 2, 2, stages));
  EXPECT_DOUBLE_EQ(gpipe.iteration_ms, 5);
  EXPECT_EQ(events(gpipe, 0, TimelineKind::kBackward), (Spans{{0, 3, 4}, {1, 4, 5}}));
  EXPECT_EQ(events(gpipe, 1, TimelineKind::kForward), (Spans{{0, 1, 1.5}, {1, 2, 2.5}}));
  EXPECT_EQ(events(gpipe, 0, TimelineKind::kRecvWait), (Spans{{0, 2, 3}}));
  EXPECT_DOUBLE_EQ(gpipe.busy_ms[0], 4);
  EXPECT_DOUBLE_EQ(gpipe.idle_ms[1], 3);
  EXPECT_DOUBLE_EQ(gpipe.bubble_fraction, 4.0 / 10);
  // 1f1b:   stage 0  F0 [0,1] F1 [1,2] B0 [2,3] B1 [3,4]
  //         stage 1       F0 [1,1.5] B0 [1.5,2] F1 [2,2.5] B1 [2.5,3]
  const SimulationResult one_f_one_b = simulate(pipeline(Schedule::kOneFOneB, 2, 2, stages));
  EXPECT_DOUBLE_EQ(one_f_one_b.iteration_ms, 4);
  EXPECT_EQ(events(one_f_one_b, 1, TimelineKind::kBackward), (Spans{{0, 1.5, 2}, {1, 2.5, 3}}));
  EXPECT_EQ(events(one_f_one_b, 0, TimelineKind::kBackward), (Spans{{0, 2, 3}, {1, 3, 4}}));
}

TEST(SimulatorTest, ZeroBubbleH1ByHand) {
  // Both stages: f = 1, B = 1, W = 1 (a whole backward 2); m = 2; free communication.
  //   1f1b, b = 2:  stage 0  F0 [0,1] F1 [1,2] .... B0 [4,6] . B1 [7,9]
  //                 stage 1       F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
  //   zb-h1:        stage 0  F0 [0,1] F1 [1,2] . Bi0 [3,4] W0 [4,5] Bi1 [5,6] W1 [6,7]
  //                 stage 1       F0 [1,2] Bi0 [2,3] F1 [3,4] Bi1 [4,5] W0 [5,6] W1 [6,7]
  // Stage 1's deferred W fills the wait 1f1b leaves before stage 0's last backward.
  StageCosts split{1, 1, 0, 0, 0};
  split.bwd_weight_ms = 1;
  const SimulationResult zb =
      simulate(pipeline(Schedule::kZeroBubbleH1, 2, 2, std::vector<StageCosts>(2, split)));
  EXPECT_DOUBLE_EQ(zb.iteration_ms, 7);
  EXPECT_EQ(events(zb, 0, TimelineKind::kBackwardInput), (Spans{{0, 3, 4}, {1, 5, 6}}));
  EXPECT_EQ(events(zb, 0, TimelineKind::kBackwardWeight), (Spans{{0, 4, 5}, {1, 6, 7}}));
  EXPECT_EQ(events(zb, 1, TimelineKind::kBackwardInput), (Spans{{0, 2, 3}, {1, 4, 5}}));
  EXPECT_EQ(events(zb, 1, TimelineKind::kBackwardWeight), (Spans{{0, 5, 6}, {1, 6, 7}}));
  EXPECT_TRUE(events(zb, 0, TimelineKind::kBackward).empty());
  EXPECT_DOUBLE_EQ(zb.busy_ms[1], 6);
  const SimulationResult one_f_one_b = simulate(
      pipeline(Schedule::kOneFOneB, 2, 2, std::vector<StageCosts>(2, StageCosts{1, 2, 0, 0, 0})));
  EXPECT_DOUBLE_EQ(one_f_one_b.iteration_ms, 9);
  EXPECT_LT(zb.bubble_fraction, one_f_one_b.bubble_fraction);
  // The bound of a split input counts W as work but not on the path back to stage 0.
  EXPECT_LE(iteration_lower_bound_ms(pipeline(Schedule::kZeroBubbleH1, 2, 2,
                                              std::vector<StageCosts>(2, split))),
            7.0);
}

// zb-h1 against 1f1b over many shapes with B + W = the whole backward: never slower, and each
// rank busy for m · (f + B + W).
TEST(SimulatorTest, ZeroBubbleH1NeverLosesToOneFOneBWithTheSameWork) {
  for (int pp = 1; pp <= 6; ++pp)
    for (int m : {1, 2, 3, 5, 8, 16}) {
      StageCosts split{0.7, 0.6, 0, 0, 0};
      split.bwd_weight_ms = 0.7;
      const SimulationResult zb = simulate(
          pipeline(Schedule::kZeroBubbleH1, pp, m, std::vector<StageCosts>(pp, split), 0.05));
      const SimulationResult base = simulate(pipeline(
          Schedule::kOneFOneB, pp, m, std::vector<StageCosts>(pp, StageCosts{0.7, 1.3, 0, 0, 0}),
          0.05));
      EXPECT_LE(zb.iteration_ms, base.iteration_ms * (1 + 1e-12)) << "pp=" << pp << " m=" << m;
      for (double busy : zb.busy_ms) EXPECT_NEAR(busy, m * 2.0, 1e-9);
      EXPECT_LE(iteration_lower_bound_ms(pipeline(Schedule::kZeroBubbleH1, pp, m,
                                                  std::vector<StageCosts>(pp, split), 0.05)),
                zb.iteration_ms * (1 + 1e-12));
    }
}

TEST(SimulatorTest, CommunicationByHand) {
  // f = b = 1 on both stages, every transfer 0.5 ms, gpipe, m = 2:
  //   stage 0: F0 [0,1] F1 [1,2] wait [2,5] B0 [5,6] B1 [6,7]   sends act at [1,1.5] [2,2.5]
  //   stage 1: wait [0,1.5] F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,4.5] B1 [4.5,5.5]
  //            sends grad at [4.5,5] and [5.5,6]
  const std::vector<StageCosts> stages(2, StageCosts{1, 1, 0, 0, 0});
  const SimulationResult result = simulate(pipeline(Schedule::kGpipe, 2, 2, stages, 0.5));
  EXPECT_DOUBLE_EQ(result.iteration_ms, 7);
  EXPECT_EQ(events(result, 1, TimelineKind::kForward), (Spans{{0, 1.5, 2.5}, {1, 2.5, 3.5}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward), (Spans{{0, 5, 6}, {1, 6, 7}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kSend), (Spans{{0, 4.5, 5}, {1, 5.5, 6}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kRecvWait), (Spans{{0, 2, 5}}));
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 6.0 / 14);
}

TEST(SimulatorTest, SendsThatOccupyTheSenderDelayItsNextAction) {
  // As CommunicationByHand, but every send keeps its rank until the transfer ends (Gloo):
  //   stage 0: F0 [0,1] send [1,1.5] F1 [1.5,2.5] send [2.5,3] wait [3,5.5] B0 [5.5,6.5]
  //            wait [6.5,7] B1 [7,8]
  //   stage 1: wait [0,1.5] F0 [1.5,2.5] wait [2.5,3] F1 [3,4] B0 [4,5] send [5,5.5]
  //            B1 [5.5,6.5] send [6.5,7]
  const std::vector<StageCosts> stages(2, StageCosts{1, 1, 0, 0, 0});
  SimulationInput in = pipeline(Schedule::kGpipe, 2, 2, stages, 0.5);
  in.send_occupies_sender = true;
  const SimulationResult result = simulate(in);
  EXPECT_DOUBLE_EQ(result.iteration_ms, 8);
  EXPECT_EQ(events(result, 0, TimelineKind::kForward), (Spans{{0, 0, 1}, {1, 1.5, 2.5}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kSend), (Spans{{0, 1, 1.5}, {1, 2.5, 3}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kForward), (Spans{{0, 1.5, 2.5}, {1, 3, 4}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kBackward), (Spans{{0, 4, 5}, {1, 5.5, 6.5}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward), (Spans{{0, 5.5, 6.5}, {1, 7, 8}}));
  // Sends are not busy time: 4 ms of compute on each rank, half of the 8 ms idle.
  EXPECT_DOUBLE_EQ(result.busy_ms[0], 4);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 0.5);
  // The lower bound, which charges no sender, still holds.
  EXPECT_LE(iteration_lower_bound_ms(in), result.iteration_ms);
}

// The executor posts a receive only when its wait for the one kRecvLookahead (2) before it
// returns, and a transfer starts no earlier. gpipe, pp=2, m=4, transfers 1.5 ms; stage 0 f = b
// = 1; stage 1's first forward takes 5 ms, the others 0.5, its backwards 1:
//   stage 0: F0 [0,1] F1 [1,2] F2 [2,3] F3 [3,4]   act 0 [1,2.5] 1 [2.5,4] 2 [4,5.5]
//            act 3 [7.5,9]: stage 1 posts it at 7.5, when its wait for act 1 returns
//   stage 1: F0 [2.5,7.5] F1 [7.5,8] F2 [8,8.5] wait [8.5,9] F3 [9,9.5] B0..B3 [9.5,13.5]
//            grads [10.5,12] [12,13.5] [13.5,15] [15,16.5]: the link is busy, posts early
//   stage 0: B0 [12,13] B1 [13.5,14.5] B2 [15,16] B3 [16.5,17.5]
// Without the post, act 3 would move at [5.5,7] and the iteration end at 17.
TEST(SimulatorTest, ATransferWaitsForItsReceiveToBePosted) {
  SimulationInput in =
      pipeline(Schedule::kGpipe, 2, 4, std::vector<StageCosts>(2, StageCosts{1, 1, 0, 0, 0}), 1.5);
  in.rank_times = {{{1, 1, 1, 1}, {1, 1, 1, 1}, {}, 0, 0},
                   {{5, 0.5, 0.5, 0.5}, {1, 1, 1, 1}, {}, 0, 0}};
  const SimulationResult result = simulate(in);
  EXPECT_DOUBLE_EQ(result.iteration_ms, 17.5);
  EXPECT_EQ(events(result, 0, TimelineKind::kSend),
            (Spans{{0, 1, 2.5}, {1, 2.5, 4}, {2, 4, 5.5}, {3, 7.5, 9}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kRecvWait), (Spans{{0, 0, 2.5}, {3, 8.5, 9}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward),
            (Spans{{0, 12, 13}, {1, 13.5, 14.5}, {2, 15, 16}, {3, 16.5, 17.5}}));
  EXPECT_TRUE(events(result, 0, TimelineKind::kSendWait).empty());
}

// A rank keeps at most kMaxSendsInFlight (2) sends outstanding: before a third it waits for
// the first to complete. gpipe, pp=2, m=4, f = b = 1, transfers 2.5 ms:
//   stage 0: F0 [0,1] F1 [1,2] F2 [2,3] send-wait [3,3.5] F3 [3.5,4.5] send-wait [4.5,6]
//            act 0 [1,3.5] 1 [3.5,6] 2 [6,8.5] 3 [8.5,11]
//   stage 1: F0 [3.5,4.5] F1 [6,7] F2 [8.5,9.5] F3 [11,12] B0 [12,13] B1 [13,14] B2 [14,15]
//            send-wait [15,15.5] B3 [15.5,16.5] send-wait [16.5,18]
//            grads [13,15.5] [15.5,18] [18,20.5] [20.5,23]
//   stage 0: B0 [15.5,16.5] B1 [18,19] B2 [20.5,21.5] B3 [23,24]
// The link is the bottleneck, so the iteration is 24 ms either way; the waits are idle time.
TEST(SimulatorTest, ARankWaitsWhenItsSendsInFlightAreAtTheLimit) {
  const SimulationResult result = simulate(
      pipeline(Schedule::kGpipe, 2, 4, std::vector<StageCosts>(2, StageCosts{1, 1, 0, 0, 0}), 2.5));
  EXPECT_DOUBLE_EQ(result.iteration_ms, 24);
  EXPECT_EQ(events(result, 0, TimelineKind::kSendWait), (Spans{{2, 3, 3.5}, {3, 4.5, 6}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kForward),
            (Spans{{0, 0, 1}, {1, 1, 2}, {2, 2, 3}, {3, 3.5, 4.5}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kSendWait), (Spans{{2, 15, 15.5}, {3, 16.5, 18}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kBackward),
            (Spans{{0, 12, 13}, {1, 13, 14}, {2, 14, 15}, {3, 15.5, 16.5}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward),
            (Spans{{0, 15.5, 16.5}, {1, 18, 19}, {2, 20.5, 21.5}, {3, 23, 24}}));
  EXPECT_DOUBLE_EQ(result.busy_ms[0], 8);
  EXPECT_DOUBLE_EQ(result.busy_ms[1], 8);
}

// On Gloo a send whose receive is posted holds its rank until the transfer ends; one whose
// receive is not posted yet returns at once, and the data moves when it is. As
// ATransferWaitsForItsReceiveToBePosted with sends that occupy the sender and a 10 ms first
// forward on stage 1:
//   stage 0: F0 [0,1] act 0 [1,2.5] F1 [2.5,3.5] act 1 [3.5,5] F2 [5,6] act 2 [6,7.5]
//            (posted at 2.5) F3 [7.5,8.5], act 3 made at 8.5, posted at 12.5: [12.5,14]
//   stage 1: F0 [2.5,12.5] F1 [12.5,13] F2 [13,13.5] wait [13.5,14] F3 [14,14.5]
//            B0 [14.5,15.5] grad 0 [15.5,17] B1 [17,18] grad 1 [18,19.5] B2 [19.5,20.5]
//            grad 2 [20.5,22] B3 [22,23] grad 3 [23,24.5] (each posted before it is sent)
//   stage 0: B0 [17,18] B1 [19.5,20.5] B2 [22,23] B3 [24.5,25.5]
// Held for act 3 too, stage 0 would send it at [8.5,10] and the iteration end at 25.
TEST(SimulatorTest, AGlooSendBeforeItsReceiveIsPostedDoesNotHoldTheSender) {
  SimulationInput in =
      pipeline(Schedule::kGpipe, 2, 4, std::vector<StageCosts>(2, StageCosts{1, 1, 0, 0, 0}), 1.5);
  in.send_occupies_sender = true;
  in.rank_times = {{{1, 1, 1, 1}, {1, 1, 1, 1}, {}, 0, 0},
                   {{10, 0.5, 0.5, 0.5}, {1, 1, 1, 1}, {}, 0, 0}};
  const SimulationResult result = simulate(in);
  EXPECT_DOUBLE_EQ(result.iteration_ms, 25.5);
  EXPECT_EQ(events(result, 0, TimelineKind::kSend),
            (Spans{{0, 1, 2.5}, {1, 3.5, 5}, {2, 6, 7.5}, {3, 12.5, 14}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kForward),
            (Spans{{0, 0, 1}, {1, 2.5, 3.5}, {2, 5, 6}, {3, 7.5, 8.5}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kSend),
            (Spans{{0, 15.5, 17}, {1, 18, 19.5}, {2, 20.5, 22}, {3, 23, 24.5}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward),
            (Spans{{0, 17, 18}, {1, 19.5, 20.5}, {2, 22, 23}, {3, 24.5, 25.5}}));
}

TEST(SimulatorTest, TransfersOnOneLinkAreSerialised) {
  // Each activation takes 1.5 ms, longer than a forward: the second waits for the first.
  //   stage 0 sends mb 0 at [1, 2.5] and mb 1 at [2.5, 4] (not [2, 3.5]).
  const std::vector<StageCosts> stages(2, StageCosts{1, 1, 0, 0, 0});
  const SimulationResult result = simulate(pipeline(Schedule::kGpipe, 2, 2, stages, 1.5));
  EXPECT_EQ(events(result, 0, TimelineKind::kSend), (Spans{{0, 1, 2.5}, {1, 2.5, 4}}));
  EXPECT_EQ(events(result, 1, TimelineKind::kForward), (Spans{{0, 2.5, 3.5}, {1, 4, 5}}));
}

TEST(SimulatorTest, RecomputeRunsBeforeEachBackward) {
  const std::vector<StageCosts> stages{{1, 2, 1, 0, 0}};
  const SimulationResult result = simulate(pipeline(Schedule::kOneFOneB, 1, 2, stages));
  EXPECT_EQ(events(result, 0, TimelineKind::kRecompute), (Spans{{0, 1, 2}, {1, 5, 6}}));
  EXPECT_EQ(events(result, 0, TimelineKind::kBackward), (Spans{{0, 2, 4}, {1, 6, 8}}));
  EXPECT_DOUBLE_EQ(result.iteration_ms, 8);
  EXPECT_DOUBLE_EQ(result.bubble_fraction, 0);
}

// Per-rank action times replace the stage's: equal to it they change nothing; a slower first
// forward on stage 0 delays everything after it by exactly the difference.
TEST(SimulatorTest, RankTimesReplaceTheStagesAndDelayWhatDependsOnThem) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    const std::vector<StageCosts> stages{{1, 2, 0.5, 0, 0.25}, {1.5, 2.5, 0, 0, 0.125}};
    SimulationInput in = pipeline(schedule, 2, 4, stages, 0.25);
    const SimulationResult by_stage = simulate(in);
    in.rank_times = {{{1, 1, 1, 1}, {2, 2, 2, 2}, {0.5, 0.5, 0.5, 0.5}, 0, 0.25},
                     {{1.5, 1.5, 1.5, 1.5}, {2.5, 2.5, 2.5, 2.5}, {}, 0, 0.125}};
    const SimulationResult same = simulate(in);
    EXPECT_DOUBLE_EQ(same.iteration_ms, by_stage.iteration_ms) << to_string(schedule);
    EXPECT_EQ(same.busy_ms, by_stage.busy_ms);
    in.rank_times[0].fwd_ms[0] = 4;
    const SimulationResult slower = simulate(in);
    EXPECT_DOUBLE_EQ(slower.iteration_ms, by_stage.iteration_ms + 3) << to_string(schedule);
    EXPECT_EQ(events(slower, 0, TimelineKind::kRecompute).size(), 4u);
    EXPECT_TRUE(events(slower, 1, TimelineKind::kRecompute).empty());
  }
}

// The same total compute costs more when it varies: stage 1's backwards alternate 1 and 3 ms
// instead of 2 each, and 1f1b waits on the slow ones.
TEST(SimulatorTest, VaryingActionTimesCostMoreThanTheirMean) {
  const std::vector<StageCosts> stages(2, StageCosts{1, 2, 0, 0, 0});
  SimulationInput in = pipeline(Schedule::kOneFOneB, 2, 4, stages);
  const double steady = simulate(in).iteration_ms;
  in.rank_times = {{{1, 1, 1, 1}, {2, 2, 2, 2}, {}, 0, 0}, {{1, 1, 1, 1}, {3, 1, 3, 1}, {}, 0, 0}};
  EXPECT_GT(simulate(in).iteration_ms, steady);
}

// With a coefficient of variation on the stages' actions, simulate() also plays draws of the
// iteration: a balanced pipeline then waits on its slowest path, so the mean over the draws
// lies above the iteration at mean times, which the timeline and busy times keep. The draws
// have a fixed seed; without draws, or with measured rank times, nothing is drawn.
TEST(SimulatorTest, VaryingStageTimesAreDrawnAndDelayTheIteration) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    const std::vector<StageCosts> steady_stages(2, StageCosts{1, 2, 0, 0, 0.5});
    const SimulationResult steady = simulate(pipeline(schedule, 2, 8, steady_stages));
    const std::vector<StageCosts> stages(2, StageCosts{1, 2, 0, 0, 0.5, 0.2, 0.2});
    const SimulationInput in = pipeline(schedule, 2, 8, stages);
    const SimulationResult varying = simulate(in);
    EXPECT_GT(varying.iteration_ms, steady.iteration_ms * 1.01) << to_string(schedule);
    EXPECT_LT(varying.iteration_ms, steady.iteration_ms * 1.3) << to_string(schedule);
    EXPECT_DOUBLE_EQ(varying.mean_times_iteration_ms, steady.iteration_ms);
    EXPECT_EQ(varying.busy_ms, steady.busy_ms);
    EXPECT_EQ(varying.timeline.events.size(), steady.timeline.events.size());
    for (size_t rank = 0; rank < 2; ++rank)
      EXPECT_DOUBLE_EQ(varying.idle_ms[rank], varying.iteration_ms - varying.busy_ms[rank]);
    EXPECT_DOUBLE_EQ(varying.bubble_fraction,
                     (varying.idle_ms[0] + varying.idle_ms[1]) / (2 * varying.iteration_ms));
    EXPECT_EQ(simulate(in).iteration_ms, varying.iteration_ms);  // the same draws every time

    SimulationOptions no_draws;
    no_draws.variability_draws = 0;
    EXPECT_DOUBLE_EQ(simulate(in, no_draws).iteration_ms, steady.iteration_ms);
    SimulationInput measured = in;
    measured.rank_times = {{std::vector<double>(8, 1), std::vector<double>(8, 2), {}, 0, 0.5},
                           {std::vector<double>(8, 1), std::vector<double>(8, 2), {}, 0, 0.5}};
    EXPECT_DOUBLE_EQ(simulate(measured).iteration_ms, steady.iteration_ms);
  }
}

// One rank waits for nobody: its drawn iterations average to about its mean time, and the
// result never falls below the iteration at mean times.
TEST(SimulatorTest, VaryingTimesOnOneRankStayAtTheMean) {
  const SimulationResult steady =
      simulate(pipeline(Schedule::kOneFOneB, 1, 16, {StageCosts{1, 2, 0, 0, 0}}));
  const SimulationResult varying =
      simulate(pipeline(Schedule::kOneFOneB, 1, 16, {StageCosts{1, 2, 0, 0, 0, 0.2, 0.2}}));
  EXPECT_GE(varying.iteration_ms, steady.iteration_ms);
  EXPECT_LT(varying.iteration_ms, steady.iteration_ms * 1.02);
}

TEST(SimulatorTest, AllReduceWaitsForTheLastReplicaThenTheOptimizerRuns) {
  // pp = 2, m = 1, f = b = 1, all-reduce 2 ms, optimizer 1 ms. Replica 0 has free links,
  // replica 1 takes 1 ms per transfer, so its stage 1 ends at 4 and its stage 0 at 6:
  //   stage 1 all-reduce [4, 6], optimizer [6, 7]; stage 0 all-reduce [6, 8], optimizer [8, 9].
  SimulationInput in =
      pipeline(Schedule::kGpipe, 2, 1, std::vector<StageCosts>(2, {1, 1, 0, 2, 1}), 0, /*dp=*/3);
  in.activation_ms[1] = {1};
  in.gradient_ms[1] = {1};
  for (bool merge : {true, false}) {
    const SimulationResult result = simulate(in, {/*record_timeline=*/true, merge});
    EXPECT_DOUBLE_EQ(result.iteration_ms, 9);
    for (int replica = 0; replica < 3; ++replica) {
      EXPECT_EQ(events(result, replica * 2 + 1, TimelineKind::kAllReduce), (Spans{{-1, 4, 6}}));
      EXPECT_EQ(events(result, replica * 2, TimelineKind::kOptimizer), (Spans{{-1, 8, 9}}));
      EXPECT_DOUBLE_EQ(result.busy_ms[replica * 2], 1 + 1 + 2 + 1);
    }
    EXPECT_EQ(events(result, 0, TimelineKind::kRecvWait), (Spans{{0, 1, 3}}));
    EXPECT_EQ(events(result, 2, TimelineKind::kRecvWait), (Spans{{0, 1, 5}}));
  }
}

TEST(SimulatorTest, OverlappedBucketsStartDuringTheLastBackwardAndZeroOneGathersAfterTheStep) {
  // pp = 1, dp = 2, m = 2, f = 1, b = 4, optimizer 1: F0 [0, 1] B0 [1, 5] F1 [5, 6] B1 [6, 10].
  // Two buckets of 3 ms: the later layers' ready half-way through B1 (at 8), the first layer's
  // when B1 ends (10). Overlapped: [8, 11] then [11, 14]; the all-reduce action waits [10, 14],
  // the step runs [14, 15]. After the step ZeRO-1 gathers for 2 ms: [15, 17]. Without overlap
  // the action runs both buckets, 6 ms: [10, 16], the step [16, 17].
  StageCosts costs{1, 4, 0, /*allreduce_ms=*/6, /*optimizer_ms=*/1};
  costs.buckets = {{0, 1000, 0.5, 3.0}, {0, 1000, 1.0, 3.0}};
  SimulationInput in = pipeline(Schedule::kOneFOneB, 1, 2, {costs}, 0, /*dp=*/2);
  in.overlap_allreduce = true;
  for (bool merge : {true, false}) {
    const SimulationResult result = simulate(in, {/*record_timeline=*/true, merge});
    EXPECT_DOUBLE_EQ(result.iteration_ms, 15);
    EXPECT_EQ(events(result, 1, TimelineKind::kAllReduce), (Spans{{-1, 10, 14}}));
    EXPECT_DOUBLE_EQ(result.allreduce_ms[1], 4);
    EXPECT_DOUBLE_EQ(result.busy_ms[0], 2 + 8 + 4 + 1);
  }
  in.stages[0].allgather_ms = 2;
  in.all_gather = true;
  const SimulationResult sharded = simulate(in);
  EXPECT_DOUBLE_EQ(sharded.iteration_ms, 17);
  EXPECT_EQ(events(sharded, 0, TimelineKind::kAllGather), (Spans{{-1, 15, 17}}));
  in.overlap_allreduce = false;
  in.all_gather = false;
  const SimulationResult serial = simulate(in);
  EXPECT_DOUBLE_EQ(serial.iteration_ms, 17);
  EXPECT_EQ(events(serial, 0, TimelineKind::kAllReduce), (Spans{{-1, 10, 16}}));
  EXPECT_LE(iteration_lower_bound_ms(in), 17);
  in.overlap_allreduce = true;
  EXPECT_LE(iteration_lower_bound_ms(in), 15);
  EXPECT_GE(iteration_lower_bound_ms(in), 10 + 3 + 1);  // the first layer's bucket is exposed
}

TEST(SimulatorTest, MergingIdenticalReplicasChangesNothing) {
  SimulationInput in = pipeline(
      Schedule::kOneFOneB, 3, 5,
      {{1, 2, 0, 0.5, 0.2}, {1.5, 2.5, 1.5, 0.7, 0.3}, {0.5, 1, 0, 0.1, 0.1}}, 0.25, /*dp=*/4);
  in.activation_ms[2] = {0.75, 0.25};
  const SimulationResult merged =
      simulate(in, {/*record_timeline=*/true, /*merge_identical_replicas=*/true});
  const SimulationResult separate =
      simulate(in, {/*record_timeline=*/true, /*merge_identical_replicas=*/false});
  EXPECT_EQ(merged.iteration_ms, separate.iteration_ms);
  EXPECT_EQ(merged.busy_ms, separate.busy_ms);
  EXPECT_EQ(merged.timeline.events.size(), separate.timeline.events.size());
}

TEST(SimulatorTest, LowerBoundsNeverExceedTheSimulation) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB})
    for (int m : {1, 2, 3, 7}) {
      SimulationInput in =
          pipeline(schedule, 3, m,
                   {{2, 1, 0, 0.5, 0.2}, {0.2, 0.3, 0.2, 0.7, 0.3}, {1, 3, 0, 0.1, 0.1}}, 0.3, 2);
      EXPECT_LE(iteration_lower_bound_ms(in),
                simulate(in, {/*record_timeline=*/false, /*merge_identical_replicas=*/true})
                        .iteration_ms +
                    1e-9);
    }
}

TEST(SimulatorTest, APlayStopsOnlyOnceItsIterationMustPassTheLimit) {
  const std::vector<StageCosts> stages = {
      {2, 1, 0, 0.5, 0.2, 0, 0, 0.5}, {0.2, 0.3, 0.2, 0.7, 0.3, 0, 0, 0.1}, {1, 3, 0, 0.1, 0.1}};
  std::vector<SimulationInput> inputs;
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kZeroBubbleH1})
    for (int m : {1, 4, 9}) {
      std::vector<StageCosts> costs = stages;
      if (schedule != Schedule::kZeroBubbleH1)
        for (StageCosts& stage : costs) stage.bwd_weight_ms = 0;
      inputs.push_back(pipeline(schedule, 3, m, costs, 0.3, /*dp=*/2));
    }
  inputs.push_back(interleaved(/*pp=*/3, /*v=*/2, /*m=*/6, {1, 2, 0.5}, 0.2));
  int stopped = 0;
  for (const SimulationInput& in : inputs) {
    SimulationOptions options{/*record_timeline=*/false, /*merge_identical_replicas=*/true,
                              /*variability_draws=*/0};
    const SimulationResult full = simulate(in, options);
    ASSERT_FALSE(full.abandoned);
    for (double share : {0.3, 0.7, 0.9, 0.99, 1.0, 1.5}) {
      options.abandon_above_ms = full.iteration_ms * share;
      const SimulationResult played = simulate(in, options);
      if (played.abandoned) {
        ++stopped;
        EXPECT_GT(full.iteration_ms, options.abandon_above_ms * (1 + 1e-6));
        EXPECT_GT(played.iteration_ms, options.abandon_above_ms);
        EXPECT_LE(played.iteration_ms, full.iteration_ms * (1 + 1e-12));
      } else {
        EXPECT_EQ(played.iteration_ms, full.iteration_ms);
        EXPECT_EQ(played.busy_ms, full.busy_ms);
      }
    }
  }
  EXPECT_GT(stopped, 10);
}

TEST(SimulatorTest, InputFromAPlanUsesShapesBatchAndTheLinkBetweenNodes) {
  Plan plan = testing::make_test_plan(/*dp=*/2, /*pp=*/2, /*num_micro_batches=*/3, Schedule::kGpipe,
                                      /*devices_per_node=*/3);
  plan.cluster.intra_node_bandwidth_bytes_per_s = 1e6;
  plan.cluster.inter_node_bandwidth_bytes_per_s = 1e5;
  plan.cluster.latency_ms = 0.1;
  plan.predictions.stages[0] = {};
  plan.predictions.stages[0].fwd_ms = 1;
  plan.predictions.stages[1].allreduce_ms = 3;
  const SimulationInput in = simulation_input(plan);
  // 128 floats × 2 samples = 1024 bytes; ranks 0,1 share node 0; ranks 2 (node 0), 3 (node 1).
  EXPECT_DOUBLE_EQ(in.activation_ms[0][0], 0.1 + 1.024);
  EXPECT_DOUBLE_EQ(in.activation_ms[1][0], 0.1 + 10.24);
  EXPECT_DOUBLE_EQ(in.gradient_ms[1][0], 0.1 + 10.24);
  EXPECT_EQ(in.ranks[1], (std::vector<int>{2, 3}));
  EXPECT_DOUBLE_EQ(in.stages[0].fwd_ms, 1);
  EXPECT_DOUBLE_EQ(in.stages[1].allreduce_ms, 3);
  EXPECT_TRUE(in.send_occupies_sender);  // a CPU plan: Gloo
  plan.cluster.device_kind = "cuda";
  for (RankAssignment& assignment : plan.ranks)
    assignment.device = "cuda:" + std::to_string(assignment.local_rank);
  EXPECT_FALSE(simulation_input(plan).send_occupies_sender);  // a GPU each: NCCL
}

}  // namespace
}  // namespace pipeplan
