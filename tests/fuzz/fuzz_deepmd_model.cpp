/// libFuzzer target: dpk::interop::model_from_deepmd_dict, the step from DeePMD-kit's model
/// dictionary (what the .dp and .yaml readers return) to dpk's model, behind `dpk-train import`.
/// The input is the dictionary as JSON text (arrays in dpk's flat form: dtype, shape, value), so
/// that mutations reach the checks of the conversion rather than a file format's. A dpk::Error is
/// the expected outcome for a dictionary dpk cannot express; any other exception or a sanitizer
/// report is a finding. A model that is accepted must survive export and import unchanged:
/// model_to_deepmd_dict -> model_from_deepmd_dict gives the same parameters, statistics and
/// energy bias bit for bit (or the export refuses it with a dpk::Error, e.g. no type_map).
/// Host code only: Kokkos' headers are needed (dpk's layer shapes), its runtime is not.
#include <dpk/interop/deepmd_model.hpp>
#include <dpk/io/json_depth.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool same_bits(std::vector<double> const& a, std::vector<double> const& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  char const* text = reinterpret_cast<char const*>(data);
  // The readers refuse deeper nesting before parsing (json_depth.hpp, deepmd_yaml.hpp).
  if (dpk::detail::json_nesting_depth(text, text + size) > dpk::detail::max_json_depth) return 0;
  dpk::interop::DeepmdDict tree;
  try {
    tree = dpk::interop::DeepmdDict::parse(text, text + size);
  } catch (nlohmann::json::exception const&) {
    return 0;  // not JSON: not this target's concern
  }
  dpk::ModelFileData model;
  try {
    model = dpk::interop::model_from_deepmd_dict(tree, "fuzz.dp");
  } catch (dpk::Error const&) {
    return 0;
  }
  dpk::interop::DeepmdDict exported;
  try {
    exported = dpk::interop::model_to_deepmd_dict(model, "fuzz.dpk");
  } catch (dpk::Error const&) {
    return 0;
  }
  dpk::ModelFileData const again = dpk::interop::model_from_deepmd_dict(exported, "exported.dp");
  if (!same_bits(again.parameters, model.parameters) || !same_bits(again.avg, model.avg) ||
      !same_bits(again.stdev, model.stdev) || !same_bits(again.energy_bias, model.energy_bias)) {
    std::fprintf(stderr, "fuzz_deepmd_model: an accepted model changed in export -> import\n");
    std::abort();
  }
  return 0;
}
