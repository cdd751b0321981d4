#pragma once
/// \file force_virial.hpp
/// \brief Forces, virial and per-atom virial from g = dE/d rows (SPEC.md section 6), and the
/// adjoint of that product (dL/dforce, dL/dvirial -> dL/dg, SPEC.md section 8).
///
/// Conventions: q_ij = sum_k g_ik d rows_ik / d r_ij (= dE/d r_ij) for centre i, slot j -> atom n;
/// force[i] += q, force[n] -= q; virial[frame][3a+b] += -q[a] r_ij[b];
/// atom_virial[n][3a+b] += -q[a] r_ij[b] (DeePMD-kit's prod_force_a / prod_virial_a).
///
/// Two schedules, chosen by the execution space (on host threads also by memory: private
/// accumulators only while threads * columns <= 3 * nnei, columns 3, or 12 with per-atom
/// virials); both use no atomics and are deterministic for a given thread count:
/// - host threads (detail::force_virial_private_sums): each thread takes a contiguous block of
///   centres and adds -q into its own force (and per-atom virial) accumulators, one row per atom;
///   a pass per atom then sums the threads' rows in thread order. Nothing written is shared
///   between threads before that sum;
/// - devices (detail::force_virial_scatter_gather): q (and r_ij for per-atom virials) of every pair
///   is stored in the reverse order of the list, then each atom gathers the pairs pointing at it.

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dpk {

/// Scratch of compute_force_virial, grown when a larger batch arrives (never shrinks). Keep one
/// per model or MD engine and pass it to every call.
template <class Scalar, class MemorySpace>
struct ForceVirialWorkspace {
  /// Host schedule: per-thread accumulators, threads * nloc * (3, or 12 with per-atom virials).
  View1<Scalar, MemorySpace> accumulators{"dpk::descriptor::force_accumulators", 0};
  /// Device schedule: q (and r_ij) per pair in reverse-list order, pairs * (3, or 6).
  View1<Scalar, MemorySpace> pair_force{"dpk::descriptor::pair_force", 0};
  /// Frame virials as reduced (double, on the device), nframes * 9.
  View1<double, MemorySpace> frame_sums{"dpk::descriptor::frame_virial_sums", 0};
};

namespace detail {

/// q = dE/dr_ij of the filled slots of a centre, from g and the factored row derivative. Rows are
/// walked through raw pointers into the dense LayoutRight Views (inner dimensions contiguous):
/// indexing through captured Views reloads their strides after every store.
template <class Scalar, class MemorySpace>
struct PairForceSource {
  int nnei;
  View3<Scalar const, MemorySpace> g;
  View2<int const, MemorySpace> index;
  View3<Scalar const, MemorySpace> rij, factors, inv_std;
  View1<int const, MemorySpace> centre_type;

  /// Calls visit(s, n, q, x) for every filled slot s of centre i (n: neighbour atom,
  /// q = dE/dr_ij, x = r_ij).
  template <class Visit>
  KOKKOS_INLINE_FUNCTION void for_each_pair(int i, Visit&& visit) const {
    int const* const idx = &index(i, 0);
    Scalar const* const gr = &g(i, 0, 0);
    Scalar const* const xr = &rij(i, 0, 0);
    Scalar const* const fr = &factors(i, 0, 0);
    Scalar const* const sr = &inv_std(centre_type(i), 0, 0);
    for (int s = 0; s < nnei; ++s) {
      int const n = idx[s];
      if (n < 0) continue;
      Scalar q[3];
      row_derivative_times(fr + 3 * s, sr + 4 * s, xr + 3 * s, gr + 4 * s, q);
      visit(s, n, q, xr + 3 * s);
    }
  }
};

/// A parallel_reduce functor whose result is the frame virials (9 * nframes doubles, summed in a
/// fixed order): calls body(k, virial) for each index k; Body adds its share to virial. Kokkos'
/// own init (zeros) and join (entry by entry sum) of array reductions complete it.
template <class Body>
struct FrameVirialReduction {
  using value_type = double[];
  using size_type = std::size_t;
  unsigned value_count;  ///< 9 * nframes
  Body body;
  KOKKOS_INLINE_FUNCTION void operator()(int k, value_type virial) const { body(k, virial); }
};

/// Host schedule, pass 1, one call per block of centres (`worker`) among the rows that may have
/// neighbours ([0, searched)): zero the block's accumulator rows (per atom: force, then the
/// per-atom virial when columns is 12), then for each centre i of the block and each pair
/// i -> n: row[n] -= q (and -= q (x) r_ij), row[i] += sum q, frame virial -= q (x) r_ij.
template <class Scalar, class MemorySpace>
struct PrivateSumsBody {
  PairForceSource<Scalar, MemorySpace> source;
  int nloc, searched, natoms, workers, columns;
  Scalar* accumulators;

  KOKKOS_INLINE_FUNCTION void operator()(int worker, double* virial) const {
    int const cols = columns;
    Scalar* const acc = accumulators + std::size_t(worker) * std::size_t(nloc) * std::size_t(cols);
    for (std::size_t k = 0; k < std::size_t(nloc) * std::size_t(cols); ++k) acc[k] = Scalar(0);
    int const begin = int(std::int64_t(searched) * worker / workers);
    int const end = int(std::int64_t(searched) * (worker + 1) / workers);
    for (int i = begin; i < end; ++i) {
      Scalar f[3] = {0, 0, 0};
      Scalar w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
      source.for_each_pair(i, [&](int, int n, Scalar const* q, Scalar const* x) {
        Scalar* const row = acc + std::size_t(n) * cols;
        for (int a = 0; a < 3; ++a) {
          f[a] += q[a];
          row[a] -= q[a];
          for (int b = 0; b < 3; ++b) w[3 * a + b] -= q[a] * x[b];
        }
        if (cols == 12)
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) row[3 + 3 * a + b] -= q[a] * x[b];
      });
      Scalar* const row = acc + std::size_t(i) * cols;
      for (int a = 0; a < 3; ++a) row[a] += f[a];
      int const frame = i / natoms;
      for (int k = 0; k < 9; ++k) virial[9 * frame + k] += double(w[k]);
    }
  }
};

/// Device schedule, pass 1, per centre i: q of every pair stored at the pair's reverse-index
/// position (followed by r_ij when stride is 6), the centre's force sum q, frame virial.
template <class Scalar, class MemorySpace>
struct ScatterBody {
  PairForceSource<Scalar, MemorySpace> source;
  int natoms, stride;
  View1<int const, MemorySpace> position;
  Scalar* pair_force;
  View2<Scalar, MemorySpace> force;

  KOKKOS_INLINE_FUNCTION void operator()(int i, double* virial) const {
    Scalar f[3] = {0, 0, 0};
    Scalar w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    int const* const pos = &position(i * source.nnei);
    source.for_each_pair(i, [&](int s, int, Scalar const* q, Scalar const* x) {
      Scalar* const out = pair_force + std::size_t(stride) * std::size_t(pos[s]);
      for (int a = 0; a < 3; ++a) {
        f[a] += q[a];
        out[a] = q[a];
        for (int b = 0; b < 3; ++b) w[3 * a + b] -= q[a] * x[b];
      }
      if (stride == 6)
        for (int b = 0; b < 3; ++b) out[3 + b] = x[b];
    });
    for (int a = 0; a < 3; ++a) force(i, a) = f[a];
    int const frame = i / natoms;
    for (int k = 0; k < 9; ++k) virial[9 * frame + k] += double(w[k]);
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
  require(env.factors.extent(0) >= std::size_t(list.nloc) && env.factors.extent(1) == std::size_t(list.nnei) &&
              env.centre_type.extent(0) >= std::size_t(list.nloc) && env.inv_std.extent(1) == std::size_t(list.nnei),
          name + ": environment matrix does not match the neighbour list (nloc " + std::to_string(list.nloc) +
              ", nnei " + std::to_string(list.nnei) + ")");
  require(list.rij.extent(1) == std::size_t(list.nnei) && list.index.extent(1) == std::size_t(list.nnei),
          name + ": neighbour list views are not (nloc, nnei)");
  require(
      g_rows >= std::size_t(list.nloc) && g_slots == std::size_t(list.nnei) && g_columns == 4,
      name + ": g/v must be (nloc = " + std::to_string(list.nloc) + ", nnei = " + std::to_string(list.nnei) + ", 4)");
}

/// The operands of compute_force_virial, as the schedules take them.
template <class Scalar, class MemorySpace>
struct ProductOperands {
  View3<Scalar const, MemorySpace> g;
  EnvironmentMatrix<Scalar, MemorySpace> const& env;
  NeighborList<Scalar, MemorySpace> const& list;
  int natoms;
  View2<Scalar, MemorySpace> force, virial, atom_virial;  ///< atom_virial may be empty (skipped)

  PairForceSource<Scalar, MemorySpace> source() const {
    return {list.nnei, g, list.index, list.rij, env.factors, env.inv_std, env.centre_type};
  }
};

/// Checks of compute_force_virial's outputs; returns nframes.
template <class Scalar, class MemorySpace>
int check_force_virial_outputs(ProductOperands<Scalar, MemorySpace> const& in) {
  int const nloc = in.list.nloc, nframes = nloc / in.natoms;
  require(in.force.extent(0) >= std::size_t(nloc) && in.force.extent(1) == 3,
          "compute_force_virial: force must be (nloc, 3)");
  require(in.virial.extent(0) >= std::size_t(nframes) && in.virial.extent(1) == 9,
          "compute_force_virial: virial must be (nframes = " + std::to_string(nframes) + ", 9)");
  require(in.atom_virial.extent(0) == 0 ||
              (in.atom_virial.extent(0) >= std::size_t(nloc) && in.atom_virial.extent(1) == 9),
          "compute_force_virial: atom_virial must be (nloc, 9) or empty");
  return nframes;
}

/// Runs reduction (a FrameVirialReduction) over `policy`, then writes the frame virials, summed
/// in double into a device View (no host round trip), into virial (nframes, 9) as Scalar.
/// Fences. Allocates only when `work` grows.
template <class Scalar, class ExecutionSpace, class Policy, class Reduction>
void reduce_frame_virial(ExecutionSpace const& space, char const* label, Policy const& policy,
                         Reduction const& reduction, int nframes,
                         View2<Scalar, typename ExecutionSpace::memory_space> const& virial,
                         ForceVirialWorkspace<Scalar, typename ExecutionSpace::memory_space>& work) {
  ensure_extent(work.frame_sums, std::size_t(9) * nframes);
  auto const sums = Kokkos::subview(work.frame_sums, std::make_pair(std::size_t(0), std::size_t(9) * nframes));
  Kokkos::parallel_reduce(label, policy, reduction, sums);
  Kokkos::parallel_for(
      "dpk::descriptor::frame_virial", Kokkos::RangePolicy<ExecutionSpace>(space, 0, 9 * nframes),
      KOKKOS_LAMBDA(int const k) { virial(k / 9, k % 9) = Scalar(sums(k)); });
  space.fence();
}

/// The host schedule of compute_force_virial (file comment): correct on any space, sized for host
/// threads (one accumulator block per unit of concurrency). Kernels
/// "dpk::descriptor::ProdForce" (one index per block of centres) and "dpk::descriptor::ProdVirial"
/// (per atom: the blocks' rows summed in block order).
template <class Scalar, class ExecutionSpace>
void force_virial_private_sums(ExecutionSpace const& space,
                               ProductOperands<Scalar, typename ExecutionSpace::memory_space> const& in,
                               ForceVirialWorkspace<Scalar, typename ExecutionSpace::memory_space>& work) {
  using Mem = typename ExecutionSpace::memory_space;
  int const nloc = in.list.nloc, natoms = in.natoms;
  int const nframes = check_force_virial_outputs(in);
  auto force = in.force;
  auto atom_virial = in.atom_virial;
  int const workers = std::max(1, std::min(int(space.concurrency()), nloc));
  int const columns = atom_virial.extent(0) > 0 ? 12 : 3;
  std::size_t const block = std::size_t(nloc) * std::size_t(columns);
  ensure_extent(work.accumulators, std::size_t(workers) * block);
  Scalar* const acc = work.accumulators.data();
  FrameVirialReduction<PrivateSumsBody<Scalar, Mem>> reduction{
      unsigned(9 * nframes), {in.source(), nloc, in.list.rows_searched(), natoms, workers, columns, acc}};
  reduce_frame_virial<Scalar>(space, "dpk::descriptor::ProdForce",
                              Kokkos::RangePolicy<ExecutionSpace>(space, 0, workers).set_chunk_size(1), reduction,
                              nframes, in.virial, work);
  Kokkos::parallel_for(
      "dpk::descriptor::ProdVirial", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int n) {
        Scalar sum[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        for (int b = 0; b < workers; ++b) {
          Scalar const* const row = acc + b * block + std::size_t(n) * columns;
          for (int k = 0; k < columns; ++k) sum[k] += row[k];
        }
        for (int a = 0; a < 3; ++a) force(n, a) = sum[a];
        if (columns == 12)
          for (int k = 0; k < 9; ++k) atom_virial(n, k) = sum[3 + k];
      });
  space.fence();
}

/// The device schedule of compute_force_virial (file comment); also the host fallback. Kernels
/// "dpk::descriptor::ProdForce" (per centre) and "dpk::descriptor::ProdVirial" (per atom: gather
/// of the pairs pointing at it).
template <class Scalar, class ExecutionSpace>
void force_virial_scatter_gather(ExecutionSpace const& space,
                                 ProductOperands<Scalar, typename ExecutionSpace::memory_space> const& in,
                                 ForceVirialWorkspace<Scalar, typename ExecutionSpace::memory_space>& work) {
  int const nframes = check_force_virial_outputs(in);
  int const stride = in.atom_virial.extent(0) > 0 ? 6 : 3;  // q, or q and r_ij, per pair
  int const nloc = in.list.nloc;
  auto force = in.force;
  auto atom_virial = in.atom_virial;
  ensure_extent(work.pair_force, (std::size_t(nloc) * std::size_t(in.list.nnei) + 1) * std::size_t(stride));
  Scalar* const pair_force = work.pair_force.data();
  FrameVirialReduction<ScatterBody<Scalar, typename ExecutionSpace::memory_space>> reduction{
      unsigned(9 * nframes), {in.source(), in.natoms, stride, in.list.reverse_position, pair_force, force}};
  reduce_frame_virial<Scalar>(space, "dpk::descriptor::ProdForce",
                              Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), reduction, nframes, in.virial, work);
  auto offset = in.list.reverse_offset;
  Kokkos::parallel_for(
      "dpk::descriptor::ProdVirial", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int n) {
        Scalar f[3] = {force(n, 0), force(n, 1), force(n, 2)};
        Scalar w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
        int const begin = offset(n), end = offset(n + 1);
        Scalar const* const q = pair_force + std::size_t(stride) * std::size_t(begin);
        for (int p = 0; p < end - begin; ++p) {
          for (int a = 0; a < 3; ++a) f[a] -= q[stride * p + a];
          if (stride == 6)
            for (int a = 0; a < 3; ++a)
              for (int b = 0; b < 3; ++b) w[3 * a + b] -= q[6 * p + a] * q[6 * p + 3 + b];
        }
        for (int a = 0; a < 3; ++a) force(n, a) = f[a];
        if (stride == 6)
          for (int k = 0; k < 9; ++k) atom_virial(n, k) = w[k];
      });
  space.fence();
}

}  // namespace detail

