// Tests for plans/schedule.h: all ranks' action lists, played against each other, never
// deadlock; sends pair with receives; forwards precede backwards; in-flight peaks.
#include "plans/schedule.h"
#include "plans/stage_action_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>

#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

// What travels over one directed channel, in the order it was sent: of which kind and
// micro-batch, across which chunk boundary (c: from global chunk c to c + 1 or back).
struct Message {
  ActionKind kind;  // kSendActivation or kSendGradient
  int micro_batch;
  int boundary;
};

ActionKind send_kind_for(ActionKind recv_kind) {
  return recv_kind == ActionKind::kRecvActivation ? ActionKind::kSendActivation
                                                  : ActionKind::kSendGradient;
}

// Plays every rank's list with logical time only: a send is asynchronous (appends to the
// channel of its kind to its peer), a receive blocks until the channel from its peer is
// non-empty and then must find exactly the message it expects at the front (pairing in order:
// kind, micro-batch and chunk boundary), an all-reduce blocks until every replica of the stage
// has reached it. With `capacity`, a send also blocks while its channel holds that many
// messages not yet received: the executor's bound (kRecvLookahead receives posted ahead plus
// kMaxSendsInFlight sends in flight). Returns "" or what went wrong.
std::string play(const Plan& plan, const std::vector<std::vector<Action>>& actions,
                 size_t capacity = SIZE_MAX) {
  const size_t ranks = actions.size();
  std::vector<size_t> next(ranks, 0);
  // (from, to, kind) -> messages; one channel per direction, as the executor's edge groups.
  std::map<std::tuple<int, int, ActionKind>, std::deque<Message>> channels;
  std::vector<bool> released(plan.pp, false);                   // all-reduce of the stage may pass
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t rank = 0; rank < ranks; ++rank) {
      while (next[rank] < actions[rank].size()) {
        const Action& action = actions[rank][next[rank]];
        const int stage = plan.ranks[rank].stage;
        const int chunk = chunk_index(plan.pp, stage, action.chunk);
        if (action.kind == ActionKind::kSendActivation ||
            action.kind == ActionKind::kSendGradient) {
          const bool activation = action.kind == ActionKind::kSendActivation;
          std::deque<Message>& channel = channels[{static_cast<int>(rank), action.peer, action.kind}];
          if (channel.size() >= capacity) break;
          channel.push_back({action.kind, action.micro_batch, activation ? chunk : chunk - 1});
        } else if (action.kind == ActionKind::kRecvActivation ||
                   action.kind == ActionKind::kRecvGradient) {
          const ActionKind sent = send_kind_for(action.kind);
          std::deque<Message>& channel = channels[{action.peer, static_cast<int>(rank), sent}];
          if (channel.empty()) break;
          const Message front = channel.front();
          const int boundary = sent == ActionKind::kSendActivation ? chunk - 1 : chunk;
          if (front.micro_batch != action.micro_batch || front.boundary != boundary)
            return "rank " + std::to_string(rank) + " expected " + to_string(action) +
                   " but the next message is micro-batch " + std::to_string(front.micro_batch) +
                   " across chunk boundary " + std::to_string(front.boundary);
          channel.pop_front();
        } else if (action.kind == ActionKind::kAllReduce && !released[stage]) {
          break;
        }
        ++next[rank];
        progress = true;
      }
    }
    // Release all-reduces whose stage has every replica waiting at one.
    for (int stage = 0; stage < plan.pp; ++stage) {
      int waiting = 0;
      for (size_t rank = 0; rank < ranks; ++rank)
        if (plan.ranks[rank].stage == stage && next[rank] < actions[rank].size() &&
            actions[rank][next[rank]].kind == ActionKind::kAllReduce)
          ++waiting;
      if (waiting == plan.dp && !released[stage]) {
        released[stage] = true;
        progress = true;
      }
    }
  }
  for (size_t rank = 0; rank < ranks; ++rank)
    if (next[rank] < actions[rank].size())
      return "deadlock: rank " + std::to_string(rank) + " stuck at " +
             to_string(actions[rank][next[rank]]);
  for (const auto& [link, channel] : channels)
    if (!channel.empty())
      return "rank " + std::to_string(std::get<0>(link)) + " sent " +
             std::to_string(channel.size()) + " messages to rank " +
             std::to_string(std::get<1>(link)) + " that were never received";
  return "";
}

