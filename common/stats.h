// Order statistics and spread of timing samples.
#pragma once

#include <utility>
#include <vector>

namespace pipeplan {

/// The `fraction` quantile (0 to 1) of `values` (not empty), interpolating linearly between
/// order statistics as numpy's default does: 0.5 is the median (the mean of the middle two
/// for an even count), 0.9 the p90.
double quantile(std::vector<double> values, double fraction);

/// quantile(values, 0.5).
inline double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

/// Population standard deviation over mean of `values`; 0 when there are fewer than two or
/// their mean is not above 0.
double coefficient_of_variation(const std::vector<double>& values);

}  // namespace pipeplan
