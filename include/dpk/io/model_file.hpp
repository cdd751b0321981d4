#pragma once
/// \file model_file.hpp
/// \brief dpk's model and checkpoint file (format version 1; docs/model-format.md).
///
/// Layout (all integers little-endian):
///   offset 0   8 bytes  magic "DPKMODEL"
///   offset 8   uint32   format version (1)
///   offset 12  uint64   header length H in bytes
///   offset 20  H bytes  JSON header (UTF-8)
///   zero padding to the next multiple of 8: the data section starts there
///   data       raw little-endian IEEE-754 float64 blocks at the byte offsets (relative to the
///              data section) listed in header "blocks"
///   trailer    8 bytes  "DPKEND01" right after the data section (header "data_bytes")
/// The header also holds the FNV-1a 64-bit checksum of the data section (standard offset basis;
/// files of dpk before the fix were hashed with a mistyped basis and are still accepted); readers verify
/// magic, version, sizes, every block and tensor range, the checksum and the trailer, and
/// name the file in every error.
///
/// Files are written to `<path>.tmp.<pid>`, fsync'd, then renamed over `path` (and the folder
/// fsync'd), so `path` always holds either the previous complete file or the new one.

#include <dpk/core/error.hpp>
#include <dpk/io/atomic_file.hpp>
#include <dpk/io/json_depth.hpp>
#include <dpk/model/config.hpp>
#include <dpk/model/tensor_info.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace dpk {

/// Current model/checkpoint format version written by dpk.
inline constexpr std::uint32_t model_file_version = 1;

/// Former name of the tensor-table entry (one type for the model's layout and the file's table).
using ModelTensor [[deprecated("use dpk::TensorInfo (dpk/model/tensor_info.hpp)")]] = TensorInfo;

/// The tables of a compressed model (docs/compression.md): header "compression" holds the
/// options and each net's range, block "embedding_table" the coefficients of every net one
/// after the other, (intervals, 6, M1) each (descriptor/tabulated_embedding.hpp).
struct ModelCompression {
  double step = 0, extrapolate = 0;  ///< first-table stride (second: 10 step); extrapolate factor
  double min_neighbor_distance = 0;  ///< A, the smallest neighbour distance the tables were built for
  long check_frequency = -1;         ///< count lookups beyond the tables every N evaluations (-1: never)
  int m1 = 0;                        ///< channels per net
  struct Net {
    double lower = 0, upper = 0, max = 0;
    int first_intervals = 0, second_intervals = 0;
  };
  std::vector<Net> nets;
  std::vector<double> table;  ///< coefficients of every net, one after the other
};

/// Everything a model or checkpoint file holds. `kind` is "model" (parameters and statistics
/// only) or "checkpoint" (plus optimiser state, step and sampler states).
struct ModelFileData {
  std::string kind = "model";
  std::string precision = "float64";    ///< precision the model was trained in
  int ntypes = 0;
  std::vector<std::string> type_map;    ///< element names (may be empty)
  DescriptorConfig descriptor;
  FittingConfig fitting;
  std::vector<TensorInfo> tensors;      ///< layout of `parameters`
  std::vector<double> parameters;       ///< flat weights
  std::vector<double> avg, stdev;        ///< (ntypes, nnei, 4) environment statistics
  std::vector<double> energy_bias;      ///< (ntypes) eV
  std::optional<ModelCompression> compression;  ///< tables of a compressed model (the weights stay)
  // ---- checkpoint only
  long step = 0;                        ///< training steps completed
  long adam_step = 0;                   ///< Adam updates applied
  std::vector<double> adam_m, adam_v;   ///< Adam moments (size of parameters)
  std::vector<std::string> sampler_states;  ///< one opaque RNG state string per rank
  nlohmann::json training = nlohmann::json::object();  ///< free-form run information
};

/// Options of write_model_file. `fail_after_bytes` (tests only) stops writing the temporary
/// file after that many bytes and throws, as a crash in the middle of a write would.
struct ModelFileWriteOptions {
  long fail_after_bytes = -1;
};