struct Shape {
  int dp, pp, m;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int dp : {1, 2, 3})
    for (int pp = 1; pp <= 7; ++pp)
      for (int m : {1, 2, 3, 4, 5, 8, 13}) out.push_back({dp, pp, m});
  return out;
}

// Messages a link of the executor holds that its receiver has not taken, at most.
constexpr size_t kBufferedMessages = kRecvLookahead + kMaxSendsInFlight;

constexpr Schedule kSchedules[] = {Schedule::kGpipe, Schedule::kOneFOneB,
                                   Schedule::kZeroBubbleH1};

bool is_backward(ActionKind kind) {
  return kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput;
}

TEST(ScheduleTest, PlayingAllRanksNeverDeadlocksAndPairsEverySend) {
  for (Schedule schedule : kSchedules)
    for (const Shape& s : shapes()) {
      const Plan plan = testing::make_test_plan(s.dp, s.pp, s.m, schedule);
      EXPECT_EQ(play(plan, expand_schedule(plan), kBufferedMessages), "")
          << to_string(schedule) << " dp=" << s.dp << " pp=" << s.pp << " m=" << s.m;
    }
}

TEST(ScheduleTest, PlayerDetectsABrokenSchedule) {
  // The player must be able to fail: swapping two receives on the last stage breaks pairing,
  // and dropping a send starves a receive.
  const Plan plan = testing::make_test_plan(1, 3, 4, Schedule::kGpipe);
  std::vector<std::vector<Action>> actions = expand_schedule(plan);
  std::vector<std::vector<Action>> swapped = actions;
  std::swap(swapped[2][0], swapped[2][2]);  // recv-act 0 <-> recv-act 1
  EXPECT_NE(play(plan, swapped), "");
  std::vector<std::vector<Action>> dropped = actions;
  ASSERT_EQ(to_string(dropped[0][7]), "send-act 3 -> r1");
  dropped[0].erase(dropped[0].begin() + 7);
  EXPECT_NE(play(plan, dropped).find("deadlock"), std::string::npos);
}

TEST(ScheduleTest, EveryMicroBatchForwardPrecedesItsBackwardOnEveryStage) {
  for (Schedule schedule : kSchedules)
    for (const Shape& s : shapes()) {
      for (int stage = 0; stage < s.pp; ++stage) {
        const std::vector<Action> actions = stage_actions(schedule, s.pp, stage, s.m, ReplicaActions{s.dp > 1});
        std::vector<int> forwards(s.m, 0), backwards(s.m, 0), weights(s.m, 0);
        for (const Action& action : actions) {
          if (action.kind == ActionKind::kForward) ++forwards[action.micro_batch];
          if (is_backward(action.kind)) {
            EXPECT_EQ(forwards[action.micro_batch], 1) << "B" << action.micro_batch;
            ++backwards[action.micro_batch];
          }
          if (action.kind == ActionKind::kBackwardWeight) {
            EXPECT_EQ(backwards[action.micro_batch], 1) << "W" << action.micro_batch;
            ++weights[action.micro_batch];
          }
          // Only zb-h1 splits backwards, and it splits every one.
          if (action.kind == ActionKind::kBackward) {
            EXPECT_NE(schedule, Schedule::kZeroBubbleH1);
          }
          if (action.kind == ActionKind::kBackwardInput ||
              action.kind == ActionKind::kBackwardWeight) {
            EXPECT_EQ(schedule, Schedule::kZeroBubbleH1);
          }
        }
        EXPECT_EQ(forwards, std::vector<int>(s.m, 1));
        EXPECT_EQ(backwards, std::vector<int>(s.m, 1));
        EXPECT_EQ(weights, std::vector<int>(s.m, schedule == Schedule::kZeroBubbleH1 ? 1 : 0));
        EXPECT_EQ(actions.back().kind, ActionKind::kOptimizerStep);
        EXPECT_EQ(actions.size() >= 2 && actions[actions.size() - 2].kind == ActionKind::kAllReduce,
                  s.dp > 1);
      }
    }
}

