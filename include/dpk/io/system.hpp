#pragma once
/// \file system.hpp
/// \brief deepmd/npy "systems" on the host: type.raw, type_map.raw, set.*/{coord,box,energy,force,virial}.npy.

#include <dpk/core/error.hpp>
#include <dpk/neighbor/coincident_atoms.hpp>
#include <dpk/io/npy.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dpk {

/// All frames of one deepmd/npy system directory, in float64 on the host.
struct System {
  std::string path;                    ///< the system directory
  std::vector<std::string> type_map;   ///< element names from type_map.raw (may be empty)
  std::vector<int> types;              ///< natoms, already remapped to the model's type_map
  bool periodic = true;                ///< false when a `nopbc` file is present
  bool has_virial = false;
  int natoms = 0;
  int nframes = 0;
  /// Frames of each non-empty set.* folder, in order (sum = nframes; empty = one set). DeePMD-kit
  /// counts batches per set, which sets the system probabilities (prob_sys_size).
  std::vector<int> set_nframes;
  std::vector<double> coord;    ///< nframes x natoms x 3
  std::vector<double> box;      ///< nframes x 9 (rows are cell vectors); zeros when !periodic
  std::vector<double> energy;   ///< nframes
  std::vector<double> force;    ///< nframes x natoms x 3
  std::vector<double> virial;   ///< nframes x 9 when has_virial
};

namespace detail {

/// Whitespace-separated words of a small text file; throws naming the file when unreadable.
inline std::vector<std::string> read_words(std::filesystem::path const& file) {
  std::ifstream in(file);
  if (!in) throw Error("deepmd/npy file '" + file.string() + "': cannot open (missing or unreadable)");
  std::vector<std::string> words;
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

/// Joins names as "[O, H]" for messages.
inline std::string join_names(std::vector<std::string> const& names) {
  std::string s = "[";
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

/// Reads one array of a set, checks that it holds `per_frame` values per frame for `nframes`
/// frames (the leading extent must be nframes; the rest may be flat or split, as numpy allows),
/// and that every value is finite. Appends the values to `out`.
inline void read_set_array(std::filesystem::path const& file, int nframes, std::size_t per_frame,
                           std::string const& expected_shape, std::string const& why,
                           std::vector<double>& out) {
  NpyArray const a = read_npy(file.string());
  bool ok = a.size() == std::size_t(nframes) * per_frame;
  if (ok && !a.shape.empty()) ok = a.shape[0] == std::size_t(nframes) || (nframes == 1 && a.shape.size() == 1);
  if (!ok)
    throw Error("deepmd/npy file '" + file.string() + "': expected shape " + expected_shape + " (" + why + "), got " +
                npy_shape_string(a.shape));
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (!std::isfinite(a.data[i]))
      throw Error("deepmd/npy file '" + file.string() + "': non-finite value (" +
                  (std::isnan(a.data[i]) ? std::string("NaN") : std::string("Inf")) + ") in frame " +
                  std::to_string(i / per_frame) + " (value " + std::to_string(i % per_frame) + " of that frame)");
  }
  out.insert(out.end(), a.data.begin(), a.data.end());
}

}  // namespace detail

/// Reads a system directory; `model_type_map` (may be empty) remaps types by element name.
/// Throws dpk::Error naming the file and the problem on any bad input: missing type.raw or set
/// directory or array file, shapes that disagree with type.raw, type indices beyond type_map.raw,
/// elements absent from the model's type_map, NaN/Inf values, an empty system.
inline System read_system(std::string const& path, std::vector<std::string> const& model_type_map) {
  namespace fs = std::filesystem;
  fs::path const dir(path);
  if (!fs::is_directory(dir)) throw Error("deepmd/npy system '" + path + "': not a directory");
  System sys;
  sys.path = path;

  // Atom types.
  fs::path const type_file = dir / "type.raw";
  std::vector<std::string> const type_words = detail::read_words(type_file);
  if (type_words.empty()) throw Error("deepmd/npy system '" + path + "': empty system (type.raw lists no atoms)");
  std::vector<int> raw_types;
  raw_types.reserve(type_words.size());
  for (std::size_t a = 0; a < type_words.size(); ++a) {
    std::string const& w = type_words[a];
    bool const digits = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || w.size() > 9)
      throw Error("deepmd/npy file '" + type_file.string() + "': atom " + std::to_string(a) +
                  ": expected a non-negative type index, got '" + w + "'");
    raw_types.push_back(std::stoi(w));
  }
  sys.natoms = static_cast<int>(raw_types.size());

