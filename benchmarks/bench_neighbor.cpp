// Neighbour search (wrap + cell list + formatted list + reverse index) on the water frame and its
// 4x4x4 replica; items/s = atoms/s. Compare with DeePMD-kit's stage (a) (wrap + ghost copy +
// neighbour list): 817 us (192 atoms), 492 ms (12288 atoms), one thread.
#include "kernel_bench_common.hpp"

template <class Scalar>
void neighbor_list(benchmark::State& state) {
  int const replica = int(state.range(0));
  auto const batch = dpk_bench::water(replica);
  auto frames = dpk_test::make_frames<Scalar>(batch);
  dpk::NeighborSearch<Scalar, dpk_bench::Space> search(6.0, {46, 92});
  dpk::NeighborList<Scalar, dpk_bench::Mem> list;
  search.build(dpk_bench::Space(), frames, list);  // workspaces sized once
  for (auto _ : state) {
    search.build(dpk_bench::Space(), frames, list);
    benchmark::DoNotOptimize(list.dropped);
  }
  state.SetItemsProcessed(state.iterations() * batch.natoms);
  state.counters["atoms"] = batch.natoms;
}
BENCHMARK_TEMPLATE(neighbor_list, double)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(neighbor_list, float)->Arg(1)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond);

