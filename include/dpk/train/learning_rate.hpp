#pragma once
/// \file learning_rate.hpp
/// \brief Learning-rate and loss-prefactor schedules (SPEC.md section 7, 9).
///
/// The "exp" schedule is DeePMD-kit's staircase exponential decay:
///   decay_rate = (stop_lr / start_lr)^(decay_steps / numb_steps)
///   lr(step)   = max(stop_lr, start_lr * decay_rate^floor(step / decay_steps))
/// When decay_steps >= numb_steps DeePMD-kit replaces decay_steps by 100 (when
/// numb_steps / 10 > 100) or by numb_steps / 100 + 1 (integer division) before computing
/// decay_rate; dpk does the same so that both programs follow the same schedule. DeePMD-kit
/// 3.2's options are implemented too: a linear warmup (numb_steps above then counts the steps
/// after it), a given decay_rate, smooth decay (exponent step / decay_steps), stop_lr_ratio.
///
/// Prefactors follow the unscaled learning rate, p = limit + (start - limit) lr / start_lr
/// (DeePMD-kit's formula), computed as DeePMD-kit's TF backend does: in float32 from the float32
/// rate (ExponentialLearningRate::value_f32).
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
  /// Builds the schedule without warmup, decay rate from the two rates; throws dpk::Error on
  /// non-positive rates or steps.
  ExponentialLearningRate(double start_lr, double stop_lr, long decay_steps, long numb_steps)
      : ExponentialLearningRate(plain(start_lr, stop_lr, decay_steps), numb_steps) {}

  /// Builds the schedule of input.json's learning_rate section (DeePMD-kit 3.2's BaseLR and
  /// LearningRateExp): warmup_steps (or int(warmup_ratio x numb_steps)) steps rising linearly
  /// from warmup_start_factor x start_lr, then the decay over the remaining D = numb_steps -
  /// warmup steps: lr = max(stop_lr, start_lr x rate^e), e = floor(s / decay_steps) (smooth: s /
  /// decay_steps), s the steps since the warmup; rate = decay_rate when given, else
  /// (stop_lr / start_lr)^(decay_steps / D) with decay_steps shrunk as above when >= D.
  ExponentialLearningRate(LearningRateConfig const& config, long numb_steps)
      : start_lr_(config.start_lr),
        stop_lr_(config.stop_lr),
        decay_steps_(config.decay_steps),
        smooth_(config.smooth) {
    require(config.type == "exp", "learning_rate.type: only \"exp\" is implemented, got \"" + config.type + "\"");
    require(start_lr_ > 0 && std::isfinite(start_lr_),
            "learning_rate.start_lr: expected a positive number, got " + std::to_string(start_lr_));
    require(stop_lr_ > 0 && std::isfinite(stop_lr_),
            "learning_rate.stop_lr: expected a positive number, got " + std::to_string(stop_lr_));
    require(decay_steps_ > 0,
            "learning_rate.decay_steps: expected a positive integer, got " + std::to_string(decay_steps_));
    require(numb_steps > 0,
            "training.numb_steps: expected a positive integer, got " + std::to_string(numb_steps));
    warmup_steps_ = config.warmup_ratio ? long(*config.warmup_ratio * double(numb_steps)) : config.warmup_steps;
    require(warmup_steps_ >= 0 && warmup_steps_ < numb_steps,
            "learning_rate.warmup_steps: the warmup (" + std::to_string(warmup_steps_) +
                " steps) must be shorter than training.numb_steps (" + std::to_string(numb_steps) + ")");
    warmup_start_lr_ = config.warmup_start_factor * start_lr_;
    long const decay_total = numb_steps - warmup_steps_;
    if (config.decay_rate) {
      decay_rate_ = *config.decay_rate;
    } else {
      if (decay_steps_ >= decay_total) decay_steps_ = (decay_total / 10 > 100) ? 100 : decay_total / 100 + 1;
      double const stop = stop_lr_ < 1e-10 ? 1e-10 : stop_lr_;  // DeePMD-kit's guard against log(0)
      decay_rate_ = std::exp(std::log(stop / start_lr_) / (double(decay_total) / double(decay_steps_)));
    }
  }

  /// Builds the schedule from input.json's learning_rate section and training.numb_steps.
  static ExponentialLearningRate from_config(LearningRateConfig const& config, long numb_steps) {
    return ExponentialLearningRate(config, numb_steps);
  }

  /// Unscaled learning rate at `step` (0-based).
  double value(long step) const {
    if (step < warmup_steps_)
      return warmup_start_lr_ + (start_lr_ - warmup_start_lr_) * (double(step) / double(warmup_steps_));
    long const s = step - warmup_steps_;
    double const exponent = smooth_ ? double(s) / double(decay_steps_) : double(s / decay_steps_);
    double const lr = start_lr_ * std::pow(decay_rate_, exponent);
    return lr < stop_lr_ ? stop_lr_ : lr;
  }

  /// Ratio lr(step) / start_lr.
  double ratio(long step) const { return value(step) / start_lr_; }

  /// The rate at `step` as DeePMD-kit's TF backend uses it: value(step) rounded to float32 (its
  /// schedule is evaluated into an np.float32 tensor, deepmd/tf/utils/learning_rate.py, which
  /// feeds the loss prefactors and Adam). Training uses this one, so that a dpk run follows the
  /// same updates as DeePMD-kit's (the double rate moved the first Adam step of small-gradient
  /// weights by up to 3e-5 of the step against DeePMD-kit's, the float32 one by 1e-7).
  float value_f32(long step) const { return float(value(step)); }

  double start_lr() const { return start_lr_; }        ///< rate after the warmup
  double stop_lr() const { return stop_lr_; }          ///< floor of the decay
  long decay_steps() const { return decay_steps_; }    ///< after DeePMD-kit's shrink rule
  double decay_rate() const { return decay_rate_; }    ///< factor per decay_steps
  long warmup_steps() const { return warmup_steps_; }  ///< steps of the linear warmup (0: none)
  bool smooth() const { return smooth_; }              ///< decays every step, not in stairs

 private:
  static LearningRateConfig plain(double start_lr, double stop_lr, long decay_steps) {
    LearningRateConfig c;
    c.start_lr = start_lr;
    c.stop_lr = stop_lr;
    c.decay_steps = int(decay_steps);
    return c;
  }

  double start_lr_;
  double stop_lr_;
  long decay_steps_;
  bool smooth_ = false;
  long warmup_steps_ = 0;
  double warmup_start_lr_ = 0;
  double decay_rate_ = 1.0;
};

