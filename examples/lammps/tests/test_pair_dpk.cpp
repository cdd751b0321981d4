// pair_style dpk inside Debian's LAMMPS (in this process, one rank): step-0 energy, forces,
// virial, per-atom energies (compute pe/atom) and per-atom virials (compute stress/atom) equal
// dpk::Potential::compute on the same periodic configuration (orthogonal and triclinic cells,
// cells smaller than 2 rcut). (Bad input is tested through dpk-lmp: Debian's LAMMPS is built
// without LAMMPS_EXCEPTIONS, so its errors end the process.)
// The model: DPK_LAMMPS_TEST_MODEL (the tiny model of the ctest fixture); the water box:
// DPK_WATER_SYSTEM (examples/water/data/data_0).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "atom.h"
#include "compute.h"
#include "domain.h"
#include "force.h"
#include "input.h"
#include "lammps.h"
#include "modify.h"
#include "pair.h"
#include "pair_dpk.h"

#include <dpk/core/threads.hpp>
#include <dpk/potential.hpp>

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

std::string environment(char const* name) {
  char const* value = std::getenv(name);
  REQUIRE_MESSAGE(value != nullptr, name, " is not set");
  return value;
}

std::string const& model_path() {
  static std::string const path = environment("DPK_LAMMPS_TEST_MODEL");
  return path;
}