TEST(ScheduleTest, SendsAndReceivesNameTheSameMicroBatchKindAndPeer) {
  for (Schedule schedule : kSchedules) {
    const Plan plan = testing::make_test_plan(2, 4, 6, schedule);
    const auto actions = expand_schedule(plan);
    std::map<std::tuple<int, int, int, int>, int> sends, recvs;  // (from, to, kind, mb) -> count
    for (size_t rank = 0; rank < actions.size(); ++rank)
      for (const Action& action : actions[rank]) {
        const int r = static_cast<int>(rank);
        if (action.kind == ActionKind::kSendActivation || action.kind == ActionKind::kSendGradient)
          ++sends[{r, action.peer, static_cast<int>(action.kind), action.micro_batch}];
        if (action.kind == ActionKind::kRecvActivation || action.kind == ActionKind::kRecvGradient)
          ++recvs[{action.peer, r, static_cast<int>(send_kind_for(action.kind)),
                   action.micro_batch}];
      }
    EXPECT_EQ(sends, recvs);
    for (const auto& [key, count] : sends) EXPECT_EQ(count, 1);
    EXPECT_EQ(sends.size(), size_t{2 * 3 * 2 * 6});  // replicas × boundaries × directions × m
  }
}

// A micro-batch holds its activations from its forward until its backward (zb-h1: its W).
int peak_in_flight(const std::vector<Action>& actions) {
  int in_flight = 0, peak = 0;
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kForward) peak = std::max(peak, ++in_flight);
    if (action.kind == ActionKind::kBackward || action.kind == ActionKind::kBackwardWeight)
      --in_flight;
  }
  return peak;
}

// zb-h1: micro-batches past their B whose W has not run (each keeps its layers' output
// gradients), at the peak.
int peak_deferred(const std::vector<Action>& actions) {
  int deferred = 0, peak = 0;
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kBackwardInput) peak = std::max(peak, ++deferred);
    if (action.kind == ActionKind::kBackwardWeight) --deferred;
  }
  return peak;
}

TEST(ScheduleTest, PeakInFlightIsMForGpipeAndMinOfMAndRemainingStagesFor1f1b) {
  for (const Shape& s : shapes())
    for (int stage = 0; stage < s.pp; ++stage) {
      EXPECT_EQ(peak_in_flight(stage_actions(Schedule::kGpipe, s.pp, stage, s.m, {})), s.m);
      EXPECT_EQ(peak_in_flight(stage_actions(Schedule::kOneFOneB, s.pp, stage, s.m, {})),
                std::min(s.m, s.pp - stage))
          << "pp=" << s.pp << " m=" << s.m << " stage=" << stage;
    }
}

