#pragma once
/// \file pair_dpk.h
/// \brief LAMMPS pair style `dpk`: a dpk model (se_e2_a + energy fitting, written by dpk-train)
/// through <dpk/potential.hpp> (docs/md.md, section LAMMPS).
///
///   pair_style dpk model.dpk [min_distance R]
///   pair_coeff * * O H          (one element of the model's type_map per LAMMPS atom type)
///
/// Each rank passes its local atoms followed by its ghost atoms to
/// dpk::Potential::compute_with_ghosts (local atoms are centres, ghosts only neighbours) and adds
/// the forces of all of them; LAMMPS' reverse communication (newton_pair on) brings the ghost
/// forces and per-atom virials back to their owners. Units: metal.

#ifdef PAIR_CLASS
// clang-format off
PairStyle(dpk, PairDPK);
// clang-format on
#else

#include "pair.h"

#include <dpk/potential.hpp>

#include <memory>
#include <string>
#include <vector>

namespace LAMMPS_NS {

class PairDPK : public Pair {
 public:
  explicit PairDPK(class LAMMPS* lmp);
  ~PairDPK() override;
  void compute(int eflag, int vflag) override;
  void settings(int narg, char** arg) override;
  void coeff(int narg, char** arg) override;
  void init_style() override;
  double init_one(int i, int j) override;

  /// Registers the style under the name "dpk" in `lmp`'s pair-style map (for executables that
  /// link a LAMMPS without this style compiled in, e.g. dpk-lmp).
  static void register_style(class LAMMPS* lmp);

 private:
  void check_min_distance();

  std::unique_ptr<dpk::Potential<double>> potential_;
  std::string model_path_;
  double min_distance_ = -1;     ///< pairs closer than this are an error (<= 0: no check)
  std::vector<int> model_type_;  ///< model type index of LAMMPS type t (index t, 1-based)
  std::vector<double> coord_;    ///< (nlocal + nghost, 3) positions handed to dpk
  std::vector<int> types_;       ///< (nlocal + nghost) model type indices
  std::vector<int> ghost_image_;  ///< (nghost) the local atom each ghost images, or -1 (empty: no atom map)
  dpk::PotentialResult result_;  ///< reused between steps
  bool warned_dropped_ = false;  ///< warned once that neighbours beyond sel were dropped
};

}  // namespace LAMMPS_NS

#endif
