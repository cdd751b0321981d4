/// libFuzzer target: dpk::parse_model_file (the reader behind dpk::read_model_file).
///
/// The first byte picks the mode. Even: the rest is a whole file, checked as is. Odd: the rest
/// is `header JSON` `\0` `data section`; the target frames it like write_model_file does
/// (magic, version, header length, padding, end marker) and rewrites the header's
/// `data_checksum_fnv1a64` string to the data's checksum, so that mutations of the header reach
/// the checks behind the framing and the checksum.
#include <dpk/io/model_file.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

/// Frames `header` and `data` into a file; the checksum value in the header (if any) is replaced.
std::string frame(std::string header, std::string const& data) {
  namespace mf = dpk::detail::model_file;
  std::string const key = "\"data_checksum_fnv1a64\"";
  std::size_t const at = header.find(key);
  if (at != std::string::npos) {
    std::size_t const open = header.find('"', at + key.size());
    std::size_t const close = open == std::string::npos ? open : header.find('"', open + 1);
    if (close != std::string::npos)
      header.replace(open + 1, close - open - 1,
                     std::to_string(mf::fnv1a64(reinterpret_cast<unsigned char const*>(data.data()), data.size())));
  }
  std::string out(mf::model_magic, 8);
  mf::put_u32(out, dpk::model_file_version);
  mf::put_u64(out, header.size());
  out += header;
  while (out.size() % 8 != 0) out.push_back('\0');
  out += data;
  out.append(mf::model_trailer, 8);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  if (size == 0) return 0;
  std::string const rest(reinterpret_cast<char const*>(data) + 1, size - 1);
  std::string bytes = rest;
  if (data[0] & 1) {
    std::size_t const split = rest.find('\0');
    bytes = split == std::string::npos ? frame(rest, "") : frame(rest.substr(0, split), rest.substr(split + 1));
  }
  try {
    dpk::ModelFileData const model = dpk::parse_model_file(bytes, "fuzz.dpk");
    // An accepted file: statistics, bias and tensors as the header says (docs/model-format.md).
    std::size_t covered = 0;
    for (auto const& t : model.tensors) covered += t.size();
    if (covered != model.parameters.size()) std::abort();
    if (model.energy_bias.size() != std::size_t(model.ntypes)) std::abort();
    if (model.avg.size() != model.stdev.size()) std::abort();
    for (int s : model.descriptor.sel)
      if (s < 0) std::abort();
    // An accepted compressed model: one range per embedding net, on the grid it claims, and
    // (first + second intervals) x 6 x m1 coefficients per net (what the table lookup indexes).
    if (model.compression) {
      auto const& c = *model.compression;
      std::size_t const nnets = model.descriptor.type_one_side ? std::size_t(model.ntypes)
                                                               : std::size_t(model.ntypes) * std::size_t(model.ntypes);
      if (c.nets.size() != nnets || !(c.step > 0) || c.m1 != model.descriptor.neuron.back()) std::abort();
      std::size_t coefficients = 0;
      for (auto const& n : c.nets) {
        if (n.first_intervals < 1 || n.second_intervals < 0 || !(n.lower < n.upper) || !(n.upper <= n.max)) std::abort();
        coefficients += std::size_t(n.first_intervals + n.second_intervals) * 6 * std::size_t(c.m1);
      }
      if (coefficients != c.table.size()) std::abort();
    }
  } catch (dpk::Error const&) {
  }
  return 0;
}
