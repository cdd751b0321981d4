#pragma once
/// \file energy_model.hpp
/// \brief The se_e2_a + energy-fitting model: energy, forces, virials, the ener loss and its
/// exact gradient with respect to every parameter (SPEC.md sections 3-8).
///
/// Data flow of one step (each stage one labelled kernel or GEMM):
/// neighbour list -> environment matrix -> embedding rows -> embedding nets -> T, D ->
/// fitting nets -> energies; then dE/dD -> A -> dE/dG -> embedding backward -> dE/dRn ->
/// force/virial products -> loss; then the adjoint v of the products -> tangent pass ->
/// combined reverse pass -> gradient (one flat buffer).

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/profiling.hpp>
#include <dpk/core/types.hpp>
#include <dpk/neighbor/coincident_atoms.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/descriptor/force_virial.hpp>
#include <dpk/descriptor/se_a.hpp>
#include <dpk/descriptor/statistics.hpp>
#include <dpk/descriptor/tabulated_embedding.hpp>
#include <dpk/model/config.hpp>
#include <dpk/model/host_batch.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/neighbor/neighbor_list.hpp>
#include <dpk/neighbor/neighbor_search.hpp>
#include <dpk/nn/network.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

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

/// Floating-point operations of one batch (2 per multiply-add of the network layers and the
/// descriptor contractions; elementwise work not counted): energies only, energies + forces,
/// and the full training gradient. See docs/performance.md for the formula.
struct FlopCount {
  double forward = 0, forces = 0, training = 0;
};

/// What the model predicts for a batch.
template <class Scalar, class MemorySpace>
struct Prediction {
  View1<Scalar, MemorySpace> energy{"dpk::Prediction::energy", 0};                ///< (nframes)
  View1<Scalar, MemorySpace> atom_energy{"dpk::Prediction::atom_energy", 0};      ///< (nloc)
  View2<Scalar, MemorySpace> force{"dpk::Prediction::force", 0, 3};               ///< (nloc, 3)
  View2<Scalar, MemorySpace> virial{"dpk::Prediction::virial", 0, 9};             ///< (nframes, 9)
  View2<Scalar, MemorySpace> atom_virial{"dpk::Prediction::atom_virial", 0, 9};  ///< (nloc, 9)
};

/// Two atoms of a batch frame (or an atom and a periodic image) closer than min_pair_distance.
/// The message names the batch frame and the atoms (0-based within the frame); the trainer
/// rethrows it naming the system and its frame.
class CoincidentAtomsError : public Error {
 public:
  CoincidentAtomsError(int frame, int atom_i, int atom_j, double distance, double limit)
      : Error(describe(frame, atom_i, atom_j, distance, limit)), frame(frame), atom_i(atom_i), atom_j(atom_j),
        distance(distance), limit(limit) {}
  int frame, atom_i, atom_j;  ///< frame of the batch; atoms within the frame, atom_i < atom_j when distinct
  double distance, limit;     ///< A

  /// "atoms I and J are R A apart (closer than LIMIT A) ..." without the frame.
  static std::string pair_text(int atom_i, int atom_j, double distance, double limit) {
    return coincident_pair_text(atom_i, atom_j, distance, limit);
  }

 private:
  static std::string describe(int frame, int atom_i, int atom_j, double distance, double limit) {
    return "frame " + std::to_string(frame) + " of the batch: " + pair_text(atom_i, atom_j, distance, limit);
  }
};

/// se_e2_a descriptor + per-type energy fitting nets, templated on precision and execution space.
/// All parameters live in one flat device buffer (`parameters()`), their gradient in another.
template <class Scalar, class ExecutionSpace>
class EnergyModel {
  static_assert(Kokkos::is_execution_space<ExecutionSpace>::value, "dpk: ExecutionSpace must be a Kokkos execution space");
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = MatrixView<Scalar, memory_space>;

  /// A model for `ntypes` atom types with the given hyperparameters (parameters zero until
  /// initialize_parameters or set_parameters; statistics avg 0 / std 1; bias 0).
  EnergyModel(DescriptorConfig const& descriptor, FittingConfig const& fitting, int ntypes)
      : descriptor_(descriptor), fitting_(fitting), ntypes_(ntypes), layout_(descriptor, fitting, ntypes),
        search_(descriptor.rcut, descriptor.sel) {
    require(ntypes >= 1, "EnergyModel: need at least one atom type");
    require(static_cast<int>(descriptor.sel.size()) == ntypes,
            "model.descriptor.sel: expected one entry per type (" + std::to_string(ntypes) + "), got " +
                std::to_string(descriptor.sel.size()));
    require(!descriptor.neuron.empty() && !fitting.neuron.empty(), "model: embedding and fitting nets need layers");
    nnei_ = descriptor.nnei();
    m1_ = descriptor.neuron.back();
    m2_ = descriptor.axis_neuron;
    require(m2_ >= 1 && m2_ <= m1_, "model.descriptor.axis_neuron: expected 1..neuron[-1] (" + std::to_string(m1_) +
                                        "), got " + std::to_string(m2_));
    sel_offset_.assign(1, 0);
    for (int s : descriptor.sel) sel_offset_.push_back(sel_offset_.back() + s);
    params_ = View1<Scalar, memory_space>("dpk::model::parameters", layout_.size);
    grad_ = View1<Scalar, memory_space>("dpk::model::gradient", layout_.size);
    embedding_ = nn::NetworkFamily<Scalar, ExecutionSpace>(layout_.embedding_shapes, layout_.embedding_offsets,
                                                           "dpk::model::embedding");
    fitting_net_ = nn::NetworkFamily<Scalar, ExecutionSpace>(layout_.fitting_shapes, layout_.fitting_offsets,
                                                             "dpk::model::fitting");
    std::size_t const n_stats = std::size_t(ntypes) * nnei_ * 4;
    set_statistics(std::vector<double>(n_stats, 0.0), std::vector<double>(n_stats, 1.0));
    set_energy_bias(std::vector<double>(ntypes, 0.0));
    embedding_.set_host_chunk_rows(default_embedding_chunk_rows());
  }

