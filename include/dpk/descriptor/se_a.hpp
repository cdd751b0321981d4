#pragma once
/// \file se_a.hpp
/// \brief The se_e2_a descriptor around the embedding nets (SPEC.md sections 4 and 8):
/// the layout of embedding rows, T = G^T Rn / nnei, D = T T<^T, and their derivatives.
///
/// Embedding rows: only filled neighbour slots get a row (they are the first `count(i, t)` slots
/// of each type block). Every empty slot of block t around a centre of type ti carries the same
/// input s0 = -avg/std, so each net gets one extra "constant" row per centre type, and its
/// contribution is weighted by the number of empty slots (SPEC: do not pay slot by slot).
/// Rows of net k are contiguous: [begin_k, begin_k + filled_k) filled rows, then ntypes
/// constant rows (centre type ti at begin_k + filled_k + ti).
///
/// Paired rows (host schedule, find_row_pairs): atoms i, j of one type within rcut of each
/// other give two slots, j around i and i around j, with the same input s through the same net
/// (same distance, same centre-type statistics), so they can share one row: the slot of the
/// smaller (centre, slot) owns the row, the other reads it. G and dG/ds are then made once;
/// the per-slot terms (T, seeds, dE/ds) still come from each slot's own environment row.

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/gemm.hpp>
#include <dpk/core/scan.hpp>
#include <dpk/core/types.hpp>

#include <utility>
#include <vector>

namespace dpk {

/// Vector lanes per team for the per-atom kernels (1 on CPUs, a warp on GPUs).
template <class ExecutionSpace>
int vector_lanes() {
  int const max = Kokkos::TeamPolicy<ExecutionSpace>::vector_length_max();
  return max < 32 ? max : 32;
}

/// Where each (centre, type block) finds its embedding rows; built once per batch.
template <class MemorySpace>
struct EmbeddingRows {
  int nloc = 0, nnei = 0, ntypes = 0, nnets = 0;
  bool type_one_side = true;
  View2<int, MemorySpace> row_offset{"dpk::descriptor::EmbeddingRows::row_offset", 0, 0};  ///< (nloc, ntypes)
  View1<int, MemorySpace> const_base{"dpk::descriptor::EmbeddingRows::const_base", 0};     ///< (nnets)
  View1<int, MemorySpace> sel_offset{"dpk::descriptor::EmbeddingRows::sel_offset", 0};     ///< (ntypes + 1)
  View1<int, MemorySpace> scan{"dpk::descriptor::EmbeddingRows::scan", 0};                 ///< (nnets*nloc + 1)
  View1<int, MemorySpace> boundary{"dpk::descriptor::EmbeddingRows::boundary", 0};         ///< (nnets + 1)
  Kokkos::View<int*, Kokkos::HostSpace> boundary_host;  ///< host copy of `boundary`, kept
  /// Host schedule only (for seeds made row by row, embedding_cotangent_rows): the centre of each
  /// filled row and its slot; constant row c (c = net * ntypes + centre type) holds -1 - c.
  View1<int, MemorySpace> row_atom{"dpk::descriptor::EmbeddingRows::row_atom", 0};
  View1<int, MemorySpace> row_slot{"dpk::descriptor::EmbeddingRows::row_slot", 0};
  /// Paired rows only (`paired`, see find_row_pairs): per slot (nloc, nnei) its pair state (an
  /// owner's partner centre * nnei + slot, -1 unpaired, -2 - owner for a slot reading its
  /// owner's row); per row (total_rows) the partner slot reading it, or -1; per (centre, type
  /// block) the number of slots that own a row.
  View2<int, MemorySpace> slot_pair{"dpk::descriptor::EmbeddingRows::slot_pair", 0, 0};
  View1<int, MemorySpace> row_partner{"dpk::descriptor::EmbeddingRows::row_partner", 0};
  View2<int, MemorySpace> owned{"dpk::descriptor::EmbeddingRows::owned", 0, 0};
  View2<int, MemorySpace> pair_match{"dpk::descriptor::EmbeddingRows::pair_match", 0, 0};  ///< find_row_pairs' scratch
  /// Paired rows: the shared rows' copies (copy_shared_rows) in the order the per-centre passes
  /// read them, centre by centre and slot by slot: centre i's reading slots take positions
  /// [shared_begin(i), shared_begin(i + 1)); row_shared(r) is the position of row r's reader
  /// (or -1), owner_shared(i, slot) that of an owner slot's reader.
  View1<int, MemorySpace> shared_begin{"dpk::descriptor::EmbeddingRows::shared_begin", 0};
  View1<int, MemorySpace> row_shared{"dpk::descriptor::EmbeddingRows::row_shared", 0};
  View2<int, MemorySpace> owner_shared{"dpk::descriptor::EmbeddingRows::owner_shared", 0, 0};
  int shared_rows = 0;             ///< host: slots that read an owner's row (paired)
  bool paired = false;             ///< rows of same-type pairs are shared (host schedule)
  std::vector<int> begin, filled;  ///< host: first row and filled rows of each net
  int total_rows = 0;              ///< host: rows of all nets, constant rows included

