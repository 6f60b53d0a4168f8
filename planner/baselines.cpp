// The baseline partitioners and --partition parsing.
#include "planner/baselines.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>

#include "common/error.h"
#include "common/words.h"

namespace pipeplan {
namespace {

// Parses one "FIRST:LAST" item, or throws naming the field and the item.
std::pair<int, int> parse_range(const std::string& item, std::string_view field) {
  const size_t colon = item.find(':');
  auto number = [&](const std::string& text) {
    bool digits = !text.empty() && text.size() < 10;
    for (char c : text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    PIPEPLAN_CHECK(digits, field, ": ", quote(item),
                   " is not a range FIRST:LAST (expected optimal, uniform, parameters, "
                   "greedy-time or ranges such as 0:4,4:10)");
    return std::atoi(text.c_str());
  };
  PIPEPLAN_CHECK(colon != std::string::npos, field, ": ", quote(item),
                 " is not a range FIRST:LAST (expected optimal, uniform, parameters, greedy-time "
                 "or ranges such as 0:4,4:10)");
  return {number(item.substr(0, colon)), number(item.substr(colon + 1))};
}

std::vector<int> parse_ranges(std::string_view text, int num_layers, std::string_view field) {
  std::vector<int> boundaries{0};
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string item(text.substr(start, end - start));
    const auto [first, last] = parse_range(item, field);
    PIPEPLAN_CHECK(first == boundaries.back(), field, ": range ", quote(item), " starts at ", first,
                   " but must start at ", boundaries.back(),
                   " (ranges are contiguous and the first starts at 0)");
    PIPEPLAN_CHECK(last > first, field, ": range ", quote(item),
                   " is empty (LAST must be greater than FIRST)");
    boundaries.push_back(last);
    start = end + 1;
  }
  PIPEPLAN_CHECK(boundaries.back() == num_layers, field, ": ranges ", quote(text),
                 " cover layers [0, ", boundaries.back(), ") but the model has ", num_layers,
                 " layers");
  return boundaries;
}

constexpr std::pair<const char*, PartitionMethod> kMethodWords[] = {
    {"optimal", PartitionMethod::kOptimal},
    {"uniform", PartitionMethod::kUniform},
    {"parameters", PartitionMethod::kParameters},
    {"greedy-time", PartitionMethod::kGreedyTime},
    {"explicit", PartitionMethod::kExplicit}};

}  // namespace

std::string PartitionSpec::name() const { return word_of(method, kMethodWords); }

PartitionSpec parse_partition(std::string_view text, int num_layers, std::string_view field) {
  PartitionSpec spec;
  const std::optional<PartitionMethod> method = find_word(text, kMethodWords);
  if (method && *method != PartitionMethod::kExplicit) {  // "explicit" is no ranges
    spec.method = *method;
    return spec;
  }
  spec.method = PartitionMethod::kExplicit;
  spec.boundaries = parse_ranges(text, num_layers, field);
  return spec;
}

std::vector<int> uniform_boundaries(int num_layers, int pp) {
  std::vector<int> boundaries;
  for (int stage_idx = 0; stage_idx <= pp; ++stage_idx)
    boundaries.push_back(static_cast<int>(int64_t{stage_idx} * num_layers / pp));
  return boundaries;
}

std::vector<int> parameter_boundaries(const LayerTable& table, int pp) {
  const int layers = table.num_layers();
  const double total = static_cast<double>(table.param_count(0, layers));
  if (total <= 0) return uniform_boundaries(layers, pp);
  std::vector<int> boundaries{0};
  for (int stage_idx = 1; stage_idx < pp; ++stage_idx) {
    const double target = total * stage_idx / pp;
    const int lo = boundaries.back() + 1;
    const int hi = layers - (pp - stage_idx);
    int best = lo;
    for (int pos = lo; pos <= hi; ++pos) {
      const double distance = std::abs(static_cast<double>(table.param_count(0, pos)) - target);
      if (distance < std::abs(static_cast<double>(table.param_count(0, best)) - target)) best = pos;
    }
    boundaries.push_back(best);
  }
  boundaries.push_back(layers);
  return boundaries;
}

std::vector<int> greedy_time_boundaries(const LayerTable& table, int pp) {
  const int layers = table.num_layers();
  const int64_t target = table.compute_ns(0, layers) / pp;
  std::vector<int> boundaries{0};
  int pos = 0;
  for (int stage_idx = 0; stage_idx + 1 < pp; ++stage_idx) {
    const int start = pos;
    const int limit = layers - (pp - stage_idx - 1);  // leave a layer for each later stage
    ++pos;
    while (pos < limit && table.compute_ns(start, pos + 1) <= target) ++pos;
    boundaries.push_back(pos);
  }
  boundaries.push_back(layers);
  return boundaries;
}

PartitionResult run_partition(const PartitionSpec& spec, const StageEvaluator& evaluator) {
  const int pp = evaluator.pp();
  const LayerTable& table = evaluator.table();
  switch (spec.method) {
    case PartitionMethod::kOptimal:
      return optimal_partition(evaluator);
    case PartitionMethod::kUniform:
      return evaluate_boundaries(evaluator, uniform_boundaries(table.num_layers(), pp));
    case PartitionMethod::kParameters:
      return evaluate_boundaries(evaluator, parameter_boundaries(table, pp));
    case PartitionMethod::kGreedyTime:
      return evaluate_boundaries(evaluator, greedy_time_boundaries(table, pp));
    case PartitionMethod::kExplicit:
      PIPEPLAN_ASSERT(static_cast<int>(spec.boundaries.size()) == pp + 1);
      return evaluate_boundaries(evaluator, spec.boundaries);
  }
  return {};
}

}  // namespace pipeplan
