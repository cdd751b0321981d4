#pragma once
/// \file deepmd_model.hpp
/// \brief dpk's model (ModelFileData) <-> DeePMD-kit 3.x's serialized model dictionary
/// (DeepmdDict): `model` of type standard, descriptor se_e2_a, fitting ener (docs/interop.md).
///
/// Import accepts every se_e2_a + ener model DeePMD-kit writes that dpk can express and refuses
/// everything else with an error naming the key and the value. Export writes what DeePMD-kit's
/// TensorFlow backend writes, with each layer's `resnet` flag set from dpk's (= TensorFlow's)
/// skip rule, so that DeePMD-kit's dpmodel/PyTorch backends compute the same function.
/// Needs neither HDF5 nor yaml-cpp (those are in deepmd_hdf5.hpp / deepmd_yaml.hpp).

#include <dpk/core/error.hpp>
#include <dpk/interop/deepmd_dict.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/nn/layer.hpp>
#include <dpk/io/model_file.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ctime>
#include <string>
#include <vector>

namespace dpk::interop {

namespace detail::model {

/// Error helper: every message names the file and the key path.
struct Context {
  std::string file;
  Error error(std::string const& path, std::string const& what) const {
    return Error("DeePMD-kit model '" + file + "': " + path + " " + what);
  }
};

inline std::string join(std::string const& path, std::string const& key) { return path.empty() ? key : path + "." + key; }

inline DeepmdDict const& at(DeepmdDict const& node, std::string const& key, std::string const& path,
                            Context const& c) {
  if (!node.is_object()) throw c.error(path, "is not a mapping");
  if (!node.contains(key)) throw c.error(join(path, key), "is missing");
  return node[key];
}

template <class T>
T get(DeepmdDict const& node, std::string const& key, std::string const& path, Context const& c) {
  DeepmdDict const& v = at(node, key, path, c);
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) throw nlohmann::json::type_error::create(302, "not a boolean", nullptr);
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) throw nlohmann::json::type_error::create(302, "not an integer", nullptr);
      bool const fits = v.is_number_unsigned()
                            ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<T>::max())
                            : v.get<std::int64_t>() >= std::int64_t(std::numeric_limits<T>::min()) &&
                                  v.get<std::int64_t>() <= std::int64_t(std::numeric_limits<T>::max());
      if (!fits) throw nlohmann::json::type_error::create(302, "out of range", nullptr);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) throw nlohmann::json::type_error::create(302, "not a number", nullptr);
    }
    return v.get<T>();
  } catch (nlohmann::json::exception const&) {
    throw c.error(join(path, key), "has the wrong type (" + show(v) + ")");
  }
}

/// `key` absent, or equal to `expected` (numbers compared as numbers); else refuses naming both.
inline void expect_value(DeepmdDict const& node, std::string const& key, DeepmdDict const& expected,
                         std::string const& path, Context const& c, std::string const& why) {
  if (!node.is_object() || !node.contains(key)) return;
  DeepmdDict const& v = node[key];
  bool same = v == expected;
  if (!same && v.is_number() && expected.is_number()) same = v.get<double>() == expected.get<double>();
  if (!same)
    throw c.error(join(path, key), "is " + show(v) + "; dpk supports only " + show(expected) + " (" + why + ")");
}

/// `key` absent, null, or an empty list.
inline void expect_empty(DeepmdDict const& node, std::string const& key, std::string const& path, Context const& c,
                         std::string const& why) {
  if (!node.is_object() || !node.contains(key)) return;
  DeepmdDict const& v = node[key];
  if (v.is_null() || (v.is_array() && v.empty())) return;
  throw c.error(join(path, key), "is " + show(v) + "; dpk supports only an empty value (" + why + ")");
}

/// `@version` absent or within [lo, hi].
inline void expect_version(DeepmdDict const& node, int lo, int hi, std::string const& path, Context const& c) {
  if (!node.contains("@version")) return;
  auto const& v = node["@version"];
  if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<std::uint64_t>() > std::uint64_t(hi)
                                                         : v.get<std::int64_t>() > hi) ||
      v.get<std::int64_t>() < lo)
    throw c.error(join(path, "@version"), "is " + show(v) + "; dpk reads versions " + std::to_string(lo) + " to " +
                                              std::to_string(hi));
}

/// The array at `key`: float32/float64 of exactly `shape`.
inline std::vector<double> array(DeepmdDict const& node, std::string const& key, std::vector<std::size_t> const& shape,
                                 std::string const& path, Context const& c) {
  DeepmdDict const& v = at(node, key, path, c);
  if (!is_array(v)) throw c.error(join(path, key), "is " + (v.is_null() ? std::string("null") : std::string("not an array")) +
                                                       ", expected an array of shape " + shape_string(shape));
  std::string const problem = array_problem(v);
  if (!problem.empty()) throw c.error(join(path, key), problem);
  if (array_shape(v) != shape)
    throw c.error(join(path, key), "has shape " + shape_string(array_shape(v)) + ", expected " + shape_string(shape));
  return array_values(v);
}

