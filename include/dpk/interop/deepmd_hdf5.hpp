#pragma once
/// \file deepmd_hdf5.hpp
/// \brief DeePMD-kit's `.dp` model file (HDF5, C API) <-> DeepmdDict.
///
/// Layout, as `deepmd.dpmodel.utils.serialization.save_dp_model` writes it: the root group has
/// a string attribute `json` holding the whole dictionary as JSON, in which every variable
/// (array) is replaced by the path of a root dataset `/variable_0000`, `/variable_0001`, ...
/// numbered in depth-first key order. Datasets are float32 or float64 of the array's shape.
/// Needs HDF5 (Debian: libhdf5-dev); link `dpk::interop`.

#include <dpk/core/error.hpp>
#include <dpk/interop/deepmd_dict.hpp>
#include <dpk/io/json_depth.hpp>

#include <hdf5.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace dpk::interop {

namespace detail::hdf5 {

/// Closes an HDF5 handle with `close` when it goes out of scope.
struct Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Handle(hid_t handle, herr_t (*closer)(hid_t)) : id(handle), close(closer) {}
  Handle(Handle const&) = delete;
  Handle& operator=(Handle const&) = delete;
  ~Handle() {
    if (id >= 0 && close) close(id);
  }
  explicit operator bool() const { return id >= 0; }
};

/// Silences HDF5's own error printing (dpk reports errors itself).
inline void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

inline std::string read_string_attribute(hid_t object, char const* name, std::string const& file) {
  auto fail = [&](std::string const& what) {
    return Error("DeePMD-kit model '" + file + "': root attribute '" + name + "' " + what);
  };
  if (H5Aexists(object, name) <= 0) throw fail("is missing (not a DeePMD-kit .dp model file)");
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!attribute) throw fail("cannot be opened");
  Handle type(H5Aget_type(attribute.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_STRING) throw fail("is not a string");
  // One string: reading a list of them into one would write past the buffer.
  {
    Handle space(H5Aget_space(attribute.id), H5Sclose);
    if (!space || H5Sget_simple_extent_npoints(space.id) != 1)
      throw fail("is not a single string (" + std::to_string(space ? H5Sget_simple_extent_npoints(space.id) : -1) +
                 " elements)");
  }
  if (H5Tis_variable_str(type.id) > 0) {
    Handle memtype(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memtype.id, H5T_VARIABLE);
    H5Tset_cset(memtype.id, H5Tget_cset(type.id));
    char* text = nullptr;
    if (H5Aread(attribute.id, memtype.id, &text) < 0 || text == nullptr) throw fail("cannot be read");
    std::string value(text);
    Handle space(H5Aget_space(attribute.id), H5Sclose);
    H5Dvlen_reclaim(memtype.id, space.id, H5P_DEFAULT, &text);
    return value;
  }
  std::size_t const size = H5Tget_size(type.id);
  std::vector<char> buffer(size + 1, '\0');
  if (H5Aread(attribute.id, type.id, buffer.data()) < 0) throw fail("cannot be read");
  return std::string(buffer.data(), strnlen(buffer.data(), size));
}

