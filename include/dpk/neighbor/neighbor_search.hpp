#pragma once
/// \file neighbor_search.hpp
/// \brief O(N) neighbour search on the device, formatted the way DeePMD-kit formats its lists.

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/types.hpp>
#include <dpk/neighbor/cell_list.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <string>
#include <vector>

namespace dpk {

namespace detail {

/// Periodic image code: three image indices in [-512, 511] packed into one int (ordering key).
KOKKOS_INLINE_FUNCTION int encode_image(int i0, int i1, int i2) {
  return ((i0 + 512) * 1024 + (i1 + 512)) * 1024 + (i2 + 512);
}
/// Inverse of encode_image.
KOKKOS_INLINE_FUNCTION void decode_image(int code, int& i0, int& i1, int& i2) {
  i2 = code % 1024 - 512;
  i1 = (code / 1024) % 1024 - 512;
  i0 = code / (1024 * 1024) - 512;
}

}  // namespace detail

/// Neighbour search for a fixed cutoff and per-type slot counts `sel` (SPEC.md section 2).
///
/// Candidates: every atom or periodic image j != i with |r_ij|^2 < rcut^2 (in Scalar). Inside a
/// type block they are ordered like DeePMD-kit's `format_nlist_i_cpu`: by r^2 computed in
/// float32 from float32-cast positions, ties by owner index, then by image; a candidate is kept
/// if that float32 r^2 <= rcut^2. Beyond sel[t] the farthest are dropped and counted.
template <class Scalar, class ExecutionSpace>
class NeighborSearch {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;

  /// Cutoff radius (A) and slots per neighbour type (sel.size() = number of types).
  NeighborSearch(double rcut, std::vector<int> sel) : rcut_(rcut), sel_(std::move(sel)) {
    require(rcut_ > 0, "NeighborSearch: rcut must be positive, got " + std::to_string(rcut_));
    require(!sel_.empty(), "NeighborSearch: sel must list at least one type");
    sel_offset_.assign(sel_.size() + 1, 0);
    for (std::size_t t = 0; t < sel_.size(); ++t) {
      require(sel_[t] >= 0, "NeighborSearch: sel[" + std::to_string(t) + "] is negative");
      sel_offset_[t + 1] = sel_offset_[t] + sel_[t];
    }
    int const ntypes = int(sel_.size());
    sel_device_ = View1<int, memory_space>("dpk::neighbor::sel", ntypes);
    sel_offset_device_ = View1<int, memory_space>("dpk::neighbor::sel_offset", ntypes + 1);
    auto sel_host = Kokkos::create_mirror_view(sel_device_);
    auto offset_host = Kokkos::create_mirror_view(sel_offset_device_);
    for (int t = 0; t < ntypes; ++t) sel_host(t) = sel_[t];
    for (int t = 0; t <= ntypes; ++t) offset_host(t) = sel_offset_[t];
    Kokkos::deep_copy(sel_device_, sel_host);
    Kokkos::deep_copy(sel_offset_device_, offset_host);
  }

  double rcut() const { return rcut_; }                ///< cutoff radius
  std::vector<int> const& sel() const { return sel_; }  ///< slots per type
  int nnei() const { return sel_offset_.back(); }       ///< slots per centre
  /// The cell list of the last build (wrapped positions, cells).
  CellList<Scalar, ExecutionSpace> const& cells() const { return cells_; }

