#pragma once
/// \file small_gemm_long.hpp
/// \brief dpk's kernel for C = [C +] alpha A B with long sums and B read where it lies: the
/// fitting nets' first-layer forward and tangent products (X W with X: rows x 1600, W: 1600 x 240).
///
/// Each tile of C (R rows x two vectors) is summed over all k terms in registers and written
/// once: A's elements broadcast from its rows, B's rows loaded in place. The host BLAS packs all
/// of W (1.5 MB in float32) again for every call, four calls per type and step; read in place,
/// W must start on a cache line with rows a whole number of lines long (the model's buffers
/// place each tensor so, model/parameters.hpp), else the split loads cost the gain
/// (docs/performance.md, "Thirty-first session" and "Thirty-second session"). Compiled where
/// core/small_gemm.hpp's vectors are (AVX-512 or AVX2).

#include <dpk/core/env_switch.hpp>
#include <dpk/core/small_gemm.hpp>

#include <cstddef>
#include <cstdint>

#if defined(DPK_HAS_SMALL_GEMM)
#include <unistd.h>  // sysconf(_SC_LEVEL2_CACHE_SIZE)
#endif

namespace dpk::blas::detail {

/// Largest B (sum x columns scalars, in bytes) the long-sum kernel reads in place: every tile
/// of C streams all of B, which must come from cache (a fitting net's W: 1.5 MB in float32,
/// 3 MB in float64). A large square product from memory ran at a tenth of the BLAS' rate (2000^3
/// in float64: 5-16 against 37-39 GFLOP/s, docs/performance.md "Thirty-sixth session").
inline constexpr std::size_t long_sum_max_b_bytes = std::size_t(4) << 20;

/// Largest B the long-sum kernel reads in place on a CPU: long_sum_max_b_bytes, and on Intel CPUs
/// no more than the core's L2 (`l2_bytes`, 0 when unknown). Beyond its L2 an Intel core streams B
/// from its L3 for every row block at a rate the tiles cannot use: on an Intel Xeon VM with 2 MB
/// of L2, a float64 first fitting layer (W: 3 MB) ran at 21-40 GFLOP/s against OpenBLAS' 49-68
/// and the training step 3-7 % slower, while float32 (W: 1.5 MB) stayed faster than OpenBLAS; on
/// the Zen 4 VMs (1 MB of L2) both precisions gained (docs/performance.md, "Thirty-second
/// session" and "Thirty-eighth session").
inline std::size_t long_sum_b_limit_for(bool intel, std::size_t l2_bytes) {
  return intel && l2_bytes > 0 && l2_bytes < long_sum_max_b_bytes ? l2_bytes : long_sum_max_b_bytes;
}

/// Whether the long-sum kernel takes C = A B of `rows` x `columns` with sums of `sum` terms of
/// `scalar_bytes` each: sums of at least 1024 terms (the fitting nets' first layers; on their
/// 240-term layers it ran no faster than OpenBLAS), at least 16 columns, and B within `b_limit`
/// bytes (long_sum_b_limit() for this CPU where blas::gemm asks).
inline bool long_sum_gemm_shape(std::size_t rows, std::size_t columns, std::size_t sum, std::size_t scalar_bytes,
                                std::size_t b_limit = long_sum_max_b_bytes) {
  return rows > 0 && columns >= 16 && sum >= 1024 && sum * columns * scalar_bytes <= b_limit;
}

/// Whether blas::gemm gives such products to the long-sum kernel: DPK_LONG_SUM_KERNEL 0 no, 1
/// yes, unset or empty `fallback`; any other value is a dpk::Error naming the variable.
inline bool long_sum_kernel_use(bool fallback) {
  return env_switch("DPK_LONG_SUM_KERNEL", fallback, "0 (the BLAS) or 1 (dpk's long-sum kernel)");
}

#if defined(DPK_HAS_SMALL_GEMM)

/// long_sum_kernel_use with this build's default (fitting_kernels_by_default). Read once per process.
inline bool long_sum_kernel_enabled() {
  static bool const use = long_sum_kernel_use(fitting_kernels_by_default);
  return use;
}

/// long_sum_b_limit_for this CPU (its vendor from CPUID, its L2 from sysconf), read once per process.
inline std::size_t long_sum_b_limit() {
  static std::size_t const limit = [] {
    __builtin_cpu_init();
    long const l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return long_sum_b_limit_for(__builtin_cpu_is("intel") != 0, l2 > 0 ? std::size_t(l2) : 0);
  }();
  return limit;
}

/// Rows [i0, i0 + R) of C, tile by tile of two vectors (the last tile one vector or partial),
/// each summed over all k terms (small_gemm_rows: sums in order l = 0 .. k - 1).
template <class Scalar, int R>
inline void long_sum_row_block(SmallGemmArgs<Scalar> const& g, int i0) {
  constexpr int lanes = Simd<Scalar>::lanes, tile = 2 * lanes;
  for (int j0 = 0; j0 < g.n; j0 += tile) {
    SmallGemmArgs<Scalar> p = g;
    p.b = g.b + j0;
    p.c = g.c + j0;
    p.n = g.n - j0 < tile ? g.n - j0 : tile;
    if (p.n > lanes)
      small_gemm_rows<Scalar, 2, R>(p, i0);
    else
      small_gemm_rows<Scalar, 1, R>(p, i0);
  }
}

/// C = [C +] alpha A B (g.trans_b false) with B's rows read in place: row blocks of
/// two_vector_tile_rows, then of 4, then single rows.
template <class Scalar>
inline void long_sum_gemm(SmallGemmArgs<Scalar> const& g) {
  constexpr int R = two_vector_tile_rows<Scalar>();
  int i = 0;
  for (; i + R <= g.m; i += R) long_sum_row_block<Scalar, R>(g, i);
  if constexpr (R > 4)
    for (; i + 4 <= g.m; i += 4) long_sum_row_block<Scalar, 4>(g, i);
  for (; i < g.m; ++i) long_sum_row_block<Scalar, 1>(g, i);
}

#else

inline bool long_sum_kernel_enabled() { return false; }
inline std::size_t long_sum_b_limit() { return long_sum_max_b_bytes; }

#endif  // DPK_HAS_SMALL_GEMM

}  // namespace dpk::blas::detail
