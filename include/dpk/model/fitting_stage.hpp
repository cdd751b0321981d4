#pragma once
/// \file fitting_stage.hpp
/// \brief The energy fitting nets as a model stage: one net per centre type on the type-sorted
/// rows of D, plus the per-type energy bias; value, input-cotangent, tangent and reverse passes.
/// Every pass takes its inputs and writes its outputs as arguments; the stage keeps the nets'
/// activations (which its own later passes read) and the bias.

#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/nn/network.hpp>

#include <string>
#include <vector>

namespace dpk {

/// Energy fitting stage of an EnergyModel (precision Scalar, on ExecutionSpace).
template <class Scalar, class ExecutionSpace>
class FittingStage {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = MatrixView<Scalar, memory_space>;
  using Layout = BatchLayout<Scalar, memory_space>;
  using Vector = View1<Scalar, memory_space>;

  /// The fitting nets of `layout` for `ntypes` centre types on descriptors of `width` columns.
  FittingStage(ParameterLayout const& layout, int ntypes, int width)
      : ntypes_(ntypes), width_(width),
        nets_(layout.fitting_shapes, layout.fitting_offsets, "dpk::model::fitting") {
    set_energy_bias(std::vector<double>(ntypes, 0.0));
  }

  /// Per-type energy bias added to every atomic energy.
  void set_energy_bias(std::vector<double> const& bias) {
    require(static_cast<int>(bias.size()) == ntypes_, "EnergyModel::set_energy_bias: expected one value per type");
    bias_ = bias;
    bias_dev_ = Vector("dpk::model::energy_bias", ntypes_);
    auto h = Kokkos::create_mirror_view(bias_dev_);
    for (int t = 0; t < ntypes_; ++t) h(t) = static_cast<Scalar>(bias[t]);
    Kokkos::deep_copy(bias_dev_, h);
  }
  std::vector<double> const& energy_bias() const { return bias_; }

  /// Sizes the nets' activations for the batch in `layout`.
  void reserve(Layout const& layout) { nets_.reserve(std::size_t(layout.nloc()), true); }

  /// D (fitting-row order) -> atomic energies (atom order, bias added; 0 for atoms that are not
  /// centres) and frame energies.
  void forward(ExecutionSpace const& space, Scalar* params, Layout const& layout, Vector const& d,
               Vector const& atom_energy, Vector const& energy) {
    for (int t = 0; t < ntypes_; ++t) {
      auto const [r0, r1] = layout.fitting_rows(t);
      if (r1 > r0) nets_.forward(space, params, t, rows(d, r0, r1 - r0, width_), r0, r1);
    }
    int const nloc = layout.nloc();
    auto e_fit = nets_.output(0, nloc);
    auto position = layout.in.position;
    auto types = layout.in.types;
    auto bias = bias_dev_;
    int const fit_rows = layout.fit_rows;
    Kokkos::parallel_for(
        "dpk::model::atom_energy", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int const i) {
          int const p = position(i);
          atom_energy(i) = p < fit_rows ? e_fit(p, 0) + bias(types(i)) : Scalar(0);
        });
    using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
    int const natoms = layout.natoms;
    Kokkos::parallel_for(
        "dpk::model::frame_energy", Kokkos::TeamPolicy<ExecutionSpace>(space, layout.nframes, Kokkos::AUTO),
        KOKKOS_LAMBDA(Team const& team) {
          int const f = team.league_rank();
          Scalar sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, natoms), [&](int const a, Scalar& part) { part += atom_energy(f * natoms + a); },
              sum);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { energy(f) = sum; });
        });
  }

  /// dE/dD (fitting-row order) with seed `ones` (1 per row); rows of atoms that are not centres 0.
  void input_cotangent(ExecutionSpace const& space, Scalar* params, Layout const& layout, Vector const& ones,
                       Vector const& de_dd) {
    int const nloc = layout.nloc(), width = width_;
    for (int t = 0; t < ntypes_; ++t) {
      auto const [r0, r1] = layout.fitting_rows(t);
      if (r1 > r0)
        nets_.backward_input(space, params, t, r0, r1, rows(ones, r0, r1 - r0, 1), rows(de_dd, r0, r1 - r0, width));
    }
    if (layout.fit_rows < nloc) {
      long const begin = long(layout.fit_rows) * width, end = long(nloc) * width;
      Kokkos::parallel_for(
          "dpk::model::zero_other_rows", Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<long>>(space, begin, end),
          KOKKOS_LAMBDA(long const k) { de_dd(k) = Scalar(0); });
    }
  }

  /// Tangent pass on D' (`d_tangent`), then the reverse pass with value seed c_E of each atom's
  /// frame (`energy_cotangent`, written to `seed` in fitting-row order) and tangent seed `ones`,
  /// into the gradient `grads` (added with `accumulate`, else written); with a non-empty `dl_dd`,
  /// the cotangent of D as well.
  void tangent_and_reverse(ExecutionSpace const& space, Scalar* params, Scalar* grads, Layout const& layout,
                           Vector const& d, Vector const& d_tangent, Vector const& energy_cotangent,
                           Vector const& seed, Vector const& ones, Vector const& dl_dd, bool accumulate) {
    for (int t = 0; t < ntypes_; ++t) {
      auto const [r0, r1] = layout.fitting_rows(t);
      if (r1 > r0) nets_.tangent(space, params, t, rows(d_tangent, r0, r1 - r0, width_), r0, r1);
    }
    auto position = layout.in.position;
    int const natoms = layout.natoms;
    Kokkos::parallel_for(
        "dpk::model::fitting_seed", Kokkos::RangePolicy<ExecutionSpace>(space, 0, layout.nloc()),
        KOKKOS_LAMBDA(int const i) { seed(position(i)) = energy_cotangent(i / natoms); });
    bool const with_dl_dd = dl_dd.extent(0) > 0;
    for (int t = 0; t < ntypes_; ++t) {
      auto const [r0, r1] = layout.fitting_rows(t);
      int const n = r1 - r0;
      if (n == 0) continue;
      nets_.reverse(space, params, grads, t, rows(d, r0, n, width_), rows(d_tangent, r0, n, width_), r0, r1,
                    rows(seed, r0, n, 1), rows(ones, r0, n, 1), with_dl_dd ? rows(dl_dd, r0, n, width_) : Matrix(),
                    accumulate);
    }
  }

  /// Rows [row0, row0 + count) of a flat buffer seen as a matrix of `ncol` columns.
  static Matrix rows(Vector const& v, int row0, int count, int ncol) {
    return Matrix(v.data() + std::size_t(row0) * ncol, count, ncol);
  }

 private:
  int ntypes_ = 0, width_ = 0;
  nn::NetworkFamily<Scalar, ExecutionSpace> nets_;
  std::vector<double> bias_;
  Vector bias_dev_;
};

}  // namespace dpk
