#pragma once
/// \file host_batch.hpp
/// \brief A batch of labelled frames of one system in host memory: what the data sampler
/// (`io/data_sampler.hpp`) produces and what statistics and training consume; `upload` copies it
/// into device Frames / Labels.

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/types.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
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


namespace detail {
/// Copies `count` doubles from `source` into `view` (contiguous, LayoutRight), converting to its type.
template <class ViewType>
void copy_to_view(double const* source, std::size_t count, ViewType const& view) {
  auto host = Kokkos::create_mirror_view(view);
  auto* target = host.data();
  using value_type = typename ViewType::non_const_value_type;
  for (std::size_t i = 0; i < count; ++i) target[i] = static_cast<value_type>(source[i]);
  Kokkos::deep_copy(view, host);
}
}  // namespace detail

/// Uploads `batch` to the device: frames.coord (nloc x 3), frames.box (nframes x 9),
/// frames.types (nloc, the atom types repeated per frame), labels.energy (nframes),
/// labels.force (nloc x 3), labels.virial (nframes x 9; zeros when the batch has no virial).
/// Converts double -> Scalar; reallocates a View only when its size changes.
template <class Scalar, class MemorySpace>
void upload(HostBatch const& batch, Frames<Scalar, MemorySpace>& frames, Labels<Scalar, MemorySpace>& labels) {
  std::size_t const nf = std::size_t(batch.nframes), na = std::size_t(batch.natoms), nloc = nf * na;
  require(batch.coord.size() == nloc * 3 && batch.force.size() == nloc * 3 && batch.box.size() == nf * 9 &&
              batch.energy.size() == nf && batch.types.size() == na &&
              (!batch.has_virial || batch.virial.size() == nf * 9),
          "dpk::upload: inconsistent HostBatch sizes");
  frames.nframes = batch.nframes;
  frames.natoms = batch.natoms;
  frames.periodic = batch.periodic;
  labels.has_virial = batch.has_virial;
  resize_exact(frames.coord, nloc, 3);
  resize_exact(frames.box, nf, 9);
  resize_exact(frames.types, nloc);
  resize_exact(labels.energy, nf);
  resize_exact(labels.force, nloc, 3);
  resize_exact(labels.virial, nf, 9);
  detail::copy_to_view(batch.coord.data(), nloc * 3, frames.coord);
  detail::copy_to_view(batch.box.data(), nf * 9, frames.box);
  detail::copy_to_view(batch.energy.data(), nf, labels.energy);
  detail::copy_to_view(batch.force.data(), nloc * 3, labels.force);
  if (batch.has_virial) {
    detail::copy_to_view(batch.virial.data(), nf * 9, labels.virial);
  } else {
    Kokkos::deep_copy(labels.virial, Scalar(0));
  }
  auto types = Kokkos::create_mirror_view(frames.types);
  for (std::size_t f = 0; f < nf; ++f)
    for (std::size_t a = 0; a < na; ++a) types(f * na + a) = batch.types[a];
  Kokkos::deep_copy(frames.types, types);
}

}  // namespace dpk
