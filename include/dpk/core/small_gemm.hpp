#pragma once
/// \file small_gemm.hpp
/// \brief Register-blocked AVX-512 or AVX2 products for the networks' skinny matrices (an
/// embedding chunk's 128 rows, a fitting net's atoms), used by blas::detail::gemm_in_thread and
/// the host schedule of blas::gemm when the program is compiled for one of these instruction sets
/// (-march=native on such a CPU; AVX-512 when both).
///
/// Why dpk has its own kernel here: the host BLAS picks its kernels at run time, and an
/// environment may pin older ones (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU, docs/tuning.md
/// "BLAS kernels"); dpk's own kernels are compiled for the CPU the program was built for, and a
/// product of 128 rows needs no packing of A. On the water nets' shapes (one Zen 5 core, operands
/// in cache) the AVX-512 kernel ran at 143-222 GFLOP/s in float32 and 82-111 in double, against
/// 83-116 and 42-58 for OpenBLAS' Haswell kernels and 153-222 and 79-115 for its own AVX-512
/// choice (docs/performance.md, "Eleventh session"); the AVX2 kernel on Zen 3: docs/performance.md,
/// "Seventeenth session".
///
/// Each block of R rows of C keeps R x NV vector accumulators in registers over a pass of up to
/// 64 terms of the sum (NV vectors of Simd<Scalar>::lanes elements per row, the last one partial),
/// loads each row of B once per block and broadcasts one element of A per row and step. The sum
/// runs over k in order. While a pass computes, it prefetches what the next one reads (its block
/// of B, its columns of A) and each row block the next block's rows of C: with operands from
/// memory (bench_gemm's fitting_gemm with 32 operand sets, as the fitting nets' products inside a
/// training step) the weight gradients C += A^T B ran 1.2-1.5x faster, the other forms about as
/// before (docs/performance.md, twelfth session).

#include <cstddef>
#include <cstdint>

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#if defined(__AVX512F__)
#include <immintrin.h>
/// Defined when dpk's small-matrix kernels are compiled in (AVX-512 or AVX2 with FMA).
#define DPK_HAS_SMALL_GEMM 1
/// Defined when they use AVX-512 (512-bit vectors, 32 registers, masked loads and stores).
#define DPK_SMALL_GEMM_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DPK_HAS_SMALL_GEMM 1
#endif
#endif

#if defined(DPK_HAS_SMALL_GEMM)
/// Full unrolling of a loop with a compile-time trip count (GCC and Clang).
#define DPK_SMALL_GEMM_UNROLL _Pragma("GCC unroll 16")
/// A register tile's helpers are always inlined: called, their accumulators would go through memory.
#define DPK_SMALL_GEMM_INLINE inline __attribute__((always_inline))
#endif

