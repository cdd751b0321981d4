// Environment matrix, force + virial product, and its adjoint on the water frame (192 atoms) and
// its 4x4x4 replica (12288 atoms); items/s = atoms/s. DeePMD-kit, one thread: environment
// matrix incl. formatting 1769 us / 113 ms; force + virial 1020 us / 86 ms.
#include "kernel_bench_common.hpp"

template <class Scalar>
void environment_matrix(benchmark::State& state) {
  dpk_bench::Setup<Scalar> s(int(state.range(0)));
  dpk_bench::Space space;
  for (auto _ : state) {
    dpk::compute_environment_matrix(space, s.list, s.frames.types, s.statistics, 0.5, 6.0, s.env);
    space.fence();
  }
  state.SetItemsProcessed(state.iterations() * s.nloc);
}

template <class Scalar>
void force_virial(benchmark::State& state) {
  dpk_bench::Setup<Scalar> s(int(state.range(0)));
  dpk_bench::Space space;
  for (auto _ : state) {
    dpk::compute_force_virial(space, s.g, s.env, s.list, s.natoms, s.force, s.virial, s.atom_virial, s.work);
  }
  state.SetItemsProcessed(state.iterations() * s.nloc);
}

template <class Scalar>
void force_virial_adjoint(benchmark::State& state) {
  dpk_bench::Setup<Scalar> s(int(state.range(0)));
  dpk_bench::Space space;
  for (auto _ : state) {
    dpk::force_virial_adjoint(space, s.cF, s.cW, s.env, s.list, s.natoms, s.v);
    space.fence();
  }
  state.SetItemsProcessed(state.iterations() * s.nloc);
}

#define DPK_KERNEL_BENCH(name)                                                                           \
  BENCHMARK_TEMPLATE(name, double)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond);       \
  BENCHMARK_TEMPLATE(name, float)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond);
DPK_KERNEL_BENCH(environment_matrix)
DPK_KERNEL_BENCH(force_virial)
DPK_KERNEL_BENCH(force_virial_adjoint)