// Issue 21's invariants for zb-h1 over pp up to 8 and m up to 32: every list is the 1f1b list
// with B split (the same forwards and backwards in the same order), the peaks are those the
// memory model counts (planner/memory_model.h: in_flight, deferred_weight_passes), and the
// whole pipeline plays without deadlock.
TEST(ScheduleTest, ZeroBubbleH1IsOneFOneBWithDeferredWeightPasses) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 32; ++m) {
      for (int stage = 0; stage < pp; ++stage) {
        const std::vector<Action> zb = stage_actions(Schedule::kZeroBubbleH1, pp, stage, m, {});
        std::vector<Action> without_w;
        for (Action action : zb) {
          if (action.kind == ActionKind::kBackwardWeight) continue;
          if (action.kind == ActionKind::kBackwardInput) action.kind = ActionKind::kBackward;
          without_w.push_back(action);
        }
        EXPECT_EQ(without_w, stage_actions(Schedule::kOneFOneB, pp, stage, m, {}))
            << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(peak_in_flight(zb), std::min(m, pp)) << "pp=" << pp << " m=" << m;
        EXPECT_EQ(peak_deferred(zb), std::min(m, stage + 1)) << "pp=" << pp << " m=" << m;
        const StageActionList list(Schedule::kZeroBubbleH1, pp, stage, m);
        ASSERT_EQ(list.size(), zb.size());
        for (size_t idx = 0; idx < zb.size(); ++idx) EXPECT_EQ(list[idx], zb[idx]);
      }
      const Plan plan = testing::make_test_plan(1, pp, m, Schedule::kZeroBubbleH1);
      EXPECT_EQ(play(plan, expand_schedule(plan)), "") << "pp=" << pp << " m=" << m;
    }
}

// The lazy list agrees with itself: every block's first action is that block's compute (or the
// receive before it), for every schedule.
TEST(ScheduleTest, BlocksAndActionIndicesAgree) {
  for (Schedule schedule : kSchedules)
    for (int pp : {1, 2, 5})
      for (int m : {1, 3, 8})
        for (int stage = 0; stage < pp; ++stage) {
          const StageActionList list(schedule, pp, stage, m, ReplicaActions{true});
          for (int block_idx = 0; block_idx < list.num_blocks(); ++block_idx) {
            const ComputeBlock block = list.block(block_idx);
            const size_t first = list.first_action(block_idx);
            const int count = list.block_actions(block.kind);
            bool found = false;
            for (size_t idx = first; idx < first + count; ++idx) {
              const Action action = list[idx];
              EXPECT_EQ(action.micro_batch, block.micro_batch);
              found = found || action.kind == ActionKind::kForward ||
                      action.kind == ActionKind::kBackward ||
                      action.kind == ActionKind::kBackwardInput ||
                      action.kind == ActionKind::kBackwardWeight;
            }
            EXPECT_TRUE(found) << to_string(schedule) << " block " << block_idx;
          }
          EXPECT_EQ(list.first_action(list.num_blocks()), list.size() - 2);
        }
}

// A walk with BlockCursor meets every block as block() gives it: its kind, and its micro-batch
// (V = 1) or the rank's count of blocks of its kind (interleaved-1f1b), for every schedule,
// stage and forward-only list.
TEST(ScheduleTest, BlockCursorWalksTheBlocks) {
  auto walk = [](const StageActionList& list, int virtual_stages, int pp) {
    StageActionList::BlockCursor cursor = list.first_block();
    int counts[2] = {0, 0};  // forwards, backwards so far
    for (int block_idx = 0; block_idx < list.num_blocks(); ++block_idx) {
      ASSERT_EQ(cursor.block, block_idx);
      const ComputeBlock block = list.block(block_idx);
      ASSERT_EQ(cursor.kind, block.kind) << "block " << block_idx;
      const int count = counts[block.kind == BlockKind::kForward ? 0 : 1]++;
      if (virtual_stages == 1) {
        EXPECT_EQ(cursor.step, block.micro_batch) << "block " << block_idx;
      } else {
        EXPECT_EQ(cursor.step, count) << "block " << block_idx;
        EXPECT_EQ(block.micro_batch, (count / pp / virtual_stages) * pp + count % pp);
      }
      list.next_block(&cursor);
    }
    EXPECT_EQ(cursor.block, list.num_blocks());
  };
  for (Schedule schedule : kSchedules)
    for (int pp : {1, 2, 5})
      for (int m : {1, 3, 8})
        for (int stage = 0; stage < pp; ++stage) {
          walk(StageActionList(schedule, pp, stage, m, ReplicaActions{true}), 1, pp);
          walk(StageActionList::forward_only(pp, stage, m), 1, pp);
        }
  for (int pp : {2, 4})
    for (int v : {2, 3})
      for (int stage = 0; stage < pp; ++stage)
        walk(StageActionList(Schedule::kInterleaved1F1B, pp, stage, /*num_micro_batches=*/2 * pp,
                             ReplicaActions{true}, v),
             v, pp);
}