namespace dpk::blas::detail {

/// Whether a matrix's rows start on 64-byte cache lines: `data` on a line and a row pitch of whole lines.
template <class Scalar>
bool rows_on_cache_lines(Scalar const* data, std::ptrdiff_t pitch) {
  return reinterpret_cast<std::uintptr_t>(data) % 64 == 0 && (std::size_t(pitch) * sizeof(Scalar)) % 64 == 0;
}

#if defined(DPK_HAS_SMALL_GEMM)

#if defined(DPK_SMALL_GEMM_AVX512)
/// The instruction set of dpk's small-matrix kernels, for banners.
inline constexpr char const* small_gemm_isa = "AVX-512";
/// The vector of Scalar that the kernels use (here AVX-512) and the few operations they need.
/// A Tail is the first `count` lanes of a vector (loads fill the others with zeros).
template <class Scalar>
struct Simd;
template <>
struct Simd<float> {
  using Vec = __m512;
  using Tail = __mmask16;
  static constexpr int lanes = 16, registers = 32;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec broadcast(float const* p) { return _mm512_set1_ps(*p); }
  static Vec load(float const* p) { return _mm512_loadu_ps(p); }
  static Vec load(float const* p, Tail m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Vec v, Tail m) { _mm512_mask_storeu_ps(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec unpack_lo(Vec a, Vec b) { return _mm512_unpacklo_ps(a, b); }
  static Vec unpack_hi(Vec a, Vec b) { return _mm512_unpackhi_ps(a, b); }
  static Tail tail(int count) { return Tail((1u << count) - 1u); }
};
template <>
struct Simd<double> {
  using Vec = __m512d;
  using Tail = __mmask8;
  static constexpr int lanes = 8, registers = 32;
  static Vec zero() { return _mm512_setzero_pd(); }
  static Vec broadcast(double const* p) { return _mm512_set1_pd(*p); }
  static Vec load(double const* p) { return _mm512_loadu_pd(p); }
  static Vec load(double const* p, Tail m) { return _mm512_maskz_loadu_pd(m, p); }
  static void store(double* p, Vec v) { _mm512_storeu_pd(p, v); }
  static void store(double* p, Vec v, Tail m) { _mm512_mask_storeu_pd(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_pd(a, b); }
  static Vec unpack_lo(Vec a, Vec b) { return _mm512_unpacklo_pd(a, b); }
  static Vec unpack_hi(Vec a, Vec b) { return _mm512_unpackhi_pd(a, b); }
  static Tail tail(int count) { return Tail((1u << count) - 1u); }
};
#else
/// The instruction set of dpk's small-matrix kernels, for banners.
inline constexpr char const* small_gemm_isa = "AVX2";
/// The first `count` lanes of an AVX2 vector: the mask of a masked load, and the count for the
/// store (AMD's masked stores are microcoded and slow, so a partial store goes through a copy).
struct SimdTail256 {
  __m256i mask;
  int count;
};
/// Loads the first t.count lanes of a Simd vector S from p (zeros in the others): a whole vector
/// when every lane counts, else a masked load. Shared by the float and double vectors.
template <class S, class Scalar>
inline typename S::Vec simd256_load_first(Scalar const* p, SimdTail256 const& t) {
  return t.count == S::lanes ? S::load(p) : S::masked_load(p, t.mask);
}
/// Stores the first t.count lanes of v to p: a whole vector when every lane counts, else through
/// an aligned copy (no masked store, microcoded on AMD).
template <class S, class Scalar>
inline void simd256_store_first(Scalar* p, typename S::Vec v, SimdTail256 const& t) {
  if (t.count == S::lanes) return S::store(p, v);
  alignas(32) Scalar lane[S::lanes];
  S::store(lane, v);
  for (int j = 0; j < t.count; ++j) p[j] = lane[j];
}
/// The vector of Scalar that the kernels use (here AVX2 with FMA) and the few operations they
/// need. A Tail is the first `count` lanes of a vector (loads fill the others with zeros).
template <class Scalar>
struct Simd;
template <>
struct Simd<float> {
  using Vec = __m256;
  using Tail = SimdTail256;
  static constexpr int lanes = 8, registers = 16;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec broadcast(float const* p) { return _mm256_broadcast_ss(p); }
  static Vec load(float const* p) { return _mm256_loadu_ps(p); }
  static Vec masked_load(float const* p, __m256i mask) { return _mm256_maskload_ps(p, mask); }
  static Vec load(float const* p, Tail const& t) { return simd256_load_first<Simd>(p, t); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Vec v, Tail const& t) { simd256_store_first<Simd>(p, v, t); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec unpack_lo(Vec a, Vec b) { return _mm256_unpacklo_ps(a, b); }
  static Vec unpack_hi(Vec a, Vec b) { return _mm256_unpackhi_ps(a, b); }
  static Tail tail(int count) {
    return {_mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), count};
  }
};
template <>
struct Simd<double> {
  using Vec = __m256d;
  using Tail = SimdTail256;
  static constexpr int lanes = 4, registers = 16;
  static Vec zero() { return _mm256_setzero_pd(); }
  static Vec broadcast(double const* p) { return _mm256_broadcast_sd(p); }
  static Vec load(double const* p) { return _mm256_loadu_pd(p); }
  static Vec masked_load(double const* p, __m256i mask) { return _mm256_maskload_pd(p, mask); }
  static Vec load(double const* p, Tail const& t) { return simd256_load_first<Simd>(p, t); }
  static void store(double* p, Vec v) { _mm256_storeu_pd(p, v); }
  static void store(double* p, Vec v, Tail const& t) { simd256_store_first<Simd>(p, v, t); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_pd(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_pd(a, b); }
  static Vec unpack_lo(Vec a, Vec b) { return _mm256_unpacklo_pd(a, b); }
  static Vec unpack_hi(Vec a, Vec b) { return _mm256_unpackhi_pd(a, b); }
  static Tail tail(int count) {
    return {_mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3)), count};
  }
};
#endif

/// The first stage of a tile transposition: rows 2p and 2p + 1 of the lanes x lanes tile at
/// `src` (rows `ld` apart), interleaved element by element within each 128-bit lane, into t[2p]
/// (low halves) and t[2p + 1] (high halves).
template <class Scalar>
inline void interleave_row_pairs(Scalar const* src, std::ptrdiff_t ld, typename Simd<Scalar>::Vec* t) {
  using S = Simd<Scalar>;
  for (int p = 0; p < S::lanes / 2; ++p) {
    auto const a = S::load(src + 2 * p * ld), b = S::load(src + (2 * p + 1) * ld);
    t[2 * p] = S::unpack_lo(a, b);
    t[2 * p + 1] = S::unpack_hi(a, b);
  }
}

/// dst[q * pitch + j] = src[j * ld + q] for j, q < lanes: one square tile of op(B) = B^T copied
/// into packed rows through registers (a transposition in log2(lanes) shuffle stages).
#if defined(DPK_SMALL_GEMM_AVX512)
// GCC 12's AVX-512 shuffles read an `_mm512_undefined_*` operand that its -Wuninitialized /
// -Wmaybe-uninitialized flag once inlined into a caller (GCC bug 105593, fixed in 13): not a defect.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline void transpose_tile(double const* src, std::ptrdiff_t ld, double* dst, std::ptrdiff_t pitch) {
  __m512d t[8], u[8];
  interleave_row_pairs(src, ld, t);
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3, 128-bit lanes gathered by column
    u[4 * h] = _mm512_shuffle_f64x2(t[4 * h], t[4 * h + 2], 0x88);
    u[4 * h + 1] = _mm512_shuffle_f64x2(t[4 * h + 1], t[4 * h + 3], 0x88);
    u[4 * h + 2] = _mm512_shuffle_f64x2(t[4 * h], t[4 * h + 2], 0xdd);
    u[4 * h + 3] = _mm512_shuffle_f64x2(t[4 * h + 1], t[4 * h + 3], 0xdd);
  }
  for (int q = 0; q < 4; ++q) {  // columns q and q + 4
    _mm512_storeu_pd(dst + q * pitch, _mm512_shuffle_f64x2(u[q], u[q + 4], 0x88));
    _mm512_storeu_pd(dst + (q + 4) * pitch, _mm512_shuffle_f64x2(u[q], u[q + 4], 0xdd));
  }
}
inline void transpose_tile(float const* src, std::ptrdiff_t ld, float* dst, std::ptrdiff_t pitch) {
  __m512 t[16], v[16];
  interleave_row_pairs(src, ld, t);
  // v[4 s + q]: 128-bit lane L holds column 4 L + q of rows 4 s .. 4 s + 3.
  for (int g = 0; g < 4; ++g) {
    __m512d const a0 = _mm512_castps_pd(t[4 * g]), a1 = _mm512_castps_pd(t[4 * g + 2]);
    __m512d const b0 = _mm512_castps_pd(t[4 * g + 1]), b1 = _mm512_castps_pd(t[4 * g + 3]);
    v[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a1));
    v[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a1));
    v[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b0, b1));
    v[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b0, b1));
  }
  for (int q = 0; q < 4; ++q) {  // a 4 x 4 transposition of 128-bit lanes per q
    __m512 const w0 = _mm512_shuffle_f32x4(v[q], v[4 + q], 0x44), w1 = _mm512_shuffle_f32x4(v[q], v[4 + q], 0xee);
    __m512 const w2 = _mm512_shuffle_f32x4(v[8 + q], v[12 + q], 0x44),
                 w3 = _mm512_shuffle_f32x4(v[8 + q], v[12 + q], 0xee);
    _mm512_storeu_ps(dst + q * pitch, _mm512_shuffle_f32x4(w0, w2, 0x88));
    _mm512_storeu_ps(dst + (4 + q) * pitch, _mm512_shuffle_f32x4(w0, w2, 0xdd));
    _mm512_storeu_ps(dst + (8 + q) * pitch, _mm512_shuffle_f32x4(w1, w3, 0x88));
    _mm512_storeu_ps(dst + (12 + q) * pitch, _mm512_shuffle_f32x4(w1, w3, 0xdd));
  }
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic pop
#endif

