// Test data and the error model the CPU Adam tests compare with.
//
// Note [CPU Adam tolerances]
// Paths differ only in rounding. x86 sqrt and div are correctly rounded in
// scalar and vector form alike; the differences come from FMA contraction
// (the SIMD paths fuse m = b1*m + (1-b1)*g and v = b2*v + (1-b2)*g*g, and
// LibTorch's vector kernels may fuse, e.g. `add_(x, alpha)`). Fusing changes a
// result by at most one rounding, 2^-24 relative to the magnitude of the
// operands (not of the result: b1*m and (1-b1)*g can nearly cancel). A few
// such roundings per output give a few 1e-7, so we allow kCpuAdamRelTol = 1e-6
// times each operation's operand magnitude, propagated to first order through
// the step and accumulated over steps (ToleranceModel). Bounding by operand
// magnitudes keeps the check tight: a plain relative tolerance on m fails on
// cancellations, and one on p lets the update (~lr = 1e-3 of p) be off by a
// thousandth of itself unnoticed. Measured worst error / bound: ~0.4.

#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_adam.h"

namespace dslaunch::kernels::testing {

inline constexpr double kCpuAdamRelTol = 1e-6;

// The state a step changes.
struct AdamBuffers {
  std::vector<float> params, exp_avg, exp_avg_sq;
};

// Parameters ~N(0, 1); moments zero (as LibTorch starts them) or, with
// warm_moments, what some earlier steps could have left.
inline AdamBuffers RandomAdamBuffers(int64_t n, uint32_t seed, bool warm_moments) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  AdamBuffers b{std::vector<float>(n), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  for (int64_t i = 0; i < n; ++i) {
    b.params[i] = normal(rng);
    if (warm_moments) {
      b.exp_avg[i] = 1e-2f * normal(rng);
      b.exp_avg_sq[i] = b.exp_avg[i] * b.exp_avg[i] * (1.0f + std::abs(normal(rng)));
    }
  }
  return b;
}

// Gradients over six decades (so eps matters for some), ~1% exactly zero.
inline std::vector<float> RandomGrads(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> decade(-6.0f, 0.0f);
  std::uniform_int_distribution<int> hundred(0, 99);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = hundred(rng) == 0 ? 0.0f : normal(rng) * std::pow(10.0f, decade(rng));
  }
  return g;
}

// Per-element error bounds, accumulated over the steps of a run
// (Note [CPU Adam tolerances]). Fed with the reference path's state.
class ToleranceModel {
 public:
  explicit ToleranceModel(int64_t n) : p_(n, 0.0), m_(n, 0.0), v_(n, 0.0) {}

  // `before` and `after` bracket one reference step that used `grads`.
  void AddStep(const AdamParams& adam, const AdamBuffers& before, const std::vector<float>& grads,
               const AdamBuffers& after) {
    const double b1 = adam.beta1, b2 = adam.beta2, wd = adam.weight_decay, lr = adam.lr;
    const double t = static_cast<double>(adam.step);
    const double bc1 = adam.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
    const double bc2_sqrt = std::sqrt(adam.bias_correction ? 1.0 - std::pow(b2, t) : 1.0);
    const double step_size = lr / bc1;
    const bool l2 = !adam.adamw && wd != 0.0;
    const double scale = adam.adamw ? std::abs(1.0 - lr * wd) : 1.0;
    for (size_t i = 0; i < p_.size(); ++i) {
      const double p0 = std::abs(before.params[i]);
      const double g_mag = std::abs(grads[i]) + (l2 ? wd * p0 : 0.0);
      const double g_tol = l2 ? wd * p_[i] : 0.0;
      const double m_mag = b1 * std::abs(before.exp_avg[i]) + (1 - b1) * g_mag;
      const double v_mag = b2 * before.exp_avg_sq[i] + (1 - b2) * g_mag * g_mag;
      m_[i] = b1 * m_[i] + (1 - b1) * g_tol + kCpuAdamRelTol * m_mag;
      v_[i] = b2 * v_[i] + (1 - b2) * 2 * g_mag * g_tol + kCpuAdamRelTol * v_mag;
      const double v1 = after.exp_avg_sq[i];
      const double denom = std::sqrt(v1) / bc2_sqrt + adam.eps;
      const double denom_tol =
          (std::sqrt(v1 + v_[i]) - std::sqrt(v1)) / bc2_sqrt + kCpuAdamRelTol * denom;
      const double m1 = std::abs(after.exp_avg[i]);
      const double update_tol = step_size * (m_[i] + (m1 + m_[i]) * denom_tol / denom) / denom;
      p_[i] = scale * p_[i] + update_tol +
              kCpuAdamRelTol * (p0 * scale + step_size * m1 / denom);
    }
  }

  double p(size_t i) const { return p_[i]; }
  double m(size_t i) const { return m_[i]; }
  double v(size_t i) const { return v_[i]; }

 private:
  std::vector<double> p_, m_, v_;
};

// Largest |got - want| / tolerance over all elements and the three buffers;
// <= 1 means within tolerance. Describes the worst element in *worst.
inline double WorstErrorRatio(const AdamBuffers& got, const AdamBuffers& want,
                              const ToleranceModel& tol, std::string* worst) {
  double ratio = 0.0;
  auto check = [&](const char* name, const std::vector<float>& a, const std::vector<float>& b,
                   size_t i, double bound) {
    const double err = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (err == 0.0) return;
    const double r = bound > 0.0 ? err / bound : HUGE_VAL;
    if (r > ratio) {
      ratio = r;
      char text[160];
      std::snprintf(text, sizeof(text), "%s[%zu]: got %.9g want %.9g tolerance %.3g", name, i,
                    a[i], b[i], bound);
      *worst = text;
    }
  };
  for (size_t i = 0; i < want.params.size(); ++i) {
    check("params", got.params, want.params, i, tol.p(i));
    check("exp_avg", got.exp_avg, want.exp_avg, i, tol.m(i));
    check("exp_avg_sq", got.exp_avg_sq, want.exp_avg_sq, i, tol.v(i));
  }
  return ratio;
}

}  // namespace dslaunch::kernels::testing