// Issue 21's invariants for interleaved-1f1b over pp up to 8, V up to 4 and m up to 32 (m a
// multiple of pp): each chunk runs every micro-batch's forward once, then its backward; the
// lazy list equals its blocks written out; every chunk's in-flight peak is the bound
// the memory model counts (interleaved_in_flight, exact for every case here), and so is the
// rank's whole peak (interleaved_rank_in_flight); the pipeline plays without deadlock, every
// receive meeting the send of its micro-batch across its chunk boundary (the last stage's
// chunk v feeding the first stage's chunk v + 1).
TEST(ScheduleTest, InterleavedOneFOneBInvariants) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int v = 2; v <= 4; ++v)
      for (int m = pp; m <= 32; m += pp) {
        for (int stage = 0; stage < pp; ++stage) {
          const StageActionList list(Schedule::kInterleaved1F1B, pp, stage, m, ReplicaActions{true}, v);
          const std::vector<Action> actions =
              stage_actions(Schedule::kInterleaved1F1B, pp, stage, m, ReplicaActions{true}, v);
          ASSERT_EQ(list.num_blocks(), 2 * m * v);
          ASSERT_EQ(list.size(), actions.size());
          std::vector<std::vector<int>> forwards(v, std::vector<int>(m, 0));
          std::vector<std::vector<int>> backwards = forwards;
          std::vector<int> held(v, 0), peak(v, 0);
          int held_total = 0, peak_total = 0;
          int block_idx = 0;
          for (size_t idx = 0; idx < actions.size(); ++idx) {
            const Action& action = actions[idx];
            if (action.kind == ActionKind::kForward || action.kind == ActionKind::kBackward) {
              const ComputeBlock block = list.block(block_idx);
              EXPECT_EQ(block.micro_batch, action.micro_batch);
              EXPECT_EQ(block.chunk, action.chunk);
              EXPECT_LE(list.first_action(block_idx), idx);
              ++block_idx;
            }
            if (action.kind == ActionKind::kForward) {
              ++forwards[action.chunk][action.micro_batch];
              peak[action.chunk] = std::max(peak[action.chunk], ++held[action.chunk]);
              peak_total = std::max(peak_total, ++held_total);
            }
            if (action.kind == ActionKind::kBackward) {
              EXPECT_EQ(forwards[action.chunk][action.micro_batch], 1);
              ++backwards[action.chunk][action.micro_batch];
              --held[action.chunk];
              --held_total;
            }
          }
          EXPECT_EQ(block_idx, list.num_blocks());
          EXPECT_EQ(peak_total, interleaved_rank_in_flight(pp, v, stage, m));
          EXPECT_EQ(list.first_action(list.num_blocks()), list.size() - 2);
          for (int chunk = 0; chunk < v; ++chunk) {
            EXPECT_EQ(forwards[chunk], std::vector<int>(m, 1));
            EXPECT_EQ(backwards[chunk], std::vector<int>(m, 1));
            EXPECT_EQ(peak[chunk], interleaved_in_flight(pp, v, stage, chunk, m))
                << "pp=" << pp << " V=" << v << " m=" << m << " stage " << stage << " chunk "
                << chunk;
          }
        }
        for (int dp : {1, 2}) {
          Plan plan = testing::make_test_plan(dp, pp, m, Schedule::kInterleaved1F1B,
                                              /*devices_per_node=*/1 << 20,
                                              /*extra_layers=*/pp * (v - 1));
          testing::make_interleaved(&plan, v);
          EXPECT_EQ(play(plan, expand_schedule(plan), kBufferedMessages), "")
              << "dp=" << dp << " pp=" << pp << " V=" << v << " m=" << m;
        }
      }
}

