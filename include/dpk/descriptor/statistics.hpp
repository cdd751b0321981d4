#pragma once
/// \file statistics.hpp
/// \brief avg/std of the raw environment matrix per centre type (SPEC.md section 3), as
/// DeePMD-kit computes them before training.

#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/environment_matrix.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace dpk {

namespace detail {

/// Per-type sums of raw rows (array reduction, in double): for type t, entries 5t..5t+4 are
/// rows counted, sum c0, sum c0^2, sum c1..c3, sum c1..c3 squared. Kokkos' own init (zeros) and
/// join (entry by entry sum) of array reductions complete it.
template <class Scalar, class MemorySpace>
struct EnvironmentSums {
  using value_type = double[];
  using size_type = std::size_t;
  unsigned value_count;
  int nnei, ntypes;
  View3<Scalar, MemorySpace> rows;
  View1<int const, MemorySpace> types;

  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type sums) const {
    int const t = types(i);
    if (t < 0 || t >= ntypes) return;
    double s0 = 0, s00 = 0, sa = 0, saa = 0;
    for (int s = 0; s < nnei; ++s) {
      double const c0 = rows(i, s, 0);
      s0 += c0;
      s00 += c0 * c0;
      for (int k = 1; k < 4; ++k) {
        double const c = rows(i, s, k);
        sa += c;
        saa += c * c;
      }
    }
    sums[5 * t + 0] += double(nnei);
    sums[5 * t + 1] += s0;
    sums[5 * t + 2] += s00;
    sums[5 * t + 3] += sa;
    sums[5 * t + 4] += saa;
  }
};

}  // namespace detail

/// Accumulates raw environment-matrix rows (computed with avg 0, std 1) over training frames,
/// per centre type, in double; finalize() gives DeePMD-kit's avg/std (same for every slot):
/// avg = (mean c0, 0, 0, 0), std = (sqrt(mean c0^2 - mean c0^2), std of c1..c3 pooled x3),
/// empty slots counting as zero rows, std floored at 1e-2; types without atoms: avg 0, std 1.
template <class Scalar, class ExecutionSpace>
class StatisticsAccumulator {
 public:
  using memory_space = typename ExecutionSpace::memory_space;

  /// Accumulator for `ntypes` centre types and `nnei` slots per centre.
  explicit StatisticsAccumulator(int ntypes, int nnei) : ntypes_(ntypes), nnei_(nnei), sums_(5 * ntypes, 0.0) {
    require(ntypes > 0 && nnei >= 0, "StatisticsAccumulator: need ntypes > 0 and nnei >= 0, got ntypes " +
                                         std::to_string(ntypes) + ", nnei " + std::to_string(nnei));
  }

  /// Adds the rows of centres [0, nloc) of `raw` (types(i) = type of centre i).
  void add(ExecutionSpace const& space, EnvironmentMatrix<Scalar, memory_space> const& raw,
           detail::nondeduced_t<View1<int const, memory_space>> types, int nloc) {
    require(raw.rows.extent(0) >= std::size_t(nloc) && raw.rows.extent(1) == std::size_t(nnei_),
            "StatisticsAccumulator::add: rows must be (>= nloc = " + std::to_string(nloc) + ", nnei = " +
                std::to_string(nnei_) + ", 4)");
    require(types.extent(0) >= std::size_t(nloc), "StatisticsAccumulator::add: types shorter than nloc");
    detail::EnvironmentSums<Scalar, memory_space> functor{unsigned(5 * ntypes_), nnei_, ntypes_, raw.rows, types};
    std::vector<double> partial(5 * ntypes_, 0.0);
    Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(partial.data(),
                                                                                               partial.size());
    Kokkos::parallel_reduce("dpk::descriptor::EnvStatistics", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc),
                            functor, result);
    space.fence();
    for (std::size_t k = 0; k < partial.size(); ++k) sums_[k] += partial[k];
  }

  /// avg and std of shape (ntypes, nnei, 4), flattened row-major.
  void finalize(std::vector<double>& avg, std::vector<double>& std) const {
    avg.assign(std::size_t(ntypes_) * nnei_ * 4, 0.0);
    std.assign(std::size_t(ntypes_) * nnei_ * 4, 1.0);
    for (int t = 0; t < ntypes_; ++t) {
      double const n = sums_[5 * t];
      if (n <= 0) continue;
      double const mean_r = sums_[5 * t + 1] / n;
      double const std_r = floored_std(sums_[5 * t + 2] / n - mean_r * mean_r);
      double const mean_a = sums_[5 * t + 3] / (3 * n);
      double const std_a = floored_std(sums_[5 * t + 4] / (3 * n) - mean_a * mean_a);
      for (int s = 0; s < nnei_; ++s) {
        std::size_t const base = (std::size_t(t) * nnei_ + s) * 4;
        avg[base] = mean_r;
        std[base] = std_r;
        for (int k = 1; k < 4; ++k) std[base + k] = std_a;
      }
    }
  }

  int ntypes() const { return ntypes_; }  ///< centre types
  int nnei() const { return nnei_; }      ///< slots per centre

 private:
  static double floored_std(double variance) {
    double const s = variance > 0 ? std::sqrt(variance) : 0.0;
    return s < 1e-2 ? 1e-2 : s;
  }
  int ntypes_, nnei_;
  std::vector<double> sums_;
};

}  // namespace dpk
