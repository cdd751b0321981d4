#pragma once
/// \file profiling.hpp
/// \brief Named profiling regions around dpk's stages, and an in-process clock for them.
///
/// Every stage of a model evaluation and of a training step runs inside a `ScopedRegion`
/// ("dpk::neighbors", "dpk::environment", "dpk::forward", ...; docs/architecture.md). The
/// regions are Kokkos Tools regions, so any Kokkos Tools connector (space-time-stack, nvtx for
/// Nsight Systems, ...) shows them. `RegionTimes` sums their wall time inside the process (what
/// `dpk-train train --timing-file` writes); while one exists, every region fences its execution
/// space at its end so that asynchronous device work is counted in the region that launched it.
/// It also counts Kokkos deep copies (host <-> device round trips show up there).

#include <Kokkos_Core.hpp>

#include <dpk/core/error.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dpk {

namespace detail {

/// State of the one active RegionTimes (Kokkos Tools callbacks are plain function pointers).
/// Only regions named "dpk::..." are timed (they are entered and left on the calling host
/// thread); regions that libraries open inside parallel work (e.g. Kokkos Kernels from several
/// threads at once) are tracked per thread only to match their pops.
struct RegionClock {
  bool active = false;
  Kokkos::Tools::Experimental::EventSet previous{};  ///< callbacks installed before ours (chained)
  Kokkos::Timer timer;
  std::mutex mutex;                        ///< guards `seconds`
  std::map<std::string, double> seconds;   ///< closed dpk regions: total seconds per name
  std::atomic<long> deep_copies{0};
};

inline RegionClock& region_clock() {
  static RegionClock clock;
  return clock;
}

/// A region entered on this thread and not left yet.
struct OpenRegion {
  std::string name;  ///< empty for regions that are not dpk's
  double start = 0;
};

inline std::vector<OpenRegion>& open_regions() {
  thread_local std::vector<OpenRegion> open;
  return open;
}

inline void region_pushed(char const* name) {
  RegionClock& c = region_clock();
  bool const ours = name != nullptr && std::strncmp(name, "dpk::", 5) == 0;
  open_regions().push_back(ours ? OpenRegion{name, c.timer.seconds()} : OpenRegion{});
  if (c.previous.push_region) c.previous.push_region(name);
}

inline void region_popped() {
  RegionClock& c = region_clock();
  auto& open = open_regions();
  if (!open.empty()) {
    OpenRegion const region = std::move(open.back());
    open.pop_back();
    if (!region.name.empty()) {
      double const elapsed = c.timer.seconds() - region.start;
      std::lock_guard<std::mutex> lock(c.mutex);
      c.seconds[region.name] += elapsed;
    }
  }
  if (c.previous.pop_region) c.previous.pop_region();
}

inline void deep_copy_begun(Kokkos_Profiling_SpaceHandle dst_space, char const* dst_name, void const* dst,
                            Kokkos_Profiling_SpaceHandle src_space, char const* src_name, void const* src,
                            std::uint64_t bytes) {
  RegionClock& c = region_clock();
  c.deep_copies.fetch_add(1, std::memory_order_relaxed);
  if (c.previous.begin_deep_copy) c.previous.begin_deep_copy(dst_space, dst_name, dst, src_space, src_name, src, bytes);
}

}  // namespace detail

/// A Kokkos Tools region named `name` for the lifetime of the object. While a RegionTimes is
/// active, the destructor first fences `space` (so the region's kernels are timed in it).
template <class ExecutionSpace>
class ScopedRegion {
 public:
  ScopedRegion(char const* name, ExecutionSpace const& space) : space_(space) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() {
    if (detail::region_clock().active) space_.fence();
    Kokkos::Profiling::popRegion();
  }
  ScopedRegion(ScopedRegion const&) = delete;
  ScopedRegion& operator=(ScopedRegion const&) = delete;

 private:
  ExecutionSpace space_;
};

/// Sums the wall seconds of dpk's profiling regions ("dpk::..."), per name, and counts Kokkos deep copies,
/// from construction (or the last take) on. One at a time per process; installs Kokkos Tools
/// callbacks (after Kokkos::initialize) that chain to a connector already loaded, and restores
/// the previous callbacks when destroyed. Nested regions count in their own name and in their
/// enclosing region's.
class RegionTimes {
 public:
  RegionTimes() {
    detail::RegionClock& c = detail::region_clock();
    require(!c.active, "dpk::RegionTimes: another RegionTimes is active");
    c.previous = Kokkos::Tools::Experimental::get_callbacks();
    detail::open_regions().clear();
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.seconds.clear();
    }
    c.deep_copies = 0;
    c.timer.reset();
    Kokkos::Tools::Experimental::set_push_region_callback(&detail::region_pushed);
    Kokkos::Tools::Experimental::set_pop_region_callback(&detail::region_popped);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(&detail::deep_copy_begun);
    c.active = true;
  }
  ~RegionTimes() {
    detail::RegionClock& c = detail::region_clock();
    Kokkos::Tools::Experimental::set_push_region_callback(c.previous.push_region);
    Kokkos::Tools::Experimental::set_pop_region_callback(c.previous.pop_region);
    Kokkos::Tools::Experimental::set_begin_deep_copy_callback(c.previous.begin_deep_copy);
    c.active = false;
  }
  RegionTimes(RegionTimes const&) = delete;
  RegionTimes& operator=(RegionTimes const&) = delete;

  /// Seconds per region name closed since the last take (0 for a name never closed).
  double seconds(std::string const& name) const {
    detail::RegionClock& c = detail::region_clock();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.seconds.find(name);
    return it == c.seconds.end() ? 0.0 : it->second;
  }
  /// Kokkos deep copies since the last take.
  long deep_copies() const { return detail::region_clock().deep_copies; }
  /// Starts new sums (regions still open keep their start time).
  void take() {
    detail::RegionClock& c = detail::region_clock();
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.seconds.clear();
    }
    c.deep_copies = 0;
  }
};

}  // namespace dpk
