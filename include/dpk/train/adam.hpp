#pragma once
/// \file adam.hpp
/// \brief Adam over one flat parameter buffer (SPEC.md section 7), as TensorFlow applies it.
///
/// With gradient g at step t = 1, 2, ... (t counts updates already applied plus one):
///   m     = beta1 m + (1 - beta1) g
///   v     = beta2 v + (1 - beta2) g^2
///   lr_t  = lr sqrt(1 - beta2^t) / (1 - beta1^t)
///   theta = theta - lr_t m / (sqrt(v) + epsilon)
/// This is TensorFlow's `tf.train.AdamOptimizer` (the optimiser DeePMD-kit's TF backend uses):
/// the bias correction is folded into the step size and epsilon is added to sqrt(v) (not to
/// the bias-corrected sqrt(v_hat) as in the paper's Algorithm 1), so epsilon acts as
/// epsilon / sqrt(1 - beta2^t) in the paper's notation. lr_t is computed in double on the host
/// and applied in `Scalar`; one kernel updates m, v and the parameters.

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/home_ranges.hpp>
#include <dpk/core/nontemporal.hpp>
#include <dpk/core/types.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace dpk {

namespace detail {
/// One element's Adam update (the same arithmetic on every schedule; a namespace-scope type, as
/// CUDA's extended lambdas may not capture private member types).
template <class Scalar>
struct AdamUpdate {
  Scalar beta1, beta2, one_minus_beta1, one_minus_beta2, lr_t, epsilon;
  KOKKOS_INLINE_FUNCTION void operator()(Scalar const g, Scalar& m, Scalar& v, Scalar& theta) const {
    Scalar const mi = beta1 * m + one_minus_beta1 * g;
    Scalar const vi = beta2 * v + one_minus_beta2 * g * g;
    m = mi;
    v = vi;
    theta -= lr_t * mi / (math::sqrt(vi) + epsilon);
  }
};
}  // namespace detail

/// Adam hyperparameters (DeePMD-kit's defaults).
struct AdamConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
};

/// Adam state (first and second moments, step count) for one flat buffer of `size` values in
/// the memory space of `ExecutionSpace`.
template <class Scalar, class ExecutionSpace>
class Adam {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = memory_space_t<ExecutionSpace>;

  /// Zero moments for `size` parameters.
  explicit Adam(std::size_t size, AdamConfig config = {})
      : config_(config),
        m_(zeroed_vector<Scalar, memory_space>("dpk::train::adam::m", size)),
        v_(zeroed_vector<Scalar, memory_space>("dpk::train::adam::v", size)) {}

