#pragma once
/// \file gemm.hpp
/// \brief Dense matrix products through Kokkos Kernels (host BLAS / cuBLAS TPLs), spread over
/// the host threads of the execution space.
///
/// The networks' GEMMs are skinny (tens to a few hundred columns, thousands of rows) and are
/// called from the host between Kokkos kernels. With one BLAS thread inside each Kokkos thread
/// (the setting that avoids oversubscription, docs/tuning.md) a plain call would use one core;
/// on host spaces these functions split the rows over the Kokkos threads instead, each thread
/// making one single-threaded BLAS call on its block. Device spaces make one call (cuBLAS).
/// The per-thread calls bypass Kokkos Kernels when a host BLAS is there (no profiling region,
/// no fence inside the parallel region; see core/host_gemm.hpp).

#include <dpk/core/compat.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/host_gemm.hpp>
#include <dpk/core/small_gemm_tn_sum.hpp>
#include <dpk/core/types.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace dpk::blas {

namespace detail {

/// Number of blocks for a product split `extent` ways (rows or columns) with `work`
/// multiply-adds on `space`: none below ~256k multiply-adds per block (thread start-up would
/// dominate) and, with several threads, up to `per_thread` blocks per thread (handed out one at a
/// time by for_each_block, so that a thread on a core shared with another job takes fewer).
template <class ExecutionSpace>
int host_blocks(ExecutionSpace const& space, std::size_t extent, double work, int per_thread = 1) {
  if constexpr (!host_schedule_v<ExecutionSpace>) {
    return 1;
  } else {
    int const threads = space.concurrency();
    if (threads <= 1) return 1;
    double const per_block_min = 262144.0;
    int const by_work = static_cast<int>(std::max(1.0, work / per_block_min));
    return static_cast<int>(std::min<std::size_t>({std::size_t(threads) * per_thread, std::size_t(by_work), extent}));
  }
}

/// Runs body(block) for blocks 0 .. blocks - 1 on the host threads of `space`: each thread takes
/// the next block not yet taken until none is left. Which thread runs a block does not matter to
/// the result as long as blocks write disjoint data (or their own partial sums).
template <class ExecutionSpace, class Body>
void for_each_block(ExecutionSpace const& space, char const* label, int blocks, Body const& body) {
  int const workers = std::min(blocks, std::max(1, int(space.concurrency())));
  std::atomic<int> next{0};
  space.fence();
  Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecutionSpace>(space, 0, workers).set_chunk_size(1),
                       [&](int) {
                         for (int k = next.fetch_add(1, std::memory_order_relaxed); k < blocks;
                              k = next.fetch_add(1, std::memory_order_relaxed))
                           body(k);
                       });
  space.fence();
}

/// Rows [first, last) of block `k` of `blocks` over `rows` rows.
inline std::pair<std::size_t, std::size_t> block_rows(std::size_t rows, int blocks, int k) {
  return {rows * k / blocks, rows * (k + 1) / blocks};
}

/// Columns [first, last) of block `k` of `blocks` over `columns` columns, every block but the
/// last starting and ending on a multiple of 16 columns (64 bytes of float, the start of a
/// cache line in rows that start on one): vector loads of a block's rows then never straddle
/// two lines. Blocks may be empty when `columns` < 16 `blocks`.
inline std::pair<std::size_t, std::size_t> block_columns(std::size_t columns, int blocks, int k) {
  std::size_t const groups = (columns + 15) / 16;
  auto edge = [&](int b) { return std::min(columns, 16 * (groups * b / blocks)); };
  return {edge(k), edge(k + 1)};
}

/// C = beta C + alpha op(A) op(B) on `space` in one call: on host spaces dpk's long-sum or
/// small-matrix kernel when one takes the product (after a fence), else Kokkos Kernels (host BLAS / cuBLAS).
template <class ExecutionSpace, class AView, class BView, class CView>
void gemm_whole(ExecutionSpace const& space, const char* trans_a, const char* trans_b,
                typename AView::const_value_type alpha, AView const& a, BView const& b,
                typename CView::const_value_type beta, CView const& c) {
  if constexpr (host_schedule_v<ExecutionSpace>) {
    space.fence();
    bool const ta = transposed(trans_a), tb = transposed(trans_b);
    if (own_kernel_views(ta, tb, alpha, a, b, beta, c)) return;
  }
  gemm_kk(space, trans_a, trans_b, alpha, a, b, beta, c);
}

}  // namespace detail

