#pragma once
/// \file environment_matrix.hpp
/// \brief se_e2_a environment matrix rows, normalised, and their derivatives w.r.t. r_ij
/// (SPEC.md section 3; DeePMD-kit's `env_mat_a` with `prod_env_mat_a` normalisation).

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
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

/// Environment matrix of a batch. Rows [0, list.rows_searched()) of the list it was computed
/// from are valid; of the later rows (MD ghosts, no neighbours) only centre_type is written.
///
/// The derivative of the rows w.r.t. r_ij = x is kept in factored form, three scalars per slot
/// instead of twelve (the products and their adjoints rebuild what they need in registers):
/// d raw_0 / dx_d = radial x_d, d raw_{k+1} / dx_d = angular x_k x_d + tangential delta_kd, and
/// d rows_k / dx_d = inv_std[t][slot][k] d raw_k / dx_d. environment_derivative() expands it.
template <class Scalar, class MemorySpace>
struct EnvironmentMatrix {
  /// (nloc, nnei, 4): normalised rows (R - avg[t_i][slot]) / std[t_i][slot]; empty slots -avg/std.
  View3<Scalar, MemorySpace> rows{"dpk::descriptor::rows", 0, 0, 4};
  /// (nloc, nnei, 3): (radial, angular, tangential) derivative factors of the raw rows; 0 for empty slots.
  View3<Scalar, MemorySpace> factors{"dpk::descriptor::factors", 0, 0, 3};
  /// (nloc): statistics row (centre type, clamped to the statistics' types) of each centre.
  View1<int, MemorySpace> centre_type{"dpk::descriptor::centre_type", 0};
  /// (ntypes, nnei, 4): 1 / std of the statistics the rows were normalised with.
  View3<Scalar, MemorySpace> inv_std{"dpk::descriptor::inv_std", 0, 0, 4};
};

namespace detail {

/// q_d = sum_k g_k d rows_k / dx_d for one slot: factors f = (radial, angular, tangential),
/// s = 1/std of the four columns, x = r_ij.
template <class Scalar>
KOKKOS_INLINE_FUNCTION void row_derivative_times(Scalar const f[3], Scalar const s[4], Scalar const x[3],
                                                 Scalar const g[4], Scalar q[3]) {
  Scalar const h1 = g[1] * s[1], h2 = g[2] * s[2], h3 = g[3] * s[3];
  Scalar const along = g[0] * s[0] * f[0] + f[1] * (h1 * x[0] + h2 * x[1] + h3 * x[2]);
  q[0] = along * x[0] + f[2] * h1;
  q[1] = along * x[1] + f[2] * h2;
  q[2] = along * x[2] + f[2] * h3;
}

/// v_k = sum_d (d rows_k / dx_d) c_d for one slot (the transpose of row_derivative_times).
template <class Scalar>
KOKKOS_INLINE_FUNCTION void row_derivative_transpose_times(Scalar const f[3], Scalar const s[4], Scalar const x[3],
                                                           Scalar const c[3], Scalar v[4]) {
  Scalar const xc = x[0] * c[0] + x[1] * c[1] + x[2] * c[2];
  v[0] = s[0] * f[0] * xc;
  for (int k = 0; k < 3; ++k) v[k + 1] = s[k + 1] * (f[1] * x[k] * xc + f[2] * c[k]);
}

/// Statistics row of a centre of type `t`: its type, clamped to the statistics' `ntypes_stat` types.
KOKKOS_INLINE_FUNCTION int statistics_row(int t, int ntypes_stat) {
  return t < 0 ? 0 : (t >= ntypes_stat ? ntypes_stat - 1 : t);
}

}  // namespace detail

