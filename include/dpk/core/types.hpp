#pragma once
/// \file types.hpp
/// \brief Short aliases for the View types dpk passes between stages.

#include <Kokkos_Core.hpp>

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

/// Grows `view` to at least `extents` (never shrinks); contents are not preserved.
/// Workspaces use this so that a training step allocates only when a larger frame arrives.
template <class ViewType, class... Extents>
void ensure_extent(ViewType& view, Extents... extents) {
  std::size_t const want[] = {static_cast<std::size_t>(extents)...};
  bool grow = false;
  for (std::size_t r = 0; r < sizeof...(Extents); ++r) grow = grow || view.extent(r) < want[r];
  if (grow) {
    std::string const label = view.label();
    view = ViewType();  // free first: peak memory stays at one copy
    view = ViewType(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), extents...);
  }
}

}  // namespace dpk
