// Time per GEMM shape: an LD_PRELOAD library (no dpk or Kokkos code) that stands in front of the
// host BLAS' Fortran dgemm_ and sgemm_, forwards every call to the next definition (the BLAS the
// program links) and times it:
//   LD_PRELOAD=build/openmp/benchmarks/libdpk-blas-calls.so DPK_BLAS_CALLS=gemms.txt program ...
// At exit it writes one line per (routine, transa, transb, m, n, k, beta 0 / 1 / other) -- total
// ms, calls, mean us, GFLOP/s (2 m n k per call), then the shape in the column-major BLAS
// convention -- largest total first, to the file named by DPK_BLAS_CALLS (default: standard
// error; a process without calls leaves an existing file as it is). dpk's row-major C = op(A) op(B) (rows x cols, sum over k) arrives as C^T = op(B)^T
// op(A)^T: m is C's column count, n its row count, and the flags are swapped (transa is B's).
//
// It shows what the kernel-times tool cannot: the products inside the chunked host passes (one
// parallel region each, thousands of BLAS calls per training step) and their rates in place,
// with the operands where the step leaves them (docs/performance.md, "Twenty-sixth session").
// Calls from several threads are timed in per-thread tables, merged at exit. Only the BLAS
// calls that go through the dynamic linker are seen: a static BLAS, cuBLAS, or the products that
// dpk's own small-matrix kernel (core/small_gemm.hpp) takes are not; DPK_SMALL_GEMM=0 sends
// every product to the BLAS.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace {

/// One shape of call: routine ('d' or 's'), flags, sizes, and beta's kind (0, 1, 2 = other).
struct Shape {
  char routine, transa, transb;
  int m, n, k, beta;
  bool operator==(Shape const& o) const {
    return routine == o.routine && transa == o.transa && transb == o.transb && m == o.m && n == o.n && k == o.k &&
           beta == o.beta;
  }
};

struct Total {
  Shape shape;
  long calls = 0;
  double seconds = 0;
};

/// One thread's totals (few shapes per program: a linear search, the last hit first).
struct Table {
  std::vector<Total> totals;
  std::size_t last = 0;
  /// Adds `calls` calls of shape `s` taking `seconds` in all (one call, or another table's total).
  void add(Shape const& s, long calls, double seconds) {
    if (last >= totals.size() || !(totals[last].shape == s)) {
      auto const it = std::find_if(totals.begin(), totals.end(), [&s](Total const& t) { return t.shape == s; });
      if (it == totals.end()) {
        totals.push_back(Total{s});
        last = totals.size() - 1;
      } else {
        last = std::size_t(it - totals.begin());
      }
    }
    totals[last].calls += calls;
    totals[last].seconds += seconds;
  }
};

/// Every thread's table; tables are never freed, so that threads ending before exit keep theirs.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<Table*>& registry() {
  static auto* r = new std::vector<Table*>;
  return *r;
}
Table& my_table() {
  thread_local Table* mine = nullptr;
  if (mine == nullptr) {
    mine = new Table;
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().push_back(mine);
  }
  return *mine;
}

char upper(char const* flag) { return char(*flag >= 'a' && *flag <= 'z' ? *flag - 'a' + 'A' : *flag); }
template <class Scalar>
int beta_kind(Scalar const* beta) {
  return *beta == Scalar(0) ? 0 : *beta == Scalar(1) ? 1 : 2;
}

/// The merged table, written when the library is unloaded (at exit).
struct Report {
  ~Report() {
    Table merged;
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      for (Table const* t : registry())
        for (Total const& x : t->totals) merged.add(x.shape, x.calls, x.seconds);
    }
    std::vector<Total>& all = merged.totals;
    std::sort(all.begin(), all.end(), [](Total const& a, Total const& b) { return a.seconds > b.seconds; });
    char const* path = std::getenv("DPK_BLAS_CALLS");
    bool const to_file = path != nullptr && *path != '\0';
    // Processes that a program starts inherit LD_PRELOAD (OpenMPI's helpers under dpk-train): one
    // that made no call leaves an existing table alone.
    if (all.empty() && to_file) {
      if (FILE* existing = std::fopen(path, "r")) {
        std::fclose(existing);
        return;
      }
    }
    FILE* out = to_file ? std::fopen(path, "w") : stderr;
    if (out == nullptr) {
      std::fprintf(stderr, "libdpk-blas-calls: cannot write DPK_BLAS_CALLS='%s'\n", path);
      return;
    }
    std::fprintf(out, "# total_ms calls mean_us GFLOP/s routine transa transb m n k beta\n");
    double seconds = 0, flops = 0;
    long calls = 0;
    for (Total const& t : all) {
      double const f = 2.0 * double(t.shape.m) * t.shape.n * t.shape.k * double(t.calls);
      char const* beta = t.shape.beta == 0 ? "0" : t.shape.beta == 1 ? "1" : "other";
      std::fprintf(out, "%10.3f %9ld %10.3f %8.2f %cgemm %c %c %d %d %d %s\n", 1e3 * t.seconds, t.calls,
                   1e6 * t.seconds / double(t.calls), t.seconds > 0 ? 1e-9 * f / t.seconds : 0.0, t.shape.routine,
                   t.shape.transa, t.shape.transb, t.shape.m, t.shape.n, t.shape.k, beta);
      seconds += t.seconds;
      flops += f;
      calls += t.calls;
    }
    std::fprintf(out, "# all: %.3f ms in %ld calls, %.2f GFLOP/s\n", 1e3 * seconds, calls,
                 seconds > 0 ? 1e-9 * flops / seconds : 0.0);
    if (out != stderr) std::fclose(out);
  }
} report;

/// The next definition of `name` after this library (the program's BLAS); exits when none.
void* next_symbol(char const* name) {
  void* const f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "libdpk-blas-calls: no %s after this library (is the program linked to a BLAS?)\n", name);
    std::abort();
  }
  return f;
}

template <class Scalar>
using Gemm = void (*)(char const*, char const*, int const*, int const*, int const*, Scalar const*, Scalar const*,
                      int const*, Scalar const*, int const*, Scalar const*, Scalar*, int const*);

/// Calls `real` with the arguments and adds its wall time to this thread's table.
template <class Scalar>
void timed(Gemm<Scalar> real, char routine, char const* ta, char const* tb, int const* m, int const* n, int const* k,
           Scalar const* alpha, Scalar const* a, int const* lda, Scalar const* b, int const* ldb, Scalar const* beta,
           Scalar* c, int const* ldc) {
  using Clock = std::chrono::steady_clock;
  auto const start = Clock::now();
  real(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double const seconds = std::chrono::duration<double>(Clock::now() - start).count();
  my_table().add(Shape{routine, upper(ta), upper(tb), *m, *n, *k, beta_kind(beta)}, 1, seconds);
}

}  // namespace

extern "C" {
void dgemm_(char const* ta, char const* tb, int const* m, int const* n, int const* k, double const* alpha,
            double const* a, int const* lda, double const* b, int const* ldb, double const* beta, double* c,
            int const* ldc) {
  static auto const real = reinterpret_cast<Gemm<double>>(next_symbol("dgemm_"));
  timed(real, 'd', ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void sgemm_(char const* ta, char const* tb, int const* m, int const* n, int const* k, float const* alpha,
            float const* a, int const* lda, float const* b, int const* ldb, float const* beta, float* c,
            int const* ldc) {
  static auto const real = reinterpret_cast<Gemm<float>>(next_symbol("sgemm_"));
  timed(real, 's', ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
}