#else
inline void transpose_tile(double const* src, std::ptrdiff_t ld, double* dst, std::ptrdiff_t pitch) {
  __m256d t[4];
  interleave_row_pairs(src, ld, t);  // t[0] = (r0c0 r1c0 r0c2 r1c2), t[1] = (r0c1 r1c1 r0c3 r1c3), ...
  for (int q = 0; q < 2; ++q) {      // columns q and q + 2: the low and high 128-bit halves
    _mm256_storeu_pd(dst + q * pitch, _mm256_permute2f128_pd(t[q], t[2 + q], 0x20));
    _mm256_storeu_pd(dst + (q + 2) * pitch, _mm256_permute2f128_pd(t[q], t[2 + q], 0x31));
  }
}
inline void transpose_tile(float const* src, std::ptrdiff_t ld, float* dst, std::ptrdiff_t pitch) {
  __m256 t[8], u[8];
  interleave_row_pairs(src, ld, t);
  // u[4 h + q]: columns q (low half) and q + 4 (high half) of rows 4 h .. 4 h + 3.
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(dst + q * pitch, _mm256_permute2f128_ps(u[q], u[4 + q], 0x20));
    _mm256_storeu_ps(dst + (q + 4) * pitch, _mm256_permute2f128_ps(u[q], u[4 + q], 0x31));
  }
}
#endif

