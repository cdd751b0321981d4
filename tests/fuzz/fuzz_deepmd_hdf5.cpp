/// libFuzzer target: dpk::interop::parse_deepmd_hdf5, the in-memory twin of read_deepmd_hdf5
/// (the `.dp` reader behind `dpk-train import model.dp`; both share detail::hdf5::read_tree).
///
/// The input describes a `.dp` file, which the target writes with HDF5 into memory (core driver,
/// no file on disk) and hands to the reader as bytes:
///   byte 0      the root attribute `json`: 0 variable-length UTF-8 string, 1 fixed-length
///               string, 2 an integer, 3 absent, 4 two variable-length strings, 5 three
///               fixed-length strings (mod 6)
///   byte 1      n, the number of datasets /variable_0000 ... /variable_<n - 1>
///   n times     one spec byte: bits 0-2 type (0 float64, 1 float32, 2 big-endian float64,
///               3 int32, 4 string, 5 float64 scalar, 6 float64 with a null dataspace,
///               7 float16-sized float), bits 3-4 rank (0-3), bit 5 the data is not written,
///               bits 6-7 layout (contiguous, compact, chunked, chunked + deflate); then one byte
///               per dimension (below 250: that mod 16; 250-255: (b - 249) x 2^31)
///   the rest    the text of the `json` attribute
/// Mutations thus reach dpk's checks of the attribute, the JSON, the dataset names, types,
/// shapes and stored sizes, without feeding HDF5's own decoder damaged bytes. That decoder
/// (HDF5 1.10.8, not instrumented) has memory errors of its own on damaged files, found within
/// seconds with DPK_FUZZ_HDF5_RAW=1, where the input bytes are the file image as is (not run by
/// scripts/fuzz.sh; docs/reliability.md).
/// A dpk::Error is the expected outcome for bad input; any other exception, a sanitizer report
/// or an accepted dictionary whose arrays are not well formed is a finding.
#include <dpk/interop/deepmd_hdf5.hpp>

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using dpk::interop::detail::hdf5::Handle;

struct Reader {
  std::uint8_t const* data;
  std::size_t size, at = 0;
  std::uint8_t byte() { return at < size ? data[at++] : 0; }
};

void write_dataset(hid_t file, int index, std::uint8_t spec, Reader& in) {
  int const kind = spec & 7, rank = (spec >> 3) & 3, layout = (spec >> 6) & 3;
  bool const written = !(spec & 0x20);
  std::vector<hsize_t> dims;
  for (int r = 0; r < rank; ++r) {
    std::uint8_t const b = in.byte();
    dims.push_back(b < 250 ? hsize_t(b % 16) : hsize_t(b - 249) << 31);
  }
  hid_t file_type = H5T_IEEE_F64LE;
  Handle owned_type(-1, H5Tclose);
  if (kind == 1) file_type = H5T_IEEE_F32LE;
  if (kind == 2) file_type = H5T_IEEE_F64BE;
  if (kind == 3) file_type = H5T_STD_I32LE;
  if (kind == 4) {
    owned_type.id = H5Tcopy(H5T_C_S1);
    H5Tset_size(owned_type.id, 8);
    file_type = owned_type.id;
  }
  if (kind == 7) {  // a 2-byte float (IEEE half layout)
    owned_type.id = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(owned_type.id, 15, 10, 5, 0, 10);
    H5Tset_size(owned_type.id, 2);
    H5Tset_ebias(owned_type.id, 15);
    file_type = owned_type.id;
  }
  Handle space(kind == 5 ? H5Screate(H5S_SCALAR)
                         : kind == 6 ? H5Screate(H5S_NULL)
                                     : (dims.empty() ? H5Screate(H5S_SCALAR)
                                                     : H5Screate_simple(int(dims.size()), dims.data(), nullptr)),
               H5Sclose);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::size_t count = 1;
  for (auto d : dims) count = d == 0 ? 0 : (count > (std::size_t(1) << 20) / d ? (std::size_t(1) << 21) : count * d);
  if (kind == 5) count = 1;
  if (kind == 6) count = 0;
  if (layout == 1 && count * 8 < 60000 && kind != 6) H5Pset_layout(create.id, H5D_COMPACT);
  if (layout >= 2 && !dims.empty() && kind < 5) {
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) chunk[i] = dims[i] == 0 ? 1 : (dims[i] < 4 ? dims[i] : 4);
    H5Pset_chunk(create.id, int(chunk.size()), chunk.data());
    if (layout == 3) H5Pset_deflate(create.id, 6);
  }
  char name[32];
  std::snprintf(name, sizeof name, "/variable_%04d", index);
  Handle dataset(H5Dcreate2(file, name, file_type, space.id, H5P_DEFAULT, create.id, H5P_DEFAULT), H5Dclose);
  if (!dataset || !written || count == 0 || count > (std::size_t(1) << 20)) return;
  if (kind == 4) {
    std::vector<char> text(count * 8, 'x');
    H5Dwrite(dataset.id, file_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
    return;
  }
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = double(int(i % 7) - 3) + 0.25;
  H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
}

