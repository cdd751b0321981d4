#pragma once
// Shared pieces of the trainer tests: slices of the water example data.
#include <dpk/io/input.hpp>
#include "brute_distance.hpp"
#include "source_paths.hpp"
#include <dpk/io/system.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace dpk_test {

/// Brute-force neighbour statistics of every frame of a System (brute_distance.hpp).
struct BruteSystemStat {
  std::vector<int> max_neighbors;  ///< per type: the most neighbours any atom has within rcut
  double min_distance = std::numeric_limits<double>::infinity();  ///< between two atoms or images
};

/// BruteSystemStat of every frame of `s` for `ntypes` neighbour types and cutoff `rcut` (A).
inline BruteSystemStat brute_system_stat(dpk::System const& s, int ntypes, double rcut) {
  BruteSystemStat stat;
  stat.max_neighbors.assign(std::size_t(ntypes), 0);
  for (int f = 0; f < s.nframes; ++f) {
    double const* coord = &s.coord[std::size_t(f) * std::size_t(s.natoms) * 3];
    double const* box = &s.box[std::size_t(f) * 9];
    std::vector<int> const most = brute_max_neighbors(coord, box, s.types.data(), s.natoms, ntypes, rcut);
    for (std::size_t t = 0; t < most.size(); ++t) stat.max_neighbors[t] = std::max(stat.max_neighbors[t], most[t]);
    stat.min_distance = std::min(stat.min_distance, brute_min_distance(coord, box, s.natoms));
  }
  return stat;
}

/// Frames [first, first + n) of examples/water/data/data_0 as a System.
inline dpk::System water_frames(int first, int n) {
  dpk::System s = dpk::read_system(std::string(dpk_test::source_dir()) + "/examples/water/data/data_0", {"O", "H"});
  auto cut = [&](std::vector<double>& v, std::size_t per_frame) {
    v = std::vector<double>(v.begin() + std::ptrdiff_t(first * per_frame),
                            v.begin() + std::ptrdiff_t((first + n) * per_frame));
  };
  std::size_t const na = std::size_t(s.natoms);
  cut(s.coord, na * 3);
  cut(s.force, na * 3);
  cut(s.box, 9);
  cut(s.energy, 1);
  if (s.has_virial) cut(s.virial, 9);
  s.nframes = n;
  s.set_nframes = {n};
  return s;
}

/// A small se_e2_a model on the water data (O, H; sel [46, 92], rcut 6; embedding [4, 8],
/// axis_neuron 2, type_one_side true; fitting [8, 8]; seeds 1 and 10; lr 1e-3 -> 1e-5 with
/// decay_steps 2; batch 1): `numb_steps` steps. Tests adjust what they need.
inline dpk::InputConfig tiny_input(std::string source, long numb_steps) {
  dpk::InputConfig c;
  c.source = std::move(source);
  c.type_map = {"O", "H"};
  c.descriptor.sel = {46, 92};
  c.descriptor.rcut = 6.0;
  c.descriptor.rcut_smth = 0.5;
  c.descriptor.neuron = {4, 8};
  c.descriptor.axis_neuron = 2;
  c.descriptor.type_one_side = true;
  c.descriptor.seed = 1;
  c.fitting.neuron = {8, 8};
  c.fitting.seed = 1;
  c.learning_rate.start_lr = 1e-3;
  c.learning_rate.stop_lr = 1e-5;
  c.learning_rate.decay_steps = 2;
  c.training.numb_steps = numb_steps;
  c.training.seed = 10;
  c.training.training_data.batch_size = dpk::BatchSize{false, 1, {}};
  return c;
}

}  // namespace dpk_test