/// Operands of one small product C = [C +] alpha A op(B) (row-major C and B rows; A by element
/// strides).
template <class Scalar>
struct SmallGemmArgs {
  int m, n, k;
  Scalar const* a;
  std::ptrdiff_t a_row, a_col;  ///< A(i, l) = a[i * a_row + l * a_col]
  Scalar const* b;
  std::ptrdiff_t ldb;  ///< op(B)(l, j) = b[l * ldb + j], or b[j * ldb + l] when trans_b
  Scalar* c;
  std::ptrdiff_t ldc;  ///< C(i, j) = c[i * ldc + j]
  bool accumulate;     ///< C += alpha A op(B) (beta 1), else C = alpha A op(B) (beta 0)
  bool trans_b = false;
  Scalar alpha = 1;
};

/// One step of a register tile's sum: acc[r][v] += A(r) B(v) for the NV vectors of a row of B at
/// `b_row` (the last one `tail`) and R elements of A `a_step` apart from `a`.
template <class Scalar, int NV, int R>
DPK_SMALL_GEMM_INLINE void small_gemm_tile_step(typename Simd<Scalar>::Vec (&acc)[R][NV], Scalar const* b_row,
                                 typename Simd<Scalar>::Tail const& tail, Scalar const* a, std::ptrdiff_t a_step) {
  using S = Simd<Scalar>;
  typename S::Vec bv[NV];
  DPK_SMALL_GEMM_UNROLL
  for (int v = 0; v + 1 < NV; ++v) bv[v] = S::load(b_row + v * S::lanes);
  bv[NV - 1] = S::load(b_row + (NV - 1) * S::lanes, tail);
  DPK_SMALL_GEMM_UNROLL
  for (int r = 0; r < R; ++r) {
    auto const av = S::broadcast(a + r * a_step);
    DPK_SMALL_GEMM_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = S::fma(av, bv[v], acc[r][v]);
  }
}

/// Writes a register tile: C(r, v) = [C(r, v) +] alpha acc[r][v] for R rows `ldc` apart from `c`,
/// NV vectors each (the last one `tail`).
template <class Scalar, int NV, int R>
DPK_SMALL_GEMM_INLINE void small_gemm_tile_store(typename Simd<Scalar>::Vec (&acc)[R][NV], Scalar alpha, bool accumulate, Scalar* c,
                                  std::ptrdiff_t ldc, typename Simd<Scalar>::Tail const& tail) {
  using S = Simd<Scalar>;
  if (alpha != Scalar(1)) {
    auto const scale = S::broadcast(&alpha);
    DPK_SMALL_GEMM_UNROLL
    for (int r = 0; r < R; ++r) {
      DPK_SMALL_GEMM_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = S::mul(scale, acc[r][v]);
    }
  }
  DPK_SMALL_GEMM_UNROLL
  for (int r = 0; r < R; ++r) {
    Scalar* const row = c + r * ldc;
    DPK_SMALL_GEMM_UNROLL
    for (int v = 0; v + 1 < NV; ++v)
      S::store(row + v * S::lanes, accumulate ? S::add(S::load(row + v * S::lanes), acc[r][v]) : acc[r][v]);
    Scalar* const last = row + (NV - 1) * S::lanes;
    S::store(last, accumulate ? S::add(S::load(last, tail), acc[r][NV - 1]) : acc[r][NV - 1], tail);
  }
}

