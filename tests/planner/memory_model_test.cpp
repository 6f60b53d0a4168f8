// Tests for planner/memory_model.h and planner/layer_table.h: every term worked out by hand
// for the 3-layer profile of test_profiles.cpp (per sample: retained 100/200/80 bytes, saved
// output of layer 0 = saved input of layer 1 = 40, saved output of layer 1 = saved input of
// layer 2 = 24, transients max 50/70/90, outputs 10/6/2 floats, input 5 floats, parameters
// 1000/2000/500, buffers 16/0/4, runtime overhead 1000 bytes).
#include "planner/memory_model.h"

#include <gtest/gtest.h>

#include <random>

#include "planner/stage_cost.h"
#include "planner/time_model.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

MemorySettings settings(Schedule schedule, int pp, int m, int dp = 1,
                        OptimizerKind optimizer = OptimizerKind::kSgd,
                        Precision precision = Precision::kFp32) {
  MemorySettings s;
  s.schedule = schedule;
  s.pp = pp;
  s.dp = dp;
  s.num_micro_batches = m;
  s.optimizer = optimizer;
  s.precision = precision;
  s.runtime_overhead_bytes = 1000;
  return s;
}

TEST(MemoryModelTest, EveryTermByHandGpipe) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  const MemorySettings gpipe = settings(Schedule::kGpipe, /*pp=*/2, /*m=*/4);
  // Stage 0 = layers 0 and 1 at b = 2.
  const MemoryTerms s0 = stage_memory(table, gpipe, 0, 0, 2, /*checkpoint=*/false);
  EXPECT_EQ(s0.parameters_bytes, 3000 * 4);
  EXPECT_EQ(s0.gradients_bytes, 3000 * 4);
  EXPECT_EQ(s0.optimizer_state_bytes, 3000 * 4);  // SGD momentum
  EXPECT_EQ(s0.master_copy_bytes, 0);
  EXPECT_EQ(s0.buffers_bytes, 16);
  EXPECT_EQ(s0.activation_bytes_per_micro_batch, (100 + 200) * 2 - 40 * 2);  // 520
  EXPECT_EQ(s0.in_flight, 4);
  EXPECT_EQ(s0.activations_bytes, 4 * 520);
  EXPECT_EQ(s0.recompute_bytes, 0);
  EXPECT_EQ(s0.transient_bytes, 70 * 2);
  // Boundary 2 is 6 floats per sample: 48 bytes at b = 2. Stage 0 receives gradients: two
  // posted ahead and the one its backward consumes; up to two outstanding activation sends.
  EXPECT_EQ(s0.comm_buffers_bytes, (2 + 1) * 48 + 2 * 48);  // 240
  EXPECT_EQ(s0.runtime_overhead_bytes, 1000);
  EXPECT_EQ(s0.total_bytes, 36000 + 16 + 2080 + 140 + 240 + 1000);
  // Stage 1 = layer 2.
  const MemoryTerms s1 = stage_memory(table, gpipe, 1, 2, 3, /*checkpoint=*/false);
  EXPECT_EQ(s1.parameters_bytes + s1.gradients_bytes + s1.optimizer_state_bytes, 500 * 12);
  EXPECT_EQ(s1.buffers_bytes, 4);
  EXPECT_EQ(s1.activation_bytes_per_micro_batch, 160);
  EXPECT_EQ(s1.activations_bytes, 640);
  EXPECT_EQ(s1.transient_bytes, 180);
  // At GPipe's peak, the first backward, every activation has been received and no gradient
  // sent: the last stage holds no communication buffer.
  EXPECT_EQ(s1.comm_buffers_bytes, 0);
  EXPECT_EQ(s1.total_bytes, 6000 + 4 + 640 + 180 + 1000);
}

TEST(MemoryModelTest, OneFOneBCountsReceivesAheadAndSendsInFlightOnBothBoundaries) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  const MemorySettings one_f_one_b = settings(Schedule::kOneFOneB, /*pp=*/2, /*m=*/4);
  // Stage 0 as under GPipe: gradient receives (two ahead, one consumed), two outstanding sends.
  EXPECT_EQ(stage_memory(table, one_f_one_b, 0, 0, 2, false).comm_buffers_bytes,
            (2 + 1) * 48 + 2 * 48);
  // Stage 1: two activation receives posted ahead, up to two outstanding gradient sends.
  EXPECT_EQ(stage_memory(table, one_f_one_b, 1, 2, 3, false).comm_buffers_bytes, 2 * 48 + 2 * 48);
}

