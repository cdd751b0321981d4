#pragma once
/// \file potential.hpp
/// \brief Umbrella header of dpk's inference side, what an MD code includes: load a trained
/// model file (docs/model-format.md) and compute energies, forces, virials and per-atom
/// energies (and virials) of one or many frames, periodic or not.
///
/// \code
///   Kokkos::ScopeGuard kokkos(argc, argv);
///   dpk::Potential<double> potential("model.dpk");
///   std::vector<int> types = potential.type_indices({"O", "H", "H"});
///   dpk::PotentialResult r = potential.compute(coord, types, box);  // box = {} : no PBC
///   // r.energy[f], r.force[(f * natoms + a) * 3 + d], r.virial[f * 9 + 3 * a + b], ...
/// \endcode
///
/// Units are the model's: coordinates and cells in Angstrom, energies in eV, forces in eV/A,
/// virials in eV (W_ab = -dE/d(eps_ab) for the strain x -> (I + eps) x, summed per frame).
/// The header also brings dpk::read_system (deepmd/npy systems) for initial configurations.

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/types.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/io/load_model.hpp>
#include <dpk/io/model_file.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace dpk {

namespace detail::potential {

/// Index of the first entry of `types` (nloc entries) outside [0, ntypes), or -1 when all are
/// valid. A free function: nvcc rejects extended lambdas in private member functions.
template <class ExecutionSpace, class TypesView>
int first_bad_type(ExecutionSpace const& space, TypesView const& types, int nloc, int ntypes) {
  int bad = 0;
  Kokkos::parallel_reduce(
      "dpk::potential::check_types", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nloc),
      KOKKOS_LAMBDA(int const i, int& count) { count += (types(i) < 0 || types(i) >= ntypes) ? 1 : 0; }, bad);
  if (bad == 0) return -1;
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), types);
  for (int i = 0; i < nloc; ++i)
    if (host(i) < 0 || host(i) >= ntypes) return i;
  return -1;
}

}  // namespace detail::potential

/// Results of Potential::compute on host arrays, in float64 whatever the model's precision.
/// Atom a of frame f is entry f * natoms + a.
struct PotentialResult {
  int nframes = 0;                  ///< frames computed
  int natoms = 0;                   ///< atoms per frame
  std::vector<double> energy;       ///< (nframes) total energy per frame, eV
  std::vector<double> force;        ///< (nframes, natoms, 3) eV/A
  std::vector<double> virial;       ///< (nframes, 9) eV, index 3a+b
  std::vector<double> atom_energy;  ///< (nframes, natoms) eV; sums to energy per frame
  std::vector<double> atom_virial;  ///< (nframes, natoms, 9) eV when requested, else empty
};

/// A trained se_e2_a energy model ready for inference, in precision `Scalar` on
/// `ExecutionSpace` (any precision can run any model file; a float32-trained model is best run
/// in float, see model_precision()). Keeps its neighbour-search and model workspaces between
/// calls, so repeated calls with the same sizes (an MD loop) allocate nothing on the device.
/// Not thread-safe: use one Potential per concurrent caller.
template <class Scalar, class ExecutionSpace = DefaultExecutionSpace>
class Potential {
  static_assert(Kokkos::is_execution_space<ExecutionSpace>::value, "dpk: ExecutionSpace must be a Kokkos execution space");
 public:
  using execution_space = ExecutionSpace;          ///< where the kernels run
  using memory_space = memory_space_t<ExecutionSpace>;  ///< where the device Views live
  using scalar_type = Scalar;                      ///< arithmetic precision
  using Model = EnergyModel<Scalar, ExecutionSpace>;  ///< the underlying model

  /// Loads the model (or checkpoint) file `model_path`. Throws dpk::Error naming the file when
  /// it is missing, damaged or not a dpk model file.
  explicit Potential(std::string const& model_path, ExecutionSpace const& space = ExecutionSpace())
      : Potential(read_model_file(model_path), model_path, space) {}

  /// Uses the contents of a model file already in memory; `source` names it in errors.
  Potential(ModelFileData const& data, std::string const& source, ExecutionSpace const& space = ExecutionSpace())
      : space_(space),
        source_(source),
        type_map_(data.type_map),
        precision_(data.precision),
        rcut_(data.descriptor.rcut),
        model_(load_energy_model<Scalar, ExecutionSpace>(data, source)),
        check_frequency_(data.compression ? data.compression->check_frequency : -1) {}