/// Rows [i0, i0 + R) of C: R x NV accumulators over l = 0 .. k - 1, the last vector partial.
/// Every loop over R and NV is unrolled, so that the accumulators stay in registers.
template <class Scalar, int NV, int R>
inline void small_gemm_rows(SmallGemmArgs<Scalar> const& g, int i0) {
  using S = Simd<Scalar>;
  using Vec = typename S::Vec;
  typename S::Tail const tail = S::tail(g.n - (NV - 1) * S::lanes);
  int const k = g.k;
  std::ptrdiff_t const a_row = g.a_row, a_col = g.a_col, ldb = g.ldb;
  Scalar const* const a = g.a + i0 * a_row;
  Scalar const* const b = g.b;
  Vec acc[R][NV];
  DPK_SMALL_GEMM_UNROLL
  for (int r = 0; r < R; ++r) {
    DPK_SMALL_GEMM_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = S::zero();
  }
  for (int l = 0; l < k; ++l) small_gemm_tile_step<Scalar, NV, R>(acc, b + l * ldb, tail, a + l * a_col, a_row);
  small_gemm_tile_store<Scalar, NV, R>(acc, g.alpha, g.accumulate, g.c + i0 * g.ldc, g.ldc, tail);
}

/// Rows of C per register tile of two vectors in the kernels that sum a tile over all terms (the
/// two-pair and long-sum kernels): 12 x 2 accumulators with AVX-512's 32 registers, 6 x 2 with
/// AVX2's 16 (with the two vectors of B and one broadcast).
template <class Scalar>
constexpr int two_vector_tile_rows() {
  return Simd<Scalar>::registers == 32 ? 12 : 6;
}

/// Whether the kernels that stand in for the fitting nets' BLAS calls (the two-pair and long-sum
/// kernels) run when their variable is unset: in AVX-512 builds (measured there against
/// OpenBLAS' AVX-512 kernels), not in AVX2 builds (not measured).
#if defined(DPK_SMALL_GEMM_AVX512)
inline constexpr bool fitting_kernels_by_default = true;
#else
inline constexpr bool fitting_kernels_by_default = false;
#endif

/// Rows per register block for NV vectors per row: as many as leave registers for the NV
/// vectors of a row of B and one broadcast (R x NV + NV + 1 <= 32 zmm registers; with AVX2's 16
/// ymm registers 12 x 1 or 6 x 2, see small_gemm_panel_vectors).
template <class Scalar, int NV>
constexpr int small_gemm_block_rows() {
  if constexpr (Simd<Scalar>::registers == 32)
    return NV >= 7 ? 3 : NV == 6 ? 4 : NV == 5 ? 5 : NV == 4 ? 6 : NV == 3 ? 8 : 12;
  else
    return NV >= 2 ? 6 : 12;
}

/// Rows of memory that the next pass will read (its block of B where it lies), brought toward the
/// L2 cache a few lines per row block while this pass computes: the first row block of a pass
/// would otherwise wait for every row of B in turn when B is not in cache (weights of the
/// fitting nets between passes over the embedding nets).
struct SmallGemmRegion {
  char const* base = nullptr;
  std::ptrdiff_t pitch = 0;  ///< bytes from one row to the next
  int rows = 0, lines = 0;   ///< rows, and 64-byte lines per row
  /// `count` elements of Scalar in each of `rows` rows from `first`, `stride` elements apart.
  template <class Scalar>
  static SmallGemmRegion of(Scalar const* first, std::ptrdiff_t stride, int rows, int count) {
    return {reinterpret_cast<char const*>(first), stride * std::ptrdiff_t(sizeof(Scalar)), rows,
            int((std::size_t(count) * sizeof(Scalar) + 63) / 64)};
  }
  /// Part `part` of `parts` of the lines.
  void issue(int part, int parts) const {
    int const total = rows * lines;
    int const q0 = total * part / parts, end = total * (part + 1) / parts;
    if (q0 >= end) return;
    int row = q0 / lines, line = q0 - row * lines;
    for (int q = q0; q < end; ++q) {
      _mm_prefetch(base + row * pitch + line * 64, _MM_HINT_T1);
      if (++line == lines) {
        line = 0;
        ++row;
      }
    }
  }
};

