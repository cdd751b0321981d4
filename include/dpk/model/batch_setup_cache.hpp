#pragma once
/// \file batch_setup_cache.hpp
/// \brief The setup of one-frame batches (neighbour list, environment matrix, row layout) kept
/// per frame for the next time a training step draws the same frame: they depend only on the
/// frame's coordinates and the model's fixed settings (statistics, sel, rcut, schedule), not on
/// the parameters, so a batch met again skips the neighbour search, the environment matrix and
/// the row layout (water, float32, one thread: 1.2 ms of a 36 ms step, docs/performance.md).
///
/// An entry is a copy of the setup's Views made when the frame is first prepared (in large
/// blocks: no page faults per View); a later prepare of the frame points the workspace at the
/// entry's Views (no copy). The cache takes new frames while its total stays under a byte budget (DPK_SETUP_CACHE_MB,
/// default 1024 MiB; 0 keeps nothing) and never evicts: with frames drawn at random, a budget
/// smaller than the data keeps the first frames that fit.

#include <dpk/core/env_switch.hpp>
#include <dpk/core/error.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace dpk {

/// What EnergyModel::prepare builds for a batch before the first pass: neighbours,
/// environment matrix and row layout.
template <class Scalar, class MemorySpace>
struct BatchSetup {
  NeighborList<Scalar, MemorySpace> nlist;
  EnvironmentMatrix<Scalar, MemorySpace> env;
  BatchLayout<Scalar, MemorySpace> layout;
};

/// Calls f(view) for every View of `setup` that its passes read after the build. Scratch that
/// only the build itself reads (nlist.reverse_cursor, layout.in.rows.pair_match, the layout's
/// private scan) is left out: a kept copy shares it with the workspace, which no build of a kept
/// setup ever writes. layout.in's types, count, env and empty_row are handles to the frames',
/// nlist's, env's and the model's Views.
template <class Setup, class F>
void for_each_setup_view(Setup& setup, F&& f) {
  auto& n = setup.nlist;
  f(n.index), f(n.rij), f(n.count), f(n.reverse_offset), f(n.reverse_pair), f(n.reverse_position);
  auto& e = setup.env;
  f(e.rows), f(e.factors), f(e.centre_type), f(e.inv_std);
  auto& r = setup.layout.in.rows;
  f(setup.layout.in.position), f(r.row_offset), f(r.const_base), f(r.sel_offset), f(r.scan), f(r.boundary);
  f(r.boundary_host), f(r.row_atom), f(r.row_slot), f(r.slot_pair), f(r.row_partner), f(r.owned);
  f(r.shared_begin), f(r.row_shared), f(r.owner_shared);
}

/// Memory of MemorySpace handed out in pieces from large blocks that are never freed one by one:
/// the kept setups' Views, without an allocation per View.
template <class MemorySpace>
class SetupArena {
 public:
  /// `bytes` bytes aligned to 64.
  void* take(std::size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (blocks_.empty() || used_ + bytes > blocks_.back().extent(0)) {
      // No huge-page advice: with Linux' default THP defrag ("madvise") each first touch of an
      // advised block compacts memory, and the first epoch's steps took 41 instead of 37.7 ms
      // (water, float32, one thread).
      blocks_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dpk::model::kept_setups"),
                           std::max(bytes, block_bytes));
      if constexpr (std::is_same_v<MemorySpace, Kokkos::HostSpace>) populate(blocks_.back());
      used_ = 0;
    }
    void* const at = blocks_.back().data() + used_;
    used_ += bytes;
    return at;
  }
  /// Frees every block (Views into them must be gone).
  void clear() {
    blocks_.clear();
    used_ = 0;
  }

 private:
  /// Maps the whole block at once (Linux 5.14+: MADV_POPULATE_WRITE) instead of one page fault
  /// per 4 KiB page at first touch; elsewhere, or when it fails, nothing.
  static void populate(View1<char, MemorySpace> const& block) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    std::uintptr_t const page = 4096, at = reinterpret_cast<std::uintptr_t>(block.data());
    std::uintptr_t const begin = (at + page - 1) & ~(page - 1), end = (at + block.extent(0)) & ~(page - 1);
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
    (void)block;
#endif
  }

  static constexpr std::size_t block_bytes = std::size_t(64) << 20;
  std::vector<View1<char, MemorySpace>> blocks_;
  std::size_t used_ = 0;
};

