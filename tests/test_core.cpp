// Core utilities: workspace growth and the GEMMs (one call, row-split, split reduction, in-thread) against plain loops.
// The kernel cases run on every execution space of the build (execution_spaces.hpp).
#include <doctest/doctest.h>

#include "execution_spaces.hpp"

#include <dpk/core/compat.hpp>
#include <dpk/core/env_switch.hpp>
#include <dpk/core/gemm.hpp>
#include <dpk/core/home_ranges.hpp>
#include <dpk/core/nontemporal.hpp>
#include <dpk/core/types.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

TEST_CASE_TEMPLATE_DEFINE("compat gemm equals a plain triple loop", Case, compat_gemm) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  int const m = 7, k = 5, n = 3;
  dpk::View2<Scalar, Mem> a("a", m, k), b("b", k, n), c("c", m, n);
  auto ha = Kokkos::create_mirror_view(a);
  auto hb = Kokkos::create_mirror_view(b);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < k; ++j) ha(i, j) = Scalar(0.1) * (i + 1) - Scalar(0.03) * j * j;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < n; ++j) hb(i, j) = Scalar(0.2) * (j + 1) + Scalar(0.05) * i;
  Kokkos::deep_copy(a, ha);
  Kokkos::deep_copy(b, hb);
  dpk::blas::gemm(Space(), "N", "N", Scalar(1), a, b, Scalar(0), c);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int l = 0; l < k; ++l) ref += double(ha(i, l)) * double(hb(l, j));
      CHECK(double(hc(i, j)) == doctest::Approx(ref).epsilon(sizeof(Scalar) == 8 ? 1e-14 : 1e-5));
    }
}
TEST_CASE_TEMPLATE_APPLY(compat_gemm, dpk_test::SpacesAndScalars);

// dpk::math names Kokkos::Experimental:: (3.x) or Kokkos:: (4.x, 5.x) functions: the same values
// as the C library on the host, evaluated inside a kernel of each execution space.
TEST_CASE_TEMPLATE_DEFINE("compat math functions equal the C library inside a kernel", Case, compat_math) {
  using Space = typename Case::execution_space;
  using Scalar = typename Case::scalar;
  int const n = 9, nf = 12;
  Kokkos::View<Scalar**, typename Case::memory_space> out("dpk::test::math", n, nf);
  Kokkos::parallel_for(
      "dpk::test::Math", Kokkos::RangePolicy<Space>(0, n), KOKKOS_LAMBDA(int i) {
        Scalar const x = Scalar(0.37) * Scalar(i) - Scalar(1.1);
        out(i, 0) = dpk::math::exp(x);
        out(i, 1) = dpk::math::fabs(x);
        out(i, 2) = dpk::math::floor(x);
        out(i, 3) = dpk::math::fmod(x, Scalar(0.3));
        out(i, 4) = dpk::math::sqrt(x * x + Scalar(0.5));
        out(i, 5) = dpk::math::tanh(x);
        out(i, 6) = dpk::math::sin(x);
        out(i, 7) = dpk::math::cos(x);
        out(i, 8) = dpk::math::ceil(x);
        out(i, 9) = dpk::math::min(x, Scalar(0.2));
        out(i, 10) = dpk::math::max(x, Scalar(0.2));
        out(i, 11) = x;
      });
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  double const tol = sizeof(Scalar) == 8 ? 1e-15 : 1e-6;
  for (int i = 0; i < n; ++i) {
    Scalar const x = h(i, 11);
    Scalar const ref[] = {std::exp(x), std::fabs(x), std::floor(x), std::fmod(x, Scalar(0.3)),
                          std::sqrt(x * x + Scalar(0.5)), std::tanh(x), std::sin(x), std::cos(x), std::ceil(x),
                          std::min(x, Scalar(0.2)), std::max(x, Scalar(0.2))};
    for (int f = 0; f < nf - 1; ++f)
      CHECK_MESSAGE(double(h(i, f)) == doctest::Approx(double(ref[f])).epsilon(tol).scale(1.0), "function ", f, " at x=", x);
  }
}
TEST_CASE_TEMPLATE_APPLY(compat_math, dpk_test::SpacesAndScalars);

namespace {

// Host copy of a deterministic test matrix.
template <class Scalar, class Mem>
dpk::View2<Scalar, Mem> test_matrix(int rows, int cols, double seed) {
  dpk::View2<Scalar, Mem> v("dpk::test::matrix", rows, cols);
  auto h = Kokkos::create_mirror_view(v);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) h(i, j) = Scalar(std::sin(seed + 0.37 * i + 0.11 * j * j));
  Kokkos::deep_copy(v, h);
  return v;
}

}  // namespace