/// The three loss prefactors (energy, force, virial) of one step.
struct PrefactorValues {
  double energy = 0, force = 0, virial = 0;
};

/// Energy/force/virial prefactors from the loss section at `step`: limit + (start - limit) lr /
/// start_lr with the float32 rate, in float32 arithmetic, as DeePMD-kit's TF loss computes them
/// (deepmd/tf/loss/ener.py multiplies the float32 rate tensor by the Python constants).
inline PrefactorValues prefactors(LossConfig const& loss, ExponentialLearningRate const& schedule, long step) {
  float const lr = schedule.value_f32(step), start_lr = float(schedule.start_lr());
  auto const one = [&](double start, double limit) { return double(float(limit) + float(start - limit) * lr / start_lr); };
  return {one(loss.start_pref_e, loss.limit_pref_e), one(loss.start_pref_f, loss.limit_pref_f),
          one(loss.start_pref_v, loss.limit_pref_v)};
}

/// The rate given to the optimiser at `step` with worker factor `workers_factor` (worker_scale):
/// DeePMD-kit's TF backend multiplies its float32 rate tensor by the factor (in float32) and Adam
/// widens the product to the parameters' precision.
inline double optimizer_rate(ExponentialLearningRate const& schedule, long step, double worker_factor) {
  return double(schedule.value_f32(step) * float(worker_factor));
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
