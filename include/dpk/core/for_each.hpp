#pragma once
/// \file for_each.hpp
/// \brief Elementwise loops over row-major matrices. On GPUs one team per row with the columns
/// across the vector lanes (coalesced); on CPUs a range of rows per thread with a plain,
/// SIMD-vectorised loop over the columns (a host TeamVectorRange strides by the team size and
/// does not vectorise: 3-4x slower on the network kernels).

#include <dpk/core/types.hpp>

#include <Kokkos_Core.hpp>

#include <type_traits>

/// Marks the next loop as free of loop-carried dependences so the compiler vectorises it.
/// (GCC's `omp simd` on an inner loop of a loop nest blocks vectorisation; `ivdep` does not.)
#if defined(__NVCC__) || defined(__HIPCC__)
#define DPK_SIMD_LOOP
#elif defined(__clang__)
#define DPK_SIMD_LOOP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define DPK_SIMD_LOOP _Pragma("GCC ivdep")
#else
#define DPK_SIMD_LOOP
#endif

namespace dpk {

/// True when kernels of ExecutionSpace run on host threads.
template <class ExecutionSpace>
inline constexpr bool is_host_space_v =
    std::is_same_v<typename ExecutionSpace::memory_space, Kokkos::HostSpace>;

/// True when dpk runs its host schedule on ExecutionSpace (per-thread blocks, private sums,
/// chunked network passes, threaded BLAS blocks); false for its device schedule (teams, atomics,
/// whole-batch kernels). Built with DPK_DEVICE_SCHEDULE_ON_HOST (the `*_device_schedule` tests),
/// host spaces take the device schedule too, so that it runs in every CPU test run.
template <class ExecutionSpace>
inline constexpr bool host_schedule_v =
#if defined(DPK_DEVICE_SCHEDULE_ON_HOST)
    false;
#else
    is_host_space_v<ExecutionSpace>;
#endif

/// Policies whose iterations host threads take a few at a time as they finish (OpenMP dynamic
/// schedule; GPUs ignore the schedule): for kernels of independent iterations, so that a thread
/// on a core shared with another job takes less work and the result does not change.
template <class ExecutionSpace>
using DynamicRangePolicy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
template <class ExecutionSpace>
using DynamicMDRangePolicy2 = Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>, Kokkos::Schedule<Kokkos::Dynamic>>;

/// The "execution space" of work that already runs inside one host thread (a block of a
/// parallel region): for_each_element loops inline, blas::gemm makes one single-threaded call.
/// Lets the network layers run a chunk of rows per thread with the same code as the
/// whole-batch launches (nn::NetworkFamily's chunked host path).
struct InThread {
  using execution_space = InThread;
  using memory_space = Kokkos::HostSpace;
  static constexpr int concurrency() { return 1; }
  static void fence() {}
};

/// Work inside a host thread reaches what the host reaches.
template <class MemorySpace>
inline constexpr bool accessible_v<InThread, MemorySpace> = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

/// Calls f(r, c) for 0 <= r < rows, 0 <= c < cols in the calling host thread, each row one
/// vectorised loop.
template <class Functor>
void for_each_element(InThread const&, char const*, int rows, int cols, Functor const& f) {
  for (int r = 0; r < rows; ++r) {
    DPK_SIMD_LOOP
    for (int c = 0; c < cols; ++c) f(r, c);
  }
}

/// Calls f(r, c) for 0 <= r < rows, 0 <= c < cols on `space`; kernel label `label`.
/// `f` must not depend on the order of calls (elements are independent).
template <class ExecutionSpace, class Functor>
void for_each_element(ExecutionSpace const& space, char const* label, int rows, int cols, Functor const& f) {
  if (rows <= 0 || cols <= 0) return;
  if constexpr (host_schedule_v<ExecutionSpace>) {
    // Chunks of about 4096 elements, handed out one at a time (a dynamic schedule: a thread on
    // a core shared with another job takes fewer; elements are independent, so the result
    // does not depend on which thread ran which chunk).
    int const chunk = cols >= 4096 ? 1 : 4096 / cols;
    int const nchunks = (rows + chunk - 1) / chunk;
    Kokkos::parallel_for(label, DynamicRangePolicy<ExecutionSpace>(space, 0, nchunks), [=](int const k) {
      int const r_end = (k + 1) * chunk < rows ? (k + 1) * chunk : rows;
      for (int r = k * chunk; r < r_end; ++r) {
        DPK_SIMD_LOOP
        for (int c = 0; c < cols; ++c) f(r, c);
      }
    });
  } else {
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    int const lanes = Policy::vector_length_max() < 32 ? Policy::vector_length_max() : 32;
    Kokkos::parallel_for(
        label, Policy(space, rows, 1, lanes), KOKKOS_LAMBDA(typename Policy::member_type const& team) {
          int const r = team.league_rank();
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](int const c) { f(r, c); });
        });
  }
}

/// Calls f(m) for 0 <= m < n over the vector lanes of `team` on GPUs; on host teams of one
/// thread (how dpk launches its per-atom teams) as one plain loop that vectorises, since the
/// host TeamVectorRange strides by the team size.
template <class Team, class Functor>
KOKKOS_FORCEINLINE_FUNCTION void team_vector_for(Team const& team, int n, Functor const& f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SYCL_DEVICE_ONLY__)
  Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n), f);
#else
  if (team.team_size() == 1) {
    DPK_SIMD_LOOP
    for (int m = 0; m < n; ++m) f(m);
  } else {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n), f);
  }
#endif
}

/// Calls f(r, c) for 0 <= r < rows, 0 <= c < cols within one team: rows over the vector lanes
/// (columns in order) on GPUs; on host teams of one thread rows in order and each row's
/// columns as one vectorised loop (for row-major outputs such as a per-atom M1 x M2 block).
template <class Team, class Functor>
KOKKOS_FORCEINLINE_FUNCTION void team_vector_for_rows(Team const& team, int rows, int cols, Functor const& f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SYCL_DEVICE_ONLY__)
  Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows), [&](int const r) {
    for (int c = 0; c < cols; ++c) f(r, c);
  });
#else
  if (team.team_size() == 1) {
    for (int r = 0; r < rows; ++r) {
      DPK_SIMD_LOOP
      for (int c = 0; c < cols; ++c) f(r, c);
    }
  } else {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows), [&](int const r) {
      for (int c = 0; c < cols; ++c) f(r, c);
    });
  }
#endif
}

}  // namespace dpk
