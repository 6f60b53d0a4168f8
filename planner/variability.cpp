// Draws of varying action times: log-normal multipliers from a fixed seed, played replica by
// replica, or folded over the replicas through a normal fit of each kind's iteration.
#include "planner/variability.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "planner/lognormal.h"
#include "planner/pipeline_player.h"

namespace pipeplan {
namespace {

// Integration intervals of expected_maximum over mean ± kIntegrationSpan standard deviations.
constexpr int kIntegrationSteps = 8192;
constexpr double kIntegrationSpan = 9;

// A player per replica kind and one pipeline's action times, redrawn in place for each replica
// and draw of the every-replica mode.
class ReplicaDrawer {
 public:
  explicit ReplicaDrawer(const SimulationInput& in) : in_(in), kinds_(replica_kinds(in)) {
    for (int replica : kinds_.representative)
      players_.emplace_back(in, std::vector<int>{replica}, /*record_timeline=*/false);
  }

  int kind_of(int replica) const { return kinds_.kind_of[replica]; }

  // Draws every action time of one pipeline from `multipliers` and plays it as `kind`: its
  // iteration, in ms. Stage by stage, micro-batch by micro-batch: forward, backward,
  // recompute (when the stage recomputes), the order every draw of this simulator has used.
  double draw_and_play(int kind, Multipliers& multipliers) {
    if (times_.empty()) allocate_times();
    for (int stage = 0; stage < in_.pp; ++stage) {
      const LogNormal fwd_shape = log_normal(in_.stages[stage].fwd_cv);
      const LogNormal bwd_shape = log_normal(in_.stages[stage].bwd_cv);
      RankStepTimes& rank = times_[stage];
      const bool recomputes = !rank.recompute_ms.empty();
      for (int chunk = 0; chunk < in_.virtual_stages; ++chunk) {  // interleaved: chunk-major
        const StageCosts& costs = in_.virtual_stages > 1
                                      ? in_.chunks[chunk_index(in_.pp, stage, chunk)]
                                      : in_.stages[stage];
        for (int mb = 0; mb < in_.num_micro_batches; ++mb) {
          const int slot = chunk * in_.num_micro_batches + mb;
          rank.fwd_ms[slot] = costs.fwd_ms * multipliers.draw(fwd_shape);
          rank.bwd_ms[slot] = costs.bwd_ms * multipliers.draw(bwd_shape);
          if (!rank.bwd_weight_ms.empty())
            rank.bwd_weight_ms[slot] = costs.bwd_weight_ms * multipliers.draw(bwd_shape);
          if (recomputes)
            rank.recompute_ms[slot] = costs.recompute_ms * multipliers.draw(fwd_shape);
        }
      }
    }
    return players_[kind].play();
  }

 private:
  void allocate_times() {
    times_.resize(in_.pp);
    const int slots = in_.num_micro_batches * in_.virtual_stages;  // interleaved: per chunk
    for (int stage = 0; stage < in_.pp; ++stage) {
      bool recomputes = in_.stages[stage].recompute_ms > 0;
      for (int chunk = 0; chunk < in_.virtual_stages && in_.virtual_stages > 1; ++chunk)
        recomputes = recomputes || in_.chunks[chunk_index(in_.pp, stage, chunk)].recompute_ms > 0;
      times_[stage].fwd_ms.resize(slots);
      times_[stage].bwd_ms.resize(slots);
      times_[stage].recompute_ms.resize(recomputes ? slots : 0);
      const bool split = in_.schedule == Schedule::kZeroBubbleH1;
      times_[stage].bwd_weight_ms.resize(split ? slots : 0);
      times_[stage].optimizer_ms = in_.stages[stage].optimizer_ms;
    }
    for (PipelinePlayer& player : players_)
      for (int stage = 0; stage < in_.pp; ++stage) player.set_times(0, stage, &times_[stage]);
  }