  /// Hyperparameters.
  DescriptorConfig const& descriptor() const { return descriptor_; }
  FittingConfig const& fitting() const { return fitting_; }
  int ntypes() const { return ntypes_; }
  /// Layout of the flat buffers.
  std::vector<TensorInfo> const& tensors() const { return layout_.tensors; }
  ParameterLayout const& layout() const { return layout_; }
  std::size_t num_parameters() const { return layout_.size; }
  /// Flat parameter buffer (device).
  View1<Scalar, memory_space> parameters() const { return params_; }
  /// Flat gradient buffer (device), written by loss_and_gradient.
  View1<Scalar, memory_space> gradient() const { return grad_; }

  /// SPEC.md section 5 initialisation from `seed`.
  void initialize_parameters(std::uint64_t seed) { set_parameters(initial_parameters(layout_, seed)); }
  /// Copies host values (layout order) into the parameter buffer.
  void set_parameters(std::vector<double> const& values) {
    require(values.size() == layout_.size, "EnergyModel::set_parameters: expected " + std::to_string(layout_.size) +
                                               " values, got " + std::to_string(values.size()));
    auto host = Kokkos::create_mirror_view(params_);
    for (std::size_t k = 0; k < values.size(); ++k) host(k) = static_cast<Scalar>(values[k]);
    Kokkos::deep_copy(params_, host);
  }
  /// Parameters as host doubles (layout order).
  std::vector<double> parameters_host() const { return to_host(params_); }
  /// Gradient as host doubles (layout order).
  std::vector<double> gradient_host() const { return to_host(grad_); }

  /// Normalisation statistics avg/std, shape (ntypes, nnei, 4) flattened. They must be uniform
  /// over the slots of each type block, as DeePMD-kit's statistics are.
  void set_statistics(std::vector<double> const& avg, std::vector<double> const& std_dev) {
    std::size_t const n = std::size_t(ntypes_) * nnei_ * 4;
    require(avg.size() == n && std_dev.size() == n, "EnergyModel::set_statistics: expected (ntypes, nnei, 4) = " +
                                                        std::to_string(n) + " values");
    for (int ti = 0; ti < ntypes_; ++ti)
      for (int tj = 0; tj < ntypes_; ++tj)
        for (int slot = sel_offset_[tj]; slot < sel_offset_[tj + 1]; ++slot)
          for (int c = 0; c < 4; ++c) {
            std::size_t const first = (std::size_t(ti) * nnei_ + sel_offset_[tj]) * 4 + c;
            std::size_t const here = (std::size_t(ti) * nnei_ + slot) * 4 + c;
            require(avg[here] == avg[first] && std_dev[here] == std_dev[first],
                    "EnergyModel::set_statistics: avg/std differ between slots of one type block (centre type " +
                        std::to_string(ti) + ", slot " + std::to_string(slot) +
                        "); dpk expects one value per centre type and column, as DeePMD-kit computes");
            require(std_dev[here] > 0, "EnergyModel::set_statistics: std must be positive");
          }
    avg_ = avg;
    std_ = std_dev;
    stats_.avg = View3<Scalar, memory_space>("dpk::model::avg", ntypes_, nnei_, 4);
    stats_.std = View3<Scalar, memory_space>("dpk::model::std", ntypes_, nnei_, 4);
    auto ha = Kokkos::create_mirror_view(stats_.avg);
    auto hs = Kokkos::create_mirror_view(stats_.std);
    for (int ti = 0; ti < ntypes_; ++ti)
      for (int s = 0; s < nnei_; ++s)
        for (int c = 0; c < 4; ++c) {
          std::size_t const k = (std::size_t(ti) * nnei_ + s) * 4 + c;
          ha(ti, s, c) = static_cast<Scalar>(avg[k]);
          hs(ti, s, c) = static_cast<Scalar>(std_dev[k]);
        }
    Kokkos::deep_copy(stats_.avg, ha);
    Kokkos::deep_copy(stats_.std, hs);
    empty_row_ = View3<Scalar, memory_space>("dpk::model::empty_row", ntypes_, ntypes_, 4);
    auto he = Kokkos::create_mirror_view(empty_row_);
    for (int ti = 0; ti < ntypes_; ++ti)
      for (int tj = 0; tj < ntypes_; ++tj)
        for (int c = 0; c < 4; ++c) he(ti, tj, c) = (Scalar(0) - ha(ti, sel_offset_[tj], c)) / hs(ti, sel_offset_[tj], c);
    Kokkos::deep_copy(empty_row_, he);
  }
  std::vector<double> const& statistics_avg() const { return avg_; }
  std::vector<double> const& statistics_std() const { return std_; }

