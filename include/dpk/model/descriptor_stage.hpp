#pragma once
/// \file descriptor_stage.hpp
/// \brief The se_e2_a descriptor as a model stage: normalisation statistics, neighbour search,
/// environment matrix, the embedding nets (or their tables, docs/compression.md) and the
/// contractions T, D, with their first-order, tangent and reverse passes. Every pass takes its
/// inputs and writes its outputs as arguments (the buffers of a ModelWorkspace); the stage keeps
/// only what outlives a batch (hyperparameters, statistics, tables, the search's scratch) and the
/// embedding nets' activations, which its own later passes read.

#include <dpk/core/error.hpp>
#include <dpk/core/env_switch.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/profiling.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/descriptor/se_a.hpp>
#include <dpk/descriptor/tabulated_embedding.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/model/config.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/neighbor/neighbor_list.hpp>
#include <dpk/neighbor/neighbor_search.hpp>
#include <dpk/nn/network.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace dpk {

/// se_e2_a descriptor stage of an EnergyModel (precision Scalar, on ExecutionSpace).
template <class Scalar, class ExecutionSpace>
class DescriptorStage {
 public:
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = MatrixView<Scalar, memory_space>;
  using Layout = BatchLayout<Scalar, memory_space>;
  using Env = View3<Scalar, memory_space>;

  /// The descriptor of `layout` for `ntypes` types; statistics avg 0 / std 1.
  DescriptorStage(DescriptorConfig const& config, ParameterLayout const& layout, int ntypes)
      : config_(config), ntypes_(ntypes), search_(config.rcut, config.sel) {
    nnei_ = config.nnei();
    m1_ = config.neuron.back();
    m2_ = config.axis_neuron;
    require(m2_ >= 1 && m2_ <= m1_, "model.descriptor.axis_neuron: expected 1..neuron[-1] (" + std::to_string(m1_) +
                                        "), got " + std::to_string(m2_));
    sel_offset_.assign(1, 0);
    for (int s : config.sel) sel_offset_.push_back(sel_offset_.back() + s);
    shapes_ = layout.embedding_shapes;
    packed_offsets_ = layout.embedding_offsets;  // the tables read parameters_host()
    embedding_ =
        nn::NetworkFamily<Scalar, ExecutionSpace>(shapes_, layout.embedding_buffer_offsets, "dpk::model::embedding");
    embedding_.set_host_chunk_rows(default_embedding_chunk_rows());
    embedding_.set_unit_input_tangents(env_switch("DPK_EMBEDDING_UNIT_TANGENTS", true,
                                                  "0 (tangents through the layers) or 1 (unit tangents)"));
    pair_rows_ = env_switch("DPK_EMBEDDING_PAIR_ROWS", true, "0 (a row per slot) or 1 (same-type pairs share a row)");
    std::size_t const n_stats = std::size_t(ntypes) * nnei_ * 4;
    set_statistics(std::vector<double>(n_stats, 0.0), std::vector<double>(n_stats, 1.0));
  }

  int nnei() const { return nnei_; }
  int m1() const { return m1_; }
  int m2() const { return m2_; }
  /// First slot of each neighbour-type block, ntypes + 1 entries.
  std::vector<int> const& sel_offset() const { return sel_offset_; }

  // --- statistics -------------------------------------------------------------------------

  /// Normalisation statistics avg/std, shape (ntypes, nnei, 4) flattened, uniform over the slots
  /// of each type block (as DeePMD-kit's statistics are).
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
  /// Environment row of an empty slot, (centre type, block type, 4) = -avg/std.
  View3<Scalar, memory_space> const& empty_row() const { return empty_row_; }

  /// Raw environment rows of `nlist` (statistics avg 0, std 1: the input of the statistics,
  /// SPEC.md section 3) into `env`.
  void raw_environment(ExecutionSpace const& space, NeighborList<Scalar, memory_space> const& nlist,
                       View1<int, memory_space> const& types, EnvironmentMatrix<Scalar, memory_space>& env) {
    if (unit_.avg.extent(0) == 0) {
      unit_.avg = View3<Scalar, memory_space>("dpk::model::stat_avg", ntypes_, nnei_, 4);
      unit_.std = View3<Scalar, memory_space>("dpk::model::stat_std", ntypes_, nnei_, 4);
      Kokkos::deep_copy(unit_.avg, Scalar(0));
      Kokkos::deep_copy(unit_.std, Scalar(1));
    }
    compute_environment_matrix(space, nlist, types, unit_, config_.rcut_smth, config_.rcut, env);
  }