namespace detail::model_file {

inline constexpr char model_magic[8] = {'D', 'P', 'K', 'M', 'O', 'D', 'E', 'L'};
inline constexpr char model_trailer[8] = {'D', 'P', 'K', 'E', 'N', 'D', '0', '1'};

/// FNV-1a 64-bit offset basis (the standard one, 0xcbf29ce484222325).
inline constexpr std::uint64_t fnv1a64_offset_basis = 14695981039346656037ull;
/// The offset basis of dpk's files written before the fix: the standard constant with a digit
/// dropped. Readers still accept a checksum computed with it (docs/model-format.md).
inline constexpr std::uint64_t fnv1a64_legacy_offset_basis = 1469598103934665603ull;

/// FNV-1a 64-bit hash of `size` bytes (starting from `basis`).
inline std::uint64_t fnv1a64(unsigned char const* data, std::size_t size,
                             std::uint64_t basis = fnv1a64_offset_basis) {
  std::uint64_t hash = basis;
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

inline bool host_is_little_endian() {
  std::uint32_t const probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

inline void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(char((value >> (8 * i)) & 0xffu));
}
inline void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(char((value >> (8 * i)) & 0xffu));
}
inline std::uint64_t get_u64(unsigned char const* p, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t(p[i]) << (8 * i);
  return value;
}

inline nlohmann::json descriptor_json(DescriptorConfig const& d) {
  nlohmann::json j = {{"type", d.type},           {"sel", d.sel},
                      {"rcut", d.rcut},           {"rcut_smth", d.rcut_smth},
                      {"neuron", d.neuron},       {"axis_neuron", d.axis_neuron},
                      {"type_one_side", d.type_one_side}, {"resnet_dt", d.resnet_dt},
                      {"activation_function", d.activation_function}, {"precision", d.precision}};
  if (d.seed) j["seed"] = *d.seed;
  return j;
}
inline nlohmann::json fitting_json(FittingConfig const& f) {
  nlohmann::json j = {{"type", "ener"},
                      {"neuron", f.neuron},
                      {"resnet_dt", f.resnet_dt},
                      {"activation_function", f.activation_function},
                      {"precision", f.precision}};
  if (f.seed) j["seed"] = *f.seed;
  return j;
}

/// A JSON value for an error message, cut to 60 characters.
inline std::string shown(nlohmann::json const& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

/// `value` as T when it has T's JSON type and, for integers, fits T exactly (no silent
/// truncation of 1e30 or 2.5 into an int); false otherwise.
template <class T>
bool json_as(nlohmann::json const& value, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return false;
    out = value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      auto const u = value.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
      out = static_cast<T>(u);
    } else if (value.is_number_integer()) {
      auto const i = value.get<std::int64_t>();
      if (i < 0 && std::is_unsigned_v<T>) return false;
      if constexpr (std::is_signed_v<T>)
        if (i < std::int64_t(std::numeric_limits<T>::min()) || i > std::int64_t(std::numeric_limits<T>::max()))
          return false;
      out = static_cast<T>(i);
    } else {
      return false;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) return false;
    out = value.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return false;
    out = value.get<std::string>();
  } else {  // std::vector<E>
    if (!value.is_array()) return false;
    out.clear();
    for (auto const& element : value) {
      typename T::value_type e{};
      if (!json_as(element, e)) return false;
      out.push_back(std::move(e));
    }
  }
  return true;
}

/// What T is called in messages.
template <class T>
std::string json_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_same_v<T, int>) return "an integer that fits in 32 bits";
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "a list, each entry " + json_type_name<typename T::value_type>();
}

/// Reads key `key` of `object` as T; throws naming the file, the key path and what was expected.
template <class T>
T header_value(nlohmann::json const& object, char const* key, std::string const& where, std::string const& file) {
  if (!object.is_object() || !object.contains(key))
    throw Error("model file '" + file + "': header is missing '" + where + key + "'");
  T value{};
  if (!json_as(object.at(key), value))
    throw Error("model file '" + file + "': header key '" + where + key + "' has the wrong type (expected " +
                json_type_name<T>() + ", got " + shown(object.at(key)) + ")");
  return value;
}

