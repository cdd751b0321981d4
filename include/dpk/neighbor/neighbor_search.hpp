#pragma once
/// \file neighbor_search.hpp
/// \brief O(N) neighbour search on the device, formatted the way DeePMD-kit formats its lists.

#include <dpk/core/compat.hpp>  // Kokkos_Core.hpp (UniqueToken): Kokkos 4 refuses direct includes of its other headers

#include <cstdint>
#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/types.hpp>
#include <dpk/neighbor/cell_list.hpp>
#include <dpk/neighbor/neighbor_list.hpp>
#include <algorithm>
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

/// Ordering key of a candidate: float32 r^2 bits (monotonic for r^2 >= 0) above the owner index.
KOKKOS_INLINE_FUNCTION std::uint64_t pack_key(float r2, int owner) {
  union {
    float f;
    std::uint32_t u;
  } bits;
  bits.f = r2;
  return (std::uint64_t(bits.u) << 32) | std::uint64_t(std::uint32_t(owner));
}

/// Candidate a before candidate b: by (r^2, owner), then by image code.
KOKKOS_INLINE_FUNCTION bool key_before(std::uint64_t a, int image_a, std::uint64_t b, int image_b) {
  return a < b || (a == b && image_a < image_b);
}

/// Index of the lowest set bit of a non-zero mask.
KOKKOS_INLINE_FUNCTION int lowest_bit(std::uint64_t mask) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __ffsll(static_cast<long long>(mask)) - 1;
#else
  return __builtin_ctzll(mask);
#endif
}

/// The float32 r^2 stored in the high half of a pack_key key.
KOKKOS_INLINE_FUNCTION float key_r2(std::uint64_t key) {
  union {
    std::uint32_t u;
    float f;
  } bits;
  bits.u = std::uint32_t(key >> 32);
  return bits.f;
}

