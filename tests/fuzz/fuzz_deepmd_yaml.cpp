/// libFuzzer target: dpk::interop::parse_deepmd_yaml (the YAML side of the DeePMD-kit importer, behind
/// `dpk-train import model.yaml`) on arbitrary text: YAML parsing, the conversion into a
/// DeepmdDict and its nested-list arrays. A dpk::Error is the expected outcome for bad input; any
/// other exception or a sanitizer report is a finding. (The dictionary -> dpk model step needs
/// Kokkos and is covered by test_interop's refusal tests; the HDF5 `.dp` side is not fuzzed.)
#include <dpk/interop/deepmd_yaml.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  std::string const text(reinterpret_cast<char const*>(data), size);
  try {
    dpk::interop::DeepmdDict const tree = dpk::interop::parse_deepmd_yaml(text, "fuzz.yaml");
    (void)tree;
  } catch (dpk::Error const&) {
  }
  return 0;
}
