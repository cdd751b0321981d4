#pragma once
// Brute-force smallest distance and neighbour counts of a frame, periodic images included: the
// independent references for dpk's neighbour statistics (test_compress, test_train).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dpk_test {

/// Calls f(i, j, r2) for every atom i and every atom or image j of one frame (`coord`: natoms x
/// 3, `box`: 3 x 3 rows) in the 27 cells around i's, except i itself: r2 = |r_j - r_i|^2.
template <class F>
void for_each_image_pair(double const* coord, double const* box, int natoms, F&& f) {
  for (int i = 0; i < natoms; ++i)
    for (int j = 0; j < natoms; ++j)
      for (int a = -1; a <= 1; ++a)
        for (int b = -1; b <= 1; ++b)
          for (int c = -1; c <= 1; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double r2 = 0;
            for (int k = 0; k < 3; ++k) {
              double const d = coord[3 * j + k] + a * box[k] + b * box[3 + k] + c * box[6 + k] - coord[3 * i + k];
              r2 += d * d;
            }
            f(i, j, r2);
          }
}

/// Smallest distance between two atoms of one frame, images in the 26 neighbouring cells
/// included: exact when it is below half the box width.
inline double brute_min_distance(double const* coord, double const* box, int natoms) {
  double best = std::numeric_limits<double>::infinity();
  for_each_image_pair(coord, box, natoms, [&](int, int, double r2) { best = std::min(best, std::sqrt(r2)); });
  return best;
}

/// Brute-force neighbour counts of one frame: for each type t, the most neighbours of type t
/// (atoms or images in the 26 neighbouring cells, r < rcut) that any atom has. Exact when rcut is
/// below the box's smallest width.
inline std::vector<int> brute_max_neighbors(double const* coord, double const* box, int const* types, int natoms,
                                            int ntypes, double rcut) {
  std::vector<int> count(std::size_t(natoms) * std::size_t(ntypes), 0), most(std::size_t(ntypes), 0);
  for_each_image_pair(coord, box, natoms, [&](int i, int j, double r2) {
    if (r2 < rcut * rcut) ++count[std::size_t(i) * std::size_t(ntypes) + std::size_t(types[j])];
  });
  for (int i = 0; i < natoms; ++i)
    for (int t = 0; t < ntypes; ++t)
      most[std::size_t(t)] = std::max(most[std::size_t(t)], count[std::size_t(i) * std::size_t(ntypes) + std::size_t(t)]);
  return most;
}

}  // namespace dpk_test