// The simulator's forward-only list is the executor's forward-only pass (one chunk per stage):
// the same actions in the same order, peers as stages, no tail, one block per micro-batch whose
// first action is its receive (or its forward on stage 0).
TEST(ScheduleTest, ForwardOnlyListEqualsTheForwardOnlyPass) {
  for (int pp : {1, 2, 4})
    for (int m : {1, 3, 8}) {
      const Plan plan = testing::make_test_plan(1, pp, pp, Schedule::kGpipe, 1 << 20, 0);
      const std::vector<std::vector<Action>> pass = expand_forward_only(plan, m);
      for (int stage = 0; stage < pp; ++stage) {
        const StageActionList list = StageActionList::forward_only(pp, stage, m);
        EXPECT_TRUE(list.is_forward_only());
        EXPECT_EQ(list.tail_size(), 0u);
        EXPECT_EQ(list.num_blocks(), m);
        const std::vector<Action>& expected = pass[rank_of(plan, stage, 0)];
        ASSERT_EQ(list.size(), expected.size()) << "pp=" << pp << " m=" << m;
        for (size_t idx = 0; idx < list.size(); ++idx) {
          Action action = list[idx];
          if (action.peer >= 0) action.peer = rank_of(plan, action.peer, 0);
          EXPECT_EQ(action, expected[idx]) << to_string(action) << " at " << idx;
        }
        for (int block_idx = 0; block_idx < m; ++block_idx)
          EXPECT_EQ(list[list.first_action(block_idx)].kind,
                    stage > 0 ? ActionKind::kRecvActivation : ActionKind::kForward);
        EXPECT_EQ(list.first_action(m), list.size());
      }
    }
}

// Forward-only passes of any length never deadlock, even when a link buffers only what the
// executor allows: chunk by chunk over the whole pass (all of chunk 0 first) would, once a pass
// has more micro-batches than that (the player catches it).
TEST(ScheduleTest, ForwardOnlyPassesRunInRoundsWithoutDeadlock) {
  for (int pp : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int n : {1, 4, 7, 64}) {
        Plan plan = testing::make_test_plan(2, pp, pp, Schedule::kOneFOneB, 1 << 20,
                                            pp * (v - 1));
        if (v > 1) testing::make_interleaved(&plan, v);
        std::vector<std::vector<Action>> actions = expand_forward_only(plan, n);
        for (std::vector<Action>& list : actions) list.push_back({ActionKind::kOptimizerStep});
        EXPECT_EQ(play(plan, actions, kBufferedMessages), "")
            << "pp=" << pp << " V=" << v << " n=" << n;
        EXPECT_EQ(actions[0].size(), static_cast<size_t>(n * (3 * v - 1) + 1));
        if (v == 1 || n < 8) continue;
        std::vector<std::vector<Action>> chunk_major(actions.size());
        for (size_t rank = 0; rank < actions.size(); ++rank) {
          for (int chunk = 0; chunk < v; ++chunk)
            for (const Action& action : actions[rank])
              if (action.chunk == chunk && action.kind != ActionKind::kOptimizerStep)
                chunk_major[rank].push_back(action);
          chunk_major[rank].push_back({ActionKind::kOptimizerStep});
        }
        EXPECT_NE(play(plan, chunk_major, kBufferedMessages).find("deadlock"), std::string::npos);
      }
}