  /// Net of a (centre type, neighbour type) pair: t_j (type_one_side) or t_i + ntypes t_j.
  KOKKOS_INLINE_FUNCTION static int net_of(bool tos, int ntypes, int ti, int tj) {
    return tos ? tj : ti + ntypes * tj;
  }
  /// Neighbour type t_j of net `net` (the inverse of net_of in t_j).
  KOKKOS_INLINE_FUNCTION static int neighbour_type_of(bool tos, int ntypes, int net) {
    return tos ? net : net / ntypes;
  }
  /// True for a slot pair state that reads its owner's row (slot_pair).
  KOKKOS_INLINE_FUNCTION static bool reads_owner(int state) { return state <= -2; }
};

/// Pairs the filled slots of same-type neighbours for shared embedding rows (host schedule):
/// slot (i, a) with neighbour j pairs with the slot (c, b) of the centre c that j is (or
/// images) whose neighbour is i (or an image of i) at the opposite displacement (rij(c, b) =
/// -rij(i, a) to rounding: another periodic image of the pair is a box vector away), when each
/// finds the other; c's slot can be missing (dropped beyond sel, an MD ghost whose centre is on
/// another rank), and then (i, a) keeps a row of its own. Only rows [0, neighbour_rows) can have
/// neighbours (later rows: an MD domain's ghosts); `image_of` (empty: every atom is itself) names
/// the centre each atom images, or -1 (MD ghosts: compute_with_ghosts' images). Fills
/// rows.slot_pair and rows.owned and sets rows.paired; build_embedding_rows then lays out rows.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void find_row_pairs(ExecutionSpace const& space, View2<int, MemorySpace> const& index,
                    View3<Scalar, MemorySpace> const& rij, View2<int, MemorySpace> const& count,
                    View1<int, MemorySpace> const& types, std::vector<int> const& sel_offset, int nloc,
                    int neighbour_rows, View1<int, MemorySpace> const& image_of, EmbeddingRows<MemorySpace>& rows) {
  static_assert(host_schedule_v<ExecutionSpace>, "find_row_pairs: host schedule only");
  require(image_of.extent(0) == 0 || image_of.extent(0) >= std::size_t(nloc),
          "find_row_pairs: image_of has " + std::to_string(image_of.extent(0)) + " entries, expected " +
              std::to_string(nloc) + " (or none)");
  int const ntypes = static_cast<int>(sel_offset.size()) - 1, nnei = sel_offset.back();
  require(neighbour_rows >= 0 && neighbour_rows <= nloc, "find_row_pairs: neighbour_rows = " +
                                                            std::to_string(neighbour_rows) + " must be in [0, " +
                                                            std::to_string(nloc) + "]");
  int const centres = neighbour_rows;  // the atoms with a neighbour list
  bool const images = image_of.extent(0) > 0;
  ensure_extent(rows.pair_match, nloc, nnei);
  ensure_extent(rows.slot_pair, nloc, nnei);
  ensure_extent(rows.owned, nloc, ntypes);
  auto match = rows.pair_match;
  auto pair = rows.slot_pair;
  auto owned = rows.owned;
  std::vector<int> const sel(sel_offset);
  // The centre that atom j is or images (-1: none here).
  auto centre_of = [=](int const j) {
    int const c = images ? image_of(j) : j;
    return c >= 0 && c < centres ? c : -1;
  };
  // Pass 1: each same-type slot's match (partner centre * nnei + slot, or -1). The centre with
  // the smaller index searches (for its own images, the smaller slot) and writes both slots: slot
  // (c, b) is only ever written by the thread of centre_of(index(c, b)). Rows past `centres`
  // (ghosts) have no slots: none of these passes reads or writes them, but `owned`, which
  // build_embedding_rows reads for every row, is zero there.
  Kokkos::parallel_for(
      "dpk::descriptor::EmbeddingRows::clear_matches", Kokkos::RangePolicy<ExecutionSpace>(space, 0, centres),
      [=](int const i) {
        for (int a = 0; a < nnei; ++a) match(i, a) = -1;
      });
  space.fence();
  Kokkos::parallel_for(
      "dpk::descriptor::EmbeddingRows::match_pairs", DynamicRangePolicy<ExecutionSpace>(space, 0, centres),
      [=, &sel](int const i) {
        int const t = types(i);
        if (t < 0 || t >= ntypes) return;
        for (int a = sel[t]; a < sel[t] + count(i, t); ++a) {
          int const c = centre_of(index(i, a));
          if (c < i) continue;  // -1 (no centre here) too
          Scalar const x = rij(i, a, 0), y = rij(i, a, 1), z = rij(i, a, 2);
          Scalar const tolerance = Scalar(1e-6) * (x * x + y * y + z * z);
          for (int b = c == i ? a + 1 : sel[t]; b < sel[t] + count(c, t); ++b) {
            if (centre_of(index(c, b)) != i) continue;
            Scalar const dx = rij(c, b, 0) + x, dy = rij(c, b, 1) + y, dz = rij(c, b, 2) + z;
            if (dx * dx + dy * dy + dz * dz > tolerance) continue;
            match(i, a) = c * nnei + b;
            match(c, b) = i * nnei + a;
            break;
          }
        }
      });
  space.fence();
  // Pass 2: mutual matches become pairs (the smaller slot owns the row), the rest stay single.
  Kokkos::parallel_for(
      "dpk::descriptor::EmbeddingRows::pair_slots", DynamicRangePolicy<ExecutionSpace>(space, 0, nloc),
      [=, &sel](int const i) {
        if (i >= centres) {
          for (int t = 0; t < ntypes; ++t) owned(i, t) = 0;
          return;
        }
        for (int a = 0; a < nnei; ++a) {
          int const me = i * nnei + a, m = match(i, a);
          bool const mutual = m >= 0 && match(m / nnei, m % nnei) == me;
          pair(i, a) = !mutual ? -1 : me < m ? m : -2 - m;
        }
        for (int t = 0; t < ntypes; ++t) {
          int n = 0;
          for (int a = sel[t]; a < sel[t] + count(i, t); ++a) n += EmbeddingRows<MemorySpace>::reads_owner(pair(i, a)) ? 0 : 1;
          owned(i, t) = n;
        }
      });
  space.fence();
  // Positions of the reading slots in the shared-row copies: centre by centre (a host scan),
  // then slot by slot; each owner slot learns its reader's (one writer per owner slot).
  ensure_extent(rows.shared_begin, nloc + 1);
  ensure_extent(rows.owner_shared, nloc, nnei);
  auto shared_begin = rows.shared_begin;
  auto owner_shared = rows.owner_shared;
  int total = 0;
  for (int i = 0; i < nloc; ++i) {
    shared_begin(i) = total;
    for (int t = 0; t < ntypes; ++t) total += count(i, t) - owned(i, t);
  }
  shared_begin(nloc) = total;
  rows.shared_rows = total;
  Kokkos::parallel_for(
      "dpk::descriptor::EmbeddingRows::shared_positions", DynamicRangePolicy<ExecutionSpace>(space, 0, centres),
      [=](int const i) {
        int k = shared_begin(i);
        for (int a = 0; a < nnei; ++a) {
          int const state = pair(i, a);
          if (!EmbeddingRows<MemorySpace>::reads_owner(state)) continue;
          int const owner = -2 - state;
          owner_shared(owner / nnei, owner % nnei) = k++;
        }
      });
  space.fence();
  rows.paired = true;
}

/// Fills `rows` for a batch from the neighbour counts (nloc, ntypes) and centre types.
template <class ExecutionSpace, class MemorySpace>
void build_embedding_rows(ExecutionSpace const& space, View2<int, MemorySpace> const& count,
                          View1<int, MemorySpace> const& types, std::vector<int> const& sel_offset, int nloc,
                          bool type_one_side, EmbeddingRows<MemorySpace>& rows) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const ntypes = static_cast<int>(sel_offset.size()) - 1;
  int const nnets = type_one_side ? ntypes : ntypes * ntypes;
  rows.nloc = nloc;
  rows.nnei = sel_offset.back();
  rows.ntypes = ntypes;
  rows.nnets = nnets;
  rows.type_one_side = type_one_side;
  ensure_extent(rows.row_offset, nloc, ntypes);
  ensure_extent(rows.const_base, nnets);
  ensure_extent(rows.scan, std::size_t(nnets) * nloc + 1);
  if (rows.sel_offset.extent(0) != sel_offset.size()) {
    rows.sel_offset = View1<int, MemorySpace>("dpk::descriptor::EmbeddingRows::sel_offset", sel_offset.size());
    auto host = Kokkos::create_mirror_view(rows.sel_offset);
    for (std::size_t t = 0; t < sel_offset.size(); ++t) host(t) = sel_offset[t];
    Kokkos::deep_copy(rows.sel_offset, host);
  }
  auto scan = rows.scan;
  bool const tos = type_one_side;
  bool const paired = rows.paired;  // set by find_row_pairs just before, for this batch
  auto owned = rows.owned;
  auto pair = rows.slot_pair;
  // Exclusive scan over (net, centre) of the rows that centre contributes to that net (its
  // filled slots, less those reading an owner's row when paired).
  exclusive_scan(
      space, "dpk::descriptor::EmbeddingRows::scan", nnets * nloc,
      KOKKOS_LAMBDA(int const p) {
        int const k = p / nloc, i = p % nloc;
        int const tj = EmbeddingRows<MemorySpace>::neighbour_type_of(tos, ntypes, k);
        bool const mine = tos || (k % ntypes) == types(i);
        return mine ? (paired ? owned(i, tj) : count(i, tj)) : 0;
      },
      scan);
  // Per-net row blocks: the scan at each net's start gathered on the device (nnets + 1
  // integers, one copy to the host, which sizes the GEMMs), const_base computed there too.
  ensure_extent(rows.boundary, nnets + 1);
  if (rows.boundary_host.extent(0) < std::size_t(nnets + 1))
    rows.boundary_host = Kokkos::View<int*, Kokkos::HostSpace>("dpk::descriptor::EmbeddingRows::boundary_host", nnets + 1);
  {
    auto boundary = rows.boundary;
    auto const_base = rows.const_base;
    Kokkos::parallel_for(
        "dpk::descriptor::EmbeddingRows::boundaries", Kokkos::RangePolicy<ExecutionSpace>(space, 0, 1),
        KOKKOS_LAMBDA(int) {
          int next = 0;
          for (int k = 0; k <= nnets; ++k) boundary(k) = scan(std::size_t(k) * nloc);
          for (int k = 0; k < nnets; ++k) {
            int const filled = boundary(k + 1) - boundary(k);
            const_base(k) = next + filled;  // the net's constant rows follow its filled rows
            next += filled + ntypes;
          }
        });
    Kokkos::deep_copy(space, Kokkos::subview(rows.boundary_host, std::make_pair(0, nnets + 1)),
                      Kokkos::subview(boundary, std::make_pair(0, nnets + 1)));
    space.fence();
  }
  auto const& boundary = rows.boundary_host;
  rows.begin.assign(nnets, 0);
  rows.filled.assign(nnets, 0);
  int next = 0;
  for (int k = 0; k < nnets; ++k) {
    rows.begin[k] = next;
    rows.filled[k] = boundary(k + 1) - boundary(k);
    next += rows.filled[k] + ntypes;
  }
  rows.total_rows = next;
  auto row_offset = rows.row_offset;
  auto const_base = rows.const_base;
  // The host schedule also maps every filled row back to its centre and slot (a run-time flag
  // in the kernel: nvcc's extended lambdas reject a compile-time constant used inside).
  if constexpr (host_schedule_v<ExecutionSpace>) {
    ensure_extent_with_headroom(rows.row_atom, std::size_t(rows.total_rows));
    ensure_extent_with_headroom(rows.row_slot, std::size_t(rows.total_rows));
    if (paired) ensure_extent_with_headroom(rows.row_partner, std::size_t(rows.total_rows));
    if (paired) ensure_extent_with_headroom(rows.row_shared, std::size_t(rows.total_rows));
  }
  auto row_atom = rows.row_atom;
  auto row_slot = rows.row_slot;
  auto row_partner = rows.row_partner;
  auto row_shared = rows.row_shared;
  auto owner_shared = rows.owner_shared;
  auto sel = rows.sel_offset;
  bool const row_maps = row_atom.extent(0) > 0;
  Kokkos::parallel_for(
      "dpk::descriptor::EmbeddingRows::offsets", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc * ntypes),
      KOKKOS_LAMBDA(int const p) {
        int const i = p / ntypes, tj = p % ntypes;
        int const k = EmbeddingRows<MemorySpace>::net_of(tos, ntypes, types(i), tj);
        // filled rows of net k start at const_base(k) - filled_k = begin_k; scan(k*nloc) is the net's start in scan space
        int const filled_k = scan((k + 1) * nloc) - scan(k * nloc);
        int const first = const_base(k) - filled_k + (scan(k * nloc + i) - scan(k * nloc));
        row_offset(i, tj) = first;
        if (!row_maps) return;
        int r = first;
        for (int j = 0; j < count(i, tj); ++j) {
          int const slot = sel(tj) + j;
          if (paired && EmbeddingRows<MemorySpace>::reads_owner(pair(i, slot))) continue;
          row_atom(r) = i;
          row_slot(r) = slot;
          if (paired) {
            row_partner(r) = pair(i, slot) >= 0 ? pair(i, slot) : -1;
            row_shared(r) = pair(i, slot) >= 0 ? owner_shared(i, slot) : -1;
          }
          ++r;
        }
      });
  if constexpr (host_schedule_v<ExecutionSpace>) {
    Kokkos::parallel_for(
        "dpk::descriptor::EmbeddingRows::constant_row_maps",
        Kokkos::RangePolicy<ExecutionSpace>(space, 0, nnets * ntypes), KOKKOS_LAMBDA(int const c) {
          row_atom(const_base(c / ntypes) + c % ntypes) = -1 - c;
          row_slot(const_base(c / ntypes) + c % ntypes) = -1;
          if (!paired) return;
          row_partner(const_base(c / ntypes) + c % ntypes) = -1;
          row_shared(const_base(c / ntypes) + c % ntypes) = -1;
        });
  }
}