/// What the next pass reads: its block of B and, for A stored by rows, its columns of A.
struct SmallGemmPrefetch {
  SmallGemmRegion b, a;
  void issue(int part, int parts) const {
    b.issue(part, parts);
    a.issue(part, parts);
  }
};

/// All rows of C in blocks of small_gemm_block_rows, the rows after the last block in blocks of
/// 4 (where they fit in registers), 2 and 1.
template <class Scalar, int NV>
inline void small_gemm_nv(SmallGemmArgs<Scalar> const& g, SmallGemmPrefetch const& next) {
  constexpr int R = small_gemm_block_rows<Scalar, NV>();
  constexpr int c_lines = int((NV * Simd<Scalar>::lanes * sizeof(Scalar) + 63) / 64);  // per row block row
  int const parts = g.m / R > 0 ? g.m / R : 1;
  if (g.m < R) next.issue(0, 1);
  int i = 0;
  for (; i + R <= g.m; i += R) {
    next.issue(i / R, parts);
    if (i + 2 * R <= g.m) {  // the next block's rows of C, which it ends by loading (or storing)
      DPK_SMALL_GEMM_UNROLL
      for (int r = 0; r < R; ++r) {
        char const* const c_row = reinterpret_cast<char const*>(g.c + (i + R + r) * g.ldc);
        DPK_SMALL_GEMM_UNROLL
        for (int q = 0; q < c_lines; ++q) _mm_prefetch(c_row + q * 64, _MM_HINT_T0);
      }
    }
    small_gemm_rows<Scalar, NV, R>(g, i);
  }
  if constexpr (R > 4 && NV <= 6)
    for (; i + 4 <= g.m; i += 4) small_gemm_rows<Scalar, NV, 4>(g, i);
  if constexpr (R > 2)
    for (; i + 2 <= g.m; i += 2) small_gemm_rows<Scalar, NV, 2>(g, i);
  for (; i < g.m; ++i) small_gemm_rows<Scalar, NV, 1>(g, i);
}

/// Terms of the sum per pass over a panel: longer sums (the fitting nets' 1600 and 240) run in
/// passes of this many, each adding to C, so that the rows of B one pass reads (64 x 8 vectors:
/// 32 KiB with AVX-512, 64 x 2 vectors: 4 KiB with AVX2) stay in the L1 cache while every row
/// block of C reuses them. Fitting shapes (128 rows, 1600 -> 240 and 240 -> 240, one Zen 5 core,
/// AVX-512): 32 and 64 terms ran at 203-217 GFLOP/s in float and 92-107 in double, 128 terms at
/// 152-173 and 75-84 (docs/performance.md, eleventh session).
inline constexpr int small_gemm_kc = 64;

/// Vectors per row of a panel: 8 with AVX-512 (128 float / 64 double columns); 2 with AVX2 (16 /
/// 8): a block of 6 rows x 2 vectors keeps B's two vectors in registers, where 3 or 4 vectors
/// (blocks of 4 x 3, 3 x 4) left GCC reading B from memory in every FMA and ran at 0.6-0.8x
/// OpenBLAS' Zen kernels (docs/performance.md, "Seventeenth session"). Wider C is done panel by
/// panel (each a column slice of B and C).
template <class Scalar>
constexpr int small_gemm_panel_vectors() {
  return Simd<Scalar>::registers == 32 ? 8 : 2;
}

/// Columns of C per panel.
template <class Scalar>
constexpr int small_gemm_panel() {
  return small_gemm_panel_vectors<Scalar>() * Simd<Scalar>::lanes;
}