TEST(MemoryModelTest, OneFOneBHoldsMinOfMAndRemainingStages) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  const MemorySettings one_f_one_b = settings(Schedule::kOneFOneB, 2, 4);
  const MemoryTerms s0 = stage_memory(table, one_f_one_b, 0, 0, 2, /*checkpoint=*/false);
  const MemoryTerms s1 = stage_memory(table, one_f_one_b, 1, 2, 3, /*checkpoint=*/false);
  EXPECT_EQ(s0.in_flight, 2);
  EXPECT_EQ(s0.activations_bytes, 1040);
  EXPECT_EQ(s0.total_bytes, 38436);
  EXPECT_EQ(s1.in_flight, 1);
  EXPECT_EQ(s1.total_bytes, 7536);
  EXPECT_EQ(in_flight(Schedule::kOneFOneB, 8, 3, 2), 2);
  EXPECT_EQ(in_flight(Schedule::kOneFOneB, 8, 3, 9), 5);
  EXPECT_EQ(in_flight(Schedule::kGpipe, 8, 3, 9), 9);
}

// zb-h1 at b = 2, pp = 2, m = 4 (as OneFOneBHoldsMinOfMAndRemainingStages): every stage holds
// min(m, pp) = 2 micro-batches' activations, and min(m, s + 1) past their B keep the output
// gradients of the stage's layers for W (stage 0: boundaries 1 and 2, 80 + 48 bytes; the last
// stage keeps none, its last layer's output being the loss's input).
TEST(MemoryModelTest, ZeroBubbleH1HoldsPpMicroBatchesAndTheGradientsKeptForW) {
  const Profile profile = testing::with_backward_split(testing::three_layer_profile(), 0.5, 0.5);
  const LayerTable table(profile, 2, OptimizerKind::kSgd, /*split_backward=*/true);
  const MemorySettings zb = settings(Schedule::kZeroBubbleH1, 2, 4);
  const MemoryTerms s0 = stage_memory(table, zb, 0, 0, 2, /*checkpoint=*/false);
  EXPECT_EQ(s0.in_flight, 2);
  EXPECT_EQ(s0.activations_bytes, 1040);
  EXPECT_EQ(s0.deferred_gradients_bytes, 1 * (80 + 48));
  EXPECT_EQ(s0.total_bytes, 38436 + 128);
  const MemoryTerms s1 = stage_memory(table, zb, 1, 2, 3, /*checkpoint=*/false);
  EXPECT_EQ(s1.in_flight, 2);
  EXPECT_EQ(s1.deferred_gradients_bytes, 0);
  EXPECT_EQ(s1.total_bytes, 7536 + 160);
  // A middle stage of three keeps its own layers' output gradients, ω = 2 of them.
  const MemorySettings zb3 = settings(Schedule::kZeroBubbleH1, 3, 4);
  EXPECT_EQ(stage_memory(table, zb3, 1, 1, 2, false).deferred_gradients_bytes, 2 * 48);
  // Checkpointed: the inputs of the two in flight, and the recomputed graphs of ω = 2.
  const MemoryTerms c1 = stage_memory(table, zb, 1, 2, 3, /*checkpoint=*/true);
  EXPECT_EQ(c1.activations_bytes, 2 * 48);
  EXPECT_EQ(c1.recompute_bytes, 2 * 160);
  EXPECT_EQ(c1.total_bytes, 6000 + 4 + 96 + 320 + 180 + 192 + 1000);
  EXPECT_EQ(in_flight(Schedule::kZeroBubbleH1, 8, 3, 9), 8);
  EXPECT_EQ(deferred_weight_passes(Schedule::kZeroBubbleH1, 3, 9), 4);
  EXPECT_EQ(deferred_weight_passes(Schedule::kOneFOneB, 3, 9), 0);
  // The split table's backward is B + W; the B part is what travels upstream.
  EXPECT_EQ(table.bwd_ns(1, 3), to_ns(2 * (3.0 + 1.0)));
  EXPECT_EQ(table.bwd_input_ns(1, 3), to_ns(3.0 + 1.0));
  EXPECT_EQ(table.bwd_input_ns(0, 1), 0);
  EXPECT_EQ(table.path_compute_ns(0, 3), table.fwd_ns(0, 3) + table.bwd_input_ns(0, 3));
}

