// Fitting a time profile to measured steps: Nelder-Mead on the log of each parameter,
// minimising the squared log error of the predicted step times.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "common/statistics.hpp"
#include "trainfit/error.hpp"
#include "trainfit/time.hpp"

namespace trainfit {
namespace {

constexpr std::size_t kAll = 6;
using Vec = std::vector<double>;

// Pointers to the profile's fittable fields, in profile_parameter_names() order.
std::array<double*, kAll> fields(TimeProfile& p) {
  return {&p.matmul_efficiency, &p.attention_efficiency, &p.fp32_efficiency,
          &p.bandwidth_efficiency, &p.host_seconds_per_op, &p.kernel_floor_seconds};
}

// The fitted parameters live on a log scale (they are positive); efficiencies stop at the peak.
TimeProfile from_vec(const Vec& v, const std::vector<std::size_t>& which, TimeProfile p) {
  auto f = fields(p);
  for (std::size_t i = 0; i < which.size(); ++i) {
    const double x = std::exp(v[i]);
    *f[which[i]] = which[i] < 4 ? std::min(1.0, x) : x;
  }
  return p;
}

// A step as the fit sees it: its work counted once. The work depends on the model and the setup
// only, and counting it (step_work) is most of what pricing a step costs; the fit prices every
// step at a few thousand profiles (1,000 steps took 24 s when each was counted anew).
struct PricedStep {
  StepWork work;
  const TimedStep* step;
};

std::vector<double> log_errors(const std::vector<PricedStep>& steps, const TimeProfile& p) {
  std::vector<double> e;
  e.reserve(steps.size());
  for (const auto& s : steps) {
    const TimeEstimate t = estimate_time(s.work, s.step->setup, s.step->gpu, p, false);
    e.push_back(std::log(t.step_seconds / s.step->step_seconds));
  }
  return e;
}

double loss_of(const std::vector<PricedStep>& steps, const TimeProfile& p) {
  double sum = 0;
  for (double e : log_errors(steps, p)) sum += e * e;
  return sum;
}

// A fitted value must be one a profile may hold (parse_profile's range): `plan --profile` would
// refuse the file otherwise. Leaving the range means the measured times are far from anything the
// model gives at sane rates: most often steps in milliseconds or microseconds read as seconds.
void check_fitted(const std::string& name, double value, bool per_operation_time) {
  if (value > kProfileRateAbove && value <= kProfileRateAtMost) return;
  // A longer step fits as a longer time per operation, or as a lower efficiency.
  const bool steps_too_long = per_operation_time ? !(value <= kProfileRateAtMost) : !(value > kProfileRateAbove);
  throw InputError(fmt::format(
      "calibrate: the fitted {} is {:g}, outside ({:g}, {:g}], the range a profile holds: the measured step times "
      "are far {} than the model gives at any plausible rate; are they in seconds?",
      name, value, kProfileRateAbove, kProfileRateAtMost, steps_too_long ? "longer" : "shorter"));
}

}  // namespace

const std::vector<std::string>& profile_parameter_names() {
  static const std::vector<std::string> names = {"matmul_efficiency", "attention_efficiency", "fp32_efficiency",
                                                 "bandwidth_efficiency", "host_seconds_per_op", "kernel_floor_seconds"};
  return names;
}

CalibrationResult calibrate(const std::vector<TimedStep>& steps, const TimeProfile& start,
                            const std::vector<std::string>& fit) {
  std::vector<std::size_t> which;
  for (const auto& name : fit) {
    const auto& names = profile_parameter_names();
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) throw InputError("calibrate: unknown parameter '" + name + "'");
    which.push_back(static_cast<std::size_t>(it - names.begin()));
  }
  const std::size_t n = which.size();
  if (n == 0) throw InputError("calibrate: name at least one parameter to fit");
  if (steps.size() < n + 1) throw InputError("calibration needs more measured steps than fitted parameters");
  for (const auto& s : steps)
    if (!(s.step_seconds > 0)) throw InputError("calibration: a step time must be positive");
  std::vector<PricedStep> priced;
  priced.reserve(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const TimedStep& s = steps[i];
    if (!estimate_time(s.model, s.setup, s.gpu, start, false).predicted)
      throw InputError(fmt::format("calibration: step {} ({} on {}): the card has no throughput figures to fit rates to",
                                   i + 1, s.model.name, s.gpu.name));
    priced.push_back({step_work(s.model, s.setup), &s});
  }
  TimeProfile copy = start;
  auto f0 = fields(copy);
  Vec best(n);
  for (std::size_t i = 0; i < n; ++i) best[i] = std::log(*f0[which[i]]);
  auto loss = [&](const Vec& v) { return loss_of(priced, from_vec(v, which, start)); };
  // Nelder-Mead, restarted from its own best point so it does not stall on a flat ridge.
  for (int restart = 0; restart < 4; ++restart) {
    std::vector<Vec> simplex(n + 1, best);
    std::vector<double> f(n + 1);
    for (std::size_t i = 0; i < n; ++i) simplex[i + 1][i] += 0.5;
    for (std::size_t i = 0; i <= n; ++i) f[i] = loss(simplex[i]);
    for (int iter = 0; iter < 100 * static_cast<int>(n + 1); ++iter) {
      std::vector<std::size_t> order(n + 1);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return f[a] < f[b]; });
      const std::size_t lo = order.front(), hi = order.back(), second = order[n > 0 ? n - 1 : 0];
      Vec centroid(n, 0.0);
      for (std::size_t i = 0; i <= n; ++i)
        if (i != hi)
          for (std::size_t k = 0; k < n; ++k) centroid[k] += simplex[i][k] / static_cast<double>(n);
      auto along = [&](double a) {
        Vec v(n);
        for (std::size_t k = 0; k < n; ++k) v[k] = centroid[k] + a * (simplex[hi][k] - centroid[k]);
        return v;
      };
      const Vec reflected = along(-1.0);
      const double fr = loss(reflected);
      if (fr < f[lo]) {
        const Vec expanded = along(-2.0);
        const double fe = loss(expanded);
        simplex[hi] = fe < fr ? expanded : reflected;
        f[hi] = std::min(fe, fr);
      } else if (fr < f[second]) {
        simplex[hi] = reflected;
        f[hi] = fr;
      } else {
        const Vec contracted = along(0.5);
        const double fc = loss(contracted);
        if (fc < f[hi]) {
          simplex[hi] = contracted;
          f[hi] = fc;
        } else {
          for (std::size_t i = 0; i <= n; ++i) {
            if (i == lo) continue;
            for (std::size_t k = 0; k < n; ++k) simplex[i][k] = simplex[lo][k] + 0.5 * (simplex[i][k] - simplex[lo][k]);
            f[i] = loss(simplex[i]);
          }
        }
      }
    }
    best = simplex[static_cast<std::size_t>(std::min_element(f.begin(), f.end()) - f.begin())];
  }
  CalibrationResult r;
  r.profile = from_vec(best, which, start);
  auto fitted = fields(r.profile);
  for (const std::size_t i : which) check_fitted(profile_parameter_names()[i], *fitted[i], i >= 4);
  r.steps = steps.size();
  std::vector<double> abs_err;
  for (double e : log_errors(priced, r.profile)) abs_err.push_back(std::abs(std::exp(e) - 1.0));
  r.median_abs_error = detail::median(abs_err).value_or(0.0);  // never empty: steps > fitted parameters
  r.max_abs_error = detail::max_abs(abs_err);
  return r;
}

}  // namespace trainfit
