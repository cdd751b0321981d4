#pragma once
/// \file compat.hpp
/// \brief The one place where differences between Kokkos 3.4, 4.x and 5.x are handled.
///
/// Everything else in dpk spells Kokkos through the names defined here when the spelling
/// differs between versions: math functions (Kokkos::Experimental:: in 3.x, Kokkos:: from 4.0)
/// and the GEMM entry point (execution-space-instance overload only in newer Kokkos Kernels,
/// which define KOKKOSKERNELS_VERSION; the instance-less overload exists in every version).
/// Products inside a host thread are in core/host_gemm.hpp.

#include <Kokkos_Core.hpp>
#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

#if KOKKOS_VERSION < 40000
#include <Kokkos_MathematicalFunctions.hpp>
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>

namespace dpk {
/// Device-callable math functions, one spelling for every supported Kokkos version.
namespace math {
#if KOKKOS_VERSION >= 40000
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::floor;
using Kokkos::fmod;
using Kokkos::sqrt;
using Kokkos::tanh;
using Kokkos::sin;
using Kokkos::cos;
using Kokkos::ceil;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::floor;
using Kokkos::Experimental::fmod;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::cos;
using Kokkos::Experimental::ceil;
#endif

/// Device-callable minimum (std::min is host-only on CUDA).
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T min(T a, T b) { return b < a ? b : a; }
/// Device-callable maximum.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T max(T a, T b) { return a < b ? b : a; }
}  // namespace math

/// Rewrites, in place, the thread-count option of Kokkos' command line to the spelling of the
/// Kokkos in use (`--kokkos-threads=N` in 3.x, `--kokkos-num-threads=N` from 4.0), so that either
/// spelling works with every version. Call before Kokkos::initialize(argc, argv).
inline void translate_kokkos_arguments(int argc, char** argv) {
#if KOKKOS_VERSION < 40000
  char const* from = "--kokkos-num-threads";
  char const* to = "--kokkos-threads";
#else
  char const* from = "--kokkos-threads";
  char const* to = "--kokkos-num-threads";
#endif
  static std::deque<std::string> storage;  // argv entries must outlive Kokkos' parsing
  std::size_t const n = std::strlen(from);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], from, n) == 0 && (argv[i][n] == '=' || argv[i][n] == '\0')) {
      storage.push_back(std::string(to) + (argv[i] + n));
      argv[i] = &storage.back()[0];
    }
}

/// Dense matrix products through Kokkos Kernels (host BLAS / cuBLAS TPLs where enabled).
/// The public entry point is dpk::blas::gemm in core/gemm.hpp; this is the one call whose
/// spelling depends on the Kokkos Kernels version.
namespace blas::detail {
/// C = beta C + alpha op(A) op(B) on `space` as one Kokkos Kernels call.
template <class ExecutionSpace, class AView, class BView, class CView>
void gemm_kk(ExecutionSpace const& space, const char* trans_a, const char* trans_b,
             typename AView::const_value_type alpha, AView const& a, BView const& b,
             typename CView::const_value_type beta, CView const& c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40100
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  // Older Kokkos Kernels have no instance overload: order work on `space` explicitly.
  space.fence();
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  typename CView::execution_space().fence();
#endif
}

}  // namespace blas::detail
}  // namespace dpk