// interleaved-1f1b, pp = 2, V = 2, m = 4, b = 1, one layer per chunk (no saved tensors shared
// between layers, so a chunk's activations are its layer's retained bytes). Stage 0 holds
// chunks 0 and 2 (layers 0 and 2), stage 1 chunks 1 and 3 (layers 1 and 3). The counts read off
// the orders plans/schedule.h draws for this pipeline (ℓ_v each chunk's most, W the rank's):
//   stage 0: F0 F1 F0v1 F1v1 F2 B0v1 F3 B1v1 F2v1 B0 ...  ℓ = 4, 2; W = 5 (after F3: 4 + 1)
//   stage 1: F0 F1 F0v1 B0v1 F1v1 B1v1 F2 B0 ...           ℓ = 3, 1; W = 3 (after F0v1: 2 + 1)
// The model gives W out largest chunk first: stage 0 4 × 40 + 1 × 20 = 180 bytes (the peak,
// after F3; Σ ℓ_v · A_v would say 200), stage 1 1 × 80 + 2 × 60 = 200 (after F0v1; not 260).
TEST(MemoryModelTest, InterleavedStageSumsItsChunksByHand) {
  std::vector<testing::LayerSpec> layers(4);
  const int64_t params[] = {100, 200, 300, 400};
  const int64_t buffers[] = {8, 0, 0, 4};
  const int64_t outputs[] = {4, 2, 3, 1};  // floats: boundaries 1..4 are 16, 8, 12, 4 bytes
  const int64_t retained[] = {40, 60, 20, 80};
  const int64_t transients[] = {30, 50, 20, 70};
  for (int layer_idx = 0; layer_idx < 4; ++layer_idx) {
    layers[layer_idx].param_count = params[layer_idx];
    layers[layer_idx].buffer_bytes = buffers[layer_idx];
    layers[layer_idx].output_floats = outputs[layer_idx];
    layers[layer_idx].retained_bytes = retained[layer_idx];
    layers[layer_idx].fwd_transient_bytes = transients[layer_idx];
  }
  // Model input 5 floats: 20 bytes per sample.
  const Profile profile = testing::make_profile(layers, {1, 2, 4}, 5, 1000);
  const LayerTable table(profile, /*micro_batch_size=*/1, OptimizerKind::kSgd);
  MemorySettings interleaved = settings(Schedule::kInterleaved1F1B, /*pp=*/2, /*m=*/4);
  interleaved.virtual_stages = 2;
  EXPECT_EQ(in_flight(Schedule::kInterleaved1F1B, 2, 0, 4, 2), 5);
  EXPECT_EQ(in_flight(Schedule::kInterleaved1F1B, 2, 1, 4, 2), 3);

  const MemoryTerms s0 = interleaved_stage_memory(table, interleaved, 0, {{0, 1}, {2, 3}});
  EXPECT_EQ(s0.parameters_bytes + s0.gradients_bytes + s0.optimizer_state_bytes, 400 * 12);
  EXPECT_EQ(s0.buffers_bytes, 8);
  EXPECT_EQ(s0.in_flight, 5);
  EXPECT_EQ(s0.activation_bytes_per_micro_batch, 40 + 20);
  EXPECT_EQ(s0.activations_bytes, 4 * 40 + 1 * 20);
  EXPECT_EQ(s0.recompute_bytes, 0);
  EXPECT_EQ(s0.transient_bytes, 30);
  // Both neighbours on every rank: 2 receives ahead of each kind, the consumed gradient and 2
  // sends, each of the largest boundary its chunks cross: chunk 0's output (16 bytes; the
  // model input is no boundary), chunk 2's input (8) and output (12).
  EXPECT_EQ(s0.comm_buffers_bytes, (2 + 2 + 1 + 2) * 16);
  EXPECT_EQ(s0.total_bytes, 4800 + 8 + 180 + 30 + 112 + 1000);

  const MemoryTerms s1 = interleaved_stage_memory(table, interleaved, 1, {{1, 2}, {3, 4}});
  EXPECT_EQ(s1.parameters_bytes + s1.gradients_bytes + s1.optimizer_state_bytes, 600 * 12);
  EXPECT_EQ(s1.in_flight, 3);
  EXPECT_EQ(s1.activation_bytes_per_micro_batch, 60 + 80);
  EXPECT_EQ(s1.activations_bytes, 1 * 80 + 2 * 60);
  EXPECT_EQ(s1.transient_bytes, 70);
  // Chunk 1's input (16) and output (8), chunk 3's input (12; the model's output is no boundary).
  EXPECT_EQ(s1.comm_buffers_bytes, 7 * 16);
  EXPECT_EQ(s1.total_bytes, 7200 + 4 + 200 + 70 + 112 + 1000);

  // Checkpointed chunks keep their inputs (stage 0's chunk 0: the model input, 20 bytes) and
  // recompute one chunk at a time: the largest.
  const MemoryTerms c0 =
      interleaved_stage_memory(table, interleaved, 0, {{0, 1, true}, {2, 3, true}});
  EXPECT_EQ(c0.activation_bytes_per_micro_batch, 20 + 8);
  EXPECT_EQ(c0.activations_bytes, 4 * 20 + 1 * 8);
  EXPECT_EQ(c0.recompute_bytes, 40);
  EXPECT_EQ(c0.total_bytes, 4800 + 8 + 88 + 40 + 30 + 112 + 1000);
  // Stage 1 with chunk 3 checkpointed (a 12-byte input): chunk 1 now takes all W = 3, the
  // peak after F2 (chunk 1 has freed its one micro-batch).
  const MemoryTerms c1 = interleaved_stage_memory(table, interleaved, 1, {{1, 2}, {3, 4, true}});
  EXPECT_EQ(c1.activations_bytes, 3 * 60);
  EXPECT_EQ(c1.recompute_bytes, 80);

  // Data parallel: the gradient bucket of the stage's parameters (under 25 MiB).
  interleaved.dp = 2;
  EXPECT_EQ(interleaved_stage_memory(table, interleaved, 0, {{0, 1}, {2, 3}}).comm_buffers_bytes,
            112 + 400 * 4);
}

