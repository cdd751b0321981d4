#pragma once
/// \file nontemporal.hpp
/// \brief A host copy through non-temporal (streaming) stores, for arrays that other threads
/// have read since they were last written.
///
/// A store to a cache line that another core complex holds a copy of waits for that copy's
/// invalidation, and such stores leave the store buffer one at a time: on the VM whose two
/// vCPUs are sometimes placed far apart (docs/performance.md, "Twenty-eighth session") an Adam
/// update of 1 M float parameters that both threads had read took 2.2-2.4 ms with plain stores
/// and 0.15 ms with streaming ones (0.43 and 0.20 ms with the vCPUs close). Streaming stores
/// bypass the caches: the next read of the array comes from memory.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(__CUDACC__) && !defined(__HIPCC__) && (defined(__AVX__) || defined(__SSE2__))
#include <immintrin.h>
#define DPK_HAS_STREAMING_STORES 1
#endif

namespace dpk {

/// dst[0 .. n) = src[0 .. n) in the calling host thread, through streaming stores where the
/// target has them (x86: 64-, 32- or 16-byte vectors; the unaligned head and the tail with plain
/// stores), followed by a store fence so that the values are visible to other threads after the
/// next synchronisation; a plain copy elsewhere. `Scalar` is float or double; the bits are copied.
template <class Scalar>
void copy_streaming(Scalar* dst, Scalar const* src, std::size_t n) {
  static_assert(sizeof(Scalar) == 4 || sizeof(Scalar) == 8, "copy_streaming: float or double");
#if defined(DPK_HAS_STREAMING_STORES)
#if defined(__AVX512F__)
  constexpr std::size_t bytes = 64;
#elif defined(__AVX__)
  constexpr std::size_t bytes = 32;
#else
  constexpr std::size_t bytes = 16;
#endif
  constexpr std::size_t lanes = bytes / sizeof(Scalar);
  std::size_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(dst + i) % bytes != 0; ++i) dst[i] = src[i];
  for (; i + lanes <= n; i += lanes) {
    Scalar const* const s = src + i;
    Scalar* const d = dst + i;
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
#elif defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<__m256i const*>(s)));
#else
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<__m128i const*>(s)));
#endif
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
#else
  std::memcpy(dst, src, n * sizeof(Scalar));
#endif
}

}  // namespace dpk
