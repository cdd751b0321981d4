#pragma once
/// \file batch_layout.hpp
/// \brief Where the atoms of a batch sit in the model's row spaces: the embedding rows of every
/// net (descriptor/se_a.hpp) and the fitting rows sorted by centre type. Built once per batch
/// by BatchLayout::build, read by every stage of the model.

#include <dpk/core/error.hpp>
#include <dpk/core/scan.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/se_a.hpp>
#include <dpk/nn/network.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace dpk {

/// The row layout of one batch (device views in `in`, host bookkeeping beside them).
template <class Scalar, class MemorySpace>
struct BatchLayout {
  /// Per-batch views the descriptor kernels read: types, neighbour counts, normalised rows,
  /// embedding rows and each atom's fitting row (`in.position`).
  SeAInputs<Scalar, MemorySpace> in;
  int nframes = 0, natoms = 0;
  /// Fitting rows of centre type t: [type_begin[t], type_begin[t + 1]) (host).
  std::vector<int> type_begin;
  /// Rows [0, fit_rows) of the fitting input are centres; later rows are atoms that are not
  /// (ghosts, Frames::centres) with atomic energy 0 and no cotangent.
  int fit_rows = 0;
  /// Embedding rows of each net (filled rows, then its constant rows).
  std::vector<nn::RowBlock> embedding_blocks;
  /// Host schedule: the same rows cut into parts of about part_rows() rows, each ending where a
  /// centre's rows of that net end (a centre's rows of a net lie in one part), the units the
  /// chunked embedding passes hand out to the host threads.
  std::vector<nn::RowBlock> embedding_parts;

  int nloc() const { return in.nloc; }
  /// Rows per part of embedding_parts for `threads` host threads: about 8 parts per thread (a
  /// thread on a core shared with another job then takes fewer parts), at least `min_rows`.
  static int part_rows(int total_rows, int threads, int min_rows) {
    int const parts = 8 * std::max(1, threads);
    return std::max(std::max(1, min_rows), (total_rows + parts - 1) / parts);
  }
  int embedding_rows() const { return in.rows.total_rows; }
  /// Fitting rows [first, last) of centre type t.
  std::pair<int, int> fitting_rows(int t) const { return {type_begin[std::size_t(t)], type_begin[std::size_t(t) + 1]}; }
  /// True when every type has a centre in the batch.
  bool all_types_present() const {
    for (std::size_t t = 0; t + 1 < type_begin.size(); ++t)
      if (type_begin[t + 1] == type_begin[t]) return false;
    return true;
  }

