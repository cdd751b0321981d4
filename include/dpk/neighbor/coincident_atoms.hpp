#pragma once
/// \file coincident_atoms.hpp
/// \brief Atoms closer than min_pair_distance (r = 0 within rounding): the se_e2_a descriptor has
/// 1/r, so such a frame gives an infinite or NaN descriptor. read_system refuses every frame of a
/// system that has them (find_coincident_atoms); EnergyModel::prepare checks each batch as well.
/// Host code, no Kokkos.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace dpk {

/// Atoms closer than this (A) are coincident: an error, not a NaN.
inline constexpr double min_pair_distance = 1e-6;

/// "atoms I and J are R A apart (closer than LIMIT A): ..." (I < J), or for I == J "atom I is R A
/// from its own periodic image ...".
inline std::string coincident_pair_text(int atom_i, int atom_j, double distance, double limit) {
  char text[256];
  if (atom_i == atom_j)
    std::snprintf(text, sizeof text, "atom %d is %g A from its own periodic image (closer than %g A; the box is "
                  "degenerate)", atom_i, distance, limit);
  else
    std::snprintf(text, sizeof text, "atoms %d and %d are %g A apart (closer than %g A): coincident atoms make the "
                  "descriptor (1/r) infinite; remove or fix the frame", std::min(atom_i, atom_j),
                  std::max(atom_i, atom_j), distance, limit);
  return text;
}

/// Two atoms of a frame closer than a limit: atom_i < atom_j, or atom_i = -1 when there is none.
struct CoincidentPair {
  int atom_i = -1, atom_j = -1;
  double distance = 0;
};

namespace detail {

/// Solves f B = r for the fractional coordinates f of r (B's rows are the cell vectors); false
/// when B is singular.
inline bool invert_box(double const* box, double inverse[9]) {
  double const a = box[0], b = box[1], c = box[2], d = box[3], e = box[4], f = box[5], g = box[6], h = box[7],
               i = box[8];
  double const det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  if (!(std::fabs(det) > 0) || !std::isfinite(det)) return false;
  double const m[9] = {e * i - f * h, c * h - b * i, b * f - c * e, f * g - d * i, a * i - c * g,
                       c * d - a * f, d * h - e * g, b * g - a * h, a * e - b * d};
  for (int k = 0; k < 9; ++k) inverse[k] = m[k] / det;
  return true;
}

}  // namespace detail

/// The first pair of atoms (in order of the larger index, then the smaller) of one frame closer
/// than `limit` A: `coord` natoms x 3, `box` 9 values (rows are cell vectors) when `periodic`,
/// distances then through the nearest periodic image. Atoms are binned on a grid (fractional
/// coordinates for periodic frames, the bounding box otherwise) and compared with the atoms of
/// their own and the 26 neighbouring bins: O(natoms) for physical data. A singular periodic box
/// is not checked here (an atom's distance to its own images is left to EnergyModel::prepare).
inline CoincidentPair find_coincident_atoms(double const* coord, double const* box, int natoms, bool periodic,
                                            double limit = min_pair_distance) {
  CoincidentPair found;
  if (natoms < 2) return found;
  std::size_t const n_atoms = std::size_t(natoms);
  std::vector<double> frac(n_atoms * 3);
  double inverse[9];
  double origin[3] = {0, 0, 0}, extent[3] = {1, 1, 1};
  if (periodic) {
    if (!detail::invert_box(box, inverse)) return found;
    for (std::size_t a = 0; a < n_atoms; ++a)
      for (int k = 0; k < 3; ++k) {
        double const f = coord[3 * a] * inverse[k] + coord[3 * a + 1] * inverse[3 + k] + coord[3 * a + 2] * inverse[6 + k];
        frac[3 * a + std::size_t(k)] = f - std::floor(f);
      }
  } else {
    for (int k = 0; k < 3; ++k) {
      double lo = coord[k], hi = coord[k];
      for (std::size_t a = 1; a < n_atoms; ++a) {
        lo = std::min(lo, coord[3 * a + std::size_t(k)]);
        hi = std::max(hi, coord[3 * a + std::size_t(k)]);
      }
      origin[k] = lo;
      extent[k] = std::max(hi - lo, 4 * limit) * (1 + 1e-9) + 2 * limit;
    }
    for (std::size_t a = 0; a < n_atoms; ++a)
      for (int k = 0; k < 3; ++k)
        frac[3 * a + std::size_t(k)] = (coord[3 * a + std::size_t(k)] - origin[k]) / extent[k];
  }
  // Bins per axis: about one atom per bin, at most 64; each bin much wider than `limit` (in
  // fractional units a pair closer than `limit` then lies in the same or adjacent bins).
  int bins = std::max(1, std::min(64, int(std::cbrt(double(natoms)))));
  double reach = 0;  // the largest fractional step of a Cartesian step of length `limit`
  for (int k = 0; k < 3; ++k)
    reach = std::max(reach, periodic ? limit * std::sqrt(inverse[k] * inverse[k] + inverse[3 + k] * inverse[3 + k] +
                                                         inverse[6 + k] * inverse[6 + k])
                                     : limit / extent[k]);
  while (bins > 1 && reach * bins > 0.25) --bins;
  if (bins < 3) bins = 1;  // with fewer than 3 bins the neighbours wrap onto each other: one bin
  auto distance = [&](std::size_t a, std::size_t b) {
    double d[3];
    for (int k = 0; k < 3; ++k) {
      d[k] = frac[3 * b + std::size_t(k)] - frac[3 * a + std::size_t(k)];
      if (periodic) d[k] -= std::round(d[k]);
    }
    double r2 = 0;
    for (int c = 0; c < 3; ++c) {
      double const x = periodic ? d[0] * box[c] + d[1] * box[3 + c] + d[2] * box[6 + c]
                                : coord[3 * b + std::size_t(c)] - coord[3 * a + std::size_t(c)];
      r2 += x * x;
    }
    return std::sqrt(r2);
  };
  auto bin_of = [&](std::size_t a, int k) { return std::min(bins - 1, int(frac[3 * a + std::size_t(k)] * bins)); };
  std::vector<std::vector<int>> members(std::size_t(bins) * bins * bins);
  for (std::size_t b = 0; b < n_atoms; ++b) {
    int const cx = bin_of(b, 0), cy = bin_of(b, 1), cz = bin_of(b, 2);
    int best = -1;
    double best_r = 0;
    int const span = bins == 1 ? 0 : 1;
    for (int dx = -span; dx <= span; ++dx)
      for (int dy = -span; dy <= span; ++dy)
        for (int dz = -span; dz <= span; ++dz) {
          int x = cx + dx, y = cy + dy, z = cz + dz;
          if (periodic) {
            x = (x + bins) % bins, y = (y + bins) % bins, z = (z + bins) % bins;
          } else if (x < 0 || y < 0 || z < 0 || x >= bins || y >= bins || z >= bins) {
            continue;
          }
          for (int a : members[(std::size_t(x) * bins + y) * bins + z]) {
            double const r = distance(std::size_t(a), b);
            if (r < limit && (best < 0 || a < best)) best = a, best_r = r;
          }
        }
    if (best >= 0) {
      found.atom_i = best, found.atom_j = int(b), found.distance = best_r;
      return found;
    }
    members[(std::size_t(cx) * bins + cy) * bins + cz].push_back(int(b));
  }
  return found;
}

}  // namespace dpk
