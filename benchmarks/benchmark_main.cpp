// main() shared by every benchmark program: Kokkos around Google Benchmark, with the execution
// space and its concurrency recorded in the benchmark context.
#include <benchmark/benchmark.h>

#include <dpk/core/types.hpp>

#include <string>

int main(int argc, char** argv) {
  Kokkos::ScopeGuard guard(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using Space = dpk::DefaultExecutionSpace;
  benchmark::AddCustomContext("kokkos_execution_space", Space::name());
  benchmark::AddCustomContext("kokkos_concurrency", std::to_string(Space().concurrency()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
