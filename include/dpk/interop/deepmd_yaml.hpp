#pragma once
/// \file deepmd_yaml.hpp
/// \brief DeePMD-kit's `.yaml` model file <-> DeepmdDict (yaml-cpp; Debian: libyaml-cpp-dev).
///
/// Layout, as `save_dp_model` writes it (PyYAML safe_dump): the whole dictionary, every array
/// written as {"@class": "np.ndarray", "@is_variable": true, "@version": 1, "dtype": ...,
/// "value": nested lists}. Plain scalars are typed as YAML 1.1 (PyYAML) does: null, true/false,
/// integers, floats (with a '.' or .inf/.nan); quoted scalars are strings. dpk writes floats
/// with 17 significant digits (exact round trip) in a form PyYAML reads as floats.

#include <dpk/core/error.hpp>
#include <dpk/interop/deepmd_dict.hpp>
#include <dpk/io/atomic_file.hpp>
#include <dpk/io/model_file.hpp>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

namespace dpk::interop {

namespace detail::yaml {

/// A plain YAML scalar typed like PyYAML's safe loader.
inline DeepmdDict plain_scalar(std::string const& s) {
  static std::regex const null_re("~|null|Null|NULL|");
  static std::regex const true_re("true|True|TRUE|yes|Yes|YES|on|On|ON");
  static std::regex const false_re("false|False|FALSE|no|No|NO|off|Off|OFF");
  static std::regex const int_re("[-+]?(0|[1-9][0-9_]*)");
  static std::regex const float_re("[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?");
  static std::regex const inf_re("[-+]?\\.(inf|Inf|INF)");
  static std::regex const nan_re("\\.(nan|NaN|NAN)");
  if (std::regex_match(s, null_re)) return nullptr;
  if (std::regex_match(s, true_re)) return true;
  if (std::regex_match(s, false_re)) return false;
  auto digits = [](std::string t) {
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    return t;
  };
  if (std::regex_match(s, int_re)) return std::stoll(digits(s));
  if (std::regex_match(s, float_re) && s != "." && s != "-." && s != "+.") return std::strtod(digits(s).c_str(), nullptr);
  if (std::regex_match(s, inf_re))
    return s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (std::regex_match(s, nan_re)) return std::numeric_limits<double>::quiet_NaN();
  return s;
}

inline DeepmdDict to_dict(YAML::Node const& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") return node.Scalar();  // quoted: a string
      return plain_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      DeepmdDict list = DeepmdDict::array();
      for (auto const& item : node) list.push_back(to_dict(item));
      return list;
    }
    case YAML::NodeType::Map: {
      DeepmdDict map = DeepmdDict::object();
      for (auto const& item : node) map[item.first.as<std::string>()] = to_dict(item.second);
      return map;
    }
  }
  return nullptr;
}

/// Flattens DeePMD-kit's nested "value" lists into shape + values; throws on ragged lists.
inline void flatten(DeepmdDict const& value, std::size_t depth, std::vector<std::size_t>& shape,
                    std::vector<double>& out, std::string const& where) {
  if (!value.is_array()) {
    if (!value.is_number())
      throw Error(where + ": array element " + show(value) + " is not a number");
    if (depth != shape.size()) throw Error(where + ": 'value' is a ragged nested list");
    out.push_back(value.get<double>());
    return;
  }
  if (depth == shape.size()) {
    if (!out.empty()) throw Error(where + ": 'value' is a ragged nested list");
    shape.push_back(value.size());
  } else if (depth > shape.size() || shape[depth] != value.size()) {
    throw Error(where + ": 'value' is a ragged nested list");
  }
  for (auto const& item : value) flatten(item, depth + 1, shape, out, where);
}

/// Replaces DeePMD-kit's YAML array objects by dpk array nodes (flat values + shape).
inline void convert_arrays(DeepmdDict& node, std::string const& path, std::string const& file) {
  if (node.is_object()) {
    if (node.contains("@class") && node["@class"] == "np.ndarray") {
      std::string const where = "DeePMD-kit model '" + file + "': array '" + path + "'";
      if (!node.contains("dtype") || !node["dtype"].is_string() || !node.contains("value"))
        throw Error(where + " lacks 'dtype' or 'value'");
      std::string const dtype = node["dtype"];
      if (dtype != "float64" && dtype != "float32")
        throw Error(where + " has dtype '" + dtype + "', expected float64 or float32");
      std::vector<std::size_t> shape;
      std::vector<double> values;
      flatten(node["value"], 0, shape, values, where);
      node = make_array(dtype, shape, values);
      return;
    }
    for (auto it = node.begin(); it != node.end(); ++it)
      convert_arrays(it.value(), path.empty() ? it.key() : path + "." + it.key(), file);
  } else if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i) convert_arrays(node[i], path + "[" + std::to_string(i) + "]", file);
  }
}