  /// Element names in type order (type index t is type_map()[t]); empty when the model was
  /// trained without a type_map.
  std::vector<std::string> const& type_map() const { return type_map_; }
  /// Number of atom types the model knows.
  int ntypes() const { return model_->ntypes(); }
  /// Cutoff radius (A): atoms farther apart than this do not interact.
  double rcut() const { return rcut_; }
  /// Precision the model was trained in ("float64" or "float32").
  std::string const& model_precision() const { return precision_; }
  /// The file (or name) the model was loaded from.
  std::string const& source() const { return source_; }
  /// Neighbours dropped beyond the model's sel, summed over every call so far (non-zero means the
  /// energy is not smooth: the model's sel is too small for these configurations).
  long neighbors_dropped() const { return model_->neighbors_dropped(); }
  /// True for a compressed model file: the embedding nets are evaluated from their tables
  /// (docs/compression.md).
  bool compressed() const { return model_->compressed(); }
  /// Compressed models: embedding inputs beyond the tables (whose value is held at the table's
  /// end), counted on every check_frequency-th call (the file's --check-frequency; 0 or less:
  /// never), summed over the checked calls.
  long lookups_outside_table() const { return outside_; }
  /// Counts lookups beyond the tables every `calls` calls (0 or less: never).
  void set_check_frequency(long calls) { check_frequency_ = calls; }
  /// The underlying EnergyModel (hyperparameters, parameters, statistics).
  Model& model() { return *model_; }
  /// The execution space instance the host-array overloads run on.
  ExecutionSpace const& space() const { return space_; }

  /// Type index of element `name` in the model's type_map; throws naming the type_map otherwise.
  int type_index(std::string const& name) const {
    auto const it = std::find(type_map_.begin(), type_map_.end(), name);
    if (it == type_map_.end())
      throw Error("dpk::Potential ('" + source_ + "'): element '" + name + "' is not in the model's type_map " +
                  detail::join_names(type_map_));
    return int(it - type_map_.begin());
  }
  /// type_index() of each name.
  std::vector<int> type_indices(std::vector<std::string> const& names) const {
    std::vector<int> out;
    out.reserve(names.size());
    for (auto const& n : names) out.push_back(type_index(n));
    return out;
  }

  /// Energies, forces, virials and atomic energies (atomic virials when `atom_virial`) of
  /// nframes frames of the same atoms, from host arrays:
  /// `coord` (nframes, natoms, 3) in A, `types` (natoms) 0-based indices into type_map(),
  /// `box` (nframes, 9) cell vectors as rows in A, or empty for non-periodic frames.
  /// nframes = coord.size() / (3 natoms). Results go into `out` (its vectors are reused).
  /// Throws dpk::Error on inconsistent sizes or a type outside the model's types.
  void compute(PotentialResult& out, std::vector<double> const& coord, std::vector<int> const& types,
               std::vector<double> const& box, bool atom_virial = false) {
    std::size_t const natoms = types.size();
    require(natoms > 0, "dpk::Potential::compute: 'types' is empty (one type index per atom expected)");
    require(!coord.empty() && coord.size() % (3 * natoms) == 0,
            "dpk::Potential::compute: 'coord' has " + std::to_string(coord.size()) +
                " values, expected nframes x natoms x 3 with natoms = " + std::to_string(natoms) + " (from 'types')");
    std::size_t const nframes = coord.size() / (3 * natoms);
    require(box.empty() || box.size() == nframes * 9,
            "dpk::Potential::compute: 'box' has " + std::to_string(box.size()) + " values, expected nframes x 9 = " +
                std::to_string(nframes * 9) + " (or none for non-periodic frames)");
    check_types_host(types);
    std::size_t const nloc = nframes * natoms;
    frames_.nframes = int(nframes);
    frames_.natoms = int(natoms);
    frames_.periodic = !box.empty();
    frames_.centres = -1;
    resize_exact(frames_.image_of, 0);  // every atom is a centre
    resize_exact(frames_.coord, nloc, 3);
    resize_exact(frames_.box, nframes, 9);
    resize_exact(frames_.types, nloc);
    auto coord_host = Kokkos::create_mirror_view(frames_.coord);
    auto box_host = Kokkos::create_mirror_view(frames_.box);
    auto types_host = Kokkos::create_mirror_view(frames_.types);
    for (std::size_t i = 0; i < nloc; ++i) {
      for (int d = 0; d < 3; ++d) coord_host(i, d) = static_cast<Scalar>(coord[3 * i + d]);
      types_host(i) = types[i % natoms];
    }
    for (std::size_t f = 0; f < nframes; ++f)
      for (int k = 0; k < 9; ++k) box_host(f, k) = box.empty() ? Scalar(0) : static_cast<Scalar>(box[9 * f + k]);
    Kokkos::deep_copy(space_, frames_.coord, coord_host);
    Kokkos::deep_copy(space_, frames_.box, box_host);
    Kokkos::deep_copy(space_, frames_.types, types_host);
    predict_and_check(space_, frames_, prediction_, atom_virial);
    space_.fence();
    out.nframes = int(nframes);
    out.natoms = int(natoms);
    to_host(prediction_.energy, nframes, out.energy);
    to_host(prediction_.force, nloc * 3, out.force);
    to_host(prediction_.virial, nframes * 9, out.virial);
    to_host(prediction_.atom_energy, nloc, out.atom_energy);
    if (atom_virial)
      to_host(prediction_.atom_virial, nloc * 9, out.atom_virial);
    else
      out.atom_virial.clear();
  }

