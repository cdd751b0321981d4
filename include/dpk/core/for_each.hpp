#pragma once
/// \file for_each.hpp
/// \brief Elementwise loops over row-major matrices: one team per row, the columns across the
/// team's vector lanes (contiguous, vectorisable on CPUs, coalesced on GPUs), no index division.

#include <Kokkos_Core.hpp>

namespace dpk {

/// Calls f(r, c) for 0 <= r < rows, 0 <= c < cols on `space`; kernel label `label`.
template <class ExecutionSpace, class Functor>
void for_each_element(ExecutionSpace const& space, char const* label, int rows, int cols, Functor const& f) {
  if (rows <= 0 || cols <= 0) return;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  int const lanes = Policy::vector_length_max() < 32 ? Policy::vector_length_max() : 32;
  Kokkos::parallel_for(
      label, Policy(space, rows, 1, lanes), KOKKOS_LAMBDA(typename Policy::member_type const& team) {
        int const r = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](int const c) { f(r, c); });
      });
}

}  // namespace dpk
