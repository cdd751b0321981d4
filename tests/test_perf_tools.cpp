// Performance tooling: the BLAS thread controls of dpk/core/threads.hpp, the BLAS kernel banner and
// the programs' thread defaults (the trainer's per-step timing file is tested in test_train.cpp).
#include <doctest/doctest.h>

#include <dpk/core/blas_threads_default.hpp>
#include <dpk/core/threads.hpp>
#include "program_threads.hpp"  // examples/common: the programs' thread defaults

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

TEST_CASE("BLAS threads: set and read back through OpenBLAS when it is linked") {
  if (!dpk::blas_threads_controllable()) {
    CHECK(dpk::blas_threads() == -1);
    CHECK_FALSE(dpk::set_blas_threads(1));
    return;
  }
  int const before = dpk::blas_threads();
  CHECK(before >= 1);
  CHECK(dpk::set_blas_threads(1));
  CHECK(dpk::blas_threads() == 1);
  CHECK(dpk::set_blas_threads(0));  // clamped to one thread
  CHECK(dpk::blas_threads() == 1);
  // The user's OPENBLAS_NUM_THREADS wins over dpk's default.
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::string const kept = dpk::apply_blas_threads_default(2);
  CHECK(kept.find("set by the user") != std::string::npos);
  CHECK(dpk::blas_threads() == 1);
  ::unsetenv("OPENBLAS_NUM_THREADS");
  ::unsetenv("GOTO_NUM_THREADS");
  std::string const chosen = dpk::apply_blas_threads_default(1);
  CHECK(chosen.find("dpk default") != std::string::npos);
  CHECK(dpk::blas_threads() == 1);
  dpk::set_blas_threads(before);
}