// Sizes above the per-thread work threshold: with 2+ threads the products are split.
TEST_CASE_TEMPLATE_DEFINE("threaded gemm (N,N), (N,T) and the split T,N reduction equal plain loops", Case,
                          threaded_gemm) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  int const m = 301, k = 47, n = 53;
  double const tol = sizeof(Scalar) == 8 ? 1e-12 : 1e-4;
  auto a = test_matrix<Scalar, Mem>(m, k, 0.1);
  auto b = test_matrix<Scalar, Mem>(k, n, 0.7);
  auto bt = test_matrix<Scalar, Mem>(n, k, 1.3);
  auto c = test_matrix<Scalar, Mem>(m, n, 2.1);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hbt = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bt);
  auto hc0 = Kokkos::create_mirror(Kokkos::HostSpace(), c);  // a copy, even on host spaces
  Kokkos::deep_copy(hc0, c);
  // C = 0.5 C + 2 A B
  dpk::blas::gemm(Space(), "N", "N", Scalar(2), a, b, Scalar(0.5), c);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0.5 * double(hc0(i, j));
      for (int l = 0; l < k; ++l) ref += 2.0 * double(ha(i, l)) * double(hb(l, j));
      CHECK(double(hc(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
    }
  // C = A Bt^T
  dpk::blas::gemm(Space(), "N", "T", Scalar(1), a, bt, Scalar(0), c);
  Kokkos::deep_copy(hc, c);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int l = 0; l < k; ++l) ref += double(ha(i, l)) * double(hbt(j, l));
      CHECK(double(hc(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
    }
  // Fewer rows than columns (the fitting nets: split over columns in blocks of 16 at several
  // threads) with a long sum (several passes of dpk's kernel where it runs), overwritten and
  // accumulated.
  {
    int const fm = 40, fk = 300, fn = 250;
    auto fc = test_matrix<Scalar, Mem>(fm, fn, 1.7);
    auto const hfa = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), test_matrix<Scalar, Mem>(fm, fk, 0.3));
    auto const hfb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), test_matrix<Scalar, Mem>(fk, fn, 0.9));
    auto const fa = Kokkos::create_mirror_view_and_copy(Mem(), hfa), fb = Kokkos::create_mirror_view_and_copy(Mem(), hfb);
    auto const hfc0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), test_matrix<Scalar, Mem>(fm, fn, 1.7));
    for (Scalar beta : {Scalar(1), Scalar(0)}) {  // C = C + A B, then C = A B
      dpk::blas::gemm(Space(), "N", "N", Scalar(1), fa, fb, beta, fc);
      auto hfc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), fc);
      for (int i = 0; i < fm; ++i)
        for (int j = 0; j < fn; ++j) {
          double ref = beta == Scalar(0) ? 0.0 : double(hfc0(i, j));
          for (int l = 0; l < fk; ++l) ref += double(hfa(i, l)) * double(hfb(l, j));
          CHECK(double(hfc(i, j)) == doctest::Approx(ref).epsilon(tol * 10).scale(1.0));
        }
    }
  }
  // W = W + A0^T G0 + A1^T G1, with one pair and with two: many summed rows and a small W
  // (split over the summed rows, per-thread partials), and few summed rows and a tall W (split
  // over the rows of W, as for the fitting nets' first layer).
  auto tn_sum = [&](int const rows0, int const rows1, int const wrows) {
    auto a0 = test_matrix<Scalar, Mem>(rows0, wrows, 0.1);
    auto ha0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a0);
    auto a1 = test_matrix<Scalar, Mem>(rows1, wrows, 3.3);
    auto g0 = test_matrix<Scalar, Mem>(rows0, n, 4.1);
    auto g1 = test_matrix<Scalar, Mem>(rows1, n, 5.9);
    auto w = test_matrix<Scalar, Mem>(wrows, n, 6.2);
    auto hw0 = Kokkos::create_mirror(Kokkos::HostSpace(), w);
    Kokkos::deep_copy(hw0, w);
    auto ha1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a1);
    auto hg0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g0);
    auto hg1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g1);
    std::size_t const wsize = std::size_t(wrows) * n;
    dpk::View1<Scalar, Mem> partials("dpk::test::partials", dpk::blas::tn_sum_partials_size(Space(), wsize));
    // One partial sum per extra host thread; none on a device, whose concurrency counts hardware
    // threads (270336 on an H200: 773 GiB for the fitting nets' first layer, seen on the GPU).
    CHECK(partials.extent(0) ==
          (dpk::host_schedule_v<Space> ? std::size_t(std::max(0, int(Space().concurrency()) - 1)) * wsize : 0));
    for (bool two_pairs : {true, false}) {
      Kokkos::deep_copy(w, hw0);
      dpk::View2<Scalar, Mem> none;
      if (two_pairs)
        dpk::blas::gemm_tn_sum(Space(), Scalar(1), a0, g0, a1, g1, Scalar(1), w, partials);
      else
        dpk::blas::gemm_tn_sum(Space(), Scalar(1), a0, g0, none, none, Scalar(1), w, partials);
      auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
      for (int i = 0; i < wrows; ++i)
        for (int j = 0; j < n; ++j) {
          double ref = double(hw0(i, j));
          for (int r = 0; r < rows0; ++r) ref += double(ha0(r, i)) * double(hg0(r, j));
          if (two_pairs)
            for (int r = 0; r < rows1; ++r) ref += double(ha1(r, i)) * double(hg1(r, j));
          CHECK(double(hw(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
        }
    }
  };
  tn_sum(301, 120, 47);
  tn_sum(40, 25, 200);  // 200 x 53 x 65 multiply-adds: two blocks at 2 threads
}
TEST_CASE_TEMPLATE_APPLY(threaded_gemm, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE("in-thread gemm_tn_sum equals plain loops, one-column A (summed in place) and wider", Scalar, double,
                   float) {
  // C = beta C + alpha (A0^T B0 + A1^T B1) in a host thread: a one-column A_p (bias gradients, a
  // one-input layer's weights) takes detail::column_sums_in_thread, a wider one gemm.
  using Host = Kokkos::View<Scalar**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  double const tol = sizeof(Scalar) == 8 ? 1e-13 : 2e-5;
  auto value = [](int i, int j, int salt) { return Scalar(0.1 * ((i * 7 + j * 3 + salt) % 13) - 0.55); };
  auto filled = [&](int rows, int cols, int salt) {
    Host v("v", rows, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) v(i, j) = value(i, j, salt);
    return v;
  };
  // n: one group of vectors with a partial last one (35), several full groups and a partial
  // one (150 floats: 128 + 22; 150 doubles: 64 + 64 + 22), a water layer's width (100).
  for (int const acols : {1, 3})
    for (int const n : {35, 100, 150})
    for (int const rows1 : {0, 37})
      for (double const beta : {0.0, 1.0, -0.5})
        for (double const alpha : {1.0, 0.25}) {
          CAPTURE(acols);
          CAPTURE(n);
          CAPTURE(rows1);
          CAPTURE(beta);
          CAPTURE(alpha);
          int const rows0 = 129;
          Host const a0 = filled(rows0, acols, 1), b0 = filled(rows0, n, 2), c0 = filled(acols, n, 5);
          Host const a1 = rows1 > 0 ? filled(rows1, acols, 3) : Host(), b1 = rows1 > 0 ? filled(rows1, n, 4) : Host();
          Host c("c", acols, n);
          Kokkos::deep_copy(c, c0);
          dpk::View1<Scalar, Kokkos::HostSpace> no_partials;
          dpk::blas::gemm_tn_sum(dpk::InThread{}, Scalar(alpha), a0, b0, a1, b1, Scalar(beta), c, no_partials);
          for (int i = 0; i < acols; ++i)
            for (int j = 0; j < n; ++j) {
              double sum = 0;
              for (int r = 0; r < rows0; ++r) sum += double(a0(r, i)) * double(b0(r, j));
              for (int r = 0; r < rows1; ++r) sum += double(a1(r, i)) * double(b1(r, j));
              double const want = beta * double(c0(i, j)) + alpha * sum;
              CHECK(double(c(i, j)) == doctest::Approx(want).epsilon(tol).scale(1.0));
            }
        }
}

/// Elements of the matrix `c` that differ from `want` (its values row by row) by more than
/// `tol`, relative (absolute below 1).
template <class CView>
int mismatches(CView const& c, std::vector<double> const& want, double tol) {
  int const m = int(c.extent(0)), n = int(c.extent(1));
  int bad = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      if (!(double(c(i, j)) == doctest::Approx(want[std::size_t(i) * n + j]).epsilon(tol).scale(1.0))) ++bad;
  return bad;
}

/// A kernel's 0/1 switch `name`, read by `use(fallback)`: unset gives the fallback, 0 and 1 their
/// value, anything else an error whose message starts with `expected`; the variable is restored
/// afterwards (the ctest variants set it; the kernels read it once per process).
template <class Use>
void check_kernel_switch(char const* name, Use const& use, std::string const& expected) {
  CAPTURE(name);
  char const* const saved = std::getenv(name);
  std::string const kept = saved ? saved : "";
  ::unsetenv(name);
  CHECK(use(true));
  CHECK_FALSE(use(false));
  ::setenv(name, "0", 1);
  CHECK_FALSE(use(true));
  ::setenv(name, "1", 1);
  CHECK(use(false));
  ::setenv(name, "on", 1);
  CHECK_THROWS_WITH_AS(use(true), doctest::Contains((expected + ", got 'on'").c_str()), dpk::Error);
  if (saved)
    ::setenv(name, kept.c_str(), 1);
  else
    ::unsetenv(name);
}

TEST_CASE_TEMPLATE("dpk's two-pair weight-gradient kernel equals plain loops, and gemm_tn_sum through it", Scalar,
                   double, float) {
  // C = beta C + alpha (A0^T B0 + A1^T B1) (core/small_gemm_tn_sum.hpp): C's rows around the
  // register blocks (12 or 6, then 4, then single rows), columns around the two-vector tiles
  // (one lane, a partial vector, one or two vectors and a tail, a fitting net's 240), pairs
  // with no rows, A read by rows (a_col 1) and by columns (a_col = its rows), every operand
  // inside a wider matrix; beta 0 and 1, alpha 1 and not. Then gemm_tn_sum on a fitting shape
  // in a host thread and on the execution space, kernel taken or not (DPK_TN_SUM_KERNEL).
  using Right = Kokkos::View<Scalar**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using Left = Kokkos::View<Scalar**, Kokkos::LayoutLeft, Kokkos::HostSpace>;
  double const tol = sizeof(Scalar) == 8 ? 1e-13 : 2e-5;
  auto value = [](int i, int j, int salt) { return Scalar(0.01 * ((i * 37 + j * 11 + salt) % 101) - 0.5); };
  check_kernel_switch("DPK_TN_SUM_KERNEL", dpk::blas::detail::tn_sum_kernel_use,
                      "DPK_TN_SUM_KERNEL: expected 0 (the BLAS) or 1 (dpk's two-pair kernel)");
  CHECK(dpk::blas::detail::tn_sum_kernel_shape(1600, 240));  // the fitting nets' weights
  CHECK(dpk::blas::detail::tn_sum_kernel_shape(240, 240));
  CHECK_FALSE(dpk::blas::detail::tn_sum_kernel_shape(50, 100));  // the embedding nets'
  CHECK_FALSE(dpk::blas::detail::tn_sum_kernel_shape(240, 1));   // a fitting net's last layer
#if defined(DPK_HAS_SMALL_GEMM)
  for (int const m : {1, 5, 12, 13, 29})
    for (int const n : {1, 15, 16, 17, 33, 47, 240})
      for (auto const& rows : std::vector<std::pair<int, int>>{{37, 64}, {37, 0}, {0, 5}, {0, 0}})
        for (bool const by_columns : {false, true})
          for (int const beta : {0, 1}) {
            // Not a structured binding: CAPTURE captures it in a lambda, which Clang < 16 refuses.
            int const rows0 = rows.first, rows1 = rows.second;
            Scalar const alpha = by_columns ? Scalar(0.25) : Scalar(1);
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(rows0);
            CAPTURE(rows1);
            CAPTURE(by_columns);
            CAPTURE(beta);
            // A_p (rows x m) inside wider matrices: by rows (LayoutRight, 3 spare columns) or by
            // columns (LayoutLeft, 2 spare rows); B_p and C with 5 spare columns.
            Right ar[2] = {Right("a0", rows0, m + 3), Right("a1", rows1, m + 3)};
            Left al[2] = {Left("a0", rows0 + 2, m), Left("a1", rows1 + 2, m)};
            Right b[2] = {Right("b0", rows0, n + 5), Right("b1", rows1, n + 5)};
            Right c("c", m, n + 5);
            int const rows[2] = {rows0, rows1};
            dpk::blas::detail::TnSumArgs<Scalar> g;
            g.m = m;
            g.n = n;
            for (int p = 0; p < 2; ++p) {
              for (int l = 0; l < rows[p]; ++l) {
                for (int i = 0; i < m; ++i) ar[p](l, i) = al[p](l, i) = value(l, i, 3 + p);
                for (int j = 0; j < n + 5; ++j) b[p](l, j) = value(l, j, 7 + p);
              }
              auto& q = g.pairs[p];
              q.rows = rows[p];
              q.a = by_columns ? al[p].data() : ar[p].data();
              q.a_row = by_columns ? 1 : m + 3;
              q.a_col = by_columns ? rows[p] + 2 : 1;
              q.b = b[p].data();
              q.ldb = n + 5;
            }
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < n + 5; ++j) c(i, j) = value(i, j, 11);
            g.c = c.data();
            g.ldc = n + 5;
            g.accumulate = beta == 1;
            g.alpha = alpha;
            REQUIRE(dpk::blas::detail::tn_sum_kernel(g));
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < n + 5; ++j) {
                double want = double(value(i, j, 11));
                if (j < n) {
                  double sum = 0;
                  for (int p = 0; p < 2; ++p)
                    for (int l = 0; l < rows[p]; ++l) sum += double(ar[p](l, i)) * double(b[p](l, j));
                  want = beta * want + double(alpha) * sum;
                }
                CHECK(double(c(i, j)) == doctest::Approx(want).epsilon(tol).scale(1.0));  // spare columns kept
              }
          }
#endif
  // gemm_tn_sum on a fitting net's first-layer shape (C 1600 x 240, 64 rows per pair) in one host
  // thread and on the execution space: the same sums as plain loops whether the kernel takes it or not.
  int const m = 1600, n = 240, rows = 64;
  Right x0("x0", rows, m), x1("x1", rows, m), g0("g0", rows, n), g1("g1", rows, n), c("c", m, n);
  for (int l = 0; l < rows; ++l) {
    for (int i = 0; i < m; ++i) x0(l, i) = value(l, i, 1), x1(l, i) = value(l, i, 2);
    for (int j = 0; j < n; ++j) g0(l, j) = value(l, j, 3), g1(l, j) = value(l, j, 4);
  }
  std::vector<double> want(std::size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int l = 0; l < rows; ++l) sum += double(x0(l, i)) * double(g0(l, j)) + double(x1(l, i)) * double(g1(l, j));
      want[std::size_t(i) * n + j] = sum;
    }
  auto check = [&](char const* how) {
    CAPTURE(how);
    CHECK(mismatches(c, want, tol) == 0);
  };
  Kokkos::deep_copy(c, Scalar(7));
  dpk::blas::gemm_tn_sum(dpk::InThread{}, Scalar(1), x0, g0, x1, g1, Scalar(0), c, dpk::View1<Scalar, Kokkos::HostSpace>());
  check("in a host thread");
  if constexpr (Kokkos::SpaceAccessibility<dpk::DefaultExecutionSpace, Kokkos::HostSpace>::accessible) {
    Kokkos::deep_copy(c, Scalar(7));
    dpk::View1<Scalar, Kokkos::HostSpace> partials(
        "partials", dpk::blas::tn_sum_partials_size(dpk::DefaultExecutionSpace(), std::size_t(m) * n));
    dpk::blas::gemm_tn_sum(dpk::DefaultExecutionSpace(), Scalar(1), x0, g0, x1, g1, Scalar(0), c, partials);
    check("on the execution space");
  }
}