// Issue 22's overlap in the expansion: each chunk's kAllReduceStart comes right after the compute
// of its last weight-gradient action (the backward, or W, of micro-batch m − 1), before that
// block's gradient send, once per chunk, and no weight gradient of the chunk follows it; taking
// the starts out leaves the list without overlap (whose indices map past no start); every
// block's first_action is that block's, for every schedule, pp up to 5, V up to 4; a dp=2
// pipeline plays through.
TEST(ScheduleTest, EachChunksReduceStartFollowsItsLastWeightGradientCompute) {
  const ReplicaActions overlap{true, true, false};
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kZeroBubbleH1,
                            Schedule::kInterleaved1F1B})
    for (int pp = 1; pp <= 5; ++pp)
      for (int v : {1, 2, 4})
        for (int m : {1, 2, 3, 4, 8, 12}) {
          const bool interleaved = schedule == Schedule::kInterleaved1F1B;
          if (interleaved != (v > 1) || (interleaved && (pp < 2 || m % pp != 0))) continue;
          const std::string where = to_string(schedule) + " pp=" + std::to_string(pp) +
                                    " V=" + std::to_string(v) + " m=" + std::to_string(m);
          for (int stage = 0; stage < pp; ++stage) {
            const std::vector<Action> actions = stage_actions(schedule, pp, stage, m, overlap, v);
            const StageActionList list(schedule, pp, stage, m, overlap, v);
            ASSERT_EQ(list.size(), actions.size()) << where;
            std::vector<int> starts(v, 0);
            std::vector<Action> without;
            for (size_t idx = 0; idx < actions.size(); ++idx) {
              const Action& action = actions[idx];
              const bool weights = action.kind == ActionKind::kBackward ||
                                   action.kind == ActionKind::kBackwardWeight;
              if (weights) {
                EXPECT_EQ(starts[action.chunk], 0) << where << " " << to_string(action);
              }
              if (action.kind != ActionKind::kAllReduceStart) {
                without.push_back(action);
                continue;
              }
              ++starts[action.chunk];
              ASSERT_GT(idx, 0u);
              const Action& before = actions[idx - 1];
              EXPECT_TRUE(before.kind == (schedule == Schedule::kZeroBubbleH1
                                              ? ActionKind::kBackwardWeight
                                              : ActionKind::kBackward))
                  << where << ": " << to_string(before) << " before " << to_string(action);
              EXPECT_EQ(before.micro_batch, m - 1);
              EXPECT_EQ(before.chunk, action.chunk);
            }
            EXPECT_EQ(starts, std::vector<int>(v, 1)) << where << " stage " << stage;
            EXPECT_EQ(without, stage_actions(schedule, pp, stage, m, ReplicaActions{true}, v));
            for (int block_idx = 0; block_idx < list.num_blocks(); ++block_idx) {
              const ComputeBlock block = list.block(block_idx);
              const Action first = list[list.first_action(block_idx)];
              EXPECT_EQ(first.micro_batch, block.micro_batch) << where << " block " << block_idx;
              EXPECT_EQ(first.chunk, block.chunk);
            }
            EXPECT_EQ(list.first_action(list.num_blocks()), list.size() - 2);
          }
          Plan plan = testing::make_test_plan(2, pp, m, schedule, 1 << 20, pp * (v - 1));
          if (interleaved) testing::make_interleaved(&plan, v);
          plan.data_parallel.overlap = true;
          const std::vector<std::vector<Action>> expanded = expand_schedule(plan);
          EXPECT_EQ(expanded[0], stage_actions(schedule, pp, plan.ranks[0].stage, m, overlap, v));
          EXPECT_EQ(play(plan, expanded, kBufferedMessages), "") << where;
        }
}

