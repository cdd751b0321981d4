#pragma once
/// \file input.hpp
/// \brief DeePMD-kit's input.json (se_e2_a descriptor + ener fitting/loss) as plain structs.

#include <dpk/core/error.hpp>
#include <dpk/io/json_depth.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/config.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace dpk {

/// learning_rate (type "exp", DeePMD-kit 3.2's form: optional warmup, then stepped or smooth
/// exponential decay; see ExponentialLearningRate).
struct LearningRateConfig {
  std::string type = "exp";
  double start_lr = 1e-3;
  double stop_lr = 1e-8;                     ///< also set by stop_lr_ratio (= start_lr x ratio)
  int decay_steps = 5000;
  std::optional<double> decay_rate;          ///< given: used as is (no decay_steps adjustment)
  bool smooth = false;                       ///< decay every step (exponent step / decay_steps)
  long warmup_steps = 0;                     ///< linear warmup from warmup_start_factor x start_lr
  std::optional<double> warmup_ratio;        ///< warmup_steps = int(ratio x numb_steps)
  double warmup_start_factor = 0.0;
  std::string scale_by_worker = "linear";    ///< "linear" | "sqrt" | "none" (training.*)
};

/// optimizer (DeePMD-kit 3.2's top-level section; type "Adam").
struct OptimizerConfig {
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
};

/// How training takes its start-up statistics from the data: model.data_stat_nbatch,
/// model.descriptor.set_davg_zero and model.fitting_net.rcond.
struct DataStatisticsConfig {
  int nbatch = 10;             ///< batches of every system for the environment statistics
  bool set_davg_zero = false;  ///< keep the descriptor's mean at zero (std from the data)
  std::optional<double> rcond; ///< energy-bias least squares: relative singular-value cutoff
};

/// loss (type "ener"): prefactor schedules p = limit + (start - limit) lr/start_lr.
struct LossConfig {
  std::string type = "ener";
  double start_pref_e = 0.02, limit_pref_e = 1.0;
  double start_pref_f = 1000.0, limit_pref_f = 1.0;
  double start_pref_v = 0.0, limit_pref_v = 0.0;
};

/// A batch size: a fixed number of frames, or "auto"/"auto:N" = ceil(N / natoms) frames.
/// A list (DeePMD-kit's per-system form) sets `per_system`: frames for system i.
struct BatchSize {
  bool automatic = true;
  int value = 32;  ///< frames when !automatic, N when automatic
  std::vector<int> per_system;  ///< when non-empty: frames per batch of system i (a JSON list)
  /// Frames per batch for a system of `natoms` atoms (ignores `per_system`).
  int frames_for(int natoms) const { return automatic ? (value + natoms - 1) / natoms : value; }
  /// Frames per batch for system `system` of `natoms` atoms (uses `per_system` when given).
  int frames_for(std::size_t system, int natoms) const {
    return system < per_system.size() ? per_system[system] : frames_for(natoms);
  }
};

/// training.training_data / training.validation_data.
struct DataConfig {
  std::vector<std::string> systems;  ///< resolved against the input file's folder
  BatchSize batch_size;
  int numb_btch = 1;                 ///< validation batches per evaluation
  /// How systems are drawn: "prob_sys_size" (proportional to their number of batches,
  /// DeePMD-kit's default) or "prob_uniform"; ignored when sys_probs is given.
  std::string auto_prob = "prob_sys_size";
  /// One block of "prob_sys_size;begin:end:weight;...": systems [begin, end) share weight.
  struct ProbBlock {
    int begin = 0, end = 0;
    double weight = 0;
  };
  std::vector<ProbBlock> prob_blocks;  ///< blocks of the "prob_sys_size;..." form (else empty)
  std::vector<double> sys_probs;     ///< explicit per-system weights (DeePMD-kit's sys_probs)
};

/// training.
struct TrainingConfig {
  DataConfig training_data;
  std::optional<DataConfig> validation_data;
  long numb_steps = 1000000;            ///< required, unless num_epoch sets it (the trainer does)
  std::optional<double> num_epoch;      ///< DeePMD-kit 3.2: steps = ceil(num_epoch x total batches)
  std::optional<std::uint64_t> seed;
  std::string disp_file = "lcurve.out";
  long disp_freq = 1000;
  long save_freq = 1000;
  std::string save_ckpt = "model.ckpt";
};

/// The whole input file.
struct InputConfig {
  std::string source;                    ///< the file it came from (for messages)
  std::vector<std::string> type_map;     ///< model.type_map (may be empty)
  DescriptorConfig descriptor;
  FittingConfig fitting;
  LearningRateConfig learning_rate;
  LossConfig loss;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataStatisticsConfig statistics;
  std::vector<std::string> warnings;     ///< keys that change nothing dpk trains, or unknown keys, by path
  /// "float64" or "float32": the descriptor's precision ("default" = float64).
  std::string precision() const {
    return descriptor.precision == "float32" ? "float32" : "float64";
  }
};

