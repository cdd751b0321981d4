#pragma once
/// \file neighbor_list.hpp
/// \brief DeePMD-kit's formatted neighbour list (per-type blocks of `sel[t]` slots) and its
/// reverse index (for every atom, the (centre, slot) pairs that point at it).

#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/scan.hpp>
#include <dpk/core/types.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dpk {

/// Formatted neighbour list of a batch (SPEC.md section 2).
///
/// Atom a of the batch is atom a % natoms of frame a / natoms. Rows [0, nloc) are valid; the
/// Views may be larger (workspaces grow, never shrink), so consumers use `nloc`, not extents.
/// Slot block t = [sel_offset[t], sel_offset[t] + sel[t]) holds neighbours of type t sorted by
/// distance; its first count(i, t) slots are filled, the rest hold index -1 and rij 0. In a
/// one-frame batch whose atoms from Frames::centres on are only neighbours (MD ghosts), those rows
/// from `searched_rows` on have count 0 and index -1 but their rij is not written.
template <class Scalar, class MemorySpace>
struct NeighborList {
  static_assert(Kokkos::is_memory_space<MemorySpace>::value, "MemorySpace must be a Kokkos memory space");
  int nloc = 0;    ///< centre atoms (all atoms of the batch)
  int nnei = 0;    ///< slots per centre, sum(sel)
  int ntypes = 0;  ///< neighbour types (blocks)
  /// (nloc, nnei): neighbour atom index in the batch (the owner atom for periodic images), -1 = empty.
  View2<int, MemorySpace> index{"dpk::neighbor::index", 0, 0};
  /// (nloc, nnei, 3): r_neighbour_image - r_centre, 0 for empty slots.
  View3<Scalar, MemorySpace> rij{"dpk::neighbor::rij", 0, 0, 3};
  /// (nloc, ntypes): filled slots of block t (always the first slots of the block).
  View2<int, MemorySpace> count{"dpk::neighbor::count", 0, 0};
  std::vector<int> sel;         ///< host: slots per neighbour type
  std::vector<int> sel_offset;  ///< host: first slot of each block, ntypes + 1 entries
  long dropped = 0;             ///< host: neighbours dropped beyond sel in the last build, summed over centres
  /// Rows [0, searched_rows) may have neighbours; every later row is a ghost's (no neighbours,
  /// rij not written). -1 (lists filled by hand): all nloc rows.
  int searched_rows = -1;
  /// The rows that may have neighbours: the kernels that make per-slot values (environment
  /// matrix, its cotangent) stop there.
  int rows_searched() const { return searched_rows < 0 || searched_rows > nloc ? nloc : searched_rows; }

  /// Reverse index (filled by NeighborSearch::build or build_reverse_neighbors): the pairs that
  /// point at atom n are reverse_pair[reverse_offset[n] .. reverse_offset[n+1]), each stored as
  /// centre * nnei + slot, in ascending order. Lets the force product gather instead of scatter.
  View1<int, MemorySpace> reverse_offset{"dpk::neighbor::reverse_offset", 0};
  View1<int, MemorySpace> reverse_pair{"dpk::neighbor::reverse_pair", 0};
  int reverse_nloc = -1;  ///< nloc for which the reverse index was built (-1: not built)
  /// Cursor workspace of the reverse fill (host spaces: per-thread-chunk counts and cursors,
  /// chunks * (nloc + 1)).
  View1<int, MemorySpace> reverse_cursor{"dpk::neighbor::reverse_cursor", 0};
  /// (nloc * nnei) position in reverse_pair of each filled (centre, slot); undefined for empty slots.
  View1<int, MemorySpace> reverse_position{"dpk::neighbor::reverse_position", 0};
};

