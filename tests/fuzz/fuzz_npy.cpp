/// libFuzzer target: dpk::parse_npy (the reader behind dpk::read_npy) on arbitrary bytes.
/// A dpk::Error is the expected outcome for bad input; any other exception, a sanitizer report
/// or a broken invariant of an accepted array is a finding.
#include <dpk/io/npy.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  std::string const bytes(reinterpret_cast<char const*>(data), size);
  try {
    dpk::NpyArray const array = dpk::parse_npy(bytes, "fuzz.npy");
    // An accepted array holds exactly product(shape) values, each from bytes of the file.
    std::size_t count = 1;
    bool zero = false;
    for (std::size_t extent : array.shape) zero = zero || extent == 0;
    for (std::size_t extent : array.shape) {
      if (!zero && count > SIZE_MAX / extent) std::abort();  // an accepted shape whose product overflows
      count = zero ? 0 : count * extent;
    }
    if (array.data.size() != count || count > size) std::abort();
  } catch (dpk::Error const&) {
  }
  return 0;
}