// The order of two small schedules, written out: the invariant tests above hold for many
// orders, this pins the one the executor and the simulator play.
TEST(ScheduleTest, SmallSchedulesInTheirExactOrder) {
  using K = ActionKind;
  const std::vector<Action> one_f_one_b = {
      {K::kForward, 0, -1},      {K::kSendActivation, 0, 1}, {K::kForward, 1, -1},
      {K::kSendActivation, 1, 1}, {K::kRecvGradient, 0, 1},  {K::kBackward, 0, -1},
      {K::kForward, 2, -1},      {K::kSendActivation, 2, 1}, {K::kRecvGradient, 1, 1},
      {K::kBackward, 1, -1},     {K::kRecvGradient, 2, 1},   {K::kBackward, 2, -1},
      {K::kAllReduce, -1, -1},   {K::kOptimizerStep, -1, -1}};
  EXPECT_EQ(stage_actions(Schedule::kOneFOneB, 2, 0, 3, ReplicaActions{true}), one_f_one_b);
  const std::vector<Action> gpipe = {
      {K::kRecvActivation, 0, 0}, {K::kForward, 0, -1},       {K::kRecvActivation, 1, 0},
      {K::kForward, 1, -1},       {K::kBackward, 0, -1},      {K::kSendGradient, 0, 0},
      {K::kBackward, 1, -1},      {K::kSendGradient, 1, 0},   {K::kOptimizerStep, -1, -1}};
  EXPECT_EQ(stage_actions(Schedule::kGpipe, 2, 1, 2, {}), gpipe);
  // zb-h1, pp=3, m=4, the middle stage: W lags its B by one micro-batch (the stage index).
  std::string middle;
  for (const Action& action : stage_actions(Schedule::kZeroBubbleH1, 3, 1, 4, {}))
    if (action.micro_batch >= 0 && action.peer < 0) middle += to_string(action) + " ";
  EXPECT_EQ(middle, "F0 F1 Bi0 F2 Bi1 W0 F3 Bi2 W1 Bi3 W2 W3 ");
  // interleaved-1f1b, pp=2, V=2, m=4: Megatron-LM's order (plans/schedule.h's example).
  std::string first, second;
  for (const Action& action : stage_actions(Schedule::kInterleaved1F1B, 2, 0, 4, {}, 2))
    if (action.peer < 0 && action.micro_batch >= 0) first += to_string(action) + " ";
  for (const Action& action : stage_actions(Schedule::kInterleaved1F1B, 2, 1, 4, {}, 2))
    if (action.peer < 0 && action.micro_batch >= 0) second += to_string(action) + " ";
  EXPECT_EQ(first, "F0 F1 F0v1 F1v1 F2 B0v1 F3 B1v1 F2v1 B0 F3v1 B1 B2v1 B3v1 B2 B3 ");
  EXPECT_EQ(second, "F0 F1 F0v1 B0v1 F1v1 B1v1 F2 B0 F3 B1 F2v1 B2v1 F3v1 B3v1 B2 B3 ");
  // The wrap-around: stage 1's chunk 0 feeds stage 0's chunk 1, whose gradient goes back.
  const std::vector<Action> last = stage_actions(Schedule::kInterleaved1F1B, 2, 1, 2, {}, 2);
  EXPECT_EQ(to_string(last[0]), "recv-act 0 <- r0");
  EXPECT_EQ(to_string(last[2]), "send-act 0 -> r0");
  const std::vector<Action> head = stage_actions(Schedule::kInterleaved1F1B, 2, 0, 2, {}, 2);
  EXPECT_EQ(to_string(head[4]), "recv-act 0v1 <- r1");
  // With overlap (plans/schedule.h's example): chunk 1's buckets start in the cool-down, while
  // chunk 0's backwards still run.
  std::string overlapped;
  const ReplicaActions overlap{true, true, false};
  for (const Action& action : stage_actions(Schedule::kInterleaved1F1B, 2, 1, 2, overlap, 2))
    if (action.kind != ActionKind::kRecvActivation && action.kind != ActionKind::kSendActivation)
      overlapped += to_string(action) + " ";
  EXPECT_EQ(overlapped,
            "F0 F1 F0v1 B0v1 send-grad 0v1 -> r0 F1v1 B1v1 ar-start v1 send-grad 1v1 -> r0 "
            "recv-grad 0 <- r0 B0 send-grad 0 -> r0 recv-grad 1 <- r0 B1 ar-start "
            "send-grad 1 -> r0 all-reduce step ");
}

}  // namespace
}  // namespace pipeplan
