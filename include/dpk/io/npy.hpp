#pragma once
/// \file npy.hpp
/// \brief Reading and writing NumPy `.npy` files (format versions 1, 2 and 3) on the host.
///
/// Every array is read into float64, whatever its stored numeric type, because the deepmd/npy
/// data it carries (coordinates, boxes, energies, forces, virials) is converted to the model's
/// Scalar later anyway. Only C-ordered (row-major), little-endian arrays are accepted.

#include <dpk/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace dpk {

/// An n-dimensional array read from a `.npy` file, values converted to double, row-major.
struct NpyArray {
  std::vector<std::size_t> shape;  ///< extents, outermost first (empty = a scalar)
  std::vector<double> data;        ///< product(shape) values in C order
  std::string dtype;               ///< the stored type as written in the file, e.g. "<f4"
  /// Number of values (product of the extents; 1 for a scalar).
  std::size_t size() const {
    std::size_t n = 1;
    for (std::size_t extent : shape) n *= extent;
    return n;
  }
};

/// How write_npy stores an array: element type, format version, order flag.
struct NpyWriteOptions {
  std::string dtype = "<f8";   ///< "<f8", "<f4", "<i4" or "<i8"
  int version = 1;             ///< npy format version 1, 2 or 3
  bool fortran_order = false;  ///< only sets the header flag (for tests of readers); data stays as given
};