  // Element names and remapping to the model's order.
  fs::path const map_file = dir / "type_map.raw";
  if (fs::exists(map_file)) sys.type_map = detail::read_words(map_file);
  sys.types.resize(raw_types.size());
  for (std::size_t a = 0; a < raw_types.size(); ++a) {
    int const t = raw_types[a];
    if (!sys.type_map.empty()) {
      if (std::size_t(t) >= sys.type_map.size())
        throw Error("deepmd/npy file '" + type_file.string() + "': atom " + std::to_string(a) + " has type index " +
                    std::to_string(t) + ", beyond type_map.raw's " + std::to_string(sys.type_map.size()) +
                    " elements " + detail::join_names(sys.type_map));
      if (!model_type_map.empty()) {
        auto const it = std::find(model_type_map.begin(), model_type_map.end(), sys.type_map[t]);
        if (it == model_type_map.end())
          throw Error("deepmd/npy file '" + map_file.string() + "': element '" + sys.type_map[t] +
                      "' (used by atom " + std::to_string(a) + ") is not in the model's type_map " +
                      detail::join_names(model_type_map));
        sys.types[a] = static_cast<int>(it - model_type_map.begin());
      } else {
        sys.types[a] = t;
      }
    } else {
      if (!model_type_map.empty() && std::size_t(t) >= model_type_map.size())
        throw Error("deepmd/npy file '" + type_file.string() + "': atom " + std::to_string(a) + " has type index " +
                    std::to_string(t) + ", beyond the model's type_map " + detail::join_names(model_type_map) +
                    " (and there is no type_map.raw to remap by name)");
      sys.types[a] = t;
    }
  }

  sys.periodic = !fs::exists(dir / "nopbc");

