#pragma once
/// \file energy_model.hpp
/// \brief The se_e2_a + energy-fitting model: energies, forces, virials and the exact gradient of
/// any scalar of them (a loss, train/ener_loss.hpp) with respect to every parameter
/// (SPEC.md sections 3-8), composed of two stages with explicit data flow:
///
///   DescriptorStage (model/descriptor_stage.hpp): neighbours -> environment matrix -> embedding
///     rows -> embedding nets (or tables) -> T, D, and back;
///   FittingStage (model/fitting_stage.hpp): D -> per-type fitting nets -> energies, and back;
///
/// with the force/virial products (descriptor/force_virial.hpp) between them. Every buffer of a
/// batch lives in one ModelWorkspace (model/workspace.hpp, with the table of who writes and reads
/// each); the stages take them as arguments. One training step:
/// prepare (neighbours, environment, layout) -> forward (D, energies) -> first_order (dE/dD, A,
/// dE/dRn, forces, virials) -> [loss: cotangents] -> backward (adjoint v of the products ->
/// tangent pass -> reverse pass -> gradient, one flat buffer).

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/profiling.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/force_virial.hpp>
#include <dpk/descriptor/statistics.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/model/batch_setup_cache.hpp>
#include <dpk/model/config.hpp>
#include <dpk/model/descriptor_stage.hpp>
#include <dpk/model/fitting_stage.hpp>
#include <dpk/model/host_batch.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/model/prediction.hpp>
#include <dpk/model/workspace.hpp>
#include <dpk/neighbor/nearest_neighbors.hpp>
#include <dpk/nn/network.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dpk {

/// Floating-point operations of one batch (2 per multiply-add of the network layers and the
/// descriptor contractions; elementwise work not counted): energies only, energies + forces,
/// and the full training gradient. See docs/performance.md for the formula.
struct FlopCount {
  double forward = 0, forces = 0, training = 0;
};

