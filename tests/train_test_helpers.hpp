#pragma once
// Shared pieces of the trainer tests: slices of the water example data.
#include <dpk/io/system.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace dpk_test {

/// Frames [first, first + n) of examples/water/data/data_0 as a System.
inline dpk::System water_frames(int first, int n) {
  dpk::System s = dpk::read_system(std::string(DPK_SOURCE_DIR) + "/examples/water/data/data_0", {"O", "H"});
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
  return s;
}

}  // namespace dpk_test
