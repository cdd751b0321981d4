#pragma once
/// \file system.hpp
/// \brief deepmd/npy "systems" on the host: type.raw, type_map.raw, set.*/{coord,box,energy,force,virial}.npy.

#include <string>
#include <vector>

namespace dpk {

/// All frames of one deepmd/npy system directory, in float64 on the host.
struct System {
  std::string path;                    ///< the system directory
  std::vector<std::string> type_map;   ///< element names from type_map.raw (may be empty)
  std::vector<int> types;              ///< natoms, already remapped to the model's type_map
  bool periodic = true;                ///< false when a `nopbc` file is present
  bool has_virial = false;
  int natoms = 0;
  int nframes = 0;
  std::vector<double> coord;    ///< nframes x natoms x 3
  std::vector<double> box;      ///< nframes x 9 (rows are cell vectors); zeros when !periodic
  std::vector<double> energy;   ///< nframes
  std::vector<double> force;    ///< nframes x natoms x 3
  std::vector<double> virial;   ///< nframes x 9 when has_virial
};

/// Reads a system directory; `model_type_map` (may be empty) remaps types by element name.
/// Throws dpk::Error naming the file and the problem on any bad input.
System read_system(std::string const& path, std::vector<std::string> const& model_type_map);

}  // namespace dpk