namespace detail {

/// Shape as "(2, 3)" (Python's spelling), for messages and headers.
inline std::string npy_shape_string(std::vector<std::size_t> const& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

/// Minimal parser of the header dictionary numpy writes, e.g.
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (80, 576), }`.
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string const& text, std::string const& path) : text_(text), path_(path) {}

  /// Parses the dictionary into descr, fortran_order and shape; throws on anything else.
  void parse(std::string& descr, bool& fortran_order, std::vector<std::size_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string const key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("unsupported dtype (structured or non-string 'descr' in the header)");
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        shape = parse_tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "' in the header");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      if (peek() != '}') fail("malformed header dictionary (expected ',' or '}')");
    }
    if (!have_descr || !have_order || !have_shape)
      fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r'))
      ++pos_;
  }
  [[noreturn]] void fail(std::string const& what) const {
    throw Error("npy file '" + path_ + "': " + what + "; header: " + text_);
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("malformed header (expected '") + c + "')");
    ++pos_;
  }
  std::string parse_string() {
    char const quote = peek();
    if (quote != '\'' && quote != '"') fail("malformed header (expected a quoted key or string)");
    ++pos_;
    std::size_t const end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("malformed header (unterminated string)");
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail("malformed header ('fortran_order' is neither True nor False)");
  }
  std::vector<std::size_t> parse_tuple() {
    std::vector<std::size_t> shape;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      if (peek() < '0' || peek() > '9') fail("malformed header ('shape' is not a tuple of integers)");
      std::size_t value = 0;
      while (peek() >= '0' && peek() <= '9') {
        // numpy's extents are intp (int64): anything larger is a corrupt header, not a wrap-around.
        std::size_t const digit = static_cast<std::size_t>(peek() - '0');
        if (value > (std::size_t(INT64_MAX) - digit) / 10)
          fail("malformed header ('shape' has an extent larger than 2^63 - 1)");
        value = value * 10 + digit;
        ++pos_;
      }
      // numpy 1.x wrote long integers as e.g. 80L in Python 2 headers.
      if (peek() == 'L') ++pos_;
      shape.push_back(value);
      skip_space();
      if (peek() == ',') ++pos_;
      else if (peek() != ')') fail("malformed header ('shape' is not a tuple of integers)");
    }
  }

  std::string const& text_;
  std::string const& path_;
  std::size_t pos_ = 0;
};

/// Little-endian host check (the only kind of host dpk reads npy on).
inline bool host_is_little_endian() {
  std::uint16_t const probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// Converts `count` stored values of type `T` at `bytes` to double.
template <class T>
void npy_convert(unsigned char const* bytes, std::size_t count, std::vector<double>& out) {
  out.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, bytes + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(value);
  }
}

}  // namespace detail

/// Parses the bytes of a `.npy` file (format v1/v2/v3, C order, little-endian `<f4 <f8 <i1..<i8
/// |u1..<u8 |b1`) into doubles; `path` names the file in errors. Throws dpk::Error naming the file
/// and the problem: not npy, truncated, fortran_order, big-endian or unsupported dtype.
inline NpyArray parse_npy(std::string const& file_bytes, std::string const& path) {
  auto const* const begin = reinterpret_cast<unsigned char const*>(file_bytes.data());
  std::vector<unsigned char> const bytes(begin, begin + file_bytes.size());
  static unsigned char const magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
    throw Error("npy file '" + path + "': not an npy file (missing the \\x93NUMPY magic string" +
                (bytes.size() < 10 ? ", file has only " + std::to_string(bytes.size()) + " bytes)" : ")"));
  int const major = bytes[6];
  std::size_t header_length = 0, preamble = 0;
  if (major == 1) {
    header_length = std::size_t(bytes[8]) | (std::size_t(bytes[9]) << 8);
    preamble = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error("npy file '" + path + "': truncated inside the preamble");
    header_length = std::size_t(bytes[8]) | (std::size_t(bytes[9]) << 8) | (std::size_t(bytes[10]) << 16) |
                    (std::size_t(bytes[11]) << 24);
    preamble = 12;
  } else {
    throw Error("npy file '" + path + "': unsupported npy format version " + std::to_string(major) +
                " (expected 1, 2 or 3)");
  }
  if (bytes.size() < preamble + header_length)
    throw Error("npy file '" + path + "': truncated inside the header (needs " +
                std::to_string(preamble + header_length) + " bytes, file has " + std::to_string(bytes.size()) + ")");
  std::string const header(reinterpret_cast<char const*>(bytes.data()) + preamble, header_length);

  NpyArray array;
  bool fortran_order = false;
  detail::NpyHeaderParser(header, path).parse(array.dtype, fortran_order, array.shape);
  if (fortran_order)
    throw Error("npy file '" + path + "': fortran_order arrays are not supported (save it in C order, e.g. "
                "numpy.ascontiguousarray)");

  std::string const& d = array.dtype;
  if (d.size() < 3) throw Error("npy file '" + path + "': unsupported dtype '" + d + "'");
  char const order = d[0];
  char const kind = d[1];
  std::string const width_text = d.substr(2);
  std::size_t item = 0;
  for (char c : width_text) {
    if (c < '0' || c > '9') throw Error("npy file '" + path + "': unsupported dtype '" + d + "'");
    item = item * 10 + std::size_t(c - '0');
  }
  if (order == '>' || (order == '!'))
    throw Error("npy file '" + path + "': big-endian dtype '" + d + "' is not supported (use little-endian '<')");
  if (order != '<' && order != '|' && order != '=')
    throw Error("npy file '" + path + "': unsupported dtype '" + d + "'");
  if (!detail::host_is_little_endian())
    throw Error("npy file '" + path + "': dpk reads npy files only on little-endian hosts");

  // The number of values, refusing shapes whose product overflows (a zero extent makes it 0).
  std::size_t count = 1;
  bool const empty = std::find(array.shape.begin(), array.shape.end(), std::size_t(0)) != array.shape.end();
  for (std::size_t extent : array.shape) {
    if (!empty && count > SIZE_MAX / extent)
      throw Error("npy file '" + path + "': shape " + detail::npy_shape_string(array.shape) +
                  " has more values than fit in memory (corrupt header)");
    count = empty ? 0 : count * extent;
  }
  std::size_t const offset = preamble + header_length;
  // Check the size before computing count * item, so that a corrupt shape cannot overflow.
  std::size_t const available = bytes.size() - offset;
  bool const known_type = (kind == 'f' && (item == 4 || item == 8)) ||
                          ((kind == 'i' || kind == 'u') && (item == 1 || item == 2 || item == 4 || item == 8)) ||
                          (kind == 'b' && item == 1);
  if (!known_type)
    throw Error("npy file '" + path + "': unsupported dtype '" + d +
                "' (supported: float32, float64, signed/unsigned integers, bool)");
  if (item != 0 && count > available / item)
    throw Error("npy file '" + path + "': truncated: shape " + detail::npy_shape_string(array.shape) + " of '" + d +
                "' needs " + std::to_string(count) + " x " + std::to_string(item) + " data bytes, file has " +
                std::to_string(available));
  unsigned char const* data = bytes.data() + offset;
  if (kind == 'f' && item == 4) detail::npy_convert<float>(data, count, array.data);
  else if (kind == 'f' && item == 8) detail::npy_convert<double>(data, count, array.data);
  else if (kind == 'i' && item == 1) detail::npy_convert<std::int8_t>(data, count, array.data);
  else if (kind == 'i' && item == 2) detail::npy_convert<std::int16_t>(data, count, array.data);
  else if (kind == 'i' && item == 4) detail::npy_convert<std::int32_t>(data, count, array.data);
  else if (kind == 'i' && item == 8) detail::npy_convert<std::int64_t>(data, count, array.data);
  else if (kind == 'u' && item == 1) detail::npy_convert<std::uint8_t>(data, count, array.data);
  else if (kind == 'u' && item == 2) detail::npy_convert<std::uint16_t>(data, count, array.data);
  else if (kind == 'u' && item == 4) detail::npy_convert<std::uint32_t>(data, count, array.data);
  else if (kind == 'u' && item == 8) detail::npy_convert<std::uint64_t>(data, count, array.data);
  else {  // bool: any non-zero byte is true
    array.data.resize(count);
    for (std::size_t i = 0; i < count; ++i) array.data[i] = data[i] ? 1.0 : 0.0;
  }
  return array;
}

/// Reads a `.npy` file (see parse_npy). Throws dpk::Error naming the file when it is missing or
/// unreadable, or for any problem parse_npy reports.
inline NpyArray read_npy(std::string const& path) {
  // POSIX reads: a failing read (EIO, ...) is an error with its reason, not a short file.
  int const fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    throw Error("npy file '" + path + "': cannot open (missing or unreadable: " + std::strerror(errno) + ")");
  std::string bytes;
  char buffer[65536];
  for (;;) {
    ssize_t const n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string const reason = std::strerror(errno);
      ::close(fd);
      throw Error("npy file '" + path + "': read failed after " + std::to_string(bytes.size()) + " bytes (" + reason +
                  ")");
    }
    if (n == 0) break;
    bytes.append(buffer, std::size_t(n));
  }
  ::close(fd);
  return parse_npy(bytes, path);
}