/// se_e2_a descriptor + per-type energy fitting nets, templated on precision and execution space.
/// All parameters live in one flat device buffer (`parameters()`), their gradient in another,
/// each tensor at its ParameterLayout::buffer_offsets entry (tensors start on cache lines; the
/// host-side exchanges, set_parameters / parameters_host / gradient_host, use the packed order).
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
      : descriptor_(descriptor), fitting_(fitting), ntypes_(checked_ntypes(descriptor, fitting, ntypes)),
        layout_(descriptor, fitting, ntypes), descriptor_stage_(descriptor, layout_, ntypes),
        fitting_stage_(layout_, ntypes, descriptor.neuron.back() * descriptor.axis_neuron, descriptor.axis_neuron) {
    params_ = zeroed_vector<Scalar, memory_space>("dpk::model::parameters", layout_.buffer_size);
    grad_ = zeroed_vector<Scalar, memory_space>("dpk::model::gradient", layout_.buffer_size);
  }

  /// Hyperparameters.
  DescriptorConfig const& descriptor() const { return descriptor_; }
  FittingConfig const& fitting() const { return fitting_; }
  int ntypes() const { return ntypes_; }
  /// Layout of the flat buffers.
  std::vector<TensorInfo> const& tensors() const { return layout_.tensors; }
  ParameterLayout const& layout() const { return layout_; }
  /// Number of parameters (the packed order's length).
  std::size_t num_parameters() const { return layout_.size; }
  /// Length of the parameter and gradient buffers (num_parameters plus the gaps between tensors).
  std::size_t buffer_size() const { return layout_.buffer_size; }
  /// Flat parameter buffer (device), in buffer order (layout().buffer_offsets).
  View1<Scalar, memory_space> parameters() const { return params_; }
  /// Flat gradient buffer (device, buffer order), written by backward(); zero between tensors.
  View1<Scalar, memory_space> gradient() const { return grad_; }

  /// SPEC.md section 5 initialisation from `seed`.
  void initialize_parameters(std::uint64_t seed) { set_parameters(initial_parameters(layout_, seed)); }
  /// Copies host values (packed layout order) into the parameter buffer.
  void set_parameters(std::vector<double> const& values) {
    require(values.size() == layout_.size, "EnergyModel::set_parameters: expected " + std::to_string(layout_.size) +
                                               " values, got " + std::to_string(values.size()));
    std::vector<double> const placed = layout_.to_buffer(values);
    auto host = Kokkos::create_mirror_view(params_);
    for (std::size_t k = 0; k < placed.size(); ++k) host(k) = static_cast<Scalar>(placed[k]);
    Kokkos::deep_copy(params_, host);
  }
  /// Parameters as host doubles (packed layout order).
  std::vector<double> parameters_host() const { return layout_.to_packed(to_host(params_)); }
  /// Gradient as host doubles (packed layout order).
  std::vector<double> gradient_host() const { return layout_.to_packed(to_host(grad_)); }

  /// Normalisation statistics avg/std, shape (ntypes, nnei, 4) flattened. They must be uniform
  /// over the slots of each type block, as DeePMD-kit's statistics are.
  void set_statistics(std::vector<double> const& avg, std::vector<double> const& std_dev) {
    descriptor_stage_.set_statistics(avg, std_dev);
    forget_setups();
  }
  std::vector<double> const& statistics_avg() const { return descriptor_stage_.statistics_avg(); }
  std::vector<double> const& statistics_std() const { return descriptor_stage_.statistics_std(); }
  /// Computes the normalisation statistics (SPEC.md section 3) from the raw environment rows of
  /// `batches` (DeePMD-kit uses data_stat_nbatch = 10 batches) and installs them.
  void compute_statistics(ExecutionSpace const& space, std::vector<HostBatch> const& batches) {
    require(!batches.empty(), "EnergyModel::compute_statistics: no batches to compute statistics from");
    StatisticsAccumulator<Scalar, ExecutionSpace> accumulator(ntypes_, descriptor_stage_.nnei());
    Frames<Scalar, memory_space> frames;
    Labels<Scalar, memory_space> labels;
    for (auto const& batch : batches) {
      upload(batch, frames, labels);
      accumulator.add(space, raw_environment(space, frames), frames.types, frames.nloc());
    }
    std::vector<double> avg, std_dev;
    accumulator.finalize(avg, std_dev);
    set_statistics(avg, std_dev);
  }
  /// Neighbour list and raw environment rows (avg 0, std 1) of `frames`, the input of the
  /// statistics (replaces the last prepare()'s; counts dropped neighbours and checks for
  /// coincident atoms as prepare() does).
  EnvironmentMatrix<Scalar, memory_space> const& raw_environment(ExecutionSpace const& space,
                                                                 Frames<Scalar, memory_space> const& frames) {
    own_setup();
    neighbors(space, frames);
    descriptor_stage_.raw_environment(space, work_.nlist, frames.types, work_.env);
    return work_.env;
  }

  /// Per-type energy bias added to every atomic energy.
  void set_energy_bias(std::vector<double> const& bias) { fitting_stage_.set_energy_bias(bias); }
  std::vector<double> const& energy_bias() const { return fitting_stage_.energy_bias(); }

  /// Rows per chunk of the embedding nets on host spaces (see nn::NetworkFamily::
  /// set_host_chunk_rows; 0: layer by layer over all rows). Default 128, or the environment
  /// variable DPK_EMBEDDING_CHUNK_ROWS. Takes effect at the next prepare().
  void set_embedding_chunk_rows(int rows) {
    descriptor_stage_.set_embedding_chunk_rows(rows);
    forget_setups();
  }
  int embedding_chunk_rows() const { return descriptor_stage_.embedding_chunk_rows(); }
  /// Unit input tangents in the chunked embedding passes (DescriptorStage::
  /// set_embedding_unit_tangents; default on, or DPK_EMBEDDING_UNIT_TANGENTS). Takes effect at
  /// the next prepare().
  void set_embedding_unit_tangents(bool on) {
    descriptor_stage_.set_embedding_unit_tangents(on);
    forget_setups();
  }
  bool embedding_unit_tangents() const { return descriptor_stage_.embedding_unit_tangents(); }
  /// Same-type pairs share their embedding row (DescriptorStage::set_embedding_pair_rows; default
  /// on, or DPK_EMBEDDING_PAIR_ROWS; used with unit tangents on host chunks). Takes effect at the
  /// next prepare().
  void set_embedding_pair_rows(bool on) {
    descriptor_stage_.set_embedding_pair_rows(on);
    forget_setups();
  }
  bool embedding_pair_rows() const { return descriptor_stage_.embedding_pair_rows(); }

  /// D's symmetric head in the first fitting layer's products (FittingStage::set_symmetric_head;
  /// default on, or DPK_FITTING_SYMMETRIC_HEAD). Takes effect at the next prepare().
  void set_fitting_symmetric_head(bool on) {
    fitting_stage_.set_symmetric_head(on);
    forget_setups();
  }
  bool fitting_symmetric_head() const { return fitting_stage_.symmetric_head(); }

  /// Model compression (docs/compression.md): tables of the embedding nets built from the
  /// current parameters and statistics, for inputs down to the smallest neighbour distance
  /// `rmin` (A), with DeePMD-kit's `step` and `extrapolate`. Throws dpk::Error for bad values.
  EmbeddingTableData build_embedding_table(double rmin, double step, double extrapolate) const {
    return descriptor_stage_.build_embedding_table(parameters_host(), rmin, step, extrapolate);
  }
  /// Uses `table` instead of the embedding nets for energies, forces and virials (the nets'
  /// parameters stay). backward() then gives the fitting nets' gradient only (the tables are
  /// constants; the embedding nets' gradient is 0). An empty table (no nets) switches back.
  void set_embedding_table(EmbeddingTableData const& table) {
    descriptor_stage_.set_embedding_table(table);
    forget_setups();
  }
  /// True when energies and forces come from the embedding tables.
  bool compressed() const { return descriptor_stage_.compressed(); }
  /// The tables in use (host, double; no nets when not compressed).
  EmbeddingTableData const& embedding_table() const { return descriptor_stage_.embedding_table(); }
  /// Schedule of the tabulated kernels (tests run both on the host).
  void set_table_schedule(TableSchedule schedule) { descriptor_stage_.set_table_schedule(schedule); }
  /// Embedding-net inputs of the batch given to the last prepare() that fall outside the tables
  /// (0 when not compressed).
  long lookups_outside_table(ExecutionSpace const& space) const {
    return descriptor_stage_.lookups_outside_table(space, work_.layout);
  }

  /// Smallest distance (A) between an atom of `frames` and any neighbour or periodic image
  /// within rcut (the range compression needs, DeePMD-kit's min_nbor_dist); +infinity when no
  /// atom has a neighbour. Replaces the neighbour list of the last prepare().
  double min_neighbor_distance(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    own_setup();
    descriptor_stage_.neighbors(space, frames, work_.nlist);
    return dpk::min_neighbor_distance(space, work_.nlist);
  }

  /// Neighbours dropped beyond sel, summed over every batch given to prepare().
  long neighbors_dropped() const { return dropped_; }

  /// Neighbour list, normalised environment matrix and row layout of `frames` (kept in the
  /// workspace for the next calls). Throws CoincidentAtomsError when two atoms (or an atom and an
  /// image) are closer than min_pair_distance: the descriptor has 1/r and would be infinite or NaN.
  void prepare(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    own_setup();
    neighbors(space, frames);
    {
      ScopedRegion<ExecutionSpace> region("dpk::environment", space);
      descriptor_stage_.environment(space, work_.nlist, frames.types, work_.env);
    }
    ScopedRegion<ExecutionSpace> region("dpk::batch_setup", space);
    set_batch(space, frames.types, frames.nframes, frames.natoms, frames.centres, frames.image_of);
  }

  /// prepare() for a batch that `key` names (e.g. a training frame: system and frame index), with
  /// the setup kept per key (model/batch_setup_cache.hpp): a batch whose key was prepared before
  /// reuses that setup (the same neighbour list, environment matrix and row layout; its dropped
  /// neighbours counted again) instead of building it. The caller promises that a key always
  /// names the same coordinates, box, types and centres.
  void prepare(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames, std::uint64_t key) {
    if (auto const* kept = setup_cache_.find(key);
        kept != nullptr && kept->setup.layout.nloc() == frames.nloc() && kept->setup.layout.natoms == frames.natoms) {
      ScopedRegion<ExecutionSpace> region("dpk::kept_setup", space);
      if (!work_setup_kept_) own_ = {work_.nlist, work_.env, work_.layout};
      work_.nlist = kept->setup.nlist;
      work_.env = kept->setup.env;
      work_.layout = kept->setup.layout;
      work_.layout.in.types = frames.types;  // this batch's upload (the same values)
      work_.layout.in.empty_row = descriptor_stage_.empty_row();
      work_setup_kept_ = true;
      dropped_ += kept->dropped;
      reserve_stages(space);
      return;
    }
    own_setup();
    if (setup_cache_.taking() && work_.nlist.index.extent(0) != std::size_t(frames.nloc())) {
      // Sized for another batch (e.g. the statistics' many frames): the kept copy would carry
      // the excess, so build into Views of this batch's size. (Not once nothing more is kept:
      // then the Views stay as sized, as for a prepare without a key.)
      auto const sel_offset = work_.layout.in.rows.sel_offset;  // the model's slot offsets, filled once
      work_.nlist = NeighborList<Scalar, memory_space>();
      work_.env = EnvironmentMatrix<Scalar, memory_space>();
      work_.layout = BatchLayout<Scalar, memory_space>();
      work_.layout.in.rows.sel_offset = sel_offset;
    }
    prepare(space, frames);
    setup_cache_.insert(space, key, {work_.nlist, work_.env, work_.layout}, work_.nlist.dropped);
  }
  /// The setups kept by prepare(space, frames, key).
  BatchSetupCache<Scalar, ExecutionSpace> const& kept_setups() const { return setup_cache_; }
  /// Byte budget of the kept setups (default DPK_SETUP_CACHE_MB or 1024 MiB; 0 keeps none).
  void set_kept_setup_budget(std::size_t bytes) { setup_cache_.set_budget(bytes); }

  /// Uses an externally built neighbour list and environment matrix (e.g. a test fixture).
  void prepare(ExecutionSpace const& space, NeighborList<Scalar, memory_space> const& nlist,
               EnvironmentMatrix<Scalar, memory_space> const& env, View1<int, memory_space> const& types, int nframes,
               int natoms) {
    own_setup();
    work_.nlist = nlist;
    work_.env = env;
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
    forward(space, out, forces);
    if (forces) first_order(space, out, atom_virial);
  }

  /// Gradient of c_E E + S with respect to every parameter into gradient() (SPEC.md section 8),
  /// where c_E, c_F, c_W are `cotangent` (dL/dE, dL/dF, dL/dW of a loss L) and S = c_F . F + c_W . W:
  /// the adjoint of the products, a tangent pass and one reverse pass. Needs predict_prepared()
  /// with forces on the same batch first (it reuses that pass's dE/dD, A and dE/dG).
  void backward(ExecutionSpace const& space, PredictionCotangent<Scalar, memory_space> const& cotangent) {
    ScopedRegion<ExecutionSpace> region("dpk::backward", space);
    auto& w = work_;
    auto const& batch = w.layout;
    int const nloc = batch.nloc();
    Scalar* params = params_.data();
    Scalar* grads = grad_.data();
    // Every net's reverse pass runs once and overwrites its own gradient, except when a compressed
    // model's embedding part must stay zero or a type is absent from the batch (its fitting net
    // has no rows): then the whole buffer is zeroed and the passes accumulate.
    bool const accumulate = compressed() || !batch.all_types_present();
    if (accumulate) Kokkos::deep_copy(space, grad_, Scalar(0));
    force_virial_adjoint(space, cotangent.force, cotangent.virial, w.env, w.nlist, batch.natoms, w.v);
    {
      ScopedRegion<ExecutionSpace> stage("dpk::embedding", space);
      descriptor_stage_.tangent(space, params, batch, w.v, w.t, embedding_matrix(w.s_tangent, 1), w.t_tangent,
                                d_matrix(w.d_tangent, nloc));
    }
    {
      // Reverse pass through the fitting nets: value seed c_E of the atom's frame, tangent seed 1
      // (the seed of first_order's pass, whose cotangents it reuses: Delta = dE/dD is w.de_dd).
      ScopedRegion<ExecutionSpace> stage("dpk::fitting", space);
      fitting_stage_.tangent_and_reverse(space, params, grads, batch, w.d, w.d_tangent, cotangent.energy,
                                         w.fitting_seed, w.ones,
                                         compressed() ? View1<Scalar, memory_space>() : w.dl_dd, accumulate);
    }
    ScopedRegion<ExecutionSpace> stage("dpk::embedding", space);
    descriptor_stage_.reverse(space, params, grads, batch, d_matrix(w.dl_dd, nloc), d_matrix(w.de_dd, nloc), w.t,
                              w.t_tangent, w.a, w.v, embedding_matrix(w.s, 1), embedding_matrix(w.s_tangent, 1),
                              embedding_matrix(w.de_dg, m1()), w.dl_dt, embedding_matrix(w.dl_dg, m1()),
                              accumulate);
  }

  /// FLOP count of the batch given to the last prepare(): the products executed (with paired
  /// embedding rows, a shared row's nets run once; its per-slot contractions are counted twice).
  FlopCount flop_count() const {
    auto macs = [](std::vector<nn::LayerShape> const& shapes) {
      double m = 0;
      for (auto const& l : shapes) m += double(l.n_in) * l.n_out;
      return m;
    };
    auto const& rs = work_.layout.in.rows;
    double const rows = work_.layout.embedding_rows(), nloc = work_.layout.nloc(), m1 = this->m1(), m2 = this->m2();
    double const slots = rows + (rs.paired ? rs.shared_rows : 0);  // paired rows serve two slots
    // A compressed model evaluates no embedding nets (its table lookups are not counted).
    double const emb = compressed() ? 0.0 : rows * macs(layout_.embedding_shapes);
    double const fit = nloc * macs(layout_.fitting_shapes);
    double const t = slots * m1 * 4, d = nloc * m1 * m2 * 4;  // T = G^T Rn, D = T T<^T
    FlopCount f;
    f.forward = 2 * (emb + fit + t + d);
    // dE/dD, A, dE/dG, dE/ds, dE/dRn
    f.forces = f.forward + 2 * (fit + 2 * d + t + emb + t);
    // tangent pass (emb, fit, T', D'), reverse: dW for value and tangent and dx (3 GEMMs per
    // layer), dT (4 products), dG (8 per feature)
    f.training = f.forces + 2 * (emb + fit + 2 * t + 2 * d) + 2 * (3 * (emb + fit) + 4 * d + 2 * t);
    return f;
  }

  /// The neighbour list and environment matrix of the last prepare().
  NeighborList<Scalar, memory_space> const& neighbor_list() const { return work_.nlist; }
  EnvironmentMatrix<Scalar, memory_space> const& environment() const { return work_.env; }
  /// Row layout of the batch given to the last prepare().
  BatchLayout<Scalar, memory_space> const& batch_layout() const { return work_.layout; }
  /// Descriptor D (nloc, M1*M2) of the last forward pass, row of atom i at position i.
  View2<Scalar, memory_space> descriptor_values(ExecutionSpace const& space) const {
    int const nloc = work_.layout.nloc(), width = m1() * m2();
    View2<Scalar, memory_space> out("dpk::model::descriptor", nloc, width);
    auto d = Matrix(work_.d.data(), nloc, width);
    auto position = work_.layout.in.position;
    Kokkos::parallel_for(
        "dpk::model::descriptor_copy", Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {nloc, width}),
        KOKKOS_LAMBDA(int const i, int const c) { out(i, c) = d(position(i), c); });
    space.fence();
    return out;
  }

  /// Neighbour list of `frames` into the workspace; counts dropped neighbours, checks for
  /// coincident atoms.
  void neighbors(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    ScopedRegion<ExecutionSpace> region("dpk::neighbors", space);
    descriptor_stage_.neighbors(space, frames, work_.nlist);
    dropped_ += work_.nlist.dropped;
    check_coincident_neighbors(space, work_.nlist, frames.natoms);
  }

  // The model's passes, in call order (prepare() does set_batch; predict_prepared() does forward
  // and first_order; a loss then calls backward). Public only because CUDA's extended lambdas
  // may not live in private member functions; call them through the entry points above.

  /// Row layout of the batch and workspace sizes. Only atoms [0, centres) of each frame (all when
  /// centres < 0) go through the fitting nets (BatchLayout).
  void set_batch(ExecutionSpace const& space, View1<int, memory_space> const& types, int nframes, int natoms,
                 int centres = -1, View1<int, memory_space> const& image_of = {}) {
    auto& w = work_;
    w.layout.build(space, w.nlist.count, w.env.rows, descriptor_stage_.empty_row(), types,
                   descriptor_stage_.sel_offset(), m1(), m2(), descriptor_.type_one_side, nframes, natoms, centres,
                   w.nlist.rows_searched(),
                   4 * descriptor_stage_.embedding_chunk_rows(),  // parts of at least 4 chunks
                   descriptor_stage_.pair_rows() ? w.nlist.index : View2<int, memory_space>(),
                   descriptor_stage_.pair_rows() ? w.nlist.rij : View3<Scalar, memory_space>(), image_of);
    reserve_stages(space);
  }

  /// Sizes the stages and the workspace for the batch in work_.layout.
  void reserve_stages(ExecutionSpace const& space) {
    auto& w = work_;
    descriptor_stage_.reserve(w.layout);
    fitting_stage_.reserve(w.layout);
    w.reserve(space, descriptor_stage_.nnei(), m1(), m2(), !compressed(), !descriptor_stage_.embedding_host_chunks());
  }

  /// Descriptor D -> fitting nets -> atomic and frame energies (`forces`: first_order follows).
  void forward(ExecutionSpace const& space, Prediction<Scalar, memory_space>& out, bool forces) {
    ScopedRegion<ExecutionSpace> region("dpk::forward", space);
    auto& w = work_;
    int const nloc = w.layout.nloc();
    {
      ScopedRegion<ExecutionSpace> stage("dpk::embedding", space);
      descriptor_stage_.forward(space, params_.data(), w.layout, w.env.rows, embedding_matrix(w.s, 1), w.t,
                                d_matrix(w.d, nloc), forces);
    }
    ensure_extent(out.energy, w.layout.nframes);
    ensure_extent(out.atom_energy, nloc);
    ScopedRegion<ExecutionSpace> stage("dpk::fitting", space);
    fitting_stage_.forward(space, params_.data(), w.layout, w.d, out.atom_energy, out.energy);
  }

  /// dE/dD -> A -> dE/dG -> dE/ds -> g = dE/dRn -> forces and virials.
  void first_order(ExecutionSpace const& space, Prediction<Scalar, memory_space>& out, bool atom_virial) {
    ScopedRegion<ExecutionSpace> region("dpk::forces", space);
    auto& w = work_;
    int const nloc = w.layout.nloc();
    {
      ScopedRegion<ExecutionSpace> stage("dpk::fitting", space);
      fitting_stage_.input_cotangent(space, params_.data(), w.layout, w.ones, w.de_dd);
    }
    {
      ScopedRegion<ExecutionSpace> stage("dpk::embedding", space);
      descriptor_stage_.input_cotangent(space, params_.data(), w.layout, d_matrix(w.de_dd, nloc), w.t, w.a,
                                        embedding_matrix(w.de_dg, m1()), embedding_matrix(w.de_ds, 1), w.de_drn);
    }
    ensure_extent(out.force, nloc, 3);
    ensure_extent(out.virial, w.layout.nframes, 9);
    View2<Scalar, memory_space> atom_virial_view;
    if (atom_virial) {
      ensure_extent(out.atom_virial, nloc, 9);
      atom_virial_view = out.atom_virial;
    }
    compute_force_virial(space, w.de_drn, w.env, w.nlist, w.layout.natoms, out.force, out.virial, atom_virial_view,
                         w.products);
  }

 private:
  static int checked_ntypes(DescriptorConfig const& descriptor, FittingConfig const& fitting, int ntypes) {
    require(ntypes >= 1, "EnergyModel: need at least one atom type");
    require(static_cast<int>(descriptor.sel.size()) == ntypes,
            "model.descriptor.sel: expected one entry per type (" + std::to_string(ntypes) + "), got " +
                std::to_string(descriptor.sel.size()));
    require(!descriptor.neuron.empty() && !fitting.neuron.empty(), "model: embedding and fitting nets need layers");
    return ntypes;
  }
  int m1() const { return descriptor_stage_.m1(); }
  int m2() const { return descriptor_stage_.m2(); }
  /// A flat D-shaped buffer as the (nloc, M1*M2) matrix of fitting rows.
  Matrix d_matrix(View1<Scalar, memory_space> const& v, int nloc) const { return Matrix(v.data(), nloc, m1() * m2()); }
  /// A buffer of the embedding rows as a (rows, ncol) matrix (no rows when compressed, or when
  /// the buffer is not sized: the tables, or the chunked host passes for the seeds, need none).
  Matrix embedding_matrix(View1<Scalar, memory_space> const& v, int ncol) const {
    return Matrix(v.data(), compressed() || v.extent(0) == 0 ? 0 : work_.layout.embedding_rows(), ncol);
  }
  static std::vector<double> to_host(View1<Scalar, memory_space> const& v) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    return std::vector<double>(host.data(), host.data() + host.extent(0));
  }

  /// Points the workspace back at its own setup Views (own_) before a pass writes into them,
  /// when it holds a kept setup's (work_setup_kept_).
  void own_setup() {
    if (!work_setup_kept_) return;
    work_.nlist = own_.nlist;
    work_.env = own_.env;
    work_.layout = own_.layout;
    own_ = {};
    work_setup_kept_ = false;
  }
  /// Drops the kept setups (what they depend on changed).
  void forget_setups() {
    own_setup();
    setup_cache_.clear();
  }

  DescriptorConfig descriptor_;
  FittingConfig fitting_;
  int ntypes_ = 0;
  ParameterLayout layout_;
  DescriptorStage<Scalar, ExecutionSpace> descriptor_stage_;
  FittingStage<Scalar, ExecutionSpace> fitting_stage_;
  View1<Scalar, memory_space> params_, grad_;
  ModelWorkspace<Scalar, memory_space> work_;
  long dropped_ = 0;
  BatchSetupCache<Scalar, ExecutionSpace> setup_cache_;
  bool work_setup_kept_ = false;  ///< work_'s nlist, env and layout are a kept setup's Views
  BatchSetup<Scalar, memory_space> own_;  ///< the workspace's own setup while work_setup_kept_
};

}  // namespace dpk
