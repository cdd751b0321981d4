#pragma once
/// \file deepmd_dict.hpp
/// \brief In-memory tree of DeePMD-kit 3.x's serialized model dictionary (the dict that
/// `deepmd.dpmodel` serializes; docs/interop.md): nested maps (key order kept), lists, strings,
/// numbers, booleans, null, and n-d float arrays.
///
/// The tree is an `nlohmann::ordered_json`. An array is the object DeePMD-kit writes in its YAML
/// files, plus the shape and with the values flat in row-major order:
///   {"@class": "np.ndarray", "@is_variable": true, "@version": 1, "dtype": "float64",
///    "shape": [2, 3], "value": [6 numbers]}
/// Values are held as double (float32 values convert exactly); `dtype` says what the file holds.

#include <dpk/core/error.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace dpk::interop {

using DeepmdDict = nlohmann::ordered_json;

/// `value` as JSON text for an error message: invalid UTF-8 replaced (a plain dump() would throw
/// on it), at most 200 characters.
inline std::string show(DeepmdDict const& value) {
  std::string text = value.dump(-1, ' ', false, DeepmdDict::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

/// An n-d float array node of `dtype` ("float64" or "float32") and `shape` holding `values`
/// (row-major, size = product of the shape).
inline DeepmdDict make_array(std::string const& dtype, std::vector<std::size_t> const& shape,
                             std::vector<double> const& values) {
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  require(n == values.size(), "deepmd dict: array of shape with " + std::to_string(n) + " elements given " +
                                  std::to_string(values.size()) + " values");
  DeepmdDict a = DeepmdDict::object();
  a["@class"] = "np.ndarray";
  a["@is_variable"] = true;
  a["@version"] = 1;
  a["dtype"] = dtype;
  a["shape"] = shape;
  a["value"] = values;
  return a;
}

/// True when `node` is an array node (see the file comment).
inline bool is_array(DeepmdDict const& node) {
  return node.is_object() && node.contains("@class") && node["@class"] == "np.ndarray" && node.contains("shape") &&
         node.contains("value");
}

/// What is wrong with the array node `node` (is_array true), or "" when it is well formed:
/// `dtype` "float64" or "float32", `shape` a list of non-negative integers whose product fits in
/// size_t, `value` a flat list of exactly that many numbers. array_shape and array_values may be
/// called on a node for which this returns "" (they throw nlohmann's exceptions otherwise).
inline std::string array_problem(DeepmdDict const& node) {
  auto const& dtype = node.contains("dtype") ? node["dtype"] : DeepmdDict();
  if (dtype != "float64" && dtype != "float32")
    return "has dtype " + (dtype.is_string() ? "'" + show(dtype).substr(1, show(dtype).size() - 2) + "'" : show(dtype)) +
           ", expected float64 or float32";
  auto const& shape = node["shape"];
  if (!shape.is_array()) return "has shape " + show(shape) + ", expected a list of non-negative integers";
  std::size_t count = 1;
  bool overflow = false;
  for (auto const& extent : shape) {
    if (!extent.is_number_integer() || (extent.is_number_integer() && !extent.is_number_unsigned() && extent.get<long long>() < 0))
      return "has shape " + show(shape) + ", expected a list of non-negative integers";
    auto const e = extent.get<std::uint64_t>();
    if (e != 0 && count > std::numeric_limits<std::size_t>::max() / e) overflow = true;
    else count *= std::size_t(e);
  }
  auto const& value = node["value"];
  if (!value.is_array()) return "has 'value' " + show(value) + ", expected a flat list of numbers";
  if (overflow || value.size() != count)
    return "has shape " + show(shape) + " but " + std::to_string(value.size()) + " values";
  for (auto const& v : value)
    if (!v.is_number()) return "has a value " + show(v) + " that is not a number";
  return "";
}

/// Shape of an array node.
inline std::vector<std::size_t> array_shape(DeepmdDict const& node) {
  return node.at("shape").get<std::vector<std::size_t>>();
}

/// Values of an array node, row-major.
inline std::vector<double> array_values(DeepmdDict const& node) { return node.at("value").get<std::vector<double>>(); }

/// "[2, 3]" for error messages.
inline std::string shape_string(std::vector<std::size_t> const& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Calls `visit(node, path)` on every array node and on every non-container leaf below a
/// "@variables" key (DeePMD-kit's variables: arrays or null), depth first in key order, the
/// order in which DeePMD-kit numbers the datasets of a .dp file. `visit` may replace the node.
template <class Visit>
void for_each_variable(DeepmdDict& node, Visit&& visit, std::string const& path = "", bool in_variables = false) {
  if (is_array(node)) {
    visit(node, path);
  } else if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      for_each_variable(it.value(), visit, path.empty() ? it.key() : path + "." + it.key(),
                        in_variables || it.key() == "@variables");
  } else if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      for_each_variable(node[i], visit, path + "[" + std::to_string(i) + "]", in_variables);
  } else if (in_variables && !node.is_null()) {
    visit(node, path);
  }
}

}  // namespace dpk::interop
