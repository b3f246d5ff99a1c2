#pragma once
// The numerical part of fitting a calibration profile from raw measurements
// (`trainsim calibrate fit`): robust per-size medians, monotone efficiency
// curves, rounding for the profile file, and the step-latency fit of
// collectives. Input reading and profile writing stay in the front end.
#include <optional>
#include <utility>
#include <vector>

#include "calibration/profile.hpp"

namespace trainsim {

// A point of a fitted curve (size, efficiency) with the number of samples behind it.
struct FitPoint {
  double x, y, w;
};

double median(std::vector<double> v);
// `digits` significant digits: the double nearest the decimal text.
double round_significant(double x, int digits);

// Median per factor-2 bucket of the size: (exp2 of the median log2 size,
// median efficiency, count), ascending.
std::vector<FitPoint> bucket_medians(const std::vector<std::pair<double, double>>& samples);
// Pool-adjacent-violators: the closest non-decreasing sequence (weighted least squares).
void make_non_decreasing(std::vector<FitPoint>& pts);
EfficiencyCurve to_curve(const std::vector<FitPoint>& pts);
// Rounds and clamps the points for the profile file (sizes strictly increasing,
// efficiencies in the reader's (0, cap]).
std::vector<FitPoint> finish_points(std::vector<FitPoint> pts, bool integer_sizes, double cap);

// time = base + steps x hop, fitted by least squares to (steps, seconds) of the
// smallest message of each collective (steps from collective_cost's
// hop_steps); a negative hop becomes 0 (base = mean time), a negative base 0
// (hop through the origin). Empty when the steps do not vary.
struct StepLatencyFit {
  double hop = 0, base = 0;
};
std::optional<StepLatencyFit> fit_step_latency(const std::vector<std::pair<double, double>>& steps_seconds);

}  // namespace trainsim
