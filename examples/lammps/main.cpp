/// \file main.cpp
/// \brief dpk-lmp: Debian's LAMMPS (liblammps) with pair_style dpk registered, run like
/// `lmp`: `dpk-lmp -in in.water [LAMMPS options]`, also under `mpirun -np N`.
///
/// Debian 12's LAMMPS has no PLUGIN package, so the style cannot be loaded into `lmp`; this
/// program creates the LAMMPS instance itself, adds "dpk" to its pair-style map and then reads
/// the input exactly as `lmp -in` does (docs/md.md, section LAMMPS). Kokkos options
/// (--kokkos-num-threads=N, or OMP_NUM_THREADS) are taken before LAMMPS sees the command line.
/// dpk-train's OpenMP binding defaults apply (docs/tuning.md: OMP_PROC_BIND=spread
/// OMP_PLACES=threads when the user set neither, binding cannot stack ranks on the same cores and
/// the threads fill the CPUs; applied by re-executing before MPI and OpenMP start;
/// DPK_THREAD_DEFAULTS=0 turns them off); pair_style dpk sets the BLAS threads and logs both.

#include "input.h"
#include "lammps.h"
#include "pair_dpk.h"
#include "program_threads.hpp"

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
#if defined(KOKKOS_ENABLE_OPENMP)
  // Before MPI and before the OpenMP runtime has threads: binding defaults need a re-exec.
  dpk::program::reexec_with_environment_defaults(
      argv, dpk::program::openmp_binding_defaults(dpk::program::requested_threads(argc, argv)));
#endif
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, status = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      LAMMPS_NS::LAMMPS lammps(argc, argv, MPI_COMM_WORLD);
      LAMMPS_NS::PairDPK::register_style(&lammps);
      lammps.input->file();
    } catch (std::exception const& e) {
      // Only a LAMMPS built with LAMMPS_EXCEPTIONS gets here (Debian's is not: its errors end
      // the process with exit status 1). LAMMPS has printed its ERROR line; an error raised on
      // one rank only must stop the others too.
      std::fprintf(stderr, "dpk-lmp: %s\n", e.what());
      std::fflush(stdout);
      if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
