#pragma once
/// \file small_gemm_tn_sum.hpp
/// \brief dpk's kernel for a weight gradient summed over two operand pairs in one pass,
/// C = [C +] alpha (A0^T B0 + A1^T B1): the value and tangent parts of a layer's weight
/// gradient (blas::gemm_tn_sum inside a host thread).
///
/// Each tile of C (R rows x NV vectors) is summed over every row of both pairs in registers and
/// written once; A's elements are broadcast from where they lie, B's rows loaded in place: no
/// packing, no second pass over C. Two BLAS calls (beta 0, then beta 1) pack both operands of
/// each and read and write C twice; for the fitting nets (C of 1600 x 240 or 240 x 240, sums over
/// 64-128 rows per pair) that is the gap this kernel closes (docs/performance.md,
/// "Thirty-first session"). Compiled where core/small_gemm.hpp's vectors are (AVX-512 or AVX2).

#include <dpk/core/env_switch.hpp>
#include <dpk/core/small_gemm.hpp>

#include <cstddef>

namespace dpk::blas::detail {

/// One pair (A, B) of a sum of products A^T B: A (rows x m) by element strides, B (rows x n)
/// with rows of unit stride.
template <class Scalar>
struct TnSumPair {
  int rows = 0;
  Scalar const* a = nullptr;
  std::ptrdiff_t a_row = 0, a_col = 0;  ///< A(l, i) = a[l * a_row + i * a_col]
  Scalar const* b = nullptr;
  std::ptrdiff_t ldb = 0;  ///< B(l, j) = b[l * ldb + j]
};

/// Operands of C = [C +] alpha (A0^T B0 + A1^T B1), C (m x n) row-major.
template <class Scalar>
struct TnSumArgs {
  int m = 0, n = 0;
  TnSumPair<Scalar> pairs[2];
  Scalar* c = nullptr;
  std::ptrdiff_t ldc = 0;
  bool accumulate = false;  ///< C += ... (beta 1), else C = ... (beta 0)
  Scalar alpha = 1;
};

/// Whether blas::gemm_tn_sum gives a host thread's product to tn_sum_kernel (where the shape
/// suits it, tn_sum_kernel_shape): DPK_TN_SUM_KERNEL 0 no, 1 yes, unset or empty `fallback`; any
/// other value is a dpk::Error naming the variable (core/env_switch.hpp).
inline bool tn_sum_kernel_use(bool fallback) {
  return env_switch("DPK_TN_SUM_KERNEL", fallback, "0 (the BLAS) or 1 (dpk's two-pair kernel)");
}

/// Whether the two-pair kernel takes a C of `rows` x `columns`: one larger than the embedding
/// nets' weight gradients (up to 128 x 128: there the BLAS' small-matrix kernels, with C in cache,
/// ran 1.1-1.2x faster; docs/performance.md, "Thirty-first session") and at least 16 columns
/// wide (a one-column C fills one lane of a vector).
inline bool tn_sum_kernel_shape(std::size_t rows, std::size_t columns) {
  return columns >= 16 && rows * columns > std::size_t(128) * 128;
}

#if defined(DPK_HAS_SMALL_GEMM)

/// tn_sum_kernel_use with this build's default (fitting_kernels_by_default). Read once per process.
inline bool tn_sum_kernel_enabled() {
  static bool const use = tn_sum_kernel_use(fitting_kernels_by_default);
  return use;
}

/// Rows [i0, i0 + R) and vectors [j0, j0 + NV lanes) of C (the last vector `tail`), summed over
/// all rows of both pairs in R x NV accumulators. UnitCol: the A_p have a_col 1 (a compile-time
/// stride keeps the R broadcast addresses fixed offsets of one pointer).
template <class Scalar, int NV, int R, bool UnitCol>
inline void tn_sum_tile(TnSumArgs<Scalar> const& g, int i0, int j0, typename Simd<Scalar>::Tail const& tail) {
  using S = Simd<Scalar>;
  using Vec = typename S::Vec;
  Vec acc[R][NV];
  DPK_SMALL_GEMM_UNROLL
  for (int r = 0; r < R; ++r) {
    DPK_SMALL_GEMM_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = S::zero();
  }
  for (auto const& p : g.pairs) {
    Scalar const* a = p.a + i0 * p.a_col;
    Scalar const* b = p.b + j0;
    std::ptrdiff_t const a_row = p.a_row, a_col = UnitCol ? 1 : p.a_col, ldb = p.ldb;
    for (int l = 0; l < p.rows; ++l, a += a_row, b += ldb) small_gemm_tile_step<Scalar, NV, R>(acc, b, tail, a, a_col);
  }
  small_gemm_tile_store<Scalar, NV, R>(acc, g.alpha, g.accumulate, g.c + i0 * g.ldc + j0, g.ldc, tail);
}

/// Rows [i0, i0 + R) of C, every column: tiles of two vectors, the last one or two vectors
/// partial.
template <class Scalar, int R, bool UnitCol>
inline void tn_sum_rows(TnSumArgs<Scalar> const& g, int i0) {
  constexpr int lanes = Simd<Scalar>::lanes;
  auto const full = Simd<Scalar>::tail(lanes);
  int j = 0;
  for (; j + 2 * lanes <= g.n; j += 2 * lanes) tn_sum_tile<Scalar, 2, R, UnitCol>(g, i0, j, full);
  int const rest = g.n - j;
  if (rest > lanes)
    tn_sum_tile<Scalar, 2, R, UnitCol>(g, i0, j, Simd<Scalar>::tail(rest - lanes));
  else if (rest > 0)
    tn_sum_tile<Scalar, 1, R, UnitCol>(g, i0, j, Simd<Scalar>::tail(rest));
}

/// Every row of C: blocks of R rows, the rest in blocks of 4 and single rows.
template <class Scalar, bool UnitCol>
inline void tn_sum_all_rows(TnSumArgs<Scalar> const& g) {
  constexpr int R = two_vector_tile_rows<Scalar>();
  int i = 0;
  for (; i + R <= g.m; i += R) tn_sum_rows<Scalar, R, UnitCol>(g, i);
  for (; i + 4 <= g.m; i += 4) tn_sum_rows<Scalar, 4, UnitCol>(g, i);
  for (; i < g.m; ++i) tn_sum_rows<Scalar, 1, UnitCol>(g, i);
}

/// C = [C +] alpha (A0^T B0 + A1^T B1) with dpk's kernel: row blocks of C (columns of the A_p)
/// in turn, each through every column tile; false (nothing done) when C is empty. A pair with
/// no rows adds nothing; with no rows at all, C = alpha * 0 [+ C].
template <class Scalar>
bool tn_sum_kernel(TnSumArgs<Scalar> const& g) {
  if (g.m <= 0 || g.n <= 0) return false;
  bool const unit_col = (g.pairs[0].rows == 0 || g.pairs[0].a_col == 1) && (g.pairs[1].rows == 0 || g.pairs[1].a_col == 1);
  if (unit_col)
    tn_sum_all_rows<Scalar, true>(g);
  else
    tn_sum_all_rows<Scalar, false>(g);
  return true;
}

#else

inline bool tn_sum_kernel_enabled() { return false; }

#endif  // DPK_HAS_SMALL_GEMM

}  // namespace dpk::blas::detail