/// The layers of one network, checked against dpk's shapes; values copied into `parameters`.
/// `tf_rules`: the file comes from DeePMD-kit's TensorFlow backend, which ignores the layers'
/// `resnet` flags (it applies the rule dpk applies); otherwise the flags must give that rule.
inline void read_network(DeepmdDict const& net, std::string const& path, std::vector<nn::LayerShape> const& shapes,
                         std::vector<nn::LayerOffsets> const& offsets, std::string const& precision, bool tf_rules,
                         std::vector<double>& parameters, Context const& c) {
  auto const& layers = at(net, "layers", path, c);
  if (!layers.is_array() || layers.size() != shapes.size())
    throw c.error(join(path, "layers"), "has " + std::to_string(layers.is_array() ? layers.size() : 0) +
                                            " layers, expected " + std::to_string(shapes.size()));
  for (std::size_t l = 0; l < shapes.size(); ++l) {
    std::string const lp = join(path, "layers") + "[" + std::to_string(l) + "]";
    auto const& layer = layers[l];
    auto const& shape = shapes[l];
    expect_value(layer, "@class", "Layer", lp, c, "only dense layers");
    expect_version(layer, 1, 2, lp, c);
    expect_value(layer, "bias", true, lp, c, "layers without bias are not supported");
    std::string const act = shape.tanh ? "tanh" : "none";
    auto const activation = get<std::string>(layer, "activation_function", lp, c);
    if (activation != act && !(act == "none" && activation == "linear"))
      throw c.error(join(lp, "activation_function"), "is \"" + activation + "\"; dpk supports only \"" + act + "\" here");
    if (layer.contains("precision") && get<std::string>(layer, "precision", lp, c) != precision)
      throw c.error(join(lp, "precision"), "is " + show(layer["precision"]) + " but the model's precision is \"" +
                                               precision + "\" (mixed precisions are not supported)");
    bool const skips = shape.skip != nn::Skip::none;
    bool const doubles = shape.n_out == 2 * shape.n_in, equal = shape.n_out == shape.n_in;
    if (!tf_rules && layer.contains("resnet")) {
      bool const resnet = get<bool>(layer, "resnet", lp, c);
      bool const dpmodel_skips = resnet && (equal || doubles);
      if (dpmodel_skips != skips)
        throw c.error(join(lp, "resnet"),
                      std::string("is ") + (resnet ? "true" : "false") + " for a " + std::to_string(shape.n_in) + "->" +
                          std::to_string(shape.n_out) + " layer: that " + (dpmodel_skips ? "adds" : "drops") +
                          " a skip connection which DeePMD-kit's TensorFlow backend and dpk " +
                          (skips ? "have" : "do not have") + " (file not written by the TensorFlow backend)");
    }
    auto const& vars = at(layer, "@variables", lp, c);
    std::string const vp = join(lp, "@variables");
    auto const w = array(vars, "w", {std::size_t(shape.n_in), std::size_t(shape.n_out)}, vp, c);
    auto const b = array(vars, "b", {std::size_t(shape.n_out)}, vp, c);
    for (auto const* name : {"w", "b"})
      if (vars[name]["dtype"] != precision)
        throw c.error(join(vp, name), "has dtype " + show(vars[name]["dtype"]) + " but the model's precision is \"" +
                                          precision + "\" (mixed precisions are not supported)");
    std::copy(w.begin(), w.end(), parameters.begin() + std::ptrdiff_t(offsets[l].w));
    std::copy(b.begin(), b.end(), parameters.begin() + std::ptrdiff_t(offsets[l].b));
    bool const has_idt = vars.contains("idt") && !vars["idt"].is_null();
    if (has_idt != shape.timestep)
      throw c.error(join(vp, "idt"), std::string(has_idt ? "is present" : "is missing") + " on a " +
                                         std::to_string(shape.n_in) + "->" + std::to_string(shape.n_out) +
                                         " layer; with this network's resnet_dt dpk expects " +
                                         (shape.timestep ? "a timestep" : "none"));
    if (has_idt) {
      auto const idt = array(vars, "idt", {std::size_t(shape.n_out)}, vp, c);
      if (vars["idt"]["dtype"] != precision)
        throw c.error(join(vp, "idt"), "has dtype " + show(vars["idt"]["dtype"]) +
                                           " but the model's precision is \"" + precision + "\"");
      std::copy(idt.begin(), idt.end(), parameters.begin() + std::ptrdiff_t(offsets[l].idt));
    }
  }
}

