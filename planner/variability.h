// The iteration when action times vary: log-normal draws of every forward, recompute and
// backward, played replica by replica, within a budget of compute actions.
#pragma once

#include "planner/simulation_input.h"

namespace pipeplan {

/// Draws of the iteration simulate() plays when action times vary (StageCosts::fwd_cv, bwd_cv).
inline constexpr int kVariabilityDraws = 32;

/// The most compute actions the draws of one iteration may play (draws × dp × compute_actions);
/// above it simulate() plays the mean times only. The draws played every replica up to this
/// budget before, so within it they are unchanged. The plans of a search of 150 layers on 64
/// devices fit it (at most 1.6 million); those that win at 1,000 and 10,000 layers on 1,024 and
/// 16,384 devices do not (50 million and more, seconds on one core), and there the draws moved
/// the chosen plan's iteration by 0.38 % and 0.65 % (bench/RESULTS.md).
inline constexpr double kDrawBudgetActions = 4e6;

/// The compute actions one pipeline of `input` plays in one iteration: pp × V × m forwards and
/// as many backwards, zb-h1's backwards each two (B and W); forwards only with forward_only.
double compute_actions(const SimulationInput& input);

/// Whether `draws` draws of `input` fit the budget: draws × dp × compute_actions(input) <=
/// kDrawBudgetActions.
bool draws_fit_budget(const SimulationInput& input, int draws);

/// The expected iteration, in ms, when each forward, recompute and backward of every rank takes
/// an independent log-normal multiple (mean 1, coefficient of variation StageCosts::fwd_cv,
/// bwd_cv) of its stage's (interleaved-1f1b: its chunk's) time: the mean over `draws` (>= 1)
/// iterations, each drawing every rank's times (replica by replica, stage by stage, micro-batch
/// by micro-batch) from one fixed-seed generator (planner/lognormal.h: Multipliers), so that the
/// same input gives the same result. Replicas meet only at the all-reduces, after which each
/// rank steps its optimizer as long as its stage's other replicas, so an iteration ends with
/// its slowest replica: each replica is played alone, one of each kind of replica reused for
/// the others (ReplicaKinds), and the iteration is the largest. input.rank_times must be empty
/// (measured times are not drawn). The budget is the caller's to check.
double drawn_iteration_ms(const SimulationInput& input, int draws);

}  // namespace pipeplan