/// Reads and validates `path`. Throws dpk::Error naming the key path on wrong types or
/// impossible values, and on DeePMD-kit keys whose value would change the model or the training
/// in a way dpk does not implement; DeePMD-kit keys that change neither (logging, profiling,
/// checkpoint retention, ...) and unknown keys are collected in `warnings`.
inline InputConfig read_input(std::string const& path);

/// Parses input.json text (`source` names it in messages; relative system paths resolve against
/// `base_directory`). Same checks as read_input.
inline InputConfig parse_input(std::string const& text, std::string const& source, std::string const& base_directory);

// ------------------------------------------------------------------------------ implementation
namespace detail {

/// One JSON object of input.json being read: knows its key path (for messages), records which
/// keys were read, and reports the rest as warnings (DeePMD-kit keys dpk ignores, or unknown keys).
class JsonSection {
 public:
  using json = nlohmann::json;

  JsonSection(json const& node, std::string path, std::string const& source, std::vector<std::string>& warnings)
      : node_(node), path_(std::move(path)), source_(source), warnings_(warnings) {
    if (!node_.is_object()) fail(path_, "expected an object, got " + shown(node_));
  }

  /// Key path of `key` inside this section, e.g. "model.descriptor.sel".
  std::string path_of(std::string const& key) const { return path_.empty() ? key : path_ + "." + key; }

  /// The value of the first present key among `names` (aliases), or nullptr; marks them read.
  json const* find(std::initializer_list<char const*> names, std::string* found_name = nullptr) {
    json const* value = nullptr;
    for (char const* name : names) {
      used_.push_back(name);
      auto it = node_.find(name);
      if (it != node_.end() && value == nullptr) {
        value = &*it;
        if (found_name) *found_name = name;
      }
    }
    return value;
  }

  /// Throws dpk::Error "<source>: <path>: <what>".
  [[noreturn]] void fail(std::string const& path, std::string const& what) const {
    throw Error("input file '" + source_ + "': " + (path.empty() ? std::string("(top level)") : path) + ": " + what);
  }

  /// A short rendering of a JSON value for messages.
  static std::string shown(json const& value) {
    std::string s = value.dump();
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  }

  double number(json const& v, std::string const& path) const {
    if (!v.is_number()) fail(path, "expected a number, got " + shown(v));
    return v.get<double>();
  }
  long long integer(json const& v, std::string const& path, long long minimum) const {
    std::string const expected = minimum == 0   ? "a non-negative integer"
                                 : minimum == 1 ? "a positive integer"
                                                : "an integer >= " + std::to_string(minimum);
    if (!v.is_number_integer()) fail(path, "expected " + expected + ", got " + shown(v));
    if (v.is_number_unsigned()) {
      auto const u = v.get<unsigned long long>();
      if (u > static_cast<unsigned long long>(std::numeric_limits<int>::max()))
        fail(path, "expected " + expected + " that fits in 32 bits, got " + shown(v));
      if (static_cast<long long>(u) < minimum) fail(path, "expected " + expected + ", got " + shown(v));
      return static_cast<long long>(u);
    }
    long long const value = v.get<long long>();
    if (value < minimum) fail(path, "expected " + expected + ", got " + shown(v));
    if (value > std::numeric_limits<int>::max()) fail(path, "expected " + expected + " that fits in 32 bits, got " + shown(v));
    return value;
  }
  bool boolean(json const& v, std::string const& path) const {
    if (!v.is_boolean()) fail(path, "expected true or false, got " + shown(v));
    return v.get<bool>();
  }
  std::string string(json const& v, std::string const& path) const {
    if (!v.is_string()) fail(path, "expected a string, got " + shown(v));
    return v.get<std::string>();
  }