  /// Computes the normalisation statistics (SPEC.md section 3) from the raw environment rows of
  /// `batches` (DeePMD-kit uses data_stat_nbatch = 10 batches) and installs them.
  void compute_statistics(ExecutionSpace const& space, std::vector<HostBatch> const& batches) {
    require(!batches.empty(), "EnergyModel::compute_statistics: no batches to compute statistics from");
    StatisticsAccumulator<Scalar, ExecutionSpace> accumulator(ntypes_, nnei_);
    EnvironmentStatistics<Scalar, memory_space> unit;
    unit.avg = View3<Scalar, memory_space>("dpk::model::stat_avg", ntypes_, nnei_, 4);
    unit.std = View3<Scalar, memory_space>("dpk::model::stat_std", ntypes_, nnei_, 4);
    Kokkos::deep_copy(unit.avg, Scalar(0));
    Kokkos::deep_copy(unit.std, Scalar(1));
    Frames<Scalar, memory_space> frames;
    Labels<Scalar, memory_space> labels;
    EnvironmentMatrix<Scalar, memory_space> raw;
    for (auto const& batch : batches) {
      upload(batch, frames, labels);
      search_.build(space, frames, nlist_);
      compute_environment_matrix(space, nlist_, frames.types, unit, descriptor_.rcut_smth, descriptor_.rcut, raw);
      accumulator.add(space, raw, frames.types, frames.nloc());
    }
    std::vector<double> avg, std_dev;
    accumulator.finalize(avg, std_dev);
    set_statistics(avg, std_dev);
  }

  /// Per-type energy bias added to every atomic energy.
  void set_energy_bias(std::vector<double> const& bias) {
    require(static_cast<int>(bias.size()) == ntypes_, "EnergyModel::set_energy_bias: expected one value per type");
    bias_ = bias;
    bias_dev_ = View1<Scalar, memory_space>("dpk::model::energy_bias", ntypes_);
    auto h = Kokkos::create_mirror_view(bias_dev_);
    for (int t = 0; t < ntypes_; ++t) h(t) = static_cast<Scalar>(bias[t]);
    Kokkos::deep_copy(bias_dev_, h);
  }
  std::vector<double> const& energy_bias() const { return bias_; }

  /// Rows per chunk of the embedding nets on host spaces (see nn::NetworkFamily::
  /// set_host_chunk_rows; 0: layer by layer over all rows). Default 128, or the environment
  /// variable DPK_EMBEDDING_CHUNK_ROWS. Takes effect at the next prepare().
  void set_embedding_chunk_rows(int rows) {
    embedding_.set_host_chunk_rows(rows);
  }
  int embedding_chunk_rows() const { return embedding_.host_chunk_rows(); }

  /// Model compression (docs/compression.md): tables of the embedding nets built from the
  /// current parameters and statistics, for inputs down to the smallest neighbour distance
  /// `rmin` (A), with DeePMD-kit's `step` and `extrapolate`. Throws dpk::Error for bad values.
  EmbeddingTableData build_embedding_table(double rmin, double step, double extrapolate) const {
    auto const range = embedding_input_range(avg_, std_, descriptor_.sel, descriptor_.type_one_side,
                                             descriptor_.rcut_smth, descriptor_.rcut, rmin);
    return dpk::build_embedding_table(layout_.embedding_shapes, layout_.embedding_offsets, parameters_host(), range,
                                      step, extrapolate);
  }
  /// Uses `table` instead of the embedding nets for energies, forces and virials (the nets'
  /// parameters stay). loss_and_gradient() then gives the fitting nets' gradient only (the
  /// tables are constants; the embedding nets' gradient is 0). An empty table (no nets)
  /// switches back to the nets.
  void set_embedding_table(EmbeddingTableData const& table) {
    if (table.nnets() == 0) {
      table_data_ = EmbeddingTableData{};
      table_ = EmbeddingTable<Scalar, memory_space>{};
      return;
    }
    int const nnets = descriptor_.type_one_side ? ntypes_ : ntypes_ * ntypes_;
    require(table.nnets() == nnets && table.m1 == m1_,
            "EnergyModel::set_embedding_table: the table has " + std::to_string(table.nnets()) + " nets of " +
                std::to_string(table.m1) + " channels, the model " + std::to_string(nnets) + " of " +
                std::to_string(m1_));
    for (int k = 0; k < nnets; ++k)
      require(table.coefficients[k].size() == std::size_t(table.ranges[k].intervals()) * 6 * m1_,
              "EnergyModel::set_embedding_table: net " + std::to_string(k) + " has the wrong number of coefficients");
    table_data_ = table;
    table_.assign(table);
  }
  /// True when energies and forces come from the embedding tables.
  bool compressed() const { return !table_.empty(); }
  /// The tables in use (host, double; no nets when not compressed).
  EmbeddingTableData const& embedding_table() const { return table_data_; }
  /// Schedule of the tabulated kernels (tests run both on the host).
  void set_table_schedule(TableSchedule schedule) { table_schedule_ = schedule; }
  /// Embedding-net inputs of the batch given to the last prepare() that fall outside the tables
  /// (0 when not compressed).
  long lookups_outside_table(ExecutionSpace const& space) const {
    return compressed() ? count_outside_table(space, in_, table_) : 0;
  }

