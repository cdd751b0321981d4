#pragma once
/// \file nearest_neighbors.hpp
/// \brief The nearest neighbour of every centre of a neighbour list, on the device: the batch
/// check for coincident atoms (CoincidentAtomsError) and the smallest neighbour distance that
/// model compression needs (DeePMD-kit's min_nbor_dist).

#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/neighbor/coincident_atoms.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <cmath>
#include <limits>
#include <string>

namespace dpk {

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

namespace detail {
/// First slot of every type block (each block is sorted by distance: its first slot is the
/// nearest neighbour of that type), for a kernel to capture.
template <class Scalar, class MemorySpace>
Kokkos::Array<int, 65> first_slots(NeighborList<Scalar, MemorySpace> const& nlist, int& nblocks) {
  Kokkos::Array<int, 65> block{};
  nblocks = int(nlist.sel_offset.size()) - 1;
  require(nblocks >= 0 && nblocks <= 64, "neighbour list with more than 64 types");
  for (int t = 0; t < nblocks; ++t) block[t] = nlist.sel_offset[std::size_t(t)];
  return block;
}
}  // namespace detail

/// Throws CoincidentAtomsError for the first neighbour pair (centre-major, slot order) of
/// `nlist` closer than min_pair_distance; `natoms` atoms per frame name frame and atoms.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void check_coincident_neighbors(ExecutionSpace const& space, NeighborList<Scalar, MemorySpace> const& nlist,
                                int natoms) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto const index = nlist.index;
  auto const rij = nlist.rij;
  int const nnei = nlist.nnei;
  Scalar const limit2 = Scalar(min_pair_distance * min_pair_distance);
  int nblocks = 0;
  auto const block = detail::first_slots(nlist, nblocks);
  long first = 0;
  Kokkos::parallel_reduce(
      "dpk::model::coincident_atoms", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nlist.nloc),
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
  if (nlist.nloc == 0 || first == Kokkos::reduction_identity<long>::min()) return;
  int const i = int(first / nnei), s = int(first % nnei);
  auto const j_view = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(index, i, s));
  auto const r_view =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(rij, i, s, Kokkos::ALL()));
  double const r =
      std::sqrt(double(r_view(0)) * r_view(0) + double(r_view(1)) * r_view(1) + double(r_view(2)) * r_view(2));
  int const j = j_view();
  throw CoincidentAtomsError(i / natoms, i % natoms, j % natoms, r, min_pair_distance);
}

/// Smallest distance (A) between a centre of `nlist` and any of its neighbours (periodic images
/// included); +infinity when no centre has a neighbour.
template <class ExecutionSpace, class Scalar, class MemorySpace>
double min_neighbor_distance(ExecutionSpace const& space, NeighborList<Scalar, MemorySpace> const& nlist) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  auto const rij = nlist.rij;
  auto const index = nlist.index;
  int const nnei = nlist.nnei;
  int nblocks = 0;
  auto const block = detail::first_slots(nlist, nblocks);
  Scalar nearest2 = 0;
  Kokkos::parallel_reduce(
      "dpk::model::min_neighbor_distance", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nlist.nloc),
      KOKKOS_LAMBDA(int const i, Scalar& lowest) {
        for (int t = 0; t < nblocks; ++t) {
          int const s = block[t];
          if (s >= nnei || index(i, s) < 0) continue;
          Scalar const r2 = rij(i, s, 0) * rij(i, s, 0) + rij(i, s, 1) * rij(i, s, 1) + rij(i, s, 2) * rij(i, s, 2);
          if (r2 < lowest) lowest = r2;
        }
      },
      Kokkos::Min<Scalar>(nearest2));
  if (nlist.nloc == 0 || nearest2 == Kokkos::reduction_identity<Scalar>::min())
    return std::numeric_limits<double>::infinity();
  return std::sqrt(double(nearest2));
}

}  // namespace dpk