  const SimulationInput& in_;
  const ReplicaKinds kinds_;
  std::vector<RankStepTimes> times_;     // by stage, once the draws begin
  std::vector<PipelinePlayer> players_;  // by kind
};

// Every replica of every draw: the mean over draws of the slowest replica's iteration.
DrawnIteration every_replica(ReplicaDrawer& drawer, int dp, int draws) {
  Multipliers multipliers;
  double total_ms = 0;
  for (int draw = 0; draw < draws; ++draw) {
    double slowest_ms = 0;
    for (int replica = 0; replica < dp; ++replica)
      slowest_ms = std::max(slowest_ms, drawer.draw_and_play(drawer.kind_of(replica), multipliers));
    total_ms += slowest_ms;
  }
  return {total_ms / draws, draws, false};
}

// Running mean and variance (Welford) of one kind's drawn iterations.
struct Moments {
  int count = 0;
  double mean = 0;
  double squares = 0;  // Σ (x − mean)²
  void add(double x) {
    ++count;
    const double delta = x - mean;
    mean += delta / count;
    squares += delta * (x - mean);
  }
  double stddev() const { return count > 1 ? std::sqrt(squares / (count - 1)) : 0.0; }
};

}  // namespace

DrawCount draw_count(double actions, int dp, int draws, ReplicaDraws mode) {
  const bool fold = mode == ReplicaDraws::kFold ||
                    (mode == ReplicaDraws::kAuto && draws * dp * actions > kEveryReplicaDrawBudget);
  if (!fold) return {false, draws};
  return {true, static_cast<int>(
                    std::clamp<double>(kFoldDrawBudget / actions, kMinFoldDraws, kMaxFoldDraws))};
}

DrawnIteration drawn_iteration(const SimulationInput& input, int draws, ReplicaDraws mode) {
  IterationDraws pieces(input, draws, mode);
  for (int piece = 0; piece < pieces.num_pieces(); ++piece) pieces.play(piece);
  return pieces.result();
}

IterationDraws::IterationDraws(const SimulationInput& input, int draws, ReplicaDraws mode)
    : input_(input),
      actions_(pipeline_actions(input.schedule, input.pp, input.virtual_stages,
                                input.num_micro_batches)) {
  PIPEPLAN_ASSERT(draws >= 1 && input.rank_times.empty());
  count_ = draw_count(actions_, input.dp, draws, mode);
  if (!count_.folded) {
    pieces_.push_back({-1, 0, count_.draws});
    return;
  }
  kinds_ = replica_kinds(input);
  const int per_piece =
      std::clamp(static_cast<int>(std::ceil(kMinPieceActions / actions_)), 1, count_.draws);
  drawn_ms_.assign(kinds_.representative.size(), std::vector<double>(count_.draws));
  for (int kind = 0; kind < static_cast<int>(kinds_.representative.size()); ++kind)
    for (int first = 0; first < count_.draws; first += per_piece)
      pieces_.push_back({kind, first, std::min(first + per_piece, count_.draws)});
}

double IterationDraws::piece_actions(int piece) const {
  const Piece& p = pieces_[piece];
  const double plays = p.kind < 0 ? static_cast<double>(p.last_draw) * input_.dp
                                  : p.last_draw - p.first_draw;
  return plays * actions_;
}

void IterationDraws::play(int piece) {
  const Piece& p = pieces_[piece];
  if (p.kind < 0) {
    ReplicaDrawer drawer(input_);
    every_replica_ms_ = every_replica(drawer, input_.dp, p.last_draw).iteration_ms;
    return;
  }
  PipelinePlayer player(input_, {kinds_.representative[p.kind]}, /*record_timeline=*/false);
  FastMultipliers multipliers;
  player.draw_times(&multipliers);
  for (int draw = p.first_draw; draw < p.last_draw; ++draw) {
    multipliers.reseed(static_cast<uint64_t>(p.kind) * kMaxFoldDraws + draw);
    drawn_ms_[p.kind][draw] = player.play();
  }
}

DrawnIteration IterationDraws::result() const {
  if (!count_.folded) return {every_replica_ms_, count_.draws, false};
  std::vector<NormalKind> fit;
  for (size_t kind = 0; kind < drawn_ms_.size(); ++kind) {
    Moments moments;
    for (double iteration_ms : drawn_ms_[kind]) moments.add(iteration_ms);
    fit.push_back({moments.mean, moments.stddev(), static_cast<double>(kinds_.count[kind])});
  }
  return {expected_maximum(fit), count_.draws, true};
}

void apply_drawn_iteration(const DrawnIteration& drawn, SimulationResult* result) {
  const double iteration_ms = std::max(result->mean_times_iteration_ms, drawn.iteration_ms);
  double idle_total = 0;
  for (size_t rank = 0; rank < result->busy_ms.size(); ++rank) {
    result->idle_ms[rank] = iteration_ms - result->busy_ms[rank];
    idle_total += result->idle_ms[rank];
  }
  result->iteration_ms = iteration_ms;
  result->bubble_fraction =
      idle_total / (static_cast<double>(result->busy_ms.size()) * iteration_ms);
  result->timeline.bubble_fraction = result->bubble_fraction;
  result->variability_draws = drawn.draws;
  result->replicas_folded = drawn.folded;
}

double expected_maximum(const std::vector<NormalKind>& kinds) {
  PIPEPLAN_ASSERT(!kinds.empty());
  double floor = -std::numeric_limits<double>::infinity();  // largest constant kind
  double lowest = std::numeric_limits<double>::infinity();  // of the varying kinds' ranges
  double highest = floor;
  double widest = 0;
  for (const NormalKind& kind : kinds) {
    if (kind.stddev <= 0) {
      floor = std::max(floor, kind.mean);
      continue;
    }
    widest = std::max(widest, kind.stddev);
    lowest = std::min(lowest, kind.mean);
    highest = std::max(highest, kind.mean);
  }
  if (widest <= 0 || floor >= highest + kIntegrationSpan * widest) return floor;
  // M >= start always, so E[M] = start + ∫_start^hi (1 − F(x)) dx, F(hi) = 1 to double
  // precision; the constant kinds are 1 above the floor.
  const double start = std::max(lowest - kIntegrationSpan * widest, floor);
  const double hi = highest + kIntegrationSpan * widest;
  const double step = (hi - start) / kIntegrationSteps;
  auto above = [&](double x) {  // 1 − F(x), F = Π Φ((x − mean) / stddev)^count
    double log_f = 0;
    for (const NormalKind& kind : kinds) {
      if (kind.stddev <= 0) continue;
      const double phi = 0.5 * std::erfc(-(x - kind.mean) / (kind.stddev * std::sqrt(2.0)));
      if (phi <= 0) return 1.0;
      log_f += kind.count * std::log(phi);
    }
    return -std::expm1(log_f);
  };
  double integral = (above(start) + above(hi)) / 2;
  for (int idx = 1; idx < kIntegrationSteps; ++idx) integral += above(start + idx * step);
  return start + integral * step;
}

}  // namespace pipeplan