/// C = beta C + alpha op(A) op(B) inside the calling host thread (one single-threaded call).
template <class AView, class BView, class CView>
void gemm(InThread const&, const char* trans_a, const char* trans_b, typename AView::const_value_type alpha,
          AView const& a, BView const& b, typename CView::const_value_type beta, CView const& c) {
  std::size_t const k = (trans_a[0] == 'N' || trans_a[0] == 'n') ? a.extent(1) : a.extent(0);
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  if (k == 0) {  // Kokkos Kernels returns without scaling C
    for_each_element(InThread{}, "", int(c.extent(0)), int(c.extent(1)), [&](int const i, int const j) {
      c(i, j) = beta == 0 ? 0 : beta * c(i, j);
    });
    return;
  }
  detail::gemm_in_thread(trans_a, trans_b, alpha, a, b, beta, c);
}

/// C = beta C + alpha op(A) op(B) on `space`. Views are rank-2 LayoutRight (contiguous rows),
/// so that the vendor BLAS is used. On host spaces with several threads, products with
/// op(A) = A are split into blocks of rows of A and C, or, when C has fewer rows than columns
/// (the fitting nets: each block then packs a slice of B instead of all of it), of columns of
/// op(B) and C. Blocks are handed out one at a time (for_each_block): two per thread for row
/// blocks, one per thread for column blocks (each of those packs all of A, the fitting nets'
/// activations; with two per thread the fitting GEMMs of a float64 water step took 10.6 instead
/// of 9.0-9.4 ms at 2 threads, and a busy core gained nothing from the finer split).
template <class ExecutionSpace, class AView, class BView, class CView>
void gemm(ExecutionSpace const& space, const char* trans_a, const char* trans_b,
          typename AView::const_value_type alpha, AView const& a, BView const& b,
          typename CView::const_value_type beta, CView const& c) {
  std::size_t const m = c.extent(0), n = c.extent(1);
  std::size_t const k = (trans_a[0] == 'N' || trans_a[0] == 'n') ? a.extent(1) : a.extent(0);
  bool const by_columns = m < n;
  std::size_t const split = by_columns ? n / 16 : m;  // column blocks of at least 16
  int const blocks = (trans_a[0] == 'N' || trans_a[0] == 'n')
                         ? detail::host_blocks(space, split, double(m) * n * k, /*per_thread=*/by_columns ? 1 : 2)
                         : 1;
  if (blocks <= 1) {
    detail::gemm_whole(space, trans_a, trans_b, alpha, a, b, beta, c);
    return;
  }
  if constexpr (host_schedule_v<ExecutionSpace>) {
    bool const tb = detail::transposed(trans_b);
    detail::for_each_block(space, "dpk::blas::gemm_blocks", blocks, [&](int const block) {
      if (by_columns) {
        auto const cols = detail::block_columns(n, blocks, block);
        if (cols.first == cols.second) return;
        auto c_cols = Kokkos::subview(c, Kokkos::ALL(), cols);
        if (tb)
          detail::gemm_in_thread(trans_a, trans_b, alpha, a, Kokkos::subview(b, cols, Kokkos::ALL()), beta, c_cols);
        else
          detail::gemm_in_thread(trans_a, trans_b, alpha, a, Kokkos::subview(b, Kokkos::ALL(), cols), beta, c_cols);
        return;
      }
      auto const rows = detail::block_rows(m, blocks, block);
      detail::gemm_in_thread(trans_a, trans_b, alpha, Kokkos::subview(a, rows, Kokkos::ALL()), b, beta,
                             Kokkos::subview(c, rows, Kokkos::ALL()));
    });
  }
}

