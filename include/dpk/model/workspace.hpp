#pragma once
/// \file workspace.hpp
/// \brief Every buffer of one batch, grouped by the stage that writes it. EnergyModel owns one
/// and hands each stage its inputs and outputs from here as arguments; the buffers are sized on
/// the first batch and grow only when a larger batch arrives (ModelWorkspace::reserve).
///
/// | buffer | written by | read by |
/// |---|---|---|
/// | nlist, env | neighbours, environment (or a kept setup's, model/batch_setup_cache.hpp) | layout, force/virial products, their adjoint |
/// | layout | batch layout (or a kept setup's) | every later stage |
/// | s, t, d | descriptor forward | fitting forward, descriptor cotangent, tangent, reverse |
/// | de_dd | fitting input cotangent | descriptor cotangent; the reverse pass (Delta) |
/// | a, de_dg, de_ds, de_drn | descriptor cotangent | force/virial products; the reverse pass |
/// | v | adjoint of the products | descriptor tangent |
/// | s_tangent, t_tangent, d_tangent | descriptor tangent | fitting tangent and reverse, descriptor reverse |
/// | dl_dd | fitting reverse | descriptor reverse |
/// | dl_dt, dl_dg | descriptor reverse (internal) | embedding reverse |

#include <dpk/core/types.hpp>
#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/descriptor/force_virial.hpp>
#include <dpk/model/batch_layout.hpp>
#include <dpk/neighbor/neighbor_list.hpp>

#include <cstddef>

namespace dpk {

/// The buffers of one batch (see the file comment for who writes and reads each).
template <class Scalar, class MemorySpace>
struct ModelWorkspace {
  // Neighbours, environment and row layout.
  NeighborList<Scalar, MemorySpace> nlist;
  EnvironmentMatrix<Scalar, MemorySpace> env;
  BatchLayout<Scalar, MemorySpace> layout;
  // Forward pass.
  View1<Scalar, MemorySpace> s{"dpk::model::s", 0};           ///< (rows) embedding-net input
  View3<Scalar, MemorySpace> t{"dpk::model::T", 0, 0, 0};     ///< (nloc, 4, M1) T
  View1<Scalar, MemorySpace> d{"dpk::model::D", 0};           ///< (nloc * M1 * M2) D, fitting-row order
  // First-order (force) pass.
  View1<Scalar, MemorySpace> de_dd{"dpk::model::dD_tangent", 0};  ///< (nloc * M1 * M2) dE/dD
  View1<Scalar, MemorySpace> ones{"dpk::model::ones", 0};         ///< (nloc) seed 1 of every fitting row
  View3<Scalar, MemorySpace> a{"dpk::model::A", 0, 0, 0};         ///< (nloc, 4, M1) A = dE/dT
  View1<Scalar, MemorySpace> de_dg{"dpk::model::dG_tangent", 0};  ///< (rows * M1) dE/dG
  View1<Scalar, MemorySpace> de_ds{"dpk::model::ds", 0};          ///< (rows) dE/ds
  View3<Scalar, MemorySpace> de_drn{"dpk::model::dE_dRn", 0, 0, 0};  ///< (nloc, nnei, 4) dE/dRn
  ForceVirialWorkspace<Scalar, MemorySpace> products;             ///< force/virial product scratch
  // Gradient pass.
  View3<Scalar, MemorySpace> v{"dpk::model::v", 0, 0, 0};                  ///< (nloc, nnei, 4) adjoint of the products
  View1<Scalar, MemorySpace> s_tangent{"dpk::model::s_tangent", 0};        ///< (rows)
  View3<Scalar, MemorySpace> t_tangent{"dpk::model::T_tangent", 0, 0, 0};  ///< (nloc, 4, M1)
  View1<Scalar, MemorySpace> d_tangent{"dpk::model::D_tangent", 0};        ///< (nloc * M1 * M2)
  View1<Scalar, MemorySpace> fitting_seed{"dpk::model::fitting_seed", 0};  ///< (nloc) c_E of each row's frame
  View1<Scalar, MemorySpace> dl_dd{"dpk::model::dD", 0};                   ///< (nloc * M1 * M2)
  View3<Scalar, MemorySpace> dl_dt{"dpk::model::dT", 0, 0, 0};             ///< (nloc, 4, M1)
  View1<Scalar, MemorySpace> dl_dg{"dpk::model::dG", 0};                   ///< (rows * M1)

  /// Sizes every buffer for the batch in `layout` (never shrinks); the embedding-row buffers
  /// only when `embedding_rows` (a compressed model has none), the whole-batch seeds dl_dg and
  /// de_dg only when `embedding_seeds` (the chunked host passes make them chunk by chunk).
  template <class ExecutionSpace>
  void reserve(ExecutionSpace const& space, int nnei, int m1, int m2, bool embedding_rows, bool embedding_seeds) {
    std::size_t const rows = std::size_t(layout.embedding_rows());
    std::size_t const nloc = std::size_t(layout.nloc());
    std::size_t const width = std::size_t(m1) * m2;
    if (embedding_rows) {
      ensure_extent_with_headroom(s, rows);
      ensure_extent_with_headroom(s_tangent, rows);
      ensure_extent_with_headroom(de_ds, rows);
    }
    if (embedding_rows && embedding_seeds) {
      ensure_extent_with_headroom(dl_dg, rows * m1);
      ensure_extent_with_headroom(de_dg, rows * m1);
    }
    ensure_extent_with_headroom(t, nloc, 4, m1);
    ensure_extent_with_headroom(t_tangent, nloc, 4, m1);
    ensure_extent_with_headroom(a, nloc, 4, m1);
    ensure_extent_with_headroom(dl_dt, nloc, 4, m1);
    ensure_extent_with_headroom(d, nloc * width);
    ensure_extent_with_headroom(d_tangent, nloc * width);
    ensure_extent_with_headroom(dl_dd, nloc * width);
    ensure_extent_with_headroom(de_dd, nloc * width);
    ensure_extent(fitting_seed, nloc);
    ensure_extent(ones, nloc);
    if (ones.extent(0) != ones_filled_) {  // only after a reallocation: no fill per step
      Kokkos::deep_copy(space, ones, Scalar(1));
      ones_filled_ = ones.extent(0);
    }
    ensure_extent_with_headroom(de_drn, nloc, nnei, 4);
    ensure_extent_with_headroom(v, nloc, nnei, 4);
  }

 private:
  std::size_t ones_filled_ = 0;  ///< extent of `ones` when it was last filled with 1
};

}  // namespace dpk