/// Checks a NetworkCollection's header and returns its networks.
inline DeepmdDict const& networks(DeepmdDict const& collection, std::string const& path, int ndim, int ntypes,
                                  Context const& c) {
  expect_value(collection, "@class", "NetworkCollection", path, c, "se_e2_a networks");
  expect_version(collection, 1, 1, path, c);
  if (get<int>(collection, "ndim", path, c) != ndim)
    throw c.error(join(path, "ndim"), "is " + show(collection["ndim"]) + ", expected " + std::to_string(ndim));
  if (get<int>(collection, "ntypes", path, c) != ntypes)
    throw c.error(join(path, "ntypes"), "is " + show(collection["ntypes"]) + ", expected " + std::to_string(ntypes));
  auto const& nets = at(collection, "networks", path, c);
  std::size_t expected = 1;
  for (int d = 0; d < ndim; ++d) expected *= std::size_t(ntypes);
  if (!nets.is_array() || nets.size() != expected)
    throw c.error(join(path, "networks"), "has " + std::to_string(nets.is_array() ? nets.size() : 0) +
                                              " networks, expected " + std::to_string(expected));
  return nets;
}

inline std::vector<int> int_list(DeepmdDict const& node, std::string const& key, std::string const& path,
                                 Context const& c) {
  auto const& v = at(node, key, path, c);
  if (!v.is_array()) throw c.error(join(path, key), "is " + show(v) + ", expected a list of integers");
  std::vector<int> out;
  for (auto const& x : v) {
    bool const fits = x.is_number_unsigned()
                          ? x.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<int>::max())
                          : x.is_number_integer() && x.get<std::int64_t>() >= 0 &&
                                x.get<std::int64_t>() <= std::numeric_limits<int>::max();
    if (!fits)
      throw c.error(join(path, key), "is " + show(v) + ", expected a list of non-negative integers below 2^31");
    out.push_back(x.get<int>());
  }
  return out;
}

/// Number of float values held by the array nodes below `node` (the most parameters a model
/// read from it can have).
inline double values_held(DeepmdDict const& node) {
  if (is_array(node)) return node["value"].is_array() ? double(node["value"].size()) : 0.0;
  double n = 0;
  if (node.is_object() || node.is_array())
    for (auto const& item : node) n += values_held(item);
  return n;
}

/// Parameters of the se_e2_a + ener model of these settings, counted in double (no overflow
/// for any int settings): weights, biases and timesteps of every network.
inline double parameter_count(DescriptorConfig const& dc, FittingConfig const& fc, int ntypes) {
  auto network = [](double n_in, std::vector<int> const& neuron, bool last_linear) {
    double n = 0;
    for (int out : neuron) {
      n += n_in * out + 2.0 * out;  // w, b, (at most) idt
      n_in = out;
    }
    if (last_linear) n += n_in + 1;
    return n;
  };
  double const nt = ntypes;
  double const nets = dc.type_one_side ? nt : nt * nt;
  double const dim = double(dc.neuron.back()) * dc.axis_neuron;
  return nets * network(1, dc.neuron, false) + nt * network(dim, fc.neuron, true);
}

inline std::string utc_now() {
  std::time_t const t = std::time(nullptr);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S+00:00", std::gmtime(&t));
  return buffer;
}

}  // namespace detail::model

