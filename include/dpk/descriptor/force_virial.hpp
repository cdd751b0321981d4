#pragma once
/// \file force_virial.hpp
/// \brief Forces, virial and per-atom virial from g = dE/d rows (SPEC.md section 6), and the
/// adjoint of that product (dL/dforce, dL/dvirial -> dL/dg, SPEC.md section 8).
///
/// Conventions: q_ij = sum_k g_ik deriv_ik (= dE/d r_ij) for centre i, slot j -> atom n;
/// force[i] += q, force[n] -= q; virial[frame][3a+b] += -q[a] r_ij[b];
/// atom_virial[n][3a+b] += -q[a] r_ij[b] (DeePMD-kit's prod_force_a / prod_virial_a).

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/neighbor/neighbor_list.hpp>
#include <string>
#include <vector>

namespace dpk {

namespace detail {

/// Second pass of the force product, per atom n: subtract the pair forces of the pairs that
/// point at n (contiguous in the reverse order), per-atom virial, and the frame virial as an
/// array reduction in double (deterministic for a given thread count).
template <class Scalar, class MemorySpace>
struct GatherForceVirial {
  using value_type = double[];
  using size_type = std::size_t;
  unsigned value_count;  // 9 * nframes
  int natoms;
  bool with_atom_virial;
  View1<int const, MemorySpace> reverse_offset;
  View2<Scalar const, MemorySpace> pair_force;  ///< (pairs, 6): dE/dr_ij and r_ij in reverse order
  View2<Scalar, MemorySpace> force, atom_virial;

  KOKKOS_INLINE_FUNCTION void operator()(int n, value_type virial) const {
    Scalar f0 = force(n, 0), f1 = force(n, 1), f2 = force(n, 2);
    Scalar w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    int const end = reverse_offset(n + 1);
    for (int p = reverse_offset(n); p < end; ++p) {
      Scalar const q[3] = {pair_force(p, 0), pair_force(p, 1), pair_force(p, 2)};
      Scalar const r[3] = {pair_force(p, 3), pair_force(p, 4), pair_force(p, 5)};
      f0 -= q[0];
      f1 -= q[1];
      f2 -= q[2];
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) w[3 * a + b] -= q[a] * r[b];
    }
    force(n, 0) = f0;
    force(n, 1) = f1;
    force(n, 2) = f2;
    if (with_atom_virial)
      for (int k = 0; k < 9; ++k) atom_virial(n, k) = w[k];
    int const frame = n / natoms;
    for (int k = 0; k < 9; ++k) virial[9 * frame + k] += double(w[k]);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type virial) const {
    for (unsigned k = 0; k < value_count; ++k) virial[k] = 0;
  }
  KOKKOS_INLINE_FUNCTION void join(value_type dst, value_type const src) const {
    for (unsigned k = 0; k < value_count; ++k) dst[k] += src[k];
  }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type dst, const volatile value_type src) const {
    for (unsigned k = 0; k < value_count; ++k) dst[k] += src[k];
  }
};

/// Checks shared by the product and its adjoint.
template <class Scalar, class MemorySpace>
void check_product_arguments(char const* where, EnvironmentMatrix<Scalar, MemorySpace> const& env,
                             NeighborList<Scalar, MemorySpace> const& list, int natoms, std::size_t g_rows,
                             std::size_t g_slots, std::size_t g_columns) {
  std::string const name(where);
  require(natoms > 0 && list.nloc % natoms == 0,
          name + ": nloc " + std::to_string(list.nloc) + " is not a multiple of natoms " + std::to_string(natoms));
  require(env.deriv.extent(0) >= std::size_t(list.nloc) && env.deriv.extent(1) == std::size_t(list.nnei),
          name + ": environment matrix does not match the neighbour list (nloc " + std::to_string(list.nloc) +
              ", nnei " + std::to_string(list.nnei) + ")");
  require(list.rij.extent(1) == std::size_t(list.nnei) && list.index.extent(1) == std::size_t(list.nnei),
          name + ": neighbour list views are not (nloc, nnei)");
  require(
      g_rows >= std::size_t(list.nloc) && g_slots == std::size_t(list.nnei) && g_columns == 4,
      name + ": g/v must be (nloc = " + std::to_string(list.nloc) + ", nnei = " + std::to_string(list.nnei) + ", 4)");
}

}  // namespace detail