/// Computes the normalised environment matrix and its derivative factors for every (centre,
/// slot) of `list` (kernels "dpk::descriptor::InvStd" and "dpk::descriptor::EnvMat"). `types`
/// (nloc) selects the statistics row of each centre. Rows of ghosts past list.rows_searched()
/// get only their centre_type (no slot of theirs is ever read). Smooth weight: 1 below rcut_smth,
/// u^3(-6u^2 + 15u - 10) + 1 up to rcut, 0 beyond. `out` grows when needed (never shrinks).
template <class Scalar, class ExecutionSpace>
void compute_environment_matrix(
    ExecutionSpace const& space, NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list,
    detail::nondeduced_t<View1<int const, typename ExecutionSpace::memory_space>> types,
    EnvironmentStatistics<Scalar, typename ExecutionSpace::memory_space> const& statistics, double rcut_smth,
    double rcut, EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space>& out) {
  int const nloc = list.nloc, nnei = list.nnei, searched = list.rows_searched();
  require(rcut > rcut_smth && rcut_smth >= 0,
          "compute_environment_matrix: need 0 <= rcut_smth < rcut, got rcut_smth " + std::to_string(rcut_smth) +
              ", rcut " + std::to_string(rcut));
  require(types.extent(0) >= std::size_t(nloc), "compute_environment_matrix: types has " +
                                                    std::to_string(types.extent(0)) + " entries, expected " +
                                                    std::to_string(nloc));
  require(statistics.avg.extent(1) == std::size_t(nnei) && statistics.std.extent(1) == std::size_t(nnei) &&
              statistics.avg.extent(2) == 4 && statistics.std.extent(2) == 4 &&
              statistics.avg.extent(0) == statistics.std.extent(0) && statistics.avg.extent(0) > 0,
          "compute_environment_matrix: statistics avg/std must be (ntypes, nnei = " + std::to_string(nnei) +
              ", 4), got avg (" + std::to_string(statistics.avg.extent(0)) + ", " +
              std::to_string(statistics.avg.extent(1)) + ", " + std::to_string(statistics.avg.extent(2)) +
              "), std (" + std::to_string(statistics.std.extent(0)) + ", " +
              std::to_string(statistics.std.extent(1)) + ", " + std::to_string(statistics.std.extent(2)) + ")");
  int const ntypes_stat = int(statistics.avg.extent(0));
  ensure_rows(out.rows, nloc, nnei, 4);
  ensure_rows(out.factors, nloc, nnei, 3);
  ensure_extent(out.centre_type, std::size_t(nloc));
  ensure_extent(out.inv_std, std::size_t(ntypes_stat), std::size_t(nnei), std::size_t(4));
  auto std = statistics.std;
  auto inv_std = out.inv_std;
  Kokkos::parallel_for(
      "dpk::descriptor::InvStd", Kokkos::RangePolicy<ExecutionSpace>(space, 0, ntypes_stat * nnei * 4),
      KOKKOS_LAMBDA(int e) {
        int const t = e / (4 * nnei), s = (e / 4) % nnei, k = e % 4;
        inv_std(t, s, k) = Scalar(1) / std(t, s, k);
      });
  auto index = list.index;
  auto rij = list.rij;
  auto avg = statistics.avg;
  auto rows = out.rows;
  auto factors = out.factors;
  auto centre_type = out.centre_type;
  Scalar const rmin = Scalar(rcut_smth), rmax = Scalar(rcut);
  Scalar const inv_width = Scalar(1) / (rmax - rmin);
  if (searched < nloc)
    Kokkos::parallel_for(
        "dpk::descriptor::EnvMat_ghost_types", Kokkos::RangePolicy<ExecutionSpace>(space, searched, nloc),
        KOKKOS_LAMBDA(int const i) { centre_type(i) = detail::statistics_row(types(i), ntypes_stat); });
  Kokkos::parallel_for(
      "dpk::descriptor::EnvMat", DynamicRangePolicy<ExecutionSpace>(space, 0, searched * nnei), KOKKOS_LAMBDA(int e) {
        int const i = e / nnei, s = e - i * nnei;
        int const t = detail::statistics_row(types(i), ntypes_stat);
        if (s == 0) centre_type(i) = t;
        // Raw pointers into dense LayoutRight rows: indexing through the captured Views
        // reloads their strides after every store.
        Scalar* const row = &rows(i, s, 0);
        Scalar* const fac = &factors(i, s, 0);
        Scalar const* const a = &avg(t, s, 0);
        Scalar const* const sd = &inv_std(t, s, 0);
        if (index(i, s) < 0) {
          for (int k = 0; k < 4; ++k) row[k] = (Scalar(0) - a[k]) * sd[k];
          for (int k = 0; k < 3; ++k) fac[k] = Scalar(0);
          return;
        }
        Scalar const* const xr = &rij(i, s, 0);
        Scalar const x[3] = {xr[0], xr[1], xr[2]};
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
        Scalar const sw_r2 = sw * inv_r2;
        // raw = (sw/r, sw x/r^2). d(sw/r)/dx_d = (dsw/r - sw/r^2) x_d / r;
        // d(sw x_k/r^2)/dx_d = sw delta_kd / r^2 + x_k x_d (dsw/r^3 - 2 sw/r^4).
        fac[0] = (dsw * inv_r - sw * inv_r2) * inv_r;
        fac[1] = (dsw * inv_r - Scalar(2) * sw * inv_r2) * inv_r2;
        fac[2] = sw_r2;
        row[0] = (sw * inv_r - a[0]) * sd[0];
        for (int k = 0; k < 3; ++k) row[k + 1] = (sw_r2 * x[k] - a[k + 1]) * sd[k + 1];
      });
}

/// Expands the factored derivative of `env` into d rows / d r_ij, (nloc, nnei, 4, 3) (kernel
/// "dpk::descriptor::EnvMatDeriv"; 0 for empty slots; rows past list.rows_searched() are not
/// written). For inspection and tests: the products use the factors directly. `deriv` grows when
/// needed.
template <class Scalar, class ExecutionSpace>
void environment_derivative(ExecutionSpace const& space,
                            EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space> const& env,
                            NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list,
                            View4<Scalar, typename ExecutionSpace::memory_space>& deriv) {
  int const nloc = list.nloc, nnei = list.nnei;
  require(env.factors.extent(0) >= std::size_t(nloc) && env.factors.extent(1) == std::size_t(nnei),
          "environment_derivative: environment matrix does not match the neighbour list (nloc " +
              std::to_string(nloc) + ", nnei " + std::to_string(nnei) + ")");
  ensure_rows(deriv, nloc, nnei, 4, 3);
  auto factors = env.factors;
  auto centre_type = env.centre_type;
  auto inv_std = env.inv_std;
  auto rij = list.rij;
  Kokkos::parallel_for(
      "dpk::descriptor::EnvMatDeriv", DynamicRangePolicy<ExecutionSpace>(space, 0, list.rows_searched() * nnei),
      KOKKOS_LAMBDA(int e) {
        int const i = e / nnei, s = e - i * nnei, t = centre_type(i);
        Scalar const f[3] = {factors(i, s, 0), factors(i, s, 1), factors(i, s, 2)};
        Scalar const x[3] = {rij(i, s, 0), rij(i, s, 1), rij(i, s, 2)};
        for (int d = 0; d < 3; ++d) {
          deriv(i, s, 0, d) = inv_std(t, s, 0) * f[0] * x[d];
          for (int k = 0; k < 3; ++k)
            deriv(i, s, k + 1, d) = inv_std(t, s, k + 1) * (f[1] * x[k] * x[d] + (k == d ? f[2] : Scalar(0)));
        }
      });
}

}  // namespace dpk
