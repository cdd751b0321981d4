// dpk-md: a minimal velocity-Verlet NVE molecular dynamics run through <dpk/potential.hpp>.
//
//   dpk-md -m model.dpk [-s SYSTEM] [-n STEPS] [--dt FS] [--temperature K] [--every K] [--seed S]
//
// Starts from frame 0 of a deepmd/npy system (default: the water box, examples/water/data/data_0)
// with Maxwell-Boltzmann velocities at --temperature (zero total momentum), integrates Newton's
// equations at constant energy and prints step, potential, kinetic and total energy and the
// temperature every --every steps, then the total-energy drift per atom and picosecond. A
// model whose forces are the exact gradient of its energy conserves the total energy up to the
// O(dt^2) fluctuation of the integrator: the drift is a direct check of that.
//
// Units: A, fs, eV, amu. Kokkos options (--kokkos-threads=N, ...) and OMP_NUM_THREADS apply,
// with dpk-train's thread defaults (docs/tuning.md): OMP_PROC_BIND=spread OMP_PLACES=threads
// when the user set neither and the threads fill the CPUs (applied by re-executing before OpenMP
// starts; DPK_THREAD_DEFAULTS=0 turns it off), and one OpenBLAS thread per call unless
// OPENBLAS_NUM_THREADS is set; the header's "# threads:" line shows the result.
#include <dpk/potential.hpp>

#include "program_threads.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#ifdef DPK_MD_HAS_DEFAULT_SYSTEM
/// The example water box (generated default_system.cpp, examples/md/CMakeLists.txt).
char const* dpk_md_default_system();
#endif

