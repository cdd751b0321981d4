#pragma once
/// \file environment_matrix.hpp
/// \brief se_e2_a environment matrix rows, normalised, and their derivatives w.r.t. r_ij
/// (SPEC.md section 3; DeePMD-kit's `env_mat_a` with `prod_env_mat_a` normalisation).

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <string>
#include <type_traits>

namespace dpk {

namespace detail {
/// Keeps a parameter out of template argument deduction (so View<T> converts to View<T const>).
template <class T>
struct nondeduced {
  using type = T;
};
/// Alias of nondeduced.
template <class T>
using nondeduced_t = typename nondeduced<T>::type;

}  // namespace detail

/// Normalisation of the environment matrix: (ntypes of the centre, nnei, 4). Rows of the
/// environment matrix of a centre of type t in slot j become (R - avg[t][j]) / std[t][j].
template <class Scalar, class MemorySpace>
struct EnvironmentStatistics {
  View3<Scalar, MemorySpace> avg{"dpk::descriptor::avg", 0, 0, 4};  ///< (ntypes, nnei, 4)
  View3<Scalar, MemorySpace> std{"dpk::descriptor::std", 0, 0, 4};  ///< (ntypes, nnei, 4)
};

/// Statistics that leave rows raw (avg 0, std 1), e.g. for computing the statistics themselves.
template <class Scalar, class MemorySpace>
EnvironmentStatistics<Scalar, MemorySpace> identity_statistics(int ntypes, int nnei) {
  EnvironmentStatistics<Scalar, MemorySpace> s;
  s.avg = View3<Scalar, MemorySpace>("dpk::descriptor::avg", ntypes, nnei, 4);
  s.std = View3<Scalar, MemorySpace>("dpk::descriptor::std", ntypes, nnei, 4);
  Kokkos::deep_copy(s.avg, Scalar(0));
  Kokkos::deep_copy(s.std, Scalar(1));
  return s;
}

/// Environment matrix of a batch. Rows [0, nloc) of the list it was computed from are valid.
template <class Scalar, class MemorySpace>
struct EnvironmentMatrix {
  /// (nloc, nnei, 4): normalised rows (R - avg[t_i][slot]) / std[t_i][slot]; empty slots -avg/std.
  View3<Scalar, MemorySpace> rows{"dpk::descriptor::rows", 0, 0, 4};
  /// (nloc, nnei, 4, 3): d rows / d r_ij (divided by std); 0 for empty slots.
  View4<Scalar, MemorySpace> deriv{"dpk::descriptor::deriv", 0, 0, 4, 3};
};

/// Computes the normalised environment matrix and its derivative for every (centre, slot) of
/// `list` (kernel "dpk::descriptor::EnvMat"). `types` (nloc) selects the statistics row of each
/// centre. Smooth weight: 1 below rcut_smth, u^3(-6u^2 + 15u - 10) + 1 up to rcut, 0 beyond.
/// `out` grows when needed (never shrinks).
template <class Scalar, class ExecutionSpace>
void compute_environment_matrix(
    ExecutionSpace const& space, NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list,
    detail::nondeduced_t<View1<int const, typename ExecutionSpace::memory_space>> types,
    EnvironmentStatistics<Scalar, typename ExecutionSpace::memory_space> const& statistics, double rcut_smth,
    double rcut, EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space>& out) {
  int const nloc = list.nloc, nnei = list.nnei;
  require(rcut > rcut_smth && rcut_smth >= 0,
          "compute_environment_matrix: need 0 <= rcut_smth < rcut, got rcut_smth " + std::to_string(rcut_smth) +
              ", rcut " + std::to_string(rcut));
  require(types.extent(0) >= std::size_t(nloc), "compute_environment_matrix: types has " +
                                                    std::to_string(types.extent(0)) + " entries, expected " +
                                                    std::to_string(nloc));
  require(statistics.avg.extent(1) == std::size_t(nnei) && statistics.std.extent(1) == std::size_t(nnei) &&
              statistics.avg.extent(2) == 4 && statistics.std.extent(2) == 4,
          "compute_environment_matrix: statistics avg/std must be (ntypes, nnei = " + std::to_string(nnei) +
              ", 4), got avg (" + std::to_string(statistics.avg.extent(0)) + ", " +
              std::to_string(statistics.avg.extent(1)) + ", " + std::to_string(statistics.avg.extent(2)) + ")");
  detail::ensure_rows(out.rows, nloc, nnei, 4);
  detail::ensure_rows(out.deriv, nloc, nnei, 4, 3);
  auto index = list.index;
  auto rij = list.rij;
  auto avg = statistics.avg;
  auto std = statistics.std;
  auto rows = out.rows;
  auto deriv = out.deriv;
  int const ntypes_stat = int(statistics.avg.extent(0));
  Scalar const rmin = Scalar(rcut_smth), rmax = Scalar(rcut);
  Scalar const inv_width = Scalar(1) / (rmax - rmin);
  Kokkos::parallel_for(
      "dpk::descriptor::EnvMat", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc * nnei),
      KOKKOS_LAMBDA(int e) {
        int const i = e / nnei, s = e - i * nnei;
        int t = types(i);
        t = t < 0 ? 0 : (t >= ntypes_stat ? ntypes_stat - 1 : t);
        if (index(i, s) < 0) {
          for (int k = 0; k < 4; ++k) {
            rows(i, s, k) = (Scalar(0) - avg(t, s, k)) / std(t, s, k);
            for (int d = 0; d < 3; ++d) deriv(i, s, k, d) = Scalar(0);
          }
          return;
        }
        Scalar const x[3] = {rij(i, s, 0), rij(i, s, 1), rij(i, s, 2)};
        Scalar const r2 = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
        Scalar const r = math::sqrt(r2);
        Scalar const inv_r = Scalar(1) / r;
        Scalar const inv_r2 = inv_r * inv_r;
        Scalar sw, dsw;  // weight and d weight / d r
        if (r < rmin) {
          sw = Scalar(1);
          dsw = Scalar(0);
        } else if (r < rmax) {
          Scalar const u = (r - rmin) * inv_width;
          Scalar const u2 = u * u;
          sw = u2 * u * (Scalar(-6) * u2 + Scalar(15) * u - Scalar(10)) + Scalar(1);
          dsw = Scalar(-30) * u2 * (u - Scalar(1)) * (u - Scalar(1)) * inv_width;
        } else {
          sw = Scalar(0);
          dsw = Scalar(0);
        }
        Scalar raw[4], d_raw[4][3];
        raw[0] = sw * inv_r;
        // d(sw/r)/dx_d = (dsw/r - sw/r^2) x_d / r
        Scalar const radial = (dsw * inv_r - sw * inv_r2) * inv_r;
        // d(sw x_k/r^2)/dx_d = sw delta_kd / r^2 + x_k x_d (dsw/r^3 - 2 sw/r^4)
        Scalar const angular = (dsw * inv_r - Scalar(2) * sw * inv_r2) * inv_r2;
        Scalar const sw_r2 = sw * inv_r2;
        for (int d = 0; d < 3; ++d) d_raw[0][d] = radial * x[d];
        for (int k = 0; k < 3; ++k) {
          raw[k + 1] = sw_r2 * x[k];
          for (int d = 0; d < 3; ++d) d_raw[k + 1][d] = angular * x[k] * x[d] + (k == d ? sw_r2 : Scalar(0));
        }
        for (int k = 0; k < 4; ++k) {
          Scalar const sd = std(t, s, k);
          rows(i, s, k) = (raw[k] - avg(t, s, k)) / sd;
          for (int d = 0; d < 3; ++d) deriv(i, s, k, d) = d_raw[k][d] / sd;
        }
      });
}

}  // namespace dpk
