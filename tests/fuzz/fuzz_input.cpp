/// libFuzzer target: dpk::parse_input (input.json text into dpk::InputConfig).
///
/// Relative system paths resolve against a scratch folder holding one system folder
/// (`sys/type.raw`), so that "systems": "<folder>" expansion runs too. Inputs whose systems
/// string would leave that folder (absolute, or with a ".." part) are skipped: walking the real
/// file system tests the machine, not the parser. A dpk::Error is the expected outcome for bad
/// input; any other exception or a sanitizer report is a finding.
#include <dpk/io/input.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

/// The scratch base folder, created on first use and removed at exit.
struct Scratch {
  fs::path root;
  Scratch() : root(fs::temp_directory_path() / ("dpk_fuzz_input_" + std::to_string(::getpid()))) {
    fs::create_directories(root / "sys");
    std::ofstream(root / "sys" / "type.raw") << "0\n";
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};

/// True when `systems` (a training/validation_data.systems value) names a folder outside the base.
bool leaves_base(nlohmann::json const& systems) {
  if (!systems.is_string()) return false;
  fs::path const p(systems.get<std::string>());
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return true;
  for (auto const& part : p)
    if (part == "..") return true;
  return false;
}

/// True when the text parses as JSON and one of its systems strings leaves the base folder.
bool walks_outside(std::string const& text) {
  nlohmann::json const root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("training") || !root["training"].is_object()) return false;
  for (char const* name : {"training_data", "validation_data"}) {
    auto const& t = root["training"];
    if (t.contains(name) && t[name].is_object() && t[name].contains("systems") && leaves_base(t[name]["systems"]))
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  static Scratch const scratch;
  std::string const text(reinterpret_cast<char const*>(data), size);
  if (walks_outside(text)) return 0;
  try {
    dpk::InputConfig const config = dpk::parse_input(text, "fuzz-input.json", scratch.root.string());
    // An accepted configuration obeys the checks parse_input documents.
    // sel: a list, or "auto[:ratio]" with a positive ratio and no list yet
    if (config.descriptor.sel.empty() != bool(config.descriptor.sel_auto)) std::abort();
    if (config.descriptor.sel_auto && !(*config.descriptor.sel_auto > 0)) std::abort();
    if (config.descriptor.neuron.empty()) std::abort();
    if (config.descriptor.axis_neuron > config.descriptor.neuron.back()) std::abort();
    if (!(config.descriptor.rcut_smth < config.descriptor.rcut)) std::abort();
    if (config.training.training_data.systems.empty()) std::abort();
  } catch (dpk::Error const&) {
  }
  return 0;
}