/// Per-batch views the descriptor kernels read (all on the device).
template <class Scalar, class MemorySpace>
struct SeAInputs {
  int nloc = 0, nnei = 0, ntypes = 0, m1 = 0, m2 = 0;
  bool type_one_side = true;
  View1<int, MemorySpace> types;        ///< (nloc) centre types
  View2<int, MemorySpace> count;        ///< (nloc, ntypes) filled slots per block
  View3<Scalar, MemorySpace> env;       ///< (nloc, nnei, 4) normalised rows
  View3<Scalar, MemorySpace> empty_row; ///< (ntypes centre, ntypes block, 4): row of an empty slot (-avg/std)
  View1<int, MemorySpace> position;     ///< (nloc) row of each atom in the type-sorted fitting input
  /// Fitting rows [0, centre_rows) are centres; atoms at positions beyond (MD ghosts, which have
  /// no neighbours and no fitting row) skip D and its cotangent (their gD is 0). -1: all rows.
  int centre_rows = -1;
  /// Rows [0, neighbour_rows) may have neighbours (NeighborList::rows_searched()); the later
  /// ones are ghosts of a one-frame batch, whose per-slot cotangents are never read and not
  /// written. -1: all rows.
  int neighbour_rows = -1;
  /// The rows that may have neighbours.
  int rows_with_neighbours() const { return neighbour_rows < 0 || neighbour_rows > nloc ? nloc : neighbour_rows; }
  EmbeddingRows<MemorySpace> rows;
};

/// Gathers column 0 of `source` (nloc, nnei, 4) into the embedding rows `s` (one value per
/// filled slot). The constant rows get the empty-slot row's column 0 (`constants_from_empty_row`,
/// for the values s = Rn[., 0]) or 0 (for tangents s' = v[., 0], which vanish on empty slots).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void gather_embedding_column(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                             View3<Scalar, MemorySpace> const& source, bool constants_from_empty_row,
                             MatrixView<Scalar, MemorySpace> s) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto count = in.count;
  auto row_offset = in.rows.row_offset;
  auto sel_offset = in.rows.sel_offset;
  auto const_base = in.rows.const_base;
  auto empty_row = in.empty_row;
  auto pair = in.rows.slot_pair;
  int const ntypes = in.ntypes, nloc = in.nloc, nnets = in.rows.nnets;
  bool const tos = in.type_one_side, paired = in.rows.paired;
  Kokkos::parallel_for(
      "dpk::descriptor::SeA::gather_embedding_input", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc * ntypes),
      KOKKOS_LAMBDA(int const p) {
        int const i = p / ntypes, t = p % ntypes;
        int const first = sel_offset(t);
        int row = row_offset(i, t);
        for (int j = 0; j < count(i, t); ++j) {  // paired: the owners' slots, in order
          if (paired && EmbeddingRows<MemorySpace>::reads_owner(pair(i, first + j))) continue;
          s(row++, 0) = source(i, first + j, 0);
        }
      });
  Kokkos::parallel_for(
      "dpk::descriptor::SeA::gather_embedding_constant",
      Kokkos::RangePolicy<ExecutionSpace>(space, 0, nnets * ntypes), KOKKOS_LAMBDA(int const p) {
        int const k = p / ntypes, ti = p % ntypes;
        int const tj = EmbeddingRows<MemorySpace>::neighbour_type_of(tos, ntypes, k);
        s(const_base(k) + ti, 0) = constants_from_empty_row ? empty_row(ti, tj, 0) : Scalar(0);
      });
}

/// out[c] += sum_k rows[c * row_stride + k] * x[k * x_stride] for c < 4, k < n: four dot
/// products summed in 8 interleaved partial sums (a fixed order that vectorises on CPUs without
/// reassociating floating-point sums). Contiguous: x_stride is 1 (known at compile time).
template <bool Contiguous, class Scalar>
KOKKOS_INLINE_FUNCTION void add_dot4(Scalar const* rows, int row_stride, Scalar const* x, int x_stride, int n,
                                     Scalar out[4]) {
  if constexpr (Contiguous) x_stride = 1;
  constexpr int lanes = 8;
  Scalar acc[4][lanes] = {};
  int k = 0;
  for (; k + lanes <= n; k += lanes)
    for (int l = 0; l < lanes; ++l) {
      Scalar const xk = x[(k + l) * x_stride];
      for (int c = 0; c < 4; ++c) acc[c][l] += rows[c * row_stride + k + l] * xk;
    }
  for (; k < n; ++k)
    for (int c = 0; c < 4; ++c) acc[c][0] += rows[c * row_stride + k] * x[k * x_stride];
  for (int c = 0; c < 4; ++c) {
    Scalar sum = 0;
    for (int l = 0; l < lanes; ++l) sum += acc[c][l];
    out[c] += sum;
  }
}

/// T(c, m) += g(m) r_c for the 4 x M1 block `t` (rows of M1 features) of one centre.
template <class Team, class Scalar>
KOKKOS_INLINE_FUNCTION void add_outer_product(Team const& team, Scalar* t, Scalar const* g, int m1, Scalar r0,
                                              Scalar r1, Scalar r2, Scalar r3) {
  team_vector_for(team, m1, [&](int const m) {
    Scalar const gm = g[m];
    t[m] += gm * r0;
    t[m1 + m] += gm * r1;
    t[2 * m1 + m] += gm * r2;
    t[3 * m1 + m] += gm * r3;
  });
}

/// add_outer_product in the calling host thread (one plain loop over the features).
template <class Scalar>
inline void add_outer_product(Scalar* t, Scalar const* g, int m1, Scalar r0, Scalar r1, Scalar r2, Scalar r3) {
  DPK_SIMD_LOOP
  for (int m = 0; m < m1; ++m) {
    Scalar const gm = g[m];
    t[m] += gm * r0;
    t[m1 + m] += gm * r1;
    t[2 * m1 + m] += gm * r2;
    t[3 * m1 + m] += gm * r3;
  }
}