  // --- compression ------------------------------------------------------------------------

  /// Tables of the embedding nets for the parameters `params` (host, layout order), inputs down
  /// to the smallest neighbour distance `rmin` (A).
  EmbeddingTableData build_embedding_table(std::vector<double> const& params, double rmin, double step,
                                           double extrapolate) const {
    auto const range = embedding_input_range(avg_, std_, config_.sel, config_.type_one_side, config_.rcut_smth,
                                             config_.rcut, rmin);
    return dpk::build_embedding_table(shapes_, packed_offsets_, params, range, step, extrapolate);
  }
  /// Uses `table` instead of the embedding nets (an empty table switches back to the nets).
  void set_embedding_table(EmbeddingTableData const& table) {
    if (table.nnets() == 0) {
      table_data_ = EmbeddingTableData{};
      table_ = EmbeddingTable<Scalar, memory_space>{};
      return;
    }
    int const nnets = config_.type_one_side ? ntypes_ : ntypes_ * ntypes_;
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
  bool compressed() const { return !table_.empty(); }
  EmbeddingTableData const& embedding_table() const { return table_data_; }
  void set_table_schedule(TableSchedule schedule) { table_schedule_ = schedule; }
  /// Embedding-net inputs of the batch in `layout` outside the tables (0 when not compressed).
  long lookups_outside_table(ExecutionSpace const& space, Layout const& layout) const {
    return compressed() ? count_outside_table(space, layout.in, table_) : 0;
  }

  /// Rows per chunk of the embedding nets on host spaces (nn::NetworkFamily::set_host_chunk_rows).
  void set_embedding_chunk_rows(int rows) { embedding_.set_host_chunk_rows(rows); }
  int embedding_chunk_rows() const { return embedding_.host_chunk_rows(); }
  /// Unit input tangents on the chunked host path (nn::NetworkFamily::set_unit_input_tangents):
  /// the forward pass of a prediction with forces also makes dG/ds, so that the first-order and
  /// tangent passes need no pass through the layers. Default on, or DPK_EMBEDDING_UNIT_TANGENTS.
  void set_embedding_unit_tangents(bool on) { embedding_.set_unit_input_tangents(on); }
  bool embedding_unit_tangents() const { return embedding_.unit_input_tangents(); }
  /// Paired embedding rows (descriptor/se_a.hpp, find_row_pairs): two same-type atoms within
  /// rcut of each other share one row of the embedding nets (same input s, same net), so G and
  /// dG/ds are made once for both slots; about a quarter fewer rows on water, half on one
  /// element. Needs unit input tangents on the chunked host path (elsewhere it is not used).
  /// Default on, or DPK_EMBEDDING_PAIR_ROWS. Takes effect at the next batch (pair_rows()).
  void set_embedding_pair_rows(bool on) { pair_rows_ = on; }
  bool embedding_pair_rows() const { return pair_rows_; }
  /// True where the next batch's layout pairs rows (asked for, unit tangents, host chunks, nets).
  bool pair_rows() const {
    return pair_rows_ && embedding_.unit_input_tangents() && embedding_.host_chunks() && !compressed();
  }
  /// True where the embedding passes run chunk by chunk on host threads (they then make the
  /// output-side seeds themselves: no whole-batch dE/dG or dL/dG buffer is needed).
  bool embedding_host_chunks() const { return embedding_.host_chunks(); }

  // --- the passes -------------------------------------------------------------------------

  /// Neighbour list of `frames` into `nlist`; counts the neighbours dropped beyond sel.
  void neighbors(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
                 NeighborList<Scalar, memory_space>& nlist) {
    search_.build(space, frames, nlist);
    dropped_ += nlist.dropped;
  }
  /// Neighbours dropped beyond sel, summed over every neighbors() call.
  long neighbors_dropped() const { return dropped_; }

  /// Normalised environment matrix of `nlist` into `env`.
  void environment(ExecutionSpace const& space, NeighborList<Scalar, memory_space> const& nlist,
                   View1<int, memory_space> const& types, EnvironmentMatrix<Scalar, memory_space>& env) const {
    compute_environment_matrix(space, nlist, types, stats_, config_.rcut_smth, config_.rcut, env);
  }

  /// Sizes the embedding nets' activations for the batch in `layout`.
  void reserve(Layout const& layout) {
    if (!compressed()) embedding_.reserve(std::size_t(layout.embedding_rows()), true);
  }

  /// Embedding rows -> G -> T (nloc, 4, M1) and D (fitting-row order); `s` receives the
  /// embedding-net input column (unused when compressed). `tangents`: input_cotangent (forces)
  /// follows (see set_embedding_unit_tangents).
  void forward(ExecutionSpace const& space, Scalar* params, Layout const& layout, Env const& env, Matrix s,
               View3<Scalar, memory_space> const& t, Matrix d, bool tangents = true) {
    if (compressed()) return tabulated_descriptor(space, layout.in, table_, t, d, table_schedule_);
    gather_embedding_column(space, layout.in, env, true, s);
    Matrix const g = embedding_.output(0, layout.embedding_rows());
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (embedding_.host_chunks()) {  // T summed chunk by chunk while each chunk's G is in cache
        auto const& in = layout.in;
        auto const partial = t_partials(space, layout);
        reserve_shared_rows(layout);
        Matrix const shared_g = shared_g_rows(layout), shared_dg = tangents ? shared_dg_rows(layout) : Matrix();
        Matrix const dg_ds = in.rows.paired && tangents ? embedding_.output_derivative(0, layout.embedding_rows())
                                                        : Matrix();
        embedding_.forward_blocks(space, params, layout.embedding_parts, s,
                                  [&in, partial, dg_ds, shared_g, shared_dg](int net, int r0, int r1, Matrix rows) {
                                    contract_rows(in, rows, r0, r1, partial(net));
                                    Matrix const dg = dg_ds.extent(0) > 0
                                                          ? Matrix(&dg_ds(r0, 0), r1 - r0, dg_ds.extent(1))
                                                          : Matrix();
                                    copy_shared_rows(in, rows, dg, r0, r1, shared_g, shared_dg);
                                  },
                                  tangents);
        finish_contraction(space, in, t_partials_, in.ntypes, g, t, d, false, {}, {}, shared_g);
        return;
      }
    }
    embedding_.forward_blocks(space, params, layout.embedding_blocks, s);
    contract_descriptor(space, layout.in, g, t, d);
  }