TEST(MemoryModelTest, CheckpointingKeepsOnlyTheStageInputPlusOneRecompute) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  // Stage 1 under 1f1b: one micro-batch in flight keeps its 48-byte input; recompute 160.
  const MemoryTerms s1 =
      stage_memory(table, settings(Schedule::kOneFOneB, 2, 4), 1, 2, 3, /*checkpoint=*/true);
  EXPECT_EQ(s1.activation_bytes_per_micro_batch, 48);
  EXPECT_EQ(s1.activations_bytes, 48);
  EXPECT_EQ(s1.recompute_bytes, 160);
  EXPECT_EQ(s1.total_bytes, 6000 + 4 + 48 + 160 + 180 + 192 + 1000);
  // Stage 0 keeps the model input: 5 floats × 2 samples = 40 bytes per micro-batch.
  const MemoryTerms s0 =
      stage_memory(table, settings(Schedule::kGpipe, 2, 4), 0, 0, 2, /*checkpoint=*/true);
  EXPECT_EQ(s0.activation_bytes_per_micro_batch, 40);
  EXPECT_EQ(s0.activations_bytes, 160);
  EXPECT_EQ(s0.recompute_bytes, 520);
  EXPECT_EQ(s0.total_bytes, 36000 + 16 + 160 + 520 + 140 + 240 + 1000);
}

TEST(MemoryModelTest, BytesPerParameterFollowOptimizerAndPrecision) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kAdamw);
  const MemoryTerms adamw_amp = stage_memory(
      table, settings(Schedule::kGpipe, 1, 1, 1, OptimizerKind::kAdamw, Precision::kAmpBf16), 0, 0,
      2, /*checkpoint=*/false);
  EXPECT_EQ(adamw_amp.parameters_bytes, 12000);
  EXPECT_EQ(adamw_amp.gradients_bytes, 12000);
  EXPECT_EQ(adamw_amp.optimizer_state_bytes, 24000);  // two moments
  EXPECT_EQ(adamw_amp.master_copy_bytes, 6000);       // bf16 copies under autocast
  EXPECT_EQ(optimizer_state_bytes_per_parameter(OptimizerKind::kSgd) + 8, 12);
  EXPECT_EQ(optimizer_state_bytes_per_parameter(OptimizerKind::kAdamw) + 8, 16);
}