TEST_CASE_TEMPLATE("dpk's long-sum kernel equals plain loops, and gemm through it where B's rows lie on cache lines",
                   Scalar, double, float) {
  // C = beta C + alpha A B (core/small_gemm_long.hpp): C's rows around the register blocks (12
  // or 6, then 4, then single rows), columns around the two-vector tiles, short and long sums,
  // every operand inside a wider matrix (B's rows then off cache lines: the kernel itself reads
  // any rows), beta 0 and 1, alpha 1 and not. Then blas::gemm on a fitting net's first-layer
  // shape in a host thread and on the execution space, with B on cache lines and off them.
  using Right = Kokkos::View<Scalar**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  double const tol = sizeof(Scalar) == 8 ? 1e-13 : 2e-5;
  auto value = [](int i, int j, int salt) { return Scalar(0.01 * ((i * 37 + j * 11 + salt) % 101) - 0.5); };
  check_kernel_switch("DPK_LONG_SUM_KERNEL", dpk::blas::detail::long_sum_kernel_use,
                      "DPK_LONG_SUM_KERNEL: expected 0 (the BLAS) or 1 (dpk's long-sum kernel)");
  for (std::size_t bytes : {4, 8}) {
    CHECK(dpk::blas::detail::long_sum_gemm_shape(128, 240, 1600, bytes));  // a fitting net's first layer
    CHECK(dpk::blas::detail::long_sum_gemm_shape(128, 240, 1344, bytes));  // its part beside D's symmetric head
    CHECK(dpk::blas::detail::long_sum_gemm_shape(1, 16, 1024, bytes));
    CHECK_FALSE(dpk::blas::detail::long_sum_gemm_shape(128, 240, 240, bytes));  // its next layers
    CHECK_FALSE(dpk::blas::detail::long_sum_gemm_shape(128, 15, 1600, bytes));
    CHECK_FALSE(dpk::blas::detail::long_sum_gemm_shape(0, 240, 1600, bytes));
    CHECK_FALSE(dpk::blas::detail::long_sum_gemm_shape(2000, 2000, 2000, bytes));  // B from memory: the BLAS
  }
  // On Intel CPUs B must also fit the core's L2: a float64 first layer (W 1600 x 240: 3 MB) goes
  // to the BLAS where the L2 holds 2 MB, the float32 one (1.5 MB) stays on the kernel; elsewhere,
  // or with the L2 unknown, the 4 MB bound alone.
  std::size_t const mb = std::size_t(1) << 20;
  CHECK(dpk::blas::detail::long_sum_b_limit_for(true, 2 * mb) == 2 * mb);
  CHECK(dpk::blas::detail::long_sum_b_limit_for(true, 0) == dpk::blas::detail::long_sum_max_b_bytes);
  CHECK(dpk::blas::detail::long_sum_b_limit_for(true, 32 * mb) == dpk::blas::detail::long_sum_max_b_bytes);
  CHECK(dpk::blas::detail::long_sum_b_limit_for(false, mb) == dpk::blas::detail::long_sum_max_b_bytes);
  CHECK_FALSE(dpk::blas::detail::long_sum_gemm_shape(128, 240, 1600, 8, dpk::blas::detail::long_sum_b_limit_for(true, 2 * mb)));
  CHECK(dpk::blas::detail::long_sum_gemm_shape(128, 240, 1600, 4, dpk::blas::detail::long_sum_b_limit_for(true, 2 * mb)));
  CHECK(dpk::blas::detail::long_sum_gemm_shape(128, 240, 1600, 8, dpk::blas::detail::long_sum_b_limit_for(false, mb)));
  CHECK(dpk::blas::detail::long_sum_b_limit() <= dpk::blas::detail::long_sum_max_b_bytes);
  alignas(64) Scalar line[64] = {};
  CHECK(dpk::blas::detail::rows_on_cache_lines(line, 64 / sizeof(Scalar)));
  CHECK_FALSE(dpk::blas::detail::rows_on_cache_lines(line + 1, 64 / sizeof(Scalar)));
  CHECK_FALSE(dpk::blas::detail::rows_on_cache_lines(line, 64 / sizeof(Scalar) + 1));
#if defined(DPK_HAS_SMALL_GEMM)
  for (int const m : {1, 3, 4, 5, 12, 13, 29})
    for (int const n : {1, 15, 16, 17, 33, 47, 240})
      for (int const k : {5, 1030})
        for (int const beta : {0, 1}) {
          Scalar const alpha = beta == 1 ? Scalar(0.25) : Scalar(1);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(beta);
          Right a("a", m, k + 3), b("b", k, n + 5), c("c", m, n + 5);
          for (int i = 0; i < m; ++i)
            for (int l = 0; l < k + 3; ++l) a(i, l) = value(i, l, 3);
          for (int l = 0; l < k; ++l)
            for (int j = 0; j < n + 5; ++j) b(l, j) = value(l, j, 7);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n + 5; ++j) c(i, j) = value(i, j, 11);
          dpk::blas::detail::SmallGemmArgs<Scalar> g{m, n, k, a.data(), k + 3, 1, b.data(), n + 5, c.data(), n + 5,
                                                     beta == 1, false, alpha};
          dpk::blas::detail::long_sum_gemm(g);
          std::vector<double> want(std::size_t(m) * (n + 5));  // spare columns [n, n + 5) kept
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n + 5; ++j) {
              double& w = want[std::size_t(i) * (n + 5) + j];
              w = double(value(i, j, 11));
              if (j < n) {
                double sum = 0;
                for (int l = 0; l < k; ++l) sum += double(a(i, l)) * double(b(l, j));
                w = beta * w + double(alpha) * sum;
              }
            }
          CHECK(mismatches(c, want, tol) == 0);
        }