  // Typed reads of an optional key (the target keeps its default when the key is absent).
  void read(std::initializer_list<char const*> names, double& out, double minimum = -std::numeric_limits<double>::infinity()) {
    std::string name;
    if (json const* v = find(names, &name)) {
      out = number(*v, path_of(name));
      if (out < minimum) fail(path_of(name), "expected a number >= " + shown(json(minimum)) + ", got " + shown(*v));
    }
  }
  void read_positive(std::initializer_list<char const*> names, double& out) {
    std::string name;
    if (json const* v = find(names, &name)) {
      out = number(*v, path_of(name));
      if (!(out > 0)) fail(path_of(name), "expected a positive number, got " + shown(*v));
    }
  }
  template <class Integer>
  void read_integer(std::initializer_list<char const*> names, Integer& out, long long minimum) {
    std::string name;
    if (json const* v = find(names, &name)) out = static_cast<Integer>(integer(*v, path_of(name), minimum));
  }
  void read(std::initializer_list<char const*> names, bool& out) {
    std::string name;
    if (json const* v = find(names, &name)) out = boolean(*v, path_of(name));
  }
  void read(std::initializer_list<char const*> names, std::string& out) {
    std::string name;
    if (json const* v = find(names, &name)) out = string(*v, path_of(name));
  }
  /// A string restricted to `allowed` values.
  void read_choice(std::initializer_list<char const*> names, std::string& out, std::vector<std::string> const& allowed,
                   std::string const& what) {
    std::string name;
    if (json const* v = find(names, &name)) {
      out = string(*v, path_of(name));
      if (std::find(allowed.begin(), allowed.end(), out) == allowed.end()) {
        std::string list;
        for (std::size_t i = 0; i < allowed.size(); ++i) list += (i ? ", \"" : "\"") + allowed[i] + "\"";
        fail(path_of(name), "unsupported value \"" + out + "\" (" + what + ": " + list + ")");
      }
    }
  }
  /// An optional number under the first present of `names` (aliases): absent or null = none;
  /// otherwise a number for which `valid` holds (`expected` describes it, e.g. "a number in (0, 1]").
  template <class Valid>
  void read_optional(std::initializer_list<char const*> names, std::optional<double>& out, Valid const& valid,
                     std::string const& expected) {
    std::string name;
    json const* v = find(names, &name);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_number() || !valid(v->get<double>()))
      fail(path_of(name), "expected " + expected + " or null, got " + shown(*v));
    out = v->get<double>();
  }
  /// A seed: absent or null = none; otherwise a non-negative integer.
  void read_seed(std::initializer_list<char const*> names, std::optional<std::uint64_t>& out) {
    std::string name;
    json const* v = find(names, &name);
    if (v == nullptr || v->is_null()) return;
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<long long>() < 0))
      fail(path_of(name), "expected a non-negative integer or null, got " + shown(*v));
    out = v->is_number_unsigned() ? v->get<std::uint64_t>() : static_cast<std::uint64_t>(v->get<long long>());
  }
  /// A list of integers >= minimum.
  void read_int_list(std::initializer_list<char const*> names, std::vector<int>& out, long long minimum,
                     bool allow_empty) {
    std::string name;
    if (json const* v = find(names, &name)) {
      std::string const path = path_of(name);
      if (!v->is_array()) fail(path, "expected a list of integers, got " + shown(*v));
      if (v->empty() && !allow_empty) fail(path, "expected a non-empty list of integers, got []");
      out.clear();
      for (std::size_t i = 0; i < v->size(); ++i)
        out.push_back(static_cast<int>(integer((*v)[i], path + "[" + std::to_string(i) + "]", minimum)));
    }
  }
  /// A nested section (nullptr when absent).
  json const* section(char const* name) {
    json const* v = find({name});
    if (v != nullptr && !v->is_object()) fail(path_of(name), "expected an object, got " + shown(*v));
    return v;
  }

  /// A DeePMD-kit key that changes the model or the training, which dpk implements only at the
  /// value `value` (DeePMD-kit's default); `what` says what another value asks for.
  struct Fixed {
    char const* key;
    json value;
    char const* what;
  };

  /// Accepts each of `keys` when absent or at its value (per-layer lists of it, and lists of
  /// nulls for an empty-list value, count as the value) and refuses any other value, naming the
  /// key, the value and what it asks for: dpk never trains another model than the input asks.
  void expect_defaults(std::initializer_list<Fixed> keys) {
    for (Fixed const& k : keys) {
      json const* v = find({k.key});
      if (v == nullptr || at_value(*v, k.value)) continue;
      fail(path_of(k.key), shown(*v) + " is not implemented by dpk (" + k.what + "); remove the key or set it to " +
                               k.value.dump() + ", DeePMD-kit's default, which is what dpk trains");
    }
  }

  /// Reports every key not read: "_..." keys (comments) silently, `ignored` ones as DeePMD-kit
  /// keys that change nothing dpk trains (output, profiling, ...), the rest as unknown keys. All
  /// go to the warnings.
  void finish(std::initializer_list<char const*> ignored) {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string const& key = it.key();
      if (!key.empty() && key[0] == '_') continue;
      if (std::find(used_.begin(), used_.end(), key) != used_.end()) continue;
      bool const known = std::find_if(ignored.begin(), ignored.end(), [&](char const* k) { return key == k; }) !=
                         ignored.end();
      warnings_.push_back(path_of(key) + (known ? ": a DeePMD-kit key that changes nothing dpk trains; ignored"
                                                : ": unknown key (not read by dpk); ignored"));
    }
  }

  /// True where `v` stands for `value`: equal, or a list whose entries are all `value` (a bool:
  /// DeePMD-kit's per-layer `trainable`) or all null (an empty-list value: `atom_ener`).
  static bool at_value(json const& v, json const& value) {
    if (v == value) return true;
    if (!v.is_array() || v.empty()) return false;
    if (value.is_boolean()) return std::all_of(v.begin(), v.end(), [&](json const& e) { return e == value; });
    if (value.is_array() && value.empty())
      return std::all_of(v.begin(), v.end(), [](json const& e) { return e.is_null(); });
    return false;
  }

  std::string const& source() const { return source_; }
  std::vector<std::string>& warnings() { return warnings_; }

 private:
  json const& node_;
  std::string path_;
  std::string const& source_;
  std::vector<std::string>& warnings_;
  std::vector<std::string> used_;
};