/// T'(c, m) += G'(m) rn_c + G(m) vn_c for the 4 x M1 block `t` of one centre (host thread):
/// one slot's tangent term, with G' = `scale` x `gt` when Scaled (a shared row's dG/ds times the
/// reading slot's own s'), else G' = `gt`.
template <bool Scaled, class Scalar>
inline void add_tangent_outer_product(Scalar* t, Scalar const* gt, Scalar scale, Scalar const* g, int m1,
                                      Scalar const rn[4], Scalar const vn[4]) {
  Scalar const r0 = rn[0], r1 = rn[1], r2 = rn[2], r3 = rn[3], v0 = vn[0], v1 = vn[1], v2 = vn[2], v3 = vn[3];
  DPK_SIMD_LOOP
  for (int m = 0; m < m1; ++m) {
    Scalar const gtm = Scaled ? scale * gt[m] : gt[m], gm = g[m];
    t[m] += gtm * r0 + gm * v0;
    t[m1 + m] += gtm * r1 + gm * v1;
    t[2 * m1 + m] += gtm * r2 + gm * v2;
    t[3 * m1 + m] += gtm * r3 + gm * v3;
  }
}

/// D_i(m, n) = sum_c T(c, m) T(c, n) into `dr` (M1 x M2, row-major) from the (4, M1) block `tr`
/// of T; with a tangent, D' = sum_c T'(c, m) T(c, n) + T(c, m) T'(c, n) (tr: T', tv: T).
/// `rows(m1, m2, f)` runs f(m, n) over the block (a team's lanes, or plain loops).
template <class Rows, class Scalar>
KOKKOS_INLINE_FUNCTION void descriptor_block(Rows const& rows, Scalar const* tr, Scalar const* tv, bool tangent,
                                             int m1, int m2, Scalar* dr) {
  if (!tangent) {
    rows(m1, m2, [&](int const m, int const n) {
      Scalar sum = 0;
      for (int c = 0; c < 4; ++c) sum += tr[c * m1 + m] * tr[c * m1 + n];
      dr[m * m2 + n] = sum;
    });
  } else {
    rows(m1, m2, [&](int const m, int const n) {
      Scalar sum = 0;
      for (int c = 0; c < 4; ++c) sum += tr[c * m1 + m] * tv[c * m1 + n] + tv[c * m1 + m] * tr[c * m1 + n];
      dr[m * m2 + n] = sum;
    });
  }
}

/// T_i = (1/nnei) sum_j G_j^T Rn_j (M1 x 4, empty slots via the constant rows; every T-shaped
/// array here is stored transposed, (nloc, 4, M1), so that loops over features are contiguous) and
/// D_i = T_i T_i<^T (M1 x M2) written to row position(i) of `d` (nloc, M1*M2).
/// With a tangent (gt, v non-empty): T'_i = (1/nnei) sum_j (G'_j Rn_j^T + G_j v_j^T) and
/// D' = T' T<^T + T T'<^T instead (T must hold the values already). Rows past
/// in.rows_with_neighbours() (ghosts: not centres, their T is never read) are left.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void contract_descriptor(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                         MatrixView<Scalar, MemorySpace> g, View3<Scalar, MemorySpace> const& t_out,
                         MatrixView<Scalar, MemorySpace> d, MatrixView<Scalar, MemorySpace> gt = {},
                         View3<Scalar, MemorySpace> const& v = {}, View3<Scalar, MemorySpace> const& t_value = {}) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  require(!in.rows.paired, "se_a: paired embedding rows are read by the chunked host passes only");
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  auto env = in.env;
  auto count = in.count;
  auto types = in.types;
  auto row_offset = in.rows.row_offset;
  auto sel_offset = in.rows.sel_offset;
  auto const_base = in.rows.const_base;
  auto empty_row = in.empty_row;
  auto position = in.position;
  int const ntypes = in.ntypes, m1 = in.m1, m2 = in.m2;
  int const centre_rows = in.centre_rows < 0 ? in.nloc : in.centre_rows;
  bool const tos = in.type_one_side;
  bool const tangent = gt.extent(0) > 0;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  int const lanes = vector_lanes<ExecutionSpace>();
  Kokkos::parallel_for(
      tangent ? "dpk::descriptor::SeA::Descriptor_tangent" : "dpk::descriptor::SeA::Descriptor",
      Kokkos::TeamPolicy<ExecutionSpace>(space, in.rows_with_neighbours(), 1, lanes), KOKKOS_LAMBDA(Team const& team) {
        int const i = team.league_rank();
        int const ti = types(i);
        // T_i accumulated slot by slot; each feature m stays with one thread/lane across slots,
        // and the inner loop over m is contiguous in G and in T (raw row pointers: contiguous
        // LayoutRight rows, so that host loops vectorise without gathers).
        Scalar* const tr = &t_out(i, 0, 0);  // (4, m1) block of centre i
        team_vector_for(team, 4 * m1, [&](int const k) { tr[k] = Scalar(0); });
        for (int tj = 0; tj < ntypes; ++tj) {
          int const row = row_offset(i, tj), first = sel_offset(tj), n = count(i, tj);
          for (int j = 0; j < n; ++j) {
            Scalar const r0 = env(i, first + j, 0) * inv_nnei, r1 = env(i, first + j, 1) * inv_nnei,
                         r2 = env(i, first + j, 2) * inv_nnei, r3 = env(i, first + j, 3) * inv_nnei;
            Scalar const* const gr = &g(row + j, 0);
            if (!tangent) {
              add_outer_product(team, tr, gr, m1, r0, r1, r2, r3);
            } else {
              Scalar const v0 = v(i, first + j, 0) * inv_nnei, v1 = v(i, first + j, 1) * inv_nnei,
                           v2 = v(i, first + j, 2) * inv_nnei, v3 = v(i, first + j, 3) * inv_nnei;
              Scalar const* const gtr = &gt(row + j, 0);
              team_vector_for(team, m1, [&](int const m) {
                Scalar const gm = gr[m], gtm = gtr[m];
                tr[m] += gtm * r0 + gm * v0;
                tr[m1 + m] += gtm * r1 + gm * v1;
                tr[2 * m1 + m] += gtm * r2 + gm * v2;
                tr[3 * m1 + m] += gtm * r3 + gm * v3;
              });
            }
          }
          int const empty = sel_offset(tj + 1) - first - n;
          if (!tangent && empty > 0) {
            int const k = EmbeddingRows<MemorySpace>::net_of(tos, ntypes, ti, tj);
            Scalar const w = Scalar(empty) * inv_nnei;
            Scalar const e0 = empty_row(ti, tj, 0) * w, e1 = empty_row(ti, tj, 1) * w, e2 = empty_row(ti, tj, 2) * w,
                         e3 = empty_row(ti, tj, 3) * w;
            Scalar const* const gr = &g(const_base(k) + ti, 0);
            add_outer_product(team, tr, gr, m1, e0, e1, e2, e3);
          }
        }
        team.team_barrier();
        if (position(i) >= centre_rows) return;  // not a centre: its D row is never read
        auto rows = [&](int const nr, int const nc, auto const& f) { team_vector_for_rows(team, nr, nc, f); };
        descriptor_block(rows, tr, tangent ? &t_value(i, 0, 0) : tr, tangent, m1, m2, &d(position(i), 0));
      });
}

/// Host code: asks the cache for the `count` values at `row + ahead` (data the hardware prefetcher
/// cannot foresee: a later row of one of several interleaved streams, a row picked by an index).
/// A hint only: a prefetch never faults, also past the end of an array.
template <class Scalar>
inline void prefetch_ahead(Scalar const* row, int ahead, int count) {
#if defined(__GNUC__)
  char const* const p = reinterpret_cast<char const*>(row + ahead);
  for (std::size_t b = 0; b < std::size_t(count) * sizeof(Scalar); b += 64) __builtin_prefetch(p + b, 0, 3);
#else
  (void)row, (void)ahead, (void)count;
#endif
}

/// Columns 0..3 of row (i, slot) of `rows` (nloc, nnei, 4) times `scale` into `out`.
template <class Scalar, class MemorySpace>
KOKKOS_INLINE_FUNCTION void scaled_row(View3<Scalar, MemorySpace> const& rows, int i, int slot, Scalar scale,
                                       Scalar out[4]) {
  for (int c = 0; c < 4; ++c) out[c] = rows(i, slot, c) * scale;
}

