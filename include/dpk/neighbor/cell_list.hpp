#pragma once
/// \file cell_list.hpp
/// \brief Per-frame cell lists on the device: atoms wrapped into the box (DeePMD-kit's way) and
/// counting-sorted into cells of at least rcut, in fractional coordinates (triclinic boxes).

#include <cmath>
#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/scan.hpp>
#include <dpk/core/types.hpp>
#include <string>
#include <vector>

namespace dpk {

/// Geometry of one frame's cell grid, as stored (per frame) in CellList's device tables.
/// Real table columns: box rows (0..8), inverse box (9..17), origin (18..20), distances between
/// opposite faces (21..23). Integer table columns: cells per direction (0..2), scan reach per
/// direction (3..5), first global cell id of the frame (6), 1 if the cell vectors are orthogonal (7).
/// (Enumerators, not static constexpr members: those are not usable in CUDA device code.)
struct CellGridColumns {
  enum Real : int { box = 0, inverse = 9, origin = 18, face = 21, nreal = 24 };
  enum Integer : int { ncell = 0, reach = 3, cell_offset = 6, orthogonal = 7, nint = 8 };
};

/// Cell list of a batch of frames (all frames share natoms).
///
/// Periodic frames: fractional coordinates s = x inv(box), wrapped with fmod (+1 if negative),
/// `ncell_d = max(1, floor(cells_per_cutoff * face_distance_d / rcut))` cells along each cell
/// vector (cells_per_cutoff = 2 by default: half-cutoff cells scan ~40% less volume than
/// cutoff-sized ones), and a scan reach `k_d = ceil(rcut / (face_distance_d / ncell_d))` so that
/// scanning cell offsets -k..k in
/// unwrapped cell-index space visits every (atom, periodic image) within rcut exactly once, also
/// for boxes smaller than 2 rcut. Non-periodic frames: an axis-aligned box around the atoms,
/// padded by 2 rcut, so that no periodic image of the padded box is ever within rcut.
template <class Scalar, class ExecutionSpace>
class CellList {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  static_assert(Kokkos::is_execution_space<ExecutionSpace>::value, "ExecutionSpace must be a Kokkos execution space");

  /// Wraps the atoms of `frames` and sorts them into cells for the cutoff `rcut`.
  /// Allocates only when the batch or the number of cells grows.
  void build(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames, double rcut,
             int cells_per_cutoff = 2) {
    require(rcut > 0, "CellList: rcut must be positive, got " + std::to_string(rcut));
    require(cells_per_cutoff >= 1 && cells_per_cutoff <= 8, "CellList: cells_per_cutoff must be 1..8");
    cells_per_cutoff_ = cells_per_cutoff;
    int const nframes = frames.nframes, natoms = frames.natoms, nloc = frames.nloc();
    require(nframes >= 0 && natoms >= 0, "CellList: negative nframes or natoms");
    require(frames.coord.extent(0) >= std::size_t(nloc) && frames.coord.extent(1) == 3,
            "CellList: frames.coord must be (nframes*natoms, 3) = (" + std::to_string(nloc) + ", 3)");
    nframes_ = nframes;
    natoms_ = natoms;
    periodic_ = frames.periodic;
    ensure_extent(real_, nframes, int(CellGridColumns::nreal));
    ensure_extent(integer_, nframes, int(CellGridColumns::nint));
    ensure_extent(real_host_, nframes, int(CellGridColumns::nreal));
    ensure_extent(integer_host_, nframes, int(CellGridColumns::nint));
    ensure_extent(wrapped_, nloc, 3);
    ensure_extent(cell_of_atom_, nloc);
    ensure_extent(rank_, nloc);
    ensure_extent(cell_atoms_, nloc);
    ensure_extent(cell_position_, nloc, 3);

    if (periodic_) {
      require(frames.box.extent(0) >= std::size_t(nframes) && frames.box.extent(1) == 9,
              "CellList: periodic frames need frames.box of shape (nframes, 9)");
      ensure_extent(box_host_, nframes, 9);
      auto box_device = Kokkos::subview(frames.box, std::make_pair(0, nframes), Kokkos::ALL());
      auto box_host = Kokkos::subview(box_host_, std::make_pair(0, nframes), Kokkos::ALL());
      Kokkos::deep_copy(space, box_host, box_device);
      space.fence();
    } else {
      bounding_boxes(space, frames);
    }
    ncells_ = 0;
    for (int f = 0; f < nframes; ++f) frame_geometry(f, rcut);
    Kokkos::deep_copy(space, Kokkos::subview(real_, std::make_pair(0, nframes), Kokkos::ALL()),
                      Kokkos::subview(real_host_, std::make_pair(0, nframes), Kokkos::ALL()));
    Kokkos::deep_copy(space, Kokkos::subview(integer_, std::make_pair(0, nframes), Kokkos::ALL()),
                      Kokkos::subview(integer_host_, std::make_pair(0, nframes), Kokkos::ALL()));
    ensure_extent(cell_count_, ncells_ + 1);
    ensure_extent(cell_start_, ncells_ + 1);
    bin(space, frames);
  }