/// batch_size: an integer, "auto", "auto:N" or a list of integers (one per system).
inline BatchSize parse_batch_size(JsonSection& s, nlohmann::json const& v, std::string const& path) {
  BatchSize b;
  std::string const expected = "expected a positive integer, \"auto\", \"auto:N\" or a list of positive integers";
  if (v.is_number_integer()) {
    b.automatic = false;
    b.value = static_cast<int>(s.integer(v, path, 1));
  } else if (v.is_string()) {
    std::string const text = v.get<std::string>();
    if (text == "auto") {
      b.automatic = true;
      b.value = 32;
    } else if (text.rfind("auto:", 0) == 0) {
      std::string const digits = text.substr(5);
      bool const ok = !digits.empty() && digits.size() < 10 &&
                      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!ok || std::stoi(digits) < 1) s.fail(path, expected + ", got " + JsonSection::shown(v));
      b.automatic = true;
      b.value = std::stoi(digits);
    } else {
      s.fail(path, expected + ", got " + JsonSection::shown(v) +
                       (text.rfind("mixed", 0) == 0 ? " (\"mixed:N\" needs mixed-type systems, not supported by dpk)" : ""));
    }
  } else if (v.is_array()) {
    if (v.empty()) s.fail(path, expected + ", got []");
    b.automatic = false;
    for (std::size_t i = 0; i < v.size(); ++i)
      b.per_system.push_back(static_cast<int>(s.integer(v[i], path + "[" + std::to_string(i) + "]", 1)));
    b.value = b.per_system.front();
  } else {
    s.fail(path, expected + ", got " + JsonSection::shown(v));
  }
  return b;
}

/// DeePMD-kit's auto_prob: "prob_uniform", "prob_sys_size" or "prob_sys_size;begin:end:weight;..."
/// (blocks of system indices [begin, end), disjoint, weights >= 0 not all 0). Sets `style` and
/// returns the blocks (empty for the plain forms); errors name `path`.
inline std::vector<DataConfig::ProbBlock> parse_auto_prob(std::string const& text, std::string const& path,
                                                          std::size_t nsystems, JsonSection& s, std::string& style) {
  std::string const expected = "expected \"prob_uniform\", \"prob_sys_size\" or "
                               "\"prob_sys_size;begin:end:weight;...\", got \"" + text + "\"";
  std::vector<DataConfig::ProbBlock> blocks;
  if (text == "prob_uniform" || text == "prob_sys_size") {
    style = text;
    return blocks;
  }
  if (text.rfind("prob_sys_size;", 0) != 0) s.fail(path, "unsupported value: " + expected);
  style = "prob_sys_size";
  std::istringstream parts(text.substr(std::string("prob_sys_size;").size()));
  std::string part;
  double total = 0;
  std::vector<int> owner(nsystems, -1);
  while (std::getline(parts, part, ';')) {
    DataConfig::ProbBlock b;
    char colon1 = 0, colon2 = 0;
    std::istringstream in(part);
    in >> b.begin >> colon1 >> b.end >> colon2 >> b.weight;
    if (!in || colon1 != ':' || colon2 != ':' || !(in >> std::ws).eof())
      s.fail(path, "block \"" + part + "\" is not begin:end:weight (" + expected + ")");
    if (b.begin < 0 || b.end <= b.begin || std::size_t(b.end) > nsystems)
      s.fail(path, "block \"" + part + "\" needs 0 <= begin < end <= " + std::to_string(nsystems) +
                       " (the number of systems)");
    if (!(b.weight >= 0) || !std::isfinite(b.weight))
      s.fail(path, "block \"" + part + "\" has a negative or non-finite weight");
    for (int i = b.begin; i < b.end; ++i) {
      if (owner[std::size_t(i)] >= 0)
        s.fail(path, "block \"" + part + "\" overlaps an earlier block (system " + std::to_string(i) + ")");
      owner[std::size_t(i)] = int(blocks.size());
    }
    total += b.weight;
    blocks.push_back(b);
  }
  if (blocks.empty()) s.fail(path, "no blocks after \"prob_sys_size;\" (" + expected + ")");
  if (!(total > 0)) s.fail(path, "the block weights sum to zero");
  return blocks;
}

/// DeePMD-kit's `"sel": "auto"` or `"auto:RATIO"`: the ratio (1.1 for "auto"); errors name `path`.
inline double parse_auto_sel(std::string const& text, std::string const& path, JsonSection& s) {
  std::string const expected = "expected a list of integers (one per type), \"auto\" or \"auto:RATIO\" with RATIO "
                               "a positive number, got \"" + text + "\"";
  if (text == "auto") return 1.1;
  if (text.rfind("auto:", 0) != 0) s.fail(path, expected);
  std::string const number = text.substr(5);
  char* end = nullptr;
  double const ratio = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(ratio) || !(ratio > 0))
    s.fail(path, expected);
  return ratio;
}