/// Copies the rows among [r0, r1) that a second slot reads (paired rows: row_shared >= 0) from
/// `g` (r1 - r0 rows of G) and, when non-empty, `dg_ds` (the same rows of dG/ds) into
/// `shared_g` and `shared_dg` (EmbeddingRows::shared_rows rows each) at their reader's position,
/// in the calling host thread while the chunk is in cache: the per-centre passes then stream
/// the copies instead of gathering rows from anywhere in G.
template <class Scalar, class MemorySpace>
void copy_shared_rows(SeAInputs<Scalar, MemorySpace> const& in, MatrixView<Scalar, MemorySpace> g,
                      MatrixView<Scalar, MemorySpace> dg_ds, int r0, int r1, MatrixView<Scalar, MemorySpace> shared_g,
                      MatrixView<Scalar, MemorySpace> shared_dg) {
  static_assert(accessible_v<InThread, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  if (!in.rows.paired) return;
  int const m1 = in.m1;
  bool const with_dg = dg_ds.extent(0) > 0;
  for (int r = r0; r < r1; ++r) {
    int const k = in.rows.row_shared(r);
    if (k < 0) continue;
    Scalar const* const src = &g(r - r0, 0);
    Scalar* const dst = &shared_g(k, 0);
    DPK_SIMD_LOOP
    for (int m = 0; m < m1; ++m) dst[m] = src[m];
    if (!with_dg) continue;
    Scalar const* const dsrc = &dg_ds(r - r0, 0);
    Scalar* const ddst = &shared_dg(k, 0);
    DPK_SIMD_LOOP
    for (int m = 0; m < m1; ++m) ddst[m] = dsrc[m];
  }
}

/// Adds the filled rows among [r0, r1) of G (`g`: r1 - r0, M1) to a partial T (nloc, 4, M1) in
/// the calling host thread: T_i += (1/nnei) G_j^T Rn_j for each row j of centre i; with a
/// tangent (`v` non-empty: `g` holds G', `g_value` all rows of G) T'_i += (1/nnei)(G'_j Rn_j^T +
/// G_j v_j^T). Constant rows are skipped (finish_contraction adds them). Lets the chunked
/// embedding passes sum T while a chunk's G is in cache (host schedule).
template <class Scalar, class MemorySpace>
void contract_rows(SeAInputs<Scalar, MemorySpace> const& in, MatrixView<Scalar, MemorySpace> g, int r0, int r1,
                   Scalar* partial, View3<Scalar, MemorySpace> const& v = {},
                   MatrixView<Scalar, MemorySpace> g_value = {}) {
  static_assert(accessible_v<InThread, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const m1 = in.m1;
  bool const tangent = v.extent(0) > 0;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  for (int r = r0; r < r1; ++r) {
    int const i = in.rows.row_atom(r);
    if (i < 0) continue;
    int const slot = in.rows.row_slot(r);
    Scalar rn[4];
    scaled_row(in.env, i, slot, inv_nnei, rn);
    Scalar* const t = partial + std::size_t(i) * 4 * m1;
    Scalar const* const gr = &g(r - r0, 0);
    if (!tangent) {
      add_outer_product(t, gr, m1, rn[0], rn[1], rn[2], rn[3]);
    } else {
      Scalar vn[4];
      scaled_row(v, i, slot, inv_nnei, vn);
      Scalar const* const gv = &g_value(r, 0);
      prefetch_ahead(gv, 4 * m1, m1);  // G comes from memory (G' is the chunk's, in cache)
      add_tangent_outer_product<false>(t, gr, Scalar(1), gv, m1, rn, vn);
    }
  }
}

/// T (or T') from `nsums` partial sums of contract_rows (`partials`: nsums x (nloc, 4, M1),
/// added in order), plus the empty slots' terms through the constant rows of G (values
/// only), then D (or D' with T in `t_value`) as contract_descriptor does. Host schedule.
/// With paired rows (EmbeddingRows::paired) it also adds the slots that read their owner's row
/// (contract_rows sums only a row's owner): G from `shared_g`, and for a tangent G' = s' dG/ds
/// from `shared_dg` with the slot's own s' = v[., 0] (copy_shared_rows' copies). Rows past
/// in.rows_with_neighbours() (ghosts: their T is never read) are neither read nor written.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void finish_contraction(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                        View1<Scalar, MemorySpace> const& partials, int nsums, MatrixView<Scalar, MemorySpace> g,
                        View3<Scalar, MemorySpace> const& t_out, MatrixView<Scalar, MemorySpace> d, bool tangent,
                        View3<Scalar, MemorySpace> const& t_value = {}, View3<Scalar, MemorySpace> const& v = {},
                        MatrixView<Scalar, MemorySpace> shared_g = {}, MatrixView<Scalar, MemorySpace> shared_dg = {}) {
  static_assert(host_schedule_v<ExecutionSpace>, "finish_contraction: host schedule only");
  bool const paired = in.rows.paired;
  require(!paired || (shared_g.extent(0) >= std::size_t(in.rows.shared_rows) &&
                      (!tangent || (v.extent(0) > 0 && shared_dg.extent(0) >= std::size_t(in.rows.shared_rows)))),
          "finish_contraction: paired rows need the shared rows' copies (and v, dG/ds for a tangent)");
  auto env = in.env;
  auto pair = in.rows.slot_pair;
  auto shared_begin = in.rows.shared_begin;
  auto count = in.count;
  auto types = in.types;
  auto sel_offset = in.rows.sel_offset;
  auto const_base = in.rows.const_base;
  auto empty_row = in.empty_row;
  auto position = in.position;
  int const ntypes = in.ntypes, m1 = in.m1, m2 = in.m2, nloc = in.nloc;
  int const centre_rows = in.centre_rows < 0 ? nloc : in.centre_rows;
  bool const tos = in.type_one_side;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  std::size_t const per_sum = std::size_t(nloc) * 4 * m1;
  Scalar const* const sums = partials.data();
  Kokkos::parallel_for(
      tangent ? "dpk::descriptor::SeA::Descriptor_tangent_finish" : "dpk::descriptor::SeA::Descriptor_finish",
      DynamicRangePolicy<ExecutionSpace>(space, 0, in.rows_with_neighbours()), [=](int const i) {
        Scalar* const tr = &t_out(i, 0, 0);
        Scalar const* const first = sums + std::size_t(i) * 4 * m1;
        for (int k = 0; k < 4 * m1; ++k) tr[k] = first[k];
        for (int w = 1; w < nsums; ++w) {
          Scalar const* const part = first + w * per_sum;
          DPK_SIMD_LOOP
          for (int k = 0; k < 4 * m1; ++k) tr[k] += part[k];
        }
        int const ti = types(i);
        int k = paired ? shared_begin(i) : 0;  // this centre's reading slots, in slot order
        for (int slot = sel_offset(ti); paired && slot < sel_offset(ti) + count(i, ti); ++slot) {
          if (!EmbeddingRows<MemorySpace>::reads_owner(pair(i, slot))) continue;  // same-type slots only pair
          Scalar rn[4];
          scaled_row(env, i, slot, inv_nnei, rn);
          Scalar const* const gr = &shared_g(k, 0);
          if (!tangent) {
            add_outer_product(tr, gr, m1, rn[0], rn[1], rn[2], rn[3]);
            ++k;
            continue;
          }
          Scalar vn[4];
          scaled_row(v, i, slot, inv_nnei, vn);
          // G' = s' dG/ds with this slot's own s'
          add_tangent_outer_product<true>(tr, &shared_dg(k++, 0), v(i, slot, 0), gr, m1, rn, vn);
        }
        for (int tj = 0; !tangent && tj < ntypes; ++tj) {
          int const empty = sel_offset(tj + 1) - sel_offset(tj) - count(i, tj);
          if (empty == 0) continue;
          int const k = EmbeddingRows<MemorySpace>::net_of(tos, ntypes, ti, tj);
          Scalar const w = Scalar(empty) * inv_nnei;
          Scalar const e0 = empty_row(ti, tj, 0) * w, e1 = empty_row(ti, tj, 1) * w, e2 = empty_row(ti, tj, 2) * w,
                       e3 = empty_row(ti, tj, 3) * w;
          add_outer_product(tr, &g(const_base(k) + ti, 0), m1, e0, e1, e2, e3);
        }
        if (position(i) >= centre_rows) return;  // not a centre: its D row is never read
        auto rows = [](int const nr, int const nc, auto const& f) {
          for (int m = 0; m < nr; ++m) {
            DPK_SIMD_LOOP
            for (int n = 0; n < nc; ++n) f(m, n);
          }
        };
        descriptor_block(rows, tr, tangent ? &t_value(i, 0, 0) : tr, tangent, m1, m2, &d(position(i), 0));
      });
  space.fence();
}

#if defined(DPK_HAS_SMALL_GEMM)
/// descriptor_cotangent_centre with dpk's small-matrix kernels' vectors, m2 = NV vectors: tile by tile of
/// `lanes` rows of gD, the tile transposed through registers for the first product and its rows
/// as they lie for the second; each element summed as small_gemm sums it.
template <class Scalar, int NV>
void descriptor_cotangent_tiles(Scalar const* t, Scalar const* gd, int m1, bool accumulate, Scalar* out,
                                Scalar const* next_gd) {
  using S = blas::detail::Simd<Scalar>;
  using Vec = typename S::Vec;
  constexpr int lanes = S::lanes, m2 = NV * lanes, kc = blas::detail::small_gemm_kc;
  static_assert(kc % lanes == 0, "a pass of the second product ends on a tile boundary");
  alignas(64) Scalar tile[lanes * m2];     // the last tile of gD when partial, zero rows below
  alignas(64) Scalar columns[m2 * lanes];  // a tile transposed: row n holds gD(m0 .. m0 + lanes, n)
  Vec acc2[4][NV];                         // the second product's running pass
  for (int c = 0; c < 4; ++c)
    for (int v = 0; v < NV; ++v) acc2[c][v] = S::zero();
  for (int m0 = 0; m0 < m1; m0 += lanes) {
    int const rows = m1 - m0 < lanes ? m1 - m0 : lanes;
    Scalar const* src = gd + std::size_t(m0) * m2;
    if (next_gd != nullptr) prefetch_ahead(next_gd, m0 * m2, rows * m2);  // the same tile of the next centre
    if (rows < lanes) {
      for (int k = 0; k < lanes * m2; ++k) tile[k] = k < rows * m2 ? src[k] : Scalar(0);
      src = tile;
    }
    for (int v = 0; v < NV; ++v) blas::detail::transpose_tile(src + v * lanes, m2, columns + v * lanes * lanes, lanes);
    // out(c, m0 ..) [+]= sum_n T(c, n) gD(m, n), n in order
    Vec acc1[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
    for (int n = 0; n < m2; ++n) {
      Vec const col = S::load(columns + n * lanes);
      for (int c = 0; c < 4; ++c) acc1[c] = S::fma(S::broadcast(t + c * m1 + n), col, acc1[c]);
    }
    auto const tail = S::tail(rows);
    for (int c = 0; c < 4; ++c) {
      Scalar* const o = out + c * m1 + m0;
      S::store(o, accumulate ? S::add(S::load(o, tail), acc1[c]) : acc1[c], tail);
    }
    // this tile's terms of out(c, j < m2) += sum_mm T(c, mm) gD(mm, j)
    for (int r = 0; r < rows; ++r) {
      Vec g[NV];
      for (int v = 0; v < NV; ++v) g[v] = S::load(src + r * m2 + v * lanes);
      for (int c = 0; c < 4; ++c) {
        Vec const tc = S::broadcast(t + c * m1 + m0 + r);
        for (int v = 0; v < NV; ++v) acc2[c][v] = S::fma(tc, g[v], acc2[c][v]);
      }
    }
    if ((m0 + rows) % kc != 0 && m0 + rows != m1) continue;
    for (int c = 0; c < 4; ++c)  // a pass of kc rows ends: out[:, :m2] += it
      for (int v = 0; v < NV; ++v) {
        Scalar* const o = out + c * m1 + v * lanes;
        S::store(o, S::add(S::load(o), acc2[c][v]));
        acc2[c][v] = S::zero();
      }
  }
}
#endif

/// One centre's cotangent of T on the host through blas::gemm: out (4 x m1) = [out +]
/// T[:, :m2] gD^T, then out[:, :m2] += T gD (T: 4 x m1, gD: m1 x m2, rows contiguous; m2 <= m1).
template <class Scalar>
void descriptor_cotangent_gemms(Scalar const* t, Scalar const* gd, int m1, int m2, bool accumulate, Scalar* out) {
  using Matrix = MatrixView<Scalar, Kokkos::HostSpace>;
  Matrix const t_i(const_cast<Scalar*>(t), 4, m1), gd_i(const_cast<Scalar*>(gd), m1, m2), out_i(out, 4, m1);
  auto const first_m2 = std::make_pair(0, m2);
  // out(c, m) [+]= sum_n T(c, n) gD(m, n);  out(c, m < m2) += sum_mm T(c, mm) gD(mm, m)
  blas::gemm(InThread{}, "N", "T", Scalar(1), Kokkos::subview(t_i, Kokkos::ALL(), first_m2), gd_i,
             accumulate ? Scalar(1) : Scalar(0), out_i);
  blas::gemm(InThread{}, "N", "N", Scalar(1), t_i, gd_i, Scalar(1), Kokkos::subview(out_i, Kokkos::ALL(), first_m2));
}

/// descriptor_cotangent_gemms' result: where dpk's small-matrix kernels are compiled in (AVX-512
/// or AVX2) and m2 <= m1 is one or two vectors, from descriptor_cotangent_tiles (one pass over gD;
/// the same bits as the two blas::gemm calls where dpk's kernel takes those, which transposed gD
/// into a copy for the first), whatever DPK_SMALL_GEMM gives the BLAS: against OpenBLAS' AVX-512
/// kernels (by default the BLAS takes every product there) this pass took 118 instead of 217 us
/// (float32) and 282 instead of 452 us (float64) per water frame (docs/performance.md,
/// "Twenty-seventh session"). Else from those two calls. `next_gd`: the next centre's gD, fetched
/// meanwhile (or nullptr).
template <class Scalar>
void descriptor_cotangent_centre(Scalar const* t, Scalar const* gd, int m1, int m2, bool accumulate, Scalar* out,
                                 Scalar const* next_gd = nullptr) {
#if defined(DPK_HAS_SMALL_GEMM)
  if constexpr (std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>) {
    constexpr int lanes = blas::detail::Simd<Scalar>::lanes;
    if (m2 <= m1) {
      if (m2 == lanes) return descriptor_cotangent_tiles<Scalar, 1>(t, gd, m1, accumulate, out, next_gd);
      if (m2 == 2 * lanes) return descriptor_cotangent_tiles<Scalar, 2>(t, gd, m1, accumulate, out, next_gd);
    }
  }
#endif
  (void)next_gd;
  descriptor_cotangent_gemms(t, gd, m1, m2, accumulate, out);
}

/// Cotangent of T from a cotangent of D (M1 x M2, row position(i) of `gd`):
/// out = gD T< + pad(gD^T T), written (accumulate = false) or added (true) into `out` (nloc, 4, M1)
/// on the rows that may have neighbours (rows past in.rows_with_neighbours(), ghosts, are left).
/// Host threads take whole centres (descriptor_cotangent_centre); the device schedule one
/// (centre, m) pair per thread.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void descriptor_cotangent(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                          MatrixView<Scalar, MemorySpace> gd, View3<Scalar, MemorySpace> const& t,
                          View3<Scalar, MemorySpace> const& out, bool accumulate) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto position = in.position;
  int const m1 = in.m1, m2 = in.m2;
  int const centre_rows = in.centre_rows < 0 ? in.nloc : in.centre_rows;
  char const* const label = "dpk::descriptor::SeA::Descriptor_cotangent";
  int const rows = in.rows_with_neighbours();  // later rows (ghosts) are neither read nor written
  if constexpr (host_schedule_v<ExecutionSpace>) {
    Kokkos::parallel_for(label, DynamicRangePolicy<ExecutionSpace>(space, 0, rows), [=](int const i) {
      int const p = position(i);
      Scalar* const out_i = &out(i, 0, 0);
      if (p >= centre_rows) {  // not a centre: gD = 0, so a zero cotangent
        if (!accumulate)
          for (int k = 0; k < 4 * m1; ++k) out_i[k] = Scalar(0);
        return;
      }
      int const next = i + 1 < rows ? position(i + 1) : centre_rows;  // its gD is fetched meanwhile
      descriptor_cotangent_centre(&t(i, 0, 0), &gd(p, 0), m1, m2, accumulate, out_i,
                                  next < centre_rows ? &gd(next, 0) : nullptr);
    });
    return;
  }
  Kokkos::parallel_for(
      label, DynamicMDRangePolicy2<ExecutionSpace>(space, {0, 0}, {rows, m1}),
      KOKKOS_LAMBDA(int const i, int const m) {
        int const p = position(i);
        Scalar const* const tr = &t(i, 0, 0);  // (4, m1) block of centre i
        Scalar acc[4] = {0, 0, 0, 0};
        if (p < centre_rows) {  // centres only: other atoms have gD = 0, so a zero cotangent
          add_dot4<true>(tr, m1, &gd(p, m * m2), 1, m2, acc);          // sum_n gD(m, n) T(c, n)
          if (m < m2) add_dot4<false>(tr, m1, &gd(p, m), m2, m1, acc);  // sum_mm gD(mm, m) T(c, mm)
        }
        for (int c = 0; c < 4; ++c) out(i, c, m) = (accumulate ? out(i, c, m) : Scalar(0)) + acc[c];
      });
}