/// Builds dpk's model from DeePMD-kit's serialized dictionary `tree` (the top level of a .dp or
/// .yaml file, with key `model`). `file` names the source in errors. Throws dpk::Error naming
/// the key path and the value of anything dpk cannot express.
inline ModelFileData model_from_deepmd_dict(DeepmdDict const& tree, std::string const& file) {
  using namespace detail::model;
  Context const c{file};
  if (!tree.is_object()) throw c.error("(top level)", "is not a mapping");
  auto text_of = [&](char const* key) {
    return tree.contains(key) && tree[key].is_string() ? tree[key].get<std::string>() : std::string();
  };
  bool const tf_rules = text_of("backend") == "TensorFlow";
  auto const& model = at(tree, "model", "", c);
  std::string const mp = "model";
  expect_value(model, "@class", "Model", mp, c, "standard models");
  expect_version(model, 1, 2, mp, c);
  if (get<std::string>(model, "type", mp, c) != "standard")
    throw c.error("model.type", "is " + show(model["type"]) + "; dpk supports only \"standard\" models");
  expect_empty(model, "atom_exclude_types", mp, c, "exclude types are not supported");
  expect_empty(model, "pair_exclude_types", mp, c, "exclude types are not supported");
  auto const type_map = model.contains("type_map") ? model["type_map"] : DeepmdDict::array();
  if (!type_map.is_array()) throw c.error("model.type_map", "is not a list of element names");

  // ---- descriptor
  auto const& d = at(model, "descriptor", mp, c);
  std::string const dp = "model.descriptor";
  auto const dtype = get<std::string>(d, "type", dp, c);
  if (dtype != "se_e2_a" && dtype != "se_a")
    throw c.error("model.descriptor.type", "is \"" + dtype + "\"; dpk supports only \"se_e2_a\"");
  expect_value(d, "@class", "Descriptor", dp, c, "se_e2_a");
  if (d.contains("compress") || (d.contains("@version") && d["@version"] == 3))
    throw c.error("model.descriptor.compress", "is present: compressed (tabulated) models are not supported; "
                                               "export the uncompressed model from DeePMD-kit");
  expect_version(d, 1, 2, dp, c);
  ModelFileData data;
  DescriptorConfig& dc = data.descriptor;
  dc.type = "se_e2_a";
  dc.sel = int_list(d, "sel", dp, c);
  dc.rcut = get<double>(d, "rcut", dp, c);
  dc.rcut_smth = get<double>(d, "rcut_smth", dp, c);
  dc.neuron = int_list(d, "neuron", dp, c);
  dc.axis_neuron = get<int>(d, "axis_neuron", dp, c);
  dc.type_one_side = get<bool>(d, "type_one_side", dp, c);
  dc.resnet_dt = get<bool>(d, "resnet_dt", dp, c);
  dc.activation_function = get<std::string>(d, "activation_function", dp, c);
  if (dc.activation_function != "tanh")
    throw c.error("model.descriptor.activation_function",
                  "is \"" + dc.activation_function + "\"; dpk supports only \"tanh\"");
  std::string const precision = get<std::string>(d, "precision", dp, c);
  if (precision != "float64" && precision != "float32")
    throw c.error("model.descriptor.precision", "is \"" + precision + "\"; dpk supports float64 and float32");
  dc.precision = precision;
  expect_empty(d, "exclude_types", dp, c, "exclude types are not supported");
  expect_value(d, "env_protection", 0.0, dp, c, "env_protection is not supported");
  expect_empty(d, "spin", dp, c, "spin models are not supported");
  expect_empty(d, "type_embedding", dp, c, "type embedding is not supported");
  if (dc.sel.empty()) throw c.error("model.descriptor.sel", "is empty");
  long long sel_sum = 0;
  for (int s : dc.sel) sel_sum += s;
  if (sel_sum > std::numeric_limits<int>::max())
    throw c.error("model.descriptor.sel", "is " + show(d["sel"]) + ": sums to more than 2^31 - 1 neighbours");
  if (dc.neuron.empty()) throw c.error("model.descriptor.neuron", "is empty");
  for (int n : dc.neuron)
    if (n < 1) throw c.error("model.descriptor.neuron", "is " + show(d["neuron"]) + ", expected entries >= 1");
  if (dc.axis_neuron < 1 || dc.axis_neuron > dc.neuron.back())
    throw c.error("model.descriptor.axis_neuron", "is " + std::to_string(dc.axis_neuron) + ", expected 1.." +
                                                      std::to_string(dc.neuron.back()));
  if (!(dc.rcut > 0) || !(dc.rcut_smth >= 0) || !(dc.rcut_smth < dc.rcut))
    throw c.error("model.descriptor.rcut", "and rcut_smth (" + std::to_string(dc.rcut) + ", " +
                                               std::to_string(dc.rcut_smth) + ") must satisfy 0 <= rcut_smth < rcut");
  if (d.contains("env_mat")) {
    auto const& env = d["env_mat"];
    std::string const ep = "model.descriptor.env_mat";
    expect_value(env, "rcut", dc.rcut, ep, c, "must equal descriptor.rcut");
    expect_value(env, "rcut_smth", dc.rcut_smth, ep, c, "must equal descriptor.rcut_smth");
    expect_value(env, "protection", 0.0, ep, c, "env_protection is not supported");
    expect_value(env, "use_exp_switch", false, ep, c, "only the polynomial switch is supported");
  }
  int const ntypes = int(dc.sel.size());
  data.ntypes = ntypes;
  if (!type_map.empty() && int(type_map.size()) != ntypes)
    throw c.error("model.type_map", "has " + std::to_string(type_map.size()) + " names " + show(type_map) +
                                        " but descriptor.sel has " + std::to_string(ntypes) + " types");
  for (auto const& name : type_map) {
    if (!name.is_string()) throw c.error("model.type_map", "is " + show(type_map) + ", expected element names");
    data.type_map.push_back(name.get<std::string>());
  }
  if (d.contains("type_map") && !d["type_map"].is_null() && !type_map.empty() && d["type_map"] != type_map)
    throw c.error("model.descriptor.type_map", "is " + show(d["type_map"]) + " but model.type_map is " +
                                                   show(type_map));
  std::size_t const nnei = std::size_t(dc.nnei());
  auto const& dvars = at(d, "@variables", dp, c);
  data.avg = array(dvars, "davg", {std::size_t(ntypes), nnei, 4}, "model.descriptor.@variables", c);
  data.stdev = array(dvars, "dstd", {std::size_t(ntypes), nnei, 4}, "model.descriptor.@variables", c);

  // ---- fitting
  auto const& f = at(model, "fitting", mp, c);
  std::string const fp = "model.fitting";
  expect_value(f, "@class", "Fitting", fp, c, "energy fitting");
  expect_version(f, 1, 4, fp, c);
  if (get<std::string>(f, "type", fp, c) != "ener")
    throw c.error("model.fitting.type", "is " + show(f["type"]) + "; dpk supports only \"ener\"");
  expect_value(f, "var_name", "energy", fp, c, "energy fitting");
  expect_value(f, "dim_out", 1, fp, c, "energy fitting");
  expect_value(f, "ntypes", ntypes, fp, c, "must equal the descriptor's number of types");
  expect_value(f, "numb_fparam", 0, fp, c, "frame parameters (fparam) are not supported");
  expect_value(f, "numb_aparam", 0, fp, c, "atomic parameters (aparam) are not supported");
  expect_value(f, "dim_case_embd", 0, fp, c, "case embedding is not supported");
  expect_value(f, "mixed_types", false, fp, c, "type embedding is not supported");
  expect_value(f, "use_aparam_as_mask", false, fp, c, "aparam is not supported");
  expect_empty(f, "exclude_types", fp, c, "exclude types are not supported");
  expect_empty(f, "layer_name", fp, c, "shared fitting layers are not supported");
  expect_empty(f, "spin", fp, c, "spin models are not supported");
  expect_empty(f, "default_fparam", fp, c, "frame parameters (fparam) are not supported");
  expect_empty(f, "tebd_dim", fp, c, "type embedding is not supported");
  if (f.contains("atom_ener") && f["atom_ener"].is_array())
    for (auto const& e : f["atom_ener"])
      if (!e.is_null())
        throw c.error("model.fitting.atom_ener", "is " + show(f["atom_ener"]) + "; dpk supports only an empty value");
  expect_empty(f, "atom_ener", fp, c, "atom_ener is not supported");
  FittingConfig& fc = data.fitting;
  fc.neuron = int_list(f, "neuron", fp, c);
  fc.resnet_dt = get<bool>(f, "resnet_dt", fp, c);
  fc.activation_function = get<std::string>(f, "activation_function", fp, c);
  if (fc.activation_function != "tanh")
    throw c.error("model.fitting.activation_function", "is \"" + fc.activation_function + "\"; dpk supports only \"tanh\"");
  std::string const fprecision = get<std::string>(f, "precision", fp, c);
  if (fprecision != precision)
    throw c.error("model.fitting.precision", "is \"" + fprecision + "\" but descriptor.precision is \"" + precision +
                                                 "\" (mixed precisions are not supported)");
  fc.precision = precision;
  for (int n : fc.neuron)
    if (n < 1) throw c.error("model.fitting.neuron", "is " + show(f["neuron"]) + ", expected entries >= 1");
  // Every parameter comes from a value of the file: larger settings are refused before any
  // layer size is computed (in int) or the parameter buffer allocated.
  double const parameters_needed = parameter_count(dc, fc, ntypes);
  if (parameters_needed > values_held(tree) || parameters_needed > double(std::numeric_limits<int>::max()))
    throw c.error("model", "settings (sel " + show(d["sel"]) + ", descriptor.neuron " + show(d["neuron"]) +
                               ", axis_neuron " + std::to_string(dc.axis_neuron) + ", fitting.neuron " +
                               show(f["neuron"]) + ") need " + std::to_string(static_cast<long long>(std::min(parameters_needed, 1e18))) +
                               " parameters, more than the file's arrays hold");
  int const dim_descrpt = dc.neuron.back() * dc.axis_neuron;
  expect_value(f, "dim_descrpt", dim_descrpt, fp, c, "must be neuron[-1] x axis_neuron of the descriptor");
  auto const& fvars = at(f, "@variables", fp, c);
  for (auto const* key : {"fparam_avg", "fparam_inv_std", "aparam_avg", "aparam_inv_std", "case_embd"})
    expect_empty(fvars, key, "model.fitting.@variables", c, "fparam/aparam/case embedding are not supported");
  if (f.contains("type_map") && !f["type_map"].is_null() && !type_map.empty() && f["type_map"] != type_map)
    throw c.error("model.fitting.type_map", "is " + show(f["type_map"]) + " but model.type_map is " + show(type_map));
  auto const bias = array(fvars, "bias_atom_e", {std::size_t(ntypes), 1}, "model.fitting.@variables", c);
  data.energy_bias = bias;

  // ---- model-level output bias and std: E_i = out * std + bias
  if (model.contains("@variables")) {
    auto const& mvars = model["@variables"];
    std::string const vp = "model.@variables";
    std::vector<std::size_t> const shape = {1, std::size_t(ntypes), 1};
    if (mvars.contains("out_std") && !mvars["out_std"].is_null()) {
      auto const out_std = array(mvars, "out_std", shape, vp, c);
      for (double s : out_std)
        if (s != 1.0)
          throw c.error("model.@variables.out_std", "holds " + std::to_string(s) + "; dpk supports only out_std = 1");
    }
    if (mvars.contains("out_bias") && !mvars["out_bias"].is_null()) {
      auto const out_bias = array(mvars, "out_bias", shape, vp, c);
      for (int t = 0; t < ntypes; ++t) data.energy_bias[std::size_t(t)] += out_bias[std::size_t(t)];
    }
  }

  // ---- networks
  ParameterLayout const layout(dc, fc, ntypes);
  data.parameters.assign(layout.size, 0.0);
  data.tensors = layout.tensors;
  std::string const ep = "model.descriptor.embeddings";
  auto const& enets = networks(at(d, "embeddings", dp, c), ep, dc.type_one_side ? 1 : 2, ntypes, c);
  for (std::size_t k = 0; k < enets.size(); ++k) {
    std::string const np = ep + ".networks[" + std::to_string(k) + "]";
    auto const& net = enets[k];
    if (net.is_null()) throw c.error(np, "is null (excluded type pair); dpk needs every network");
    expect_value(net, "@class", "EmbeddingNetwork", np, c, "se_e2_a embedding networks");
    expect_version(net, 1, 2, np, c);
    expect_value(net, "in_dim", 1, np, c, "se_e2_a embedding input");
    expect_value(net, "bias", true, np, c, "layers without bias are not supported");
    if (net.contains("neuron") && int_list(net, "neuron", np, c) != dc.neuron)
      throw c.error(join(np, "neuron"), "is " + show(net["neuron"]) + " but descriptor.neuron is " + show(d["neuron"]));
    expect_value(net, "resnet_dt", dc.resnet_dt, np, c, "must equal descriptor.resnet_dt");
    expect_value(net, "activation_function", "tanh", np, c, "only tanh");
    read_network(net, np, layout.embedding_shapes, layout.embedding_offsets[k], precision, tf_rules, data.parameters, c);
  }
  std::string const fnp = "model.fitting.nets";
  auto const& fnets = networks(at(f, "nets", fp, c), fnp, 1, ntypes, c);
  for (std::size_t t = 0; t < fnets.size(); ++t) {
    std::string const np = fnp + ".networks[" + std::to_string(t) + "]";
    auto const& net = fnets[t];
    if (net.is_null()) throw c.error(np, "is null (excluded type); dpk needs every network");
    expect_value(net, "@class", "FittingNetwork", np, c, "energy fitting networks");
    expect_version(net, 1, 1, np, c);
    expect_value(net, "in_dim", dim_descrpt, np, c, "must be neuron[-1] x axis_neuron of the descriptor");
    expect_value(net, "out_dim", 1, np, c, "energy fitting");
    expect_value(net, "bias_out", true, np, c, "layers without bias are not supported");
    if (net.contains("neuron") && int_list(net, "neuron", np, c) != fc.neuron)
      throw c.error(join(np, "neuron"), "is " + show(net["neuron"]) + " but fitting.neuron is " + show(f["neuron"]));
    expect_value(net, "resnet_dt", fc.resnet_dt, np, c, "must equal fitting.resnet_dt");
    expect_value(net, "activation_function", "tanh", np, c, "only tanh");
    read_network(net, np, layout.fitting_shapes, layout.fitting_offsets[t], precision, tf_rules, data.parameters, c);
  }
  data.kind = "model";
  data.precision = precision;
  data.training = {{"imported_from", file}, {"deepmd_backend", text_of("backend")},
                   {"deepmd_version", text_of("version")}};
  return data;
}

