// The machine's GEMM rate through dpk::blas::gemm (Kokkos Kernels -> host BLAS TPL): a large
// square product (the hardware limit docs/performance.md quotes) and the model's largest GEMM
// shape (water batch 1: 26496 embedding rows x 50 -> 100), double and float, with the BLAS
// threads set per benchmark (second argument; OpenBLAS only, through dpk/core/threads.hpp).
// `chunk_gemm` runs the single-threaded products of one embedding chunk (128 rows, the water
// nets' 25 -> 50 and 50 -> 100 layers) as the chunked host passes do (dpk::InThread), with the
// operands in cache: the rate these skinny shapes reach at best (docs/performance.md);
// `fitting_gemm` the fitting nets' products the same way, with operands in cache and from memory;
// `fitting_gemm_split` their forward products, `fitting_gradient_split` their weight gradients and
// `fitting_cotangent_split` their input cotangents
// split over OMP_NUM_THREADS threads as a training step runs them (how far they scale from 1 to 2
// threads: docs/performance.md); `tn_sum_chunk` a weight gradient summed over two pairs in one
// thread, as two BLAS calls and through dpk's two-pair kernel (core/small_gemm_tn_sum.hpp).
//
//   OMP_NUM_THREADS=1 build/<dir>/benchmarks/bench_gemm
#include <dpk/core/gemm.hpp>
#include <dpk/core/threads.hpp>
#include <dpk/core/types.hpp>

#include <benchmark/benchmark.h>

#include <vector>


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