/// Writes `product(shape)` values from `data` to a `.npy` file with the given element type and
/// format version. The file is written to `path + ".tmp"` and renamed, so a reader never sees a
/// half-written file. Throws dpk::Error when the file cannot be written.
inline void write_npy(std::string const& path, std::vector<std::size_t> const& shape, double const* data,
                      NpyWriteOptions const& options) {
  std::string const& d = options.dtype;
  if (d != "<f8" && d != "<f4" && d != "<i4" && d != "<i8")
    throw Error("write_npy '" + path + "': unsupported dtype '" + d + "' (use <f8, <f4, <i4 or <i8)");
  if (options.version < 1 || options.version > 3)
    throw Error("write_npy '" + path + "': unsupported npy version " + std::to_string(options.version));
  std::string dict = "{'descr': '" + d + "', 'fortran_order': " + (options.fortran_order ? "True" : "False") +
                     ", 'shape': " + detail::npy_shape_string(shape) + ", }";
  std::size_t const preamble = options.version == 1 ? 10 : 12;
  // Pad with spaces and a final newline so that the data starts on a 64-byte boundary.
  std::size_t total = preamble + dict.size() + 1;
  std::size_t const padding = (64 - total % 64) % 64;
  dict.append(padding, ' ');
  dict += '\n';
  std::size_t const header_length = dict.size();
  if (options.version == 1 && header_length > 65535)
    throw Error("write_npy '" + path + "': header too long for npy version 1");

  std::string out;
  out.append("\x93NUMPY", 6);
  out.push_back(static_cast<char>(options.version));
  out.push_back('\0');
  out.push_back(static_cast<char>(header_length & 0xff));
  out.push_back(static_cast<char>((header_length >> 8) & 0xff));
  if (options.version != 1) {
    out.push_back(static_cast<char>((header_length >> 16) & 0xff));
    out.push_back(static_cast<char>((header_length >> 24) & 0xff));
  }
  out += dict;
  std::size_t count = 1;
  for (std::size_t extent : shape) count *= extent;
  auto append = [&out](auto value) {
    char buffer[sizeof(value)];
    std::memcpy(buffer, &value, sizeof(value));
    out.append(buffer, sizeof(value));
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (d == "<f8") append(data[i]);
    else if (d == "<f4") append(static_cast<float>(data[i]));
    else if (d == "<i4") append(static_cast<std::int32_t>(data[i]));
    else append(static_cast<std::int64_t>(data[i]));
  }

  std::string const temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) throw Error("write_npy: cannot open '" + temporary + "' for writing");
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!file) throw Error("write_npy: writing '" + temporary + "' failed");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw Error("write_npy: cannot rename '" + temporary + "' to '" + path + "'");
  }
}

/// Writes `product(shape)` float64 values from `data` as a little-endian `<f8` npy v1 file
/// (via `path + ".tmp"` and a rename).
inline void write_npy(std::string const& path, std::vector<std::size_t> const& shape, double const* data) {
  write_npy(path, shape, data, NpyWriteOptions{});
}

}  // namespace dpk