  /// Builds the formatted list of every atom of `frames` into `out` (rows [0, frames.nloc())),
  /// plus its reverse index. Uses frames.nloc(), not view extents; allocates only when the batch
  /// grows. Synchronous: returns after `out.dropped` is known.
  void build(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
             NeighborList<Scalar, memory_space>& out) {
    int const nloc = frames.nloc(), natoms = frames.natoms, nnei = this->nnei();
    int const ntypes = int(sel_.size());
    require(frames.types.extent(0) >= std::size_t(nloc),
            "NeighborSearch: frames.types has " + std::to_string(frames.types.extent(0)) + " entries, expected " +
                std::to_string(nloc));
    cells_.build(space, frames, rcut_);

    out.nloc = nloc;
    out.nnei = nnei;
    out.ntypes = ntypes;
    out.sel = sel_;
    out.sel_offset = sel_offset_;
    detail::ensure_rows(out.index, nloc, nnei);
    detail::ensure_rows(out.rij, nloc, nnei, 3);
    detail::ensure_rows(out.count, nloc, ntypes);
    detail::ensure_rows(key_, nloc, nnei);
    detail::ensure_rows(image_, nloc, nnei);

    auto index = out.index;
    auto rij = out.rij;
    auto count = out.count;
    auto key = key_;
    auto image = image_;
    auto types = frames.types;
    auto wrapped = cells_.wrapped();
    auto real = cells_.real_table();
    auto integer = cells_.integer_table();
    auto cell_of_atom = cells_.cell_of_atom();
    auto cell_start = cells_.cell_start();
    auto cell_atoms = cells_.cell_atoms();
    auto sel = sel_device_;
    auto sel_offset = sel_offset_device_;
    Scalar const rc2 = Scalar(rcut_) * Scalar(rcut_);
    float const rc2_float = float(rcut_ * rcut_);
    using C = CellGridColumns;

    long dropped = 0;
    Kokkos::parallel_reduce(
        "dpk::neighbor::Search", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc),
        KOKKOS_LAMBDA(int i, long& dropped_sum) {
          int const f = i / natoms;
          int const n0 = integer(f, C::ncell), n1 = integer(f, C::ncell + 1), n2 = integer(f, C::ncell + 2);
          int const k0 = integer(f, C::reach), k1 = integer(f, C::reach + 1), k2 = integer(f, C::reach + 2);
          int const offset = integer(f, C::cell_offset);
          int const local = cell_of_atom(i) - offset;
          int const c2 = local % n2, c1 = (local / n2) % n1, c0 = local / (n1 * n2);
          Scalar const xi0 = wrapped(i, 0), xi1 = wrapped(i, 1), xi2 = wrapped(i, 2);
          float const fi0 = float(xi0), fi1 = float(xi1), fi2 = float(xi2);
          for (int t = 0; t < ntypes; ++t) count(i, t) = 0;
          for (int o0 = -k0; o0 <= k0; ++o0) {
            int const u0 = c0 + o0, w0 = ((u0 % n0) + n0) % n0, m0 = (u0 - w0) / n0;
            for (int o1 = -k1; o1 <= k1; ++o1) {
              int const u1 = c1 + o1, w1 = ((u1 % n1) + n1) % n1, m1 = (u1 - w1) / n1;
              for (int o2 = -k2; o2 <= k2; ++o2) {
                int const u2 = c2 + o2, w2 = ((u2 % n2) + n2) % n2, m2 = (u2 - w2) / n2;
                bool const home = (m0 == 0 && m1 == 0 && m2 == 0);
                Scalar shift[3];
                for (int d = 0; d < 3; ++d)
                  shift[d] = Scalar(m0) * real(f, C::box + d) + Scalar(m1) * real(f, C::box + 3 + d) +
                             Scalar(m2) * real(f, C::box + 6 + d);
                int const cell = offset + (w0 * n1 + w1) * n2 + w2;
                int const begin = cell_start(cell), end = cell_start(cell + 1);
                for (int p = begin; p < end; ++p) {
                  int const j = cell_atoms(p);
                  if (home && j == i) continue;
                  Scalar const xj0 = wrapped(j, 0) + shift[0];
                  Scalar const xj1 = wrapped(j, 1) + shift[1];
                  Scalar const xj2 = wrapped(j, 2) + shift[2];
                  Scalar const d0 = xj0 - xi0, d1 = xj1 - xi1, d2 = xj2 - xi2;
                  if (!(d0 * d0 + d1 * d1 + d2 * d2 < rc2)) continue;
                  int const t = types(j);
                  if (t < 0 || t >= ntypes) continue;
                  // DeePMD-kit's ordering key: float32 positions, float32 arithmetic.
                  float const e0 = float(xj0) - fi0, e1 = float(xj1) - fi1, e2 = float(xj2) - fi2;
                  float const kf = e0 * e0 + e1 * e1 + e2 * e2;
                  if (!(kf <= rc2_float)) continue;
                  int const code = detail::encode_image(m0, m1, m2);
                  int const base = sel_offset(t), capacity = sel(t);
                  int filled = count(i, t);
                  int pos;
                  if (filled == capacity) {
                    ++dropped_sum;
                    if (capacity == 0) continue;
                    int const last = base + capacity - 1;
                    bool const closer = kf < key(i, last) ||
                                        (kf == key(i, last) && (j < index(i, last) ||
                                                                (j == index(i, last) && code < image(i, last))));
                    if (!closer) continue;
                    pos = last;  // evict the farthest
                  } else {
                    pos = base + filled;
                    count(i, t) = filled + 1;
                  }
                  while (pos > base) {
                    float const kp = key(i, pos - 1);
                    int const jp = index(i, pos - 1);
                    bool const before = kf < kp || (kf == kp && (j < jp || (j == jp && code < image(i, pos - 1))));
                    if (!before) break;
                    key(i, pos) = kp;
                    index(i, pos) = jp;
                    image(i, pos) = image(i, pos - 1);
                    --pos;
                  }
                  key(i, pos) = kf;
                  index(i, pos) = j;
                  image(i, pos) = code;
                }
              }
            }
          }
          // Final pass: r_ij of the kept images (same arithmetic as the candidate test), padding.
          for (int t = 0; t < ntypes; ++t) {
            int const base = sel_offset(t), filled = count(i, t), end = base + sel(t);
            for (int s = base; s < base + filled; ++s) {
              int m0, m1, m2;
              detail::decode_image(image(i, s), m0, m1, m2);
              int const j = index(i, s);
              Scalar const xi[3] = {xi0, xi1, xi2};
              for (int d = 0; d < 3; ++d) {
                Scalar const shift = Scalar(m0) * real(f, C::box + d) + Scalar(m1) * real(f, C::box + 3 + d) +
                                     Scalar(m2) * real(f, C::box + 6 + d);
                rij(i, s, d) = (wrapped(j, d) + shift) - xi[d];
              }
            }
            for (int s = base + filled; s < end; ++s) {
              index(i, s) = -1;
              rij(i, s, 0) = rij(i, s, 1) = rij(i, s, 2) = Scalar(0);
            }
          }
        },
        dropped);
    out.dropped = dropped;
    build_reverse_neighbors(space, out);
  }

 private:
  double rcut_;
  std::vector<int> sel_, sel_offset_;
  CellList<Scalar, ExecutionSpace> cells_;
  View1<int, memory_space> sel_device_, sel_offset_device_;
  View2<float, memory_space> key_{"dpk::neighbor::key", 0, 0};
  View2<int, memory_space> image_{"dpk::neighbor::image", 0, 0};
};

}  // namespace dpk