namespace detail::model {

/// One layer in DeePMD-kit's form; `resnet` from dpk's skip rule.
inline DeepmdDict layer_dict(nn::LayerShape const& shape, nn::LayerOffsets const& offsets,
                             std::vector<double> const& p, std::string const& precision) {
  auto slice = [&](std::size_t offset, std::size_t n) {
    return std::vector<double>(p.begin() + std::ptrdiff_t(offset), p.begin() + std::ptrdiff_t(offset + n));
  };
  std::size_t const n_in = std::size_t(shape.n_in), n_out = std::size_t(shape.n_out);
  DeepmdDict layer = DeepmdDict::object();
  layer["@class"] = "Layer";
  layer["@version"] = 2;
  layer["bias"] = true;
  layer["use_timestep"] = shape.timestep;
  layer["activation_function"] = shape.tanh ? "tanh" : "none";
  layer["resnet"] = shape.skip != nn::Skip::none;
  layer["precision"] = precision;
  layer["trainable"] = true;
  DeepmdDict vars = DeepmdDict::object();
  vars["w"] = make_array(precision, {n_in, n_out}, slice(offsets.w, n_in * n_out));
  vars["b"] = make_array(precision, {n_out}, slice(offsets.b, n_out));
  vars["idt"] = shape.timestep ? make_array(precision, {n_out}, slice(offsets.idt, n_out)) : DeepmdDict(nullptr);
  layer["@variables"] = vars;
  return layer;
}

inline DeepmdDict layers_dict(std::vector<nn::LayerShape> const& shapes, std::vector<nn::LayerOffsets> const& offsets,
                              std::vector<double> const& p, std::string const& precision) {
  DeepmdDict layers = DeepmdDict::array();
  for (std::size_t l = 0; l < shapes.size(); ++l) layers.push_back(layer_dict(shapes[l], offsets[l], p, precision));
  return layers;
}

}  // namespace detail::model

