#pragma once
/// \file deepmd.hpp
/// \brief Import and export of DeePMD-kit 3.x models (`.dp` HDF5 or `.yaml`) for dpk's model
/// files (docs/interop.md). Needs HDF5 and yaml-cpp: link `dpk::interop`. Not included by
/// <dpk/train.hpp> or <dpk/potential.hpp>.

#include <dpk/core/error.hpp>
#include <dpk/interop/deepmd_dict.hpp>
#include <dpk/interop/deepmd_hdf5.hpp>
#include <dpk/interop/deepmd_model.hpp>
#include <dpk/interop/deepmd_yaml.hpp>
#include <dpk/io/model_file.hpp>

#include <string>

namespace dpk::interop {

/// The kind of DeePMD-kit model file `path` names, from its extension: "dp" (.dp), "yaml"
/// (.yaml, .yml) or "" (anything else).
inline std::string deepmd_file_kind(std::string const& path) {
  auto ends_with = [&](char const* suffix) {
    std::string const s = suffix;
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".dp")) return "dp";
  if (ends_with(".yaml") || ends_with(".yml")) return "yaml";
  return "";
}

/// Reads the DeePMD-kit model file `path` (.dp or .yaml) as its dictionary.
inline DeepmdDict read_deepmd_dict(std::string const& path) {
  std::string const kind = deepmd_file_kind(path);
  if (kind == "dp") return read_deepmd_hdf5(path);
  if (kind == "yaml") return read_deepmd_yaml(path);
  throw Error("DeePMD-kit model '" + path + "': unknown extension (expected .dp, .yaml or .yml)");
}

/// Reads the DeePMD-kit model file `path` (.dp or .yaml) as a dpk model (validated; see
/// model_from_deepmd_dict for what is refused).
inline ModelFileData read_deepmd_model(std::string const& path) {
  return model_from_deepmd_dict(read_deepmd_dict(path), path);
}

/// Writes dpk's model `data` (read from `source`, named in errors) as the DeePMD-kit model file
/// `path` (.dp or .yaml). Nothing is written when it fails.
inline void write_deepmd_model(std::string const& path, ModelFileData const& data, std::string const& source) {
  std::string const kind = deepmd_file_kind(path);
  if (kind.empty()) throw Error("export to '" + path + "': unknown extension (expected .dp, .yaml or .yml)");
  DeepmdDict const tree = model_to_deepmd_dict(data, source);
  if (kind == "dp")
    write_deepmd_hdf5(path, tree);
  else
    write_deepmd_yaml(path, tree);
}

}  // namespace dpk::interop