#endif
  // blas::gemm on the first fitting layer's shape (64 rows, 1600 -> 240): the same sums as plain
  // loops whether the kernel takes the product (B from its own allocation: rows of 960 or 1920
  // bytes on cache lines) or not (B one column further on); where the kernel is compiled in,
  // enabled and takes B's size on this CPU, the aligned product is the kernel's, bit for bit.
  int const m = 64, k = 1600, n = 240;
  Right x("x", m, k), c("c", m, n), direct("direct", m, n);
  dpk::View1<Scalar, Kokkos::HostSpace> w("w", std::size_t(k) * n + 1);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) x(i, l) = value(i, l, 1);
  for (int const shift : {0, 1}) {
    CAPTURE(shift);
    Right const b(w.data() + shift, k, n);  // contiguous rows of n, from the allocation's start or one further
    for (int l = 0; l < k; ++l)
      for (int j = 0; j < n; ++j) b(l, j) = value(l, j, 2);
    CHECK(dpk::blas::detail::rows_on_cache_lines(b.data(), std::ptrdiff_t(b.stride(0))) == (shift == 0));
    std::vector<double> want(std::size_t(m) * n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int l = 0; l < k; ++l) sum += double(x(i, l)) * double(b(l, j));
        want[std::size_t(i) * n + j] = sum;
      }
    auto check = [&](char const* how) {
      CAPTURE(how);
      CHECK(mismatches(c, want, tol) == 0);
    };
    Kokkos::deep_copy(c, Scalar(7));
    dpk::blas::gemm(dpk::InThread{}, "N", "N", Scalar(1), x, b, Scalar(0), c);
    check("in a host thread");