TEST_CASE("BLAS kernels: the banner names OpenBLAS' kernel set and flags a pin that leaves AVX-512 unused") {
  using dpk::program::describe_blas_kernels;
  CHECK(describe_blas_kernels("", nullptr, true, "") == "BLAS kernels: not OpenBLAS");
  CHECK(describe_blas_kernels("SkylakeX", nullptr, true, "") ==
        "BLAS kernels: OpenBLAS SkylakeX (OpenBLAS' choice for this CPU)");
  // Pinned to AVX2 kernels on an AVX-512 CPU: kept, with a hint naming the variable.
  std::string const pinned = describe_blas_kernels("Haswell", "Haswell", true, "AVX-512");
  CHECK(pinned.find("pinned by OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(pinned.find("dpk's AVX-512 kernel") != std::string::npos);
  CHECK(pinned.find("unset OPENBLAS_CORETYPE") != std::string::npos);
  CHECK(pinned.find("dpk's kernel covers the networks") != std::string::npos);
  // With dpk's kernel off (DPK_SMALL_GEMM=0) the BLAS runs every product: the plain hint.
  std::string const pinned_blas = describe_blas_kernels("Haswell", "Haswell", true, "");
  CHECK(pinned_blas.find("unset OPENBLAS_CORETYPE for faster GEMMs") != std::string::npos);
  CHECK(pinned_blas.find("dpk's") == std::string::npos);
  // An AVX2 CPU with dpk's AVX2 kernel on: named, no hint.
  CHECK(describe_blas_kernels("Zen", nullptr, false, "AVX2") ==
        "BLAS kernels: OpenBLAS Zen (OpenBLAS' choice for this CPU); the networks' products: dpk's AVX2 kernel "
        "(DPK_SMALL_GEMM=0: the BLAS)");
  // The AVX2 default with a host BLAS: dpk's kernel takes the embedding nets' shapes only.
  CHECK(describe_blas_kernels("Zen", nullptr, false, "AVX2", true) ==
        "BLAS kernels: OpenBLAS Zen (OpenBLAS' choice for this CPU); the embedding nets' products: dpk's AVX2 "
        "kernel, the others: the BLAS (DPK_SMALL_GEMM=1: all on dpk's kernel, 0: all on the BLAS)");
  // No hint when the CPU has no AVX-512, or when the pinned set uses it.
  CHECK(describe_blas_kernels("Haswell", "Haswell", false, "") ==
        "BLAS kernels: OpenBLAS Haswell (pinned by OPENBLAS_CORETYPE=Haswell)");
  CHECK(describe_blas_kernels("Cooperlake", "cooperlake", true, "").find("unset") == std::string::npos);
  CHECK(dpk::blas_kernels_use_avx512("SapphireRapids"));
  CHECK_FALSE(dpk::blas_kernels_use_avx512("Zen"));
  // This process: OpenBLAS (when linked) names the set it runs.
  if (dpk::blas_threads_controllable()) CHECK_FALSE(dpk::blas_kernel_name().empty());
  CHECK(describe_blas_kernels().find("BLAS kernels: ") == 0);
}

namespace {

/// Sets (or with nullptr unsets) an environment variable for one scope, restoring it after.
struct ScopedEnvironment {
  std::string name;
  bool had = false;
  std::string old;
  ScopedEnvironment(char const* n, char const* value) : name(n) {
    if (char const* v = std::getenv(n)) {
      had = true;
      old = v;
    }
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~ScopedEnvironment() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("thread defaults: binding only when the user chose none and it is safe") {
  ScopedEnvironment off("DPK_THREAD_DEFAULTS", nullptr), bind("OMP_PROC_BIND", nullptr), places("OMP_PLACES", nullptr),
      ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr), hydra("MPI_LOCALNRANKS", nullptr),
      mv2("MV2_COMM_WORLD_LOCAL_SIZE", nullptr), slurm("SLURM_NTASKS_PER_NODE", nullptr);
  auto defaults = dpk::program::openmp_binding_defaults();
  REQUIRE(defaults.size() == 2);
  CHECK(defaults[0].name == "OMP_PROC_BIND");
  CHECK(defaults[0].value == "spread");
  CHECK(defaults[1].name == "OMP_PLACES");
  CHECK(defaults[1].value == "threads");
  {
    ScopedEnvironment user("OMP_PLACES", "cores");
    CHECK(dpk::program::openmp_binding_defaults().empty());
  }
  {
    ScopedEnvironment disabled("DPK_THREAD_DEFAULTS", "0");
    CHECK(dpk::program::openmp_binding_defaults().empty());
  }
  {
    // More ranks than cores with unrestricted masks: binding would stack ranks on the same cores.
    std::string const many = std::to_string(std::thread::hardware_concurrency() + 1);
    ScopedEnvironment ranks("OMPI_COMM_WORLD_LOCAL_SIZE", many.c_str());
    CHECK(dpk::program::local_ranks_from_environment() == int(std::thread::hardware_concurrency()) + 1);
    CHECK(dpk::program::openmp_binding_defaults().empty());
  }
  {
    ScopedEnvironment recorded("DPK_AFFINITY_CPUS", "3");
    CHECK(dpk::program::launcher_affinity_cpus() == 3);
  }
  {
    ScopedEnvironment recorded("DPK_AFFINITY_CPUS", nullptr), user("OMP_PROC_BIND", "close");
    CHECK(dpk::program::launcher_affinity_cpus() == 0);  // bound at load time: unknown
  }
  CHECK(dpk::affinity_cpus() >= 1);
  {
    // Threads that fill the process's CPUs are bound; fewer stay unbound (busy-node case).
    int const cpus = dpk::affinity_cpus();
    CHECK(dpk::program::openmp_binding_defaults(cpus).size() == 2);
    CHECK(dpk::program::openmp_binding_defaults(cpus + 1).size() == 2);
    if (cpus > 1) CHECK(dpk::program::openmp_binding_defaults(cpus - 1).empty());
    ScopedEnvironment omp("OMP_NUM_THREADS", "3,2");
    char arg0[] = "dpk-train", eq[] = "--kokkos-num-threads=5", old_flag[] = "--kokkos-threads", two[] = "2",
         bad[] = "--kokkos-threads=x";
    char* none[] = {arg0, nullptr};
    char* with_eq[] = {arg0, eq, nullptr};
    char* separate[] = {arg0, old_flag, two, nullptr};
    char* invalid[] = {arg0, bad, nullptr};
    CHECK(dpk::program::requested_threads(1, none) == 3);
    CHECK(dpk::program::requested_threads(2, with_eq) == 5);
    CHECK(dpk::program::requested_threads(3, separate) == 2);
    CHECK(dpk::program::requested_threads(2, invalid) == 0);
    ScopedEnvironment unset("OMP_NUM_THREADS", nullptr);
    CHECK(dpk::program::requested_threads(1, none) == 0);
  }
  // Nothing to apply: returns without re-executing.
  ScopedEnvironment user("OMP_PROC_BIND", "false");
  dpk::program::reexec_with_environment_defaults(nullptr, {{"OMP_PROC_BIND", "spread"}});
  CHECK(std::string(std::getenv("OMP_PROC_BIND")) == "false");
}