/// Sorts n (key, image) pairs by key_before in O(n) on average: a counting pass over n buckets
/// of r^2 in [0, r2_max] (bucket order agrees with key order), then an insertion pass that only
/// reorders within buckets. Scratch: key_tmp, image_tmp (n entries), bucket (2 n + 1 ints).
KOKKOS_INLINE_FUNCTION void bucket_sort(std::uint64_t* key, int* image, int n, float r2_max, std::uint64_t* key_tmp,
                                        int* image_tmp, int* bucket) {
  if (n < 2) return;
  float const scale = float(n) / r2_max;
  auto bucket_of = [&](std::uint64_t k) {
    int const b = int(key_r2(k) * scale);
    return b < n ? b : n - 1;
  };
  int* const id = bucket + n + 1;
  for (int b = 0; b <= n; ++b) bucket[b] = 0;
  for (int a = 0; a < n; ++a) id[a] = bucket_of(key[a]);
  for (int a = 0; a < n; ++a) ++bucket[id[a] + 1];
  for (int b = 0; b < n; ++b) bucket[b + 1] += bucket[b];
  for (int a = 0; a < n; ++a) {
    int const p = bucket[id[a]]++;
    key_tmp[p] = key[a];
    image_tmp[p] = image[a];
  }
  for (int a = 0; a < n; ++a) {
    std::uint64_t const k = key_tmp[a];
    int const m = image_tmp[a];
    int b = a;
    while (b > 0 && key_before(k, m, key[b - 1], image[b - 1])) {
      key[b] = key[b - 1];
      image[b] = image[b - 1];
      --b;
    }
    key[b] = k;
    image[b] = m;
  }
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
  static_assert(Kokkos::is_execution_space<ExecutionSpace>::value, "dpk: ExecutionSpace must be a Kokkos execution space");
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;

  /// Cutoff radius (A) and slots per neighbour type (sel.size() = number of types).
  NeighborSearch(double rcut, std::vector<int> sel) : rcut_(rcut), sel_(std::move(sel)) {
    require(rcut_ > 0, "NeighborSearch: rcut must be positive, got " + std::to_string(rcut_));
    require(!sel_.empty() && sel_.size() <= 64, "NeighborSearch: sel must list 1 to 64 types");
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
    // Candidate regions of the scratch rows: type t collects up to 2 sel[t] + 16 candidates
    // before they are sorted and cut back to the sel[t] nearest.
    region_device_ = View1<int, memory_space>("dpk::neighbor::region", ntypes + 1);
    auto region_host = Kokkos::create_mirror_view(region_device_);
    region_host(0) = 0;
    for (int t = 0; t < ntypes; ++t) {
      int const size = 2 * sel_[t] + 16;
      region_host(t + 1) = region_host(t) + size;
      region_max_ = std::max(region_max_, size);
    }
    region_total_ = region_host(ntypes);
    Kokkos::deep_copy(region_device_, region_host);
  }

  double rcut() const { return rcut_; }                 ///< cutoff radius
  std::vector<int> const& sel() const { return sel_; }  ///< slots per type
  int nnei() const { return sel_offset_.back(); }       ///< slots per centre
  /// The cell list of the last build (wrapped positions, cells).
  CellList<Scalar, ExecutionSpace> const& cells() const { return cells_; }

  /// Builds the formatted list of every atom of `frames` into `out` (rows [0, frames.nloc())),
  /// plus its reverse index. Atoms at or beyond frames.centres in their frame get empty rows
  /// (in a one-frame batch: count 0 and index -1 only; out.searched_rows = centres).
  /// Uses frames.nloc(), not view extents; allocates only when the batch
  /// grows. Synchronous: returns after `out.dropped` is known.
  void build(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
             NeighborList<Scalar, memory_space>& out) {
    int const nloc = frames.nloc(), natoms = frames.natoms, nnei = this->nnei();
    int const centres = frames.centres < 0 ? natoms : frames.centres;
    require(centres <= natoms, "NeighborSearch: frames.centres (" + std::to_string(centres) +
                                   ") exceeds frames.natoms (" + std::to_string(natoms) + ")");
    int const ntypes = int(sel_.size());
    require(frames.types.extent(0) >= std::size_t(nloc), "NeighborSearch: frames.types has " +
                                                             std::to_string(frames.types.extent(0)) +
                                                             " entries, expected " + std::to_string(nloc));
    // Cells of one cutoff (27 scanned per centre): measured faster than half-cutoff cells
    // (125 scanned, fewer candidates) on 192 and 12288 water atoms: per-cell overhead and
    // mispredicted accept branches cost more than the extra rejected candidates.
    cells_.build(space, frames, rcut_, 1);

    out.nloc = nloc;
    // One frame with ghosts (MD): rows [centres, nloc) are all ghosts, whose rij is never read.
    int const searched = frames.nframes == 1 ? centres : nloc;
    out.searched_rows = searched;
    out.nnei = nnei;
    out.ntypes = ntypes;
    out.sel = sel_;
    out.sel_offset = sel_offset_;
    ensure_rows(out.index, nloc, nnei);
    ensure_rows(out.rij, nloc, nnei, 3);
    ensure_rows(out.count, nloc, ntypes);
    // Candidate rows are scratch of one centre at a time: with fewer threads than centres each
    // thread reuses its own row (cache-resident), else one row per centre.
    auto token = token_;
    bool const per_thread = int(token.size()) < nloc;
    int const scratch_rows = per_thread ? int(token.size()) : nloc;
    // Row layout: the regions of every type, then a region-sized sorting area.
    ensure_rows(key_, scratch_rows, region_total_ + region_max_);
    ensure_rows(image_, scratch_rows, region_total_ + region_max_);
    ensure_rows(bucket_, scratch_rows, 2 * region_max_ + 1);

    auto index = out.index;
    auto rij = out.rij;
    auto count = out.count;
    auto key = key_;
    auto image = image_;
    auto bucket = bucket_;
    auto region = region_device_;
    int const sort_area = region_total_;
    auto types = frames.types;
    auto wrapped = cells_.wrapped();
    auto real = cells_.real_table();
    auto integer = cells_.integer_table();
    auto cell_of_atom = cells_.cell_of_atom();
    auto cell_start = cells_.cell_start();
    auto cell_atoms = cells_.cell_atoms();
    auto cell_position = cells_.cell_position();
    // Cells whose lower distance bound exceeds rcut (with a relative margin) are skipped.
    Scalar const prune = Scalar(rcut_ * (1.0 + 1e-5));
    auto sel = sel_device_;
    auto sel_offset = sel_offset_device_;
    Scalar const rc2 = Scalar(rcut_) * Scalar(rcut_);
    float const rc2_float = float(rcut_ * rcut_);
    using C = CellGridColumns;

    long dropped = 0;
    Kokkos::parallel_reduce(
        "dpk::neighbor::Search", Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, nloc),
        KOKKOS_LAMBDA(int i, long& dropped_sum) {
          int const f = i / natoms;
          int const n0 = integer(f, C::ncell), n1 = integer(f, C::ncell + 1), n2 = integer(f, C::ncell + 2);
          int const k0 = integer(f, C::reach), k1 = integer(f, C::reach + 1), k2 = integer(f, C::reach + 2);
          int const offset = integer(f, C::cell_offset);
          bool const orthogonal = integer(f, C::orthogonal) != 0;
          int const local = cell_of_atom(i) - offset;
          int const c2 = local % n2, c1 = (local / n2) % n1, c0 = local / (n1 * n2);
          Scalar const xi0 = wrapped(i, 0), xi1 = wrapped(i, 1), xi2 = wrapped(i, 2);
          float const fi0 = float(xi0), fi1 = float(xi1), fi2 = float(xi2);
          // Fractional coordinates of the centre, for skipping cells that are farther than rcut
          // (distance >= fractional gap * face distance along each cell vector).
          Scalar si[3];
          for (int d = 0; d < 3; ++d)
            si[d] = (xi0 - real(f, C::origin)) * real(f, C::inverse + d) +
                    (xi1 - real(f, C::origin + 1)) * real(f, C::inverse + 3 + d) +
                    (xi2 - real(f, C::origin + 2)) * real(f, C::inverse + 6 + d);
          Scalar const face[3] = {real(f, C::face), real(f, C::face + 1), real(f, C::face + 2)};
          int const n[3] = {n0, n1, n2}, k[3] = {k0, k1, k2};
          Scalar inv_n[3], box[9];
          for (int d = 0; d < 3; ++d) inv_n[d] = Scalar(1) / Scalar(n[d]);
          for (int q = 0; q < 9; ++q) box[q] = real(f, C::box + q);
          int const c[3] = {c0, c1, c2};
          // First unwrapped cell of the scan per direction: wrapped index and image, tracked
          // incrementally below (no divisions in the loops).
          int w_first[3], m_first[3];
          for (int d = 0; d < 3; ++d) {
            int const u = c[d] - k[d];
            w_first[d] = ((u % n[d]) + n[d]) % n[d];
            m_first[d] = (u - w_first[d]) / n[d];
          }
          // Distance lower bound of unwrapped cell u along direction d: fractional gap * face.
          auto gap = [&](int d, int u) {
            Scalar const lo = Scalar(u) * inv_n[d] - si[d], hi = si[d] - Scalar(u + 1) * inv_n[d];
            Scalar const g = lo > hi ? lo : hi;
            return g > Scalar(0) ? g * face[d] : Scalar(0);
          };
          Scalar const prune2 = prune * prune;
          for (int t = 0; t < ntypes; ++t) count(i, t) = 0;
          if (i % natoms >= centres) {  // a neighbour-only atom (ghost): empty row
            for (int s = 0; s < nnei; ++s) index(i, s) = -1;
            if (i < searched)  // rij of ghost rows only inside the searched rows (several frames)
              for (int s = 0; s < nnei; ++s) rij(i, s, 0) = rij(i, s, 1) = rij(i, s, 2) = Scalar(0);
            return;
          }
          int const scratch = per_thread ? token.acquire() : i;
          std::uint64_t* const key_row = &key(scratch, 0);  // raw rows: no stride reloads in the loops
          int* const image_row = &image(scratch, 0);
          int* const bucket_row = &bucket(scratch, 0);
          int* const count_row = &count(i, 0);
          // Sorts the `n` candidates of type t's region by DeePMD-kit's order.
          auto sort_region = [&](int t, int n) {
            int const base = region(t);
            detail::bucket_sort(key_row + base, image_row + base, n, rc2_float, key_row + sort_area,
                                image_row + sort_area, bucket_row);
          };
          int w0 = w_first[0], m0 = m_first[0];
          for (int u0 = c0 - k0; u0 <= c0 + k0; ++u0) {
            Scalar const g0 = gap(0, u0);
            if (g0 < prune) {
              Scalar const shift0[3] = {Scalar(m0) * box[0], Scalar(m0) * box[1], Scalar(m0) * box[2]};
              int w1 = w_first[1], m1 = m_first[1];
              for (int u1 = c1 - k1; u1 <= c1 + k1; ++u1) {
                Scalar const g1 = gap(1, u1);
                if (g1 < prune && !(orthogonal && g0 * g0 + g1 * g1 >= prune2)) {
                  Scalar const shift01[3] = {shift0[0] + Scalar(m1) * box[3], shift0[1] + Scalar(m1) * box[4],
                                             shift0[2] + Scalar(m1) * box[5]};
                  int const row = (w0 * n1 + w1) * n2 + offset;
                  int w2 = w_first[2], m2 = m_first[2];
                  for (int u2 = c2 - k2; u2 <= c2 + k2; ++u2) {
                    Scalar const g2 = gap(2, u2);
                    if (g2 < prune && !(orthogonal && g0 * g0 + g1 * g1 + g2 * g2 >= prune2)) {
                      bool const home = (m0 == 0 && m1 == 0 && m2 == 0);
                      Scalar const shift[3] = {shift01[0] + Scalar(m2) * box[6], shift01[1] + Scalar(m2) * box[7],
                                               shift01[2] + Scalar(m2) * box[8]};
                      int const cell = row + w2;
                      int const begin = cell_start(cell), end = cell_start(cell + 1);
                      // 64 candidates at a time: a branch-free pass marks those within rcut,
                      // then only the marked ones are visited (no mispredicted rejections).
                      for (int p0 = begin; p0 < end; p0 += 64) {
                        int const len = end - p0 < 64 ? end - p0 : 64;
                        std::uint64_t within = 0;
                        for (int q = 0; q < len; ++q) {
                          Scalar const d0 = (cell_position(p0 + q, 0) + shift[0]) - xi0;
                          Scalar const d1 = (cell_position(p0 + q, 1) + shift[1]) - xi1;
                          Scalar const d2 = (cell_position(p0 + q, 2) + shift[2]) - xi2;
                          within |= std::uint64_t(d0 * d0 + d1 * d1 + d2 * d2 < rc2) << q;
                        }
                        for (; within != 0; within &= within - 1) {
                          int const p = p0 + detail::lowest_bit(within);
                          Scalar const xj0 = cell_position(p, 0) + shift[0];
                          Scalar const xj1 = cell_position(p, 1) + shift[1];
                          Scalar const xj2 = cell_position(p, 2) + shift[2];
                          int const j = cell_atoms(p);
                          if (home && j == i) continue;
                          int const t = types(j);
                          if (t < 0 || t >= ntypes) continue;
                          // DeePMD-kit's ordering key: float32 positions, float32 arithmetic.
                          float const e0 = float(xj0) - fi0, e1 = float(xj1) - fi1, e2 = float(xj2) - fi2;
                          float const kf = e0 * e0 + e1 * e1 + e2 * e2;
                          if (!(kf <= rc2_float)) continue;
                          int const code = detail::encode_image(m0, m1, m2);
                          std::uint64_t const packed = detail::pack_key(kf, j);
                          // Append to the type's region; a full region is sorted and cut back
                          // to the sel[t] nearest (none of the others can be kept).
                          int const base = region(t), size = region(t + 1) - base;
                          int const filled = count_row[t];
                          key_row[base + filled] = packed;
                          image_row[base + filled] = code;
                          if (filled + 1 < size) {
                            count_row[t] = filled + 1;
                          } else {
                            sort_region(t, size);
                            dropped_sum += size - sel(t);
                            count_row[t] = sel(t);
                          }
                        }
                      }
                    }
                    if (++w2 == n2) w2 = 0, ++m2;
                  }
                }
                if (++w1 == n1) w1 = 0, ++m1;
              }
            }
            if (++w0 == n0) w0 = 0, ++m0;
          }
          // Final pass: sort each region, keep the sel[t] nearest in slots sel_offset[t] + rank,
          // with r_ij computed by the same arithmetic as the candidate test.
          Scalar const xi[3] = {xi0, xi1, xi2};
          for (int t = 0; t < ntypes; ++t) {
            int const filled = count_row[t], capacity = sel(t);
            int const kept = filled < capacity ? filled : capacity;
            dropped_sum += filled - kept;
            sort_region(t, filled);
            int const base = sel_offset(t), end = base + capacity, from = region(t);
            for (int a = 0; a < kept; ++a) {
              std::uint64_t const ka = key_row[from + a];
              int m0, m1, m2;
              detail::decode_image(image_row[from + a], m0, m1, m2);
              int const j = int(ka & 0xffffffffu), s = base + a;
              index(i, s) = j;
              for (int d = 0; d < 3; ++d) {
                Scalar const shift = Scalar(m0) * real(f, C::box + d) + Scalar(m1) * real(f, C::box + 3 + d) +
                                     Scalar(m2) * real(f, C::box + 6 + d);
                rij(i, s, d) = (wrapped(j, d) + shift) - xi[d];
              }
            }
            for (int s = base + kept; s < end; ++s) {
              index(i, s) = -1;
              rij(i, s, 0) = rij(i, s, 1) = rij(i, s, 2) = Scalar(0);
            }
            count_row[t] = kept;
          }
          if (per_thread) token.release(scratch);
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
  View2<std::uint64_t, memory_space> key_{"dpk::neighbor::key", 0, 0};
  View2<int, memory_space> image_{"dpk::neighbor::image", 0, 0};
  View2<int, memory_space> bucket_{"dpk::neighbor::bucket", 0, 0};
  View1<int, memory_space> region_device_;  ///< first scratch entry of each type's candidate region
  int region_total_ = 0, region_max_ = 0;
  /// Thread ids for the per-thread candidate rows (made once: on GPUs it owns an allocation).
  Kokkos::Experimental::UniqueToken<ExecutionSpace> token_;
};

}  // namespace dpk