/// training.training_data or training.validation_data.
inline DataConfig parse_data(JsonSection& parent, char const* name, std::string const& base_directory,
                             bool validation) {
  namespace fs = std::filesystem;
  JsonSection s(*parent.find({name}), parent.path_of(name), parent.source(), parent.warnings());
  DataConfig data;
  std::string const systems_path = s.path_of("systems");
  nlohmann::json const* systems = s.find({"systems"});
  if (systems == nullptr) s.fail(systems_path, "required (a folder or a list of system folders)");
  auto resolve = [&](std::string const& p) {
    fs::path const q(p);
    fs::path r = (q.is_absolute() ? q : fs::path(base_directory) / q).lexically_normal();
    if (r.filename().empty() && r.has_parent_path()) r = r.parent_path();  // "data_0/" -> "data_0"
    return r.string();
  };
  if (systems->is_string()) {
    // A string is a folder: every directory below it holding type.raw is a system (sorted).
    std::string const root = resolve(systems->get<std::string>());
    try {
      data.systems = expand_systems(root);
    } catch (Error const& e) {
      s.fail(systems_path, e.what());
    }
  } else if (systems->is_array()) {
    if (systems->empty()) s.fail(systems_path, "expected a non-empty list of system folders, got []");
    for (std::size_t i = 0; i < systems->size(); ++i)
      data.systems.push_back(resolve(s.string((*systems)[i], systems_path + "[" + std::to_string(i) + "]")));
  } else {
    s.fail(systems_path, "expected a folder (string) or a list of system folders, got " + JsonSection::shown(*systems));
  }

  std::string batch_name;
  if (nlohmann::json const* b = s.find({"batch_size"}, &batch_name)) {
    data.batch_size = parse_batch_size(s, *b, s.path_of(batch_name));
    if (!data.batch_size.per_system.empty() && data.batch_size.per_system.size() != data.systems.size())
      s.fail(s.path_of(batch_name), "a list needs one entry per system: got " +
                                        std::to_string(data.batch_size.per_system.size()) + " entries for " +
                                        std::to_string(data.systems.size()) + " systems");
  }
  if (validation) s.read_integer({"numb_btch", "numb_batch"}, data.numb_btch, 1);
  std::string prob_name;
  if (nlohmann::json const* p = s.find({"auto_prob", "auto_prob_style"}, &prob_name))
    data.prob_blocks = parse_auto_prob(s.string(*p, s.path_of(prob_name)), s.path_of(prob_name), data.systems.size(),
                                       s, data.auto_prob);
  std::string probs_name;
  if (nlohmann::json const* p = s.find({"sys_probs"}, &probs_name)) {
    if (!p->is_null()) {
      std::string const path = s.path_of(probs_name);
      if (!p->is_array()) s.fail(path, "expected a list of non-negative numbers, got " + JsonSection::shown(*p));
      double total = 0;
      for (std::size_t i = 0; i < p->size(); ++i) {
        double const w = s.number((*p)[i], path + "[" + std::to_string(i) + "]");
        if (w < 0) s.fail(path + "[" + std::to_string(i) + "]", "expected a non-negative number, got " + JsonSection::shown((*p)[i]));
        data.sys_probs.push_back(w);
        total += w;
      }
      if (data.sys_probs.size() != data.systems.size())
        s.fail(path, "needs one entry per system: got " + std::to_string(data.sys_probs.size()) + " entries for " +
                         std::to_string(data.systems.size()) + " systems");
      if (!(total > 0)) s.fail(path, "the probabilities sum to zero");
    }
  }
  s.finish({"set_prefix", "rglob_patterns"});
  return data;
}

}  // namespace detail