  // Sets, in name order.
  std::vector<fs::path> sets;
  for (auto const& entry : fs::directory_iterator(dir)) {
    std::string const name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("set.", 0) == 0) sets.push_back(entry.path());
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) throw Error("deepmd/npy system '" + path + "': no set.* directory");

  std::size_t const natoms = std::size_t(sys.natoms);
  std::string const n3 = std::to_string(natoms * 3);
  bool all_virial = true;
  for (fs::path const& set : sets) all_virial = all_virial && fs::exists(set / "virial.npy");
  sys.has_virial = all_virial;

  for (fs::path const& set : sets) {
    fs::path const coord_file = set / "coord.npy";
    if (!fs::exists(coord_file)) throw Error("deepmd/npy file '" + coord_file.string() + "': missing");
    NpyArray const coord = read_npy(coord_file.string());
    // Frames in this set: the leading extent of coord.npy (a 1-d array is one frame).
    int nf = 0;
    if (coord.shape.size() >= 2) nf = static_cast<int>(coord.shape[0]);
    else if (coord.shape.size() == 1 && coord.shape[0] == natoms * 3) nf = 1;
    if (coord.size() != std::size_t(nf) * natoms * 3 || (coord.shape.size() == 1 && nf != 1))
      throw Error("deepmd/npy file '" + coord_file.string() + "': expected shape (nframes, " + n3 + ") (" +
                  std::to_string(natoms) + " atoms in type.raw), got " + detail::npy_shape_string(coord.shape));
    if (nf == 0) continue;  // an empty set adds nothing; an all-empty system is caught below
    std::string const frames = std::to_string(nf);
    std::string const why = frames + " frames in coord.npy, " + std::to_string(natoms) + " atoms in type.raw";
    for (std::size_t i = 0; i < coord.data.size(); ++i)
      if (!std::isfinite(coord.data[i]))
        throw Error("deepmd/npy file '" + coord_file.string() + "': non-finite value (" +
                    (std::isnan(coord.data[i]) ? std::string("NaN") : std::string("Inf")) + ") in frame " +
                    std::to_string(i / (natoms * 3)) + " (value " + std::to_string(i % (natoms * 3)) +
                    " of that frame)");
    sys.coord.insert(sys.coord.end(), coord.data.begin(), coord.data.end());

    auto require_file = [](fs::path const& f) {
      if (!fs::exists(f)) throw Error("deepmd/npy file '" + f.string() + "': missing");
    };
    if (sys.periodic) {
      require_file(set / "box.npy");
      detail::read_set_array(set / "box.npy", nf, 9, "(" + frames + ", 9)", why, sys.box);
    } else {
      sys.box.insert(sys.box.end(), std::size_t(nf) * 9, 0.0);
    }
    // Coincident atoms, in every frame (not only in those a batch draws): the descriptor has 1/r.
    std::size_t const first = std::size_t(sys.nframes);
    for (std::size_t f = 0; f < std::size_t(nf); ++f) {
      std::size_t const frame = first + f;
      CoincidentPair const pair = find_coincident_atoms(sys.coord.data() + frame * natoms * 3,
                                                        sys.box.data() + frame * 9, sys.natoms, sys.periodic);
      if (pair.atom_i >= 0)
        throw Error("system '" + path + "' frame " + std::to_string(frame) + " (frame " + std::to_string(f) + " of " +
                    set.filename().string() + "): " +
                    coincident_pair_text(pair.atom_i, pair.atom_j, pair.distance, min_pair_distance));
    }
    require_file(set / "energy.npy");
    detail::read_set_array(set / "energy.npy", nf, 1, "(" + frames + ",)", why, sys.energy);
    require_file(set / "force.npy");
    detail::read_set_array(set / "force.npy", nf, natoms * 3, "(" + frames + ", " + n3 + ")", why, sys.force);
    if (sys.has_virial) detail::read_set_array(set / "virial.npy", nf, 9, "(" + frames + ", 9)", why, sys.virial);
    sys.nframes += nf;
    sys.set_nframes.push_back(nf);
  }
  if (sys.nframes == 0) throw Error("deepmd/npy system '" + path + "': empty system (its sets hold no frames)");
  return sys;
}

/// Every directory at or below `root` that holds a type.raw file, sorted (DeePMD-kit's expansion
/// of a `systems` string). Symbolic links to folders are followed, except one leading back to a
/// folder it is inside of (a loop). Throws when `root` does not exist, cannot be listed or holds
/// no system.
inline std::vector<std::string> expand_systems(std::string const& root) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(root)) throw Error("deepmd/npy systems '" + root + "': not a directory");
  /// True when folder `p` is `q` or contains it (both canonical).
  auto contains = [](fs::path const& p, fs::path const& q) {
    return std::mismatch(p.begin(), p.end(), q.begin(), q.end()).first == p.end();
  };
  std::vector<std::string> found;
  try {
    if (fs::exists(fs::path(root) / "type.raw")) found.push_back(fs::path(root).string());
    fs::recursive_directory_iterator it(root, fs::directory_options::follow_directory_symlink), end;
    for (; it != end; ++it) {
      if (!it->is_directory()) continue;
      if (it->is_symlink() && contains(fs::canonical(it->path()), fs::canonical(it->path().parent_path()))) {
        it.disable_recursion_pending();  // a loop: its folders are listed by their real path
        continue;
      }
      if (fs::exists(it->path() / "type.raw")) found.push_back(it->path().string());
    }
  } catch (fs::filesystem_error const& e) {
    throw Error("deepmd/npy systems '" + root + "': cannot list the folder (" + e.what() + ")");
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) throw Error("deepmd/npy systems '" + root + "': no directory containing type.raw below it");
  return found;
}

/// Reads several systems (in the given order); `model_type_map` as for read_system.
/// Throws when `paths` is empty or any system is bad.
inline std::vector<System> read_systems(std::vector<std::string> const& paths,
                                        std::vector<std::string> const& model_type_map) {
  if (paths.empty()) throw Error("deepmd/npy: no systems given");
  std::vector<System> systems;
  systems.reserve(paths.size());
  for (auto const& p : paths) systems.push_back(read_system(p, model_type_map));
  return systems;
}

}  // namespace dpk
