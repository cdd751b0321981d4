// Core utilities: workspace growth and the compat GEMM against a plain loop.
#include <doctest/doctest.h>

#include <dpk/core/compat.hpp>
#include <dpk/core/types.hpp>

#include <string>

TEST_CASE_TEMPLATE("compat gemm equals a plain triple loop", Scalar, double, float) {
  using Space = dpk::DefaultExecutionSpace;
  using Mem = dpk::memory_space_t<Space>;
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
      CHECK(double(hc(i, j)) == doctest::Approx(ref).epsilon(1e-5));
    }
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