  /// One domain of a domain-decomposed MD engine (LAMMPS): `coord` (nall, 3) in A holds
  /// `nlocal` local atoms followed by nall - nlocal ghost atoms (periodic images or other ranks'
  /// atoms, positions as the engine has them), `types` (nall) their type indices. The atoms form
  /// one non-periodic cluster in which only the local atoms are centres; ghosts are neighbours
  /// only, and every local atom's neighbours within rcut() must be among them (ghost cutoff >=
  /// rcut()). Results in `out` (nframes 1, natoms nall):
  /// - energy: the sum of the local atoms' energies; atom_energy (nall): those energies, 0 for
  ///   ghosts;
  /// - force (nall, 3): -dE/dx of every atom; a ghost's force belongs to the atom it images and
  ///   must be added to it (LAMMPS: reverse communication with newton_pair on);
  /// - virial (9): W_ab of the pairs of local centres (index 3a+b: force component a times
  ///   separation component b); atom_virial (nall, 9) when requested, each pair's share on its
  ///   neighbour atom (ghost shares also go to their owners), summing to virial.
  /// Ghost atoms cost almost nothing: no neighbour list, no embedding or fitting rows.
  /// `ghost_image_of` (optional; nall - nlocal entries, LAMMPS: atom->map of the ghost's tag):
  /// for each ghost the local atom it is a periodic image of, or -1 (another domain's atom).
  /// With it two local atoms that are neighbours across a periodic boundary share one
  /// embedding-net row, as in compute(): the same results to rounding, 15 % fewer embedding
  /// rows on 192 waters. An image must have its local atom's type.
  /// Throws dpk::Error on inconsistent sizes, bad types or bad images.
  void compute_with_ghosts(PotentialResult& out, std::vector<double> const& coord, std::vector<int> const& types,
                           int nlocal, bool atom_virial = false, std::vector<int> const& ghost_image_of = {}) {
    std::size_t const nall = types.size();
    require(nall > 0 && nlocal >= 0 && std::size_t(nlocal) <= nall,
            "dpk::Potential::compute_with_ghosts: nlocal = " + std::to_string(nlocal) + " must be in [0, " +
                std::to_string(nall) + "] (natoms from 'types', which must not be empty)");
    require(coord.size() == 3 * nall, "dpk::Potential::compute_with_ghosts: 'coord' has " +
                                          std::to_string(coord.size()) + " values, expected natoms x 3 = " +
                                          std::to_string(3 * nall));
    check_types_host(types);
    check_ghost_images(types, nlocal, ghost_image_of);
    frames_.nframes = 1;
    frames_.natoms = int(nall);
    frames_.periodic = false;
    frames_.centres = nlocal;
    resize_exact(frames_.image_of, ghost_image_of.empty() ? 0 : nall);
    if (!ghost_image_of.empty()) {
      auto image_host = Kokkos::create_mirror_view(frames_.image_of);
      for (std::size_t i = 0; i < nall; ++i)
        image_host(i) = int(i) < nlocal ? int(i) : ghost_image_of[i - std::size_t(nlocal)];
      Kokkos::deep_copy(space_, frames_.image_of, image_host);
    }
    resize_exact(frames_.coord, nall, 3);
    resize_exact(frames_.box, 1, 9);
    resize_exact(frames_.types, nall);
    auto coord_host = Kokkos::create_mirror_view(frames_.coord);
    auto types_host = Kokkos::create_mirror_view(frames_.types);
    for (std::size_t i = 0; i < nall; ++i) {
      for (int d = 0; d < 3; ++d) coord_host(i, d) = static_cast<Scalar>(coord[3 * i + d]);
      types_host(i) = types[i];
    }
    Kokkos::deep_copy(space_, frames_.coord, coord_host);
    Kokkos::deep_copy(space_, frames_.types, types_host);
    predict_and_check(space_, frames_, prediction_, atom_virial);
    space_.fence();
    out.nframes = 1;
    out.natoms = int(nall);
    to_host(prediction_.energy, 1, out.energy);  // ghosts' atomic energies are 0
    to_host(prediction_.atom_energy, nall, out.atom_energy);
    to_host(prediction_.force, nall * 3, out.force);
    to_host(prediction_.virial, 9, out.virial);
    if (atom_virial)
      to_host(prediction_.atom_virial, nall * 9, out.atom_virial);
    else
      out.atom_virial.clear();
  }