namespace detail {
#if defined(DPK_HAS_SMALL_GEMM)
/// Columns [j0, j0 + NV vectors) of column_sums_in_thread's C row, the last vector `last` lanes
/// wide: NV vector sums stay in registers over all rows of both pairs (one load and FMA per
/// vector and row, no trip of C through memory per row), each element summed in row order.
template <int NV, class Scalar, class AView, class BView>
void column_sums_block(Scalar alpha, AView const& a0, BView const& b0, AView const& a1, BView const& b1, Scalar beta,
                       Scalar* c, int j0, int last) {
  using S = Simd<Scalar>;
  using Vec = typename S::Vec;
  auto const tail = S::tail(last);
  Vec acc[NV];
  Vec const scale = S::broadcast(&beta);
  DPK_SMALL_GEMM_UNROLL
  for (int v = 0; v < NV; ++v) {
    Scalar* const cv = c + j0 + v * S::lanes;
    Vec const old = v + 1 < NV ? S::load(cv) : S::load(cv, tail);
    acc[v] = beta == Scalar(0) ? S::zero() : beta == Scalar(1) ? old : S::mul(scale, old);
  }
  auto add = [&](AView const& a, BView const& b) {
    for (int r = 0; r < int(a.extent(0)); ++r) {
      Scalar const weight = alpha * a(r, 0);
      Vec const w = S::broadcast(&weight);
      Scalar const* const row = &b(r, j0);
      DPK_SMALL_GEMM_UNROLL
      for (int v = 0; v + 1 < NV; ++v) acc[v] = S::fma(w, S::load(row + v * S::lanes), acc[v]);
      acc[NV - 1] = S::fma(w, S::load(row + (NV - 1) * S::lanes, tail), acc[NV - 1]);
    }
  };
  add(a0, b0);
  add(a1, b1);
  DPK_SMALL_GEMM_UNROLL
  for (int v = 0; v + 1 < NV; ++v) S::store(c + j0 + v * S::lanes, acc[v]);
  S::store(c + j0 + (NV - 1) * S::lanes, acc[NV - 1], tail);
}
#endif

/// C (1 x n) = beta C + alpha (a0^T B0 + a1^T B1) for one-column A_p, in the calling host thread:
/// each row of B_p, times its weight, added into C's row (a weighted column sum: bias gradients,
/// and the weight gradient of a one-input layer). A BLAS call spent about as long on its overhead
/// as on these few thousand terms (docs/performance.md, "Twenty-seventh session"). With dpk's
/// vectors (DPK_HAS_SMALL_GEMM) up to eight vectors of C are summed in registers at a time
/// (column_sums_block: 1.9x / 3.2x less time per float64 / float32 water step than the loop
/// below, docs/performance.md "Twenty-eighth session").
template <class AView, class BView, class CView>
void column_sums_in_thread(typename AView::const_value_type alpha, AView const& a0, BView const& b0, AView const& a1,
                           BView const& b1, typename CView::const_value_type beta, CView const& c) {
  using Scalar = typename CView::non_const_value_type;
  int const n = int(c.extent(1));
#if defined(DPK_HAS_SMALL_GEMM)
  if constexpr (std::is_same_v<Scalar, typename BView::non_const_value_type> &&
                std::is_same_v<typename BView::array_layout, Kokkos::LayoutRight> &&
                std::is_same_v<typename CView::array_layout, Kokkos::LayoutRight>) {
    constexpr int lanes = Simd<Scalar>::lanes, group = 8 * lanes;
    Scalar* const row = &c(0, 0);
    for (int j0 = 0; j0 < n; j0 += group) {
      int const width = n - j0 < group ? n - j0 : group;
      int const nv = (width + lanes - 1) / lanes, last = width - (nv - 1) * lanes;
      auto run = [&](auto vectors) {
        column_sums_block<decltype(vectors)::value>(Scalar(alpha), a0, b0, a1, b1, Scalar(beta), row, j0, last);
      };
      switch (nv) {
        case 1: run(std::integral_constant<int, 1>{}); break;
        case 2: run(std::integral_constant<int, 2>{}); break;
        case 3: run(std::integral_constant<int, 3>{}); break;
        case 4: run(std::integral_constant<int, 4>{}); break;
        case 5: run(std::integral_constant<int, 5>{}); break;
        case 6: run(std::integral_constant<int, 6>{}); break;
        case 7: run(std::integral_constant<int, 7>{}); break;
        default: run(std::integral_constant<int, 8>{}); break;
      }
    }
    return;
  }
#endif
  if (beta == Scalar(0)) {
    for (int j = 0; j < n; ++j) c(0, j) = Scalar(0);
  } else if (beta != Scalar(1)) {
    for (int j = 0; j < n; ++j) c(0, j) *= beta;
  }
  auto add = [&](AView const& a, BView const& b) {
    for (int r = 0; r < int(a.extent(0)); ++r) {
      Scalar const w = alpha * a(r, 0);
      DPK_SIMD_LOOP
      for (int j = 0; j < n; ++j) c(0, j) += w * b(r, j);
    }
  };
  add(a0, b0);
  add(a1, b1);
}

/// C = beta C + alpha (A0^T B0 + A1^T B1) with dpk's two-pair kernel (core/small_gemm_tn_sum.hpp)
/// when it is compiled in and enabled (tn_sum_kernel_enabled) and takes the operands: float or
/// double, beta 0 or 1, rows of unit stride in B_p and C. False (nothing done) otherwise.
template <class AView, class BView, class CView>
bool tn_sum_kernel_views(typename AView::const_value_type alpha, AView const& a0, BView const& b0, AView const& a1,
                         BView const& b1, typename CView::const_value_type beta, CView const& c) {
#if defined(DPK_HAS_SMALL_GEMM)
  using Scalar = typename CView::non_const_value_type;
  if constexpr (std::is_same_v<Scalar, double> || std::is_same_v<Scalar, float>) {
    if (!tn_sum_kernel_enabled() || !tn_sum_kernel_shape(c.extent(0), c.extent(1)) ||
        (beta != Scalar(0) && beta != Scalar(1)) || c.stride(1) != 1 ||
        (b0.extent(0) > 0 && b0.stride(1) != 1) || (b1.extent(0) > 0 && b1.stride(1) != 1))
      return false;
    TnSumArgs<Scalar> g;
    g.m = int(c.extent(0));
    g.n = int(c.extent(1));
    auto pair = [](AView const& a, BView const& b) {
      TnSumPair<Scalar> p;
      if (a.extent(0) == 0) return p;
      p.rows = int(a.extent(0));
      p.a = a.data();
      p.a_row = std::ptrdiff_t(a.stride(0));
      p.a_col = std::ptrdiff_t(a.stride(1));
      p.b = b.data();
      p.ldb = std::ptrdiff_t(b.stride(0));
      return p;
    };
    g.pairs[0] = pair(a0, b0);
    g.pairs[1] = pair(a1, b1);
    g.c = c.data();
    g.ldc = std::ptrdiff_t(c.stride(0));
    g.accumulate = beta != Scalar(0);
    g.alpha = Scalar(alpha);
    return tn_sum_kernel(g);
  }
#endif
  (void)alpha, (void)a0, (void)b0, (void)a1, (void)b1, (void)beta, (void)c;
  return false;
}
}  // namespace detail

