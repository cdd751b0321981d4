// I/O: npy files, deepmd/npy systems, input.json, batch sampling, and every bad input of issue 2.
// Bad-input fixtures are written by the tests themselves into a scratch folder (no Python needed).
#include <doctest/doctest.h>

#include <dpk/io/npy.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;

namespace {

/// A fresh empty scratch folder per test case (under the system temp folder).
fs::path scratch(std::string const& name) {
  fs::path const dir = fs::temp_directory_path() / ("dpk_test_io_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// Writes `bytes` verbatim to `path`.
void write_bytes(fs::path const& path, std::string const& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Reads the whole file as bytes.
std::string read_bytes(fs::path const& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// A v1 npy file with a hand-written header dictionary and payload.
std::string npy_v1(std::string dict, std::string const& payload) {
  std::size_t const total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict + payload;
}

/// Runs `f`, requires a dpk::Error, and checks its message contains every string in `parts`.
template <class F>
void check_error(F&& f, std::vector<std::string> const& parts) {
  std::string message;
  try {
    f();
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (auto const& p : parts) CHECK_MESSAGE(message.find(p) != std::string::npos, "missing '" << p << "'");
}

}  // namespace

// ------------------------------------------------------------------------------------ npy

TEST_CASE("npy round trip: f8/f4/i4/i8 at versions 1, 2 and 3") {
  fs::path const dir = scratch("npy_round_trip");
  std::vector<double> values(2 * 3 * 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25 * double(i) - 3.0;
  for (std::string dtype : {"<f8", "<f4", "<i4", "<i8"}) {
    for (int version : {1, 2, 3}) {
      std::string const path = (dir / ("a" + dtype.substr(1) + std::to_string(version) + ".npy")).string();
      dpk::write_npy(path, {2, 3, 4}, values.data(), dpk::NpyWriteOptions{dtype, version, false});
      CHECK_FALSE(fs::exists(path + ".tmp"));
      std::string const bytes = read_bytes(path);
      std::size_t const preamble = version == 1 ? 10 : 12;
      std::size_t const header = std::size_t((unsigned char)bytes[8]) | (std::size_t((unsigned char)bytes[9]) << 8);
      CHECK((preamble + header) % 64 == 0);
      CHECK(bytes[6] == char(version));
      dpk::NpyArray const a = dpk::read_npy(path);
      CHECK(a.dtype == dtype);
      REQUIRE(a.shape == std::vector<std::size_t>{2, 3, 4});
      REQUIRE(a.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        double const expect = dtype[1] == 'i' ? double(std::int64_t(values[i])) : values[i];
        CHECK(a.data[i] == expect);
      }
    }
  }
  // The default overload is <f8 v1, and exact for arbitrary doubles.
  double const odd[3] = {1.0 / 3.0, -1e-300, 6.02214076e23};
  std::string const path = (dir / "default.npy").string();
  dpk::write_npy(path, {3}, odd);
  dpk::NpyArray const a = dpk::read_npy(path);
  CHECK(a.dtype == "<f8");
  CHECK(a.shape == std::vector<std::size_t>{3});
  for (int i = 0; i < 3; ++i) CHECK(a.data[i] == odd[i]);
  CHECK(read_bytes(path)[6] == 1);
  fs::remove_all(dir);
}

TEST_CASE("npy scalars, empty arrays, u1/b1 and Python-2 style headers") {
  fs::path const dir = scratch("npy_misc");
  double const x = 2.5;
  dpk::write_npy((dir / "s.npy").string(), {}, &x);
  dpk::NpyArray s = dpk::read_npy((dir / "s.npy").string());
  CHECK(s.shape.empty());
  CHECK(s.size() == 1);
  CHECK(s.data.at(0) == 2.5);
  dpk::write_npy((dir / "e.npy").string(), {0, 3}, nullptr);
  CHECK(dpk::read_npy((dir / "e.npy").string()).data.empty());
  write_bytes(dir / "u1.npy", npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x02\xff", 3)));
  dpk::NpyArray u = dpk::read_npy((dir / "u1.npy").string());
  CHECK(u.data == std::vector<double>{1, 2, 255});
  write_bytes(dir / "b1.npy", npy_v1("{'descr': '|b1', 'fortran_order': False, 'shape': (2L,), }", std::string("\x00\x01", 2)));
  CHECK(dpk::read_npy((dir / "b1.npy").string()).data == std::vector<double>{0, 1});
  fs::remove_all(dir);
}

TEST_CASE("npy bad input: each problem is one clear error naming the file") {
  fs::path const dir = scratch("npy_bad");
  std::string const good_f8(8 * 4, '\0');
  auto path = [&](char const* name) { return (dir / name).string(); };

  SUBCASE("missing file") {
    check_error([&] { dpk::read_npy(path("nothere.npy")); }, {"nothere.npy", "cannot open"});
  }
  SUBCASE("not an npy file") {
    write_bytes(dir / "text.npy", "this is a text file, not numpy\n");
    check_error([&] { dpk::read_npy(path("text.npy")); }, {"text.npy", "not an npy file"});
  }
  SUBCASE("empty file") {
    write_bytes(dir / "empty.npy", "");
    check_error([&] { dpk::read_npy(path("empty.npy")); }, {"empty.npy", "not an npy file"});
  }
  SUBCASE("truncated data") {
    write_bytes(dir / "trunc.npy", npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", good_f8.substr(0, 20)));
    check_error([&] { dpk::read_npy(path("trunc.npy")); }, {"trunc.npy", "truncated"});
  }
  SUBCASE("truncated header") {
    std::string const full = npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", good_f8);
    write_bytes(dir / "trunch.npy", full.substr(0, 40));
    check_error([&] { dpk::read_npy(path("trunch.npy")); }, {"trunch.npy", "truncated"});
  }
  SUBCASE("fortran order") {
    write_bytes(dir / "fortran.npy", npy_v1("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", good_f8));
    check_error([&] { dpk::read_npy(path("fortran.npy")); }, {"fortran.npy", "fortran_order"});
  }
  SUBCASE("unsupported dtype") {
    write_bytes(dir / "complex.npy", npy_v1("{'descr': '<c16', 'fortran_order': False, 'shape': (2,), }", std::string(32, '\0')));
    check_error([&] { dpk::read_npy(path("complex.npy")); }, {"complex.npy", "unsupported dtype", "<c16"});
    write_bytes(dir / "half.npy", npy_v1("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", std::string(4, '\0')));
    check_error([&] { dpk::read_npy(path("half.npy")); }, {"half.npy", "unsupported dtype", "<f2"});
    write_bytes(dir / "struct.npy", npy_v1("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')));
    check_error([&] { dpk::read_npy(path("struct.npy")); }, {"struct.npy", "unsupported dtype"});
    write_bytes(dir / "str.npy", npy_v1("{'descr': '<U4', 'fortran_order': False, 'shape': (2,), }", std::string(32, '\0')));
    check_error([&] { dpk::read_npy(path("str.npy")); }, {"str.npy", "unsupported dtype"});
  }
  SUBCASE("big-endian") {
    write_bytes(dir / "big.npy", npy_v1("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }", good_f8));
    check_error([&] { dpk::read_npy(path("big.npy")); }, {"big.npy", "big-endian"});
  }
  SUBCASE("unknown version and malformed header") {
    std::string v9 = npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", good_f8);
    v9[6] = 9;
    write_bytes(dir / "v9.npy", v9);
    check_error([&] { dpk::read_npy(path("v9.npy")); }, {"v9.npy", "version 9"});
    write_bytes(dir / "hdr.npy", npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': [2, 2], }", good_f8));
    check_error([&] { dpk::read_npy(path("hdr.npy")); }, {"hdr.npy", "shape"});
    write_bytes(dir / "nokey.npy", npy_v1("{'descr': '<f8', 'shape': (2, 2), }", good_f8));
    check_error([&] { dpk::read_npy(path("nokey.npy")); }, {"nokey.npy", "fortran_order"});
  }
  fs::remove_all(dir);
}