// A parameter tied between layers 0 and 2 (counted in both layers' param_count) is held once by
// a stage with both layers, and once by each stage when they are apart.
TEST(MemoryModelTest, ATiedParameterIsCountedOncePerStageThatHoldsIt) {
  Profile profile = testing::three_layer_profile();
  profile.ties.push_back(TiedProfile{{0, 2}, 400});
  profile.interconnect = InterconnectProfile{"gloo", 2, CommProfile{0.1, 1e9, 0, {}},
                                             CommProfile{0.25, 1e8, 0, {}}};
  profile.validate("tied");
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  EXPECT_EQ(table.param_count(0, 3), 3500 - 400);
  EXPECT_EQ(table.param_count(0, 2), 3000);
  EXPECT_EQ(table.param_count(2, 3), 500);
  EXPECT_EQ(table.param_count(1, 3), 2500);
  const MemoryTerms whole =
      stage_memory(table, settings(Schedule::kGpipe, 1, 4), 0, 0, 3, /*checkpoint=*/false);
  EXPECT_EQ(whole.parameters_bytes + whole.gradients_bytes + whole.optimizer_state_bytes,
            3100 * 12);
  // Stages apart sum its gradient: one all-reduce of 1600 bytes each (0.25 ms latency + 1600 B
  // at 1e8 B/s), none for the whole model or a stage without a user.
  EXPECT_EQ(table.tie_sum_ns(0, 3), 0);
  EXPECT_EQ(table.tie_sum_ns(1, 2), 0);
  const int64_t sum_ns = 250000 + 16000;
  EXPECT_EQ(table.tie_sum_ns(0, 2), sum_ns);
  EXPECT_EQ(table.tie_sum_ns(2, 3), sum_ns);
  EXPECT_EQ(stage_times(table, 2, 3, false).optimizer_ns, table.optimizer_ns(2, 3) + sum_ns);
}

TEST(MemoryModelTest, DataParallelAddsOnlyTheGradientBucket) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  const MemoryTerms one =
      stage_memory(table, settings(Schedule::kGpipe, 2, 4, 1), 1, 2, 3, /*checkpoint=*/false);
  const MemoryTerms four =
      stage_memory(table, settings(Schedule::kGpipe, 2, 4, 4), 1, 2, 3, /*checkpoint=*/false);
  EXPECT_EQ(four.comm_buffers_bytes - one.comm_buffers_bytes, 500 * 4);
  EXPECT_EQ(four.total_bytes - one.total_bytes, 500 * 4);
  // The bucket is capped at 25 MiB.
  testing::LayerSpec big;
  big.param_count = 100 * kMiB;
  const Profile large = testing::make_profile({big, big});
  const LayerTable large_table(large, 1, OptimizerKind::kSgd);
  EXPECT_EQ(comm_buffer_bytes(large_table, settings(Schedule::kGpipe, 1, 1, 2), 0, 0, 2),
            kGradientBucketBytes);
}

TEST(MemoryModelTest, InterpolatesBetweenProfiledSizesAndExtrapolatesWithANote) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable at3(profile, 3, OptimizerKind::kSgd);  // between 2 and 4
  EXPECT_EQ(at3.retained_bytes(2, 3), 240);
  EXPECT_EQ(at3.note(), "");
  const LayerTable at8(profile, 8, OptimizerKind::kSgd);  // beyond 1..4: the fits
  EXPECT_EQ(at8.retained_bytes(0, 3), (100 + 200 + 80 - 40 - 24) * 8);
  EXPECT_EQ(at8.note(), "micro-batch 8 is beyond the profiled 1..4: extrapolated");
  EXPECT_EQ(extrapolation_note({2, 4}, 1),
            "micro-batch 1 is below the profiled 2..4: extrapolated");
  // A layer that is not linear in b: piecewise between the points, the fit outside.
  Profile bent = testing::three_layer_profile();
  LayerProfile& layer = bent.layers[0];
  layer.points[0].fwd_ms = 1;  // b = 1
  layer.points[1].fwd_ms = 4;  // b = 2
  layer.points[2].fwd_ms = 6;  // b = 4
  layer.fits.fwd_ms = fit_linear({1, 2, 4}, {1, 4, 6});
  EXPECT_DOUBLE_EQ(layer_at(layer, 3).fwd_ms, 5.0);
  EXPECT_DOUBLE_EQ(layer_at(layer, 2).fwd_ms, 4.0);
  EXPECT_DOUBLE_EQ(layer_at(layer, 8).fwd_ms, layer.fits.fwd_ms.at(8));
  EXPECT_NE(layer_at(layer, 8).fwd_ms, 12.0);
}