/// gemm_tn_sum inside the calling host thread: C = beta C + alpha (A0^T B0 + A1^T B1). One-column
/// A_p (C of one row) are summed in place (detail::column_sums_in_thread), others by dpk's
/// two-pair kernel where it takes them (detail::tn_sum_kernel_views), else through gemm.
template <class AView, class BView, class CView>
void gemm_tn_sum(InThread const& in_thread, typename AView::const_value_type alpha, AView const& a0, BView const& b0,
                 AView const& a1, BView const& b1, typename CView::const_value_type beta, CView const& c,
                 View1<typename CView::non_const_value_type, typename CView::memory_space> const&) {
  if (c.extent(0) == 1 && a0.extent(1) == 1 && (a1.extent(0) == 0 || a1.extent(1) == 1))
    return detail::column_sums_in_thread(alpha, a0, b0, a1, b1, beta, c);
  if (detail::tn_sum_kernel_views(alpha, a0, b0, a1, b1, beta, c)) return;
  gemm(in_thread, "T", "N", alpha, a0, b0, beta, c);
  if (a1.extent(0) > 0) gemm(in_thread, "T", "N", alpha, a1, b1, typename CView::non_const_value_type(1), c);
}

/// Scalars of `partials` that gemm_tn_sum uses at most for a C of `c_size` scalars on `space`:
/// (threads - 1) * c_size on host schedules, 0 on devices (one product there, no partial sums;
/// a device's concurrency counts hardware threads in the hundreds of thousands).
template <class ExecutionSpace>
std::size_t tn_sum_partials_size(ExecutionSpace const& space, std::size_t c_size) {
  if constexpr (host_schedule_v<ExecutionSpace>) {
    return std::size_t(std::max(0, int(space.concurrency()) - 1)) * c_size;
  } else {
    (void)space;
    (void)c_size;
    return 0;
  }
}