#if defined(DPK_HAS_SMALL_GEMM)
    if (shift == 0 && dpk::blas::detail::long_sum_kernel_enabled() &&
        dpk::blas::detail::long_sum_gemm_shape(m, n, k, sizeof(Scalar), dpk::blas::detail::long_sum_b_limit())) {
      dpk::blas::detail::long_sum_gemm(dpk::blas::detail::SmallGemmArgs<Scalar>{
          m, n, k, x.data(), k, 1, b.data(), std::ptrdiff_t(b.stride(0)), direct.data(), n, false, false, Scalar(1)});
      int differ = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) differ += c(i, j) != direct(i, j);
      CHECK(differ == 0);
    }
#endif
    if constexpr (Kokkos::SpaceAccessibility<dpk::DefaultExecutionSpace, Kokkos::HostSpace>::accessible) {
      Kokkos::deep_copy(c, Scalar(7));
      dpk::blas::gemm(dpk::DefaultExecutionSpace(), "N", "N", Scalar(1), x, b, Scalar(0), c);
      check("on the execution space");
    }
  }
}

TEST_CASE_TEMPLATE("in-thread gemm (host BLAS and KokkosBatched serial) equals plain loops for every op", Scalar, double,
                   float) {
  // The product a host thread makes on its own block: through the host BLAS (unit-stride rows)
  // when Kokkos Kernels has a BLAS TPL, and through KokkosBatched's serial GEMM (called directly,
  // and for column-major operands, which the BLAS path does not take).
  int const m = 9, n = 6, k = 7;
  double const tol = sizeof(Scalar) == 8 ? 1e-14 : 2e-6;
  auto value = [](int i, int j, int salt) { return Scalar(0.1 * ((i * 7 + j * 3 + salt) % 11) - 0.45); };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Kokkos::View<Scalar**, Kokkos::LayoutRight, Kokkos::HostSpace> a("a", ta ? k : m, ta ? m : k),
          b("b", tb ? n : k, tb ? k : n), c_blas("c", m, n), c_batched("c", m, n);
      Kokkos::View<Scalar**, Kokkos::LayoutLeft, Kokkos::HostSpace> a_left("a", a.extent(0), a.extent(1)),
          b_left("b", b.extent(0), b.extent(1)), c_left("c", m, n);
      for (std::size_t i = 0; i < a.extent(0); ++i)
        for (std::size_t j = 0; j < a.extent(1); ++j) a(i, j) = a_left(i, j) = value(int(i), int(j), 1);
      for (std::size_t i = 0; i < b.extent(0); ++i)
        for (std::size_t j = 0; j < b.extent(1); ++j) b(i, j) = b_left(i, j) = value(int(i), int(j), 5);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) c_blas(i, j) = c_batched(i, j) = c_left(i, j) = value(i, j, 2);
      Scalar const alpha = Scalar(1.5), beta = Scalar(-0.5);
      char const* opa = ta ? "T" : "N";
      char const* opb = tb ? "T" : "N";
      dpk::blas::detail::gemm_in_thread(opa, opb, alpha, a, b, beta, c_blas);
      dpk::blas::detail::gemm_in_thread_batched(ta, tb, alpha, a, b, beta, c_batched);
      dpk::blas::detail::gemm_in_thread(opa, opb, alpha, a_left, b_left, beta, c_left);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double ref = 0;
          for (int l = 0; l < k; ++l)
            ref += double(ta ? a(l, i) : a(i, l)) * double(tb ? b(j, l) : b(l, j));
          ref = double(alpha) * ref + double(beta) * double(value(i, j, 2));
          CHECK(double(c_blas(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
          CHECK(double(c_batched(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
          CHECK(double(c_left(i, j)) == doctest::Approx(ref).epsilon(tol).scale(1.0));
        }
    }
}

TEST_CASE("dpk's small-matrix kernel: DPK_SMALL_GEMM's values and which shapes it takes by default") {
  using dpk::blas::detail::parse_small_gemm_use;
  using dpk::blas::detail::small_gemm_shape;
  using Use = dpk::blas::detail::SmallGemmUse;
  CHECK(parse_small_gemm_use(nullptr, Use::small_shapes) == Use::small_shapes);  // unset: the build's default
  CHECK(parse_small_gemm_use(nullptr, Use::none) == Use::none);
  CHECK(parse_small_gemm_use("0", Use::all) == Use::none);
  CHECK(parse_small_gemm_use("small", Use::none) == Use::small_shapes);
  CHECK(parse_small_gemm_use("1", Use::none) == Use::all);
  // Water's embedding nets [25, 50, 100] in chunks of 128 rows (columns of C, terms of the sum):
  // forward 25 -> 50 and 50 -> 100, input cotangents 100 -> 50 and 50 -> 25, weight gradients
  // over a chunk; wider nets up to 128 columns and chunks up to 256 rows.
  for (auto [columns, sum] : std::vector<std::pair<int, int>>{{50, 25}, {100, 50}, {50, 100}, {25, 50},
                                                                 {50, 128}, {100, 128}, {128, 256}, {1, 240}})
    CHECK(small_gemm_shape(columns, sum));
  // The fitting nets [240, 240, 240] on a 1600-wide descriptor go to the BLAS: forward, input
  // cotangents, weight gradients over 192 atoms.
  for (auto [columns, sum] : std::vector<std::pair<int, int>>{{240, 1600}, {240, 240}, {1600, 240}, {240, 192},
                                                                 {129, 25}, {100, 257}})
    CHECK_FALSE(small_gemm_shape(columns, sum));
#if defined(DPK_HAS_HOST_BLAS) && defined(DPK_HAS_SMALL_GEMM) && !defined(DPK_SMALL_GEMM_AVX512)
  if (std::getenv("DPK_SMALL_GEMM") == nullptr)  // an AVX2 build with a host BLAS: the embedding shapes only
    CHECK(dpk::blas::detail::small_gemm_use() == Use::small_shapes);
#endif
  if (char const* v = std::getenv("DPK_SMALL_GEMM"); v && std::string(v) == "0")
    CHECK_FALSE(dpk::blas::detail::small_gemm_enabled());
}

TEST_CASE_TEMPLATE("in-thread gemm on the skinny shapes of the nets (dpk's AVX-512 or AVX2 kernel where compiled in) equals plain loops",
                   Scalar, double, float) {
  // Shapes around the kernel's vector, panel and register-block edges (n: 1 .. 8 vectors per
  // panel and a tail, one or two panels; m: row blocks of 3, 5 or 8 and the single rows after
  // them; k within one pass of small_gemm_kc terms, over several and a partial one, up to a
  // fitting net's 240), alpha 1 and not, A plain and transposed, both strided inside wider
  // matrices, B plain
  // with rows off the cache lines (copied when C has many rows) or on them (read in place), or
  // transposed (copied), C overwritten (beta 0) and accumulated (beta 1); through
  // gemm_in_thread (which picks the kernel or the BLAS, blas::detail::small_gemm_enabled) and,
  // where compiled in, through the kernel directly.
  using Matrix = Kokkos::View<Scalar**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  double const tol = sizeof(Scalar) == 8 ? 1e-13 : 2e-5;
  auto value = [](int i, int j, int salt) { return Scalar(0.01 * ((i * 37 + j * 11 + salt) % 101) - 0.5); };
  std::vector<int> const ns = {1, 7, 16, 25, 100, 129, 200}, ms = {1, 4, 7, 11, 128}, ks = {1, 25, 64, 65, 240};
  enum class BForm { off_lines, on_lines, transposed };
  int checked = 0, direct_checked = 0;
  for (bool direct : {false, true})
    for (BForm form : {BForm::off_lines, BForm::on_lines, BForm::transposed})
      for (int n : ns)
        for (int m : ms)
          for (int k : ks)
            for (bool ta : {false, true})
              for (Scalar beta : {Scalar(0), Scalar(1)}) {
                CAPTURE(direct);
                CAPTURE(int(form));
                CAPTURE(n);
                CAPTURE(m);
                CAPTURE(k);
                CAPTURE(ta);
                CAPTURE(beta);
                bool const tb = form == BForm::transposed;
                Scalar const alpha = (n + k) % 2 == 0 ? Scalar(1) : Scalar(-0.375);  // both, over the shapes
                // Operands as column blocks of wider matrices (row strides larger than their
                // widths); B on the lines: from column 0 of rows padded to 16 elements.
                int const b_rows = tb ? n : k, b_cols = tb ? k : n;
                int const b_first = form == BForm::on_lines ? 0 : 2;
                int const b_pitch = form == BForm::on_lines ? (b_cols + 15) / 16 * 16 : b_cols + 5;
                Matrix a_wide("a", ta ? k : m, (ta ? m : k) + 3), b_wide("b", b_rows, b_pitch), c_wide("c", m, n + 2);
                auto a = Kokkos::subview(a_wide, Kokkos::ALL(), std::make_pair(1, 1 + int(ta ? m : k)));
                auto b = Kokkos::subview(b_wide, Kokkos::ALL(), std::make_pair(b_first, b_first + b_cols));
                auto c = Kokkos::subview(c_wide, Kokkos::ALL(), std::make_pair(0, n));
                for (std::size_t i = 0; i < a_wide.extent(0); ++i)
                  for (std::size_t j = 0; j < a_wide.extent(1); ++j) a_wide(i, j) = value(int(i), int(j), 1);
                for (std::size_t i = 0; i < b_wide.extent(0); ++i)
                  for (std::size_t j = 0; j < b_wide.extent(1); ++j) b_wide(i, j) = value(int(i), int(j), 5);
                for (int i = 0; i < m; ++i)
                  for (int j = 0; j < n + 2; ++j) c_wide(i, j) = value(i, j, 2);
                if (direct) {  // dpk's kernel itself, whatever gemm_in_thread would choose here
#if defined(DPK_HAS_SMALL_GEMM)
                  auto const args = dpk::blas::detail::small_gemm_args(ta, tb, alpha, a, b, beta != Scalar(0), c);
                  if (form != BForm::transposed)  // where the kernel reads B from
                    CHECK(dpk::blas::detail::small_gemm_b_in_place(args) == (form == BForm::on_lines || m < 16));
                  REQUIRE(dpk::blas::detail::small_gemm(args));
#else
                  continue;
#endif
                } else {
                  dpk::blas::detail::gemm_in_thread(ta ? "T" : "N", tb ? "T" : "N", alpha, a, b, beta, c);
                }
                for (int i = 0; i < m; ++i) {
                  for (int j = 0; j < n; ++j) {
                    double ref = beta == Scalar(0) ? 0.0 : double(value(i, j, 2));
                    double scale = std::fabs(ref);
                    for (int l = 0; l < k; ++l) {
                      double const p = double(alpha) * double(ta ? a(l, i) : a(i, l)) * double(tb ? b(j, l) : b(l, j));
                      ref += p;
                      scale += std::fabs(p);
                    }
                    if (std::fabs(double(c(i, j)) - ref) > tol * std::max(1.0, scale)) {
                      FAIL_CHECK("C(" << i << ", " << j << ") = " << c(i, j) << ", expected " << ref);
                      return;
                    }
                  }
                  // The columns beside C's block are untouched (masked stores).
                  for (int j = n; j < n + 2; ++j) REQUIRE(c_wide(i, j) == value(i, j, 2));
                }
                ++(direct ? direct_checked : checked);
              }
  CHECK(checked == 3 * int(ns.size() * ms.size() * ks.size()) * 2 * 2);
#if defined(DPK_HAS_SMALL_GEMM)
  CHECK(direct_checked == checked);  // every shape, directly
  // An empty product is declined (nothing to do; the callers never pass one).
  Scalar x = 0;
  CHECK_FALSE(dpk::blas::detail::small_gemm(dpk::blas::detail::SmallGemmArgs<Scalar>{1, 1, 0, &x, 1, 1, &x, 1, &x, 1, false}));
#else
  CHECK(direct_checked == 0);
#endif
}

TEST_CASE("column blocks of a split product cover every column once, on multiples of 16") {
  for (std::size_t columns : {1, 15, 16, 17, 100, 120, 240, 241, 1600})
    for (int blocks = 1; blocks <= 8; ++blocks) {
      CAPTURE(columns);
      CAPTURE(blocks);
      std::size_t next = 0;
      for (int k = 0; k < blocks; ++k) {
        auto const range = dpk::blas::detail::block_columns(columns, blocks, k);
        CHECK(range.first == next);
        CHECK(range.first <= range.second);
        CHECK(range.first % 16 == 0);
        if (k + 1 < blocks) CHECK(range.second % 16 == 0);
        // Balanced to one group of 16: no block more than 16 columns longer than another.
        CHECK(range.second - range.first <= 16 * ((columns + 15) / 16 / blocks + 1));
        next = range.second;
      }
      CHECK(next == columns);
    }
  // The fitting nets' 240 columns at 2 threads: 7 and 8 groups of 16.
  CHECK(dpk::blas::detail::block_columns(240, 2, 0) == std::pair<std::size_t, std::size_t>{0, 112});
  CHECK(dpk::blas::detail::block_columns(240, 2, 1) == std::pair<std::size_t, std::size_t>{112, 240});
}

TEST_CASE("home ranges run every item once, on workers below the thread count, again after a copy") {
  // Which worker runs an item depends on timing (a busy thread's items go to the others), so
  // only the covering is checked: each item exactly once, worker ids in range, per run.
  using Host = Kokkos::DefaultHostExecutionSpace;
  Host const space;
  int const threads = std::max(1, int(space.concurrency()));
  dpk::HomeRanges ranges;
  for (int const items : {0, 1, 2, 3, 7, 64, 129}) {
    CAPTURE(items);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::atomic<int>> runs(std::size_t(items) + 1);
      std::atomic<int> bad_worker{0};
      dpk::HomeRanges copy = ranges;  // a copy schedules afresh
      dpk::HomeRanges& use = pass == 0 ? ranges : copy;
      use.run(space, "test_home_ranges", items, [&](int const worker, int const item) {
        if (worker < 0 || worker >= std::min(threads, items)) bad_worker.fetch_add(1);
        runs[std::size_t(item)].fetch_add(1);
      });
      CHECK(bad_worker.load() == 0);
      for (int i = 0; i < items; ++i) CHECK(runs[std::size_t(i)].load() == 1);
    }
  }
}

TEST_CASE_TEMPLATE("copy_streaming copies the bits, from any alignment, of any length", Scalar, double, float) {
  // Streaming stores for the aligned body, plain ones for the head and tail: every offset of the
  // target within a 64-byte line and lengths around the vector sizes; neighbours stay untouched.
  std::vector<Scalar> src(300), dst(340);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = Scalar(std::sin(0.37 * double(i) + 0.1)) * Scalar(1e3);
  src[5] = -Scalar(0);
  for (std::size_t offset = 0; offset < 17; ++offset)
    for (std::size_t const n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(8), std::size_t(15),
                                std::size_t(16), std::size_t(17), std::size_t(64), std::size_t(255), std::size_t(300)}) {
      CAPTURE(offset);
      CAPTURE(n);
      std::fill(dst.begin(), dst.end(), Scalar(-7));
      dpk::copy_streaming(dst.data() + offset, src.data(), n);
      CHECK(std::memcmp(dst.data() + offset, src.data(), n * sizeof(Scalar)) == 0);
      bool untouched = true;
      for (std::size_t i = 0; i < dst.size(); ++i)
        if ((i < offset || i >= offset + n) && dst[i] != Scalar(-7)) untouched = false;
      CHECK(untouched);
    }
}

TEST_CASE("accessibility trait of the entry points' static_asserts") {
  // Compile-time: what the static_asserts at dpk's entry points test.
  static_assert(dpk::accessible_v<dpk::DefaultExecutionSpace, dpk::memory_space_t<dpk::DefaultExecutionSpace>>);
  static_assert(dpk::accessible_v<Kokkos::DefaultHostExecutionSpace, Kokkos::HostSpace>);
  static_assert(dpk::accessible_v<dpk::InThread, Kokkos::HostSpace>);
#if defined(KOKKOS_ENABLE_CUDA)
  static_assert(!dpk::accessible_v<Kokkos::Cuda, Kokkos::HostSpace>);
  static_assert(!dpk::accessible_v<Kokkos::DefaultHostExecutionSpace, Kokkos::CudaSpace>);
  static_assert(!dpk::accessible_v<dpk::InThread, Kokkos::CudaSpace>);
#endif
  CHECK(dpk::accessible_v<dpk::InThread, Kokkos::HostSpace>);
}

TEST_CASE("ensure_extent grows and never shrinks") {
  dpk::View2<double, Kokkos::HostSpace> v("dpk::test::v", 2, 3);
  dpk::ensure_extent(v, 4, 3);
  CHECK(v.extent(0) == 4);
  CHECK(v.label() == "dpk::test::v");
  double* before = v.data();
  dpk::ensure_extent(v, 1, 1);
  CHECK(v.data() == before);
}

TEST_CASE("ensure_extent_with_headroom and ensure_rows: exact at first, 1/8 more rows when they grow again") {
  // MD steps whose sizes creep up (embedding rows, ghost atoms) must not reallocate every step.
  dpk::View1<double, Kokkos::HostSpace> v("dpk::test::rows", 0);
  dpk::ensure_extent_with_headroom(v, 1000);
  CHECK(v.extent(0) == 1000);  // the first allocation is exact
  dpk::ensure_extent_with_headroom(v, 1001);
  CHECK(v.extent(0) == 1001 + 1001 / 8);
  CHECK(v.label() == "dpk::test::rows");
  double* const grown = v.data();
  for (std::size_t n : {1050, 1125, 900}) {  // within the headroom, or smaller: no new allocation
    dpk::ensure_extent_with_headroom(v, n);
    CHECK(v.data() == grown);
    CHECK(v.extent(0) == 1126);
  }
  dpk::View3<double, Kokkos::HostSpace> w("dpk::test::atoms", 0, 0, 0);
  dpk::ensure_extent_with_headroom(w, 16, 5, 4);
  CHECK((w.extent(0) == 16 && w.extent(1) == 5 && w.extent(2) == 4));
  dpk::ensure_extent_with_headroom(w, 17, 5, 4);  // only the first extent gets headroom
  CHECK((w.extent(0) == 19 && w.extent(1) == 5 && w.extent(2) == 4));
  dpk::ensure_extent_with_headroom(w, 10, 6, 4);  // an inner extent grows: the rows stay
  CHECK((w.extent(0) == 19 && w.extent(1) == 6 && w.extent(2) == 4));

  dpk::View2<int, Kokkos::HostSpace> r("dpk::test::list", 0, 0);
  dpk::ensure_rows(r, 2200, 138);
  CHECK((r.extent(0) == 2200 && r.extent(1) == 138));
  dpk::ensure_rows(r, 2254, 138);  // a domain with more ghosts after a neighbour-list build
  CHECK((r.extent(0) == 2254 + 2254 / 8 && r.extent(1) == 138));
  int* const list = r.data();
  dpk::ensure_rows(r, 2293, 138);
  CHECK(r.data() == list);
  dpk::ensure_rows(r, 100, 46);  // another inner shape: exact again
  CHECK((r.extent(0) == 100 && r.extent(1) == 46));
}

#if defined(__linux__)
namespace {
/// VmFlags of the mapping that holds `address` in /proc/self/smaps ("" when not found).
std::string vm_flags_at(void const* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  auto const at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find('-') < line.find(' '))
      inside = at >= lo && at < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return "";
}
/// Whether the mapping that holds `at` has MADV_HUGEPAGE ("hg" in its VmFlags).
bool advised(void const* at) { return vm_flags_at(at).find(" hg") != std::string::npos; }
}  // namespace