/// Force, virial and (optionally) per-atom virial from g = dE/d rows (nloc, nnei, 4) (kernels
/// "dpk::descriptor::ProdForce", per centre, and "dpk::descriptor::ProdVirial", per atom). force (nloc, 3) and virial
/// (nframes, 9) are overwritten; atom_virial (nloc, 9) too unless it is an empty View (then skipped). Needs the list's
/// reverse index (NeighborSearch::build makes it). Synchronous (the frame virial is reduced on the host side in
/// double).
template <class Scalar, class ExecutionSpace>
void compute_force_virial(ExecutionSpace const& space,
                          detail::nondeduced_t<View3<Scalar const, typename ExecutionSpace::memory_space>> g,
                          EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space> const& env,
                          NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list, int natoms,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> force,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> virial,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> atom_virial) {
  using Mem = typename ExecutionSpace::memory_space;
  int const nloc = list.nloc;
  detail::check_product_arguments("compute_force_virial", env, list, natoms, g.extent(0), g.extent(1), g.extent(2));
  require(list.reverse_nloc == nloc,
          "compute_force_virial: the neighbour list has no reverse index; call build_reverse_neighbors(space, list)");
  int const nframes = nloc / natoms;
  require(force.extent(0) >= std::size_t(nloc) && force.extent(1) == 3,
          "compute_force_virial: force must be (nloc, 3)");
  require(virial.extent(0) >= std::size_t(nframes) && virial.extent(1) == 9,
          "compute_force_virial: virial must be (nframes = " + std::to_string(nframes) + ", 9)");
  bool const with_atom_virial = atom_virial.extent(0) > 0;
  require(!with_atom_virial || (atom_virial.extent(0) >= std::size_t(nloc) && atom_virial.extent(1) == 9),
          "compute_force_virial: atom_virial must be (nloc, 9) or empty");
  // Pass 1, per centre (streams g, deriv and r_ij): q = dE/dr_ij per pair, the centre's sum,
  // and (q, r_ij) stored together in the reverse order of the list. Pass 2, per atom: gather -q of the pairs pointing
  // at it and their virials. No atomics; results do not depend on the thread count.
  {
    int const nnei = list.nnei;
    auto index = list.index;
    auto deriv = env.deriv;
    auto position = list.reverse_position;
    auto pair_force = list.pair_force;
    auto rij = list.rij;
    Kokkos::parallel_for(
        "dpk::descriptor::ProdForce", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int i) {
          Scalar f0 = 0, f1 = 0, f2 = 0;
          for (int s = 0; s < nnei; ++s) {
            if (index(i, s) < 0) continue;
            Scalar const g0 = g(i, s, 0), g1 = g(i, s, 1), g2 = g(i, s, 2), g3 = g(i, s, 3);
            Scalar q[3];
            for (int d = 0; d < 3; ++d)
              q[d] = g0 * deriv(i, s, 0, d) + g1 * deriv(i, s, 1, d) + g2 * deriv(i, s, 2, d) + g3 * deriv(i, s, 3, d);
            f0 += q[0];
            f1 += q[1];
            f2 += q[2];
            int const p = position(i * nnei + s);
            for (int d = 0; d < 3; ++d) {
              pair_force(p, d) = q[d];
              pair_force(p, 3 + d) = rij(i, s, d);
            }
          }
          force(i, 0) = f0;
          force(i, 1) = f1;
          force(i, 2) = f2;
        });
  }
  detail::GatherForceVirial<Scalar, Mem> functor{
      unsigned(9 * nframes), natoms, with_atom_virial, list.reverse_offset, list.pair_force, force, atom_virial};
  std::vector<double> total(std::size_t(9) * nframes, 0.0);
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(total.data(), total.size());
  Kokkos::parallel_reduce("dpk::descriptor::ProdVirial", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), functor,
                          result);
  space.fence();
  auto virial_rows = Kokkos::subview(virial, std::make_pair(0, nframes), Kokkos::ALL());
  auto host = Kokkos::create_mirror_view(virial_rows);
  for (int f = 0; f < nframes; ++f)
    for (int k = 0; k < 9; ++k) host(f, k) = Scalar(total[9 * f + k]);
  Kokkos::deep_copy(space, virial_rows, host);
  space.fence();
}

/// Adjoint of compute_force_virial (kernel "dpk::descriptor::ForceVirialAdjoint"): given
/// cF = dL/dforce (nloc, 3) and cW = dL/dvirial (nframes, 9), writes v = dL/dg (nloc, nnei, 4):
/// for centre i, slot j -> atom n: c = cF[i] - cF[n] - cW[frame] r_ij, v_jk = sum_d deriv_jkd c_d;
/// 0 on empty slots.
template <class Scalar, class ExecutionSpace>
void force_virial_adjoint(ExecutionSpace const& space,
                          detail::nondeduced_t<View2<Scalar const, typename ExecutionSpace::memory_space>> cF,
                          detail::nondeduced_t<View2<Scalar const, typename ExecutionSpace::memory_space>> cW,
                          EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space> const& env,
                          NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list, int natoms,
                          detail::nondeduced_t<View3<Scalar, typename ExecutionSpace::memory_space>> v) {
  int const nloc = list.nloc, nnei = list.nnei;
  detail::check_product_arguments("force_virial_adjoint", env, list, natoms, v.extent(0), v.extent(1), v.extent(2));
  int const nframes = nloc / natoms;
  require(cF.extent(0) >= std::size_t(nloc) && cF.extent(1) == 3, "force_virial_adjoint: cF must be (nloc, 3)");
  require(cW.extent(0) >= std::size_t(nframes) && cW.extent(1) == 9,
          "force_virial_adjoint: cW must be (nframes = " + std::to_string(nframes) + ", 9)");
  auto deriv = env.deriv;
  auto rij = list.rij;
  auto index = list.index;
  Kokkos::parallel_for(
      "dpk::descriptor::ForceVirialAdjoint", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int i) {
        int const frame = i / natoms;
        Scalar w[9];
        for (int k = 0; k < 9; ++k) w[k] = cW(frame, k);
        Scalar const ci0 = cF(i, 0), ci1 = cF(i, 1), ci2 = cF(i, 2);
        for (int s = 0; s < nnei; ++s) {
          int const n = index(i, s);
          if (n < 0) {
            for (int k = 0; k < 4; ++k) v(i, s, k) = Scalar(0);
            continue;
          }
          Scalar const r0 = rij(i, s, 0), r1 = rij(i, s, 1), r2 = rij(i, s, 2);
          Scalar const c0 = ci0 - cF(n, 0) - (w[0] * r0 + w[1] * r1 + w[2] * r2);
          Scalar const c1 = ci1 - cF(n, 1) - (w[3] * r0 + w[4] * r1 + w[5] * r2);
          Scalar const c2 = ci2 - cF(n, 2) - (w[6] * r0 + w[7] * r1 + w[8] * r2);
          for (int k = 0; k < 4; ++k)
            v(i, s, k) = deriv(i, s, k, 0) * c0 + deriv(i, s, k, 1) * c1 + deriv(i, s, k, 2) * c2;
        }
      });
}

}  // namespace dpk