/// Fills list.reverse_offset / reverse_pair (and reverse_position) from list.index.
/// Every segment comes out in ascending pair order, for any thread count. Host spaces: each
/// thread counts and then fills a contiguous chunk of centres into its own cursors (no atomics,
/// no sort). Device spaces: atomic counting sort, then each segment sorted.
/// NeighborSearch::build calls this; call it yourself only for lists filled by hand.
template <class Scalar, class ExecutionSpace>
void build_reverse_neighbors(ExecutionSpace const& space,
                             NeighborList<Scalar, typename ExecutionSpace::memory_space>& list) {
  int const nloc = list.nloc, nnei = list.nnei;
  int const searched = list.rows_searched();  // the later rows (ghosts) have no pairs
  require(nloc >= 0 && nnei >= 0, "build_reverse_neighbors: negative nloc or nnei");
  std::size_t const pairs = std::size_t(nloc) * std::size_t(nnei) + 1;
  ensure_extent(list.reverse_offset, nloc + 1);
  ensure_extent(list.reverse_pair, pairs);
  ensure_extent(list.reverse_position, pairs);
  auto index = list.index;
  auto offset = list.reverse_offset;
  auto pair = list.reverse_pair;
  auto position = list.reverse_position;
  using Range = Kokkos::RangePolicy<ExecutionSpace>;
  if constexpr (host_schedule_v<ExecutionSpace>) {
    int const chunks = std::max(1, std::min(int(space.concurrency()), nloc));
    std::size_t const stride = std::size_t(nloc) + 1;
    ensure_extent(list.reverse_cursor, std::size_t(chunks) * stride);
    int* const cursor = list.reverse_cursor.data();
    auto first_centre = [=](int c) { return int(std::int64_t(searched) * c / chunks); };
    Kokkos::parallel_for("dpk::neighbor::ReverseCount", Range(space, 0, chunks).set_chunk_size(1), [=](int c) {
      int* const count = cursor + c * stride;
      for (int n = 0; n < nloc; ++n) count[n] = 0;
      for (int i = first_centre(c); i < first_centre(c + 1); ++i)
        for (int s = 0; s < nnei; ++s) {
          int const n = index(i, s);
          if (n >= 0) ++count[n];
        }
    });
    // Segment n starts at offset(n); inside it chunk c starts after the chunks before it.
    Kokkos::parallel_scan("dpk::neighbor::ReverseOffsets", Range(space, 0, nloc + 1),
                          [=](int n, int& partial, bool final) {
                            int total = 0;
                            if (n < nloc)
                              for (int c = 0; c < chunks; ++c) total += cursor[c * stride + n];
                            if (final) {
                              offset(n) = partial;
                              int start = partial;
                              if (n < nloc)
                                for (int c = 0; c < chunks; ++c) {
                                  int const k = cursor[c * stride + n];
                                  cursor[c * stride + n] = start;
                                  start += k;
                                }
                            }
                            partial += total;
                          });
    Kokkos::parallel_for("dpk::neighbor::ReverseFill", Range(space, 0, chunks).set_chunk_size(1), [=](int c) {
      int* const next = cursor + c * stride;
      for (int i = first_centre(c); i < first_centre(c + 1); ++i)
        for (int s = 0; s < nnei; ++s) {
          int const n = index(i, s);
          if (n < 0) continue;
          int const p = next[n]++, e = i * nnei + s;
          pair(p) = e;
          position(e) = p;
        }
    });
  } else {
    ensure_extent(list.reverse_cursor, nloc + 1);
    auto cursor = list.reverse_cursor;
    Kokkos::deep_copy(space, Kokkos::subview(cursor, std::make_pair(0, nloc + 1)), 0);
    Kokkos::parallel_for(
        "dpk::neighbor::ReverseCount", Range(space, 0, searched), KOKKOS_LAMBDA(int i) {
          for (int s = 0; s < nnei; ++s) {
            int const n = index(i, s);
            if (n >= 0) Kokkos::atomic_add(&cursor(n), 1);
          }
        });
    exclusive_scan(
        space, "dpk::neighbor::ReverseOffsets", nloc, KOKKOS_LAMBDA(int n) { return cursor(n); }, offset);
    Kokkos::parallel_for(
        "dpk::neighbor::ReverseCursor", Range(space, 0, nloc), KOKKOS_LAMBDA(int n) { cursor(n) = offset(n); });
    Kokkos::parallel_for(
        "dpk::neighbor::ReverseFill", Range(space, 0, searched), KOKKOS_LAMBDA(int i) {
          for (int s = 0; s < nnei; ++s) {
            int const n = index(i, s);
            if (n >= 0) pair(Kokkos::atomic_fetch_add(&cursor(n), 1)) = i * nnei + s;
          }
        });
    Kokkos::parallel_for(
        "dpk::neighbor::ReverseSort", Range(space, 0, nloc), KOKKOS_LAMBDA(int n) {
          // Insertion sort: segments are short.
          int const begin = offset(n), end = offset(n + 1);
          for (int a = begin + 1; a < end; ++a) {
            int const value = pair(a);
            int b = a;
            while (b > begin && pair(b - 1) > value) {
              pair(b) = pair(b - 1);
              --b;
            }
            pair(b) = value;
          }
        });
    Kokkos::parallel_for(
        "dpk::neighbor::ReversePositions", Range(space, 0, nloc), KOKKOS_LAMBDA(int n) {
          for (int p = offset(n); p < offset(n + 1); ++p) {
            position(pair(p)) = p;
          }
        });
  }
  list.reverse_nloc = nloc;
}

}  // namespace dpk