void write_attribute(hid_t file, int kind, std::string const& text) {
  if (kind == 3) return;
  if (kind == 2) {
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attribute(H5Acreate2(file, "json", H5T_STD_I32LE, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    int const value = 7;
    H5Awrite(attribute.id, H5T_NATIVE_INT, &value);
    return;
  }
  bool const variable = kind == 0 || kind == 4;
  hsize_t const n = kind == 4 ? 2 : kind == 5 ? 3 : 1;
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, variable ? H5T_VARIABLE : (text.empty() ? 1 : text.size()));
  H5Tset_cset(type.id, variable ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  Handle space(n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle attribute(H5Acreate2(file, "json", type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute) return;
  if (variable) {
    std::vector<char const*> pointers(n, text.c_str());
    H5Awrite(attribute.id, type.id, pointers.data());
  } else {
    std::string block;
    for (hsize_t i = 0; i < n; ++i) block += text.empty() ? std::string(1, '\0') : text;
    H5Awrite(attribute.id, type.id, block.data());
  }
}

/// The `.dp` file the input describes, as bytes ("" if HDF5 could not write it).
std::string file_image(std::uint8_t const* data, std::size_t size) {
  Reader in{data, size};
  int const attribute_kind = in.byte() % 6;
  int const datasets = in.byte();
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(access.id, 1 << 16, 0);
  Handle file(H5Fcreate("fuzz_write.dp", H5F_ACC_TRUNC, H5P_DEFAULT, access.id), H5Fclose);
  if (!file) return "";
  for (int i = 0; i < datasets; ++i) write_dataset(file.id, i, in.byte(), in);
  std::string const text(reinterpret_cast<char const*>(data) + in.at, size - in.at);
  write_attribute(file.id, attribute_kind, text);
  H5Fflush(file.id, H5F_SCOPE_GLOBAL);
  ssize_t const bytes = H5Fget_file_image(file.id, nullptr, 0);
  if (bytes <= 0) return "";
  std::string image(std::size_t(bytes), '\0');
  if (H5Fget_file_image(file.id, image.data(), image.size()) != bytes) return "";
  return image;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  dpk::interop::detail::hdf5::quiet();
  static bool const raw = std::getenv("DPK_FUZZ_HDF5_RAW") != nullptr;
  std::string const bytes = raw ? std::string(reinterpret_cast<char const*>(data), size) : file_image(data, size);
  if (bytes.empty() && !raw) return 0;
  try {
    dpk::interop::DeepmdDict tree = dpk::interop::parse_deepmd_hdf5(bytes, "fuzz.dp");
    // What the reader accepts, the conversion to a dpk model may rely on: well-formed arrays.
    dpk::interop::for_each_variable(tree, [](dpk::interop::DeepmdDict& node, std::string const& key) {
      if (dpk::interop::is_array(node) && !dpk::interop::array_problem(node).empty()) {
        std::fprintf(stderr, "fuzz_deepmd_hdf5: accepted a malformed array at '%s'\n", key.c_str());
        std::abort();
      }
    });
  } catch (dpk::Error const&) {
  }
  return 0;
}
