#pragma once
/// \file program_threads.hpp
/// \brief The thread defaults of dpk's programs (docs/tuning.md): OpenMP binding applied by
/// re-executing the program, and OpenBLAS threads per call (dpk::apply_blas_threads_default,
/// which pair_style dpk calls too). Process-wide changes belong to a program's main, so the
/// library (include/dpk) offers them but never applies them itself.
#include <dpk/core/blas_threads_default.hpp>
#include <dpk/core/host_gemm.hpp>
#include <dpk/core/threads.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace dpk::program {

/// The banner's description of the BLAS kernels: `name` (OpenBLAS' kernel set, "" when another
/// BLAS), whether OPENBLAS_CORETYPE pinned it (`pinned`: its value, or nullptr), whether dpk's
/// own small-matrix kernel takes the networks' products (`own_small`: its instruction set,
/// blas::detail::small_gemm_isa, or "" when blas::detail::small_gemm_enabled is false; with
/// `embedding_only` it takes only the embedding nets' shapes, blas::detail::small_gemm_shape),
/// and, when the pin keeps an AVX-512 CPU (`cpu_avx512`) on
/// kernels without AVX-512, a hint: the environment's choice is kept (dpk never changes it);
/// with dpk's kernel on, only what it does not take runs on those kernels (docs/tuning.md,
/// "BLAS kernels").
inline std::string describe_blas_kernels(std::string const& name, char const* pinned, bool cpu_avx512,
                                         std::string const& own_small, bool embedding_only = false) {
  std::string line = name.empty() ? "BLAS kernels: not OpenBLAS" : "BLAS kernels: OpenBLAS " + name;
  if (!name.empty()) line += pinned ? std::string(" (pinned by OPENBLAS_CORETYPE=") + pinned + ")" : " (OpenBLAS' choice for this CPU)";
  if (!own_small.empty())
    line += embedding_only ? "; the embedding nets' products: dpk's " + own_small +
                                 " kernel, the others: the BLAS (DPK_SMALL_GEMM=1: all on dpk's kernel, 0: all on the BLAS)"
                           : "; the networks' products: dpk's " + own_small + " kernel (DPK_SMALL_GEMM=0: the BLAS)";
  if (pinned && !name.empty() && cpu_avx512 && !blas_kernels_use_avx512(name))
    line += !own_small.empty() ? "; this CPU has AVX-512, which OpenBLAS' kernels leave unused (dpk's kernel covers the "
                        "networks; unset OPENBLAS_CORETYPE to let OpenBLAS use it too: docs/tuning.md, \"BLAS "
                        "kernels\")"
                      : "; this CPU has AVX-512, which these kernels leave unused: unset OPENBLAS_CORETYPE for "
                        "faster GEMMs (docs/tuning.md, \"BLAS kernels\")";
  return line;
}

/// describe_blas_kernels for this process: the linked OpenBLAS, the environment and the CPU.
inline std::string describe_blas_kernels() {
  bool avx512 = false;
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  avx512 = __builtin_cpu_supports("avx512f");
#endif
  std::string own_small;
  bool embedding_only = false;
#if defined(DPK_HAS_SMALL_GEMM)
  if (blas::detail::small_gemm_enabled()) own_small = blas::detail::small_gemm_isa;
  embedding_only = blas::detail::small_gemm_use() == blas::detail::SmallGemmUse::small_shapes;
#endif
  return describe_blas_kernels(blas_kernel_name(), std::getenv("OPENBLAS_CORETYPE"), avx512, own_small,
                               embedding_only);
}

/// CPUs the process was given by its launcher, as far as it can still be known: the count
/// recorded before dpk's re-exec (DPK_AFFINITY_CPUS), else 0 (unknown) when OMP_PROC_BIND is
/// active (the OpenMP runtime binds the main thread to one place when the program loads), else
/// affinity_cpus().
inline int launcher_affinity_cpus() {
  if (char const* v = std::getenv("DPK_AFFINITY_CPUS")) return std::atoi(v);
  if (char const* bind = std::getenv("OMP_PROC_BIND"); bind && std::string(bind) != "false" && std::string(bind) != "FALSE")
    return 0;
  return affinity_cpus();
}