/// Whether a pass reads B where it lies: B not transposed, and rows of B that start on cache
/// lines (64 bytes) or too few rows of C to repay a copy. Otherwise (B transposed, or many rows
/// of C and rows of B that straddle lines, as the 100-wide rows of a 50 -> 100 layer's weights)
/// each pass first copies its block of op(B) (up to kc x panel) into aligned rows.
template <class Scalar>
bool small_gemm_b_in_place(SmallGemmArgs<Scalar> const& g) {
  if (g.trans_b) return false;
  return rows_on_cache_lines(g.b, g.ldb) || g.m < 16;
}

/// small_gemm_nv for NV = vectors (1 .. small_gemm_panel_vectors).
template <class Scalar, int NV = 1>
inline void small_gemm_dispatch(int vectors, SmallGemmArgs<Scalar> const& p, SmallGemmPrefetch const& next) {
  if constexpr (NV < small_gemm_panel_vectors<Scalar>())
    if (vectors > NV) return small_gemm_dispatch<Scalar, NV + 1>(vectors, p, next);
  small_gemm_nv<Scalar, NV>(p, next);
}

/// C = [C +] alpha A op(B) with dpk's kernel, panel by panel of C's columns and, for sums
/// longer than small_gemm_kc, pass by pass over the sum; false (nothing done) when the product
/// is empty.
template <class Scalar>
bool small_gemm(SmallGemmArgs<Scalar> const& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return false;
  constexpr int lanes = Simd<Scalar>::lanes, panel = small_gemm_panel<Scalar>(), kc = small_gemm_kc;
  bool const in_place = small_gemm_b_in_place(g);
  alignas(64) Scalar packed[kc * panel];  // one pass's block of op(B) when copied: 32 / 4 KiB
  for (int j0 = 0; j0 < g.n; j0 += panel) {
    for (int l0 = 0; l0 < g.k; l0 += kc) {
      // The next pass: the next terms of this panel, else the first of the next panel.
      int const nl0 = l0 + kc < g.k ? l0 + kc : 0, nj0 = l0 + kc < g.k ? j0 : j0 + panel;
      SmallGemmPrefetch next;
      if (nj0 < g.n) {
        int const nn = g.n - nj0 < panel ? g.n - nj0 : panel, nk = g.k - nl0 < kc ? g.k - nl0 : kc;
        next.b = g.trans_b ? SmallGemmRegion::of(g.b + nj0 * g.ldb + nl0, g.ldb, nn, nk)
                           : SmallGemmRegion::of(g.b + nl0 * g.ldb + nj0, g.ldb, nk, nn);
        if (g.a_col == 1) next.a = SmallGemmRegion::of(g.a + nl0, g.a_row, g.m, nk);
      }
      SmallGemmArgs<Scalar> p = g;
      p.n = g.n - j0 < panel ? g.n - j0 : panel;
      p.k = g.k - l0 < kc ? g.k - l0 : kc;
      p.a = g.a + l0 * g.a_col;
      p.c = g.c + j0;
      p.accumulate = g.accumulate || l0 > 0;
      p.trans_b = false;
      int const vectors = (p.n + lanes - 1) / lanes;
      if (in_place) {
        p.b = g.b + l0 * g.ldb + j0;
      } else {
        std::ptrdiff_t const pitch = std::ptrdiff_t(vectors) * lanes;
        if (g.trans_b) {  // square tiles through registers, the edges element by element
          Scalar const* const first = g.b + j0 * g.ldb + l0;  // op(B)(l0 + l, j0 + j) = first[j * ldb + l]
          int const n_full = p.n / lanes * lanes, k_full = p.k / lanes * lanes;
          for (int j = 0; j < n_full; j += lanes)
            for (int l = 0; l < k_full; l += lanes)
              transpose_tile(first + j * g.ldb + l, g.ldb, packed + l * pitch + j, pitch);
          for (int j = 0; j < p.n; ++j)
            for (int l = j < n_full ? k_full : 0; l < p.k; ++l) packed[l * pitch + j] = first[j * g.ldb + l];
        } else {
          for (int l = 0; l < p.k; ++l) {
            Scalar const* const row = g.b + (l0 + l) * g.ldb + j0;
            for (int j = 0; j < p.n; ++j) packed[l * pitch + j] = row[j];
          }
        }
        p.b = packed;
        p.ldb = pitch;
      }
      small_gemm_dispatch<Scalar>(vectors, p, next);
    }
  }
  return true;
}

#endif  // DPK_HAS_SMALL_GEMM

}  // namespace dpk::blas::detail