  /// Smallest distance (A) between an atom of `frames` and any neighbour or periodic image
  /// within rcut (the range compression needs, DeePMD-kit's min_nbor_dist); +infinity when no
  /// atom has a neighbour. Replaces the neighbour list of the last prepare().
  double min_neighbor_distance(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    search_.build(space, frames, nlist_);
    auto const rij = nlist_.rij;
    auto const index = nlist_.index;
    int const nnei = nlist_.nnei;
    Kokkos::Array<int, 65> block{};
    int const nblocks = int(nlist_.sel_offset.size()) - 1;
    require(nblocks >= 0 && nblocks <= 64, "EnergyModel: neighbour list with more than 64 types");
    for (int t = 0; t < nblocks; ++t) block[t] = nlist_.sel_offset[std::size_t(t)];
    Scalar nearest2 = 0;
    // Each type block is sorted by distance: its first slot is the nearest of that type.
    Kokkos::parallel_reduce(
        "dpk::model::min_neighbor_distance", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nlist_.nloc),
        KOKKOS_LAMBDA(int const i, Scalar& lowest) {
          for (int t = 0; t < nblocks; ++t) {
            int const s = block[t];
            if (s >= nnei || index(i, s) < 0) continue;
            Scalar const r2 = rij(i, s, 0) * rij(i, s, 0) + rij(i, s, 1) * rij(i, s, 1) + rij(i, s, 2) * rij(i, s, 2);
            if (r2 < lowest) lowest = r2;
          }
        },
        Kokkos::Min<Scalar>(nearest2));
    if (nlist_.nloc == 0 || nearest2 == Kokkos::reduction_identity<Scalar>::min())
      return std::numeric_limits<double>::infinity();
    return std::sqrt(double(nearest2));
  }

  /// Neighbours dropped beyond sel, summed over every batch seen so far.
  long neighbors_dropped() const { return dropped_; }

  /// Neighbour list and normalised environment matrix of `frames` (kept for the next calls).
  /// Throws CoincidentAtomsError when two atoms (or an atom and an image) are closer than
  /// min_pair_distance: the descriptor has 1/r and would be infinite or NaN.
  void prepare(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    {
      ScopedRegion<ExecutionSpace> region("dpk::neighbors", space);
      search_.build(space, frames, nlist_);
      dropped_ += nlist_.dropped;
      check_coincident_atoms(space, frames.natoms);
    }
    {
      ScopedRegion<ExecutionSpace> region("dpk::environment", space);
      compute_environment_matrix(space, nlist_, frames.types, stats_, descriptor_.rcut_smth, descriptor_.rcut, env_);
    }
    ScopedRegion<ExecutionSpace> region("dpk::batch_setup", space);
    set_batch(space, frames.types, frames.nframes, frames.natoms, frames.centres);
  }

  /// Throws CoincidentAtomsError for the first neighbour pair of the last neighbour list
  /// closer than min_pair_distance (public: CUDA extended lambdas may not live in private members).
  void check_coincident_atoms(ExecutionSpace const& space, int natoms) const {
    auto const index = nlist_.index;
    auto const rij = nlist_.rij;
    int const nnei = nlist_.nnei;
    Scalar const limit2 = Scalar(min_pair_distance * min_pair_distance);
    // Each type block is sorted by distance: only its first slot (the nearest) is checked.
    Kokkos::Array<int, 65> block{};
    int const nblocks = int(nlist_.sel_offset.size()) - 1;
    require(nblocks >= 0 && nblocks <= 64, "EnergyModel: neighbour list with more than 64 types");
    for (int t = 0; t < nblocks; ++t) block[t] = nlist_.sel_offset[std::size_t(t)];
    long first = 0;
    Kokkos::parallel_reduce(
        "dpk::model::coincident_atoms", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nlist_.nloc),
        KOKKOS_LAMBDA(int const i, long& lowest) {
          for (int t = 0; t < nblocks; ++t) {
            int const s = block[t];
            if (s >= nnei || index(i, s) < 0) continue;
            Scalar const r2 = rij(i, s, 0) * rij(i, s, 0) + rij(i, s, 1) * rij(i, s, 1) + rij(i, s, 2) * rij(i, s, 2);
            long const code = long(i) * nnei + s;
            if (r2 < limit2 && code < lowest) lowest = code;
          }
        },
        Kokkos::Min<long>(first));
    if (nlist_.nloc == 0 || first == Kokkos::reduction_identity<long>::min()) return;
    int const i = int(first / nnei), s = int(first % nnei);
    auto const j_view = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(index, i, s));
    auto const r_view =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(rij, i, s, Kokkos::ALL()));
    double const r = std::sqrt(double(r_view(0)) * r_view(0) + double(r_view(1)) * r_view(1) +
                               double(r_view(2)) * r_view(2));
    int const j = j_view();
    throw CoincidentAtomsError(i / natoms, i % natoms, j % natoms, r, min_pair_distance);
  }

  /// Uses an externally built neighbour list and environment matrix (e.g. a test fixture).
  void prepare(ExecutionSpace const& space, NeighborList<Scalar, memory_space> const& nlist,
               EnvironmentMatrix<Scalar, memory_space> const& env, View1<int, memory_space> const& types, int nframes,
               int natoms) {
    nlist_ = nlist;
    env_ = env;
    set_batch(space, types, nframes, natoms);
  }

  /// Energies (and forces/virials when `forces`) of `frames` into `out`.
  void predict(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
               Prediction<Scalar, memory_space>& out, bool forces = true, bool atom_virial = false) {
    prepare(space, frames);
    predict_prepared(space, out, forces, atom_virial);
  }

  /// predict() on the batch given to the last prepare().
  void predict_prepared(ExecutionSpace const& space, Prediction<Scalar, memory_space>& out, bool forces,
                        bool atom_virial) {
    forward(space, out);
    if (forces) first_order(space, out, atom_virial);
  }

  /// Loss and metrics of a batch, no gradient (validation).
  LossMetrics evaluate_loss(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
                            Labels<Scalar, memory_space> const& labels, LossPrefactors prefactors) {
    prepare(space, frames);
    predict_prepared(space, pred_, true, false);
    return loss(space, labels, prefactors);
  }

  /// Loss, metrics and gradient() = dL/dparameters of a batch (SPEC.md section 8).
  LossMetrics loss_and_gradient(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
                                Labels<Scalar, memory_space> const& labels, LossPrefactors prefactors) {
    prepare(space, frames);
    return loss_and_gradient_prepared(space, labels, prefactors);
  }

  /// loss_and_gradient() on the batch given to the last prepare().
  LossMetrics loss_and_gradient_prepared(ExecutionSpace const& space, Labels<Scalar, memory_space> const& labels,
                                         LossPrefactors prefactors) {
    predict_prepared(space, pred_, true, false);
    LossMetrics metrics = loss(space, labels, prefactors);
    backward(space);
    return metrics;
  }

  /// FLOP count of the batch given to the last prepare().
  FlopCount flop_count() const {
    auto macs = [](std::vector<nn::LayerShape> const& shapes) {
      double m = 0;
      for (auto const& l : shapes) m += double(l.n_in) * l.n_out;
      return m;
    };
    double const rows = in_.rows.total_rows, nloc = in_.nloc, m1 = m1_, m2 = m2_;
    // A compressed model evaluates no embedding nets (its table lookups are not counted).
    double const emb = compressed() ? 0.0 : rows * macs(layout_.embedding_shapes);
    double const fit = nloc * macs(layout_.fitting_shapes);
    double const t = rows * m1 * 4, d = nloc * m1 * m2 * 4;  // T = G^T Rn, D = T T<^T
    FlopCount f;
    f.forward = 2 * (emb + fit + t + d);
    // dE/dD, A, dE/dG, dE/ds, dE/dRn
    f.forces = f.forward + 2 * (fit + 2 * d + t + emb + t);
    // tangent pass (emb, fit, T', D'), reverse: dW for value and tangent and dx (3 GEMMs per
    // layer), dT (4 products), dG (8 per feature)
    f.training = f.forces + 2 * (emb + fit + 2 * t + 2 * d) + 2 * (3 * (emb + fit) + 4 * d + 2 * t);
    return f;
  }

  /// The prediction of the last predict_prepared / loss call.
  Prediction<Scalar, memory_space> const& last_prediction() const { return pred_; }
  /// The neighbour list and environment matrix of the last prepare().
  NeighborList<Scalar, memory_space> const& neighbor_list() const { return nlist_; }
  EnvironmentMatrix<Scalar, memory_space> const& environment() const { return env_; }
  /// Descriptor D (nloc, M1*M2) of the last forward pass, row of atom i at position i.
  View2<Scalar, memory_space> descriptor_values(ExecutionSpace const& space) const {
    View2<Scalar, memory_space> out("dpk::model::descriptor", in_.nloc, m1_ * m2_);
    auto d = Matrix(d_.data(), in_.nloc, m1_ * m2_);
    auto position = in_.position;
    Kokkos::parallel_for(
        "dpk::model::descriptor_copy",
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {in_.nloc, m1_ * m2_}),
        KOKKOS_LAMBDA(int const i, int const c) { out(i, c) = d(position(i), c); });
    space.fence();
    return out;
  }

 private:
  /// Default rows per embedding chunk: DPK_EMBEDDING_CHUNK_ROWS if set, else 128 (measured on
  /// water: 64-512 within noise of each other, 32 slower, 0 about 15 % slower).
  static int default_embedding_chunk_rows() {
    char const* env = std::getenv("DPK_EMBEDDING_CHUNK_ROWS");
    if (env == nullptr || *env == '\0') return 128;
    char* end = nullptr;
    long const rows = std::strtol(env, &end, 10);
    require(*end == '\0' && rows >= 0 && rows <= (1 << 20),
            std::string("DPK_EMBEDDING_CHUNK_ROWS: expected a row count 0..1048576 (0: no chunks), got '") + env + "'");
    return static_cast<int>(rows);
  }

  static std::vector<double> to_host(View1<Scalar, memory_space> const& v) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    return std::vector<double>(host.data(), host.data() + host.extent(0));
  }

  static Matrix window(View1<Scalar, memory_space> const& v, int row0, int rows, int ncol) {
    return Matrix(v.data() + std::size_t(row0) * ncol, rows, ncol);
  }

 public:
  // The model's stages, in call order (prepare() does set_batch; predict_prepared() does
  // forward and first_order; loss_and_gradient_prepared() adds loss and backward). They are
  // public only because CUDA's extended lambdas may not live in private member functions;
  // call them through the entry points above.

  /// Batch bookkeeping: types, embedding row layout, type-sorted fitting positions, workspaces.
  /// Only atoms [0, centres) of each frame (all when centres < 0) go through the fitting nets:
  /// the others (ghosts, Frames::centres) sit after them in the fitting rows, with atomic energy
  /// 0 and no cotangent.
  void set_batch(ExecutionSpace const& space, View1<int, memory_space> const& types, int nframes, int natoms,
                 int centres = -1) {
    int const nloc = nframes * natoms;
    int const per_frame = centres < 0 ? natoms : centres;
    nframes_ = nframes;
    natoms_ = natoms;
    in_.nloc = nloc;
    in_.nnei = nnei_;
    in_.ntypes = ntypes_;
    in_.m1 = m1_;
    in_.m2 = m2_;
    in_.type_one_side = descriptor_.type_one_side;
    in_.types = types;
    in_.count = nlist_.count;
    in_.env = env_.rows;
    in_.empty_row = empty_row_;
    build_embedding_rows(space, nlist_.count, types, sel_offset_, nloc, descriptor_.type_one_side, in_.rows);
    embedding_blocks_.resize(in_.rows.nnets);
    for (int k = 0; k < in_.rows.nnets; ++k)
      embedding_blocks_[k] = {k, in_.rows.begin[k], in_.rows.begin[k] + in_.rows.filled[k] + ntypes_};
    // Fitting rows sorted by centre type (host: nloc integers, staged in kept host buffers).
    ensure_extent(types_host_, nloc);
    ensure_extent(position_host_, nloc);
    ensure_extent(in_.position, nloc);
    auto host_types = Kokkos::subview(types_host_, std::make_pair(0, nloc));
    auto host_position = Kokkos::subview(position_host_, std::make_pair(0, nloc));
    Kokkos::deep_copy(space, host_types, Kokkos::subview(types, std::make_pair(0, nloc)));
    space.fence();
    type_begin_.assign(ntypes_ + 1, 0);
    for (int i = 0; i < nloc; ++i) {
      int const t = host_types(i);
      require(t >= 0 && t < ntypes_, "EnergyModel: atom type " + std::to_string(t) + " outside the model's " +
                                         std::to_string(ntypes_) + " types");
      if (i % natoms < per_frame) ++type_begin_[t + 1];
    }
    for (int t = 0; t < ntypes_; ++t) type_begin_[t + 1] += type_begin_[t];
    fit_rows_ = type_begin_[ntypes_];
    in_.centre_rows = fit_rows_;
    cursor_.assign(type_begin_.begin(), type_begin_.end() - 1);
    int next_other = fit_rows_;
    for (int i = 0; i < nloc; ++i)
      host_position(i) = i % natoms < per_frame ? cursor_[host_types(i)]++ : next_other++;
    Kokkos::deep_copy(space, Kokkos::subview(in_.position, std::make_pair(0, nloc)), host_position);

    std::size_t const rows = in_.rows.total_rows;
    std::size_t const width = std::size_t(m1_) * m2_;
    if (!compressed()) {  // a compressed model evaluates no embedding rows
      embedding_.reserve(rows, true);
      ensure_extent(s_, rows);
      ensure_extent(st_, rows);
      ensure_extent(gs_, rows);
      ensure_extent(gg_, rows * m1_);
      ensure_extent(ggt_, rows * m1_);
    }
    fitting_net_.reserve(nloc, true);
    ensure_extent(t_, nloc, 4, m1_);
    ensure_extent(tt_, nloc, 4, m1_);
    ensure_extent(a_, nloc, 4, m1_);
    ensure_extent(gtm_, nloc, 4, m1_);
    ensure_extent(d_, nloc * width);
    ensure_extent(dt_, nloc * width);
    ensure_extent(gd_, nloc * width);
    ensure_extent(gdt_, nloc * width);
    ensure_extent(fit_seed_, nloc);
    ensure_extent(fit_ones_, nloc);
    ensure_extent(genv_, nloc, nnei_, 4);
    ensure_extent(v_, nloc, nnei_, 4);
    ensure_extent(cf_, nloc, 3);
    ensure_extent(cw_, nframes, 9);
    ensure_extent(ce_, nframes);
    Kokkos::deep_copy(space, fit_ones_, Scalar(1));
  }

  /// Embedding rows -> T, D -> fitting -> atomic and frame energies.
  void forward(ExecutionSpace const& space, Prediction<Scalar, memory_space>& out) {
    ScopedRegion<ExecutionSpace> region("dpk::forward", space);
    int const nloc = in_.nloc, width = m1_ * m2_;
    Scalar* params = params_.data();
    if (compressed()) {
      tabulated_descriptor(space, in_, table_, t_, Matrix(d_.data(), nloc, width), table_schedule_);
    } else {
      Matrix s(s_.data(), in_.rows.total_rows, 1);
      gather_embedding_column(space, in_, env_.rows, true, s);
      embedding_.forward_blocks(space, params, embedding_blocks_, s);
      Matrix g = embedding_.output(0, in_.rows.total_rows);
      contract_descriptor(space, in_, g, t_, Matrix(d_.data(), nloc, width));
    }
    for (int t = 0; t < ntypes_; ++t) {
      int const r0 = type_begin_[t], r1 = type_begin_[t + 1];
      if (r1 > r0) fitting_net_.forward(space, params, t, window(d_, r0, r1 - r0, width), r0, r1);
    }
    ensure_extent(out.energy, nframes_);
    ensure_extent(out.atom_energy, nloc);
    auto e_fit = fitting_net_.output(0, nloc);
    auto atom_energy = out.atom_energy;
    auto energy = out.energy;
    auto position = in_.position;
    auto types = in_.types;
    auto bias = bias_dev_;
    int const fit_rows = fit_rows_;
    Kokkos::parallel_for(
        "dpk::model::atom_energy", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int const i) {
          int const p = position(i);
          atom_energy(i) = p < fit_rows ? e_fit(p, 0) + bias(types(i)) : Scalar(0);
        });
    using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
    int const natoms = natoms_;
    Kokkos::parallel_for(
        "dpk::model::frame_energy", Kokkos::TeamPolicy<ExecutionSpace>(space, nframes_, Kokkos::AUTO),
        KOKKOS_LAMBDA(Team const& team) {
          int const f = team.league_rank();
          Scalar sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, natoms), [&](int const a, Scalar& part) { part += atom_energy(f * natoms + a); },
              sum);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { energy(f) = sum; });
        });
  }

  /// dE/dD -> A -> dE/dG -> dE/ds -> g = dE/dRn -> forces and virials.
  void first_order(ExecutionSpace const& space, Prediction<Scalar, memory_space>& out, bool atom_virial) {
    ScopedRegion<ExecutionSpace> region("dpk::forces", space);
    int const nloc = in_.nloc, width = m1_ * m2_, rows = in_.rows.total_rows;
    Scalar* params = params_.data();
    for (int t = 0; t < ntypes_; ++t) {
      int const r0 = type_begin_[t], r1 = type_begin_[t + 1];
      if (r1 > r0)
        fitting_net_.backward_input(space, params, t, r0, r1, window(fit_ones_, r0, r1 - r0, 1),
                                    window(gdt_, r0, r1 - r0, width));
    }
    if (fit_rows_ < nloc) {  // rows of atoms that are not centres: no cotangent
      auto gdt = gdt_;
      long const begin = long(fit_rows_) * width, end = long(nloc) * width;
      Kokkos::parallel_for(
          "dpk::model::zero_other_rows",
          Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<long>>(space, begin, end),
          KOKKOS_LAMBDA(long const k) { gdt(k) = Scalar(0); });
    }
    descriptor_cotangent(space, in_, Matrix(gdt_.data(), nloc, width), t_, a_, false);
    if (compressed()) {
      tabulated_environment_cotangent(space, in_, table_, a_, genv_, table_schedule_);
    } else {
      Matrix ggt(ggt_.data(), rows, m1_);
      embedding_cotangent(space, in_, a_, ggt, false);
      embedding_.backward_input_blocks(space, params, embedding_blocks_, ggt, Matrix(gs_.data(), rows, 1));
      environment_cotangent(space, in_, a_, embedding_.output(0, rows), Matrix(gs_.data(), rows, 1), genv_);
    }
    ensure_extent(out.force, nloc, 3);
    ensure_extent(out.virial, nframes_, 9);
    View2<Scalar, memory_space> atom_virial_view;
    if (atom_virial) {
      ensure_extent(out.atom_virial, nloc, 9);
      atom_virial_view = out.atom_virial;
    }
    compute_force_virial(space, genv_, env_, nlist_, natoms_, out.force, out.virial, atom_virial_view, product_work_);
  }

  /// Loss value/metrics of pred_ against `labels`; writes the cotangents cE, cF, cW.
  LossMetrics loss(ExecutionSpace const& space, Labels<Scalar, memory_space> const& labels, LossPrefactors pref) {
    ScopedRegion<ExecutionSpace> region("dpk::loss", space);
    int const nloc = in_.nloc, nframes = nframes_;
    double const natoms = natoms_;
    bool const use_virial = labels.has_virial;
    LossMetrics m;
    m.nframes = nframes;
    m.has_virial = use_virial;
    auto energy = pred_.energy;
    auto e_ref = labels.energy;
    auto ce = ce_;
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
    auto force = pred_.force;
    auto f_ref = labels.force;
    auto cf = cf_;
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
    auto virial = pred_.virial;
    auto w_ref = labels.virial;
    auto cw = cw_;
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

  /// Gradient of c_E E + S (SPEC.md section 8): adjoint of the products, tangent pass, reverse pass.
  void backward(ExecutionSpace const& space) {
    ScopedRegion<ExecutionSpace> region("dpk::backward", space);
    if (compressed()) return backward_compressed(space);
    int const nloc = in_.nloc, width = m1_ * m2_, rows = in_.rows.total_rows;
    Scalar* params = params_.data();
    Scalar* grads = grad_.data();
    // Every net's reverse pass runs once and overwrites its own gradient, except fitting nets of
    // types absent from the batch: then the whole buffer is zeroed and the passes accumulate.
    bool all_types = true;
    for (int t = 0; t < ntypes_; ++t) all_types = all_types && type_begin_[t + 1] > type_begin_[t];
    if (!all_types) Kokkos::deep_copy(space, grad_, Scalar(0));
    bool const accumulate = !all_types;
    force_virial_adjoint(space, cf_, cw_, env_, nlist_, natoms_, v_);
    // Tangent pass.
    Matrix st(st_.data(), rows, 1);
    gather_embedding_column(space, in_, v_, false, st);
    embedding_.tangent_blocks(space, params, embedding_blocks_, st);
    contract_descriptor(space, in_, embedding_.output(0, rows), tt_, Matrix(dt_.data(), nloc, width),
                        embedding_.output_tangent(0, rows), v_, t_);
    // Reverse pass through the fitting nets: value seed c_E of the atom's frame, tangent seed 1
    // (the seed of first_order's backward pass, whose cotangents it reuses; Delta = dE/dD is
    // still in gdt_ from there).
    fitting_tangent_and_reverse(space, true, accumulate);
    // gT = Gamma T< + pad(Gamma^T T) + Delta T'< + pad(Delta^T T');  gT' = A (first-order pass).
    descriptor_cotangent(space, in_, Matrix(gd_.data(), nloc, width), t_, gtm_, false);
    descriptor_cotangent(space, in_, Matrix(gdt_.data(), nloc, width), tt_, gtm_, true);
    embedding_cotangent(space, in_, gtm_, Matrix(gg_.data(), rows, m1_), true, a_, v_);
    // ggt_ still holds (1/nnei) A Rn_j from first_order (constant rows zero).
    embedding_.reverse_blocks(space, params, grads, embedding_blocks_, Matrix(s_.data(), rows, 1), st,
                              Matrix(gg_.data(), rows, m1_), Matrix(ggt_.data(), rows, m1_), Matrix(), accumulate);
  }

  /// backward() of a compressed model: the tables are constants, so only the fitting nets (and
  /// through them nothing else) get a gradient; the embedding nets' gradient is zero. Same steps
  /// as backward(): adjoint of the products, tangent pass (through the tables' derivative),
  /// reverse pass through the fitting nets.
  void backward_compressed(ExecutionSpace const& space) {
    int const nloc = in_.nloc, width = m1_ * m2_;
    Kokkos::deep_copy(space, grad_, Scalar(0));  // embedding part stays 0; fitting nets accumulate onto 0
    force_virial_adjoint(space, cf_, cw_, env_, nlist_, natoms_, v_);
    tabulated_descriptor_tangent(space, in_, table_, v_, t_, tt_, Matrix(dt_.data(), nloc, width), table_schedule_);
    fitting_tangent_and_reverse(space, false, true);
  }

  /// The fitting nets' part of backward(): tangent pass on dt_ (the descriptor's tangent), then the
  /// reverse pass with value seed c_E of each atom's frame and tangent seed 1, into the gradient
  /// (accumulated or overwritten); with `with_descriptor_cotangent`, dE/dD goes to gd_ as well.
  void fitting_tangent_and_reverse(ExecutionSpace const& space, bool with_descriptor_cotangent, bool accumulate) {
    int const nloc = in_.nloc, width = m1_ * m2_;
    Scalar* params = params_.data();
    Scalar* grads = grad_.data();
    for (int t = 0; t < ntypes_; ++t) {
      int const r0 = type_begin_[t], r1 = type_begin_[t + 1];
      if (r1 > r0) fitting_net_.tangent(space, params, t, window(dt_, r0, r1 - r0, width), r0, r1);
    }
    auto seed = fit_seed_;
    auto ce = ce_;
    auto position = in_.position;
    int const natoms = natoms_;
    Kokkos::parallel_for(
        "dpk::model::fitting_seed", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc),
        KOKKOS_LAMBDA(int const i) { seed(position(i)) = ce(i / natoms); });
    for (int t = 0; t < ntypes_; ++t) {
      int const r0 = type_begin_[t], r1 = type_begin_[t + 1], n = r1 - r0;
      if (n == 0) continue;
      fitting_net_.reverse(space, params, grads, t, window(d_, r0, n, width), window(dt_, r0, n, width), r0, r1,
                           window(fit_seed_, r0, n, 1), window(fit_ones_, r0, n, 1),
                           with_descriptor_cotangent ? window(gd_, r0, n, width) : Matrix(), accumulate);
    }
  }

 private:
  DescriptorConfig descriptor_;
  FittingConfig fitting_;
  int ntypes_ = 0, nnei_ = 0, m1_ = 0, m2_ = 0;
  std::vector<int> sel_offset_;
  ParameterLayout layout_;
  View1<Scalar, memory_space> params_, grad_;
  nn::NetworkFamily<Scalar, ExecutionSpace> embedding_, fitting_net_;
  std::vector<double> avg_, std_, bias_;
  EnvironmentStatistics<Scalar, memory_space> stats_;
  View3<Scalar, memory_space> empty_row_;
  View1<Scalar, memory_space> bias_dev_;
  NeighborSearch<Scalar, ExecutionSpace> search_;
  NeighborList<Scalar, memory_space> nlist_;
  EnvironmentMatrix<Scalar, memory_space> env_;
  long dropped_ = 0;
  int nframes_ = 0, natoms_ = 0;
  SeAInputs<Scalar, memory_space> in_;
  std::vector<int> type_begin_, cursor_;
  int fit_rows_ = 0;  ///< rows [0, fit_rows_) of the fitting input are centres (set_batch)
  std::vector<nn::RowBlock> embedding_blocks_;
  Kokkos::View<int*, Kokkos::HostSpace> types_host_{"dpk::model::types_host", 0}, position_host_{"dpk::model::position_host", 0};
  Prediction<Scalar, memory_space> pred_;
  View1<Scalar, memory_space> s_{"dpk::model::s", 0}, st_{"dpk::model::s_tangent", 0}, gs_{"dpk::model::ds", 0};
  View1<Scalar, memory_space> gg_{"dpk::model::dG", 0}, ggt_{"dpk::model::dG_tangent", 0};
  View3<Scalar, memory_space> t_{"dpk::model::T", 0, 0, 0}, tt_{"dpk::model::T_tangent", 0, 0, 0};
  View3<Scalar, memory_space> a_{"dpk::model::A", 0, 0, 0}, gtm_{"dpk::model::dT", 0, 0, 0};
  View1<Scalar, memory_space> d_{"dpk::model::D", 0}, dt_{"dpk::model::D_tangent", 0};
  View1<Scalar, memory_space> gd_{"dpk::model::dD", 0}, gdt_{"dpk::model::dD_tangent", 0};
  View1<Scalar, memory_space> fit_seed_{"dpk::model::fitting_seed", 0}, fit_ones_{"dpk::model::ones", 0};
  View3<Scalar, memory_space> genv_{"dpk::model::dE_dRn", 0, 0, 0}, v_{"dpk::model::v", 0, 0, 0};
  View2<Scalar, memory_space> cf_{"dpk::model::dL_dF", 0, 3}, cw_{"dpk::model::dL_dW", 0, 9};
  View1<Scalar, memory_space> ce_{"dpk::model::dL_dE", 0};
  ForceVirialWorkspace<Scalar, memory_space> product_work_;
  EmbeddingTableData table_data_;
  EmbeddingTable<Scalar, memory_space> table_;
  TableSchedule table_schedule_ = TableSchedule::automatic;
};

}  // namespace dpk