  /// Applies one update with learning rate `lr` (already scaled by workers) to `parameters`
  /// from `gradient`; both must have `size()` entries.
  void step(ExecutionSpace const& space, View1<Scalar, memory_space> const& parameters,
            View1<Scalar, memory_space> const& gradient, double lr) {
    require(parameters.extent(0) == m_.extent(0) && gradient.extent(0) == m_.extent(0),
            "Adam::step: parameter/gradient size " + std::to_string(parameters.extent(0)) + "/" +
                std::to_string(gradient.extent(0)) + " differs from the optimiser's " +
                std::to_string(m_.extent(0)));
    ++step_;
    double const t = double(step_);
    double const lr_t_d = lr * std::sqrt(1.0 - std::pow(config_.beta2, t)) / (1.0 - std::pow(config_.beta1, t));
    Scalar const lr_t = Scalar(lr_t_d);
    Scalar const beta1 = Scalar(config_.beta1), beta2 = Scalar(config_.beta2);
    Scalar const one_minus_beta1 = Scalar(1.0 - config_.beta1), one_minus_beta2 = Scalar(1.0 - config_.beta2);
    Scalar const epsilon = Scalar(config_.epsilon);
    detail::AdamUpdate<Scalar> const update{beta1, beta2, one_minus_beta1, one_minus_beta2, lr_t, epsilon};
    auto m = m_;
    auto v = v_;
    std::size_t const n = m.extent(0);
    if constexpr (host_schedule_v<ExecutionSpace>) {
      // Blocks of plain loops over raw pointers: they vectorise (where the compiler may inline
      // sqrt without errno, e.g. GCC with -fno-math-errno as in dpk's presets), while a
      // RangePolicy body reloads the views' pointers for every element. With several threads
      // (docs/performance.md, "Twenty-eighth session") each keeps its home range of blocks from
      // step to step (HomeRanges), so its m and v stay in its own caches, and the new parameters,
      // which every thread has read in the step, go out through plain or streaming stores (a
      // tile at a time, copy_streaming), whichever took less time when last used: with the
      // threads on far-apart cores plain stores wait for the other copies' invalidation line by
      // line (1.0-1.6 against 0.45 ms per float32 water step), with close ones streaming stores
      // cost more (0.6 against 0.2-0.4 ms). The other kind is re-timed every 16th step. Both
      // give the same bits.
      constexpr std::size_t block = 8192, tile = 512;
      Scalar* const p = parameters.data();
      Scalar* const mp = m.data();
      Scalar* const vp = v.data();
      Scalar const* const gp = gradient.data();
      bool const threads = space.concurrency() > 1;  // one thread: plain stores, data stays cached
      bool const stream = threads && (step_ % 16 == 0 ? !stream_faster_ : stream_faster_);
      auto const start = std::chrono::steady_clock::now();
      home_ranges_.run(space, "dpk::train::adam::step", int((n + block - 1) / block), [=](int, int const k) {
        std::size_t const begin = std::size_t(k) * block, end = begin + block < n ? begin + block : n;
        if (!stream) {
          DPK_SIMD_LOOP
          for (std::size_t i = begin; i < end; ++i) update(gp[i], mp[i], vp[i], p[i]);
          return;
        }
        alignas(64) Scalar theta[tile];
        for (std::size_t t0 = begin; t0 < end; t0 += tile) {
          std::size_t const count = end - t0 < tile ? end - t0 : tile;
          DPK_SIMD_LOOP
          for (std::size_t j = 0; j < count; ++j) {
            theta[j] = p[t0 + j];
            update(gp[t0 + j], mp[t0 + j], vp[t0 + j], theta[j]);
          }
          copy_streaming(p + t0, theta, count);
        }
      });
      if (threads) {
        seconds_[stream ? 1 : 0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        stream_faster_ = seconds_[1] < seconds_[0];  // an untimed kind (0) is tried next
      }
    } else {
      Kokkos::parallel_for(
          "dpk::train::adam::step", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
          KOKKOS_LAMBDA(std::size_t const i) { update(gradient(i), m(i), v(i), parameters(i)); });
    }
  }

  std::size_t size() const { return m_.extent(0); }                  ///< parameters covered
  long step_count() const { return step_; }                           ///< updates applied
  void set_step_count(long step) { step_ = step; }                   ///< for restarts
  View1<Scalar, memory_space> const& first_moment() const { return m_; }   ///< m
  View1<Scalar, memory_space> const& second_moment() const { return v_; }  ///< v
  AdamConfig const& config() const { return config_; }              ///< hyperparameters

  /// Moments as host doubles (exact for float and double), for checkpoints.
  std::vector<double> first_moment_host() const { return to_host(m_); }
  std::vector<double> second_moment_host() const { return to_host(v_); }
  /// Restores moments and step count (e.g. from a checkpoint); sizes must match.
  void set_state(std::vector<double> const& m, std::vector<double> const& v, long step) {
    require(m.size() == m_.extent(0) && v.size() == v_.extent(0),
            "Adam::set_state: moment sizes " + std::to_string(m.size()) + "/" + std::to_string(v.size()) +
                " differ from the optimiser's " + std::to_string(m_.extent(0)));
    from_host(m, m_);
    from_host(v, v_);
    step_ = step;
  }

 private:
  static std::vector<double> to_host(View1<Scalar, memory_space> const& view) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    return std::vector<double>(host.data(), host.data() + host.extent(0));
  }
  static void from_host(std::vector<double> const& values, View1<Scalar, memory_space> const& view) {
    auto host = Kokkos::create_mirror_view(view);
    for (std::size_t i = 0; i < values.size(); ++i) host(i) = Scalar(values[i]);
    Kokkos::deep_copy(view, host);
  }

  AdamConfig config_;
  View1<Scalar, memory_space> m_;
  View1<Scalar, memory_space> v_;
  long step_ = 0;
  HomeRanges home_ranges_;  ///< the host schedule of step() with several threads
  bool stream_faster_ = false;                    ///< streaming stores took less time when last timed
  double seconds_[2] = {0, 0};                    ///< host step() time with plain / streaming stores
};

}  // namespace dpk
