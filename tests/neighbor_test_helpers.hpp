#pragma once
// Helpers shared by test_neighbor.cpp and test_descriptor.cpp: host batches, Frames on the
// device, the water fixture, and an O(N^2) brute-force neighbour search over periodic images.
// Frames and host copies take the memory space of the test's execution space.

#include <dpk/core/frames.hpp>
#include "source_paths.hpp"
#include <dpk/io/npy.hpp>
#include <dpk/neighbor/neighbor_search.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace dpk_test {

/// The default space (the benchmarks'; the tests name their own).
using Space = dpk::DefaultExecutionSpace;
using Mem = dpk::memory_space_t<Space>;

/// A batch on the host, in double.
struct HostBatch {
  int nframes = 0, natoms = 0;
  bool periodic = true;
  std::vector<double> coord;  // nframes*natoms*3
  std::vector<double> box;    // nframes*9
  std::vector<int> types;     // nframes*natoms
};

/// The batch as Frames in Scalar in MemorySpace.
template <class Scalar, class MemorySpace = Mem>
dpk::Frames<Scalar, MemorySpace> make_frames(HostBatch const& b) {
  dpk::Frames<Scalar, MemorySpace> frames;
  frames.nframes = b.nframes;
  frames.natoms = b.natoms;
  frames.periodic = b.periodic;
  int const nloc = b.nframes * b.natoms;
  frames.coord = dpk::View2<Scalar, MemorySpace>("dpk::test::coord", nloc, 3);
  frames.box = dpk::View2<Scalar, MemorySpace>("dpk::test::box", b.nframes, 9);
  frames.types = dpk::View1<int, MemorySpace>("dpk::test::types", nloc);
  auto c = Kokkos::create_mirror_view(frames.coord);
  auto x = Kokkos::create_mirror_view(frames.box);
  auto t = Kokkos::create_mirror_view(frames.types);
  for (int a = 0; a < nloc; ++a) {
    for (int d = 0; d < 3; ++d) c(a, d) = Scalar(b.coord[3 * a + d]);
    t(a) = b.types[a];
  }
  for (int f = 0; f < b.nframes; ++f)
    for (int k = 0; k < 9; ++k) x(f, k) = b.box.empty() ? Scalar(0) : Scalar(b.box[9 * f + k]);
  Kokkos::deep_copy(frames.coord, c);
  Kokkos::deep_copy(frames.box, x);
  Kokkos::deep_copy(frames.types, t);
  return frames;
}

/// Path of a fixture file.
inline std::string water_file(std::string const& name) {
  return std::string(dpk_test::data_dir()) + "/water_se_a/" + name;
}

/// The water frame of the fixture as a one-frame batch.
inline HostBatch water_batch() {
  HostBatch b;
  auto coord = dpk::read_npy(water_file("coord.npy"));
  auto box = dpk::read_npy(water_file("box.npy"));
  auto atype = dpk::read_npy(water_file("atype.npy"));
  b.nframes = 1;
  b.natoms = int(atype.size());
  b.coord = coord.data;
  b.box = box.data;
  for (double t : atype.data) b.types.push_back(int(t));
  return b;
}

/// Replicates a one-frame periodic batch nx*ny*nz times (atoms of copy (p,q,r) after those of
/// earlier copies, same order inside each copy), box scaled accordingly.
inline HostBatch replicate(HostBatch const& b, int nx, int ny, int nz) {
  HostBatch r;
  r.nframes = 1;
  r.natoms = b.natoms * nx * ny * nz;
  r.periodic = true;
  for (int p = 0; p < nx; ++p)
    for (int q = 0; q < ny; ++q)
      for (int s = 0; s < nz; ++s)
        for (int a = 0; a < b.natoms; ++a) {
          for (int d = 0; d < 3; ++d)
            r.coord.push_back(b.coord[3 * a + d] + p * b.box[d] + q * b.box[3 + d] + s * b.box[6 + d]);
          r.types.push_back(b.types[a]);
        }
  r.box = b.box;
  for (int d = 0; d < 3; ++d) {
    r.box[d] *= nx;
    r.box[3 + d] *= ny;
    r.box[6 + d] *= nz;
  }
  return r;
}

