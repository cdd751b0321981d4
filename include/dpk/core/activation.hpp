#pragma once
/// \file activation.hpp
/// \brief tanh for the network kernels: a branch-free host version (range-reduced exp/expm1
/// polynomial, about 5x fewer instructions than libm's tanh, accurate to a few ulp in absolute
/// terms) and the vendor tanh on GPUs.

#include <dpk/core/compat.hpp>
#include <dpk/core/for_each.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dpk::math {

namespace detail {
// Host-only helpers: the device path of activation_tanh uses the vendor tanh. Everything is
// straight-line integer/floating code (no floating-point compares, whose if-conversion GCC
// refuses under the default -ftrapping-math), so loops over activation_tanh vectorise.

/// The bits of `value` as type To (same size).
template <class To, class From>
inline To bits_as(From value) {
  static_assert(sizeof(To) == sizeof(From), "bits_as: sizes differ");
  To out;
  std::memcpy(&out, &value, sizeof out);
  return out;
}

/// Integer type of the same size as Scalar, and its bit-level constants.
template <class Scalar>
struct FloatBits;
template <>
struct FloatBits<double> {
  using Int = std::int64_t;
  static constexpr Int sign = std::int64_t(1) << 63, magnitude = ~sign, infinity = 0x7ff0000000000000LL;
  static constexpr int mantissa = 52, bias = 1023;
};
template <>
struct FloatBits<float> {
  using Int = std::int32_t;
  static constexpr Int sign = std::int32_t(1) << 31, magnitude = ~sign, infinity = 0x7f800000;
  static constexpr int mantissa = 23, bias = 127;
};

/// e^-r - 1 polynomial for |r| <= ln2/2 (Taylor, Horner): double to 1/14!, float to 1/8!.
inline double expm1_reduced(double r) {
  double p = 1.14707455977297245e-11;
  p = 1.60590438368216133e-10 + r * p;
  p = 2.08767569878681002e-09 + r * p;
  p = 2.50521083854417202e-08 + r * p;
  p = 2.75573192239858883e-07 + r * p;
  p = 2.75573192239858925e-06 + r * p;
  p = 2.48015873015873016e-05 + r * p;
  p = 1.98412698412698413e-04 + r * p;
  p = 1.38888888888888894e-03 + r * p;
  p = 8.33333333333333322e-03 + r * p;
  p = 4.16666666666666644e-02 + r * p;
  p = 1.66666666666666657e-01 + r * p;
  p = 5.00000000000000000e-01 + r * p;
  p = 1.00000000000000000e+00 + r * p;
  return r * p;
}
inline float expm1_reduced(float r) {
  float p = 2.480158730e-05f;
  p = 1.984126984e-04f + r * p;
  p = 1.388888889e-03f + r * p;
  p = 8.333333333e-03f + r * p;
  p = 4.166666667e-02f + r * p;
  p = 1.666666667e-01f + r * p;
  p = 5.000000000e-01f + r * p;
  p = 1.000000000e+00f + r * p;
  return r * p;
}

/// ln 2 split into a head with trailing zero bits and a tail, and 1/ln 2.
template <class Scalar>
struct Ln2;
template <>
struct Ln2<double> {
  static constexpr double hi = 6.93147180369123816490e-01, lo = 1.90821492927058770002e-10,
                          inv = 1.44269504088896338700e+00;
};
template <>
struct Ln2<float> {
  static constexpr float hi = 6.9314575195e-01f, lo = 1.4286067653e-06f, inv = 1.4426950216e+00f;
};

/// tanh on the host: tanh|x| = -e / (2 + e) with e = expm1(-2|x|), |x| clamped where tanh
/// rounds to 1 (20 in double, 9 in float); expm1(-y) = 2^-n (e^-r - 1) + (2^-n - 1) with
/// y = n ln2 + r. Sign restored by bits; NaN passes through. Only operations that AVX2 has for
/// 64-bit lanes (no arithmetic 64-bit shift, no 64-bit integer <-> double conversion: n, at most
/// 58, goes through 32 bits), so that double loops vectorise without AVX-512 too.
template <class Scalar>
inline Scalar tanh_host(Scalar x) {
  using Bits = FloatBits<Scalar>;
  using Int = typename Bits::Int;
  using UInt = std::make_unsigned_t<Int>;
  constexpr int top = 8 * int(sizeof(Int)) - 1;
  Int const x_bits = bits_as<Int>(x);
  Int const abs_bits = x_bits & Bits::magnitude;
  Int const limit = bits_as<Int>(sizeof(Scalar) == 8 ? Scalar(20) : Scalar(9));
  // min(abs_bits, limit) without a compare: both non-negative, so the difference cannot overflow;
  // its sign bit, spread by a logical shift and a negation, selects it.
  Int const diff = abs_bits - limit;
  Int const below = Int(UInt(0) - (UInt(diff) >> top));
  Scalar const y = Scalar(2) * bits_as<Scalar>(Int(limit + (diff & below)));
  std::int32_t const n = static_cast<std::int32_t>(y * Ln2<Scalar>::inv + Scalar(0.5));
  Scalar const nf = static_cast<Scalar>(n);
  Scalar const r = -((y - nf * Ln2<Scalar>::hi) - nf * Ln2<Scalar>::lo);
  Scalar const scale = bits_as<Scalar>(Int(Int(Bits::bias - n) << Bits::mantissa));  // 2^-n
  Scalar const e = scale * expm1_reduced(r) + (scale - Scalar(1));
  Int const t_bits = bits_as<Int>((Scalar(0) - e) / (Scalar(2) + e)) ^ (x_bits & Bits::sign);
  // NaN (abs_bits > infinity): all-ones mask selects x itself.
  Int const nan_mask = Int(UInt(0) - (UInt(Bits::infinity - abs_bits) >> top));
  return bits_as<Scalar>(Int((t_bits & ~nan_mask) | (x_bits & nan_mask)));
}

}  // namespace detail

/// Hyperbolic tangent used by every network layer.
template <class Scalar>
KOKKOS_INLINE_FUNCTION Scalar activation_tanh(Scalar x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return math::tanh(x);
#else
  return detail::tanh_host(x);
#endif
}

/// h[i] = activation_tanh(z[i]) for i < n, on the host (the chunked layers' flat tanh loop).
/// GCC keeps 256-bit vectors on AVX-512 CPUs unless told otherwise; this loop alone asks for
/// 512-bit ones (DPK_TANH_WIDE_VECTORS): the polynomial and its division are compute-bound, and
/// a zmm loop took 22 % less time per value in float32 and 19 % in float64 on an AVX-512 Xeon,
/// with the same bits (elementwise: each value goes through the same operations either way).
/// Not inlined: GCC would compile an inlined body with its caller's vector width.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    defined(__x86_64__) && defined(__AVX512F__)
#define DPK_TANH_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define DPK_TANH_WIDE_VECTORS
#endif
template <class Scalar>
DPK_TANH_WIDE_VECTORS void tanh_host_span(Scalar const* z, Scalar* h, std::size_t n) {
  DPK_SIMD_LOOP
  for (std::size_t i = 0; i < n; ++i) h[i] = detail::tanh_host(z[i]);
}

}  // namespace dpk::math
