#pragma once

#include <vector>

namespace shardplan {

// Root mean square of relative errors.
double rms_of(const std::vector<double>& errors);
// The error largest in magnitude, with its sign.
double worst_of(const std::vector<double>& errors);
// Coefficient of determination of `predicted` against `measured`: 1 − SS_res ÷ SS_tot;
// NaN with fewer than three points or no spread in `measured`.
double r_squared(const std::vector<double>& measured, const std::vector<double>& predicted);

}  // namespace shardplan
