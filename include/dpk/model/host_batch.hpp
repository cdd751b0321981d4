#pragma once
/// \file host_batch.hpp
/// \brief A batch of labelled frames of one system in host memory: what the data sampler
/// (`io/data_sampler.hpp`) produces and what statistics and training consume.

#include <vector>

namespace dpk {

/// A batch of frames of one system on the host, in float64.
struct HostBatch {
  int system = -1;                 ///< index of the system in the sampler's list
  int nframes = 0, natoms = 0;
  bool periodic = true, has_virial = false;
  std::vector<int> frames;         ///< frame indices inside the system, in batch order
  std::vector<int> types;          ///< natoms (the same for every frame)
  std::vector<double> coord;       ///< nframes x natoms x 3
  std::vector<double> box;         ///< nframes x 9 (zeros when !periodic)
  std::vector<double> energy;      ///< nframes
  std::vector<double> force;       ///< nframes x natoms x 3
  std::vector<double> virial;      ///< nframes x 9 when has_virial, else empty
};

}  // namespace dpk
