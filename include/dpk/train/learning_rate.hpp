#pragma once
/// \file learning_rate.hpp
/// \brief Learning-rate and loss-prefactor schedules (SPEC.md section 7, 9).
///
/// The "exp" schedule is DeePMD-kit's staircase exponential decay:
///   decay_rate = (stop_lr / start_lr)^(decay_steps / numb_steps)
///   lr(step)   = max(stop_lr, start_lr * decay_rate^floor(step / decay_steps))
/// When decay_steps >= numb_steps DeePMD-kit replaces decay_steps by 100 (when
/// numb_steps / 10 > 100) or by numb_steps / 100 + 1 (integer division) before computing
/// decay_rate; dpk does the same so that both programs follow the same schedule.
///
/// Prefactors follow the unscaled learning rate, p = start * r + limit * (1 - r) with
/// r = lr(step) / start_lr (DeePMD-kit's formula; equal to limit + (start - limit) r).
/// With several workers the rate given to the optimiser is multiplied by a worker factor
/// (scale_by_worker: "linear" = n, "sqrt" = sqrt(n), "none" = 1); the prefactors and the
/// lr column of lcurve.out use the unscaled rate, as DeePMD-kit does.

#include <dpk/core/error.hpp>
#include <dpk/io/input.hpp>

#include <cmath>
#include <string>

namespace dpk {

/// DeePMD-kit's "exp" learning-rate schedule for a run of `numb_steps` steps.
class ExponentialLearningRate {
 public:
  /// Builds the schedule; throws dpk::Error on non-positive rates or steps.
  ExponentialLearningRate(double start_lr, double stop_lr, long decay_steps, long numb_steps)
      : start_lr_(start_lr), stop_lr_(stop_lr), decay_steps_(decay_steps) {
    require(start_lr > 0 && std::isfinite(start_lr),
            "learning_rate.start_lr: expected a positive number, got " + std::to_string(start_lr));
    require(stop_lr > 0 && std::isfinite(stop_lr),
            "learning_rate.stop_lr: expected a positive number, got " + std::to_string(stop_lr));
    require(decay_steps > 0,
            "learning_rate.decay_steps: expected a positive integer, got " + std::to_string(decay_steps));
    require(numb_steps > 0,
            "training.numb_steps: expected a positive integer, got " + std::to_string(numb_steps));
    if (decay_steps_ >= numb_steps) decay_steps_ = (numb_steps / 10 > 100) ? 100 : numb_steps / 100 + 1;
    decay_rate_ = std::exp(std::log(stop_lr_ / start_lr_) / (double(numb_steps) / double(decay_steps_)));
  }

  /// Builds the schedule from input.json's learning_rate section and training.numb_steps.
  static ExponentialLearningRate from_config(LearningRateConfig const& config, long numb_steps) {
    require(config.type == "exp", "learning_rate.type: only \"exp\" is implemented, got \"" + config.type + "\"");
    return ExponentialLearningRate(config.start_lr, config.stop_lr, config.decay_steps, numb_steps);
  }

  /// Unscaled learning rate at `step` (0-based).
  double value(long step) const {
    double const lr = start_lr_ * std::pow(decay_rate_, double(step / decay_steps_));
    return lr < stop_lr_ ? stop_lr_ : lr;
  }

  /// Ratio lr(step) / start_lr that drives the prefactor schedule.
  double ratio(long step) const { return value(step) / start_lr_; }

  double start_lr() const { return start_lr_; }        ///< first rate
  double stop_lr() const { return stop_lr_; }          ///< floor of the rate
  long decay_steps() const { return decay_steps_; }    ///< after DeePMD-kit's shrink rule
  double decay_rate() const { return decay_rate_; }    ///< factor per decay_steps

 private:
  double start_lr_;
  double stop_lr_;
  long decay_steps_;
  double decay_rate_ = 1.0;
};

/// One loss prefactor following the learning rate: start * r + limit * (1 - r).
inline double prefactor(double start, double limit, double lr_ratio) {
  return start * lr_ratio + limit * (1.0 - lr_ratio);
}

/// The three loss prefactors (energy, force, virial) at learning-rate ratio `lr_ratio`.
struct PrefactorValues {
  double energy = 0, force = 0, virial = 0;
};

/// Energy/force/virial prefactors from the loss section at learning-rate ratio `lr_ratio`.
inline PrefactorValues prefactors(LossConfig const& loss, double lr_ratio) {
  return {prefactor(loss.start_pref_e, loss.limit_pref_e, lr_ratio),
          prefactor(loss.start_pref_f, loss.limit_pref_f, lr_ratio),
          prefactor(loss.start_pref_v, loss.limit_pref_v, lr_ratio)};
}

/// Factor multiplying the learning rate with `workers` data-parallel workers:
/// "linear" -> workers, "sqrt" -> sqrt(workers), "none" -> 1. Throws on other names.
inline double worker_scale(std::string const& scale_by_worker, int workers) {
  require(workers >= 1, "worker_scale: expected at least one worker, got " + std::to_string(workers));
  if (scale_by_worker == "linear") return double(workers);
  if (scale_by_worker == "sqrt") return std::sqrt(double(workers));
  if (scale_by_worker == "none") return 1.0;
  throw Error("training.scale_by_worker: expected \"linear\", \"sqrt\" or \"none\", got \"" +
              scale_by_worker + "\"");
}

}  // namespace dpk