  /// compute_with_ghosts() returning a new PotentialResult.
  PotentialResult compute_with_ghosts(std::vector<double> const& coord, std::vector<int> const& types, int nlocal,
                                      bool atom_virial = false, std::vector<int> const& ghost_image_of = {}) {
    PotentialResult out;
    compute_with_ghosts(out, coord, types, nlocal, atom_virial, ghost_image_of);
    return out;
  }

  /// compute() returning a new PotentialResult.
  PotentialResult compute(std::vector<double> const& coord, std::vector<int> const& types,
                          std::vector<double> const& box, bool atom_virial = false) {
    PotentialResult out;
    compute(out, coord, types, box, atom_virial);
    return out;
  }

  /// Device overload for codes that hold Kokkos Views: `coord` (nframes * natoms, 3) in A,
  /// `types` (natoms, the same for every frame, or nframes * natoms), `box` (nframes, 9), or
  /// extent 0 for non-periodic frames. Results stay on the device in `out` (energy (nframes),
  /// atom_energy (nloc), force (nloc, 3), virial (nframes, 9), atom_virial (nloc, 9) when
  /// `atom_virial`), resized as needed; kernels run on `space` (not fenced on return).
  /// Throws dpk::Error on inconsistent extents or a type outside the model's types.
  void compute(ExecutionSpace const& space, View2<Scalar, memory_space> const& coord,
               View1<int, memory_space> const& types, View2<Scalar, memory_space> const& box, int nframes,
               Prediction<Scalar, memory_space>& out, bool atom_virial = false) {
    require(nframes >= 1, "dpk::Potential::compute: nframes must be at least 1, got " + std::to_string(nframes));
    std::size_t const nloc = coord.extent(0);
    require(nloc > 0 && nloc % std::size_t(nframes) == 0 && coord.extent(1) == 3,
            "dpk::Potential::compute: 'coord' must be (nframes * natoms, 3) with nframes = " + std::to_string(nframes) +
                ", got (" + std::to_string(coord.extent(0)) + ", " + std::to_string(coord.extent(1)) + ")");
    int const natoms = int(nloc / std::size_t(nframes));
    require(types.extent(0) == std::size_t(natoms) || types.extent(0) == nloc,
            "dpk::Potential::compute: 'types' must have natoms (" + std::to_string(natoms) +
                ") or nframes * natoms (" + std::to_string(nloc) + ") entries, got " +
                std::to_string(types.extent(0)));
    bool const periodic = box.extent(0) != 0;
    require(!periodic || (box.extent(0) == std::size_t(nframes) && box.extent(1) == 9),
            "dpk::Potential::compute: 'box' must be (nframes, 9) = (" + std::to_string(nframes) +
                ", 9), or extent 0 for non-periodic frames");
    Frames<Scalar, memory_space> frames;
    frames.nframes = nframes;
    frames.natoms = natoms;
    frames.periodic = periodic;
    frames.coord = coord;
    frames.box = box;
    if (types.extent(0) == nloc) {
      frames.types = types;
    } else {
      resize_exact(types_, nloc);
      auto all = types_;
      Kokkos::parallel_for(
          "dpk::potential::repeat_types", Kokkos::RangePolicy<ExecutionSpace>(space, 0, int(nloc)),
          KOKKOS_LAMBDA(int const i) { all(i) = types(i % natoms); });
      frames.types = all;
    }
    compute(space, frames, out, atom_virial);
  }