/// Throws unless header key `key` (value `value`) is one of `allowed`: a file of a model dpk does
/// not implement must not load and run as a tanh se_e2_a energy model.
inline void require_implemented(std::string const& value, std::string const& key,
                                std::vector<std::string> const& allowed, std::string const& file) {
  for (auto const& a : allowed)
    if (value == a) return;
  std::string list;
  for (auto const& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
  throw Error("model file '" + file + "': header key '" + key + "' is \"" + value + "\", dpk implements only " +
              list);
}

inline DescriptorConfig descriptor_from_json(nlohmann::json const& j, std::string const& file) {
  DescriptorConfig d;
  std::string const w = "descriptor.";
  d.type = header_value<std::string>(j, "type", w, file);
  require_implemented(d.type, w + "type", {"se_e2_a", "se_a"}, file);
  d.type = "se_e2_a";
  d.sel = header_value<std::vector<int>>(j, "sel", w, file);
  d.rcut = header_value<double>(j, "rcut", w, file);
  d.rcut_smth = header_value<double>(j, "rcut_smth", w, file);
  d.neuron = header_value<std::vector<int>>(j, "neuron", w, file);
  d.axis_neuron = header_value<int>(j, "axis_neuron", w, file);
  d.type_one_side = header_value<bool>(j, "type_one_side", w, file);
  d.resnet_dt = header_value<bool>(j, "resnet_dt", w, file);
  d.activation_function = header_value<std::string>(j, "activation_function", w, file);
  require_implemented(d.activation_function, w + "activation_function", {"tanh"}, file);
  d.precision = header_value<std::string>(j, "precision", w, file);
  if (j.contains("seed")) d.seed = header_value<std::uint64_t>(j, "seed", w, file);
  // The hyperparameters size the model: the same limits as input.json (io/input.hpp).
  auto bad = [&](std::string const& key, std::string const& what) {
    return Error("model file '" + file + "': header key '" + w + key + "' " + what);
  };
  long long nnei = 0;
  for (int s : d.sel) {
    if (s < 0) throw bad("sel", "has a negative entry (" + std::to_string(s) + ")");
    nnei += s;
  }
  if (nnei > std::numeric_limits<int>::max()) throw bad("sel", "sums to more than 2^31 - 1 neighbours");
  if (!(d.rcut > 0) || !std::isfinite(d.rcut)) throw bad("rcut", "must be a positive number");
  if (!(d.rcut_smth >= 0) || !(d.rcut_smth < d.rcut)) throw bad("rcut_smth", "must be >= 0 and smaller than rcut");
  if (d.neuron.empty()) throw bad("neuron", "must not be empty");
  for (int n : d.neuron)
    if (n < 1) throw bad("neuron", "has an entry < 1 (" + std::to_string(n) + ")");
  if (d.axis_neuron < 1 || d.axis_neuron > d.neuron.back())
    throw bad("axis_neuron", "must be between 1 and neuron[-1] = " + std::to_string(d.neuron.back()) + ", got " +
                                 std::to_string(d.axis_neuron));
  return d;
}
inline FittingConfig fitting_from_json(nlohmann::json const& j, std::string const& file) {
  FittingConfig f;
  std::string const w = "fitting_net.";
  require_implemented(header_value<std::string>(j, "type", w, file), w + "type", {"ener"}, file);
  f.neuron = header_value<std::vector<int>>(j, "neuron", w, file);
  f.resnet_dt = header_value<bool>(j, "resnet_dt", w, file);
  f.activation_function = header_value<std::string>(j, "activation_function", w, file);
  require_implemented(f.activation_function, w + "activation_function", {"tanh"}, file);
  f.precision = header_value<std::string>(j, "precision", w, file);
  if (j.contains("seed")) f.seed = header_value<std::uint64_t>(j, "seed", w, file);
  for (int n : f.neuron)
    if (n < 1)
      throw Error("model file '" + file + "': header key '" + w + "neuron' has an entry < 1 (" + std::to_string(n) + ")");
  return f;
}

}  // namespace detail::model_file