TEST(MemoryModelTest, AStageFitsExactlyUpToTheDeviceMemory) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  PartitionProblem problem;
  problem.pp = 2;
  problem.memory = settings(Schedule::kGpipe, 2, 4);
  problem.inter_node_boundaries = {false};
  problem.device_memory_bytes = 39476;
  const StageEvaluator fits(table, problem);
  EXPECT_TRUE(fits.evaluate(0, 0, 2).fits);
  problem.device_memory_bytes = 39475;
  const StageEvaluator does_not(table, problem);
  EXPECT_FALSE(does_not.evaluate(0, 0, 2).fits);
  // kNeeded checkpoints exactly then, and only then.
  problem.policy = CheckpointPolicy::kNeeded;
  const StageEvaluator needed(table, problem);
  EXPECT_TRUE(needed.evaluate(0, 0, 2).checkpoint);
  EXPECT_EQ(needed.evaluate(0, 0, 2).memory_bytes, 38076);
  EXPECT_FALSE(needed.evaluate(1, 2, 3).checkpoint);
}

TEST(MemoryModelTest, LowerBoundNeverExceedsTheTotalAndGrowsWithTheRange) {
  Profile profile = testing::three_layer_profile();
  std::mt19937_64 rng(5);
  std::vector<testing::LayerSpec> layers = testing::random_layers(rng, 4);
  const Profile four = testing::make_profile(layers, {1, 2, 4}, 7, 1000);
  const LayerTable table(four, 2, OptimizerKind::kSgd);
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kZeroBubbleH1}) {
    const MemorySettings s = settings(schedule, 3, 5, 2);
    // Ranges of 4 layers that stage s can hold in a split into 3 stages.
    auto valid = [](int stage, int first, int last) {
      return first < last && first >= stage && last <= 4 - (2 - stage) &&
             (stage != 0 || first == 0) && (stage != 2 || last == 4);
    };
    for (int stage = 0; stage < 3; ++stage)
      for (int first = 0; first < 4; ++first)
        for (int last = first + 1; last <= 4; ++last)
          for (bool checkpoint : {false, true}) {
            if (!valid(stage, first, last)) continue;
            const int64_t lower =
                stage_memory_lower_bound(table, s, stage, first, last, checkpoint);
            EXPECT_LE(lower, stage_memory(table, s, stage, first, last, checkpoint).total_bytes);
            if (valid(stage, first - 1, last)) {
              EXPECT_LE(lower,
                        stage_memory_lower_bound(table, s, stage, first - 1, last, checkpoint));
            }
            if (valid(stage, first, last + 1)) {
              EXPECT_LE(lower,
                        stage_memory_lower_bound(table, s, stage, first, last + 1, checkpoint));
            }
          }
  }
  // At the boundaries it counts the smallest inner boundary (layer 1's 48 bytes; 80 at
  // position 1), so for stage 0 = [0, 2) it is exact.
  const LayerTable three(profile, 2, OptimizerKind::kSgd);
  const MemorySettings gpipe = settings(Schedule::kGpipe, 2, 4);
  EXPECT_EQ(three.min_inner_boundary_bytes(), 48);
  EXPECT_EQ(stage_memory_lower_bound(three, gpipe, 0, 0, 2, /*checkpoint=*/false), 39476);
  EXPECT_EQ(stage_memory_lower_bound(three, gpipe, 0, 0, 2, /*checkpoint=*/true), 38076);
  // Under GPipe the last stage holds no communication buffer: exact there too. Under 1f1b its
  // four (two receives ahead, two sends) count 48 bytes instead of the actual 80.
  EXPECT_EQ(stage_memory_lower_bound(three, gpipe, 1, 1, 3, /*checkpoint=*/false),
            stage_memory(three, gpipe, 1, 1, 3, /*checkpoint=*/false).total_bytes);
  const MemorySettings one_f_one_b = settings(Schedule::kOneFOneB, 2, 4);
  EXPECT_EQ(
      stage_memory_lower_bound(three, one_f_one_b, 1, 1, 3, /*checkpoint=*/false),
      stage_memory(three, one_f_one_b, 1, 1, 3, /*checkpoint=*/false).total_bytes - 4 * (80 - 48));
}

}  // namespace
}  // namespace pipeplan
