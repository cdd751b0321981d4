#pragma once
/// \file scan.hpp
/// \brief Exclusive prefix sums of per-item counts (offsets of variable-length segments).

#include <Kokkos_Core.hpp>

namespace dpk {

/// offsets(k) = value(0) + ... + value(k - 1) for 0 <= k <= n (offsets has n + 1 entries, the
/// last one the total), on `space`. `value(k)` is an int-valued device-callable functor, called
/// for 0 <= k < n; kernel label `label`.
template <class ExecutionSpace, class Value, class Offsets>
void exclusive_scan(ExecutionSpace const& space, char const* label, int n, Value const& value, Offsets const& offsets) {
  Kokkos::parallel_scan(
      label, Kokkos::RangePolicy<ExecutionSpace>(space, 0, n + 1),
      KOKKOS_LAMBDA(int const k, int& partial, bool const final) {
        int const v = k < n ? value(k) : 0;
        if (final) offsets(k) = partial;
        partial += v;
      });
}

}  // namespace dpk