/// Serialises `data` into the bytes of a format-version-1 file (see the file comment).
inline std::string model_file_bytes(ModelFileData const& data) {
  require(detail::model_file::host_is_little_endian(), "model file: only little-endian hosts are supported");
  struct Block {
    char const* name;
    std::vector<double> const* values;
  };
  std::vector<Block> blocks = {{"parameters", &data.parameters},
                               {"avg", &data.avg},
                               {"std", &data.stdev},
                               {"energy_bias", &data.energy_bias}};
  bool const checkpoint = data.kind == "checkpoint";
  if (checkpoint) {
    blocks.push_back({"adam_m", &data.adam_m});
    blocks.push_back({"adam_v", &data.adam_v});
  }
  if (data.compression) blocks.push_back({"embedding_table", &data.compression->table});
  std::string body;
  nlohmann::json block_table = nlohmann::json::array();
  for (auto const& block : blocks) {
    block_table.push_back({{"name", block.name}, {"offset", body.size()}, {"count", block.values->size()},
                           {"dtype", "<f8"}});
    std::size_t const start = body.size();
    body.resize(start + block.values->size() * sizeof(double));
    if (!block.values->empty()) std::memcpy(&body[start], block.values->data(), block.values->size() * sizeof(double));
  }
  nlohmann::json tensors = nlohmann::json::array();
  for (auto const& t : data.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
  nlohmann::json header = {
      {"format", "dpk-model"},
      {"version", model_file_version},
      {"kind", data.kind},
      {"precision", data.precision},
      {"ntypes", data.ntypes},
      {"type_map", data.type_map},
      {"descriptor", detail::model_file::descriptor_json(data.descriptor)},
      {"fitting_net", detail::model_file::fitting_json(data.fitting)},
      {"tensors", tensors},
      {"blocks", block_table},
      {"data_bytes", body.size()},
      {"data_checksum_fnv1a64",
       std::to_string(detail::model_file::fnv1a64(reinterpret_cast<unsigned char const*>(body.data()), body.size()))}};
  if (checkpoint) {
    header["step"] = data.step;
    header["adam_step"] = data.adam_step;
    header["sampler_states"] = data.sampler_states;
  }
  if (data.compression) {
    auto const& c = *data.compression;
    nlohmann::json nets = nlohmann::json::array();
    for (auto const& n : c.nets)
      nets.push_back({{"lower", n.lower}, {"upper", n.upper}, {"max", n.max}, {"first_intervals", n.first_intervals},
                      {"second_intervals", n.second_intervals}});
    header["compression"] = {{"step", c.step},
                             {"extrapolate", c.extrapolate},
                             {"min_neighbor_distance", c.min_neighbor_distance},
                             {"check_frequency", c.check_frequency},
                             {"m1", c.m1},
                             {"nets", nets}};
  }
  header["training"] = data.training;
  std::string const header_text = header.dump(1);
  std::string out(detail::model_file::model_magic, 8);
  detail::model_file::put_u32(out, model_file_version);
  detail::model_file::put_u64(out, header_text.size());
  out += header_text;
  while (out.size() % 8 != 0) out.push_back('\0');
  out += body;
  out.append(detail::model_file::model_trailer, 8);
  return out;
}

/// Writes `data` to `path` atomically (write_file_atomically: temp file, fsync, rename, fsync
/// of the folder). On failure `path` is untouched and the temp file removed; the error names
/// `path`, the failed step and the OS reason.
inline void write_model_file(std::string const& path, ModelFileData const& data, ModelFileWriteOptions options = {}) {
  write_file_atomically(path, model_file_bytes(data), "model file", options.fail_after_bytes);
}

/// Parses the bytes of a model file; `file` names it in errors.
inline ModelFileData parse_model_file(std::string const& bytes, std::string const& file) {
  auto fail = [&](std::string const& what) { return Error("model file '" + file + "': " + what); };
  auto const* u = reinterpret_cast<unsigned char const*>(bytes.data());
  if (bytes.size() < 20 || std::memcmp(bytes.data(), detail::model_file::model_magic, 8) != 0)
    throw fail("not a dpk model file (missing the 'DPKMODEL' magic bytes)");
  auto const version = std::uint32_t(detail::model_file::get_u64(u + 8, 4));
  if (version != model_file_version)
    throw fail("format version " + std::to_string(version) + " is not supported (this dpk reads version " +
               std::to_string(model_file_version) + ")");
  std::uint64_t const header_length = detail::model_file::get_u64(u + 12, 8);
  if (header_length > bytes.size() - 20)
    throw fail("truncated: header of " + std::to_string(header_length) + " bytes, file has " +
               std::to_string(bytes.size()) + " bytes");
  if (detail::json_nesting_depth(bytes.data() + 20, bytes.data() + 20 + header_length) > detail::max_json_depth)
    throw fail("header is not valid JSON (nested deeper than " + std::to_string(detail::max_json_depth) +
               " levels of lists/objects)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 20, bytes.begin() + 20 + std::ptrdiff_t(header_length));
  } catch (nlohmann::json::exception const& e) {
    throw fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object() || !header.contains("format") || header["format"] != "dpk-model")
    throw fail("header 'format' is not \"dpk-model\"");
  std::size_t data_start = 20 + std::size_t(header_length);
  while (data_start % 8 != 0) ++data_start;
  auto const data_bytes = detail::model_file::header_value<std::uint64_t>(header, "data_bytes", "", file);
  if (data_bytes > bytes.size())  // before adding it to offsets, which could wrap around
    throw fail("truncated: header 'data_bytes' is " + std::to_string(data_bytes) + ", file has " +
               std::to_string(bytes.size()) + " bytes");
  std::size_t const expected = data_start + data_bytes + 8;
  if (bytes.size() < expected)
    throw fail("truncated: expected " + std::to_string(expected) + " bytes, file has " + std::to_string(bytes.size()));
  if (bytes.size() > expected)
    throw fail("has " + std::to_string(bytes.size() - expected) + " unexpected bytes after the data section");
  if (std::memcmp(bytes.data() + data_start + data_bytes, detail::model_file::model_trailer, 8) != 0)
    throw fail("end marker 'DPKEND01' missing after the data section (file damaged or truncated)");
  // Standard FNV-1a-64; files written before the fix used the legacy offset basis.
  std::string const stored = detail::model_file::header_value<std::string>(header, "data_checksum_fnv1a64", "", file);
  if (stored != std::to_string(detail::model_file::fnv1a64(u + data_start, std::size_t(data_bytes))) &&
      stored != std::to_string(detail::model_file::fnv1a64(u + data_start, std::size_t(data_bytes),
                                                           detail::model_file::fnv1a64_legacy_offset_basis)))
    throw fail("data checksum mismatch (the weights are damaged)");

  ModelFileData data;
  data.kind = detail::model_file::header_value<std::string>(header, "kind", "", file);
  if (data.kind != "model" && data.kind != "checkpoint")
    throw fail("header 'kind' must be \"model\" or \"checkpoint\", got \"" + data.kind + "\"");
  data.precision = detail::model_file::header_value<std::string>(header, "precision", "", file);
  if (data.precision != "float64" && data.precision != "float32")
    throw fail("header 'precision' must be \"float64\" or \"float32\", got \"" + data.precision + "\"");
  data.ntypes = detail::model_file::header_value<int>(header, "ntypes", "", file);
  data.type_map = detail::model_file::header_value<std::vector<std::string>>(header, "type_map", "", file);
  if (!header.contains("descriptor") || !header.contains("fitting_net"))
    throw fail("header is missing 'descriptor' or 'fitting_net'");
  data.descriptor = detail::model_file::descriptor_from_json(header["descriptor"], file);
  data.fitting = detail::model_file::fitting_from_json(header["fitting_net"], file);
  if (data.ntypes < 1 || int(data.descriptor.sel.size()) != data.ntypes)
    throw fail("ntypes " + std::to_string(data.ntypes) + " does not match descriptor.sel (" +
               std::to_string(data.descriptor.sel.size()) + " types)");
  if (!data.type_map.empty() && int(data.type_map.size()) != data.ntypes)
    throw fail("type_map has " + std::to_string(data.type_map.size()) + " names for " + std::to_string(data.ntypes) +
               " types");

  // Blocks.
  auto const& table = header.contains("blocks") ? header["blocks"] : nlohmann::json();
  if (!table.is_array()) throw fail("header 'blocks' must be an array");
  auto read_block = [&](char const* name, std::vector<double>& out, bool required) {
    for (auto const& entry : table) {
      if (detail::model_file::header_value<std::string>(entry, "name", "blocks[].", file) != name) continue;
      auto const offset = detail::model_file::header_value<std::uint64_t>(entry, "offset", "blocks[].", file);
      auto const count = detail::model_file::header_value<std::uint64_t>(entry, "count", "blocks[].", file);
      if (detail::model_file::header_value<std::string>(entry, "dtype", "blocks[].", file) != "<f8")
        throw fail(std::string("block '") + name + "' has an unsupported dtype (expected \"<f8\")");
      if (offset % 8 != 0 || offset > data_bytes || count > (data_bytes - offset) / 8)
        throw fail(std::string("block '") + name + "' (offset " + std::to_string(offset) + ", " +
                   std::to_string(count) + " values) lies outside the data section of " +
                   std::to_string(data_bytes) + " bytes");
      out.resize(std::size_t(count));
      if (count) std::memcpy(out.data(), bytes.data() + data_start + offset, std::size_t(count) * sizeof(double));
      return;
    }
    if (required) throw fail(std::string("block '") + name + "' is missing");
  };
  read_block("parameters", data.parameters, true);
  read_block("avg", data.avg, true);
  read_block("std", data.stdev, true);
  read_block("energy_bias", data.energy_bias, true);
  std::size_t const stat_size = std::size_t(data.ntypes) * std::size_t(data.descriptor.nnei()) * 4;
  if (data.avg.size() != stat_size || data.stdev.size() != stat_size)
    throw fail("statistics blocks 'avg'/'std' have " + std::to_string(data.avg.size()) + "/" +
               std::to_string(data.stdev.size()) + " values, expected ntypes x nnei x 4 = " + std::to_string(stat_size));
  if (data.energy_bias.size() != std::size_t(data.ntypes))
    throw fail("block 'energy_bias' has " + std::to_string(data.energy_bias.size()) + " values, expected ntypes = " +
               std::to_string(data.ntypes));

  // Tensor table: every tensor inside the parameters, together covering them exactly once.
  auto const& tensors = header.contains("tensors") ? header["tensors"] : nlohmann::json();
  if (!tensors.is_array()) throw fail("header 'tensors' must be an array");
  std::size_t const nparameters = data.parameters.size();
  for (auto const& entry : tensors) {
    TensorInfo t;
    t.name = detail::model_file::header_value<std::string>(entry, "name", "tensors[].", file);
    t.shape = detail::model_file::header_value<std::vector<int>>(entry, "shape", "tensors[].", file);
    t.offset = detail::model_file::header_value<std::size_t>(entry, "offset", "tensors[].", file);
    // Size with an overflow check: a shape whose product wraps around must not look small.
    std::size_t size = 1;
    for (int s : t.shape) {
      if (s < 0) throw fail("tensor '" + t.name + "' has a negative dimension");
      size = size > nparameters || (s != 0 && size > nparameters / std::size_t(s)) ? nparameters + 1
                                                                                  : size * std::size_t(s);
    }
    if (t.offset > nparameters || size > nparameters - t.offset)
      throw fail("tensor '" + t.name + "' (offset " + std::to_string(t.offset) + ", shape of " +
                 (size > nparameters ? std::string("more") : std::to_string(size)) + " values) lies outside the " +
                 std::to_string(nparameters) + " parameters");
    data.tensors.push_back(t);
  }
  // The tensors, sorted by offset, must tile [0, nparameters) without gaps or overlaps.
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // (offset, size)
  for (auto const& t : data.tensors)
    if (t.size() != 0) ranges.emplace_back(t.offset, t.size());
  std::sort(ranges.begin(), ranges.end());
  std::size_t covered = 0;
  for (auto const& [offset, size] : ranges) {
    if (offset != covered)
      throw fail("tensor table " + std::string(offset < covered ? "overlaps" : "leaves a gap") + " at parameter " +
                 std::to_string(std::min(offset, covered)) + " (the tensors must cover the " +
                 std::to_string(nparameters) + " parameters exactly once)");
    covered += size;
  }
  if (covered != nparameters)
    throw fail("tensor table covers " + std::to_string(covered) + " values but the parameter block has " +
               std::to_string(nparameters));

  if (data.kind == "checkpoint") {
    data.step = detail::model_file::header_value<long>(header, "step", "", file);
    data.adam_step = detail::model_file::header_value<long>(header, "adam_step", "", file);
    data.sampler_states = detail::model_file::header_value<std::vector<std::string>>(header, "sampler_states", "", file);
    read_block("adam_m", data.adam_m, true);
    read_block("adam_v", data.adam_v, true);
    if (data.adam_m.size() != data.parameters.size() || data.adam_v.size() != data.parameters.size())
      throw fail("Adam moment blocks do not match the parameter count " + std::to_string(data.parameters.size()));
    if (data.step < 0 || data.adam_step < 0) throw fail("negative step count in a checkpoint");
  }
  if (header.contains("compression")) {
    // Every value the table lookup relies on is checked here: positive strides, ordered finite
    // ranges on the grid they claim, interval counts that match the coefficient block.
    auto const& j = header["compression"];
    std::string const w = "compression.";
    ModelCompression c;
    c.step = detail::model_file::header_value<double>(j, "step", w, file);
    c.extrapolate = detail::model_file::header_value<double>(j, "extrapolate", w, file);
    c.min_neighbor_distance = detail::model_file::header_value<double>(j, "min_neighbor_distance", w, file);
    c.check_frequency = detail::model_file::header_value<long>(j, "check_frequency", w, file);
    c.m1 = detail::model_file::header_value<int>(j, "m1", w, file);
    if (!(c.step > 0) || !std::isfinite(c.step)) throw fail("header 'compression.step' must be a positive number");
    if (!(c.extrapolate >= 1) || !std::isfinite(c.extrapolate))
      throw fail("header 'compression.extrapolate' must be a number >= 1");
    if (c.m1 != data.descriptor.neuron.back())
      throw fail("header 'compression.m1' is " + std::to_string(c.m1) + ", descriptor.neuron[-1] is " +
                 std::to_string(data.descriptor.neuron.back()));
    if (!j.contains("nets") || !j["nets"].is_array()) throw fail("header 'compression.nets' must be an array");
    std::size_t const nnets = data.descriptor.type_one_side ? std::size_t(data.ntypes)
                                                            : std::size_t(data.ntypes) * std::size_t(data.ntypes);
    if (j["nets"].size() != nnets)
      throw fail("header 'compression.nets' has " + std::to_string(j["nets"].size()) + " entries, the model has " +
                 std::to_string(nnets) + " embedding nets");
    std::uint64_t coefficients = 0;
    for (auto const& entry : j["nets"]) {
      std::string const wn = "compression.nets[].";
      ModelCompression::Net n;
      n.lower = detail::model_file::header_value<double>(entry, "lower", wn, file);
      n.upper = detail::model_file::header_value<double>(entry, "upper", wn, file);
      n.max = detail::model_file::header_value<double>(entry, "max", wn, file);
      n.first_intervals = detail::model_file::header_value<int>(entry, "first_intervals", wn, file);
      n.second_intervals = detail::model_file::header_value<int>(entry, "second_intervals", wn, file);
      bool const finite = std::isfinite(n.lower) && std::isfinite(n.upper) && std::isfinite(n.max);
      auto near = [&](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); };
      if (!finite || n.first_intervals < 1 || n.second_intervals < 0 || !(n.lower < n.upper) || !(n.upper <= n.max) ||
          !near(n.upper, n.lower + n.first_intervals * c.step) ||
          !near(n.max, n.upper + n.second_intervals * 10 * c.step))
        throw fail("header 'compression.nets' has an entry whose range is not [lower, upper) at step and "
                   "[upper, max) at 10 step");
      coefficients += (std::uint64_t(n.first_intervals) + std::uint64_t(n.second_intervals)) * 6u * std::uint64_t(c.m1);
      c.nets.push_back(n);
    }
    read_block("embedding_table", c.table, true);
    if (c.table.size() != coefficients)
      throw fail("block 'embedding_table' has " + std::to_string(c.table.size()) + " values, the ranges need " +
                 std::to_string(coefficients));
    data.compression = std::move(c);
  }
  if (header.contains("training")) data.training = header["training"];
  return data;
}

/// Reads and validates the model or checkpoint file `path`. Throws dpk::Error naming `path`.
inline ModelFileData read_model_file(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("model file '" + path + "': cannot open (" + std::strerror(errno) + ")");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error("model file '" + path + "': read failed");
  return parse_model_file(buffer.str(), path);
}

}  // namespace dpk
