#pragma once
/// \file types.hpp
/// \brief Short aliases for the View types dpk passes between stages.

#include <dpk/core/error.hpp>
#include <dpk/core/env_switch.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dpk {

/// Execution space the trainer and examples run on: Kokkos' default (CUDA, else OpenMP, else
/// Serial), or Kokkos::Serial when the project is configured with DPK_DEFAULT_EXECUTION_SPACE=Serial.
#if defined(DPK_USE_SERIAL_SPACE)
using DefaultExecutionSpace = Kokkos::Serial;
#else
using DefaultExecutionSpace = Kokkos::DefaultExecutionSpace;
#endif

/// Memory space in which `ExecutionSpace` runs its kernels.
template <class ExecutionSpace>
using memory_space_t = typename ExecutionSpace::memory_space;

/// Whether kernels of ExecutionSpace can read and write Views in MemorySpace; dpk's entry points
/// that take both static_assert it (a host View passed to a CUDA call fails to compile).
template <class ExecutionSpace, class MemorySpace>
inline constexpr bool accessible_v = Kokkos::SpaceAccessibility<ExecutionSpace, MemorySpace>::accessible;

/// The message of those static_asserts.
#define DPK_ACCESSIBLE_MESSAGE "dpk: the Views' memory space is not accessible from the execution space"

/// Rank-1..4 Views in `MemorySpace`, LayoutRight (row-major, like the .npy files).
template <class T, class MemorySpace>
using View1 = Kokkos::View<T*, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, MemorySpace>;

/// Unmanaged row-major matrix (a window into a larger buffer, e.g. the flat parameter buffer).
template <class T, class MemorySpace>
using MatrixView = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// ---- Workspace sizing: the one family of helpers that (re)allocates dpk's Views. Contents are
// never preserved; a View is freed before its replacement is allocated, so peak memory stays at
// one copy; labels are kept.

namespace detail {
/// Whether large host buffers get MADV_HUGEPAGE: DPK_HUGE_PAGES unset or 1 (yes), 0 (no).
inline bool huge_pages_wanted() { return env_switch("DPK_HUGE_PAGES", true); }

/// Bytes of a transparent huge page (x86-64, and arm64 with 4 KiB base pages).
inline constexpr std::size_t huge_page = std::size_t(2) << 20;
/// The first huge-page boundary at or above the address `at`.
inline constexpr std::uintptr_t huge_page_at_or_above(std::uintptr_t at) {
  return (at + huge_page - 1) & ~std::uintptr_t(huge_page - 1);
}

/// Asks Linux to back the whole 2 MiB pages inside [data, data + bytes) with transparent huge
/// pages (madvise(MADV_HUGEPAGE)) before anything touches them (buffers of 2 MiB or more: a
/// float32 water model's 4.06 MB parameter, gradient and Adam buffers included).
/// Where THP is in "madvise" mode (Debian's default) dpk's large workspaces would otherwise sit
/// on 4 KiB pages, and the passes that stream them pay TLB misses (docs/tuning.md, "Huge
/// pages"). Only a hint: failures and other systems change nothing.
inline void advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (data == nullptr || bytes < huge_page || !huge_pages_wanted()) return;
  std::uintptr_t const at = reinterpret_cast<std::uintptr_t>(data);
  std::uintptr_t const begin = huge_page_at_or_above(at), end = (at + bytes) & ~std::uintptr_t(huge_page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

/// Replaces `view` by an uninitialised View of `extents` named `label` (the old one freed first);
/// large host Views get huge pages (advise_huge_pages).
template <class ViewType, class... Extents>
void reallocate(ViewType& view, std::string const& label, Extents... extents) {
  view = ViewType();
  view = ViewType(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), extents...);
  if constexpr (std::is_same_v<typename ViewType::memory_space, Kokkos::HostSpace>)
    advise_huge_pages(view.data(), view.size() * sizeof(typename ViewType::value_type));
}
}  // namespace detail

