/// \file pair_dpk.cpp
/// \brief LAMMPS pair style `dpk` (see pair_dpk.h).

#include "pair_dpk.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "memory.h"
#include "neigh_list.h"
#include "update.h"

#include <dpk/core/blas_threads_default.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

using namespace LAMMPS_NS;

// Every message below is a std::string: with the declaration-only fmt of compat/ (Debian's
// headers), a string literal would pick Error's fmt template overloads, which are not linked.

namespace {

/// "%.6g" of a value, for error messages.
std::string short_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

/// The model's element names as "[O, H]".
std::string names(std::vector<std::string> const& type_map) {
  std::string out = "[";
  for (std::size_t t = 0; t < type_map.size(); ++t) out += (t ? ", " : "") + type_map[t];
  return out + "]";
}

Pair* create_pair_dpk(LAMMPS* lmp) { return new PairDPK(lmp); }

}  // namespace

PairDPK::PairDPK(LAMMPS* lmp) : Pair(lmp) {
  single_enable = 0;            // no pairwise energy: a many-body model
  restartinfo = 0;              // the model file is named again on restart
  one_coeff = 1;                // pair_coeff * * only
  manybody_flag = 1;
  no_virial_fdotr_compute = 1;  // the virial comes from the model (and equals sum r f)
  // A LAMMPS without Kokkos (Debian's): dpk starts Kokkos itself, once per process, and
  // finalizes it at exit (dpk-lmp starts it before LAMMPS, so this is skipped there).
  if (!Kokkos::is_initialized()) {
    Kokkos::initialize();
    std::atexit([] {
      if (Kokkos::is_initialized()) Kokkos::finalize();
    });
  }
}

