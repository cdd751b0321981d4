// main() shared by every benchmark program: Kokkos around Google Benchmark, with the execution
// space, its concurrency and OpenBLAS' threads per call recorded in the benchmark context.
#include <benchmark/benchmark.h>

#include <dpk/core/blas_threads_default.hpp>
#include <dpk/core/types.hpp>

#include <string>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using Space = dpk::DefaultExecutionSpace;
  benchmark::AddCustomContext("kokkos_execution_space", Space::name());
  benchmark::AddCustomContext("kokkos_concurrency", std::to_string(Space().concurrency()));
  // One OpenBLAS thread per call unless OPENBLAS_NUM_THREADS/GOTO_NUM_THREADS is set, as in
  // dpk's programs (docs/tuning.md): OpenBLAS' own threads would compete with the Kokkos workers.
  // bench_gemm's BLAS-thread benchmarks set their own count.
  dpk::apply_blas_threads_default(1);
  benchmark::AddCustomContext("blas_threads", std::to_string(dpk::blas_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