/// Ranks on this node according to the MPI launcher's environment (Open MPI, MPICH/Hydra,
/// MVAPICH, Slurm), or `unknown` when not launched by one. Usable before MPI_Init.
inline int local_ranks_from_environment(int unknown = 1) {
  for (char const* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE"})
    if (char const* v = std::getenv(name)) {
      int const n = std::atoi(v);
      if (n > 0) return n;
    }
  return unknown;
}

/// One environment variable a program sets for itself when the user has not.
struct EnvironmentDefault {
  std::string name;   ///< e.g. "OMP_PROC_BIND"
  std::string value;  ///< e.g. "spread"
};

/// Name of the variable that records which defaults dpk applied (and stops a second re-exec).
inline char const* environment_defaults_marker() { return "DPK_ENVIRONMENT_DEFAULTS"; }

/// Threads the program was asked for before Kokkos starts: `--kokkos-num-threads=N` or
/// `--kokkos-threads=N` (also as two arguments), else the first value of OMP_NUM_THREADS; 0 when
/// neither is given (the OpenMP runtime then uses every CPU of the process).
inline int requested_threads(int argc, char** argv) {
  auto number = [](char const* text) {
    char* end = nullptr;
    long const n = text ? std::strtol(text, &end, 10) : 0;
    return end != text && n > 0 && n < 1 << 20 ? int(n) : 0;
  };
  for (int i = 1; argv && i < argc && argv[i]; ++i)
    for (char const* flag : {"--kokkos-num-threads", "--kokkos-threads"}) {
      std::string const arg = argv[i], name = flag;
      if (arg.compare(0, name.size() + 1, name + "=") == 0) return number(argv[i] + name.size() + 1);
      if (arg == name && i + 1 < argc) return number(argv[i + 1]);
    }
  return number(std::getenv("OMP_NUM_THREADS"));
}

/// dpk's OpenMP binding defaults for a host (OpenMP) build: OMP_PROC_BIND=spread and
/// OMP_PLACES=threads, each only when the user set neither of the two, and only when binding
/// cannot pile ranks onto the same cores (one rank on this node, or ranks that the launcher
/// gave disjoint core sets: affinity mask x local ranks <= cores) and when the threads
/// (`threads`, from requested_threads; 0 = all) fill the CPUs of the process: fewer threads
/// than CPUs stay unbound, so that the OS can move them off a core another job is busy on
/// (docs/tuning.md: 1 thread on a 2-core node with a busy loop on core 0 took 191 ms per
/// water step bound to core 0, 91 ms unbound). DPK_THREAD_DEFAULTS=0 turns all defaults off.
inline std::vector<EnvironmentDefault> openmp_binding_defaults(int threads = 0) {
  std::vector<EnvironmentDefault> out;
  if (char const* off = std::getenv("DPK_THREAD_DEFAULTS"); off && std::string(off) == "0") return out;
  if (environment_has("OMP_PROC_BIND") || environment_has("OMP_PLACES")) return out;
  int const ranks = local_ranks_from_environment();
  int const mask = affinity_cpus();
  long const cores = long(std::thread::hardware_concurrency());
  if (ranks > 1 && (mask <= 0 || cores <= 0 || long(mask) * ranks > cores)) return out;
  if (threads > 0 && mask > 0 && threads < mask) return out;
  out.push_back({"OMP_PROC_BIND", "spread"});
  out.push_back({"OMP_PLACES", "threads"});
  return out;
}

/// Sets `defaults` that are not yet in the environment and re-executes the program
/// (/proc/self/exe, same arguments) so that the OpenMP runtime, which reads its environment
/// when the program is loaded, sees them. Call first in main, before MPI and Kokkos start.
/// Returns only when nothing needed setting, after a re-exec (the marker variable is set), or
/// when the re-exec failed (the program then runs with the environment it had).
inline void reexec_with_environment_defaults(char** argv, std::vector<EnvironmentDefault> const& defaults) {
#if defined(__linux__)
  if (environment_has(environment_defaults_marker())) return;
  std::string applied;
  std::vector<std::string> set_here;
  for (auto const& d : defaults) {
    if (environment_has(d.name.c_str())) continue;
    ::setenv(d.name.c_str(), d.value.c_str(), 0);
    set_here.push_back(d.name);
    applied += (applied.empty() ? "" : " ") + d.name + "=" + d.value;
  }
  if (applied.empty()) return;
  ::setenv(environment_defaults_marker(), applied.c_str(), 1);
  ::setenv("DPK_AFFINITY_CPUS", std::to_string(affinity_cpus()).c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // exec failed: continue unchanged (the runtime already read the old environment).
  for (auto const& name : set_here) ::unsetenv(name.c_str());
  ::unsetenv(environment_defaults_marker());
  ::unsetenv("DPK_AFFINITY_CPUS");
#else
  (void)argv;
  (void)defaults;
#endif
}

/// The defaults a re-exec applied ("OMP_PROC_BIND=spread OMP_PLACES=threads"), or "".
inline std::string applied_environment_defaults() {
  char const* v = std::getenv(environment_defaults_marker());
  return v ? std::string(v) : std::string();
}

/// OpenBLAS threads per call that dpk's programs choose when the user did not: 1, whatever the
/// Kokkos threads. dpk calls the BLAS from the master thread between Kokkos kernels, so BLAS
/// threads of their own only compete with the spinning Kokkos workers for the same cores
/// (docs/tuning.md, "Avoiding oversubscription"; dpk-md, full water model, 192 atoms, 2 threads:
/// 26-38 ms per step with OpenBLAS' own default, 15.5-16 ms with 1).
inline int default_blas_threads(int kokkos_threads) {
  (void)kokkos_threads;
  return 1;
}

/// Applies dpk's BLAS default for a program with `kokkos_threads` host threads (see
/// default_blas_threads) and returns the start banner's line: the binding variables (marked
/// when dpk's re-exec set them) and the BLAS threads.
inline std::string configure_threads(int kokkos_threads) {
  std::string const blas = apply_blas_threads_default(default_blas_threads(kokkos_threads));
  std::string const applied = applied_environment_defaults();
  auto shown = [](char const* name) {
    char const* v = std::getenv(name);
    return std::string(name) + "=" + (v ? v : "(unset)");
  };
  return "threads: " + std::to_string(kokkos_threads) + ", " + shown("OMP_PROC_BIND") + " " + shown("OMP_PLACES") +
         (applied.empty() ? std::string() : " (dpk default; DPK_THREAD_DEFAULTS=0 turns it off)") + "; " + blas;
}

}  // namespace dpk::program