inline InputConfig parse_input(std::string const& text, std::string const& source, std::string const& base_directory) {
  using json = nlohmann::json;
  json root;
  if (detail::json_nesting_depth(text.data(), text.data() + text.size()) > detail::max_json_depth)
    throw Error("input file '" + source + "': malformed JSON: nested deeper than " +
                std::to_string(detail::max_json_depth) + " levels of lists/objects");
  try {
    root = json::parse(text);
  } catch (json::exception const& e) {
    // nlohmann's message says "parse error at line L, column C: ..." (or "number overflow
    // parsing '1e999'", an out_of_range error, for a number beyond double's range).
    throw Error("input file '" + source + "': malformed JSON: " + e.what());
  }
  InputConfig config;
  config.source = source;
  detail::JsonSection top(root, "", config.source, config.warnings);

  // ---- model
  json const* model_node = top.section("model");
  if (model_node == nullptr) top.fail("model", "required");
  detail::JsonSection model(*model_node, "model", config.source, config.warnings);
  if (json const* type_map = model.find({"type_map"})) {
    if (!type_map->is_array()) model.fail("model.type_map", "expected a list of element names, got " + detail::JsonSection::shown(*type_map));
    for (std::size_t i = 0; i < type_map->size(); ++i) {
      std::string const path = "model.type_map[" + std::to_string(i) + "]";
      std::string const name = model.string((*type_map)[i], path);
      if (std::find(config.type_map.begin(), config.type_map.end(), name) != config.type_map.end())
        model.fail(path, "element \"" + name + "\" appears twice");
      config.type_map.push_back(name);
    }
  }
  {
    std::string model_type = "standard";
    model.read_choice({"type"}, model_type, {"standard"}, "dpk supports");
  }

  // model.descriptor
  json const* descriptor_node = model.section("descriptor");
  if (descriptor_node == nullptr) model.fail("model.descriptor", "required");
  {
    detail::JsonSection d(*descriptor_node, "model.descriptor", config.source, config.warnings);
    DescriptorConfig& c = config.descriptor;
    json const* type = d.find({"type"});
    if (type == nullptr) d.fail("model.descriptor.type", "required (\"se_e2_a\")");
    std::string const type_name = d.string(*type, "model.descriptor.type");
    if (type_name != "se_e2_a" && type_name != "se_a")
      d.fail("model.descriptor.type", "unsupported descriptor type \"" + type_name + "\" (dpk supports \"se_e2_a\", alias \"se_a\")");
    c.type = "se_e2_a";
    json const* sel = d.find({"sel"});
    if (sel == nullptr) d.fail("model.descriptor.sel", "required (a list with the maximum number of neighbours of each type)");
    if (sel->is_string())
      c.sel_auto = detail::parse_auto_sel(sel->get<std::string>(), "model.descriptor.sel", d);
    else
      d.read_int_list({"sel"}, c.sel, 0, false);
    if (!c.sel_auto && !config.type_map.empty() && c.sel.size() != config.type_map.size())
      d.fail("model.descriptor.sel", "has " + std::to_string(c.sel.size()) + " entries but model.type_map has " +
                                         std::to_string(config.type_map.size()) + " elements");
    d.read_positive({"rcut"}, c.rcut);
    d.read({"rcut_smth"}, c.rcut_smth, 0.0);
    if (c.rcut_smth >= c.rcut)
      d.fail("model.descriptor.rcut_smth", "must be smaller than rcut (rcut_smth = " + detail::JsonSection::shown(json(c.rcut_smth)) +
                                               ", rcut = " + detail::JsonSection::shown(json(c.rcut)) + ")");
    d.read_int_list({"neuron"}, c.neuron, 1, false);
    d.read_integer({"axis_neuron", "n_axis_neuron"}, c.axis_neuron, 1);
    if (c.axis_neuron > c.neuron.back())
      d.fail("model.descriptor.axis_neuron", "must not exceed the last embedding width neuron[-1] = " +
                                                 std::to_string(c.neuron.back()) + ", got " + std::to_string(c.axis_neuron));
    d.read({"type_one_side"}, c.type_one_side);
    d.read({"resnet_dt"}, c.resnet_dt);
    d.read_choice({"activation_function"}, c.activation_function, {"tanh"}, "dpk implements");
    d.read_choice({"precision"}, c.precision, {"default", "float64", "float32"}, "dpk supports");
    d.read_seed({"seed"}, c.seed);
    d.read({"set_davg_zero"}, config.statistics.set_davg_zero);
    d.expect_defaults({{"trainable", true, "a frozen descriptor, its embedding nets not trained"},
                       {"exclude_types", json::array(), "type pairs left out of the descriptor"},
                       {"env_protection", 0.0, "a protection term in the environment matrix"}});
    d.finish({"uniform_seed", "type_map"});
  }

  // model.fitting_net
  if (json const* fitting_node = model.section("fitting_net")) {
    detail::JsonSection f(*fitting_node, "model.fitting_net", config.source, config.warnings);
    FittingConfig& c = config.fitting;
    std::string type = "ener";
    f.read_choice({"type"}, type, {"ener"}, "dpk implements");
    f.read_int_list({"neuron", "n_neuron"}, c.neuron, 1, true);
    f.read({"resnet_dt"}, c.resnet_dt);
    f.read_choice({"activation_function"}, c.activation_function, {"tanh"}, "dpk implements");
    f.read_choice({"precision"}, c.precision, {"default", "float64", "float32"}, "dpk supports");
    f.read_seed({"seed"}, c.seed);
    f.read_optional({"rcond"}, config.statistics.rcond, [](double x) { return x >= 0; }, "a non-negative number");
    f.expect_defaults({{"numb_fparam", 0, "frame parameters, fparam.npy, as inputs of the fitting net"},
                       {"numb_aparam", 0, "atomic parameters, aparam.npy, as inputs of the fitting net"},
                       {"dim_case_embd", 0, "a case embedding for multi-task training"},
                       {"trainable", true, "frozen fitting layers"},
                       {"atom_ener", json::array(), "fixed energies of isolated atoms"},
                       {"exclude_types", json::array(), "atom types whose energy is left out"},
                       {"use_aparam_as_mask", false, "atomic parameters as a mask"},
                       {"layer_name", nullptr, "fitting layers shared between nets"}});
    f.finish({"uniform_seed", "default_fparam"});
  } else {
    model.fail("model.fitting_net", "required");
  }
  model.read_integer({"data_stat_nbatch"}, config.statistics.nbatch, 1);
  model.expect_defaults({{"type_embedding", nullptr, "a type embedding, another model than se_e2_a's"},
                         {"use_srtab", nullptr, "a tabulated pair potential added to the model"},
                         {"modifier", nullptr, "a modifier of the model's outputs"},
                         {"spin", nullptr, "spin"},
                         {"compress", nullptr, "a compressed model; dpk-train compress compresses dpk models"},
                         {"pair_exclude_types", json::array(), "type pairs left out of the model"},
                         {"atom_exclude_types", json::array(), "atom types left out of the energy"},
                         {"preset_out_bias", nullptr, "preset energy biases"},
                         {"out_bias", nullptr, "given energy biases"},
                         {"model_dict", nullptr, "multi-task training"},
                         {"bridging_method", "None", "bridging to a short-range potential"}});
  // data_stat_protect: DeePMD-kit's TF se_e2_a floors the std at 1e-2 whatever it says (as dpk);
  // data_bias_nsample: used only when DeePMD-kit changes the bias of a trained model.
  model.finish({"data_stat_protect", "data_bias_nsample", "smin_alpha", "sw_rmin", "sw_rmax", "srtab_add_bias",
                "finetune_head", "model_branch_alias", "bridging_r_inner", "bridging_r_outer"});

  // ---- learning_rate
  if (json const* lr_node = top.section("learning_rate")) {
    detail::JsonSection l(*lr_node, "learning_rate", config.source, config.warnings);
    LearningRateConfig& c = config.learning_rate;
    l.read_choice({"type"}, c.type, {"exp"}, "dpk implements");
    l.read_positive({"start_lr"}, c.start_lr);
    json const* stop_lr = l.find({"stop_lr"});
    json const* stop_lr_ratio = l.find({"stop_lr_ratio"});
    bool const has_stop = stop_lr != nullptr && !stop_lr->is_null();
    bool const has_ratio = stop_lr_ratio != nullptr && !stop_lr_ratio->is_null();
    if (has_stop && has_ratio)
      l.fail("learning_rate.stop_lr_ratio", "is given together with stop_lr; give one of them (stop_lr = start_lr x stop_lr_ratio)");
    if (has_stop) l.read_positive({"stop_lr"}, c.stop_lr);
    if (has_ratio) {
      double ratio = 0;
      l.read_positive({"stop_lr_ratio"}, ratio);
      c.stop_lr = c.start_lr * ratio;
    }
    l.read_integer({"decay_steps"}, c.decay_steps, 1);
    l.read_optional({"decay_rate"}, c.decay_rate, [](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]");
    l.read({"smooth"}, c.smooth);
    l.read_integer({"warmup_steps"}, c.warmup_steps, 0);
    l.read_optional({"warmup_ratio"}, c.warmup_ratio, [](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)");
    if (c.warmup_ratio && c.warmup_steps != 0)
      l.fail("learning_rate.warmup_ratio", "is given together with warmup_steps; give one of them");
    l.read({"warmup_start_factor"}, c.warmup_start_factor, 0.0);
    l.read_choice({"scale_by_worker"}, c.scale_by_worker, {"linear", "sqrt", "none"}, "allowed");
    l.finish({});
  }

  // ---- loss
  if (json const* loss_node = top.section("loss")) {
    detail::JsonSection l(*loss_node, "loss", config.source, config.warnings);
    LossConfig& c = config.loss;
    l.read_choice({"type"}, c.type, {"ener"}, "dpk implements");
    l.read({"start_pref_e"}, c.start_pref_e, 0.0);
    l.read({"limit_pref_e"}, c.limit_pref_e, 0.0);
    l.read({"start_pref_f"}, c.start_pref_f, 0.0);
    l.read({"limit_pref_f"}, c.limit_pref_f, 0.0);
    l.read({"start_pref_v"}, c.start_pref_v, 0.0);
    l.read({"limit_pref_v"}, c.limit_pref_v, 0.0);
    l.expect_defaults({{"start_pref_ae", 0.0, "an atomic-energy loss"},
                       {"limit_pref_ae", 0.0, "an atomic-energy loss"},
                       {"start_pref_pf", 0.0, "a force loss weighted per atom"},
                       {"limit_pref_pf", 0.0, "a force loss weighted per atom"},
                       {"use_default_pf", false, "a force loss weighted per atom"},
                       {"start_pref_gf", 0.0, "a generalized-force loss"},
                       {"limit_pref_gf", 0.0, "a generalized-force loss"},
                       {"numb_generalized_coord", 0, "a generalized-force loss"},
                       {"start_pref_h", 0.0, "a Hessian loss"},
                       {"limit_pref_h", 0.0, "a Hessian loss"},
                       {"relative_f", nullptr, "relative force errors"},
                       {"enable_atom_ener_coeff", false, "per-atom energy coefficients"},
                       {"use_huber", false, "a Huber loss"},
                       {"use_l1_all", false, "an L1 loss"},
                       {"loss_func", "mse", "another loss function than the mean squared error"},
                       {"f_use_norm", false, "force errors by their norm"},
                       {"intensive_ener_virial", false, "energy and virial losses divided by the atoms squared"}});
    l.finish({"huber_delta", "inference"});
  }

  // ---- training
  json const* training_node = top.section("training");
  if (training_node == nullptr) top.fail("training", "required");
  {
    detail::JsonSection t(*training_node, "training", config.source, config.warnings);
    TrainingConfig& c = config.training;
    if (t.section("training_data") == nullptr)
      t.fail("training.training_data", "required (an object with \"systems\" and \"batch_size\")");
    c.training_data = detail::parse_data(t, "training_data", base_directory, false);
    if (json const* validation = t.find({"validation_data"})) {
      if (!validation->is_null()) {
        if (!validation->is_object())
          t.fail("training.validation_data", "expected an object or null, got " + detail::JsonSection::shown(*validation));
        c.validation_data = detail::parse_data(t, "validation_data", base_directory, true);
      }
    }
    t.read_optional({"num_epoch", "num_epochs", "numb_epoch", "numb_epochs"}, c.num_epoch,
                    [](double x) { return x > 0; }, "a positive number");
    json const* steps = t.find({"numb_steps", "num_step", "num_steps", "numb_step", "stop_batch"});
    if (steps != nullptr && c.num_epoch)
      t.fail("training.num_epoch", "is given together with numb_steps; give one of them");
    if (steps == nullptr && !c.num_epoch)
      t.fail("training.numb_steps", "required (the number of training steps), or training.num_epoch");
    t.read_integer({"numb_steps", "num_step", "num_steps", "numb_step", "stop_batch"}, c.numb_steps, 0);
    t.read_seed({"seed"}, c.seed);
    t.read({"disp_file"}, c.disp_file);
    t.read_integer({"disp_freq"}, c.disp_freq, 1);
    t.read_integer({"save_freq"}, c.save_freq, 1);
    t.read({"save_ckpt"}, c.save_ckpt);
    // DeePMD-kit reads scale_by_worker from learning_rate; accept it here too unless set there.
    std::string scale = config.learning_rate.scale_by_worker;
    t.read_choice({"scale_by_worker"}, scale, {"linear", "sqrt", "none"}, "allowed");
    if (training_node->contains("scale_by_worker") &&
        !(root.contains("learning_rate") && root["learning_rate"].contains("scale_by_worker")))
      config.learning_rate.scale_by_worker = scale;
    t.expect_defaults({{"opt_type", "Adam", "another optimizer"},
                       {"mixed_precision", nullptr, "mixed-precision training"},
                       {"gradient_max_norm", nullptr, "gradient clipping"},
                       {"enable_ema", false, "an exponential moving average of the parameters"},
                       {"acc_freq", 1, "gradient accumulation"},
                       {"change_bias_after_training", false, "the energy bias fitted again after training"},
                       {"disp_avg", false, "lcurve.out averaged over disp_freq steps"},
                       {"warmup_steps", 0, "a warmup; DeePMD-kit 3.2 reads learning_rate.warmup_steps, as dpk does"},
                       {"data_dict", nullptr, "multi-task training"},
                       {"fitting_weight", nullptr, "multi-task training"},
                       {"model_prob", nullptr, "multi-task training"}});
    t.finish({"numb_test", "time_training", "profiling", "profiling_file", "disp_training", "tensorboard",
              "tensorboard_log_dir", "tensorboard_freq", "max_ckpt_keep", "save_ckpt_keep", "ckpt_keep_ratio",
              "enable_profiler", "zero_stage", "stat_file", "stat_file_mode", "save_dir", "ema_decay", "ema_ckpt_keep",
              "warmup_start_factor", "neighbor_graph_method", "enable_compile", "enable_tf32"});
  }

  // ---- optimizer (DeePMD-kit 3.2; absent: Adam with beta1 0.9, beta2 0.999)
  if (json const* optimizer_node = top.section("optimizer")) {
    detail::JsonSection o(*optimizer_node, "optimizer", config.source, config.warnings);
    std::string type = "Adam";
    o.read_choice({"type"}, type, {"Adam"}, "dpk implements");
    for (auto [key, target] : {std::pair{"adam_beta1", &config.optimizer.adam_beta1},
                               std::pair{"adam_beta2", &config.optimizer.adam_beta2}}) {
      o.read({key}, *target);
      if (!(*target >= 0 && *target < 1))
        o.fail(std::string("optimizer.") + key, "expected a number in [0, 1), got " + detail::JsonSection::shown(json(*target)));
    }
    o.expect_defaults({{"weight_decay", 0.0, "weight decay"}});
    o.finish({});
  }
  if (json const* nvnmd = top.find({"nvnmd"}); nvnmd != nullptr && nvnmd->is_object() && nvnmd->contains("enable") &&
                                               (*nvnmd)["enable"] != false)
    top.fail("nvnmd.enable", detail::JsonSection::shown((*nvnmd)["enable"]) +
                                 " is not implemented by dpk (training for NVNMD hardware); remove the section or set it to false");
  top.finish({});
  return config;
}

inline InputConfig read_input(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("input file '" + path + "': cannot open (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  std::string base = std::filesystem::path(path).parent_path().string();
  if (base.empty()) base = ".";
  return parse_input(text.str(), path, base);
}

}  // namespace dpk