/// Random batch: each frame its own triclinic box (diagonal lengths in [lmin, lmax], tilts up
/// to half of them) or, when !periodic, a cluster in a cube of side lmax.
inline HostBatch random_batch(std::mt19937& rng, int nframes, int natoms, int ntypes, double lmin, double lmax,
                              bool periodic) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  HostBatch b;
  b.nframes = nframes;
  b.natoms = natoms;
  b.periodic = periodic;
  for (int f = 0; f < nframes; ++f) {
    double box[9] = {0};
    double const la = lmin + (lmax - lmin) * u(rng), lb = lmin + (lmax - lmin) * u(rng),
                 lc = lmin + (lmax - lmin) * u(rng);
    box[0] = la;
    box[3] = (u(rng) - 0.5) * lb;
    box[4] = lb;
    box[6] = (u(rng) - 0.5) * lc;
    box[7] = (u(rng) - 0.5) * lc;
    box[8] = lc;
    if (!periodic) {
      for (double& v : box) v = 0;
      box[0] = box[4] = box[8] = lmax;
    }
    for (double v : box) b.box.push_back(v);
    for (int a = 0; a < natoms; ++a) {
      double s[3] = {u(rng), u(rng), u(rng)};
      for (int d = 0; d < 3; ++d) {
        // Some atoms outside the box (wrapping must handle them).
        double const shift = periodic ? std::floor(3 * u(rng)) - 1 : 0.0;
        b.coord.push_back((s[0] + shift) * box[d] + s[1] * box[3 + d] + s[2] * box[6 + d]);
      }
      b.types.push_back(int(u(rng) * ntypes) % ntypes);
    }
  }
  return b;
}

/// One neighbour found by brute force.
struct BruteNeighbor {
  double r2;
  int owner;
  double rij[3];
};

/// O(N^2 * images) search: per centre, per neighbour type, all (atom, image) within rcut
/// (image of the same atom with zero shift excluded), sorted by distance.
inline std::vector<std::vector<std::vector<BruteNeighbor>>> brute_force(HostBatch const& b, double rcut, int ntypes) {
  int const nloc = b.nframes * b.natoms;
  std::vector<std::vector<std::vector<BruteNeighbor>>> out(nloc, std::vector<std::vector<BruteNeighbor>>(ntypes));
  for (int f = 0; f < b.nframes; ++f) {
    double const* box = &b.box[9 * f];
    int reach[3] = {0, 0, 0};
    if (b.periodic) {
      // Image range from the face distances.
      double const vol = std::fabs(box[0] * (box[4] * box[8] - box[5] * box[7]) -
                                   box[1] * (box[3] * box[8] - box[5] * box[6]) +
                                   box[2] * (box[3] * box[7] - box[4] * box[6]));
      for (int d = 0; d < 3; ++d) {
        int const p = (d + 1) % 3, q = (d + 2) % 3;
        double c[3] = {box[3 * p + 1] * box[3 * q + 2] - box[3 * p + 2] * box[3 * q + 1],
                       box[3 * p + 2] * box[3 * q + 0] - box[3 * p + 0] * box[3 * q + 2],
                       box[3 * p + 0] * box[3 * q + 1] - box[3 * p + 1] * box[3 * q + 0]};
        double const face = vol / std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
        reach[d] = int(std::ceil(rcut / face)) + 2;  // unwrapped coordinates may be one box off
      }
    }
    for (int i = 0; i < b.natoms; ++i) {
      int const gi = f * b.natoms + i;
      for (int j = 0; j < b.natoms; ++j) {
        int const gj = f * b.natoms + j;
        for (int m0 = -reach[0]; m0 <= reach[0]; ++m0)
          for (int m1 = -reach[1]; m1 <= reach[1]; ++m1)
            for (int m2 = -reach[2]; m2 <= reach[2]; ++m2) {
              BruteNeighbor n;
              n.owner = gj;
              n.r2 = 0;
              for (int d = 0; d < 3; ++d) {
                n.rij[d] = b.coord[3 * gj + d] - b.coord[3 * gi + d];
                if (b.periodic) n.rij[d] += m0 * box[d] + m1 * box[3 + d] + m2 * box[6 + d];
                n.r2 += n.rij[d] * n.rij[d];
              }
              if (n.r2 < 1e-20) continue;  // the atom itself
              if (n.r2 < rcut * rcut) out[gi][b.types[gj]].push_back(n);
            }
      }
      for (auto& block : out[gi])
        std::sort(block.begin(), block.end(), [](BruteNeighbor const& x, BruteNeighbor const& y) { return x.r2 < y.r2; });
    }
  }
  return out;
}

/// A host copy that never aliases the device view (create_mirror_view would alias on host
/// backends, and a later kernel would change the "snapshot").
template <class ViewType>
auto snapshot(ViewType const& view) {
  auto copy = Kokkos::create_mirror(Kokkos::HostSpace(), view);
  Kokkos::deep_copy(copy, view);
  return copy;
}

/// Host copies of a list.
template <class Scalar>
struct HostList {
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> index;
  Kokkos::View<Scalar***, Kokkos::LayoutRight, Kokkos::HostSpace> rij;
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> count;
};
template <class Scalar, class MemorySpace>
HostList<Scalar> to_host(dpk::NeighborList<Scalar, MemorySpace> const& list) {
  HostList<Scalar> h;
  h.index = snapshot(list.index);
  h.rij = snapshot(list.rij);
  h.count = snapshot(list.count);
  return h;
}

}  // namespace dpk_test
