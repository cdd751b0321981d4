#pragma once
/// \file data_neighbor_distance.hpp
/// \brief The smallest neighbour distance over every frame of a set of systems (DeePMD-kit's
/// `min_nbor_dist`, from its neighbour statistics): the range `dpk-train compress` tabulates
/// the embedding nets down to. The trainer stores it in the model file's `training` header,
/// `compress -t input.json` computes it from the input's training systems.

#include <dpk/core/frames.hpp>
#include <dpk/io/data_sampler.hpp>
#include <dpk/io/model_file.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/train/data_neighbor_stat.hpp>

#include <algorithm>
#include <limits>
#include <optional>

namespace dpk {

/// Smallest distance (A) between an atom and any neighbour or periodic image within the model's
/// rcut, over every frame of every system of `sampler` (read in order; the sampler's draws are
/// not touched); +infinity when no atom has a neighbour. Frames are searched in groups of at most
/// 64 frames and about 16384 atoms. Replaces the model's neighbour list of the last prepare().
template <class Scalar, class ExecutionSpace>
double data_min_neighbor_distance(ExecutionSpace const& space, EnergyModel<Scalar, ExecutionSpace>& model,
                                  DataSampler const& sampler) {
  using Mem = memory_space_t<ExecutionSpace>;
  double nearest = std::numeric_limits<double>::infinity();
  detail::for_each_frame_group<Scalar, Mem>(sampler, 16384, [&](Frames<Scalar, Mem> const& frames) {
    nearest = std::min(nearest, model.min_neighbor_distance(space, frames));
  });
  return nearest;
}

/// Key of the distance in a model file's `training` header.
inline constexpr char const* min_neighbor_distance_key = "min_neighbor_distance";

/// The distance a model or checkpoint file stores (`training.min_neighbor_distance`), if any.
inline std::optional<double> stored_min_neighbor_distance(ModelFileData const& data) {
  auto const& t = data.training;
  if (t.is_object() && t.contains(min_neighbor_distance_key) && t[min_neighbor_distance_key].is_number())
    return t[min_neighbor_distance_key].get<double>();
  return std::nullopt;
}

}  // namespace dpk