/// One chunk's product inside the calling thread: `state.range(3)` = 0: C (m x n) = A (m x k) B
/// (k x n), the forward/backward shape; 1: C (k x n) += A^T B with A (m x k), B (m x n), the
/// chunk's weight gradient (a sum over its m rows); 2: C (m x k) = A B^T with A (m x n), B (k x n),
/// an input cotangent gz W^T read from W (k x n) as it is stored (the fitting nets' backward
/// passes). `state.range(4)` sets of operands taken in turn: 1 keeps them in cache; 32 sets of
/// the fitting shapes (over 70 MB) make every product start from memory, as the fitting nets'
/// products do inside a training step, between passes over the embedding nets.
template <class Scalar>
void chunk_gemm(benchmark::State& state) {
  int const m = int(state.range(0)), k = int(state.range(1)), n = int(state.range(2));
  int const mode = int(state.range(3)), sets = int(state.range(4));
  bool const weight_gradient = mode == 1, input_cotangent = mode == 2;
  if (!dpk::host_schedule_v<Space>) {  // the products of a host thread: nothing of a device build
    state.SkipWithError("host-thread products (InThread): not run where the default space is a device");
    return;
  }
  dpk::set_blas_threads(1);
  // Kokkos' allocations start on a cache line (a std::vector's need not: row loads that straddle
  // two lines made the rates of these shapes jump between runs by up to 2x).
  using M = dpk::View2<Scalar, Kokkos::HostSpace>;
  std::vector<M> as, bs, cs;
  for (int s = 0; s < sets; ++s) {
    as.emplace_back("dpk::bench::chunk_a", m, input_cotangent ? n : k);
    bs.emplace_back("dpk::bench::chunk_b", weight_gradient ? m : k, n);
    cs.emplace_back("dpk::bench::chunk_c", weight_gradient ? k : m, input_cotangent ? k : n);
    Kokkos::deep_copy(as.back(), Scalar(0.5));
    Kokkos::deep_copy(bs.back(), Scalar(0.25));
  }
  int set = 0;
  for (auto _ : state) {
    M av = as[set], bv = bs[set], cv = cs[set];
    set = (set + 1) % sets;
    if (weight_gradient)
      dpk::blas::gemm(dpk::InThread{}, "T", "N", Scalar(1), av, bv, Scalar(1), cv);
    else if (input_cotangent)
      dpk::blas::gemm(dpk::InThread{}, "N", "T", Scalar(1), av, bv, Scalar(0), cv);
    else
      dpk::blas::gemm(dpk::InThread{}, "N", "N", Scalar(1), av, bv, Scalar(0), cv);
    benchmark::DoNotOptimize(cv.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * k * n * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

void chunk_shapes(benchmark::internal::Benchmark* b) {
  for (int weight_gradient : {0, 1}) {
    b->Args({128, 25, 50, weight_gradient, 1});
    b->Args({128, 50, 100, weight_gradient, 1});
  }
}

/// The fitting nets' products (water batch 1: 128 hydrogen and 64 oxygen rows; 1600 -> 240 ->
/// 240), the same way through one thread: forward/tangent C = A B, weight gradients C += A^T B
/// and input cotangents C = A W^T, with operands in cache and from memory. Blocks of 32 and 16
/// rows: the rate the fitting nets would run at in a schedule of small centre blocks
/// (docs/tuning.md, "The step's shape").
void fitting_shapes(benchmark::internal::Benchmark* b) {
  for (int mode : {0, 1, 2}) {
    for (int sets : {1, 32}) {
      b->Args({128, 1600, 240, mode, sets});
      b->Args({64, 1600, 240, mode, sets});  // the oxygen rows
      b->Args({128, 240, 240, mode, sets});
      for (int m : {32, 16}) {
        b->Args({m, 1600, 240, mode, sets});
        b->Args({m, 240, 240, mode, sets});
      }
    }
  }
}

/// The fitting nets' products (water batch 1 as in fitting_shapes) split over the threads of the
/// execution space as a training step runs them (OMP_NUM_THREADS threads), operands from memory
/// (32 sets). `state.range(3)` = 0: forward/tangent C = A B (dpk::blas::gemm(space, ...)), A (m x
/// k), B (k x n); 1: weight gradient dW += X^T G + X'^T G' (dpk::blas::gemm_tn_sum), X, X' (m x k),
/// G, G' (m x n); 2: input cotangent C = G W^T (dpk::blas::gemm(space, "N", "T", ...)), G (m x n),
/// W (k x n), C (m x k).
template <class Scalar>
void fitting_split(benchmark::State& state) {
  int const m = int(state.range(0)), k = int(state.range(1)), n = int(state.range(2)), sets = 32;
  bool const gradient = state.range(3) == 1, cotangent = state.range(3) == 2;
  dpk::set_blas_threads(1);
  using M = dpk::View2<Scalar, Mem>;
  std::vector<M> a0s, b0s, a1s, b1s, cs;  // a1, b1: the tangent pair of a weight gradient
  int const pair_rows = gradient ? m : 0;
  for (int s = 0; s < sets; ++s) {
    a0s.emplace_back("dpk::bench::split_a0", m, cotangent ? n : k);
    b0s.emplace_back("dpk::bench::split_b0", gradient ? m : k, n);
    a1s.emplace_back("dpk::bench::split_a1", pair_rows, k);
    b1s.emplace_back("dpk::bench::split_b1", pair_rows, n);
    cs.emplace_back("dpk::bench::split_c", gradient ? k : m, cotangent ? k : n);
    for (M* v : {&a0s.back(), &b0s.back(), &a1s.back(), &b1s.back()}) Kokkos::deep_copy(*v, Scalar(0.5));
  }
  Space space;
  dpk::View1<Scalar, Mem> partials("dpk::bench::split_partials", gradient ? dpk::blas::tn_sum_partials_size(space, std::size_t(k) * n) : 0);
  int set = 0;
  for (auto _ : state) {
    if (gradient)
      dpk::blas::gemm_tn_sum(space, Scalar(1), a0s[set], b0s[set], a1s[set], b1s[set], Scalar(1), cs[set], partials);
    else if (cotangent)
      dpk::blas::gemm(space, "N", "T", Scalar(1), a0s[set], b0s[set], Scalar(0), cs[set]);
    else
      dpk::blas::gemm(space, "N", "N", Scalar(1), a0s[set], b0s[set], Scalar(0), cs[set]);
    space.fence();
    set = (set + 1) % sets;
  }
  state.counters["GFLOP/s"] = benchmark::Counter((gradient ? 4.0 : 2.0) * m * k * n * 1e-9 * state.iterations(),
                                                 benchmark::Counter::kIsRate);
  // The host threads the product is split over (one call on a device, whose concurrency counts
  // its hardware threads).
  state.counters["threads"] = dpk::host_schedule_v<Space> ? space.concurrency() : 1;
}

/// fitting_split's shapes; `mode` its state.range(3).
template <int mode>
void fitting_split_shapes(benchmark::internal::Benchmark* b) {
  for (int m : {128, 64})
    for (int k : {1600, 240}) b->Args({m, k, 240, mode});
}

/// A weight gradient summed over two pairs inside the calling thread, as the chunked host passes
/// make it (dpk::InThread): C (k x n) = beta C + X^T G + X'^T G' with X, X' (m x k) and G, G' (m x
/// n). `state.range(3)` = 0: two BLAS calls (beta, then 1: what gemm_tn_sum made before dpk's
/// two-pair kernel); 1: dpk::blas::gemm_tn_sum (dpk's two-pair kernel where compiled in and
/// enabled, core/small_gemm_tn_sum.hpp). `state.range(4)` operand sets, as in chunk_gemm;
/// `state.range(5)` beta (0: a fitting net's block gradient, 1: an embedding chunk adding to its
/// block's).
template <class Scalar>
void tn_sum_chunk(benchmark::State& state) {
  int const m = int(state.range(0)), k = int(state.range(1)), n = int(state.range(2));
  bool const two_calls = state.range(3) == 0;
  int const sets = int(state.range(4));
  Scalar const beta = Scalar(state.range(5));
  if (!dpk::host_schedule_v<Space>) {
    state.SkipWithError("host-thread products (InThread): not run where the default space is a device");
    return;
  }
  dpk::set_blas_threads(1);
  using M = dpk::View2<Scalar, Kokkos::HostSpace>;
  std::vector<M> x0s, g0s, x1s, g1s, cs;
  for (int s = 0; s < sets; ++s) {
    x0s.emplace_back("dpk::bench::tn_x0", m, k);
    g0s.emplace_back("dpk::bench::tn_g0", m, n);
    x1s.emplace_back("dpk::bench::tn_x1", m, k);
    g1s.emplace_back("dpk::bench::tn_g1", m, n);
    cs.emplace_back("dpk::bench::tn_c", k, n);
    for (M* v : {&x0s.back(), &g0s.back(), &x1s.back(), &g1s.back()}) Kokkos::deep_copy(*v, Scalar(0.5));
  }
  dpk::View1<Scalar, Kokkos::HostSpace> no_partials;
  int set = 0;
  for (auto _ : state) {
    if (two_calls) {
      dpk::blas::detail::gemm_in_thread("T", "N", Scalar(1), x0s[set], g0s[set], beta, cs[set]);
      dpk::blas::detail::gemm_in_thread("T", "N", Scalar(1), x1s[set], g1s[set], Scalar(1), cs[set]);
    } else {
      dpk::blas::gemm_tn_sum(dpk::InThread{}, Scalar(1), x0s[set], g0s[set], x1s[set], g1s[set], beta, cs[set],
                             no_partials);
    }
    benchmark::DoNotOptimize(cs[set].data());
    set = (set + 1) % sets;
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * m * k * n * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

/// tn_sum_chunk's shapes: the fitting nets' weight gradients (operands from memory) and the
/// embedding nets' over one chunk (in cache), each as two BLAS calls and through gemm_tn_sum.
void tn_sum_shapes(benchmark::internal::Benchmark* b) {
  for (int mode : {0, 1}) {
    b->Args({128, 1600, 240, mode, 32, 0});
    b->Args({64, 1600, 240, mode, 32, 0});
    b->Args({128, 240, 240, mode, 32, 0});
    b->Args({128, 25, 50, mode, 1, 1});
    b->Args({128, 50, 100, mode, 1, 1});
  }
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
BENCHMARK_TEMPLATE(chunk_gemm, double)->Apply(chunk_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(chunk_gemm, float)->Apply(chunk_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(chunk_gemm, double)->Name("fitting_gemm<double>")->Apply(fitting_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(chunk_gemm, float)->Name("fitting_gemm<float>")->Apply(fitting_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, double)->Name("fitting_gemm_split<double>")->Apply(fitting_split_shapes<0>)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, float)->Name("fitting_gemm_split<float>")->Apply(fitting_split_shapes<0>)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, double)->Name("fitting_gradient_split<double>")->Apply(fitting_split_shapes<1>)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, float)->Name("fitting_gradient_split<float>")->Apply(fitting_split_shapes<1>)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(tn_sum_chunk, double)->Apply(tn_sum_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(tn_sum_chunk, float)->Apply(tn_sum_shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, double)->Name("fitting_cotangent_split<double>")->Apply(fitting_split_shapes<2>)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(fitting_split, float)->Name("fitting_cotangent_split<float>")->Apply(fitting_split_shapes<2>)->UseRealTime()->Unit(benchmark::kMicrosecond);

