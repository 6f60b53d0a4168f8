// The iteration when action times vary: draws of log-normal forward, recompute and backward
// times played through the pipelines, with the dp replicas played or folded in.
#pragma once

#include <vector>

#include "planner/simulator.h"

namespace pipeplan {

/// The compute actions one pipeline plays in one iteration: pp × V × micro-batches forwards and
/// as many backwards, zb-h1's backwards each two (B and W).
inline double pipeline_actions(Schedule schedule, int pp, int virtual_stages,
                               int num_micro_batches) {
  return static_cast<double>(pp) * virtual_stages * num_micro_batches *
         (schedule == Schedule::kZeroBubbleH1 ? 3 : 2);
}

/// Work above which ReplicaDraws::kAuto folds the replicas in, counted in the compute actions
/// the draws would play: draws × dp × pipeline_actions.
inline constexpr double kEveryReplicaDrawBudget = 4e6;
/// Folded draws of each replica kind: as many as this many compute actions allow (a draw plays
/// pipeline_actions of them), at least kMinFoldDraws and at most kMaxFoldDraws. The more
/// actions a pipeline plays, the less its iteration varies (the variation of the actions on its
/// critical path averages out), so a fixed number of actions drawn estimates it to about the
/// same relative precision whatever the schedule: within 0.013–0.065 % (root mean square) of a
/// 96-draw estimate at 1,000 layers on 1,024 devices (bench/RESULTS.md). A fixed count, not one
/// that stops when the draws look precise: stopping on a small sample standard deviation would
/// keep the draws that happen to understate it, and the maximum over replicas with them.
inline constexpr double kFoldDrawBudget = 1e6;
inline constexpr int kMinFoldDraws = 2;
inline constexpr int kMaxFoldDraws = 1024;

/// How drawn_iteration plays: whether it folds the replicas in, and how many iterations it
/// plays (folded: per replica kind).
struct DrawCount {
  bool folded = false;
  int draws = 0;
};

/// drawn_iteration's DrawCount for `draws` asked in `mode`, of a pipeline of `actions` compute
/// actions (pipeline_actions) with `dp` replicas: kAuto folds when draws × dp × actions passes
/// kEveryReplicaDrawBudget; folded, the draws are kFoldDrawBudget / actions within
/// [kMinFoldDraws, kMaxFoldDraws], whatever `draws` says.
DrawCount draw_count(double actions, int dp, int draws, ReplicaDraws mode);

/// The drawn iteration: its mean over the draws, in ms, and how it was obtained.
struct DrawnIteration {
  double iteration_ms = 0;
  int draws = 0;        ///< iterations played (folded: per replica kind)
  bool folded = false;  ///< the replicas were folded in (see drawn_iteration)
};

/// The expected iteration when each forward, recompute and backward of every rank takes an
/// independent log-normal multiple (mean 1, coefficient of variation StageCosts::fwd_cv,
/// bwd_cv) of its stage's time, from a fixed-seed generator: the same input gives the same
/// result. Replicas meet only at the all-reduces, after which each rank steps its optimizer
/// as long as its stage's other replicas, so an iteration ends with its slowest replica: it
/// is the maximum over replicas of X_r, the iteration replica r alone would play. Its mean,
/// two ways:
///   - every replica (ReplicaDraws::kEvery): `draws` iterations, each drawing every rank's
///     times (replica by replica, stage by stage, micro-batch by micro-batch) and playing
///     every replica; the mean of their maxima;
///   - folded (kFold): replicas with the same transfer times (one kind) have the same X
///     distribution, so each kind's pipeline alone is played for draws of X (kFoldDrawBudget
///     sets how many, whatever `draws` says), X is taken as normal with the draws' mean and
///     standard deviation, and the result is the expected maximum over all replicas of their
///     normal X (numerical integration). A cheaper generator (FastMultipliers, a stream of
///     its own for each kind and draw: IterationDraws) draws each time as it is played. Long
///     pipelines get few draws, but their X varies least: its
///     spread shrinks as the actions on its critical path add up. X is skewed to the right,
///     which the normal fit misses in its tail: it reads low where pipelines are short,
///     replicas many and the variation large (variability_test.cpp holds it within 0.5 % of
///     every replica up to cv = 0.1).
/// draw_count says which way and how many. input.rank_times must be empty (measured times are
/// not drawn).
DrawnIteration drawn_iteration(const SimulationInput& input, int draws, ReplicaDraws mode);

/// drawn_iteration in pieces that several threads can play at once. Each folded draw has a
/// generator of its own (FastMultipliers' stream by replica kind and draw), so the result does
/// not depend on how the draws are grouped into pieces or which thread plays which; a piece
/// plays at least kMinPieceActions compute actions (one draw when a draw plays more). The
/// every-replica draws share one generator (Multipliers: one sequence over every replica and
/// draw) and are one piece.
class IterationDraws {
 public:
  static constexpr double kMinPieceActions = 2.5e5;

  /// `input` must outlive this object; its rank_times must be empty.
  IterationDraws(const SimulationInput& input, int draws, ReplicaDraws mode);

  int num_pieces() const { return static_cast<int>(pieces_.size()); }
  /// About the compute actions piece `piece` plays.
  double piece_actions(int piece) const;
  /// Plays piece `piece` (each once); distinct pieces may be played at once on distinct threads.
  void play(int piece);
  /// The drawn iteration, once every piece has been played.
  DrawnIteration result() const;

 private:
  // Folded: the draws [first_draw, last_draw) of replica kind `kind`; kind −1: every
  // replica's draws, [0, last_draw).
  struct Piece {
    int kind = -1;
    int first_draw = 0;
    int last_draw = 0;
  };

  const SimulationInput& input_;
  DrawCount count_;
  double actions_ = 0;                         // of one pipeline (pipeline_actions)
  ReplicaKinds kinds_;                         // folded
  std::vector<std::vector<double>> drawn_ms_;  // folded: by kind and draw, the iteration played
  double every_replica_ms_ = 0;                // every replica: the mean of the draws' maxima
  std::vector<Piece> pieces_;
};

/// add_variation's last step: `result` (with mean times) takes the drawn iteration of its
/// input, never below the mean-times one, with each rank's idle time and the bubble to match.
void apply_drawn_iteration(const DrawnIteration& drawn, SimulationResult* result);

/// One kind of replica for expected_maximum: `count` independent normal variables.
struct NormalKind {
  double mean = 0;
  double stddev = 0;  ///< 0: the kind always takes its mean
  double count = 1;
};

/// E[max] of every variable of every kind, by numerical integration of the maximum's
/// distribution Π Φ((x − mean) / stddev)^count over ±9 standard deviations (to about 1e-6 of
/// the largest stddev); kinds of stddev 0 are constants.
double expected_maximum(const std::vector<NormalKind>& kinds);

}  // namespace pipeplan
