// Order statistics and spread of timing samples.
#include "common/stats.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace pipeplan {

double quantile(std::vector<double> values, double fraction) {
  PIPEPLAN_ASSERT(!values.empty() && fraction >= 0 && fraction <= 1, "quantile ", fraction);
  std::sort(values.begin(), values.end());
  const double position = fraction * static_cast<double>(values.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(position));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  return values[lower] + (position - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

double coefficient_of_variation(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  double mean = 0;
  for (double value : values) mean += value;
  mean /= static_cast<double>(values.size());
  if (mean <= 0) return 0;
  double squares = 0;
  for (double value : values) squares += (value - mean) * (value - mean);
  return std::sqrt(squares / static_cast<double>(values.size())) / mean;
}

}  // namespace pipeplan