/// Up to 32 same-space copies of whole Views (4-byte words), made by one kernel (copy_pieces).
struct CopyList {
  static constexpr int capacity = 32;
  void const* from[capacity] = {};
  void* to[capacity] = {};
  std::size_t words[capacity] = {};
  int count = 0;
  void add(void const* source, void* target, std::size_t bytes) {
    require(count < capacity && bytes % 4 == 0, "dpk::CopyList: too many Views or a size not in 4-byte words");
    from[count] = source, to[count] = target, words[count] = bytes / 4;
    ++count;
  }
};

/// Copies every piece of `list` on `space`: one team per piece (no deep copies: one launch).
template <class ExecSpace>
void copy_pieces(ExecSpace const& space, CopyList const& list) {
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "dpk::model::keep_setup", Kokkos::TeamPolicy<ExecSpace>(space, list.count, Kokkos::AUTO),
      KOKKOS_LAMBDA(Team const& team) {
        int const k = team.league_rank();
        auto const* from = static_cast<std::uint32_t const*>(list.from[k]);
        auto* to = static_cast<std::uint32_t*>(list.to[k]);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, list.words[k]), [&](std::size_t const w) { to[w] = from[w]; });
      });
}

/// Batch setups by frame key (see EnergyModel::prepare(space, frames, key)), within a byte budget.
template <class Scalar, class ExecSpace>
class BatchSetupCache {
 public:
  using MemorySpace = typename ExecSpace::memory_space;
  using Setup = BatchSetup<Scalar, MemorySpace>;
  /// A kept setup and the neighbours its search dropped beyond sel (counted again at each use).
  struct Entry {
    Setup setup;
    long dropped = 0;
  };

  BatchSetupCache(BatchSetupCache const&) = delete;  // entries point into arena_
  BatchSetupCache& operator=(BatchSetupCache const&) = delete;

  /// Budget from DPK_SETUP_CACHE_MB (MiB; 0 keeps nothing), default 1024 MiB.
  BatchSetupCache() : budget_(std::size_t(env_count("DPK_SETUP_CACHE_MB", 1024, 1 << 30, "a size in MiB")) << 20) {}

  /// Largest total of kept setups, in bytes (new entries stop there; nothing is evicted).
  void set_budget(std::size_t bytes) { budget_ = bytes; }
  std::size_t budget() const { return budget_; }

  /// The setup kept for `key`, or nullptr (counts a hit or a miss).
  Entry const* find(std::uint64_t key) {
    auto const it = entries_.find(key);
    if (it == entries_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    return &it->second;
  }
  /// Keeps a copy of `setup` for `key` when it fits the budget (nobody may write into a kept
  /// setup's Views); true when kept.
  bool insert(ExecSpace const& space, std::uint64_t key, Setup const& setup, long dropped) {
    std::size_t size = 0;
    for_each_setup_view(setup, [&](auto const& v) { size += (v.span() * sizeof(*v.data()) + 63) / 64 * 64; });
    if (bytes_ + size > budget_ || entries_.count(key) > 0) return false;
    Setup copy = setup;  // values and handles; every View below is replaced by a copy
    CopyList pieces;
    for_each_setup_view(copy, [&](auto& v) {
      using V = std::remove_reference_t<decltype(v)>;
      std::size_t const bytes = v.span() * sizeof(*v.data());
      if (bytes == 0) return;
      V const source = v;
      if constexpr (std::is_same_v<typename V::memory_space, MemorySpace>) {
        v = V(static_cast<typename V::pointer_type>(arena_.take(bytes)), source.layout());
        pieces.add(source.data(), v.data(), bytes);
      } else {  // host bookkeeping beside device Views (already fenced by the build)
        v = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, source.label()), source.layout());
        std::memcpy(v.data(), source.data(), bytes);
      }
    });
    copy_pieces(space, pieces);
    copy.layout.in.count = copy.nlist.count;
    copy.layout.in.env = copy.env.rows;
    space.fence();
    entries_.emplace(key, Entry{copy, dropped});
    bytes_ += size;
    return true;
  }
  /// Drops every entry (after a change of what a setup depends on).
  void clear() {
    entries_.clear();
    arena_.clear();
    bytes_ = 0;
  }

  /// Whether a new setup may still be kept (the budget is not used up).
  bool taking() const { return bytes_ < budget_; }
  std::size_t size() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }
  long hits() const { return hits_; }
  long misses() const { return misses_; }

 private:
  std::size_t budget_ = 0, bytes_ = 0;
  long hits_ = 0, misses_ = 0;
  std::unordered_map<std::uint64_t, Entry> entries_;
  SetupArena<MemorySpace> arena_;
};

}  // namespace dpk
