#pragma once
/// \file ener_loss.hpp
/// \brief DeePMD-kit's `ener` loss (SPEC.md section 7) as the training stage after the model:
/// the loss and RMSE metrics of a Prediction against the labels, its cotangent dL/dE, dL/dF,
/// dL/dW, and the whole gradient through EnergyModel::backward.

#include <dpk/core/frames.hpp>
#include <dpk/core/profiling.hpp>
#include <dpk/core/types.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/model/prediction.hpp>

#include <cmath>

namespace dpk {

/// Loss prefactors at one step (pe, pf, pv of SPEC.md section 7).
struct LossPrefactors {
  double energy = 0, force = 0, virial = 0;
};

/// Loss and RMSE metrics of one batch (energy and virial RMSE per atom, as lcurve.out reports).
struct LossMetrics {
  double loss = 0, rmse_e = 0, rmse_f = 0, rmse_v = 0;
  int nframes = 0;
  bool has_virial = false;
};

/// Loss and metrics of `pred` (`nframes` frames of `natoms_per_frame` atoms) against `labels`,
/// and the loss's cotangent into `cotangent` (sized here; grows only).
template <class ExecutionSpace, class Scalar, class MemorySpace>
LossMetrics ener_loss(ExecutionSpace const& space, Prediction<Scalar, MemorySpace> const& pred,
                      Labels<Scalar, MemorySpace> const& labels, int nframes, int natoms_per_frame, LossPrefactors pref,
                      PredictionCotangent<Scalar, MemorySpace>& cotangent) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  ScopedRegion<ExecutionSpace> region("dpk::loss", space);
  int const nloc = nframes * natoms_per_frame;
  double const natoms = natoms_per_frame;
  bool const use_virial = labels.has_virial;
  ensure_extent(cotangent.energy, nframes);
  ensure_extent(cotangent.force, nloc, 3);
  ensure_extent(cotangent.virial, nframes, 9);
  LossMetrics m;
  m.nframes = nframes;
  m.has_virial = use_virial;
  auto energy = pred.energy;
  auto e_ref = labels.energy;
  auto ce = cotangent.energy;
  Scalar const ce_scale = static_cast<Scalar>(2.0 * pref.energy / natoms / nframes);
  double e2 = 0, f2 = 0, w2 = 0;
  Kokkos::parallel_reduce(
      "dpk::model::loss_energy", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nframes),
      KOKKOS_LAMBDA(int const f, double& sum) {
        Scalar const diff = energy(f) - e_ref(f);
        ce(f) = ce_scale * diff;
        sum += double(diff) * double(diff);
      },
      e2);
  auto force = pred.force;
  auto f_ref = labels.force;
  auto cf = cotangent.force;
  Scalar const cf_scale = static_cast<Scalar>(2.0 * pref.force / (3.0 * nloc));
  Kokkos::parallel_reduce(
      "dpk::model::loss_force", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc * 3),
      KOKKOS_LAMBDA(int const k, double& sum) {
        int const a = k / 3, d = k % 3;
        Scalar const diff = force(a, d) - f_ref(a, d);
        cf(a, d) = cf_scale * diff;
        sum += double(diff) * double(diff);
      },
      f2);
  auto virial = pred.virial;
  auto w_ref = labels.virial;
  auto cw = cotangent.virial;
  Scalar const cw_scale = use_virial ? static_cast<Scalar>(2.0 * pref.virial / natoms / (9.0 * nframes)) : Scalar(0);
  Kokkos::parallel_reduce(
      "dpk::model::loss_virial", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nframes * 9),
      KOKKOS_LAMBDA(int const k, double& sum) {
        int const f = k / 9, c = k % 9;
        Scalar const diff = use_virial ? virial(f, c) - w_ref(f, c) : Scalar(0);
        cw(f, c) = cw_scale * diff;
        sum += double(diff) * double(diff);
      },
      w2);
  double const mse_e = e2 / nframes, mse_f = f2 / (3.0 * nloc), mse_v = w2 / (9.0 * nframes);
  m.loss = pref.energy / natoms * mse_e + pref.force * mse_f + (use_virial ? pref.virial / natoms * mse_v : 0.0);
  m.rmse_e = std::sqrt(mse_e) / natoms;
  m.rmse_f = std::sqrt(mse_f);
  m.rmse_v = use_virial ? std::sqrt(mse_v) / natoms : 0.0;
  return m;
}

/// The loss stage of training: keeps the prediction and the cotangent of the last batch and
/// drives a model through prediction, loss and gradient.
template <class Scalar, class ExecutionSpace>
class EnerLoss {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Model = EnergyModel<Scalar, ExecutionSpace>;

  /// Loss and metrics of a batch, no gradient (validation).
  LossMetrics evaluate(ExecutionSpace const& space, Model& model, Frames<Scalar, memory_space> const& frames,
                       Labels<Scalar, memory_space> const& labels, LossPrefactors prefactors) {
    model.predict(space, frames, prediction_, true, false);
    return ener_loss(space, prediction_, labels, frames.nframes, frames.natoms, prefactors, cotangent_);
  }

  /// Loss, metrics and model.gradient() = dL/dparameters of a batch (SPEC.md section 8).
  LossMetrics loss_and_gradient(ExecutionSpace const& space, Model& model, Frames<Scalar, memory_space> const& frames,
                                Labels<Scalar, memory_space> const& labels, LossPrefactors prefactors) {
    model.prepare(space, frames);
    return loss_and_gradient_prepared(space, model, labels, prefactors);
  }

  /// loss_and_gradient() on the batch given to the model's last prepare().
  LossMetrics loss_and_gradient_prepared(ExecutionSpace const& space, Model& model,
                                         Labels<Scalar, memory_space> const& labels, LossPrefactors prefactors) {
    model.predict_prepared(space, prediction_, true, false);
    auto const& layout = model.batch_layout();
    LossMetrics const metrics =
        ener_loss(space, prediction_, labels, layout.nframes, layout.natoms, prefactors, cotangent_);
    model.backward(space, cotangent_);
    return metrics;
  }

  /// The prediction of the last batch.
  Prediction<Scalar, memory_space> const& prediction() const { return prediction_; }
  /// dL/dE, dL/dF, dL/dW of the last batch.
  PredictionCotangent<Scalar, memory_space> const& cotangent() const { return cotangent_; }

 private:
  Prediction<Scalar, memory_space> prediction_;
  PredictionCotangent<Scalar, memory_space> cotangent_;
};

}  // namespace dpk