  int nframes() const { return nframes_; }  ///< frames of the last build
  int natoms() const { return natoms_; }    ///< atoms per frame of the last build
  int ncells() const { return ncells_; }    ///< cells of all frames together
  /// (nframes, 21) per-frame box, inverse box, origin (see CellGridColumns).
  View2<Scalar, memory_space> real_table() const { return real_; }
  /// (nframes, 7) per-frame cells per direction, scan reach, first cell id.
  View2<int, memory_space> integer_table() const { return integer_; }
  /// (nloc, 3) wrapped Cartesian positions (periodic) or the positions themselves (non-periodic).
  View2<Scalar, memory_space> wrapped() const { return wrapped_; }
  /// (nloc) global cell id of each atom.
  View1<int, memory_space> cell_of_atom() const { return cell_of_atom_; }
  /// (ncells + 1) first entry of each cell in cell_atoms().
  View1<int, memory_space> cell_start() const { return cell_start_; }
  /// (nloc) atom indices grouped by cell.
  View1<int, memory_space> cell_atoms() const { return cell_atoms_; }
  /// (nloc, 3) wrapped positions in cell order (cell_position(p) = wrapped(cell_atoms(p))).
  View2<Scalar, memory_space> cell_position() const { return cell_position_; }

 // Stages of build(); public only because CUDA's extended lambdas may not live in private
 // member functions.
  /// Non-periodic frames: per-frame axis-aligned bounding box, computed on the device.
  void bounding_boxes(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    int const nframes = frames.nframes, natoms = frames.natoms;
    ensure_extent(bounds_, nframes, 6);
    ensure_extent(bounds_host_, nframes, 6);
    auto coord = frames.coord;
    auto bounds = bounds_;
    using Team = Kokkos::TeamPolicy<ExecutionSpace>;
    using Member = typename Team::member_type;
    Kokkos::parallel_for(
        "dpk::neighbor::BoundingBox", Team(space, nframes, Kokkos::AUTO), KOKKOS_LAMBDA(Member const& team) {
          int const f = team.league_rank();
          for (int d = 0; d < 3; ++d) {
            Scalar lo = 0, hi = 0;
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, natoms),
                [&](int a, Scalar& m) { m = math::min(m, coord(f * natoms + a, d)); }, Kokkos::Min<Scalar>(lo));
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, natoms),
                [&](int a, Scalar& m) { m = math::max(m, coord(f * natoms + a, d)); }, Kokkos::Max<Scalar>(hi));
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              bounds(f, d) = natoms > 0 ? lo : Scalar(0);
              bounds(f, 3 + d) = natoms > 0 ? hi : Scalar(0);
            });
          }
        });
    auto host = Kokkos::subview(bounds_host_, std::make_pair(0, nframes), Kokkos::ALL());
    Kokkos::deep_copy(space, host, Kokkos::subview(bounds_, std::make_pair(0, nframes), Kokkos::ALL()));
    space.fence();
  }

  /// Host: box, inverse, origin, cell counts and scan reach of frame f.
  void frame_geometry(int f, double rcut) {
    double box[9], origin[3] = {0, 0, 0};
    if (periodic_) {
      for (int k = 0; k < 9; ++k) box[k] = double(box_host_(f, k));
    } else {
      for (int k = 0; k < 9; ++k) box[k] = 0;
      for (int d = 0; d < 3; ++d) {
        double const lo = double(bounds_host_(f, d)), hi = double(bounds_host_(f, 3 + d));
        // Padding 2 rcut: every atom is at least rcut away from any image of any other atom.
        double const length = (hi - lo) + 2.0 * rcut + 1e-3 * rcut;
        box[4 * d] = length;
        origin[d] = lo - rcut - 0.5e-3 * rcut;
      }
    }
    // Rows a, b, c; face distance along a = volume / |b x c|, etc.
    auto cross = [&](int p, int q, double* out) {
      out[0] = box[3 * p + 1] * box[3 * q + 2] - box[3 * p + 2] * box[3 * q + 1];
      out[1] = box[3 * p + 2] * box[3 * q + 0] - box[3 * p + 0] * box[3 * q + 2];
      out[2] = box[3 * p + 0] * box[3 * q + 1] - box[3 * p + 1] * box[3 * q + 0];
    };
    double bc[3], ca[3], ab[3];
    cross(1, 2, bc);
    cross(2, 0, ca);
    cross(0, 1, ab);
    double const det = box[0] * bc[0] + box[1] * bc[1] + box[2] * bc[2];
    require(std::isfinite(det) && std::fabs(det) > 1e-12,
            "CellList: frame " + std::to_string(f) + " has a singular or non-finite box (volume " +
                std::to_string(det) + "); rows of box must be three independent cell vectors");
    double const volume = std::fabs(det);
    double const* crosses[3] = {bc, ca, ab};
    long total = 1;
    double faces[3];
    long cells[3];
    for (int d = 0; d < 3; ++d) {
      double const* c = crosses[d];
      faces[d] = volume / std::sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]);
      cells[d] = std::max(1L, long(std::min(1e9, std::floor(cells_per_cutoff_ * faces[d] / rcut))));
    }
    // A sparse frame (a few atoms in a very large box) would get far more cells than atoms:
    // cells larger than the cutoff are as correct (the scan reach follows the cell size), so
    // the grid is capped at max(4096, 8 x atoms) cells. Dense frames keep their grid.
    double const cap = std::max(4096.0, 8.0 * natoms_);
    while (double(cells[0]) * double(cells[1]) * double(cells[2]) > cap) {
      int const widest = cells[0] >= cells[1] && cells[0] >= cells[2] ? 0 : cells[1] >= cells[2] ? 1 : 2;
      cells[widest] = std::max(1L, cells[widest] / 2);
    }
    for (int d = 0; d < 3; ++d) {
      double const face = faces[d];
      int const n = int(cells[d]);
      // Slightly enlarged so a face exactly divisible by rcut still reaches every neighbour.
      int const reach = int(std::ceil(rcut * n / face * (1.0 + 1e-12)));
      if (reach > 256)  // the message only on failure: this runs for every frame of every step
        throw Error("CellList: frame " + std::to_string(f) + ": box is too small for rcut " + std::to_string(rcut) +
                    " (over 256 periodic images per direction)");
      integer_host_(f, CellGridColumns::ncell + d) = n;
      integer_host_(f, CellGridColumns::reach + d) = reach;
      real_host_(f, CellGridColumns::face + d) = Scalar(face);
      total *= n;
    }
    integer_host_(f, CellGridColumns::cell_offset) = ncells_;
    auto dot = [&](int p, int q) {
      return box[3 * p] * box[3 * q] + box[3 * p + 1] * box[3 * q + 1] + box[3 * p + 2] * box[3 * q + 2];
    };
    integer_host_(f, CellGridColumns::orthogonal) = (dot(0, 1) == 0 && dot(0, 2) == 0 && dot(1, 2) == 0) ? 1 : 0;
    require(ncells_ + total < (1L << 30), "CellList: too many cells");
    ncells_ += int(total);
    // inverse(box): rows of the inverse are crosses / det, transposed (s = x inv(box)).
    for (int e = 0; e < 3; ++e)
      for (int d = 0; d < 3; ++d) real_host_(f, CellGridColumns::inverse + 3 * e + d) = Scalar(crosses[d][e] / det);
    for (int k = 0; k < 9; ++k) real_host_(f, CellGridColumns::box + k) = Scalar(box[k]);
    for (int d = 0; d < 3; ++d) real_host_(f, CellGridColumns::origin + d) = Scalar(origin[d]);
  }

  /// Wrap, count atoms per cell (atomics), scan to cell starts, fill cells.
  void bin(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames) {
    int const nloc = frames.nloc(), natoms = natoms_, ncells = ncells_;
    bool const periodic = periodic_;
    auto coord = frames.coord;
    auto real = real_;
    auto integer = integer_;
    auto wrapped = wrapped_;
    auto cell_of_atom = cell_of_atom_;
    auto rank = rank_;
    auto cell_count = cell_count_;
    auto cell_start = cell_start_;
    auto cell_atoms = cell_atoms_;
    auto cell_position = cell_position_;
    using Range = Kokkos::RangePolicy<ExecutionSpace>;
    using C = CellGridColumns;
    Kokkos::deep_copy(space, Kokkos::subview(cell_count, std::make_pair(0, ncells + 1)), 0);
    Kokkos::parallel_for(
        "dpk::neighbor::WrapAndCount", Range(space, 0, nloc), KOKKOS_LAMBDA(int a) {
          int const f = a / natoms;
          Scalar x[3], s[3];
          for (int d = 0; d < 3; ++d) x[d] = coord(a, d) - real(f, C::origin + d);
          for (int d = 0; d < 3; ++d)
            s[d] = x[0] * real(f, C::inverse + d) + x[1] * real(f, C::inverse + 3 + d) +
                   x[2] * real(f, C::inverse + 6 + d);
          if (periodic) {
            for (int d = 0; d < 3; ++d) {
              s[d] = math::fmod(s[d], Scalar(1));
              if (s[d] < Scalar(0)) s[d] += Scalar(1);
            }
            for (int d = 0; d < 3; ++d)
              wrapped(a, d) =
                  s[0] * real(f, C::box + d) + s[1] * real(f, C::box + 3 + d) + s[2] * real(f, C::box + 6 + d);
          } else {
            for (int d = 0; d < 3; ++d) wrapped(a, d) = coord(a, d);
          }
          int cell[3];
          for (int d = 0; d < 3; ++d) {
            int const n = integer(f, C::ncell + d);
            int c = int(math::floor(s[d] * Scalar(n)));
            cell[d] = c < 0 ? 0 : (c >= n ? n - 1 : c);
          }
          int const id = integer(f, C::cell_offset) +
                         (cell[0] * integer(f, C::ncell + 1) + cell[1]) * integer(f, C::ncell + 2) + cell[2];
          cell_of_atom(a) = id;
          rank(a) = Kokkos::atomic_fetch_add(&cell_count(id), 1);
        });
    exclusive_scan(
        space, "dpk::neighbor::CellStart", ncells, KOKKOS_LAMBDA(int c) { return cell_count(c); }, cell_start);
    Kokkos::parallel_for(
        "dpk::neighbor::CellFill", Range(space, 0, nloc), KOKKOS_LAMBDA(int a) {
          int const p = cell_start(cell_of_atom(a)) + rank(a);
          cell_atoms(p) = a;
          for (int d = 0; d < 3; ++d) cell_position(p, d) = wrapped(a, d);
        });
  }

 private:
  int nframes_ = 0, natoms_ = 0, ncells_ = 0, cells_per_cutoff_ = 2;
  bool periodic_ = true;
  View2<Scalar, memory_space> real_{"dpk::neighbor::cell_geometry", 0, 0};
  View2<int, memory_space> integer_{"dpk::neighbor::cell_grid", 0, 0};
  View2<Scalar, Kokkos::HostSpace> real_host_{"dpk::neighbor::cell_geometry_host", 0, 0};
  View2<int, Kokkos::HostSpace> integer_host_{"dpk::neighbor::cell_grid_host", 0, 0};
  View2<Scalar, Kokkos::HostSpace> box_host_{"dpk::neighbor::box_host", 0, 0};
  View2<Scalar, memory_space> bounds_{"dpk::neighbor::bounds", 0, 0};
  View2<Scalar, Kokkos::HostSpace> bounds_host_{"dpk::neighbor::bounds_host", 0, 0};
  View2<Scalar, memory_space> wrapped_{"dpk::neighbor::wrapped", 0, 0};
  View1<int, memory_space> cell_of_atom_{"dpk::neighbor::cell_of_atom", 0};
  View1<int, memory_space> rank_{"dpk::neighbor::rank_in_cell", 0};
  View1<int, memory_space> cell_count_{"dpk::neighbor::cell_count", 0};
  View1<int, memory_space> cell_start_{"dpk::neighbor::cell_start", 0};
  View1<int, memory_space> cell_atoms_{"dpk::neighbor::cell_atoms", 0};
  View2<Scalar, memory_space> cell_position_{"dpk::neighbor::cell_position", 0, 3};
};

}  // namespace dpk