  /// Device overload on a dpk::Frames batch (see compute above for `out`).
  void compute(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
               Prediction<Scalar, memory_space>& out, bool atom_virial = false) {
    require(frames.types.extent(0) >= std::size_t(frames.nloc()),
            "dpk::Potential::compute: frames.types has fewer than nframes * natoms entries");
    int const bad = detail::potential::first_bad_type(space, frames.types, frames.nloc(), ntypes());
    if (bad >= 0) {
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), frames.types);
      throw Error(type_error(bad, host(bad)));
    }
    predict_and_check(space, frames, out, atom_virial);
  }

 private:
  /// The model's prediction; for compressed models every check_frequency_-th call also counts
  /// the lookups beyond the tables.
  void predict_and_check(ExecutionSpace const& space, Frames<Scalar, memory_space> const& frames,
                         Prediction<Scalar, memory_space>& out, bool atom_virial) {
    model_->predict(space, frames, out, true, atom_virial);
    if (check_frequency_ > 0 && model_->compressed() && calls_++ % check_frequency_ == 0)
      outside_ += model_->lookups_outside_table(space);
  }

  template <class ViewType>
  static void to_host(ViewType const& view, std::size_t count, std::vector<double>& out) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
    out.resize(count);
    auto const* data = host.data();
    for (std::size_t i = 0; i < count; ++i) out[i] = double(data[i]);
  }

  std::string type_error(int atom, int type) const {
    return "dpk::Potential::compute: atom " + std::to_string(atom) + " has type index " + std::to_string(type) +
           ", outside the model's " + std::to_string(ntypes()) + " types " +
           (type_map_.empty() ? std::string("(0.." + std::to_string(ntypes() - 1) + ")")
                              : detail::join_names(type_map_)) +
           " of '" + source_ + "'";
  }

  void check_types_host(std::vector<int> const& types) const {
    for (std::size_t a = 0; a < types.size(); ++a)
      if (types[a] < 0 || types[a] >= ntypes()) throw Error(type_error(int(a), types[a]));
  }

  /// compute_with_ghosts' `ghost_image_of`: none, or one local atom of the same type (or -1)
  /// per ghost. Runs at every MD step over every ghost, so a message is built only for an entry
  /// that fails (require()'s message argument is built before the call: thousands of strings per
  /// step, about 0.7 ms of a 4.7 ms LAMMPS step with the small water model).
  static void check_ghost_images(std::vector<int> const& types, int nlocal, std::vector<int> const& image_of) {
    if (image_of.empty()) return;
    std::size_t const nghost = types.size() - std::size_t(nlocal);
    std::string const where = "dpk::Potential::compute_with_ghosts: ";
    if (image_of.size() != nghost)
      throw Error(where + "'ghost_image_of' has " + std::to_string(image_of.size()) +
                  " entries, expected one per ghost atom (" + std::to_string(nghost) + " = natoms - nlocal) or none");
    for (std::size_t g = 0; g < nghost; ++g) {
      int const image = image_of[g], ghost = nlocal + int(g);
      if (image == -1) continue;
      if (image < 0 || image >= nlocal)
        throw Error(where + "ghost_image_of[" + std::to_string(g) + "] = " + std::to_string(image) +
                    " (ghost atom " + std::to_string(ghost) + ") must be a local atom in [0, " +
                    std::to_string(nlocal) + ") or -1");
      if (types[std::size_t(ghost)] != types[std::size_t(image)])
        throw Error(where + "ghost atom " + std::to_string(ghost) + " has type " +
                    std::to_string(types[std::size_t(ghost)]) + " but ghost_image_of[" + std::to_string(g) +
                    "] = " + std::to_string(image) + " has type " + std::to_string(types[std::size_t(image)]) +
                    ": an image has its atom's type");
    }
  }

  ExecutionSpace space_;
  std::string source_;
  std::vector<std::string> type_map_;
  std::string precision_;
  double rcut_ = 0;
  std::unique_ptr<Model> model_;
  long check_frequency_ = -1, calls_ = 0, outside_ = 0;
  Frames<Scalar, memory_space> frames_;
  Prediction<Scalar, memory_space> prediction_;
  View1<int, memory_space> types_{"dpk::potential::types", 0};
};

}  // namespace dpk
