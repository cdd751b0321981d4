#pragma once
// Shared set-up of bench_neighbor.cpp and bench_descriptor.cpp: the DeePMD-kit water frame of
// tests/data/water_se_a (192 atoms) and its 4x4x4 replica (12288 atoms), rcut 6, rcut_smth 0.5,
// sel [46, 92], as in DeePMD-kit's timing in tests/data/water_se_a/README.md.
#include "../tests/neighbor_test_helpers.hpp"

#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/descriptor/force_virial.hpp>
#include <dpk/neighbor/neighbor_search.hpp>

#include <benchmark/benchmark.h>

#include <cmath>

namespace dpk_bench {

using dpk_test::Mem;
using dpk_test::Space;

/// Water frame replicated `replica`^3 times.
inline dpk_test::HostBatch water(int replica) {
  return dpk_test::replicate(dpk_test::water_batch(), replica, replica, replica);
}

/// Frames, list, environment matrix, g, cF, cW ready for any stage.
template <class Scalar>
struct Setup {
  dpk::Frames<Scalar, Mem> frames;
  dpk::NeighborSearch<Scalar, Space> search{6.0, {46, 92}};
  dpk::NeighborList<Scalar, Mem> list;
  dpk::EnvironmentStatistics<Scalar, Mem> statistics;
  dpk::EnvironmentMatrix<Scalar, Mem> env;
  dpk::ForceVirialWorkspace<Scalar, Mem> work;
  dpk::View3<Scalar, Mem> g, v;
  dpk::View2<Scalar, Mem> force, virial, atom_virial, cF, cW;
  int nloc = 0, natoms = 0;
  explicit Setup(int replica) {
    auto const batch = water(replica);
    frames = dpk_test::make_frames<Scalar>(batch);
    nloc = natoms = batch.natoms;
    search.build(Space(), frames, list);
    statistics = dpk::identity_statistics<Scalar, Mem>(2, search.nnei());
    dpk::compute_environment_matrix(Space(), list, frames.types, statistics, 0.5, 6.0, env);
    int const nnei = search.nnei();
    g = dpk::View3<Scalar, Mem>("dpk::bench::g", nloc, nnei, 4);
    v = dpk::View3<Scalar, Mem>("dpk::bench::v", nloc, nnei, 4);
    force = dpk::View2<Scalar, Mem>("dpk::bench::force", nloc, 3);
    virial = dpk::View2<Scalar, Mem>("dpk::bench::virial", 1, 9);
    atom_virial = dpk::View2<Scalar, Mem>("dpk::bench::atom_virial", nloc, 9);
    cF = dpk::View2<Scalar, Mem>("dpk::bench::cF", nloc, 3);
    cW = dpk::View2<Scalar, Mem>("dpk::bench::cW", 1, 9);
    auto gh = Kokkos::create_mirror_view(g);
    for (std::size_t k = 0; k < gh.size(); ++k) gh.data()[k] = Scalar(std::sin(0.001 * double(k) + 0.3));
    Kokkos::deep_copy(g, gh);
    Kokkos::deep_copy(cF, Scalar(0.1));
    Kokkos::deep_copy(cW, Scalar(0.01));
  }
};

}  // namespace dpk_bench