/// `n` zeros named `label`. In host memory of at least 2 MiB (with huge pages wanted,
/// advise_huge_pages) they start on a 2 MiB boundary inside an allocation 2 MiB longer, and get
/// huge pages before the zeros touch them: every full 2 MiB of them, where a plain View (whose
/// data follows Kokkos' allocation header) would get none or one less, and whose constructor
/// touches them first. For the buffers every training step streams whole: parameters, gradient
/// and Adam's moments (a float32 water model's 4.06 MB each; docs/performance.md, "Twenty-sixth
/// session").
template <class Scalar, class MemorySpace>
View1<Scalar, MemorySpace> zeroed_vector(std::string const& label, std::size_t n) {
  using detail::huge_page;
  if constexpr (std::is_same_v<MemorySpace, Kokkos::HostSpace>) {
    if (n * sizeof(Scalar) >= huge_page && huge_page % sizeof(Scalar) == 0 && detail::huge_pages_wanted()) {
      std::size_t const pad = huge_page / sizeof(Scalar);
      View1<Scalar, MemorySpace> whole(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n + pad);
      std::uintptr_t const at = reinterpret_cast<std::uintptr_t>(whole.data());
      std::size_t const skip = (detail::huge_page_at_or_above(at) - at) / sizeof(Scalar);
      View1<Scalar, MemorySpace> const view = Kokkos::subview(whole, std::make_pair(skip, skip + n));
      detail::advise_huge_pages(view.data(), n * sizeof(Scalar));
      Kokkos::deep_copy(view, Scalar(0));
      return view;
    }
  }
  return View1<Scalar, MemorySpace>(label, n);  // zeros
}

/// Grows `view` to at least `extents` (never shrinks).
/// Workspaces use this so that a training step allocates only when a larger frame arrives.
template <class ViewType, class... Extents>
void ensure_extent(ViewType& view, Extents... extents) {
  std::size_t const want[] = {static_cast<std::size_t>(extents)...};
  bool grow = false;
  for (std::size_t r = 0; r < sizeof...(Extents); ++r) grow = grow || view.extent(r) < want[r];
  if (grow) detail::reallocate(view, view.label(), extents...);
}

/// ensure_extent for per-call workspaces whose size creeps up from one call to the next (MD
/// steps: the embedding rows of a liquid that settles, a domain's ghost count): when a View that
/// already holds data has to grow, its first extent gets 1/8 more than asked, so that the next
/// small growth allocates nothing. Each reallocation costs fresh pages that the kernel zeroes at
/// the first touch: LAMMPS + dpk on 192 water molecules reallocated the embedding nets' buffers
/// every few steps, 30 % of its profile (docs/md.md, "Performance: LAMMPS + pair_style dpk"). The
/// first allocation is exact. Only for Views whose extent(0) is a capacity, never a count.
template <class ViewType, class... Inner>
void ensure_extent_with_headroom(ViewType& view, std::size_t first, Inner... inner) {
  std::size_t const want[] = {first, static_cast<std::size_t>(inner)...};
  bool grow = false;
  for (std::size_t r = 0; r < 1 + sizeof...(Inner); ++r) grow = grow || view.extent(r) < want[r];
  if (!grow) return;
  std::size_t const rows = view.size() == 0 ? first : std::max(first + first / 8, std::size_t(view.extent(0)));
  detail::reallocate(view, view.label(), rows, inner...);
}

/// Makes every dimension but the first exactly `inner` (kernels assume those strides) and grows
/// the first to at least `rows` (atoms or centres: with headroom when it grows again, see
/// ensure_extent_with_headroom; a domain's ghost count creeps up between neighbour-list builds).
template <class ViewType, class... Inner>
void ensure_rows(ViewType& view, std::size_t rows, Inner... inner) {
  std::size_t const want[] = {static_cast<std::size_t>(inner)...};
  bool reshape = false;
  for (std::size_t r = 0; r < sizeof...(Inner); ++r) reshape = reshape || view.extent(r + 1) != want[r];
  if (reshape) detail::reallocate(view, view.label(), rows, inner...);
  else ensure_extent_with_headroom(view, rows, inner...);
}

/// Makes `view` exactly of `extents`; no allocation when they already match.
template <class ViewType, class... Extents>
void resize_exact(ViewType& view, Extents... extents) {
  std::size_t const want[] = {static_cast<std::size_t>(extents)...};
  bool same = true;
  for (std::size_t r = 0; r < sizeof...(Extents); ++r) same = same && view.extent(r) == want[r];
  if (!same) detail::reallocate(view, view.label(), extents...);
}

}  // namespace dpk