/// Sets the constant (empty-slot) rows of an embedding-row matrix to zero.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void zero_constant_rows(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                        MatrixView<Scalar, MemorySpace> x) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto const_base = in.rows.const_base;
  int const ntypes = in.ntypes, ncol = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "dpk::descriptor::SeA::zero_constant_rows",
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {in.rows.nnets * ntypes, ncol}),
      KOKKOS_LAMBDA(int const p, int const m) { x(const_base(p / ntypes) + p % ntypes, m) = Scalar(0); });
}

/// The constant (empty-slot) rows of the embedding-output cotangent, gG = (1/nnei) sum over
/// centres of type ti of n_empty gT Rn0, a fixed-order sum (deterministic for any thread count,
/// so that training restarts reproduce bit for bit; no atomics). Added to rows const_base(k) + ti
/// of `gg` (zeroed by the caller), or written to row k * ntypes + ti of `gg` when `compact`.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void embedding_cotangent_constants(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                                   View3<Scalar, MemorySpace> const& gtm, MatrixView<Scalar, MemorySpace> gg,
                                   bool compact) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  auto count = in.count;
  auto types = in.types;
  auto sel_offset = in.rows.sel_offset;
  auto const_base = in.rows.const_base;
  auto empty_row = in.empty_row;
  // Rows past rows_with_neighbours() (ghosts) are not centres: their gT is zero and not written.
  int const ntypes = in.ntypes, m1 = in.m1, rows = in.rows_with_neighbours(), nnets = in.rows.nnets;
  bool const tos = in.type_one_side;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  int const lanes = vector_lanes<ExecutionSpace>();
  Kokkos::parallel_for(
      "dpk::descriptor::SeA::Embedding_cotangent_constant",
      Kokkos::TeamPolicy<ExecutionSpace>(space, nnets * ntypes, 1, lanes), KOKKOS_LAMBDA(Team const& team) {
        int const k = team.league_rank() / ntypes, ti = team.league_rank() % ntypes;
        int const tj = EmbeddingRows<MemorySpace>::neighbour_type_of(tos, ntypes, k);
        int const crow = compact ? team.league_rank() : const_base(k) + ti;
        if (compact) team_vector_for(team, m1, [&](int const m) { gg(crow, m) = Scalar(0); });
        if (!tos && k % ntypes != ti) return;  // net (ti', tj) only sees centres of type ti'
        int const block = sel_offset(tj + 1) - sel_offset(tj);
        Scalar const e0 = empty_row(ti, tj, 0) * inv_nnei, e1 = empty_row(ti, tj, 1) * inv_nnei,
                     e2 = empty_row(ti, tj, 2) * inv_nnei, e3 = empty_row(ti, tj, 3) * inv_nnei;
        for (int i = 0; i < rows; ++i) {
          int const empty = block - count(i, tj);
          if (types(i) != ti || empty == 0) continue;
          Scalar const w = Scalar(empty);
          team_vector_for(team, m1, [&](int const m) {
            gg(crow, m) += w * (gtm(i, 0, m) * e0 + gtm(i, 1, m) * e1 + gtm(i, 2, m) * e2 + gtm(i, 3, m) * e3);
          });
        }
      });
}