/// DeePMD-kit's serialized dictionary (top level: backend, model, model_def_script, software,
/// version, time) of dpk's model `data`, as DeePMD-kit 3.2's TensorFlow backend writes it.
/// Throws dpk::Error (naming `file`) when `data` is not a plain se_e2_a + ener model with a
/// type_map and the parameter layout dpk builds for its settings.
inline DeepmdDict model_to_deepmd_dict(ModelFileData const& data, std::string const& file) {
  auto fail = [&](std::string const& what) { return Error("export of '" + file + "': " + what); };
  DescriptorConfig const& dc = data.descriptor;
  FittingConfig const& fc = data.fitting;
  if (dc.type != "se_e2_a" && dc.type != "se_a")
    throw fail("descriptor type '" + dc.type + "' cannot be exported (only se_e2_a)");
  if (dc.activation_function != "tanh" || fc.activation_function != "tanh")
    throw fail("activation functions other than tanh cannot be exported");
  if (data.precision != "float64" && data.precision != "float32")
    throw fail("precision '" + data.precision + "' is not float64 or float32");
  if (data.training.is_object() && (data.training.contains("compress") || data.training.contains("compressed")))
    throw fail("compressed models cannot be exported");
  int const ntypes = data.ntypes;
  if (ntypes < 1 || int(dc.sel.size()) != ntypes)
    throw fail("ntypes " + std::to_string(ntypes) + " does not match descriptor.sel");
  if (int(data.type_map.size()) != ntypes)
    throw fail("the model has no type_map (element names); DeePMD-kit needs one (set model.type_map in input.json)");
  ParameterLayout const layout(dc, fc, ntypes);
  if (layout.tensors != data.tensors || layout.size != data.parameters.size())
    throw fail("the parameter table differs from the se_e2_a + ener layout of its settings");
  std::size_t const nnei = std::size_t(dc.nnei());
  if (data.avg.size() != std::size_t(ntypes) * nnei * 4 || data.stdev.size() != data.avg.size() ||
      data.energy_bias.size() != std::size_t(ntypes))
    throw fail("statistics or energy bias have the wrong size");
  std::string const precision = data.precision;
  std::size_t const nt = std::size_t(ntypes);
  DeepmdDict type_map = data.type_map;

  DeepmdDict embeddings = DeepmdDict::object();
  embeddings["@class"] = "NetworkCollection";
  embeddings["@version"] = 1;
  embeddings["ndim"] = dc.type_one_side ? 1 : 2;
  embeddings["ntypes"] = ntypes;
  embeddings["network_type"] = "embedding_network";
  embeddings["networks"] = DeepmdDict::array();
  for (std::size_t k = 0; k < layout.embedding_offsets.size(); ++k) {
    DeepmdDict net = DeepmdDict::object();
    net["@class"] = "EmbeddingNetwork";
    net["@version"] = 2;
    net["in_dim"] = 1;
    net["neuron"] = dc.neuron;
    net["activation_function"] = "tanh";
    net["resnet_dt"] = dc.resnet_dt;
    net["bias"] = true;
    net["precision"] = precision;
    net["layers"] = detail::model::layers_dict(layout.embedding_shapes, layout.embedding_offsets[k], data.parameters,
                                               precision);
    embeddings["networks"].push_back(net);
  }
  DeepmdDict descriptor = DeepmdDict::object();
  descriptor["@class"] = "Descriptor";
  descriptor["type"] = "se_e2_a";
  descriptor["@version"] = 2;
  descriptor["rcut"] = dc.rcut;
  descriptor["rcut_smth"] = dc.rcut_smth;
  descriptor["sel"] = dc.sel;
  descriptor["neuron"] = dc.neuron;
  descriptor["axis_neuron"] = dc.axis_neuron;
  descriptor["resnet_dt"] = dc.resnet_dt;
  descriptor["trainable"] = true;
  descriptor["type_one_side"] = dc.type_one_side;
  descriptor["exclude_types"] = DeepmdDict::array();
  descriptor["env_protection"] = 0.0;
  descriptor["set_davg_zero"] = false;
  descriptor["activation_function"] = "tanh";
  descriptor["precision"] = precision;
  descriptor["env_mat"] = {{"rcut", dc.rcut}, {"rcut_smth", dc.rcut_smth}, {"protection", 0.0}, {"use_exp_switch", false}};
  descriptor["embeddings"] = embeddings;
  descriptor["@variables"] = {{"davg", make_array("float64", {nt, nnei, 4}, data.avg)},
                              {"dstd", make_array("float64", {nt, nnei, 4}, data.stdev)}};
  descriptor["type_map"] = type_map;
  descriptor["spin"] = nullptr;

  int const dim_descrpt = dc.neuron.back() * dc.axis_neuron;
  DeepmdDict nets = DeepmdDict::object();
  nets["@class"] = "NetworkCollection";
  nets["@version"] = 1;
  nets["ndim"] = 1;
  nets["ntypes"] = ntypes;
  nets["network_type"] = "fitting_network";
  nets["networks"] = DeepmdDict::array();
  for (std::size_t t = 0; t < nt; ++t) {
    DeepmdDict net = DeepmdDict::object();
    net["@class"] = "FittingNetwork";
    net["@version"] = 1;
    net["in_dim"] = dim_descrpt;
    net["out_dim"] = 1;
    net["neuron"] = fc.neuron;
    net["activation_function"] = "tanh";
    net["resnet_dt"] = fc.resnet_dt;
    net["precision"] = precision;
    net["bias_out"] = true;
    net["layers"] =
        detail::model::layers_dict(layout.fitting_shapes, layout.fitting_offsets[t], data.parameters, precision);
    nets["networks"].push_back(net);
  }
  DeepmdDict fitting = DeepmdDict::object();
  fitting["@class"] = "Fitting";
  fitting["type"] = "ener";
  fitting["@version"] = 4;
  fitting["var_name"] = "energy";
  fitting["ntypes"] = ntypes;
  fitting["dim_descrpt"] = dim_descrpt;
  fitting["mixed_types"] = false;
  fitting["dim_out"] = 1;
  fitting["neuron"] = fc.neuron;
  fitting["resnet_dt"] = fc.resnet_dt;
  fitting["numb_fparam"] = 0;
  fitting["numb_aparam"] = 0;
  fitting["dim_case_embd"] = 0;
  fitting["default_fparam"] = nullptr;
  fitting["rcond"] = nullptr;
  fitting["tot_ener_zero"] = false;
  fitting["trainable"] = std::vector<bool>(fc.neuron.size() + 1, true);
  fitting["atom_ener"] = DeepmdDict::array();
  fitting["activation_function"] = "tanh";
  fitting["precision"] = precision;
  fitting["layer_name"] = nullptr;
  fitting["use_aparam_as_mask"] = false;
  fitting["spin"] = nullptr;
  fitting["exclude_types"] = DeepmdDict::array();
  fitting["nets"] = nets;
  fitting["@variables"] = {{"bias_atom_e", make_array("float64", {nt, 1}, data.energy_bias)},
                           {"fparam_avg", nullptr},
                           {"fparam_inv_std", nullptr},
                           {"aparam_avg", nullptr},
                           {"aparam_inv_std", nullptr},
                           {"case_embd", nullptr}};
  fitting["type_map"] = type_map;

  DeepmdDict model = DeepmdDict::object();
  model["@class"] = "Model";
  model["type"] = "standard";
  model["@version"] = 2;
  model["type_map"] = type_map;
  model["descriptor"] = descriptor;
  model["fitting"] = fitting;
  model["atom_exclude_types"] = DeepmdDict::array();
  model["pair_exclude_types"] = DeepmdDict::array();
  model["rcond"] = nullptr;
  model["preset_out_bias"] = nullptr;
  model["@variables"] = {{"out_bias", make_array("float64", {1, nt, 1}, std::vector<double>(nt, 0.0))},
                         {"out_std", make_array("float64", {1, nt, 1}, std::vector<double>(nt, 1.0))}};

  // The input.json model section DeePMD-kit's TensorFlow backend rebuilds the graph from.
  DeepmdDict script = DeepmdDict::object();
  script["type_map"] = type_map;
  script["descriptor"] = {{"type", "se_e2_a"},         {"sel", dc.sel},
                          {"rcut", dc.rcut},           {"rcut_smth", dc.rcut_smth},
                          {"neuron", dc.neuron},       {"axis_neuron", dc.axis_neuron},
                          {"type_one_side", dc.type_one_side}, {"resnet_dt", dc.resnet_dt},
                          {"activation_function", "tanh"}, {"precision", precision}};
  script["fitting_net"] = {{"type", "ener"}, {"neuron", fc.neuron}, {"resnet_dt", fc.resnet_dt},
                           {"activation_function", "tanh"}, {"precision", precision}};
  if (dc.seed) script["descriptor"]["seed"] = *dc.seed;
  if (fc.seed) script["fitting_net"]["seed"] = *fc.seed;

  DeepmdDict top = DeepmdDict::object();
  top["software"] = "dpk";
  top["version"] = "0.1.0";
  top["time"] = detail::model::utc_now();
  top["backend"] = "dpk";
  top["model"] = model;
  top["model_def_script"] = script;
  return top;
}

}  // namespace dpk::interop
