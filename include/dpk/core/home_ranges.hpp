#pragma once
/// \file home_ranges.hpp
/// \brief A host schedule that keeps work items on the same thread from one pass to the next
/// and still balances a busy core: each worker owns a home range of consecutive items, takes
/// its own untaken items first and then the other workers' untaken ones.
///
/// Why: on a VM whose two vCPUs the host may place on different core complexes (a cache-line
/// round trip of 330-420 ns instead of 55-90: docs/performance.md, "Twenty-seventh session"),
/// every line one thread wrote and another then reads crosses between them. A dynamic schedule
/// hands the same item to either thread, pass after pass; home ranges hand it to the same one
/// on a quiet node, and a thread on a busy core still gets fewer items. Used by the chunked
/// passes of nn::NetworkFamily (whose rows one pass writes and the next reads) and by Adam's
/// host update (each thread's m and v stay in its caches from step to step).

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpk {

/// Home ranges of items for the host threads of an execution space (host schedules only).
/// Scratch that every run() sets afresh: a copy starts empty, so owners stay copyable.
class HomeRanges {
 public:
  HomeRanges() = default;
  HomeRanges(HomeRanges const&) {}
  HomeRanges& operator=(HomeRanges const&) { return *this; }

  /// Runs body(worker, item) once for each item 0 .. items - 1 on min(threads, items) workers
  /// (worker 0 .. workers - 1, one per host thread). Worker w owns items [items w / workers,
  /// items (w + 1) / workers) (the same for the same counts in every run) and runs them in
  /// order, then takes untaken items of the other ranges in turn. Which worker runs an item
  /// depends on timing: results must not.
  template <class ExecutionSpace, class Body>
  void run(ExecutionSpace const& space, char const* label, int items, Body const& body) {
    int const threads = std::max(1, static_cast<int>(space.concurrency()));
    int const workers = std::min(threads, items);
    if (workers <= 0) return;
    if (ranges_.size() < std::size_t(workers)) ranges_.resize(workers);
    Range* const ranges = ranges_.data();
    for (int w = 0; w < workers; ++w) {
      ranges[w].next.store(int(std::int64_t(items) * w / workers), std::memory_order_relaxed);
      ranges[w].end = int(std::int64_t(items) * (w + 1) / workers);
    }
    space.fence();
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecutionSpace>(space, 0, workers).set_chunk_size(1), [&](int const worker) {
          for (int v = 0; v < workers; ++v) {  // the home range first, then the others in turn
            Range& range = ranges[(worker + v) % workers];
            for (int k = range.next.fetch_add(1, std::memory_order_relaxed); k < range.end;
                 k = range.next.fetch_add(1, std::memory_order_relaxed))
              body(worker, k);
          }
        });
    space.fence();
  }

 private:
  /// A worker's range: the next untaken item and the end, on a cache line of its own (every
  /// worker that steals from the range counts on `next`).
  struct alignas(64) Range {
    std::atomic<int> next{0};
    int end = 0;
    Range() = default;
    Range(Range const&) {}
    Range& operator=(Range const&) { return *this; }
  };
  std::vector<Range> ranges_;
};

}  // namespace dpk
