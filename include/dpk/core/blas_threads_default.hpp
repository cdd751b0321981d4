#pragma once
/// \file blas_threads_default.hpp
/// \brief dpk's default of OpenBLAS threads per call, for programs to apply (dpk-train, dpk-md,
/// pair_style dpk, the benchmarks): the library itself never changes process-wide settings.
#include <dpk/core/threads.hpp>

#include <string>

namespace dpk {

/// Sets OpenBLAS to `threads` threads per call unless the user chose (OPENBLAS_NUM_THREADS or
/// GOTO_NUM_THREADS set), and returns a one-line description for a start banner or log. dpk
/// calls the BLAS from the master thread between Kokkos kernels, so with Kokkos threads 1 is
/// right: OpenBLAS' own threads would compete with the spinning Kokkos workers (docs/tuning.md,
/// "Avoiding oversubscription"). With another BLAS nothing is changed.
inline std::string apply_blas_threads_default(int threads) {
  if (!blas_threads_controllable()) return "BLAS threads: not OpenBLAS (left as configured)";
  if (blas_threads_set_by_user())
    return "BLAS threads: " + std::to_string(blas_threads()) + " (OPENBLAS_NUM_THREADS/GOTO_NUM_THREADS set by the user)";
  set_blas_threads(threads);
  return "BLAS threads: " + std::to_string(blas_threads()) + " (dpk default; set OPENBLAS_NUM_THREADS to override)";
}

}  // namespace dpk
