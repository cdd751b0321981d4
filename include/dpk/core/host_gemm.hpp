#pragma once
/// \file host_gemm.hpp
/// \brief One matrix product inside the calling host thread (a block of a host parallel
/// region): the host BLAS when Kokkos Kernels was built with its BLAS TPL, called through the
/// standard Fortran BLAS interface (dgemm/sgemm) of the library that TPL links, else
/// KokkosBatched's serial GEMM. Neither goes through Kokkos Kernels' dispatch, which opens a
/// profiling region (from Kokkos 4 a region fences every execution space while a tool is loaded:
/// inside a parallel region that waits forever). No Kokkos Kernels implementation details are
/// used, and nothing here changes process-wide settings.

#include <KokkosBatched_Gemm_Decl.hpp>
#include <KokkosBatched_Gemm_Serial_Impl.hpp>
#include <KokkosKernels_config.h>
#include <dpk/core/small_gemm.hpp>
#include <dpk/core/small_gemm_long.hpp>
#include <dpk/core/threads.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS) && defined(__GNUC__)
/// Defined when dpk calls the host BLAS directly (the library linked by Kokkos Kernels' BLAS TPL).
#define DPK_HAS_HOST_BLAS 1
#ifndef F77_BLAS_MANGLE
#define F77_BLAS_MANGLE(name, NAME) name##_
#endif
#define DPK_DETAIL_STRING2(x) #x
#define DPK_DETAIL_STRING(x) DPK_DETAIL_STRING2(x)
/// The Fortran BLAS symbol of `name` (Kokkos Kernels' mangling), as an assembler name.
#define DPK_DETAIL_BLAS_SYMBOL(name, NAME) \
  DPK_DETAIL_STRING(__USER_LABEL_PREFIX__) DPK_DETAIL_STRING(F77_BLAS_MANGLE(name, NAME))
// dpk's own names bound to the BLAS symbols (asm labels), so that no C++ declaration of
// dgemm_/sgemm_ (a user's BLAS header may declare them differently) can conflict with these.
extern "C" {
void dpk_detail_host_dgemm(char const* transa, char const* transb, int const* m, int const* n, int const* k,
                           double const* alpha, double const* a, int const* lda, double const* b, int const* ldb,
                           double const* beta, double* c, int const* ldc) __asm__(DPK_DETAIL_BLAS_SYMBOL(dgemm, DGEMM));
void dpk_detail_host_sgemm(char const* transa, char const* transb, int const* m, int const* n, int const* k,
                           float const* alpha, float const* a, int const* lda, float const* b, int const* ldb,
                           float const* beta, float* c, int const* ldc) __asm__(DPK_DETAIL_BLAS_SYMBOL(sgemm, SGEMM));
}
#endif