TEST_CASE("large host workspaces are advised huge pages unless DPK_HUGE_PAGES=0; a bad value is an error") {
  // Fresh anonymous mappings, so that no advice given earlier to reused memory shows.
  auto fresh = [](std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return static_cast<char*>(p);
  };
  std::size_t const huge = std::size_t(2) << 20;
  std::size_t const big = std::size_t(24) << 20, small = huge * 3 / 4, mid = huge * 5 / 2;
  for (std::string const setting : {"", "1", "0"}) {
    CAPTURE(setting);
    ::setenv("DPK_HUGE_PAGES", setting.c_str(), 1);
    char* const a = fresh(big);
    char* const b = fresh(small);
    char* const c = fresh(mid);
    dpk::detail::advise_huge_pages(a, big);
    dpk::detail::advise_huge_pages(b, small);
    dpk::detail::advise_huge_pages(c, mid);
    REQUIRE(!vm_flags_at(a + big / 2).empty());
    CHECK(advised(a + big / 2) == (setting != "0"));
    CHECK_FALSE(advised(b + small / 2));  // below 2 MiB: left alone
    // From 2 MiB on, the whole 2 MiB pages inside the buffer (here one, wherever it starts).
    auto const first = (reinterpret_cast<std::uintptr_t>(c) + huge - 1) & ~(huge - 1);
    if (first + huge <= reinterpret_cast<std::uintptr_t>(c) + mid)
      CHECK(advised(reinterpret_cast<char const*>(first + huge / 2)) == (setting != "0"));
    ::munmap(a, big);
    ::munmap(b, small);
    ::munmap(c, mid);
  }
  ::unsetenv("DPK_HUGE_PAGES");
  // Through the workspace helpers: a large host View is advised (the default).
  dpk::View1<double, Kokkos::HostSpace> v;
  dpk::ensure_extent(v, big / sizeof(double));
  CHECK(advised(reinterpret_cast<char const*>(v.data() + v.extent(0) / 2)));
  ::setenv("DPK_HUGE_PAGES", "yes", 1);
  dpk::View1<double, Kokkos::HostSpace> w;
  CHECK_THROWS_WITH_AS(dpk::ensure_extent(w, big / sizeof(double)), doctest::Contains("DPK_HUGE_PAGES"), dpk::Error);
  ::unsetenv("DPK_HUGE_PAGES");
}

