#pragma once
/// \file threads.hpp
/// \brief Threads of the host BLAS inside Kokkos' host threads (docs/tuning.md): queries, and
/// a setter that only a program calls (the library never changes process-wide settings; the
/// defaults dpk's programs apply are in examples/common/program_threads.hpp).
///
/// dpk calls the host BLAS (OpenBLAS through Kokkos Kernels' TPL) from the master thread,
/// between Kokkos kernels. A pthreads OpenBLAS starts its own worker threads (as many as
/// OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else all cores), which then compete with Kokkos'
/// OpenMP threads: these spin-wait between kernels, and OpenBLAS' workers spin after each call.
/// The functions here query and set OpenBLAS' thread count at run time when OpenBLAS is linked
/// (weak references: with another BLAS they report "unknown" and do nothing).

#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
extern "C" {
/// OpenBLAS' run-time thread count setter (weak: null when OpenBLAS is not linked).
void openblas_set_num_threads(int) __attribute__((weak));
/// OpenBLAS' current thread count (weak: null when OpenBLAS is not linked).
int openblas_get_num_threads() __attribute__((weak));
/// The kernel set a DYNAMIC_ARCH OpenBLAS chose at load time ("Haswell", "SkylakeX", ...; weak).
char* openblas_get_corename() __attribute__((weak));
}
#define DPK_HAS_WEAK_OPENBLAS 1
#endif

namespace dpk {

/// Whether OpenBLAS' thread controls are linked into this program.
inline bool blas_threads_controllable() {
#if defined(DPK_HAS_WEAK_OPENBLAS)
  return openblas_set_num_threads != nullptr && openblas_get_num_threads != nullptr;
#else
  return false;
#endif
}

/// Threads OpenBLAS uses for one call, or -1 when that is unknown (another BLAS).
inline int blas_threads() {
#if defined(DPK_HAS_WEAK_OPENBLAS)
  if (blas_threads_controllable()) return openblas_get_num_threads();
#endif
  return -1;
}

/// Sets OpenBLAS' threads per call (>= 1); returns false when OpenBLAS is not linked.
inline bool set_blas_threads(int threads) {
#if defined(DPK_HAS_WEAK_OPENBLAS)
  if (!blas_threads_controllable()) return false;
  openblas_set_num_threads(threads < 1 ? 1 : threads);
  return true;
#else
  (void)threads;
  return false;
#endif
}

/// Name of the kernel set OpenBLAS runs ("Haswell", "SkylakeX", ...: its own choice for this CPU
/// unless OPENBLAS_CORETYPE pins one), or "" when OpenBLAS is not linked.
inline std::string blas_kernel_name() {
#if defined(DPK_HAS_WEAK_OPENBLAS)
  if (openblas_get_corename != nullptr)
    if (char const* name = openblas_get_corename()) return name;
#endif
  return {};
}

/// Whether OpenBLAS' kernel set `name` (blas_kernel_name) uses AVX-512.
inline bool blas_kernels_use_avx512(std::string const& name) {
  std::string lower;
  for (char c : name) lower += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (char const* set : {"skylakex", "cooperlake", "sapphirerapids"})
    if (lower == set) return true;
  return false;
}

/// Whether the environment variable `name` is set (to anything, even empty).
inline bool environment_has(char const* name) { return std::getenv(name) != nullptr; }

/// Whether the user chose the BLAS threads through the environment (OPENBLAS_NUM_THREADS or
/// GOTO_NUM_THREADS; OMP_NUM_THREADS is meant for Kokkos and does not count).
inline bool blas_threads_set_by_user() {
  return environment_has("OPENBLAS_NUM_THREADS") || environment_has("GOTO_NUM_THREADS");
}

/// CPUs this process may run on (its affinity mask, as set by mpirun's binding or taskset), or
/// 0 when unknown.
inline int affinity_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  return 0;
}

}  // namespace dpk
