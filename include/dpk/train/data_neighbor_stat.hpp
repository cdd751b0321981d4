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
  long beyond_start_sel = 0;       ///< neighbours that a search with the start sel would drop (all atoms)
};

/// Accumulates the NeighborStat of groups of frames for cutoff `rcut` (A) and `ntypes` neighbour
/// types (the frames' types must be below it). Counts follow the neighbour search's candidates
/// (SPEC.md section 2: |r_ij|^2 < rcut^2, periodic images included). Each group is searched with
/// `start_sel` slots per type (32 when not given; at least 8), doubled for a type whose slots
/// filled while neighbours were dropped, until nothing is dropped; so the counts are exact.
template <class Scalar, class ExecutionSpace>
class NeighborStatAccumulator {
 public:
  using memory_space = memory_space_t<ExecutionSpace>;

  NeighborStatAccumulator(double rcut, int ntypes, std::vector<int> start_sel = {})
      : rcut_(rcut), ntypes_(ntypes) {
    require(ntypes >= 1, "neighbour statistics: no atom types");
    start_sel_ = start_sel.size() == std::size_t(ntypes) ? std::move(start_sel) : std::vector<int>(ntypes, 32);
    sel_ = start_sel_;
    for (int& v : sel_) v = std::max(v, 8);
    search_ = std::make_unique<NeighborSearch<Scalar, ExecutionSpace>>(rcut_, sel_);
    stat_.max_neighbors.assign(std::size_t(ntypes), 0);
  }

  /// Adds the statistics of `frames`.
  void add(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    constexpr int sel_limit = 1 << 20;
    for (;;) {
      search_->build(space, frames, list_);
      if (list_.dropped == 0) break;
      auto const count = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list_.count);
      std::vector<int> const most = most_per_type(count);
      for (int t = 0; t < ntypes_; ++t)
        if (most[std::size_t(t)] >= sel_[std::size_t(t)]) {
          require(sel_[std::size_t(t)] < sel_limit, "neighbour statistics: more than " + std::to_string(sel_limit) +
                                                        " neighbours of type " + std::to_string(t) + " within rcut " +
                                                        std::to_string(rcut_) + " A");
          sel_[std::size_t(t)] *= 2;
        }
      search_ = std::make_unique<NeighborSearch<Scalar, ExecutionSpace>>(rcut_, sel_);
    }
    auto const count = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), list_.count);
    std::vector<int> const most = most_per_type(count);
    for (int t = 0; t < ntypes_; ++t)
      stat_.max_neighbors[std::size_t(t)] = std::max(stat_.max_neighbors[std::size_t(t)], most[std::size_t(t)]);
    for (int i = 0; i < list_.nloc; ++i)
      for (int t = 0; t < ntypes_; ++t) stat_.beyond_start_sel += std::max(0, count(i, t) - start_sel_[std::size_t(t)]);
    stat_.min_distance = std::min(stat_.min_distance, min_neighbor_distance(space, list_));
    stat_.frames += frames.nframes;
  }

  NeighborStat const& stat() const { return stat_; }

 private:
  template <class Counts>
  std::vector<int> most_per_type(Counts const& count) const {
    std::vector<int> most(std::size_t(ntypes_), 0);
    for (int i = 0; i < list_.nloc; ++i)
      for (int t = 0; t < ntypes_; ++t) most[std::size_t(t)] = std::max(most[std::size_t(t)], count(i, t));
    return most;
  }

  double rcut_;
  int ntypes_;
  std::vector<int> start_sel_, sel_;
  std::unique_ptr<NeighborSearch<Scalar, ExecutionSpace>> search_;
  NeighborList<Scalar, memory_space> list_;
  NeighborStat stat_;
};

namespace detail {
/// Calls f(frames) for the frames of every system of `sampler` in order (its draws untouched),
/// uploaded in groups of at most 64 frames and about `group_atoms` atoms: of the groups, numbered
/// over all systems, those whose number is `part` modulo `parts` (all of them by default).
template <class Scalar, class MemorySpace, class F>
void for_each_frame_group(DataSampler const& sampler, int group_atoms, F&& f, int part = 0, int parts = 1) {
  require(parts >= 1 && part >= 0 && part < parts,
          "frame groups: part " + std::to_string(part) + " of " + std::to_string(parts) + " does not exist");
  HostBatch batch;
  Frames<Scalar, MemorySpace> frames;
  Labels<Scalar, MemorySpace> labels;
  auto const& systems = sampler.systems();
  long number = 0;
  for (std::size_t s = 0; s < systems.size(); ++s) {
    int const nframes = systems[s].nframes;
    int const group = std::clamp(group_atoms / std::max(1, systems[s].natoms), 1, 64);
    for (int first = 0; first < nframes; first += group)
      if (number++ % parts == part) {
        sampler.batch(int(s), first, std::min(group, nframes - first), batch);
        upload(batch, frames, labels);
        f(frames);
      }
  }
}
}  // namespace detail

/// The statistics (NeighborStatAccumulator) of every frame of `sampler`'s systems; with `parts`
/// > 1, of the share `part` of their frame groups (callers on several ranks combine the shares
/// with reduce_neighbor_stat).
template <class Scalar, class ExecutionSpace>
NeighborStat data_neighbor_stat(ExecutionSpace const& space, DataSampler const& sampler, double rcut, int ntypes,
                                std::vector<int> start_sel = {}, int part = 0, int parts = 1) {
  using Mem = memory_space_t<ExecutionSpace>;
  NeighborStatAccumulator<Scalar, ExecutionSpace> accumulator(rcut, ntypes, std::move(start_sel));
  detail::for_each_frame_group<Scalar, Mem>(
      sampler, 2048, [&](Frames<Scalar, Mem> const& frames) { accumulator.add(space, frames); }, part, parts);
  return accumulator.stat();
}

/// The statistics of the union of every rank's frames from each rank's `stat` (same number of
/// types on every rank): most neighbours and the smallest distance over ranks, frames and
/// beyond-sel counts summed. `Comm` has allreduce_max and allreduce_sum of a std::vector<double>.
template <class Comm>
NeighborStat reduce_neighbor_stat(Comm const& comm, NeighborStat stat) {
  std::vector<double> most(stat.max_neighbors.begin(), stat.max_neighbors.end());
  most.push_back(-stat.min_distance);  // +infinity (no neighbour) stays the identity of the minimum
  comm.allreduce_max(most);
  for (std::size_t t = 0; t < stat.max_neighbors.size(); ++t) stat.max_neighbors[t] = int(most[t]);
  stat.min_distance = -most.back();
  std::vector<double> sums{double(stat.frames), double(stat.beyond_start_sel)};
  comm.allreduce_sum(sums);
  stat.frames = long(sums[0]);
  stat.beyond_start_sel = long(sums[1]);
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
