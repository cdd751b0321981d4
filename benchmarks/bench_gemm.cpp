// The machine's GEMM rate through dpk::blas::gemm (Kokkos Kernels -> host BLAS TPL): a large
// square product (the hardware limit docs/performance.md quotes) and the model's largest GEMM
// shape (water batch 1: 26496 embedding rows x 50 -> 100), double and float, with the BLAS
// threads set per benchmark (second argument; OpenBLAS only, through dpk/core/threads.hpp).
//
//   OMP_NUM_THREADS=1 build/<dir>/benchmarks/bench_gemm
#include <dpk/core/gemm.hpp>
#include <dpk/core/threads.hpp>
#include <dpk/core/types.hpp>

#include <benchmark/benchmark.h>

namespace {

using Space = dpk::DefaultExecutionSpace;
using Mem = dpk::memory_space_t<Space>;

/// C (m x n) = A (m x k) B (k x n), `state.range(3)` BLAS threads.
template <class Scalar>
void gemm(benchmark::State& state) {
  int const m = int(state.range(0)), k = int(state.range(1)), n = int(state.range(2));
  int const blas_threads = int(state.range(3));
  if (!dpk::set_blas_threads(blas_threads) && blas_threads != 1) {
    state.SkipWithError("cannot set the BLAS threads (not OpenBLAS)");
    return;
  }
  dpk::View2<Scalar, Mem> a("dpk::bench::gemm_a", m, k), b("dpk::bench::gemm_b", k, n), c("dpk::bench::gemm_c", m, n);
  Kokkos::deep_copy(a, Scalar(0.5));
  Kokkos::deep_copy(b, Scalar(0.25));
  Space space;
  dpk::blas::gemm(space, "N", "N", Scalar(1), a, b, Scalar(0), c);  // warm-up (thread start)
  space.fence();
  for (auto _ : state) {
    dpk::blas::gemm(space, "N", "N", Scalar(1), a, b, Scalar(0), c);
    space.fence();
  }
  double const flop = 2.0 * m * k * n;
  state.counters["GFLOP/s"] = benchmark::Counter(flop * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["blas_threads"] = dpk::blas_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({2000, 2000, 2000, threads});
    b->Args({26496, 50, 100, threads});
  }
}

}  // namespace

BENCHMARK_TEMPLATE(gemm, double)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(gemm, float)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

