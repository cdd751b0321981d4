#pragma once
// Brute-force smallest distance and neighbour counts of a frame, periodic images included: the
// independent references for dpk's neighbour statistics (test_compress, test_train; over a
// System's frames: train_test_helpers.hpp brute_system_stat).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dpk_test {

/// Calls f(i, j, r2) for every atom i and every atom or image j of one frame (`coord`: natoms x
/// 3, any wrapping; `box`: 3 x 3 rows) in the 27 cells around the image of j nearest to i in
/// fractional coordinates, except i itself: r2 = |r_j - r_i|^2.
template <class F>
void for_each_image_pair(double const* coord, double const* box, int natoms, F&& f) {
  // inverse of the box (rows: cell vectors), r = s . box
  double inv[9];
  double const det = box[0] * (box[4] * box[8] - box[5] * box[7]) - box[1] * (box[3] * box[8] - box[5] * box[6]) +
                     box[2] * (box[3] * box[7] - box[4] * box[6]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      int const r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
      inv[3 * r + c] = (box[3 * r1 + c1] * box[3 * r2 + c2] - box[3 * r1 + c2] * box[3 * r2 + c1]) / det;
    }
  for (int i = 0; i < natoms; ++i)
    for (int j = 0; j < natoms; ++j) {
      double d[3], s[3];
      for (int k = 0; k < 3; ++k) d[k] = coord[3 * j + k] - coord[3 * i + k];
      for (int m = 0; m < 3; ++m) {
        s[m] = d[0] * inv[m] + d[1] * inv[3 + m] + d[2] * inv[6 + m];
        s[m] -= std::round(s[m]);
      }
      for (int a = -1; a <= 1; ++a)
        for (int b = -1; b <= 1; ++b)
          for (int c = -1; c <= 1; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double r2 = 0;
            for (int k = 0; k < 3; ++k) {
              double const e = (s[0] + a) * box[k] + (s[1] + b) * box[3 + k] + (s[2] + c) * box[6 + k];
              r2 += e * e;
            }
            f(i, j, r2);
          }
    }
}

/// Smallest distance between two atoms of one frame, images (for_each_image_pair) included:
/// exact when it is below half the box width.
inline double brute_min_distance(double const* coord, double const* box, int natoms) {
  double best = std::numeric_limits<double>::infinity();
  for_each_image_pair(coord, box, natoms, [&](int, int, double r2) { best = std::min(best, std::sqrt(r2)); });
  return best;
}

/// Brute-force neighbour counts of one frame: count[i * ntypes + t] neighbours of type t (atoms or
/// images of for_each_image_pair, r < rcut) of atom i. Exact when rcut is below the box's
/// smallest width.
inline std::vector<int> brute_neighbor_counts(double const* coord, double const* box, int const* types, int natoms,
                                              int ntypes, double rcut) {
  std::vector<int> count(std::size_t(natoms) * std::size_t(ntypes), 0);
  for_each_image_pair(coord, box, natoms, [&](int i, int j, double r2) {
    if (r2 < rcut * rcut) ++count[std::size_t(i) * std::size_t(ntypes) + std::size_t(types[j])];
  });
  return count;
}

/// For each type t, the most neighbours of type t that any atom of the frame has (brute_neighbor_counts).
inline std::vector<int> brute_max_neighbors(double const* coord, double const* box, int const* types, int natoms,
                                            int ntypes, double rcut) {
  std::vector<int> const count = brute_neighbor_counts(coord, box, types, natoms, ntypes, rcut);
  std::vector<int> most(std::size_t(ntypes), 0);
  for (int i = 0; i < natoms; ++i)
    for (int t = 0; t < ntypes; ++t)
      most[std::size_t(t)] = std::max(most[std::size_t(t)], count[std::size_t(i) * std::size_t(ntypes) + std::size_t(t)]);
  return most;
}

/// The neighbours of one frame that a search with `sel` slots per type drops: the sum over atoms
/// and types of max(0, count - sel[t]) (brute_neighbor_counts).
inline long brute_neighbors_beyond(double const* coord, double const* box, int const* types, int natoms,
                                   std::vector<int> const& sel, double rcut) {
  int const ntypes = int(sel.size());
  std::vector<int> const count = brute_neighbor_counts(coord, box, types, natoms, ntypes, rcut);
  long beyond = 0;
  for (std::size_t k = 0; k < count.size(); ++k) beyond += std::max(0, count[k] - sel[k % std::size_t(ntypes)]);
  return beyond;
}

}  // namespace dpk_test