/// Force, virial and (optionally) per-atom virial from g = dE/d rows (nloc, nnei, 4). force
/// (nloc, 3) and virial (nframes, 9) are overwritten; atom_virial (nloc, 9) too unless it is an
/// empty View (then skipped). Needs the list's reverse index (NeighborSearch::build makes it).
/// Synchronous (the frame virial is reduced on the host side in double). `work` grows when
/// needed; reuse it across calls.
template <class Scalar, class ExecutionSpace>
void compute_force_virial(ExecutionSpace const& space,
                          detail::nondeduced_t<View3<Scalar const, typename ExecutionSpace::memory_space>> g,
                          EnvironmentMatrix<Scalar, typename ExecutionSpace::memory_space> const& env,
                          NeighborList<Scalar, typename ExecutionSpace::memory_space> const& list, int natoms,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> force,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> virial,
                          detail::nondeduced_t<View2<Scalar, typename ExecutionSpace::memory_space>> atom_virial,
                          ForceVirialWorkspace<Scalar, typename ExecutionSpace::memory_space>& work) {
  detail::check_product_arguments("compute_force_virial", env, list, natoms, g.extent(0), g.extent(1), g.extent(2));
  require(list.reverse_nloc == list.nloc,
          "compute_force_virial: the neighbour list has no reverse index; call build_reverse_neighbors(space, list)");
  detail::ProductOperands<Scalar, typename ExecutionSpace::memory_space> const in{g,     env,    list,       natoms,
                                                                                   force, virial, atom_virial};
  if constexpr (host_schedule_v<ExecutionSpace>) {
    // Private accumulators cost threads * (3 or 12) scalars per atom; beyond the 3 * nnei of r_ij
    // itself (many threads) the scatter/gather schedule's pair workspace is the smaller one.
    int const columns = atom_virial.extent(0) > 0 ? 12 : 3;
    if (std::int64_t(space.concurrency()) * columns <= 3 * std::int64_t(list.nnei)) {
      detail::force_virial_private_sums<Scalar>(space, in, work);
      return;
    }
  }
  detail::force_virial_scatter_gather<Scalar>(space, in, work);
}