  /// From dE/dD (`de_dd`, fitting-row order) and T: A = dE/dT, dE/dG, dE/ds and g = dE/dRn (with
  /// unit tangents, only A and g: dE/ds is made row by row from dG/ds).
  void input_cotangent(ExecutionSpace const& space, Scalar* params, Layout const& layout, Matrix de_dd,
                       View3<Scalar, memory_space> const& t, View3<Scalar, memory_space> const& a, Matrix de_dg,
                       Matrix de_ds, View3<Scalar, memory_space> const& de_drn) {
    descriptor_cotangent(space, layout.in, de_dd, t, a, false);
    if (compressed()) return tabulated_environment_cotangent(space, layout.in, table_, a, de_drn, table_schedule_);
    int const rows = layout.embedding_rows();
    Matrix const g = embedding_.output(0, rows);
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (embedding_.unit_tangents())  // dE/ds from dG/ds row by row (de_dg, de_ds are not written)
        return environment_cotangent(space, layout.in, a, g, Matrix(), de_drn, embedding_.output_derivative(0, rows),
                                     shared_g_rows(layout), shared_dg_rows(layout));
      if (embedding_.host_chunks()) {  // dE/dG made chunk by chunk (de_dg is not written)
        embedding_.backward_input_blocks(space, params, layout.embedding_parts, Matrix(), de_ds,
                                         first_order_seed(layout, a));
        return environment_cotangent(space, layout.in, a, g, de_ds, de_drn);
      }
    }
    embedding_cotangent(space, layout.in, a, de_dg, false);
    embedding_.backward_input_blocks(space, params, layout.embedding_blocks, de_dg, de_ds);
    environment_cotangent(space, layout.in, a, g, de_ds, de_drn);
  }

  /// Tangent pass along the direction `v` (nloc, nnei, 4) of the environment rows: T' and D'
  /// (and the embedding input's tangent `s_tangent`, unused when compressed).
  void tangent(ExecutionSpace const& space, Scalar* params, Layout const& layout, View3<Scalar, memory_space> const& v,
               View3<Scalar, memory_space> const& t, Matrix s_tangent, View3<Scalar, memory_space> const& t_tangent,
               Matrix d_tangent) {
    if (compressed())
      return tabulated_descriptor_tangent(space, layout.in, table_, v, t, t_tangent, d_tangent, table_schedule_);
    int const rows = layout.embedding_rows();
    gather_embedding_column(space, layout.in, v, false, s_tangent);
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (embedding_.host_chunks()) {  // T' summed chunk by chunk; G' itself is never stored
        auto const& in = layout.in;
        auto const partial = t_partials(space, layout);
        Matrix const g = embedding_.output(0, rows);
        embedding_.tangent_blocks(space, params, layout.embedding_parts, s_tangent,
                                  [&in, partial, v, g](int net, int r0, int r1, Matrix rows_t) {
                                    contract_rows(in, rows_t, r0, r1, partial(net), v, g);
                                  });
        finish_contraction(space, in, t_partials_, in.ntypes, g, t_tangent, d_tangent, true, t, v,
                           shared_g_rows(layout), shared_dg_rows(layout));
        return;
      }
    }
    embedding_.tangent_blocks(space, params, layout.embedding_blocks, s_tangent);
    contract_descriptor(space, layout.in, embedding_.output(0, rows), t_tangent, d_tangent,
                        embedding_.output_tangent(0, rows), v, t);
  }

  /// Reverse pass into the embedding nets' gradient (written, or added with `accumulate`):
  /// cotangents dl_dd of D and de_dd of D' (= dE/dD), with T, T', A, v, the embedding input and
  /// its tangent, and dE/dG of the first-order pass. Nothing to do when compressed.
  void reverse(ExecutionSpace const& space, Scalar* params, Scalar* grads, Layout const& layout, Matrix dl_dd,
               Matrix de_dd, View3<Scalar, memory_space> const& t, View3<Scalar, memory_space> const& t_tangent,
               View3<Scalar, memory_space> const& a, View3<Scalar, memory_space> const& v, Matrix s, Matrix s_tangent,
               Matrix de_dg, View3<Scalar, memory_space> const& dl_dt, Matrix dl_dg, bool accumulate) {
    if (compressed()) return;
    // gT = Gamma T< + pad(Gamma^T T) + Delta T'< + pad(Delta^T T');  gT' = A (first-order pass).
    descriptor_cotangent(space, layout.in, dl_dd, t, dl_dt, false);
    descriptor_cotangent(space, layout.in, de_dd, t_tangent, dl_dt, true);
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (embedding_.host_chunks()) {  // both seeds made chunk by chunk (dl_dg, de_dg are not read)
        auto const& in = layout.in;
        int const constant_rows = in.rows.nnets * in.ntypes;
        ensure_extent(seed_constants_, std::size_t(constant_rows) * m1_);
        Matrix const constants(seed_constants_.data(), constant_rows, m1_);
        embedding_cotangent_constants(space, in, dl_dt, constants, true);
        space.fence();
        auto seed = [&in, dl_dt, a, v, constants](int r0, int r1, Matrix out) {
          embedding_cotangent_rows(in, dl_dt, a, v, constants, r0, r1, out);
        };
        // A shared row's tangent seed is s'_a g'_a + s'_b g'_b: the seed folds each slot's s' in
        // (and no x0t is passed); otherwise the network scales the first-order seed by x0t.
        bool const paired = in.rows.paired;
        require(!paired || embedding_.unit_tangents(), "DescriptorStage::reverse: paired rows need unit input tangents");
        embedding_.reverse_blocks(space, params, grads, layout.embedding_parts, s, paired ? Matrix() : s_tangent,
                                  Matrix(), Matrix(), Matrix(), accumulate, seed,
                                  first_order_seed(layout, a, paired ? v : View3<Scalar, memory_space>()));
        return;
      }
    }
    embedding_cotangent(space, layout.in, dl_dt, dl_dg, true, a, v);
    embedding_.reverse_blocks(space, params, grads, layout.embedding_blocks, s, s_tangent, dl_dg, de_dg, Matrix(),
                              accumulate);
  }

 private:
  /// Default rows per embedding chunk: DPK_EMBEDDING_CHUNK_ROWS if set, else 128 (measured on
  /// water: 64-512 within noise of each other, 32 slower, 0 about 15 % slower).
  static int default_embedding_chunk_rows() {
    return env_count("DPK_EMBEDDING_CHUNK_ROWS", 128, 1 << 20, "a row count 0..1048576 (0: no chunks)");
  }

  /// The chunked passes' partial T sums, one (nloc, 4, M1) array per neighbour type, zeroed
  /// (host schedule; the rows that may have neighbours only: finish_contraction reads no ghost's
  /// row), as a map from a net to its neighbour type's array. A centre's rows of a
  /// net lie in one part of BatchLayout::embedding_parts, so each (centre, neighbour type) sum
  /// is made by one thread in row order, and finish_contraction adds the types in order: T does
  /// not depend on the thread count or on which thread ran which part.
  auto t_partials(ExecutionSpace const& space, Layout const& layout) {
    std::size_t const per_type = std::size_t(layout.in.nloc) * 4 * m1_;
    std::size_t const n = per_type * std::size_t(layout.in.ntypes);
    ensure_extent_with_headroom(t_partials_, n);
    Scalar* const p = t_partials_.data();
    int const ntypes = layout.in.ntypes;
    // A kernel, not deep_copy (no Kokkos Tools deep-copy event per step): rows of M1; one for
    // all types unless ghosts' rows lie between them.
    int const rows = layout.in.rows_with_neighbours();
    if (rows == layout.in.nloc)
      nn::detail::fill_zero(space, Matrix(p, int(n / m1_), m1_));
    else
      for (int type = 0; type < ntypes; ++type)
        nn::detail::fill_zero(space, Matrix(p + std::size_t(type) * per_type, 4 * rows, m1_));
    space.fence();
    bool const tos = layout.in.type_one_side;
    return [p, per_type, ntypes, tos](int net) {
      return p + std::size_t(EmbeddingRows<memory_space>::neighbour_type_of(tos, ntypes, net)) * per_type;
    };
  }

  /// Sizes the copies of the paired rows' G and dG/ds for the batch in `layout`.
  void reserve_shared_rows(Layout const& layout) {
    if (!layout.in.rows.paired) return;
    std::size_t const n = std::size_t(layout.in.rows.shared_rows) * m1_;
    ensure_extent_with_headroom(shared_g_, n);
    ensure_extent_with_headroom(shared_dg_, n);
  }
  /// The copies of G and dG/ds of the rows that a second slot reads (copy_shared_rows; empty
  /// unless the batch's rows are paired), written by forward() and read by the later passes.
  Matrix shared_g_rows(Layout const& layout) const { return shared_rows_of(shared_g_, layout); }
  Matrix shared_dg_rows(Layout const& layout) const { return shared_rows_of(shared_dg_, layout); }
  Matrix shared_rows_of(View1<Scalar, memory_space> const& copies, Layout const& layout) const {
    return layout.in.rows.paired ? Matrix(copies.data(), layout.in.rows.shared_rows, m1_) : Matrix();
  }

  /// The first-order pass's embedding-output seed dE/dG = (1/nnei) A Rn, row by row (host schedule);
  /// with `fold` each slot's term times its input tangent fold[., 0] (embedding_cotangent_rows).
  typename nn::NetworkFamily<Scalar, ExecutionSpace>::Seed first_order_seed(
      Layout const& layout, View3<Scalar, memory_space> const& a, View3<Scalar, memory_space> const& fold = {}) const {
    auto const& in = layout.in;
    return [&in, a, fold](int r0, int r1, Matrix out) {
      embedding_cotangent_rows(in, a, {}, {}, Matrix(), r0, r1, out, fold);
    };
  }

  DescriptorConfig config_;
  View1<Scalar, memory_space> seed_constants_{"dpk::model::embedding_seed_constants", 0};
  View1<Scalar, memory_space> t_partials_{"dpk::model::t_partials", 0};  ///< per neighbour type (nloc, 4, M1)
  View1<Scalar, memory_space> shared_g_{"dpk::model::shared_g", 0};       ///< see shared_g_rows
  View1<Scalar, memory_space> shared_dg_{"dpk::model::shared_dg", 0};     ///< see shared_g_rows
  int ntypes_ = 0, nnei_ = 0, m1_ = 0, m2_ = 0;
  bool pair_rows_ = true;  ///< see set_embedding_pair_rows
  std::vector<int> sel_offset_;
  std::vector<nn::LayerShape> shapes_;
  std::vector<std::vector<nn::LayerOffsets>> packed_offsets_;  ///< the embedding nets' tensors in packed order (tables)
  nn::NetworkFamily<Scalar, ExecutionSpace> embedding_;
  std::vector<double> avg_, std_;
  EnvironmentStatistics<Scalar, memory_space> stats_, unit_;
  View3<Scalar, memory_space> empty_row_;
  NeighborSearch<Scalar, ExecutionSpace> search_;
  long dropped_ = 0;
  EmbeddingTableData table_data_;
  EmbeddingTable<Scalar, memory_space> table_;
  TableSchedule table_schedule_ = TableSchedule::automatic;
};

}  // namespace dpk