namespace dpk::blas::detail {

#if defined(DPK_HAS_HOST_BLAS)
/// Column-major C = beta C + alpha op(A) op(B) through the host BLAS (Fortran conventions).
inline void host_gemm_colmajor(char ta, char tb, int m, int n, int k, double alpha, double const* a, int lda,
                               double const* b, int ldb, double beta, double* c, int ldc) {
  dpk_detail_host_dgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}
/// Column-major C = beta C + alpha op(A) op(B) through the host BLAS (float).
inline void host_gemm_colmajor(char ta, char tb, int m, int n, int k, float alpha, float const* a, int lda,
                               float const* b, int ldb, float beta, float* c, int ldc) {
  dpk_detail_host_sgemm(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
}
#endif

/// Whether a BLAS transpose flag ("N", "T", "C", any case) asks for op(X) = X^T.
inline bool transposed(char const* flag) { return flag[0] != 'N' && flag[0] != 'n'; }

/// C = beta C + alpha op(A) op(B) with KokkosBatched's serial GEMM in the calling thread (any
/// scalar type and strides; the fallback without a host BLAS, also tested with one).
template <class AView, class BView, class CView>
void gemm_in_thread_batched(bool trans_a, bool trans_b, typename AView::const_value_type alpha, AView const& a,
                            BView const& b, typename CView::const_value_type beta, CView const& c) {
  using KokkosBatched::Trans;
  using Algo = KokkosBatched::Algo::Gemm::Unblocked;
  using Scalar = typename CView::non_const_value_type;
  Scalar const al = alpha, be = beta;
  if (!trans_a && !trans_b)
    KokkosBatched::SerialGemm<Trans::NoTranspose, Trans::NoTranspose, Algo>::invoke(al, a, b, be, c);
  else if (trans_a && !trans_b)
    KokkosBatched::SerialGemm<Trans::Transpose, Trans::NoTranspose, Algo>::invoke(al, a, b, be, c);
  else if (!trans_a && trans_b)
    KokkosBatched::SerialGemm<Trans::NoTranspose, Trans::Transpose, Algo>::invoke(al, a, b, be, c);
  else
    KokkosBatched::SerialGemm<Trans::Transpose, Trans::Transpose, Algo>::invoke(al, a, b, be, c);
}

/// Which products gemm_in_thread gives to dpk's small-matrix kernel (core/small_gemm.hpp, AVX-512
/// or AVX2) when it is compiled in; the others go to the host BLAS (KokkosBatched's serial GEMM
/// without one).
enum class SmallGemmUse {
  none,          ///< none
  small_shapes,  ///< those of the embedding nets' shapes (small_gemm_shape)
  all            ///< every product it can take
};

/// Whether a product with `columns` columns of C and sums of `sum` terms has an embedding net's
/// shape (widths up to 128; the weight gradients sum over a chunk of rows): there dpk's kernel
/// needs no packing, no pass that zeroes C, and no call overhead. The fitting nets' products
/// (240 columns or a sum over 240 or 1600 terms) are left to the BLAS, whose packed kernels run
/// them faster.
inline bool small_gemm_shape(std::size_t columns, std::size_t sum) { return columns <= 128 && sum <= 256; }

/// SmallGemmUse named by a value of DPK_SMALL_GEMM: "0" none, "small" small_shapes, any other
/// value all (as "1"); `fallback` when `value` is null (unset).
inline SmallGemmUse parse_small_gemm_use(char const* value, SmallGemmUse fallback) {
  if (value == nullptr) return fallback;
  if (std::strcmp(value, "0") == 0) return SmallGemmUse::none;
  if (std::strcmp(value, "small") == 0) return SmallGemmUse::small_shapes;
  return SmallGemmUse::all;
}

/// Which products dpk's kernel takes in this process: DPK_SMALL_GEMM (parse_small_gemm_use), or
/// by default:
/// - AVX-512 build with a host BLAS: all when the BLAS would not use AVX-512 for them (OpenBLAS
///   running a kernel set without it, e.g. pinned by OPENBLAS_CORETYPE=Haswell), none otherwise.
///   Water training step, one Zen 5 core (docs/performance.md, "Eleventh session"): against
///   OpenBLAS' AVX-512 kernels all products on dpk's kernel lost by 3-6 % (float32 27.5-27.7 vs
///   25.8-26.5 ms, float64 50.5-50.8 vs 49.0-49.4), against its Haswell kernels they won (float32
///   28.0-28.6 vs 38.0-39.3 ms, float64 51.6 vs 74.7-76.8).
/// - AVX2 build with a host BLAS: small_shapes. On Zen 3 with OpenBLAS' Zen kernels, all products
///   on dpk's kernel only matched the BLAS over the step (it loses on the fitting nets' shapes,
///   wins on the embedding nets'); the embedding shapes alone took the water training step from
///   91.3 to 82.8 ms (float64) and from 46.5 to 44.4 ms (float32) at one thread, from 49.1 to
///   46.6 and from 27.6 to 25.6 ms at two (medians of 5 alternating rounds; docs/performance.md,
///   "Twenty-first session").
/// - no host BLAS: all (KokkosBatched's serial GEMM would run instead).
/// Read once per process.
inline SmallGemmUse small_gemm_use() {
  static SmallGemmUse const use = [] {
#if defined(DPK_HAS_HOST_BLAS) && defined(DPK_SMALL_GEMM_AVX512)
    std::string const name = blas_kernel_name();
    SmallGemmUse const fallback =
        !name.empty() && !blas_kernels_use_avx512(name) ? SmallGemmUse::all : SmallGemmUse::none;
#elif defined(DPK_HAS_HOST_BLAS)
    SmallGemmUse const fallback = SmallGemmUse::small_shapes;
#else
    SmallGemmUse const fallback = SmallGemmUse::all;
#endif
    return parse_small_gemm_use(std::getenv("DPK_SMALL_GEMM"), fallback);
  }();
  return use;
}

/// Whether dpk's small-matrix kernel takes any product (small_gemm_use is not none).
inline bool small_gemm_enabled() { return small_gemm_use() != SmallGemmUse::none; }

/// Whether small_gemm_use gives dpk's kernel a product with `columns` columns of C and sums of
/// `sum` terms (one it can take: small_gemm_views checks the rest).
inline bool small_gemm_takes(std::size_t columns, std::size_t sum) {
  SmallGemmUse const use = small_gemm_use();
  return use == SmallGemmUse::all || (use == SmallGemmUse::small_shapes && small_gemm_shape(columns, sum));
}

#if defined(DPK_HAS_SMALL_GEMM)
/// The operands of C = [C +] alpha op(A) op(B) for dpk's small-matrix kernel from views (C and B
/// with elements of unit stride along their rows; `accumulate` for beta 1).
template <class AView, class BView, class CView>
SmallGemmArgs<typename CView::non_const_value_type> small_gemm_args(bool trans_a, bool trans_b,
                                                                    typename CView::const_value_type alpha,
                                                                    AView const& a, BView const& b, bool accumulate,
                                                                    CView const& c) {
  return {int(c.extent(0)),
          int(c.extent(1)),
          int(trans_a ? a.extent(0) : a.extent(1)),
          a.data(),
          std::ptrdiff_t(trans_a ? a.stride(1) : a.stride(0)),
          std::ptrdiff_t(trans_a ? a.stride(0) : a.stride(1)),
          b.data(),
          std::ptrdiff_t(b.stride(0)),
          c.data(),
          std::ptrdiff_t(c.stride(0)),
          accumulate,
          trans_b,
          alpha};
}
#endif

/// C = beta C + alpha op(A) op(B) with dpk's small-matrix kernel (core/small_gemm.hpp) when it is
/// compiled in, small_gemm_use gives it this product (small_gemm_takes) and the product is one it
/// takes: beta 0 or 1, unit-stride rows of B and C, float or double. False (nothing done)
/// otherwise.
template <class AView, class BView, class CView>
bool small_gemm_views(bool trans_a, bool trans_b, typename AView::const_value_type alpha, AView const& a,
                      BView const& b, typename CView::const_value_type beta, CView const& c) {
#if defined(DPK_HAS_SMALL_GEMM)
  using Scalar = typename CView::non_const_value_type;
  if constexpr (std::is_same_v<Scalar, double> || std::is_same_v<Scalar, float>) {
    if ((beta != Scalar(0) && beta != Scalar(1)) || b.stride(1) != 1 || c.stride(1) != 1 ||
        !small_gemm_takes(c.extent(1), trans_a ? a.extent(0) : a.extent(1)))
      return false;
    return small_gemm(small_gemm_args(trans_a, trans_b, Scalar(alpha), a, b, beta != Scalar(0), c));
  }
#endif
  (void)trans_a, (void)trans_b, (void)alpha, (void)a, (void)b, (void)beta, (void)c;
  return false;
}

/// C = beta C + alpha A B with dpk's long-sum kernel (core/small_gemm_long.hpp) when it is
/// compiled in and enabled (long_sum_kernel_enabled) and takes the product: no transposes, beta
/// 0 or 1, float or double, rows of A, B and C of unit stride, the shape of long_sum_gemm_shape
/// (B within long_sum_b_limit() for this CPU) and B's rows on cache lines. False (nothing done) otherwise.
template <class AView, class BView, class CView>
bool long_sum_gemm_views(bool trans_a, bool trans_b, typename AView::const_value_type alpha, AView const& a,
                         BView const& b, typename CView::const_value_type beta, CView const& c) {
#if defined(DPK_HAS_SMALL_GEMM)
  using Scalar = typename CView::non_const_value_type;
  if constexpr ((std::is_same_v<Scalar, double> || std::is_same_v<Scalar, float>) &&
                std::is_same_v<typename BView::non_const_value_type, Scalar>) {
    if (trans_a || trans_b || (beta != Scalar(0) && beta != Scalar(1)) || a.stride(1) != 1 || b.stride(1) != 1 ||
        c.stride(1) != 1 || !long_sum_kernel_enabled() || !long_sum_gemm_shape(c.extent(0), c.extent(1), a.extent(1), sizeof(Scalar), long_sum_b_limit()) ||
        !rows_on_cache_lines(b.data(), std::ptrdiff_t(b.stride(0))))
      return false;
    long_sum_gemm(small_gemm_args(false, false, Scalar(alpha), a, b, beta != Scalar(0), c));
    return true;
  }
#endif
  (void)trans_a, (void)trans_b, (void)alpha, (void)a, (void)b, (void)beta, (void)c;
  return false;
}

/// C = beta C + alpha op(A) op(B) with the first of dpk's own host kernels that takes the product:
/// the long-sum kernel, then the small-matrix kernel. False (nothing done) when neither does.
template <class AView, class BView, class CView>
bool own_kernel_views(bool trans_a, bool trans_b, typename AView::const_value_type alpha, AView const& a,
                      BView const& b, typename CView::const_value_type beta, CView const& c) {
  return long_sum_gemm_views(trans_a, trans_b, alpha, a, b, beta, c) ||
         small_gemm_views(trans_a, trans_b, alpha, a, b, beta, c);
}

/// C = beta C + alpha op(A) op(B) from inside a host parallel region (one thread's block), with
/// no fence and no Kokkos Tools region: dpk's long-sum or small-matrix kernel when one takes the
/// product (own_kernel_views); otherwise rows of unit stride in float/double go to the host BLAS,
/// everything else to KokkosBatched's serial GEMM.
template <class AView, class BView, class CView>
void gemm_in_thread(const char* trans_a, const char* trans_b, typename AView::const_value_type alpha, AView const& a,
                    BView const& b, typename CView::const_value_type beta, CView const& c) {
  bool const ta = transposed(trans_a), tb = transposed(trans_b);
  if (own_kernel_views(ta, tb, alpha, a, b, beta, c)) return;
#if defined(DPK_HAS_HOST_BLAS)
  using Scalar = typename CView::non_const_value_type;
  if constexpr (std::is_same_v<Scalar, double> || std::is_same_v<Scalar, float>) {
    if (a.stride(1) == 1 && b.stride(1) == 1 && c.stride(1) == 1) {
      int const m = int(c.extent(0)), n = int(c.extent(1)), k = int(ta ? a.extent(0) : a.extent(1));
      auto ld = [](auto const& v) { return int(std::max<std::size_t>({std::size_t(1), std::size_t(v.stride(0)), v.extent(1)})); };
      // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T (same flags, operands swapped).
      host_gemm_colmajor(tb ? 'T' : 'N', ta ? 'T' : 'N', n, m, k, Scalar(alpha), b.data(), ld(b), a.data(), ld(a),
                         Scalar(beta), c.data(), ld(c));
      return;
    }
  }
#endif
  gemm_in_thread_batched(ta, tb, alpha, a, b, beta, c);
}

}  // namespace dpk::blas::detail