/// Adjoint of compute_force_virial (kernel "dpk::descriptor::ForceVirialAdjoint"): given
/// cF = dL/dforce (nloc, 3) and cW = dL/dvirial (nframes, 9), writes v = dL/dg (nloc, nnei, 4):
/// for centre i, slot j -> atom n: c = cF[i] - cF[n] - cW[frame] r_ij, v_jk = sum_d (d rows_jk / d r_ij,d) c_d;
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
  auto factors = env.factors;
  auto inv_std = env.inv_std;
  auto centre_type = env.centre_type;
  auto rij = list.rij;
  auto index = list.index;
  Kokkos::parallel_for(
      "dpk::descriptor::ForceVirialAdjoint", DynamicRangePolicy<ExecutionSpace>(space, 0, nloc), KOKKOS_LAMBDA(int i) {
        int const frame = i / natoms, t = centre_type(i);
        Scalar w[9];
        for (int k = 0; k < 9; ++k) w[k] = cW(frame, k);
        Scalar const ci0 = cF(i, 0), ci1 = cF(i, 1), ci2 = cF(i, 2);
        // Rows of centre i (LayoutRight: slot-major, components contiguous).
        int const* const idx = &index(i, 0);
        Scalar const* const xr = &rij(i, 0, 0);
        Scalar const* const fr = &factors(i, 0, 0);
        Scalar const* const sr = &inv_std(t, 0, 0);
        Scalar* const vr = &v(i, 0, 0);
        for (int s = 0; s < nnei; ++s) {
          int const n = idx[s];
          if (n < 0) {
            for (int k = 0; k < 4; ++k) vr[4 * s + k] = Scalar(0);
            continue;
          }
          Scalar const x[3] = {xr[3 * s], xr[3 * s + 1], xr[3 * s + 2]};
          Scalar const c[3] = {ci0 - cF(n, 0) - (w[0] * x[0] + w[1] * x[1] + w[2] * x[2]),
                               ci1 - cF(n, 1) - (w[3] * x[0] + w[4] * x[1] + w[5] * x[2]),
                               ci2 - cF(n, 2) - (w[6] * x[0] + w[7] * x[1] + w[8] * x[2])};
          Scalar out[4];
          detail::row_derivative_transpose_times(fr + 3 * s, sr + 4 * s, x, c, out);
          for (int k = 0; k < 4; ++k) vr[4 * s + k] = out[k];
        }
      });
}

}  // namespace dpk