PairDPK::~PairDPK() {
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

void PairDPK::register_style(LAMMPS* lmp) { (*lmp->force->pair_map)["dpk"] = &create_pair_dpk; }

void PairDPK::settings(int narg, char** arg) {
  if (narg != 1 && narg != 3) error->all(FLERR, std::string("Illegal pair_style dpk command: expected 'pair_style dpk "
                                                            "MODEL [min_distance R]'"));
  if (std::strcmp(update->unit_style, "metal") != 0)
    error->all(FLERR, std::string("pair_style dpk needs 'units metal' (eV, Angstrom, ps), not units ") +
                          update->unit_style);
  model_path_ = arg[0];
  try {
    potential_ = std::make_unique<dpk::Potential<double>>(model_path_);
  } catch (std::exception const& e) {
    error->all(FLERR, std::string("pair_style dpk: cannot load the model: ") + e.what());
  }
  // Default: the model's rcut_smth, where its switching function begins (the model file does
  // not record the closest pair of its training data).
  min_distance_ = potential_->model().descriptor().rcut_smth;
  if (narg == 3) {
    if (std::strcmp(arg[1], "min_distance") != 0)
      error->all(FLERR, std::string("Illegal pair_style dpk keyword '") + arg[1] + "' (known: min_distance)");
    char* end = nullptr;
    min_distance_ = std::strtod(arg[2], &end);
    if (end == arg[2] || *end != '\0')
      error->all(FLERR, std::string("pair_style dpk: min_distance expects a number, got '") + arg[2] + "'");
  }
  // One OpenBLAS thread per call unless the user chose, as in dpk's programs (192 water atoms,
  // full model, 2 threads: 26-38 ms per step with OpenBLAS' own default, 15.5-16 with 1).
  std::string const blas = dpk::apply_blas_threads_default(1);
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style dpk: model '" + model_path_ + "' (" + potential_->model_precision() +
                            (potential_->compressed() ? ", compressed" : "") + ", types " + names(potential_->type_map()) + ", rcut " +
                            short_number(potential_->rcut()) + " A), min_distance " + short_number(min_distance_) +
                            " A\npair_style dpk: " + dpk::DefaultExecutionSpace::name() + " threads per rank: " +
                            std::to_string(dpk::DefaultExecutionSpace().concurrency()) + "; " + blas + "\n");
}

void PairDPK::coeff(int narg, char** arg) {
  int const ntypes = atom->ntypes;
  if (!allocated) {
    allocated = 1;
    memory->create(setflag, ntypes + 1, ntypes + 1, "pair:setflag");
    memory->create(cutsq, ntypes + 1, ntypes + 1, "pair:cutsq");
    for (int i = 1; i <= ntypes; ++i)
      for (int j = i; j <= ntypes; ++j) setflag[i][j] = 0;
  }
  if (narg != 2 + ntypes || std::strcmp(arg[0], "*") != 0 || std::strcmp(arg[1], "*") != 0)
    error->all(FLERR, "Incorrect args for pair_coeff dpk: expected 'pair_coeff * *' and one element per atom type (" +
                          std::to_string(ntypes) + " types)");
  model_type_.assign(std::size_t(ntypes) + 1, -1);
  for (int t = 1; t <= ntypes; ++t) {
    std::string const element = arg[1 + t];
    auto const& type_map = potential_->type_map();
    auto const it = std::find(type_map.begin(), type_map.end(), element);
    if (it == type_map.end())
      error->all(FLERR, "pair_coeff dpk: element '" + element + "' (atom type " + std::to_string(t) +
                            ") is not in the model's type_map " + names(type_map) + " of '" + model_path_ + "'");
    model_type_[std::size_t(t)] = int(it - type_map.begin());
  }
  for (int i = 1; i <= ntypes; ++i)
    for (int j = i; j <= ntypes; ++j) setflag[i][j] = 1;
}

void PairDPK::init_style() {
  if (force->newton_pair == 0)
    error->all(FLERR, std::string("pair_style dpk needs newton_pair on (ghost forces return to their owners by "
                                  "reverse communication)"));
  // Pair's default: a half list up to rcut + skin, used only for the min_distance check
  // (neighbor->request in LAMMPS 2021-2022, neighbor->add_request in newer versions).
  Pair::init_style();
}

double PairDPK::init_one(int i, int j) {
  if (setflag[i][j] == 0) error->all(FLERR, std::string("All pair coeffs are not set"));
  return potential_->rcut();  // ghost cutoff = rcut + skin >= rcut
}

void PairDPK::check_min_distance() {
  if (min_distance_ <= 0 || list == nullptr) return;
  double const limit2 = min_distance_ * min_distance_;
  double** x = atom->x;
  for (int ii = 0; ii < list->inum; ++ii) {
    int const i = list->ilist[ii];
    int const* neighbors = list->firstneigh[i];
    for (int jj = 0; jj < list->numneigh[i]; ++jj) {
      int const j = neighbors[jj] & NEIGHMASK;
      double const dx = x[j][0] - x[i][0], dy = x[j][1] - x[i][1], dz = x[j][2] - x[i][2];
      double const r2 = dx * dx + dy * dy + dz * dz;
      if (r2 < limit2)
        error->one(FLERR, "pair_style dpk: atoms " + std::to_string(atom->tag[i]) + " and " +
                              std::to_string(atom->tag[j]) + " are " + short_number(std::sqrt(r2)) +
                              " A apart, closer than min_distance " + short_number(min_distance_) +
                              " A: the model has not seen such configurations (set pair_style dpk ... "
                              "min_distance R to change the limit, 0 to switch the check off)");
    }
  }
}

void PairDPK::compute(int eflag, int vflag) {
  ev_init(eflag, vflag);
  int const nlocal = atom->nlocal, nall = nlocal + atom->nghost;
  if (nlocal == 0) return;
  check_min_distance();
  double** x = atom->x;
  double** f = atom->f;
  int const* type = atom->type;
  coord_.resize(3 * std::size_t(nall));
  types_.resize(std::size_t(nall));
  for (int i = 0; i < nall; ++i) {
    for (int d = 0; d < 3; ++d) coord_[3 * std::size_t(i) + std::size_t(d)] = x[i][d];
    types_[std::size_t(i)] = model_type_[std::size_t(type[i])];
  }
  // Each ghost's local atom (periodic images on this rank), so that pairs of local atoms across
  // the box's faces share embedding rows; needs the atom map (atom_modify map, or a molecular
  // system), else no images. map() returns the local copy where this rank owns the atom
  // (compute_with_ghosts checks that an image has its atom's type).
  ghost_image_.clear();
  if (atom->map_style != 0 && atom->tag_enable != 0) {
    ghost_image_.resize(std::size_t(nall - nlocal));
    for (int g = nlocal; g < nall; ++g) {
      int const m = atom->map(atom->tag[g]);
      ghost_image_[std::size_t(g - nlocal)] = m >= 0 && m < nlocal ? m : -1;
    }
  }
  try {
    potential_->compute_with_ghosts(result_, coord_, types_, nlocal, vflag_atom != 0, ghost_image_);
  } catch (std::exception const& e) {
    error->one(FLERR, std::string("pair_style dpk: ") + e.what());
  }
  if (potential_->neighbors_dropped() > 0 && !warned_dropped_) {
    warned_dropped_ = true;
    error->warning(FLERR, "pair_style dpk: neighbours beyond the model's sel were dropped (" +
                              std::to_string(potential_->neighbors_dropped()) +
                              " so far on this rank): the energy is not smooth for these configurations");
  }
  for (int i = 0; i < nall; ++i)
    for (int d = 0; d < 3; ++d) f[i][d] += result_.force[3 * std::size_t(i) + std::size_t(d)];
  if (eflag_global) eng_vdwl += result_.energy[0];
  if (eflag_atom)
    for (int i = 0; i < nlocal; ++i) eatom[i] += result_.atom_energy[std::size_t(i)];
  // dpk's W[3a+b] is force component a times separation component b; LAMMPS' order is
  // xx yy zz xy xz yz with xy = sum r_x f_y (as DeePMD-kit's pair_style deepmd maps it).
  static constexpr int from[6] = {0, 4, 8, 3, 6, 7};
  if (vflag_global)
    for (int k = 0; k < 6; ++k) virial[k] += result_.virial[std::size_t(from[k])];
  if (vflag_atom)
    for (int i = 0; i < nall; ++i)
      for (int k = 0; k < 6; ++k) vatom[i][k] += result_.atom_virial[9 * std::size_t(i) + std::size_t(from[k])];
}