/// C = beta C + alpha sum_p A_p^T B_p for one or two (A_p, B_p) pairs with the same column
/// counts (a reduction over the rows of A_p and B_p, as in weight gradients). On host spaces
/// the rows of all pairs are split over the threads; each thread's block lands in C (the first
/// block) or in `partials` (extent >= tn_sum_partials_size(space, rows(C) * cols(C))), which
/// are then added to C in block order (deterministic for a fixed thread count). Where C is
/// split by rows instead (few summed rows) or made by one thread, dpk's two-pair kernel takes
/// both pairs at once when it takes the shape (detail::tn_sum_kernel_views).
template <class ExecutionSpace, class AView, class BView, class CView>
void gemm_tn_sum(ExecutionSpace const& space, typename AView::const_value_type alpha, AView const& a0, BView const& b0,
                 AView const& a1, BView const& b1, typename CView::const_value_type beta, CView const& c,
                 View1<typename CView::non_const_value_type, typename CView::memory_space> const& partials) {
  using Scalar = typename CView::non_const_value_type;
  std::size_t const m = c.extent(0), n = c.extent(1);
  std::size_t const rows0 = a0.extent(0), rows1 = a1.extent(0), rows = rows0 + rows1;
  int blocks = detail::host_blocks(space, rows, double(m) * n * rows);
  if (blocks > 1 && partials.extent(0) < std::size_t(blocks - 1) * m * n)
    blocks = static_cast<int>(std::min<std::size_t>(blocks, 1 + partials.extent(0) / std::max<std::size_t>(1, m * n)));
  if (rows == 0) {  // empty sum: C = beta C
    Scalar const scale = beta;
    for_each_element(space, "dpk::blas::gemm_tn_sum_scale", int(m), int(n), KOKKOS_LAMBDA(int const i, int const j) {
          c(i, j) = scale == Scalar(0) ? Scalar(0) : scale * c(i, j);
        });
    return;
  }
  if (blocks <= 1) {
    if constexpr (host_schedule_v<ExecutionSpace>) {  // as gemm_whole: after a fence, in this thread
      space.fence();
      if (detail::tn_sum_kernel_views(alpha, a0, b0, a1, b1, beta, c)) return;
    }
    if (rows0 > 0) detail::gemm_whole(space, "T", "N", alpha, a0, b0, beta, c);
    if (rows1 > 0) detail::gemm_whole(space, "T", "N", alpha, a1, b1, rows0 > 0 ? Scalar(1) : beta, c);
    return;
  }
  if constexpr (host_schedule_v<ExecutionSpace>) {  // for_each_block fences before and after
    // Few summed rows and many rows of C (the fitting nets' weights): split the rows of C
    // instead, each thread one column block of the A_p and all of the B_p; no partial sums, no
    // reduction pass.
    if (m >= std::size_t(16) * blocks && rows <= 4 * m) {
      int const column_blocks = detail::host_blocks(space, m / 16, double(m) * n * rows, /*per_thread=*/4);
      detail::for_each_block(space, "dpk::blas::gemm_tn_sum_columns", column_blocks, [&](int const block) {
            auto const range = detail::block_columns(m, column_blocks, block);
            if (range.first == range.second) return;
            auto c_block = Kokkos::subview(c, range, Kokkos::ALL());
            using Columns = decltype(Kokkos::subview(a0, Kokkos::ALL(), range));
            auto columns = [&](AView const& a) { return a.extent(0) > 0 ? Kokkos::subview(a, Kokkos::ALL(), range) : Columns(); };
            Columns const a0_block = columns(a0), a1_block = columns(a1);
            if (detail::tn_sum_kernel_views(alpha, a0_block, b0, a1_block, b1, beta, c_block)) return;
            Scalar beta_now = beta;
            auto part = [&](AView const& a, BView const& b) {
              if (a.extent(0) == 0) return;
              detail::gemm_in_thread("T", "N", alpha, Kokkos::subview(a, Kokkos::ALL(), range), b, beta_now, c_block);
              beta_now = Scalar(1);
            };
            part(a0, b0);
            part(a1, b1);
          });
      return;
    }
    detail::for_each_block(space, "dpk::blas::gemm_tn_sum", blocks, [&](int const block) {
          auto const range = detail::block_rows(rows, blocks, block);
          CView out = block == 0 ? c : CView(partials.data() + std::size_t(block - 1) * m * n, m, n);
          Scalar const beta_block = block == 0 ? beta : Scalar(0);
          bool first = true;
          // The block's rows in pair 0, then in pair 1.
          auto part = [&](AView const& a, BView const& b, std::size_t offset) {
            std::size_t const lo = std::max(range.first, offset), hi = std::min(range.second, offset + a.extent(0));
            if (lo >= hi) return;
            std::pair<std::size_t, std::size_t> const local{lo - offset, hi - offset};
            detail::gemm_in_thread("T", "N", alpha, Kokkos::subview(a, local, Kokkos::ALL()),
                                   Kokkos::subview(b, local, Kokkos::ALL()), first ? beta_block : Scalar(1), out);
            first = false;
          };
          part(a0, b0, 0);  // every block has at least one row: host_blocks() <= rows
          part(a1, b1, rows0);
        });
    Scalar* sum = partials.data();
    int const extra = blocks - 1;
    for_each_element(space, "dpk::blas::gemm_tn_sum_reduce", int(m), int(n), KOKKOS_LAMBDA(int const i, int const j) {
          Scalar s = c(i, j);
          for (int p = 0; p < extra; ++p) s += sum[(std::size_t(p) * m + i) * n + j];
          c(i, j) = s;
        });
  }
}

}  // namespace dpk::blas