namespace {

/// Boltzmann's constant in eV/K (CODATA 2018, exact).
constexpr double boltzmann_ev_per_k = 8.617333262e-5;
/// One amu A^2 / fs^2 in eV: 1.66053906660e-27 kg * 1e-20 m^2 / 1e-30 s^2 / 1.602176634e-19 J/eV.
/// Kinetic energy (eV) = 0.5 m v^2 * this; acceleration (A/fs^2) = F (eV/A) / (m * this).
constexpr double amu_a2_per_fs2_in_ev = 1.66053906660e-27 * 1e10 / 1.602176634e-19;

/// Atomic masses (amu) of the elements dpk-md knows by name.
double element_mass(std::string const& element) {
  static std::map<std::string, double> const masses = {{"H", 1.008}, {"C", 12.011}, {"N", 14.007},
                                                       {"O", 15.999}, {"Na", 22.990}, {"Cl", 35.45}};
  auto const it = masses.find(element);
  if (it == masses.end())
    throw dpk::Error("dpk-md: no mass known for element '" + element + "' (known: H C N O Na Cl)");
  return it->second;
}

struct Options {
  std::string model, system, precision = "model";
  long steps = 2000;
  double dt = 0.5;            // fs
  double temperature = 300;   // K
  long every = 100;
  int frame = 0;
  unsigned long seed = 1;
  double max_deviation = -1;  // eV/atom; < 0: not checked
  double max_drift = -1;      // eV/atom/ps (absolute value); < 0: not checked
};

/// The MD state: positions (A), velocities (A/fs), masses (amu), forces (eV/A).
struct State {
  int natoms = 0;
  std::vector<double> position, velocity, mass, force;
  std::vector<int> types;
  std::vector<double> box;  // 9 values, or empty (non-periodic system)
};

double kinetic_energy(State const& s) {
  double twice = 0;
  for (int a = 0; a < s.natoms; ++a)
    for (int d = 0; d < 3; ++d) twice += s.mass[a] * s.velocity[3 * a + d] * s.velocity[3 * a + d];
  return 0.5 * twice * amu_a2_per_fs2_in_ev;
}

/// Temperature from the kinetic energy with 3N - 3 degrees of freedom (total momentum is zero).
double temperature_of(double kinetic, int natoms) {
  int const dof = std::max(1, 3 * natoms - 3);
  return 2 * kinetic / (dof * boltzmann_ev_per_k);
}

/// Maxwell-Boltzmann velocities at `kelvin` from `seed`, zero total momentum, rescaled so that
/// the temperature is exactly `kelvin`.
void initial_velocities(State& s, double kelvin, unsigned long seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  s.velocity.assign(std::size_t(3 * s.natoms), 0.0);
  double momentum[3] = {0, 0, 0}, total_mass = 0;
  for (int a = 0; a < s.natoms; ++a) {
    double const sigma = std::sqrt(boltzmann_ev_per_k * kelvin / (s.mass[a] * amu_a2_per_fs2_in_ev));
    for (int d = 0; d < 3; ++d) {
      s.velocity[3 * a + d] = sigma * normal(rng);
      momentum[d] += s.mass[a] * s.velocity[3 * a + d];
    }
    total_mass += s.mass[a];
  }
  for (int a = 0; a < s.natoms; ++a)
    for (int d = 0; d < 3; ++d) s.velocity[3 * a + d] -= momentum[d] / total_mass;
  double const now = temperature_of(kinetic_energy(s), s.natoms);
  double const factor = now > 0 ? std::sqrt(kelvin / now) : 0.0;
  for (double& v : s.velocity) v *= factor;
}

template <class Scalar>
int run(Options const& o) {
  dpk::Potential<Scalar> potential(o.model);
  dpk::System const system = dpk::read_system(o.system, potential.type_map());
  if (o.frame < 0 || o.frame >= system.nframes)
    throw dpk::Error("dpk-md: --frame " + std::to_string(o.frame) + " is outside the system's " +
                     std::to_string(system.nframes) + " frames");
  State s;
  s.natoms = system.natoms;
  s.types = system.types;
  std::size_t const n3 = std::size_t(3 * s.natoms);
  s.position.assign(system.coord.begin() + std::ptrdiff_t(o.frame * n3),
                    system.coord.begin() + std::ptrdiff_t((o.frame + 1) * n3));
  if (system.periodic) s.box.assign(system.box.begin() + 9 * o.frame, system.box.begin() + 9 * (o.frame + 1));
  for (int t : s.types) {
    if (potential.type_map().empty())
      throw dpk::Error("dpk-md: the model has no type_map, so element masses are unknown");
    s.mass.push_back(element_mass(potential.type_map()[std::size_t(t)]));
  }
  initial_velocities(s, o.temperature, o.seed);

  std::printf("# dpk-md: model %s (trained in %s, run in %s), system %s frame %d: %d atoms, %s\n", o.model.c_str(),
              potential.model_precision().c_str(), sizeof(Scalar) == 8 ? "float64" : "float32", o.system.c_str(),
              o.frame, s.natoms, s.box.empty() ? "non-periodic" : "periodic");
  std::printf("# NVE velocity Verlet: %ld steps of %g fs, initial temperature %g K (seed %lu), %s threads %d\n",
              o.steps, o.dt, o.temperature, o.seed, dpk::DefaultExecutionSpace::name(),
              dpk::DefaultExecutionSpace().concurrency());
  std::printf("# %s\n", dpk::program::configure_threads(dpk::DefaultExecutionSpace().concurrency()).c_str());
  std::printf("#%9s %12s %16s %14s %16s %10s\n", "step", "time_fs", "potential_eV", "kinetic_eV", "total_eV",
              "temp_K");

  dpk::PotentialResult result;
  potential.compute(result, s.position, s.types, s.box);
  s.force = result.force;
  std::vector<double> sample_time, sample_total;
  double const total0 = result.energy[0] + kinetic_energy(s);
  double max_deviation = 0;
  auto report = [&](long step) {
    double const kinetic = kinetic_energy(s);
    double const total = result.energy[0] + kinetic;
    std::printf("%10ld %12.2f %16.6f %14.6f %16.6f %10.2f\n", step, step * o.dt, result.energy[0], kinetic, total,
                temperature_of(kinetic, s.natoms));
    std::fflush(stdout);
    sample_time.push_back(step * o.dt);
    sample_total.push_back(total);
  };
  report(0);
  Kokkos::Timer timer;
  for (long step = 1; step <= o.steps; ++step) {
    // v(t + dt/2) = v(t) + dt/2 a(t);  x(t + dt) = x(t) + dt v(t + dt/2)
    for (int a = 0; a < s.natoms; ++a) {
      double const scale = 0.5 * o.dt / (s.mass[a] * amu_a2_per_fs2_in_ev);
      for (int d = 0; d < 3; ++d) {
        s.velocity[3 * a + d] += scale * s.force[3 * a + d];
        s.position[3 * a + d] += o.dt * s.velocity[3 * a + d];
      }
    }
    potential.compute(result, s.position, s.types, s.box);
    s.force = result.force;
    // v(t + dt) = v(t + dt/2) + dt/2 a(t + dt)
    for (int a = 0; a < s.natoms; ++a) {
      double const scale = 0.5 * o.dt / (s.mass[a] * amu_a2_per_fs2_in_ev);
      for (int d = 0; d < 3; ++d) s.velocity[3 * a + d] += scale * s.force[3 * a + d];
    }
    double const total = result.energy[0] + kinetic_energy(s);
    if (!std::isfinite(total)) throw dpk::Error("dpk-md: the total energy is not finite at step " + std::to_string(step));
    max_deviation = std::max(max_deviation, std::abs(total - total0));
    if (step % o.every == 0 || step == o.steps) report(step);
  }
  double const seconds = timer.seconds();

  // Drift: least-squares slope of the total energy against time over the reported samples.
  double slope = 0;
  std::size_t const n = sample_time.size();
  if (n >= 2) {
    double mt = 0, me = 0;
    for (std::size_t k = 0; k < n; ++k) {
      mt += sample_time[k];
      me += sample_total[k];
    }
    mt /= double(n);
    me /= double(n);
    double stt = 0, ste = 0;
    for (std::size_t k = 0; k < n; ++k) {
      stt += (sample_time[k] - mt) * (sample_time[k] - mt);
      ste += (sample_time[k] - mt) * (sample_total[k] - me);
    }
    slope = stt > 0 ? ste / stt : 0.0;  // eV/fs
  }
  double const drift = slope * 1000.0 / s.natoms;  // eV/atom/ps
  std::printf("# %ld steps (%g ps) in %.2f s (%.2f ms/step)\n", o.steps, o.steps * o.dt * 1e-3, seconds,
              o.steps > 0 ? seconds / o.steps * 1e3 : 0.0);
  std::printf("# total energy: start %.6f eV, largest deviation %.3e eV/atom\n", total0, max_deviation / s.natoms);
  std::printf("drift: %.3e eV/atom/ps (least-squares slope of the total energy over %zu samples)\n", drift, n);
  if (potential.neighbors_dropped() > 0)
    std::printf("# warning: %ld neighbours dropped beyond the model's sel (the energy is not smooth)\n",
                potential.neighbors_dropped());
  // Energy-conservation bounds (for tests and scripts): exit status 3 when one is exceeded.
  int status = 0;
  if (o.max_deviation >= 0 && !(max_deviation / s.natoms <= o.max_deviation)) {
    std::fprintf(stderr, "dpk-md: error: the total energy deviated by %.3e eV/atom from its start, more than --max-deviation %.3e\n",
                 max_deviation / s.natoms, o.max_deviation);
    status = 3;
  }
  if (o.max_drift >= 0 && !(std::fabs(drift) <= o.max_drift)) {
    std::fprintf(stderr, "dpk-md: error: the total energy drifts by %.3e eV/atom/ps, more than --max-drift %.3e\n", drift,
                 o.max_drift);
    status = 3;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(KOKKOS_ENABLE_OPENMP)
  // Before the OpenMP runtime has threads: binding defaults need a re-exec.
  dpk::program::reexec_with_environment_defaults(
      argv, dpk::program::openmp_binding_defaults(dpk::program::requested_threads(argc, argv)));
#endif
  // Kokkos::initialize prints its own help for --help and leaves the argument in place; hide
  // --help from Kokkos behind a placeholder, then restore it for CLI11 (--kokkos-help still
  // prints Kokkos' help).
  static char placeholder[] = "--dpk-help-placeholder";
  static char help[] = "--help";
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) argv[i] = placeholder;
  dpk::translate_kokkos_arguments(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (argv[i] == placeholder) argv[i] = help;

  Options o;
#ifdef DPK_MD_HAS_DEFAULT_SYSTEM
  o.system = dpk_md_default_system();
#endif
  CLI::App app{"dpk-md: velocity-Verlet NVE molecular dynamics with a dpk model (<dpk/potential.hpp>)"};
  app.add_option("-m,--model", o.model, "model file written by dpk-train")->required()->check(CLI::ExistingFile);
  app.add_option("-s,--system", o.system, "deepmd/npy system to start from")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--frame", o.frame, "frame of the system to start from")->capture_default_str();
  app.add_option("-n,--steps", o.steps, "number of steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--dt", o.dt, "time step (fs)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--temperature", o.temperature, "initial temperature (K)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--every", o.every, "print every this many steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the initial velocities")->capture_default_str();
  app.add_option("--precision", o.precision, "model: the model's training precision; or float64, float32")
      ->check(CLI::IsMember({"model", "float64", "float32"}))
      ->capture_default_str();
  app.add_option("--max-deviation", o.max_deviation,
                 "exit with status 3 when the total energy deviates from its start by more than this (eV/atom)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-drift", o.max_drift,
                 "exit with status 3 when the total energy drifts by more than this (eV/atom/ps, absolute)")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (CLI::ParseError const& e) {
    return app.exit(e);
  }
  if (o.system.empty()) {
    std::cerr << "dpk-md: error: --system is required (no default water box in this build)\n";
    return 1;
  }
  try {
    std::string precision = o.precision;
    if (precision == "model") precision = dpk::read_model_file(o.model).precision;
    return precision == "float32" ? run<float>(o) : run<double>(o);
  } catch (std::exception const& e) {
    std::cerr << "dpk-md: error: " << e.what() << std::endl;
    return 1;
  }
}