/// Shortest of 15-17 significant digits that reads back exactly, in a form PyYAML reads as a
/// float (always a '.', signed exponent).
inline std::string float_text(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buffer[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  std::string s = buffer;
  if (s.find('.') == std::string::npos) {
    auto const e = s.find('e');
    if (e == std::string::npos) s += ".0";
    else s.insert(e, ".0");
  }
  return s;
}

inline void emit(YAML::Emitter& out, DeepmdDict const& node, bool flow = false);

inline void emit_nested(YAML::Emitter& out, std::vector<std::size_t> const& shape, std::vector<double> const& values,
                        std::size_t depth, std::size_t& index) {
  if (depth == shape.size()) {
    out << float_text(values[index++]);
    return;
  }
  out << YAML::Flow << YAML::BeginSeq;
  for (std::size_t i = 0; i < shape[depth]; ++i) emit_nested(out, shape, values, depth + 1, index);
  out << YAML::EndSeq;
}

inline void emit(YAML::Emitter& out, DeepmdDict const& node, bool flow) {
  if (is_array(node)) {  // DeePMD-kit's form: nested lists, no shape
    out << YAML::BeginMap;
    out << YAML::Key << YAML::DoubleQuoted << "@class" << YAML::Value << YAML::DoubleQuoted << "np.ndarray";
    out << YAML::Key << YAML::DoubleQuoted << "@is_variable" << YAML::Value << "true";
    out << YAML::Key << YAML::DoubleQuoted << "@version" << YAML::Value << "1";
    out << YAML::Key << "dtype" << YAML::Value << YAML::DoubleQuoted << node["dtype"].get<std::string>();
    out << YAML::Key << "value" << YAML::Value;
    auto const shape = array_shape(node);
    auto const values = array_values(node);
    std::size_t index = 0;
    emit_nested(out, shape, values, 0, index);
    out << YAML::EndMap;
  } else if (node.is_object()) {
    if (flow) out << YAML::Flow;
    out << YAML::BeginMap;
    for (auto it = node.begin(); it != node.end(); ++it) {
      out << YAML::Key << YAML::DoubleQuoted << it.key() << YAML::Value;
      emit(out, it.value(), flow);
    }
    out << YAML::EndMap;
  } else if (node.is_array()) {
    bool scalars = true;
    for (auto const& item : node) scalars = scalars && !item.is_structured();
    out << (flow || scalars ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (auto const& item : node) emit(out, item, flow || scalars);
    out << YAML::EndSeq;
  } else if (node.is_null()) {
    out << YAML::Null;
  } else if (node.is_boolean()) {
    out << (node.get<bool>() ? "true" : "false");
  } else if (node.is_number_float()) {
    out << float_text(node.get<double>());
  } else if (node.is_number()) {
    out << show(node);
  } else {
    out << YAML::DoubleQuoted << node.get<std::string>();
  }
}

}  // namespace detail::yaml

/// Parses the text of a `.yaml` model file (`path` names it in errors) into a DeepmdDict. Throws
/// dpk::Error when it is not YAML, nests deeper than DeePMD-kit's models do, is not a mapping, or
/// holds a malformed array.
inline DeepmdDict parse_deepmd_yaml(std::string const& text, std::string const& path) {
  // yaml-cpp parses and converts recursively: a document nested thousands of levels deep (a
  // corrupt or hostile file) would overflow the stack. DeePMD-kit's models nest about 10 levels.
  std::size_t depth = 0, deepest = 0;
  for (char const c : text) {
    if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  std::size_t const max_depth = 64;
  if (deepest > max_depth)
    throw Error("DeePMD-kit model '" + path + "': not valid YAML (flow collections nested deeper than " +
                std::to_string(max_depth) + " levels)");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (YAML::Exception const& e) {
    throw Error("DeePMD-kit model '" + path + "': not valid YAML (" + e.what() + ")");
  }
  if (!root.IsMap()) throw Error("DeePMD-kit model '" + path + "': the YAML document is not a mapping");
  try {
    DeepmdDict tree = detail::yaml::to_dict(root);
    detail::yaml::convert_arrays(tree, "", path);
    return tree;
  } catch (YAML::Exception const& e) {
    throw Error("DeePMD-kit model '" + path + "': not valid YAML (" + e.what() + ")");
  }
}

/// Reads the `.yaml` model file `path` into a DeepmdDict (see parse_deepmd_yaml). Throws
/// dpk::Error naming the file when it cannot be read or parsed.
inline DeepmdDict read_deepmd_yaml(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("DeePMD-kit model '" + path + "': cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("DeePMD-kit model '" + path + "': read failed");
  return parse_deepmd_yaml(text.str(), path);
}

/// The YAML text of `tree` (DeePMD-kit's array form).
inline std::string deepmd_yaml_text(DeepmdDict const& tree) {
  YAML::Emitter out;
  out.SetIndent(2);
  detail::yaml::emit(out, tree);
  require(out.good(), std::string("deepmd yaml: emitter error: ") + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

/// Writes `tree` as a `.yaml` model file at `path` atomically (temp file, fsync, rename).
inline void write_deepmd_yaml(std::string const& path, DeepmdDict const& tree) {
  write_file_atomically(path, deepmd_yaml_text(tree), "DeePMD-kit model");
}

}  // namespace dpk::interop