TEST_CASE_TEMPLATE("zeroed_vector: n zeros under the label; from 2 MiB on they start on a 2 MiB page, advised huge", Scalar,
                   double, float) {
  std::size_t const huge = std::size_t(2) << 20;
  // Small: a plain View. Large: just over 2 and 4 MiB (a float32 water model's buffers are 3.9 MiB).
  for (std::size_t const n : {std::size_t(1000), huge / sizeof(Scalar) + 7919, 2 * huge / sizeof(Scalar) + 15013}) {
    for (std::string const setting : {"", "0"}) {
      CAPTURE(n);
      CAPTURE(setting);
      ::setenv("DPK_HUGE_PAGES", setting.c_str(), 1);
      // Memory the allocator may hand out again, dirtied first: the zeros must be written.
      { dpk::View1<Scalar, Kokkos::HostSpace> dirty("dirty", n + huge / sizeof(Scalar)); Kokkos::deep_copy(dirty, Scalar(7)); }
      auto const v = dpk::zeroed_vector<Scalar, Kokkos::HostSpace>("dpk::test::zeros", n);
      CHECK(v.extent(0) == n);
      CHECK(v.label() == "dpk::test::zeros");
      std::size_t nonzero = 0;
      for (std::size_t i = 0; i < n; ++i) nonzero += v(i) != Scalar(0);
      CHECK(nonzero == 0);
      for (std::size_t i = 0; i < n; ++i) v(i) = Scalar(i % 5);  // every element writable
      CHECK(v(n - 1) == Scalar((n - 1) % 5));
      bool const large = n * sizeof(Scalar) >= huge && setting != "0";
      auto const at = reinterpret_cast<std::uintptr_t>(v.data());
      if (large) {
        CHECK(at % huge == 0);
        CHECK(advised(reinterpret_cast<char const*>(at + huge / 2)));
      }
    }
  }
  ::unsetenv("DPK_HUGE_PAGES");
}
#endif