  /// Fills the layout for `nframes` frames of `natoms` atoms from the neighbour counts and the
  /// environment rows of the batch; only atoms [0, centres) of each frame (all when centres < 0)
  /// are fitting centres, and only rows [0, neighbour_rows) (all when < 0; the neighbour list's
  /// rows_searched()) can have neighbours; embedding_parts have at least `min_part_rows` rows
  /// where the rows allow. With the neighbour list's `pair_index` and `pair_rij` (host schedule)
  /// same-type pairs share their embedding row (find_row_pairs; `image_of`: Frames::image_of).
  /// Throws dpk::Error for an atom type outside the model's types.
  template <class ExecutionSpace>
  void build(ExecutionSpace const& space, View2<int, MemorySpace> const& count, View3<Scalar, MemorySpace> const& env,
             View3<Scalar, MemorySpace> const& empty_row, View1<int, MemorySpace> const& types,
             std::vector<int> const& sel_offset, int m1, int m2, bool type_one_side, int nframes_, int natoms_,
             int centres = -1, int neighbour_rows = -1, int min_part_rows = 512,
             View2<int, MemorySpace> const& pair_index = {}, View3<Scalar, MemorySpace> const& pair_rij = {},
             View1<int, MemorySpace> const& image_of = {}) {
    int const ntypes = int(sel_offset.size()) - 1;
    int const nloc = nframes_ * natoms_;
    int const per_frame = centres < 0 || centres > natoms_ ? natoms_ : centres;
    nframes = nframes_;
    natoms = natoms_;
    in.nloc = nloc;
    in.nnei = sel_offset.back();
    in.ntypes = ntypes;
    in.m1 = m1;
    in.m2 = m2;
    in.type_one_side = type_one_side;
    in.types = types;
    in.count = count;
    in.env = env;
    in.empty_row = empty_row;
    in.neighbour_rows = neighbour_rows;  // the ghosts' rows get no per-slot work
    in.rows.paired = false;
    in.rows.shared_rows = 0;
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (pair_index.extent(0) > 0 && pair_rij.extent(0) > 0)
        find_row_pairs(space, pair_index, pair_rij, count, types, sel_offset, nloc, in.rows_with_neighbours(),
                       image_of, in.rows);
    }
    build_embedding_rows(space, count, types, sel_offset, nloc, type_one_side, in.rows);
    embedding_blocks.resize(in.rows.nnets);
    for (int k = 0; k < in.rows.nnets; ++k)
      embedding_blocks[k] = {k, in.rows.begin[k], in.rows.begin[k] + in.rows.filled[k] + ntypes};
    if constexpr (host_schedule_v<ExecutionSpace>) cut_embedding_parts(space, min_part_rows);
    // Fitting rows sorted by centre type, on the device: an exclusive scan over (type, atom) of
    // the centres of that type gives each centre its row (centres of a type keep their order);
    // the other atoms follow all centres in atom order. One copy to the host: the rows per type
    // (which size the fitting GEMMs) and a count of atoms with a type outside the model.
    ensure_extent(in.position, nloc);
    ensure_extent(type_scan_, std::size_t(ntypes) * nloc + 1);
    ensure_extent(summary_, ntypes + 4);
    if (summary_host_.extent(0) < std::size_t(ntypes + 4))
      summary_host_ = Kokkos::View<int*, Kokkos::HostSpace>("dpk::model::fitting_rows_host", ntypes + 4);
    auto scan = type_scan_;
    auto summary = summary_;
    auto position = in.position;
    int const natoms = natoms_;
    exclusive_scan(
        space, "dpk::model::fitting_rows_scan", ntypes * nloc,
        KOKKOS_LAMBDA(int const p) {
          int const t = p / nloc, i = p % nloc;
          return types(i) == t && i % natoms < per_frame ? 1 : 0;
        },
        scan);
    // summary: rows before each type (ntypes + 1), then the count, largest and smallest value of
    // types outside [0, ntypes).
    Kokkos::parallel_for(
        "dpk::model::fitting_rows_begin", Kokkos::RangePolicy<ExecutionSpace>(space, 0, ntypes + 1),
        KOKKOS_LAMBDA(int const t) {
          summary(t) = scan(std::size_t(t) * nloc);
          if (t == 0) {
            summary(ntypes + 1) = 0;
            summary(ntypes + 2) = Kokkos::reduction_identity<int>::max();
            summary(ntypes + 3) = Kokkos::reduction_identity<int>::min();
          }
        });
    Kokkos::parallel_for(
        "dpk::model::fitting_rows", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int const i) {
          int const f = i / natoms, a = i % natoms, t = types(i);
          if (t < 0 || t >= ntypes) {
            Kokkos::atomic_add(&summary(ntypes + 1), 1);
            Kokkos::atomic_fetch_max(&summary(ntypes + 2), t);
            Kokkos::atomic_fetch_min(&summary(ntypes + 3), t);
          }
          int const centres_total = scan(std::size_t(ntypes) * nloc);
          position(i) = a < per_frame ? (t >= 0 && t < ntypes ? scan(std::size_t(t) * nloc + i) : 0)
                                      : centres_total + f * (natoms - per_frame) + (a - per_frame);
        });
    Kokkos::deep_copy(space, Kokkos::subview(summary_host_, std::make_pair(0, ntypes + 4)), summary);
    space.fence();
    if (summary_host_(ntypes + 1) > 0) {
      int const bad = summary_host_(ntypes + 3) < 0 ? summary_host_(ntypes + 3) : summary_host_(ntypes + 2);
      throw Error("EnergyModel: atom type " + std::to_string(bad) + " outside the model's " + std::to_string(ntypes) +
                  " types");
    }
    type_begin.assign(summary_host_.data(), summary_host_.data() + ntypes + 1);
    fit_rows = type_begin[std::size_t(ntypes)];
    in.centre_rows = fit_rows;
  }

 private:
  /// embedding_parts from embedding_blocks, cut at centre boundaries (host schedule: reads the
  /// scan of build_embedding_rows directly).
  template <class ExecutionSpace>
  void cut_embedding_parts(ExecutionSpace const& space, int min_rows) {
    space.fence();
    auto const& rows = in.rows;
    int const nloc = in.nloc, target = part_rows(rows.total_rows, int(space.concurrency()), min_rows);
    embedding_parts.clear();
    for (auto const& block : embedding_blocks) {
      std::size_t const base = std::size_t(block.net) * nloc;
      int const filled_end = block.begin + rows.filled[std::size_t(block.net)];
      int start = block.begin;
      for (int i = 1; i < nloc; ++i) {
        int const centre_start = block.begin + rows.scan(base + i) - rows.scan(base);
        if (centre_start >= filled_end) break;  // later centres have no rows here (paired rows)
        if (centre_start - start < target) continue;
        embedding_parts.push_back({block.net, start, centre_start});
        start = centre_start;
      }
      embedding_parts.push_back({block.net, start, block.end});
    }
  }

  View1<int, MemorySpace> type_scan_{"dpk::model::fitting_rows_scan", 0};  ///< (ntypes * nloc + 1)
  View1<int, MemorySpace> summary_{"dpk::model::fitting_rows", 0};          ///< (ntypes + 4)
  Kokkos::View<int*, Kokkos::HostSpace> summary_host_{"dpk::model::fitting_rows_host", 0};
};

}  // namespace dpk
