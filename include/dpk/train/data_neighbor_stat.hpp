#pragma once
/// \file data_neighbor_stat.hpp
/// \brief DeePMD-kit's neighbour statistics (`dp neighbor-stat`) of a set of systems: over every
/// frame, the smallest neighbour distance and the most neighbours of each type that any atom has
/// within rcut. They resolve `"sel": "auto"` (auto_sel) and print with `dpk-train neighbor-stat`.

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/io/data_sampler.hpp>
#include <dpk/model/host_batch.hpp>
#include <dpk/neighbor/nearest_neighbors.hpp>
#include <dpk/neighbor/neighbor_search.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace dpk {

/// Neighbour statistics of a set of frames.
struct NeighborStat {
  double min_distance = std::numeric_limits<double>::infinity();  ///< A; +infinity: no neighbour within rcut
  std::vector<int> max_neighbors;  ///< per neighbour type: the most any atom has within rcut
  long frames = 0;                 ///< frames searched
};

namespace detail {
/// Calls f(frames) for every frame of every system of `sampler` in order (its draws untouched),
/// uploaded in groups of at most 64 frames and about `group_atoms` atoms.
template <class Scalar, class MemorySpace, class F>
void for_each_frame_group(DataSampler const& sampler, int group_atoms, F&& f) {
  HostBatch batch;
  Frames<Scalar, MemorySpace> frames;
  Labels<Scalar, MemorySpace> labels;
  auto const& systems = sampler.systems();
  for (std::size_t s = 0; s < systems.size(); ++s) {
    int const nframes = systems[s].nframes;
    int const group = std::clamp(group_atoms / std::max(1, systems[s].natoms), 1, 64);
    for (int first = 0; first < nframes; first += group) {
      sampler.batch(int(s), first, std::min(group, nframes - first), batch);
      upload(batch, frames, labels);
      f(frames);
    }
  }
}
}  // namespace detail

/// The statistics of every frame of `sampler`'s systems for cutoff `rcut` (A) and `ntypes`
/// neighbour types (the systems' types must be below it). Counts follow the neighbour search's
/// candidates (SPEC.md section 2: |r_ij|^2 < rcut^2, periodic images included). Each group of
/// frames is searched with `start_sel` slots per type, doubled for a type whose slots filled
/// while neighbours were dropped, until nothing is dropped; so the counts are exact.
template <class Scalar, class ExecutionSpace>
NeighborStat data_neighbor_stat(ExecutionSpace const& space, DataSampler const& sampler, double rcut, int ntypes,
                                std::vector<int> start_sel = {}) {
  using Mem = memory_space_t<ExecutionSpace>;
  require(ntypes >= 1, "neighbour statistics: no atom types");
  std::vector<int> sel = start_sel.size() == std::size_t(ntypes) ? std::move(start_sel) : std::vector<int>(ntypes, 32);
  for (int& v : sel) v = std::max(v, 8);
  auto search = std::make_unique<NeighborSearch<Scalar, ExecutionSpace>>(rcut, sel);
  NeighborList<Scalar, Mem> list;
  NeighborStat stat;
  stat.max_neighbors.assign(std::size_t(ntypes), 0);
  constexpr int sel_limit = 1 << 20;
  detail::for_each_frame_group<Scalar, Mem>(sampler, 2048, [&](Frames<Scalar, Mem> const& frames) {
    std::vector<int> most;
    for (;;) {
      search->build(space, frames, list);
      auto const count = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list.count);
      most.assign(std::size_t(ntypes), 0);
      for (int i = 0; i < list.nloc; ++i)
        for (int t = 0; t < ntypes; ++t) most[std::size_t(t)] = std::max(most[std::size_t(t)], count(i, t));
      if (list.dropped == 0) break;
      for (int t = 0; t < ntypes; ++t)
        if (most[std::size_t(t)] >= sel[std::size_t(t)]) {
          require(sel[std::size_t(t)] < sel_limit, "neighbour statistics: more than " + std::to_string(sel_limit) +
                                                       " neighbours of type " + std::to_string(t) + " within rcut " +
                                                       std::to_string(rcut) + " A");
          sel[std::size_t(t)] *= 2;
        }
      search = std::make_unique<NeighborSearch<Scalar, ExecutionSpace>>(rcut, sel);
    }
    for (int t = 0; t < ntypes; ++t)
      stat.max_neighbors[std::size_t(t)] = std::max(stat.max_neighbors[std::size_t(t)], most[std::size_t(t)]);
    stat.min_distance = std::min(stat.min_distance, min_neighbor_distance(space, list));
    stat.frames += frames.nframes;
  });
  return stat;
}

/// DeePMD-kit's sel for `"sel": "auto:ratio"`: each type's largest neighbour count times ratio,
/// truncated to an integer, then rounded up to a multiple of 4.
inline std::vector<int> auto_sel(std::vector<int> const& max_neighbors, double ratio) {
  std::vector<int> sel;
  for (int n : max_neighbors) {
    long const scaled = long(double(n) * ratio);
    sel.push_back(int(4 * ((scaled + 3) / 4)));
  }
  return sel;
}

}  // namespace dpk
