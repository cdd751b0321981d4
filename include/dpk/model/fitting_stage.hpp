#pragma once
/// \file fitting_stage.hpp
/// \brief The energy fitting nets as a model stage: one net per centre type on the type-sorted
/// rows of D, plus the per-type energy bias; value, input-cotangent, tangent and reverse passes.
/// Every pass takes its inputs and writes its outputs as arguments; the stage keeps the nets'
/// activations (which its own later passes read) and the bias.

#include <dpk/core/env_switch.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/nn/network.hpp>

#include <algorithm>
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

  /// The fitting nets of `layout` for `ntypes` centre types on descriptors of `width` = M1 M2
  /// columns (D, M1 x M2 row-major per row).
  FittingStage(ParameterLayout const& layout, int ntypes, int width, int m2)
      : ntypes_(ntypes), width_(width), m2_(m2),
        nets_(layout.fitting_shapes, layout.fitting_buffer_offsets, "dpk::model::fitting") {
    nets_.set_transposed_weights(false);  // 1600 x 240 per net: more to transpose than it saves
    set_symmetric_head(env_switch("DPK_FITTING_SYMMETRIC_HEAD", true,
                                  "0 (full first-layer products) or 1 (D's symmetric head folded)"));
    set_energy_bias(std::vector<double>(ntypes, 0.0));
  }

  /// D's first M2 x M2 block is symmetric (D = T^T T<, SPEC.md section 5): with `on` the first
  /// fitting layer's products on the chunked host path take its M2 (M2 + 1) / 2 distinct entries
  /// against folded weights instead of all M2^2 (nn::NetworkFamily::set_symmetric_input_head;
  /// the same energies and gradients up to rounding). Default on, or
  /// DPK_FITTING_SYMMETRIC_HEAD. Takes effect at the next reserve().
  void set_symmetric_head(bool on) {
    bool const fits = m2_ > 0 && width_ % m2_ == 0 && m2_ <= width_ / m2_;  // M2 <= M1
    nets_.set_symmetric_input_head(on && fits ? m2_ : 0);
  }
  bool symmetric_head() const { return nets_.symmetric_input_head() > 0; }

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

  /// Sizes the nets' activations for the batch in `layout` and cuts its fitting rows into the
  /// blocks the passes run (cut_blocks). On host schedules where every thread gets at least
  /// min_block_rows rows, each block runs through all layers in one host thread (the nets' chunked
  /// host path, one chunk per block): one parallel region per pass instead of one per product
  /// and elementwise step, and the rows a thread makes in one layer are the rows it reads in the
  /// next. With fewer rows per thread each product is split over the threads instead (column
  /// blocks of C: a 192-atom frame on 16 threads keeps 15 threads busy, 64-row blocks only 3).
  void reserve(Layout const& layout) {
    bool chunked = false;
    int threads = 1;
    if constexpr (host_schedule_v<ExecutionSpace>) {
      int const host = std::max(1, int(ExecutionSpace().concurrency()));
      chunked = host == 1 || layout.fit_rows >= min_block_rows * host;
      if (chunked) threads = host;
    }
    int const largest = cut_blocks(layout, threads);
    nets_.set_host_chunk_rows(chunked ? largest : 0);
    nets_.reserve(std::size_t(layout.nloc()), true);
  }

  /// D (fitting-row order) -> atomic energies (atom order, bias added; 0 for atoms that are not
  /// centres) and frame energies.
  void forward(ExecutionSpace const& space, Scalar* params, Layout const& layout, Vector const& d,
               Vector const& atom_energy, Vector const& energy) {
    int const nloc = layout.nloc();
    if (!blocks_.empty()) nets_.forward_blocks(space, params, blocks_, rows(d, 0, nloc, width_));
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

  /// dE/dD (fitting-row order) with seed `ones` (1 per row) into the centres' rows [0, fit_rows)
  /// of `de_dd`. The rows of atoms that are not centres (MD ghosts) are left as they are: their
  /// dE/dD is 0 and descriptor_cotangent, its only reader, never reads them.
  void input_cotangent(ExecutionSpace const& space, Scalar* params, Layout const& layout, Vector const& ones,
                       Vector const& de_dd) {
    int const nloc = layout.nloc(), width = width_;
    if (!blocks_.empty())
      nets_.backward_input_blocks(space, params, blocks_, rows(ones, 0, nloc, 1), rows(de_dd, 0, nloc, width));
  }

  /// Tangent pass on D' (`d_tangent`), then the reverse pass with value seed c_E of each atom's
  /// frame (`energy_cotangent`, written to `seed` in fitting-row order) and tangent seed `ones`,
  /// into the gradient `grads` (added with `accumulate`, else written); with a non-empty `dl_dd`,
  /// the cotangent of D as well.
  void tangent_and_reverse(ExecutionSpace const& space, Scalar* params, Scalar* grads, Layout const& layout,
                           Vector const& d, Vector const& d_tangent, Vector const& energy_cotangent,
                           Vector const& seed, Vector const& ones, Vector const& dl_dd, bool accumulate) {
    int const nloc = layout.nloc();
    if (!blocks_.empty()) nets_.tangent_blocks(space, params, blocks_, rows(d_tangent, 0, nloc, width_));
    auto position = layout.in.position;
    int const natoms = layout.natoms;
    Kokkos::parallel_for(
        "dpk::model::fitting_seed", Kokkos::RangePolicy<ExecutionSpace>(space, 0, layout.nloc()),
        KOKKOS_LAMBDA(int const i) { seed(position(i)) = energy_cotangent(i / natoms); });
    bool const with_dl_dd = dl_dd.extent(0) > 0;
    if (!blocks_.empty())
      nets_.reverse_blocks(space, params, grads, blocks_, rows(d, 0, nloc, width_), rows(d_tangent, 0, nloc, width_),
                           rows(seed, 0, nloc, 1), rows(ones, 0, nloc, 1),
                           with_dl_dd ? rows(dl_dd, 0, nloc, width_) : Matrix(), accumulate);
  }

  /// Rows [row0, row0 + count) of a flat buffer seen as a matrix of `ncol` columns.
  static Matrix rows(Vector const& v, int row0, int count, int ncol) {
    return Matrix(v.data() + std::size_t(row0) * ncol, count, ncol);
  }

 private:
  /// blocks_ for `threads` threads: one block per type on one thread (or a device); with several
  /// host threads each type's rows cut into blocks of at most ceil(rows / threads) rows, largest
  /// first (each thread starts on its own range of consecutive blocks, nn::NetworkFamily::
  /// for_each_chunk, so the totals come out even: 128 + 64 rows on 2 threads -> 96 | 64, 32).
  /// Returns that largest block size.
  int cut_blocks(Layout const& layout, int threads) {
    int const total = layout.fit_rows;
    int const most = std::max(1, (total + threads - 1) / threads);
    blocks_.clear();
    for (int t = 0; t < ntypes_; ++t) {
      auto const [r0, r1] = layout.fitting_rows(t);
      for (int b = r0; b < r1; b += most) blocks_.push_back({t, b, std::min(r1, b + most)});
    }
    std::stable_sort(blocks_.begin(), blocks_.end(), [](nn::RowBlock const& x, nn::RowBlock const& y) {
      return x.end - x.begin > y.end - y.begin;
    });
    return most;
  }

  /// Rows per host thread below which the fitting products are split over the threads instead
  /// of the rows (see reserve).
  static constexpr int min_block_rows = 64;

  int ntypes_ = 0, width_ = 0, m2_ = 0;
  std::vector<nn::RowBlock> blocks_;
  nn::NetworkFamily<Scalar, ExecutionSpace> nets_;
  std::vector<double> bias_;
  Vector bias_dev_;
};

}  // namespace dpk