inline DeepmdDict read_dataset(hid_t file_id, std::string const& name, std::string const& key,
                               std::string const& file) {
  auto fail = [&](std::string const& what) {
    return Error("DeePMD-kit model '" + file + "': variable '" + key + "' (dataset '" + name + "') " + what);
  };
  if (name.empty() || name[0] != '/' || H5Lexists(file_id, name.c_str(), H5P_DEFAULT) <= 0)
    throw fail("does not exist in the file");
  Handle dataset(H5Dopen2(file_id, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset) throw fail("cannot be opened");
  Handle type(H5Dget_type(dataset.id), H5Tclose);
  if (H5Tget_class(type.id) != H5T_FLOAT || (H5Tget_size(type.id) != 4 && H5Tget_size(type.id) != 8))
    throw fail("has a data type other than float32/float64");
  std::string const dtype = H5Tget_size(type.id) == 4 ? "float32" : "float64";
  std::size_t const element_bytes = H5Tget_size(type.id);
  Handle space(H5Dget_space(dataset.id), H5Sclose);
  H5S_class_t const space_class = space ? H5Sget_simple_extent_type(space.id) : H5S_NO_CLASS;
  if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE) throw fail("has no shape (null or unreadable dataspace)");
  int const rank = H5Sget_simple_extent_ndims(space.id);
  if (rank < 0) throw fail("has an unreadable shape");
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  if (rank > 0 && H5Sget_simple_extent_dims(space.id, dims.data(), nullptr) < 0) throw fail("has an unreadable shape");
  std::vector<std::size_t> shape(dims.begin(), dims.end());
  // The values must be in the file: a shape is a header field, and a damaged one (or a dataset
  // whose storage was never written) must not make dpk allocate what the file does not hold.
  // Stored bytes bound the values (deflate, HDF5's only standard compressing filter, shrinks
  // data at most about 1032 times; unfiltered data takes its full size).
  std::size_t count = 1;
  bool too_many = false;
  for (auto d : shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / sizeof(double) / d) too_many = true;
    else count *= d;
  }
  hsize_t const stored = H5Dget_storage_size(dataset.id);
  Handle create(H5Dget_create_plist(dataset.id), H5Pclose);
  int const filters = create ? H5Pget_nfilters(create.id) : 0;
  long double const held = filters > 0 ? (long double)stored * 1100.0L : (long double)stored;
  if (too_many || (long double)count * element_bytes > held)
    throw fail("has shape " + shape_string(shape) + " but only " + std::to_string(stored) +
               " bytes stored (unwritten, damaged or truncated)");
  std::vector<double> values(count);
  if (count > 0 && H5Dread(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw fail("cannot be read (file damaged or truncated?)");
  return make_array(dtype, shape, values);
}

/// Refuses an array written into the `json` attribute itself (DeePMD-kit writes datasets) that
/// is not well formed.
inline void check_array(DeepmdDict const& node, std::string const& key, std::string const& file) {
  std::string const problem = array_problem(node);
  if (!problem.empty()) throw Error("DeePMD-kit model '" + file + "': variable '" + key + "' " + problem);
}

}  // namespace detail::hdf5

namespace detail::hdf5 {

/// The dictionary of the open `.dp` file `file_id` (`path` names it in errors).
inline DeepmdDict read_tree(hid_t file_id, std::string const& path) {
  std::string const text = read_string_attribute(file_id, "json", path);
  if (dpk::detail::json_nesting_depth(text.data(), text.data() + text.size()) > dpk::detail::max_json_depth)
    throw Error("DeePMD-kit model '" + path + "': root attribute 'json' is nested deeper than " +
                std::to_string(dpk::detail::max_json_depth) + " levels of lists/objects");
  DeepmdDict tree;
  try {
    tree = DeepmdDict::parse(text);
  } catch (nlohmann::json::exception const& e) {
    throw Error("DeePMD-kit model '" + path + "': root attribute 'json' is not valid JSON (" + e.what() + ")");
  }
  if (!tree.is_object()) throw Error("DeePMD-kit model '" + path + "': root attribute 'json' is not a JSON object");
  for_each_variable(tree, [&](DeepmdDict& node, std::string const& key) {
    if (is_array(node)) {
      check_array(node, key, path);
      return;
    }
    if (!node.is_string())
      throw Error("DeePMD-kit model '" + path + "': variable '" + key + "' is " + show(node) +
                  ", expected the name of a dataset");
    node = read_dataset(file_id, node.get<std::string>(), key, path);
  });
  return tree;
}

}  // namespace detail::hdf5