TEST_CASE("env_switch: unset or empty gives the default, 0 and 1 their value, anything else an error") {
  char const* const name = "DPK_TEST_ENV_SWITCH";
  ::unsetenv(name);
  CHECK(dpk::env_switch(name, true));
  CHECK_FALSE(dpk::env_switch(name, false));
  ::setenv(name, "", 1);
  CHECK(dpk::env_switch(name, true));
  ::setenv(name, "0", 1);
  CHECK_FALSE(dpk::env_switch(name, true));
  ::setenv(name, "1", 1);
  CHECK(dpk::env_switch(name, false));
  for (std::string const bad : {"yes", "on", "2", "01", " 1", "1 ", "true"}) {
    CAPTURE(bad);
    ::setenv(name, bad.c_str(), 1);
    CHECK_THROWS_WITH_AS(dpk::env_switch(name, true, "0 (off) or 1 (on)"),
                         doctest::Contains(("DPK_TEST_ENV_SWITCH: expected 0 (off) or 1 (on), got '" + bad + "'").c_str()),
                         dpk::Error);
  }
  ::unsetenv(name);
}

TEST_CASE("env_count: unset or empty gives the default, digits up to the bound the value, anything else an error") {
  char const* const name = "DPK_TEST_ENV_COUNT";
  ::unsetenv(name);
  CHECK(dpk::env_count(name, 128, 1000, "a count") == 128);
  for (std::string const good : {"", "0", "7", "1000", "0012"}) {
    CAPTURE(good);
    ::setenv(name, good.c_str(), 1);
    CHECK(dpk::env_count(name, 128, 1000, "a count") == (good.empty() ? 128 : std::stoi(good)));
  }
  for (std::string const bad : {"1001", "-1", "+5", " 5", "5 ", "12x", "x", "99999999999999999999"}) {
    CAPTURE(bad);
    ::setenv(name, bad.c_str(), 1);
    CHECK_THROWS_WITH_AS(dpk::env_count(name, 128, 1000, "a count 0..1000"),
                         doctest::Contains(("DPK_TEST_ENV_COUNT: expected a count 0..1000, got '" + bad + "'").c_str()), dpk::Error);
  }
  ::unsetenv(name);
}

TEST_CASE("Kokkos thread option is spelled for the Kokkos in use") {
  char a0[] = "prog", a1[] = "--kokkos-num-threads=3", a2[] = "--kokkos-threads=2", a3[] = "--other=1";
  char* argv[] = {a0, a1, a2, a3};
  dpk::translate_kokkos_arguments(4, argv);
#if KOKKOS_VERSION < 40000
  CHECK(std::string(argv[1]) == "--kokkos-threads=3");
  CHECK(std::string(argv[2]) == "--kokkos-threads=2");
#else
  CHECK(std::string(argv[1]) == "--kokkos-num-threads=3");
  CHECK(std::string(argv[2]) == "--kokkos-num-threads=2");
#endif
  CHECK(std::string(argv[3]) == "--other=1");
}