/// Rows [r0, r1) of the embedding-output cotangent that embedding_cotangent writes, into `out`
/// (r1 - r0, M1), computed in the calling host thread (host schedule: the chunked network passes
/// make their seeds chunk by chunk, so that gG never goes through memory). Filled rows from gT
/// (and A, v when `v` is non-empty), the same expressions as embedding_cotangent; constant rows
/// from `constants` (embedding_cotangent_constants with `compact`), or zero when it is empty.
/// A paired row (EmbeddingRows::paired) gets the sum of its two slots' terms. With `fold`
/// (nloc, nnei, 4) non-empty each slot's term is multiplied by fold[., 0], its input tangent s'
/// (the unit-input-tangent seed of a row two slots share: s'_a g'_a + s'_b g'_b).
template <class Scalar, class MemorySpace>
void embedding_cotangent_rows(SeAInputs<Scalar, MemorySpace> const& in, View3<Scalar, MemorySpace> const& gtm,
                              View3<Scalar, MemorySpace> const& a, View3<Scalar, MemorySpace> const& v,
                              MatrixView<Scalar, MemorySpace> constants, int r0, int r1,
                              MatrixView<Scalar, MemorySpace> out, View3<Scalar, MemorySpace> const& fold = {}) {
  static_assert(accessible_v<InThread, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const m1 = in.m1, nnei = in.nnei;
  bool const with_v = v.extent(0) > 0, folded = fold.extent(0) > 0, paired = in.rows.paired;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  // o (=, or += with `add`) the term of slot (i, slot): (1/nnei)(gT_i Rn + A_i v) [times s'].
  auto slot_term = [&](int const i, int const slot, Scalar* const o, bool const add) {
    Scalar const* const gr = &gtm(i, 0, 0);
    Scalar const scale = folded ? fold(i, slot, 0) * inv_nnei : inv_nnei;
    Scalar rn[4];
    scaled_row(in.env, i, slot, scale, rn);
    Scalar const r_0 = rn[0], r_1 = rn[1], r_2 = rn[2], r_3 = rn[3];
    if (with_v) {
      Scalar const* const ar = &a(i, 0, 0);
      Scalar vn[4];
      scaled_row(v, i, slot, scale, vn);
      Scalar const v0 = vn[0], v1 = vn[1], v2 = vn[2], v3 = vn[3];
      DPK_SIMD_LOOP
      for (int m = 0; m < m1; ++m)
        o[m] = (add ? o[m] : Scalar(0)) + gr[m] * r_0 + gr[m1 + m] * r_1 + gr[2 * m1 + m] * r_2 +
               gr[3 * m1 + m] * r_3 + ar[m] * v0 + ar[m1 + m] * v1 + ar[2 * m1 + m] * v2 + ar[3 * m1 + m] * v3;
    } else {
      DPK_SIMD_LOOP
      for (int m = 0; m < m1; ++m)
        o[m] = (add ? o[m] : Scalar(0)) + gr[m] * r_0 + gr[m1 + m] * r_1 + gr[2 * m1 + m] * r_2 + gr[3 * m1 + m] * r_3;
    }
  };
  for (int r = r0; r < r1; ++r) {
    int const i = in.rows.row_atom(r);
    Scalar* const o = &out(r - r0, 0);
    if (i < 0) {
      Scalar const* const c = constants.extent(0) > 0 ? &constants(-1 - i, 0) : nullptr;
      DPK_SIMD_LOOP
      for (int m = 0; m < m1; ++m) o[m] = c != nullptr ? c[m] : Scalar(0);
      continue;
    }
    slot_term(i, in.rows.row_slot(r), o, false);
    if (paired && r + 4 < r1) {  // a partner slot's rows of Rn, v, s' lie anywhere: fetch them early
      int const ahead = in.rows.row_partner(r + 4);
      if (ahead >= 0) {
        int const c = ahead / nnei, slot = ahead % nnei;
        prefetch_ahead(&in.env(c, slot, 0), 0, 4);
        if (with_v) prefetch_ahead(&v(c, slot, 0), 0, 4);
        if (folded) prefetch_ahead(&fold(c, slot, 0), 0, 4);
      }
    }
    int const partner = paired ? in.rows.row_partner(r) : -1;
    if (partner >= 0) slot_term(partner / nnei, partner % nnei, o, true);
  }
}

/// Cotangent of the embedding outputs on filled rows: gG_j = (1/nnei)(gT Rn_j + A v_j)
/// (A, v may be empty: then gG_j = (1/nnei) gT Rn_j). On the constant rows (when
/// `constant_rows`): gG = (1/nnei) sum over centres of type ti of n_empty gT Rn0 (fixed order),
/// else the constant rows are set to zero.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void embedding_cotangent(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                         View3<Scalar, MemorySpace> const& gtm, MatrixView<Scalar, MemorySpace> gg,
                         bool constant_rows, View3<Scalar, MemorySpace> const& a = {},
                         View3<Scalar, MemorySpace> const& v = {}) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  require(!in.rows.paired, "se_a: paired embedding rows are read by the chunked host passes only");
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  auto env = in.env;
  auto count = in.count;
  auto types = in.types;
  auto row_offset = in.rows.row_offset;
  auto sel_offset = in.rows.sel_offset;
  auto const_base = in.rows.const_base;
  auto empty_row = in.empty_row;
  int const ntypes = in.ntypes, m1 = in.m1;
  bool const with_v = v.extent(0) > 0;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  int const lanes = vector_lanes<ExecutionSpace>();
  zero_constant_rows(space, in, gg);
  Kokkos::parallel_for(
      "dpk::descriptor::SeA::Embedding_cotangent", Kokkos::TeamPolicy<ExecutionSpace>(space, in.nloc, 1, lanes),
      KOKKOS_LAMBDA(Team const& team) {
        int const i = team.league_rank();
        Scalar const* const gr = &gtm(i, 0, 0);             // (4, m1) block of centre i
        Scalar const* const ar = with_v ? &a(i, 0, 0) : gr;  // (4, m1) block of centre i
        for (int tj = 0; tj < ntypes; ++tj) {
          int const row = row_offset(i, tj), first = sel_offset(tj), n = count(i, tj);
          for (int j = 0; j < n; ++j) {
            int const slot = first + j;
            Scalar const r0 = env(i, slot, 0) * inv_nnei, r1 = env(i, slot, 1) * inv_nnei,
                         r2 = env(i, slot, 2) * inv_nnei, r3 = env(i, slot, 3) * inv_nnei;
            Scalar* const out = &gg(row + j, 0);
            if (with_v) {
              Scalar const v0 = v(i, slot, 0) * inv_nnei, v1 = v(i, slot, 1) * inv_nnei,
                           v2 = v(i, slot, 2) * inv_nnei, v3 = v(i, slot, 3) * inv_nnei;
              team_vector_for(team, m1, [&](int const m) {
                out[m] = gr[m] * r0 + gr[m1 + m] * r1 + gr[2 * m1 + m] * r2 + gr[3 * m1 + m] * r3 + ar[m] * v0 +
                         ar[m1 + m] * v1 + ar[2 * m1 + m] * v2 + ar[3 * m1 + m] * v3;
              });
            } else {
              team_vector_for(team, m1, [&](int const m) {
                out[m] = gr[m] * r0 + gr[m1 + m] * r1 + gr[2 * m1 + m] * r2 + gr[3 * m1 + m] * r3;
              });
            }
          }
        }
      });
  if (!constant_rows) return;
  embedding_cotangent_constants(space, in, gtm, gg, false);
}