/// Reads the `.dp` file `path` into a DeepmdDict (arrays in place of the dataset names).
/// Throws dpk::Error naming the file (and the key or dataset) when it is not HDF5, lacks the
/// `json` attribute, holds invalid JSON, or a variable's dataset is missing or not float.
inline DeepmdDict read_deepmd_hdf5(std::string const& path) {
  detail::hdf5::quiet();
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (!probe) throw Error("DeePMD-kit model '" + path + "': cannot open (" + std::strerror(errno) + ")");
  std::fclose(probe);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw Error("DeePMD-kit model '" + path + "': not an HDF5 file (a .dp model is HDF5), or truncated");
  detail::hdf5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file) throw Error("DeePMD-kit model '" + path + "': HDF5 cannot open it (damaged or truncated)");
  return detail::hdf5::read_tree(file.id, path);
}

/// Reads the bytes of a `.dp` file (`path` names it in errors) from memory, as read_deepmd_hdf5
/// reads the file: HDF5's in-memory (core) driver opens a copy of `bytes` as a file image.
inline DeepmdDict parse_deepmd_hdf5(std::string const& bytes, std::string const& path) {
  detail::hdf5::quiet();
  if (bytes.empty()) throw Error("DeePMD-kit model '" + path + "': empty (a .dp model is HDF5)");
  detail::hdf5::Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!access || H5Pset_fapl_core(access.id, 1 << 16, 0) < 0 ||
      H5Pset_file_image(access.id, const_cast<char*>(bytes.data()), bytes.size()) < 0)
    throw Error("DeePMD-kit model '" + path + "': HDF5 cannot take the bytes as a file image");
  detail::hdf5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.id), H5Fclose);
  if (!file) throw Error("DeePMD-kit model '" + path + "': not an HDF5 file (a .dp model is HDF5), or damaged or truncated");
  return detail::hdf5::read_tree(file.id, path);
}

/// Writes `tree` as a `.dp` file at `path`: to `path.tmp.<pid>` first, renamed into place when
/// complete, so `path` is never left half written. Arrays become datasets of their dtype.
inline void write_deepmd_hdf5(std::string const& path, DeepmdDict tree) {
  detail::hdf5::quiet();
  std::string const temp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](std::string const& what) {
    std::remove(temp.c_str());
    return Error("DeePMD-kit model '" + path + "': " + what);
  };
  {
    detail::hdf5::Handle file(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file) throw fail("cannot create '" + temp + "'");
    int counter = 0;
    std::string error;
    for_each_variable(tree, [&](DeepmdDict& node, std::string const& key) {
      if (!is_array(node) || !error.empty()) return;
      char name[32];
      std::snprintf(name, sizeof name, "/variable_%04d", counter++);
      auto const shape = array_shape(node);
      std::vector<hsize_t> dims(shape.begin(), shape.end());
      auto const values = array_values(node);
      hid_t const file_type = node["dtype"] == "float32" ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
      detail::hdf5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                                 H5Sclose);
      detail::hdf5::Handle dataset(
          H5Dcreate2(file.id, name, file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
      if (!dataset || (!values.empty() &&
                       H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0))
        error = "cannot write dataset for '" + key + "'";
      node = name;
    });
    if (!error.empty()) throw fail(error);
    std::string const text = tree.dump();
    detail::hdf5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.id, H5T_VARIABLE);
    H5Tset_cset(type.id, H5T_CSET_UTF8);
    detail::hdf5::Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    detail::hdf5::Handle attribute(H5Acreate2(file.id, "json", type.id, space.id, H5P_DEFAULT, H5P_DEFAULT),
                                   H5Aclose);
    char const* data = text.c_str();
    if (!attribute || H5Awrite(attribute.id, type.id, &data) < 0) throw fail("cannot write the 'json' attribute");
    if (H5Fflush(file.id, H5F_SCOPE_GLOBAL) < 0) throw fail("cannot flush '" + temp + "'");
  }
  int const fd = ::open(temp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) throw fail(std::string("cannot rename into place (") +
                                                             std::strerror(errno) + ")");
}

}  // namespace dpk::interop