/// A scratch folder for data and dump files, removed at exit.
std::filesystem::path scratch() {
  static struct Dir {
    std::filesystem::path path;
    Dir() {
      path = std::filesystem::temp_directory_path() / ("dpk_test_pair_dpk_" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() { std::filesystem::remove_all(path); }
  } dir;
  return dir.path;
}

/// A periodic configuration: positions, model types (0 = O, 1 = H), cell rows in LAMMPS'
/// restricted triclinic form a = (lx, 0, 0), b = (xy, ly, 0), c = (xz, yz, lz).
struct Configuration {
  std::vector<double> coord;
  std::vector<int> types;
  double lx = 0, ly = 0, lz = 0, xy = 0, xz = 0, yz = 0;
  std::vector<double> box() const { return {lx, 0, 0, xy, ly, 0, xz, yz, lz}; }
};

Configuration water_box() {
  auto const system = dpk::read_system(environment("DPK_WATER_SYSTEM"), {"O", "H"});
  Configuration c;
  c.coord.assign(system.coord.begin(), system.coord.begin() + 3 * system.natoms);
  c.types = system.types;
  c.lx = system.box[0];
  c.ly = system.box[4];
  c.lz = system.box[8];
  return c;
}

/// The atoms of the water box whose wrapped position lies inside [0, edge)^3, in a cell of edge
/// `edge` (close contacts across the new faces are possible: the check is switched off).
Configuration water_cube(double edge) {
  auto const water = water_box();
  Configuration c;
  double const l[3] = {water.lx, water.ly, water.lz};
  for (std::size_t a = 0; a < water.types.size(); ++a) {
    double x[3];
    bool inside = true;
    for (int d = 0; d < 3; ++d) {
      x[d] = water.coord[3 * a + std::size_t(d)] - l[d] * std::floor(water.coord[3 * a + std::size_t(d)] / l[d]);
      inside = inside && x[d] < edge;
    }
    if (!inside) continue;
    c.coord.insert(c.coord.end(), x, x + 3);
    c.types.push_back(water.types[a]);
  }
  c.lx = c.ly = c.lz = edge;
  return c;
}

/// Writes `c` as a LAMMPS data file (types 1 = O, 2 = H; ids 1..n in order).
std::string write_data(Configuration const& c, std::string const& name) {
  auto const path = (scratch() / name).string();
  std::ofstream out(path);
  out.precision(17);
  out << "test configuration\n\n" << c.types.size() << " atoms\n2 atom types\n\n";
  out << "0 " << c.lx << " xlo xhi\n0 " << c.ly << " ylo yhi\n0 " << c.lz << " zlo zhi\n";
  if (c.xy != 0 || c.xz != 0 || c.yz != 0) out << c.xy << " " << c.xz << " " << c.yz << " xy xz yz\n";
  out << "\nMasses\n\n1 15.999\n2 1.008\n\nAtoms # atomic\n\n";
  for (std::size_t a = 0; a < c.types.size(); ++a)
    out << a + 1 << " " << c.types[a] + 1 << " " << c.coord[3 * a] << " " << c.coord[3 * a + 1] << " "
        << c.coord[3 * a + 2] << "\n";
  return path;
}

/// One LAMMPS instance (no screen or log output) with pair_style dpk registered.
struct Lammps {
  std::unique_ptr<LAMMPS_NS::LAMMPS> lmp;
  Lammps() {
    char const* args[] = {"test_pair_dpk", "-log", "none", "-screen", "none", "-nocite"};
    lmp = std::make_unique<LAMMPS_NS::LAMMPS>(6, const_cast<char**>(args), MPI_COMM_WORLD);
    LAMMPS_NS::PairDPK::register_style(lmp.get());
  }
  void operator()(std::string const& command) { lmp->input->one(command); }
  LAMMPS_NS::Compute* compute(std::string const& id) const {
    int const index = lmp->modify->find_compute(id);
    REQUIRE(index >= 0);
    return lmp->modify->compute[index];
  }
};

/// The commands that set up `data` with the model (`pair` lines may be replaced).
void setup(Lammps& lammps, std::string const& data, std::string const& pair_style) {
  lammps("units metal");
  lammps("boundary p p p");
  lammps("atom_style atomic");
  lammps("atom_modify map array");
  lammps("read_data " + data);
  lammps(pair_style);
  lammps("pair_coeff * * O H");
}

double max_abs(std::vector<double> const& a, std::vector<double> const& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
  return worst;
}

/// Runs step 0 of `c` in LAMMPS and compares everything with dpk::Potential::compute.
void check_step0(Configuration const& c, std::string const& name) {
  Lammps lammps;
  setup(lammps, write_data(c, name + ".data"), "pair_style dpk " + model_path() + " min_distance 0");
  lammps("compute pe all pe/atom");
  lammps("compute sa all stress/atom NULL virial");
  lammps("thermo_style custom step pe press");
  // A dump at step 0 makes LAMMPS tally the per-atom energies and virials of that step.
  lammps("dump d all custom 1 " + (scratch() / (name + ".dump")).string() + " id c_pe c_sa[1]");
  lammps("run 0");
  auto* const lmp = lammps.lmp.get();
  int const n = int(lmp->atom->natoms);
  REQUIRE(lmp->atom->nlocal == n);
  REQUIRE(n == int(c.types.size()));

  // LAMMPS' positions (wrapped into its cell) and results, in atom-id order.
  auto const count = static_cast<std::size_t>(n);
  std::vector<double> coord(3 * count), force(3 * count), atom_energy(count), atom_virial(6 * count);
  std::vector<int> types(count);
  double const* pe = lammps.compute("pe")->vector_atom;
  double** sa = lammps.compute("sa")->array_atom;
  double const nktv2p = lmp->force->nktv2p;
  for (int i = 0; i < n; ++i) {
    auto const a = std::size_t(lmp->atom->tag[i] - 1);
    types[a] = lmp->atom->type[i] - 1;
    for (int d = 0; d < 3; ++d) {
      coord[3 * a + std::size_t(d)] = lmp->atom->x[i][d];
      force[3 * a + std::size_t(d)] = lmp->atom->f[i][d];
    }
    atom_energy[a] = pe[i];
    // stress/atom ... virial is minus the per-atom virial, in pressure x volume units.
    for (int k = 0; k < 6; ++k) atom_virial[6 * a + std::size_t(k)] = -sa[i][k] / nktv2p;
  }
  CHECK(types == c.types);
  auto const* domain = lmp->domain;
  std::vector<double> const box = {domain->xprd, 0, 0, domain->xy, domain->yprd, 0, domain->xz, domain->yz, domain->zprd};
  CHECK(max_abs(box, c.box()) < 1e-12);

  dpk::Potential<double> potential(model_path());
  auto const want = potential.compute(coord, types, box, true);
  int const from[6] = {0, 4, 8, 3, 6, 7};
  std::vector<double> want_virial(6), want_atom_virial(6 * std::size_t(n)), virial(6);
  for (int k = 0; k < 6; ++k) {
    want_virial[std::size_t(k)] = want.virial[std::size_t(from[k])];
    virial[std::size_t(k)] = lmp->force->pair->virial[k];
    for (std::size_t a = 0; a < std::size_t(n); ++a)
      want_atom_virial[6 * a + std::size_t(k)] = want.atom_virial[9 * a + std::size_t(from[k])];
  }
  double const energy = lmp->force->pair->eng_vdwl;
  double const de = std::abs(energy - want.energy[0]), df = max_abs(force, want.force);
  double const dae = max_abs(atom_energy, want.atom_energy), dw = max_abs(virial, want_virial);
  double const daw = max_abs(atom_virial, want_atom_virial);
  MESSAGE(name, ": ", n, " atoms, E ", energy, " eV; |dE| ", de, ", max |dF| ", df, ", max |dE_i| ", dae,
          ", max |dW| ", dw, ", max |dW_i| ", daw);
  CHECK(de <= 1e-10 * std::max(1.0, std::abs(want.energy[0])));
  CHECK(df <= 1e-10);
  CHECK(dae <= 1e-10);
  CHECK(dw <= 1e-10 * std::max(1.0, std::abs(want.virial[0])));
  CHECK(daw <= 1e-10);
  // Not trivially zero: the model's forces and virials are of order 1.
  double largest = 0;
  for (double v : want.force) largest = std::max(largest, std::abs(v));
  CHECK(largest > 1e-3);
}

}  // namespace

TEST_CASE("pair_style dpk: step 0 equals dpk::Potential") {
  SUBCASE("water box, orthogonal") { check_step0(water_box(), "orthogonal"); }
  SUBCASE("water box, triclinic") {
    auto c = water_box();
    c.xy = 2.0;
    c.xz = -1.5;
    c.yz = 1.0;
    check_step0(c, "triclinic");
  }
  SUBCASE("6.5 A cell (< 2 rcut), orthogonal") { check_step0(water_cube(6.5), "small"); }
  SUBCASE("6.5 A cell (< 2 rcut), triclinic") {
    auto c = water_cube(6.5);
    c.xy = 1.0;
    c.xz = 0.5;
    c.yz = -1.2;
    check_step0(c, "small_triclinic");
  }
}

TEST_CASE("pair_style dpk: one OpenBLAS thread per call unless the user set OPENBLAS_NUM_THREADS") {
  if (!dpk::blas_threads_controllable()) {
    MESSAGE("OpenBLAS' thread controls are not linked: nothing to check");
    return;
  }
  auto const data = write_data(water_box(), "blas.data");
  char const* const user = std::getenv("OPENBLAS_NUM_THREADS");
  std::string const saved = user ? user : "";
  ::unsetenv("OPENBLAS_NUM_THREADS");
  ::unsetenv("GOTO_NUM_THREADS");
  SUBCASE("unset: dpk sets 1") {
    dpk::set_blas_threads(2);
    Lammps lammps;
    setup(lammps, data, "pair_style dpk " + model_path());
    CHECK(dpk::blas_threads() == 1);
  }
  SUBCASE("set by the user: kept") {
    ::setenv("OPENBLAS_NUM_THREADS", "2", 1);
    dpk::set_blas_threads(2);  // what OpenBLAS read from the variable at load time
    Lammps lammps;
    setup(lammps, data, "pair_style dpk " + model_path());
    CHECK(dpk::blas_threads() == 2);
  }
  if (user)
    ::setenv("OPENBLAS_NUM_THREADS", saved.c_str(), 1);
  else
    ::unsetenv("OPENBLAS_NUM_THREADS");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    doctest::Context context(argc, argv);
    status = context.run();
  }
  MPI_Finalize();
  return status;
}