/// One filled slot's g_j = (1/nnei) A^T G_j + e0 gs_j into out[0..3]: four dot products over the
/// features of A (4 x M1, rows M1 apart) with the row G_j, then the radial term.
template <class Scalar>
KOKKOS_INLINE_FUNCTION void environment_cotangent_row(Scalar const* a, int m1, Scalar const* g_row, Scalar inv_nnei,
                                                      Scalar gs, Scalar* out) {
  Scalar acc[4] = {0, 0, 0, 0};
  add_dot4<true>(a, m1, g_row, 1, m1, acc);
  for (int c = 0; c < 4; ++c) out[c] = acc[c] * inv_nnei;
  out[0] += gs;
}

/// g_j = dE/dRn_j = (1/nnei) A^T G_j + e0 gs_j on filled slots, 0 on empty slots; (nloc, nnei, 4),
/// rows past in.rows_with_neighbours() (ghosts) not written.
/// Host threads take whole centres, the device schedule one (centre, slot) pair per thread;
/// both take each row through environment_cotangent_row (the same bits). As a GEMM with four
/// result columns (G rows times A^T) this ran at 11 GFLOP/s in the float64 step (one Zen 5 core).
/// With `dg_ds` (host schedule, unit input tangents: the embedding nets' dG/ds of every row,
/// nn::NetworkFamily::set_unit_input_tangents) gs is made here instead of read: dE/dG_j =
/// (1/nnei) sum_c Rn_jc A_c, so gs_j = dE/dG_j . dG/ds_j = (1/nnei) sum_c Rn_jc (A_c . dG/ds_j),
/// four more dot products per row; neither dE/dG nor dE/ds goes through memory and no
/// first-order pass through the embedding nets is needed. With paired rows a slot that reads
/// its owner's row streams the forward pass's copies of G and dG/ds (`shared_g`, `shared_dg`,
/// copy_shared_rows) in its own centre's loop, so each centre's A stays in cache.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void environment_cotangent(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                           View3<Scalar, MemorySpace> const& a, MatrixView<Scalar, MemorySpace> g,
                           MatrixView<Scalar, MemorySpace> gs, View3<Scalar, MemorySpace> const& out,
                           MatrixView<Scalar, MemorySpace> dg_ds = {}, MatrixView<Scalar, MemorySpace> shared_g = {},
                           MatrixView<Scalar, MemorySpace> shared_dg = {}) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto count = in.count;
  auto row_offset = in.rows.row_offset;
  auto sel_offset = in.rows.sel_offset;
  int const ntypes = in.ntypes, m1 = in.m1, nnei = in.nnei;
  Scalar const inv_nnei = Scalar(1) / Scalar(in.nnei);
  char const* const label = "dpk::descriptor::SeA::Environment_cotangent";
  if constexpr (host_schedule_v<ExecutionSpace>) {
    auto env = in.env;
    auto pair = in.rows.slot_pair;
    auto shared_begin = in.rows.shared_begin;
    bool const from_derivative = dg_ds.extent(0) > 0, paired = in.rows.paired;
    require(!paired || (from_derivative && shared_g.extent(0) >= std::size_t(in.rows.shared_rows) &&
                        shared_dg.extent(0) >= std::size_t(in.rows.shared_rows)),
            "environment_cotangent: paired rows need dE/ds from dG/ds (unit input tangents) and the shared rows' "
            "copies of G and dG/ds");
    Kokkos::parallel_for(label, DynamicRangePolicy<ExecutionSpace>(space, 0, in.rows_with_neighbours()), [=](int const i) {
      Scalar const* const a_i = &a(i, 0, 0);
      int k = paired ? shared_begin(i) : 0;  // this centre's reading slots' copies, in slot order
      for (int tj = 0; tj < ntypes; ++tj) {
        int const first = sel_offset(tj), slots = sel_offset(tj + 1) - first, n = count(i, tj);
        int row = row_offset(i, tj);  // the block's own rows, in slot order
        for (int j = 0; j < n; ++j) {
          int const slot = first + j;
          bool const reader = paired && EmbeddingRows<MemorySpace>::reads_owner(pair(i, slot));
          Scalar const* const g_row = reader ? &shared_g(k, 0) : &g(row, 0);
          Scalar const* const d_row = from_derivative ? (reader ? &shared_dg(k, 0) : &dg_ds(row, 0)) : nullptr;
          // Owners read G and dG/ds, readers the copies, in an order the pair states decide and
          // the hardware prefetcher does not follow: fetch the row two ahead in this slot's stream.
          prefetch_ahead(g_row, 2 * m1, m1);
          if (from_derivative) prefetch_ahead(d_row, 2 * m1, m1);
          Scalar gs_j;
          if (from_derivative) {
            Scalar rn[4];
            scaled_row(env, i, slot, inv_nnei, rn);
            Scalar au[4] = {0, 0, 0, 0};
            add_dot4<true>(a_i, m1, d_row, 1, m1, au);  // A_i . dG/ds
            gs_j = rn[0] * au[0] + rn[1] * au[1] + rn[2] * au[2] + rn[3] * au[3];
          } else {
            gs_j = gs(row, 0);
          }
          environment_cotangent_row(a_i, m1, g_row, inv_nnei, gs_j, &out(i, slot, 0));
          if (reader)
            ++k;
          else
            ++row;
        }
        Scalar* const o = &out(i, first, 0);  // (slots, 4) rows of this block
        for (int z = 4 * n; z < 4 * slots; ++z) o[z] = Scalar(0);
      }
    });
    return;
  }
  require(dg_ds.extent(0) == 0 && !in.rows.paired,
          "environment_cotangent: dE/ds from dG/ds and paired rows are host-schedule paths");
  Kokkos::parallel_for(
      label, DynamicMDRangePolicy2<ExecutionSpace>(space, {0, 0}, {in.rows_with_neighbours(), nnei}),
      KOKKOS_LAMBDA(int const i, int const slot) {
        int tj = 0;
        while (tj + 1 < ntypes && slot >= sel_offset(tj + 1)) ++tj;
        int const j = slot - sel_offset(tj);
        if (j >= count(i, tj)) {
          for (int c = 0; c < 4; ++c) out(i, slot, c) = Scalar(0);
          return;
        }
        int const row = row_offset(i, tj) + j;
        environment_cotangent_row(&a(i, 0, 0), m1, &g(row, 0), inv_nnei, gs(row, 0), &out(i, slot, 0));
      });
}

}  // namespace dpk
