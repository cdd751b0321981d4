// I/O: npy files, deepmd/npy systems, input.json, batch sampling, and every bad input of issue 2.
// Bad-input fixtures are written by the tests themselves into a scratch folder (no Python needed).
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include "error_test_helpers.hpp"

#include <dpk/io.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
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

using dpk_test::check_error;

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

// ------------------------------------------------------------------------------ fixtures

namespace {

std::string const water_data = std::string(dpk_test::source_dir()) + "/examples/water/data";
std::string const water_input = std::string(dpk_test::source_dir()) + "/examples/water/se_e2_a/input.json";

/// A small deepmd/npy system: 3 atoms (types 0 1 1, elements O H), `sets` sets of `frames`
/// frames each, float64 arrays (float32 when `f32`), values that are easy to predict.
struct TinySystem {
  fs::path dir;
  int natoms = 3;
  std::vector<int> types = {0, 1, 1};
  std::vector<std::string> elements = {"O", "H"};

  TinySystem(fs::path d, int sets = 1, int frames = 2, bool virial = false, bool f32 = false) : dir(std::move(d)) {
    fs::create_directories(dir);
    write_types();
    write_bytes(dir / "type_map.raw", "O\nH\n");
    for (int s = 0; s < sets; ++s) write_set(s, frames, virial, f32);
  }
  void write_types() const {
    std::string text;
    for (int t : types) text += std::to_string(t) + "\n";
    write_bytes(dir / "type.raw", text);
  }
  fs::path set_dir(int s) const {
    char name[16];
    std::snprintf(name, sizeof name, "set.%03d", s);
    return dir / name;
  }
  /// Value of coordinate component c of atom a in frame f of set s.
  static double coord_value(int s, int f, int a, int c) { return 10.0 * s + f + 0.1 * a + 0.01 * c; }
  void write_array(int s, std::string const& name, std::vector<std::size_t> shape, std::vector<double> const& v,
                   bool f32 = false) const {
    fs::create_directories(set_dir(s));
    dpk::write_npy((set_dir(s) / name).string(), shape, v.data(), dpk::NpyWriteOptions{f32 ? "<f4" : "<f8", 1, false});
  }
  void write_set(int s, int frames, bool virial, bool f32) const {
    std::size_t const nf = std::size_t(frames), n3 = std::size_t(natoms) * 3;
    std::vector<double> coord(nf * n3), force(nf * n3), box(nf * 9, 0.0), energy(nf), vir(nf * 9);
    for (int f = 0; f < frames; ++f) {
      for (int a = 0; a < natoms; ++a)
        for (int c = 0; c < 3; ++c) {
          coord[std::size_t(f) * n3 + std::size_t(a * 3 + c)] = coord_value(s, f, a, c);
          force[std::size_t(f) * n3 + std::size_t(a * 3 + c)] = -0.5 * coord_value(s, f, a, c);
        }
      box[std::size_t(f) * 9 + 0] = box[std::size_t(f) * 9 + 4] = box[std::size_t(f) * 9 + 8] = 8.0 + s;
      energy[std::size_t(f)] = -100.0 - 10.0 * s - f;
      for (int k = 0; k < 9; ++k) vir[std::size_t(f) * 9 + std::size_t(k)] = 0.125 * k + s + f;
    }
    write_array(s, "coord.npy", {nf, n3}, coord, f32);
    write_array(s, "force.npy", {nf, n3}, force, f32);
    write_array(s, "box.npy", {nf, 9}, box, f32);
    write_array(s, "energy.npy", {nf}, energy, f32);
    if (virial) write_array(s, "virial.npy", {nf, 9}, vir, f32);
  }
};

/// Reads a first float32 value of an npy file straight from its bytes (independent of read_npy).
float first_float32(std::string const& path) {
  std::string const bytes = read_bytes(path);
  REQUIRE(bytes.size() > 10);
  std::size_t const header = std::size_t((unsigned char)bytes[8]) | (std::size_t((unsigned char)bytes[9]) << 8);
  float value;
  std::memcpy(&value, bytes.data() + 10 + header, 4);
  return value;
}

}  // namespace

// ------------------------------------------------------------------------------ systems

TEST_CASE("water example: 4 systems of 192 atoms, 80/160/80/80 frames, values as stored") {
  std::vector<std::string> paths;
  for (int i = 0; i < 4; ++i) paths.push_back(water_data + "/data_" + std::to_string(i));
  std::vector<dpk::System> const systems = dpk::read_systems(paths, {"O", "H"});
  REQUIRE(systems.size() == 4);
  int const frames[4] = {80, 160, 80, 80};
  for (int i = 0; i < 4; ++i) {
    dpk::System const& s = systems[std::size_t(i)];
    CHECK(s.natoms == 192);
    CHECK(s.nframes == frames[i]);
    CHECK(s.periodic);
    CHECK_FALSE(s.has_virial);
    CHECK(s.type_map == std::vector<std::string>{"O", "H"});
    CHECK(s.coord.size() == std::size_t(frames[i]) * 192 * 3);
    CHECK(s.force.size() == std::size_t(frames[i]) * 192 * 3);
    CHECK(s.box.size() == std::size_t(frames[i]) * 9);
    CHECK(s.energy.size() == std::size_t(frames[i]));
    CHECK(std::count(s.types.begin(), s.types.end(), 0) == 64);
    CHECK(std::count(s.types.begin(), s.types.end(), 1) == 128);
    CHECK(s.coord[0] == double(first_float32(paths[std::size_t(i)] + "/set.000/coord.npy")));
    CHECK(s.energy[0] == double(first_float32(paths[std::size_t(i)] + "/set.000/energy.npy")));
    CHECK(s.box[0] == doctest::Approx(12.444661).epsilon(1e-6));
    CHECK(s.energy[0] / 192 == doctest::Approx(-155.956).epsilon(1e-3));
  }
  // data_1's second set follows its first.
  CHECK(systems[1].coord[80 * 192 * 3] == double(first_float32(paths[1] + "/set.001/coord.npy")));
  // Without a model type_map the file's indices are kept.
  CHECK(dpk::read_system(paths[0], {}).types == systems[0].types);
}

TEST_CASE("type remapping by element name with a reversed type_map") {
  dpk::System const plain = dpk::read_system(water_data + "/data_0", {"O", "H"});
  dpk::System const reversed = dpk::read_system(water_data + "/data_0", {"H", "O"});
  REQUIRE(plain.types.size() == reversed.types.size());
  for (std::size_t a = 0; a < plain.types.size(); ++a) CHECK(reversed.types[a] == 1 - plain.types[a]);
  // A model with more elements than the data: indices follow the model's order.
  dpk::System const wider = dpk::read_system(water_data + "/data_0", {"C", "H", "N", "O"});
  for (std::size_t a = 0; a < plain.types.size(); ++a) CHECK(wider.types[a] == (plain.types[a] == 0 ? 3 : 1));
}

TEST_CASE("small systems: several sets, float32/float64, virial, nopbc, string expansion") {
  fs::path const dir = scratch("small_systems");
  TinySystem const two_sets(dir / "root" / "a", 2, 3, true);
  TinySystem const single(dir / "root" / "b" / "inner", 1, 2, false, true);
  dpk::System a = dpk::read_system(two_sets.dir.string(), {"O", "H"});
  CHECK(a.nframes == 6);
  CHECK(a.has_virial);
  CHECK(a.virial.size() == 6 * 9);
  CHECK(a.coord[(3 * 9) + 4] == TinySystem::coord_value(1, 0, 1, 1));  // frame 3 = set.001 frame 0
  CHECK(a.energy[4] == -111.0);
  CHECK(a.virial[9 * 5 + 8] == 0.125 * 8 + 1 + 2);
  dpk::System b = dpk::read_system(single.dir.string(), {});
  CHECK(b.nframes == 2);
  CHECK(b.coord[4] == double(float(TinySystem::coord_value(0, 0, 1, 1))));

  // virial.npy in only one of two sets: no virial for the system.
  fs::remove(two_sets.set_dir(1) / "virial.npy");
  CHECK_FALSE(dpk::read_system(two_sets.dir.string(), {}).has_virial);

  // nopbc: box.npy optional, box zeros, periodic false.
  write_bytes(single.dir / "nopbc", "");
  fs::remove(single.set_dir(0) / "box.npy");
  dpk::System n = dpk::read_system(single.dir.string(), {});
  CHECK_FALSE(n.periodic);
  CHECK(n.box == std::vector<double>(2 * 9, 0.0));

  // A string `systems` expands to every folder with type.raw below it, sorted.
  std::vector<std::string> found = dpk::expand_systems((dir / "root").string());
  CHECK(found == std::vector<std::string>{two_sets.dir.string(), single.dir.string()});
  fs::remove_all(dir);
}

TEST_CASE("deepmd/npy bad input: each problem is one error naming the file") {
  fs::path const dir = scratch("system_bad");
  TinySystem sys(dir / "sys", 1, 2);
  std::string const path = sys.dir.string();
  auto read = [&] { dpk::read_system(path, {"O", "H"}); };

  SUBCASE("coord shape disagrees with type.raw") {
    sys.write_array(0, "coord.npy", {2, 8}, std::vector<double>(16, 1.0));
    check_error(read, {"coord.npy", "(nframes, 9)", "3 atoms", "(2, 8)"});
  }
  SUBCASE("force shape disagrees with coord/type.raw") {
    sys.write_array(0, "force.npy", {2, 6}, std::vector<double>(12, 1.0));
    check_error(read, {"force.npy", "expected shape (2, 9)", "got (2, 6)"});
  }
  SUBCASE("frame count disagrees between files") {
    sys.write_array(0, "energy.npy", {3}, std::vector<double>(3, 1.0));
    check_error(read, {"energy.npy", "expected shape (2,)", "got (3,)"});
  }
  SUBCASE("box shape") {
    sys.write_array(0, "box.npy", {2, 3}, std::vector<double>(6, 1.0));
    check_error(read, {"box.npy", "(2, 9)"});
  }
  SUBCASE("missing set directory") {
    fs::remove_all(sys.set_dir(0));
    check_error(read, {path, "no set.* directory"});
  }
  SUBCASE("missing array file") {
    fs::remove(sys.set_dir(0) / "energy.npy");
    check_error(read, {"set.000/energy.npy", "missing"});
    fs::remove(sys.set_dir(0) / "box.npy");
    check_error(read, {"set.000/box.npy", "missing"});
  }
  SUBCASE("missing type.raw or not a directory") {
    fs::remove(sys.dir / "type.raw");
    check_error(read, {"type.raw", "cannot open"});
    check_error([&] { dpk::read_system((dir / "nowhere").string(), {}); }, {"nowhere", "not a directory"});
  }
  SUBCASE("type index beyond type_map.raw") {
    sys.types = {0, 2, 1};
    sys.write_types();
    check_error(read, {"type.raw", "atom 1", "type index 2", "type_map.raw"});
  }
  SUBCASE("type index beyond the model's type_map without type_map.raw") {
    fs::remove(sys.dir / "type_map.raw");
    sys.types = {0, 2, 1};
    sys.write_types();
    check_error(read, {"type.raw", "type index 2", "model's type_map"});
  }
  SUBCASE("malformed type.raw") {
    write_bytes(sys.dir / "type.raw", "0\n1\nx\n");
    check_error(read, {"type.raw", "atom 2", "'x'"});
    write_bytes(sys.dir / "type.raw", "0\n-1\n1\n");
    check_error(read, {"type.raw", "atom 1", "'-1'"});
  }
  SUBCASE("element missing from the model's type_map") {
    check_error([&] { dpk::read_system(path, {"H", "C"}); }, {"type_map.raw", "element 'O'", "[H, C]"});
  }
  SUBCASE("NaN in coordinates") {
    std::vector<double> coord(18, 1.0);
    coord[9 + 4] = std::numeric_limits<double>::quiet_NaN();
    sys.write_array(0, "coord.npy", {2, 9}, coord);
    check_error(read, {"coord.npy", "NaN", "frame 1"});
  }
  SUBCASE("Inf in labels and box") {
    std::vector<double> force(18, 1.0);
    force[3] = std::numeric_limits<double>::infinity();
    sys.write_array(0, "force.npy", {2, 9}, force, true);  // float32 Inf too
    check_error(read, {"force.npy", "Inf", "frame 0"});
    sys.write_set(0, 2, false, false);
    sys.write_array(0, "energy.npy", {2}, {1.0, -std::numeric_limits<double>::infinity()});
    check_error(read, {"energy.npy", "Inf", "frame 1"});
    sys.write_set(0, 2, false, false);
    std::vector<double> box(18, 1.0);
    box[17] = std::numeric_limits<double>::quiet_NaN();
    sys.write_array(0, "box.npy", {2, 9}, box);
    check_error(read, {"box.npy", "NaN", "frame 1"});
  }
  SUBCASE("NaN in virial") {
    std::vector<double> vir(18, 1.0);
    vir[0] = std::numeric_limits<double>::quiet_NaN();
    sys.write_array(0, "virial.npy", {2, 9}, vir);
    check_error(read, {"virial.npy", "NaN", "frame 0"});
  }
  SUBCASE("empty system: no atoms") {
    write_bytes(sys.dir / "type.raw", "\n");
    check_error(read, {path, "empty system"});
  }
  SUBCASE("empty system: no frames") {
    fs::remove_all(sys.set_dir(0));
    sys.write_array(0, "coord.npy", {0, 9}, {});
    sys.write_array(0, "box.npy", {0, 9}, {});
    sys.write_array(0, "energy.npy", {0}, {});
    sys.write_array(0, "force.npy", {0, 9}, {});
    check_error(read, {path, "empty system"});
  }
  SUBCASE("a bad npy inside a system names the file") {
    write_bytes(sys.set_dir(0) / "force.npy", "garbage");
    check_error(read, {"set.000/force.npy", "not an npy file"});
  }
  SUBCASE("no systems") {
    check_error([&] { dpk::read_systems({}, {}); }, {"no systems"});
    check_error([&] { dpk::expand_systems(dir.string() + "/sys/set.000"); }, {"set.000", "no directory containing type.raw"});
  }
  fs::remove_all(dir);
}

// ------------------------------------------------------------------------------ batch sizes, sampler

TEST_CASE("batch_size: auto = ceil(32/natoms), auto:N = ceil(N/natoms), fixed, per-system list") {
  dpk::BatchSize automatic;
  CHECK(automatic.frames_for(192) == 1);
  CHECK(automatic.frames_for(3) == 11);
  dpk::BatchSize auto400{true, 400, {}};
  CHECK(auto400.frames_for(192) == 3);
  dpk::BatchSize fixed{false, 4, {}};
  CHECK(fixed.frames_for(192) == 4);
  dpk::BatchSize list{false, 2, {2, 5}};
  CHECK(list.frames_for(std::size_t(1), 192) == 5);
  CHECK(list.frames_for(std::size_t(0), 192) == 2);

  std::vector<dpk::System> systems = dpk::read_systems({water_data + "/data_0"}, {"O", "H"});
  dpk::DataSampler sampler(systems, auto400, 1);
  CHECK(sampler.frames_per_batch(0) == 3);
  dpk::HostBatch const b = sampler.next();
  CHECK(b.nframes == 3);
  CHECK(b.natoms == 192);
  CHECK(b.coord.size() == 3 * 192 * 3);
  CHECK(dpk::DataSampler(systems, automatic, 1).next().nframes == 1);
}

TEST_CASE("sampler: systems drawn in proportion to batches (1 frame each here); frames shuffled; deterministic") {
  std::vector<dpk::System> systems =
      dpk::read_systems({water_data + "/data_0", water_data + "/data_1"}, {"O", "H"});  // 80 and 160 frames
  dpk::DataSampler sampler(systems, dpk::BatchSize{}, 42);
  auto const p = sampler.probabilities();
  CHECK(p[0] == doctest::Approx(1.0 / 3.0));
  CHECK(p[1] == doctest::Approx(2.0 / 3.0));
  int const draws = 30000;
  int count1 = 0;
  std::vector<int> seen0(80, 0);
  int drawn0 = 0;
  for (int i = 0; i < draws; ++i) {
    dpk::HostBatch const b = sampler.next();
    REQUIRE(b.nframes == 1);
    if (b.system == 1) ++count1;
    // Every 80 draws of system 0 visit each of its frames once (one pass of a shuffled order).
    if (b.system == 0 && drawn0 < 800) {
      ++seen0[std::size_t(b.frames[0])];
      ++drawn0;
    }
    // The batch holds the frame it names.
    if (i < 50) {
      dpk::System const& s = systems[std::size_t(b.system)];
      CHECK(b.energy[0] == s.energy[std::size_t(b.frames[0])]);
      CHECK(b.coord[5] == s.coord[std::size_t(b.frames[0]) * 192 * 3 + 5]);
    }
  }
  // Binomial(30000, 2/3): sd ~ 82; allow 5 sd.
  CHECK(std::abs(count1 - 2 * draws / 3) < 410);
  for (int c : seen0) CHECK(c == 10);

  // Same seed, same batches; other seed, other batches.
  dpk::DataSampler a(systems, dpk::BatchSize{}, 7), b(systems, dpk::BatchSize{}, 7), c(systems, dpk::BatchSize{}, 8);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    dpk::HostBatch const x = a.next(), y = b.next(), z = c.next();
    CHECK(x.system == y.system);
    CHECK(x.frames == y.frames);
    CHECK(x.coord == y.coord);
    differ += (x.system != z.system || x.frames != z.frames);
  }
  CHECK(differ > 100);

  // A restored state continues exactly where the saved one was.
  std::string const state = a.rng_state();
  std::vector<std::vector<int>> expected;
  std::vector<int> expected_systems;
  for (int i = 0; i < 300; ++i) {
    dpk::HostBatch const x = a.next();
    expected.push_back(x.frames);
    expected_systems.push_back(x.system);
  }
  dpk::DataSampler restored(systems, dpk::BatchSize{}, 12345);
  restored.set_rng_state(state);
  for (int i = 0; i < 300; ++i) {
    dpk::HostBatch const x = restored.next();
    CHECK(x.system == expected_systems[std::size_t(i)]);
    CHECK(x.frames == expected[std::size_t(i)]);
  }
  check_error([&] { restored.set_rng_state("garbage"); }, {"set_rng_state"});
  dpk::DataSampler other(dpk::read_systems({water_data + "/data_0"}, {}), dpk::BatchSize{}, 1);
  check_error([&] { other.set_rng_state(state); }, {"set_rng_state", "2 systems"});
}

namespace {

/// tests/data/multi_system/reference.json: what DeePMD-kit 3.2.0 logged and stored.
nlohmann::json multi_system_reference() {
  std::ifstream in(std::string(dpk_test::data_dir()) + "/multi_system/reference.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// input.json text for the three multi_system systems with `batch_size` and `auto_prob` (JSON).
std::string multi_system_input(nlohmann::json const& batch_size, nlohmann::json const& auto_prob) {
  std::string const root = std::string(dpk_test::data_dir()) + "/multi_system/";
  nlohmann::json j = {
      {"model",
       {{"type_map", {"O", "H"}},
        {"descriptor", {{"type", "se_e2_a"}, {"sel", {46, 92}}, {"rcut", 6.0}, {"rcut_smth", 0.5}, {"neuron", {4, 8}},
                        {"axis_neuron", 4}, {"seed", 1}, {"precision", "float64"}}},
        {"fitting_net", {{"neuron", {8, 8}}, {"seed", 1}, {"precision", "float64"}}}}},
      {"learning_rate", {{"type", "exp"}, {"decay_steps", 5000}, {"start_lr", 0.001}, {"stop_lr", 3.51e-8}}},
      {"loss", {{"type", "ener"}}},
      {"training",
       {{"training_data", {{"systems", {root + "sys_a", root + "sys_b", root + "sys_c"}}, {"batch_size", batch_size}}},
        {"numb_steps", 1},
        {"seed", 10}}}};
  if (!auto_prob.is_null()) j["training"]["training_data"]["auto_prob"] = auto_prob;
  return j.dump();
}

}  // namespace

TEST_CASE("sampler: system probabilities equal DeePMD-kit's prob_sys_size / prob_uniform / blocks") {
  nlohmann::json const reference = multi_system_reference();
  REQUIRE(reference["cases"].size() >= 5);
  for (auto const& item : reference["cases"].items()) {
    // No structured binding here: doctest's INFO captures in a lambda, which nvcc (C++17) refuses.
    std::string const name = item.key();
    nlohmann::json const& c = item.value();
    INFO("case " << name);
    dpk::InputConfig const config = dpk::parse_input(multi_system_input(c["batch_size"], c["auto_prob"]), name, "/");
    dpk::DataConfig const& data = config.training.training_data;
    dpk::DataSampler const sampler = dpk::make_sampler(data, config.type_map, 1);
    auto const& systems = sampler.systems();
    REQUIRE(systems.size() == 3);
    std::vector<long> const batches = dpk::system_batch_counts(systems, data.batch_size);
    std::vector<double> const p = sampler.probabilities();
    std::vector<double> frame_share(3);
    for (std::size_t s = 0; s < 3; ++s) {
      CHECK(systems[s].natoms == c["natoms"][s].get<int>());
      CHECK(data.batch_size.frames_for(s, systems[s].natoms) == c["frames_per_batch"][s].get<int>());
      CHECK(batches[s] == c["nbatches"][s].get<long>());
      CHECK(std::fabs(p[s] - c["prob"][s].get<double>()) <= 1e-15);
      // DeePMD-kit's log prints 4 significant digits.
      CHECK(std::fabs(p[s] - c["logged_prob"][s].get<double>()) <= 5e-4 * c["logged_prob"][s].get<double>());
      frame_share[s] = double(systems[s].nframes) / 17.0;
    }
    // What training.num_epoch multiplies (DeePMD-kit's compute_total_numb_batch).
    CHECK(dpk::deepmd_total_batches(data, systems) == c["total_numb_batch"].get<long>());
    // dpk's old convention (frame counts) gives other numbers for every prob_sys_size case here.
    double largest = 0;
    for (std::size_t s = 0; s < 3; ++s) largest = std::max(largest, std::fabs(p[s] - frame_share[s]));
    if (c["auto_prob"].is_null()) CHECK(largest > 0.03);
  }
}

TEST_CASE("input.json: auto_prob forms and their errors") {
  auto prob = [](std::string const& style) {
    dpk::InputConfig const config = dpk::parse_input(multi_system_input("auto", style), "input.json", "/");
    return config.training.training_data;
  };
  dpk::DataConfig d = prob("prob_sys_size;0:1:0.25;1:3:0.75");
  CHECK(d.auto_prob == "prob_sys_size");
  REQUIRE(d.prob_blocks.size() == 2);
  CHECK(d.prob_blocks[1].begin == 1);
  CHECK(d.prob_blocks[1].end == 3);
  CHECK(d.prob_blocks[1].weight == 0.75);
  CHECK(prob("prob_uniform").prob_blocks.empty());
  // A block may leave systems out: they are never drawn (DeePMD-kit gives them probability 0).
  d = prob("prob_sys_size;1:3:1");
  auto const p = dpk::make_sampler(d, {"O", "H"}, 1).probabilities();
  CHECK(p[0] == 0.0);
  CHECK(std::fabs(p[1] - 0.5) < 1e-15);  // sys_b and sys_c: 1 batch each with "auto"
  std::string const key = "training.training_data.auto_prob";
  check_error([&] { prob("prob_foo"); }, {"input.json", key, "\"prob_foo\"", "prob_sys_size;begin:end:weight"});
  check_error([&] { prob("prob_sys_size;0:1"); }, {key, "\"0:1\" is not begin:end:weight"});
  check_error([&] { prob("prob_sys_size;0:4:1"); }, {key, "0 <= begin < end <= 3"});
  check_error([&] { prob("prob_sys_size;0:2:1;1:3:1"); }, {key, "overlaps an earlier block (system 1)"});
  check_error([&] { prob("prob_sys_size;0:2:-1"); }, {key, "negative"});
  check_error([&] { prob("prob_sys_size;0:2:0"); }, {key, "sum to zero"});
  check_error([&] { prob("prob_sys_size;"); }, {key, "no blocks"});
}

TEST_CASE("sampler: next_of draws the next batch of one system, continuing its frame order") {
  std::string const root = std::string(dpk_test::data_dir()) + "/multi_system/";
  std::vector<dpk::System> systems = dpk::read_systems({root + "sys_a", root + "sys_b", root + "sys_c"}, {"O", "H"});
  CHECK(systems[0].set_nframes == std::vector<int>{6, 4});
  CHECK(systems[2].set_nframes == std::vector<int>{2});
  dpk::DataSampler sampler(systems, dpk::BatchSize{false, 2, {}}, 3);
  std::vector<int> seen(10, 0);
  dpk::HostBatch b;
  for (int i = 0; i < 10; ++i) {  // two passes over sys_a's 10 frames
    sampler.next_of(0, b);
    CHECK(b.system == 0);
    REQUIRE(b.nframes == 2);
    for (int f : b.frames) ++seen[std::size_t(f)];
  }
  for (int n : seen) CHECK(n == 2);
  sampler.next_of(2, b);
  CHECK(b.system == 2);
  CHECK(b.periodic == false);
  check_error([&] { sampler.next_of(3, b); }, {"next_of", "out of range"});
}

TEST_CASE("sampler: reshuffles when fewer than batch_size frames remain; custom weights") {
  fs::path const dir = scratch("sampler_small");
  TinySystem const tiny(dir / "t", 1, 5);
  std::vector<dpk::System> systems = dpk::read_systems({tiny.dir.string()}, {});
  dpk::DataSampler sampler(systems, dpk::BatchSize{false, 2, {}}, 3);
  for (int i = 0; i < 20; ++i) {
    dpk::HostBatch const b = sampler.next();
    CHECK(b.nframes == 2);
    CHECK(b.frames[0] != b.frames[1]);
  }
  // A batch larger than the system holds all its frames.
  CHECK(dpk::DataSampler(systems, dpk::BatchSize{false, 9, {}}, 3).next().nframes == 5);

  // prob_uniform and sys_probs weights.
  TinySystem const big(dir / "u", 1, 50);
  std::vector<dpk::System> two = dpk::read_systems({tiny.dir.string(), big.dir.string()}, {});
  dpk::DataConfig data;
  data.auto_prob = "prob_uniform";
  auto w = dpk::system_weights(data, two);
  CHECK(w == std::vector<double>{1.0, 1.0});
  data.sys_probs = {0.0, 1.0};
  dpk::SamplerOptions options;
  options.weights = dpk::system_weights(data, two);
  dpk::DataSampler only_big(two, dpk::BatchSize{false, 1, {}}, 5, options);
  for (int i = 0; i < 50; ++i) CHECK(only_big.next().system == 1);
  fs::remove_all(dir);
}

TEST_CASE("sampler: the sets walk takes one set at a time in folder order (DeePMD-kit TF); the frames walk one pool") {
  fs::path const dir = scratch("sampler_sets_walk");
  TinySystem const t(dir / "t", 2, 5);  // sets of 5, 5 and 3 frames: frames 0-4, 5-9, 10-12
  t.write_set(2, 3, false, false);
  std::vector<dpk::System> const systems = dpk::read_systems({t.dir.string()}, {});
  REQUIRE(systems[0].set_nframes == std::vector<int>{5, 5, 3});
  auto const set_of = [](int frame) { return frame < 5 ? 0 : frame < 10 ? 1 : 2; };

  SUBCASE("batches of 2: two per 5-frame set (one frame left out), one from the 3-frame set, then set 0 again") {
    dpk::DataSampler sampler(systems, dpk::BatchSize{false, 2, {}}, 3);
    CHECK(sampler.walk() == dpk::FrameWalk::sets);
    std::vector<int> const expected_sets = {0, 0, 1, 1, 2, 0, 0, 1, 1, 2, 0, 0};
    std::vector<int> in_pass;
    for (std::size_t i = 0; i < expected_sets.size(); ++i) {
      dpk::HostBatch const b = sampler.next();
      REQUIRE(b.nframes == 2);
      CHECK(set_of(b.frames[0]) == expected_sets[i]);
      CHECK(set_of(b.frames[1]) == expected_sets[i]);
      CHECK(b.energy[0] == -100.0 - 10.0 * set_of(b.frames[0]) - (b.frames[0] - 5 * set_of(b.frames[0])));
      in_pass.insert(in_pass.end(), b.frames.begin(), b.frames.end());
      if (i == 1 || i == 3 || i == 4) {  // a set's frames are drawn without repeats
        std::sort(in_pass.begin(), in_pass.end());
        CHECK(std::adjacent_find(in_pass.begin(), in_pass.end()) == in_pass.end());
        in_pass.clear();
      }
    }
  }
  SUBCASE("batches of 4: a set smaller than the batch gives a short batch") {
    dpk::DataSampler sampler(systems, dpk::BatchSize{false, 4, {}}, 3);
    std::vector<int> sizes, sets;
    for (int i = 0; i < 6; ++i) {
      dpk::HostBatch const b = sampler.next();
      sizes.push_back(b.nframes);
      sets.push_back(set_of(b.frames[0]));
      for (int f : b.frames) CHECK(set_of(f) == sets.back());
    }
    CHECK(sizes == std::vector<int>{4, 4, 3, 4, 4, 3});
    CHECK(sets == std::vector<int>{0, 1, 2, 0, 1, 2});
  }
  SUBCASE("the frames walk mixes the sets; a restored state continues either walk, its set included") {
    dpk::SamplerOptions frames_walk;
    frames_walk.walk = dpk::FrameWalk::frames;
    dpk::DataSampler pool(systems, dpk::BatchSize{false, 1, {}}, 3, frames_walk);
    std::vector<int> first_sets;
    for (int i = 0; i < 12; ++i) first_sets.push_back(set_of(pool.next().frames[0]));
    CHECK(std::count(first_sets.begin(), first_sets.end(), 0) < 12);  // 13 frames in one shuffled pool

    for (dpk::FrameWalk walk : {dpk::FrameWalk::sets, dpk::FrameWalk::frames}) {
      dpk::SamplerOptions options;
      options.walk = walk;
      dpk::DataSampler a(systems, dpk::BatchSize{false, 2, {}}, 11, options);
      for (int i = 0; i < 3; ++i) a.next();  // into set 1 (sets walk)
      std::string const state = a.rng_state();
      CHECK(state.rfind(std::string("dpk::DataSampler 3 ") + dpk::frame_walk_name(walk) + "\n", 0) == 0);
      dpk::DataSampler b(systems, dpk::BatchSize{false, 2, {}}, 99);  // default walk: sets
      b.set_rng_state(state);
      CHECK(b.walk() == walk);
      for (int i = 0; i < 20; ++i) CHECK(a.next().frames == b.next().frames);
    }
  }
  SUBCASE("a version-2 state (before the sets walk) restores the frames walk; bad set indices are refused") {
    dpk::SamplerOptions frames_walk;
    frames_walk.walk = dpk::FrameWalk::frames;
    dpk::DataSampler a(systems, dpk::BatchSize{false, 1, {}}, 5, frames_walk);
    a.next();
    std::string const v3 = a.rng_state();
    // Version 2 wrote no walk name and no set index: "n cursor frames..." per system.
    std::istringstream in(v3);
    std::string line, v2;
    std::getline(in, line);
    v2 += "dpk::DataSampler 2\n";
    std::getline(in, line);  // engine
    v2 += line + "\n";
    std::getline(in, line);  // systems and sequential position
    v2 += line + "\n";
    std::getline(in, line);  // n cursor set frames...
    std::istringstream fields(line);
    std::string n, cursor, set, rest;
    fields >> n >> cursor >> set;
    std::getline(fields, rest);
    CHECK(set == "0");
    v2 += n + " " + cursor + rest + "\n";
    dpk::DataSampler b(systems, dpk::BatchSize{false, 1, {}}, 99);
    b.set_rng_state(v2);
    CHECK(b.walk() == dpk::FrameWalk::frames);
    for (int i = 0; i < 20; ++i) CHECK(a.next().frames == b.next().frames);

    dpk::DataSampler c(systems, dpk::BatchSize{false, 1, {}}, 5);
    std::string bad = c.rng_state();
    std::size_t const at = bad.rfind("\n5 0 0 ");  // the system line: 5 frames of set 0, cursor 0
    REQUIRE(at != std::string::npos);
    bad.replace(at, 7, "\n5 0 7 ");
    check_error([&] { c.set_rng_state(bad); }, {"set_rng_state", "does not match system"});
    check_error([] { dpk::parse_frame_walk("set", "--frame-walk"); }, {"--frame-walk", "'set'", "\"sets\" or \"frames\""});
    std::vector<dpk::System> empty_set = systems;
    empty_set[0].set_nframes = {5, 0, 8};
    check_error([&] { dpk::DataSampler(empty_set, dpk::BatchSize{false, 1, {}}, 1); }, {"has an empty set"});
  }
  fs::remove_all(dir);
}

TEST_CASE("sampler: sequential mode walks every frame of every system in order") {
  fs::path const dir = scratch("sampler_sequential");
  TinySystem const a(dir / "a", 2, 3), b(dir / "b", 1, 4);
  std::vector<dpk::System> systems = dpk::read_systems({a.dir.string(), b.dir.string()}, {});
  dpk::SamplerOptions options;
  options.mode = dpk::SamplingMode::sequential;
  dpk::DataSampler sampler(systems, dpk::BatchSize{false, 4, {}}, 0, options);
  CHECK(sampler.batches_per_epoch() == 3);  // 6 frames -> 4 + 2; 4 frames -> 4
  std::vector<std::pair<int, std::vector<int>>> walked;
  for (int i = 0; i < 4; ++i) {
    dpk::HostBatch const x = sampler.next();
    walked.emplace_back(x.system, x.frames);
  }
  CHECK(walked[0] == std::make_pair(0, std::vector<int>{0, 1, 2, 3}));
  CHECK(walked[1] == std::make_pair(0, std::vector<int>{4, 5}));
  CHECK(walked[2] == std::make_pair(1, std::vector<int>{0, 1, 2, 3}));
  CHECK(walked[3] == walked[0]);  // wraps around
  dpk::HostBatch const part = sampler.batch(0, 2, 3);
  CHECK(part.frames == std::vector<int>{2, 3, 4});
  CHECK(part.coord[0] == TinySystem::coord_value(0, 2, 0, 0));
  CHECK(part.coord[9] == TinySystem::coord_value(1, 0, 0, 0));  // frame 3 = set.001 frame 0
  check_error([&] { sampler.batch(0, 4, 3); }, {"outside system"});
  fs::remove_all(dir);
}

TEST_CASE_TEMPLATE("upload: host batch to Frames/Labels, types per frame, no reallocation for equal sizes", Scalar,
                   double, float) {
  using Space = dpk::DefaultExecutionSpace;
  using Mem = dpk::memory_space_t<Space>;
  fs::path const dir = scratch(std::string("upload_") + (sizeof(Scalar) == 8 ? "d" : "f"));
  TinySystem const tiny(dir / "t", 1, 4, true);
  std::vector<dpk::System> systems = dpk::read_systems({tiny.dir.string()}, {"O", "H"});
  dpk::SamplerOptions options;
  options.mode = dpk::SamplingMode::sequential;
  dpk::DataSampler sampler(systems, dpk::BatchSize{false, 2, {}}, 0, options);
  dpk::Frames<Scalar, Mem> frames;
  dpk::Labels<Scalar, Mem> labels;
  dpk::HostBatch batch = sampler.next();
  dpk::upload(batch, frames, labels);
  CHECK(frames.nframes == 2);
  CHECK(frames.natoms == 3);
  CHECK(frames.nloc() == 6);
  CHECK(labels.has_virial);
  REQUIRE(frames.coord.extent(0) == 6);
  REQUIRE(frames.types.extent(0) == 6);
  auto coord = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), frames.coord);
  auto types = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), frames.types);
  auto box = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), frames.box);
  auto energy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), labels.energy);
  auto force = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), labels.force);
  auto virial = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), labels.virial);
  for (int f = 0; f < 2; ++f)
    for (int a = 0; a < 3; ++a) {
      CHECK(types(f * 3 + a) == tiny.types[std::size_t(a)]);
      for (int c = 0; c < 3; ++c) {
        CHECK(coord(f * 3 + a, c) == Scalar(TinySystem::coord_value(0, f, a, c)));
        CHECK(force(f * 3 + a, c) == Scalar(-0.5 * TinySystem::coord_value(0, f, a, c)));
      }
    }
  CHECK(box(1, 4) == Scalar(8));
  CHECK(energy(1) == Scalar(-101));
  CHECK(virial(1, 8) == Scalar(0.125 * 8 + 1));
  Scalar const* before = frames.coord.data();
  sampler.next(batch);
  dpk::upload(batch, frames, labels);
  CHECK(frames.coord.data() == before);
  coord = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), frames.coord);
  CHECK(coord(0, 0) == Scalar(TinySystem::coord_value(0, 2, 0, 0)));
  // A smaller batch resizes to the exact size.
  dpk::upload(sampler.batch(0, 0, 1), frames, labels);
  CHECK(frames.coord.extent(0) == 3);
  CHECK(labels.energy.extent(0) == 1);
  fs::remove_all(dir);
}

// ------------------------------------------------------------------------------ input.json

TEST_CASE("input.json of examples/water parses to DeePMD-kit's values") {
  dpk::InputConfig const c = dpk::read_input(water_input);
  CHECK(c.source == water_input);
  CHECK(c.warnings.empty());  // "_comment" keys are accepted silently
  CHECK(c.type_map == std::vector<std::string>{"O", "H"});
  CHECK(c.descriptor.type == "se_e2_a");
  CHECK(c.descriptor.sel == std::vector<int>{46, 92});
  CHECK(c.descriptor.nnei() == 138);
  CHECK(c.descriptor.rcut == 6.0);
  CHECK(c.descriptor.rcut_smth == 0.5);
  CHECK(c.descriptor.neuron == std::vector<int>{25, 50, 100});
  CHECK(c.descriptor.axis_neuron == 16);
  CHECK(c.descriptor.type_one_side);
  CHECK_FALSE(c.descriptor.resnet_dt);
  CHECK(c.descriptor.activation_function == "tanh");
  CHECK(c.descriptor.seed == std::optional<std::uint64_t>(1));
  CHECK(c.precision() == "float64");
  CHECK(c.fitting.neuron == std::vector<int>{240, 240, 240});
  CHECK(c.fitting.resnet_dt);
  CHECK(c.fitting.seed == std::optional<std::uint64_t>(1));
  CHECK(c.learning_rate.type == "exp");
  CHECK(c.learning_rate.decay_steps == 5000);
  CHECK(c.learning_rate.start_lr == 1e-3);
  CHECK(c.learning_rate.stop_lr == 3.51e-8);
  CHECK(c.learning_rate.scale_by_worker == "linear");
  CHECK(c.loss.type == "ener");
  CHECK(c.loss.start_pref_e == 0.02);
  CHECK(c.loss.limit_pref_e == 1.0);
  CHECK(c.loss.start_pref_f == 1000.0);
  CHECK(c.loss.limit_pref_f == 1.0);
  CHECK(c.loss.start_pref_v == 0.0);
  CHECK(c.loss.limit_pref_v == 0.0);
  std::string const folder = fs::path(water_input).parent_path().string();
  std::vector<std::string> expected;
  for (int i = 0; i < 3; ++i)
    expected.push_back((fs::path(folder) / ("../data/data_" + std::to_string(i))).lexically_normal().string());
  CHECK(c.training.training_data.systems == expected);
  CHECK(c.training.training_data.batch_size.automatic);
  CHECK(c.training.training_data.batch_size.value == 32);
  CHECK(c.training.training_data.batch_size.frames_for(192) == 1);
  REQUIRE(c.training.validation_data.has_value());
  CHECK(c.training.validation_data->systems ==
        std::vector<std::string>{(fs::path(folder) / "../data/data_3").lexically_normal().string()});
  CHECK_FALSE(c.training.validation_data->batch_size.automatic);
  CHECK(c.training.validation_data->batch_size.value == 1);
  CHECK(c.training.validation_data->numb_btch == 3);
  CHECK(c.training.numb_steps == 1000000);
  CHECK(c.training.seed == std::optional<std::uint64_t>(10));
  CHECK(c.training.disp_file == "lcurve.out");
  CHECK(c.training.disp_freq == 100);
  CHECK(c.training.save_freq == 1000);
  // The resolved systems load, and the sampler draws 1-frame batches from them.
  dpk::DataSampler sampler = dpk::make_sampler(c.training.training_data, c.type_map, *c.training.seed);
  CHECK(sampler.systems().size() == 3);
  CHECK(sampler.next().nframes == 1);
}

namespace {

/// A minimal valid input (training data given as an absolute folder string).
nlohmann::json minimal_input() {
  return nlohmann::json::parse(R"({
    "model": {"type_map": ["O", "H"],
              "descriptor": {"type": "se_a", "sel": [4, 8], "rcut": 4.0, "rcut_smth": 1.0, "neuron": [4, 8], "axis_neuron": 2},
              "fitting_net": {"neuron": [16, 16]}},
    "training": {"training_data": {"systems": ["sys"], "batch_size": 2}, "numb_steps": 10}
  })");
}

/// Parses `j` as an input file sitting in `base`.
dpk::InputConfig parse(nlohmann::json const& j, std::string const& base = ".") {
  return dpk::parse_input(j.dump(2), "test.json", base);
}

/// Parsing `j` fails with one error naming test.json and holding each of `parts`.
void expect(nlohmann::json const& j, std::vector<std::string> parts) {
  parts.insert(parts.begin(), "test.json");
  check_error([&] { parse(j); }, parts);
}

}  // namespace

TEST_CASE("input.json: defaults, aliases, batch sizes, system folder expansion, warnings") {
  nlohmann::json j = minimal_input();
  j["training"]["training_data"]["systems"] = {"a", "/abs/b", "c/"};
  dpk::InputConfig c = parse(j, "/base/dir");
  CHECK(c.descriptor.type == "se_e2_a");
  CHECK(c.training.training_data.systems == std::vector<std::string>{"/base/dir/a", "/abs/b", "/base/dir/c"});
  CHECK_FALSE(c.training.training_data.batch_size.automatic);
  CHECK(c.training.training_data.batch_size.value == 2);
  CHECK_FALSE(c.training.validation_data.has_value());
  CHECK_FALSE(c.training.seed.has_value());
  CHECK_FALSE(c.descriptor.seed.has_value());
  CHECK(c.learning_rate.start_lr == 1e-3);  // defaults when a section is absent
  CHECK(c.loss.start_pref_f == 1000.0);
  CHECK(c.warnings.empty());

  j["training"]["training_data"]["batch_size"] = "auto:400";
  c = parse(j);
  CHECK(c.training.training_data.batch_size.automatic);
  CHECK(c.training.training_data.batch_size.frames_for(192) == 3);
  j["training"]["training_data"]["batch_size"] = {1, 2, 3};
  c = parse(j);
  CHECK(c.training.training_data.batch_size.per_system == std::vector<int>{1, 2, 3});

  // Aliases and scale_by_worker read from learning_rate or training.
  j["model"]["descriptor"].erase("axis_neuron");
  j["model"]["descriptor"]["n_axis_neuron"] = 3;
  j["model"]["fitting_net"].erase("neuron");
  j["model"]["fitting_net"]["n_neuron"] = {5};
  j["training"].erase("numb_steps");
  j["training"]["stop_batch"] = 77;
  j["training"]["scale_by_worker"] = "sqrt";
  c = parse(j);
  CHECK(c.descriptor.axis_neuron == 3);
  CHECK(c.fitting.neuron == std::vector<int>{5});
  CHECK(c.training.numb_steps == 77);
  CHECK(c.learning_rate.scale_by_worker == "sqrt");
  j["learning_rate"] = {{"scale_by_worker", "none"}, {"_comment", "x"}};
  CHECK(parse(j).learning_rate.scale_by_worker == "none");

  // DeePMD-kit keys that change nothing dpk trains, and unknown keys, are reported by path;
  // model-changing keys at DeePMD-kit's default are accepted silently.
  j["training"]["numb_test"] = 10;
  j["training"]["time_training"] = true;
  j["training"]["profiling"] = false;
  j["model"]["descriptor"]["trainable"] = true;
  j["model"]["data_stat_nbatch"] = 10;
  j["loss"] = {{"start_pref_ae", 0.0}, {"mystery", 1}};
  j["_comment"] = "silently accepted";
  c = parse(j);
  auto has_warning = [&](std::string const& path) {
    return std::any_of(c.warnings.begin(), c.warnings.end(), [&](std::string const& w) { return w.rfind(path + ":", 0) == 0; });
  };
  CHECK(c.warnings.size() == 4);
  CHECK(has_warning("training.numb_test"));
  CHECK(has_warning("training.time_training"));
  CHECK(has_warning("training.profiling"));
  CHECK(has_warning("loss.mystery"));
  CHECK(std::count_if(c.warnings.begin(), c.warnings.end(), [](std::string const& w) {
          return w.find(": a DeePMD-kit key that changes nothing dpk trains; ignored") != std::string::npos;
        }) == 3);

  // A folder string expands to its systems (sorted).
  fs::path const dir = scratch("input_expand");
  TinySystem const s2(dir / "data" / "sys2"), s1(dir / "data" / "sys1");
  write_bytes(dir / "in.json", [&] {
    nlohmann::json k = minimal_input();
    k["training"]["training_data"]["systems"] = "data";
    k["training"]["validation_data"] = {{"systems", "data/sys2"}, {"numb_btch", 2}};
    return k.dump();
  }());
  c = dpk::read_input((dir / "in.json").string());
  CHECK(c.training.training_data.systems ==
        std::vector<std::string>{(dir / "data" / "sys1").string(), (dir / "data" / "sys2").string()});
  CHECK(c.training.validation_data->systems == std::vector<std::string>{(dir / "data" / "sys2").string()});
  CHECK(c.training.validation_data->numb_btch == 2);
  CHECK(c.training.validation_data->batch_size.automatic);
  fs::remove_all(dir);
}

TEST_CASE("input.json: DeePMD-kit keys that change the model are read, or refused unless at their default") {
  // Each key with a value other than DeePMD-kit 3.2's default (deepmd.utils.argcheck) would make
  // DeePMD-kit train another model or another schedule than dpk: refused, naming key and value.
  struct Case {
    std::string section, key;  ///< section path inside the input ("" = top level), key
    nlohmann::json value;      ///< a value other than the default
  };
  std::vector<Case> const refused = {
      {"model/descriptor", "trainable", false},
      {"model/descriptor", "exclude_types", {{0, 1}}},
      {"model/descriptor", "env_protection", 1e-3},
      {"model/fitting_net", "numb_fparam", 2},
      {"model/fitting_net", "numb_aparam", 1},
      {"model/fitting_net", "dim_case_embd", 3},
      {"model/fitting_net", "trainable", {true, false, true}},
      {"model/fitting_net", "atom_ener", {nullptr, 0.0}},
      {"model/fitting_net", "exclude_types", {1}},
      {"model/fitting_net", "use_aparam_as_mask", true},
      {"model/fitting_net", "layer_name", {"a", "b"}},
      {"model", "type_embedding", {{"neuron", {8}}}},
      {"model", "use_srtab", "table.txt"},
      {"model", "modifier", {{"type", "dipole_charge"}}},
      {"model", "spin", {{"use_spin", {true, false}}}},
      {"model", "compress", {{"type", "se_e2_a"}}},
      {"model", "pair_exclude_types", {{0, 0}}},
      {"model", "atom_exclude_types", {1}},
      {"model", "preset_out_bias", {{"energy", {1.0, nullptr}}}},
      {"model", "out_bias", {1.0, 2.0}},
      {"model", "model_dict", nlohmann::json::object()},
      {"model", "bridging_method", "ZBL"},
      {"loss", "start_pref_ae", 1.0},
      {"loss", "limit_pref_pf", 1.0},
      {"loss", "use_default_pf", true},
      {"loss", "start_pref_gf", 1.0},
      {"loss", "numb_generalized_coord", 2},
      {"loss", "start_pref_h", 1.0},
      {"loss", "relative_f", 0.1},
      {"loss", "enable_atom_ener_coeff", true},
      {"loss", "use_huber", true},
      {"loss", "use_l1_all", true},
      {"loss", "loss_func", "mae"},
      {"loss", "f_use_norm", true},
      {"loss", "intensive_ener_virial", true},
      {"training", "opt_type", "LKF"},
      {"training", "mixed_precision", {{"compute_prec", "float16"}}},
      {"training", "gradient_max_norm", 5.0},
      {"training", "enable_ema", true},
      {"training", "acc_freq", 4},
      {"training", "change_bias_after_training", true},
      {"training", "disp_avg", true},
      {"training", "warmup_steps", 100},
      {"training", "data_dict", nlohmann::json::object()},
      {"training", "model_prob", {{"a", 1.0}}},
      {"training", "fitting_weight", {{"a", 1.0}}},
      {"optimizer", "weight_decay", 1e-3},
  };
  for (Case const& k : refused) {
    nlohmann::json j = minimal_input();
    j[nlohmann::json::json_pointer("/" + k.section)][k.key] = k.value;
    std::string const path = (k.section.empty() ? "" : k.section + "/") + k.key;
    std::string dotted = path;
    std::replace(dotted.begin(), dotted.end(), '/', '.');
    CAPTURE(dotted);
    check_error([&] { parse(j); }, {"test.json", dotted + ": " + nlohmann::json(k.value).dump().substr(0, 20),
                                    "is not implemented by dpk", "remove the key or set it to"});
  }

  // The same keys at DeePMD-kit's defaults (also in their per-layer and null-list forms): accepted, no warning.
  nlohmann::json j = minimal_input();
  j["model"]["descriptor"].update({{"trainable", true}, {"exclude_types", nlohmann::json::array()}, {"env_protection", 0}});
  j["model"]["fitting_net"].update({{"numb_fparam", 0}, {"numb_aparam", 0}, {"trainable", {true, true, true}},
                                    {"atom_ener", {nullptr, nullptr}}, {"layer_name", nullptr}, {"rcond", nullptr}});
  j["model"].update({{"type_embedding", nullptr}, {"pair_exclude_types", nlohmann::json::array()},
                     {"bridging_method", "None"}});
  j["loss"] = {{"start_pref_ae", 0}, {"loss_func", "mse"}, {"relative_f", nullptr}, {"use_huber", false}};
  j["training"].update({{"opt_type", "Adam"}, {"gradient_max_norm", nullptr}, {"acc_freq", 1}, {"enable_ema", false}});
  j["optimizer"] = {{"type", "Adam"}, {"weight_decay", 0.0}};
  j["nvnmd"] = {{"enable", false}};
  dpk::InputConfig c = parse(j);
  CHECK(c.warnings.empty());
  CHECK(c.optimizer.adam_beta1 == 0.9);
  CHECK(c.optimizer.adam_beta2 == 0.999);
  CHECK(c.statistics.nbatch == 10);
  CHECK_FALSE(c.statistics.set_davg_zero);
  CHECK_FALSE(c.statistics.rcond.has_value());

  // Keys dpk implements.
  j["model"]["data_stat_nbatch"] = 20;
  j["model"]["descriptor"]["set_davg_zero"] = true;
  j["model"]["fitting_net"]["rcond"] = 1e-3;
  j["optimizer"] = {{"adam_beta1", 0.8}, {"adam_beta2", 0.99}};
  j["learning_rate"] = {{"start_lr", 2e-3}, {"stop_lr_ratio", 1e-3}, {"decay_rate", 0.9}, {"smooth", true},
                        {"warmup_ratio", 0.1}, {"warmup_start_factor", 0.2}, {"stop_lr", nullptr}};
  c = parse(j);
  CHECK(c.warnings.empty());
  CHECK(c.statistics.nbatch == 20);
  CHECK(c.statistics.set_davg_zero);
  CHECK(c.statistics.rcond == 1e-3);
  CHECK(c.optimizer.adam_beta1 == 0.8);
  CHECK(c.optimizer.adam_beta2 == 0.99);
  CHECK(c.learning_rate.stop_lr == 2e-3 * 1e-3);
  CHECK(c.learning_rate.decay_rate == 0.9);
  CHECK(c.learning_rate.smooth);
  CHECK(c.learning_rate.warmup_ratio == 0.1);
  CHECK(c.learning_rate.warmup_start_factor == 0.2);
  j["learning_rate"] = {{"warmup_steps", 7}, {"stop_lr", 1e-6}};
  c = parse(j);
  CHECK(c.learning_rate.warmup_steps == 7);
  CHECK(c.learning_rate.stop_lr == 1e-6);
  CHECK_FALSE(c.learning_rate.decay_rate.has_value());

  // Their bad values.
  nlohmann::json k = minimal_input();
  k["learning_rate"] = {{"stop_lr", 1e-6}, {"stop_lr_ratio", 1e-3}};
  expect(k, {"learning_rate.stop_lr_ratio: is given together with stop_lr"});
  k["learning_rate"] = {{"decay_rate", 1.5}};
  expect(k, {"learning_rate.decay_rate: expected a number in (0, 1] or null, got 1.5"});
  k["learning_rate"] = {{"warmup_steps", 10}, {"warmup_ratio", 0.1}};
  expect(k, {"learning_rate.warmup_ratio: is given together with warmup_steps"});
  k["learning_rate"] = {{"warmup_ratio", 1.0}};
  expect(k, {"learning_rate.warmup_ratio: expected a number in [0, 1)"});
  k = minimal_input();
  k["model"]["data_stat_nbatch"] = 0;
  expect(k, {"model.data_stat_nbatch: expected a positive integer, got 0"});
  k = minimal_input();
  k["model"]["fitting_net"]["rcond"] = -1;
  expect(k, {"model.fitting_net.rcond: expected a non-negative number or null, got -1"});
  k = minimal_input();
  k["optimizer"] = {{"type", "AdamW"}};
  expect(k, {"optimizer.type", "unsupported value \"AdamW\"", "\"Adam\""});
  k["optimizer"] = {{"adam_beta2", 1.0}};
  expect(k, {"optimizer.adam_beta2: expected a number in [0, 1), got 1.0"});
  k = minimal_input();
  k["nvnmd"] = {{"enable", true}};
  expect(k, {"nvnmd.enable: true is not implemented by dpk"});
  k = minimal_input();
  k["training"]["num_epoch"] = 10;
  expect(k, {"training.num_epoch: is given together with numb_steps"});
  k["training"].erase("numb_steps");
  CHECK(parse(k).training.num_epoch == 10.0);  // the trainer computes numb_steps from the data
  k["training"]["num_epoch"] = 0;
  expect(k, {"training.num_epoch: expected a positive number or null, got 0"});
  k["training"].erase("num_epoch");
  k["training"]["numb_epochs"] = 2.5;  // DeePMD-kit 3.2's other names
  CHECK(parse(k).training.num_epoch == 2.5);
  k["training"].erase("numb_epochs");
  expect(k, {"training.numb_steps: required"});
  k["training"]["num_steps"] = 12;  // DeePMD-kit 3.2's other names
  CHECK(parse(k).training.numb_steps == 12);
}

TEST_CASE("input.json: \"sel\": \"auto\" and \"auto:RATIO\" as DeePMD-kit reads them") {
  nlohmann::json j = minimal_input();
  for (auto const& form : std::vector<std::pair<std::string, double>>{{"auto", 1.1}, {"auto:1.25", 1.25}, {"auto:2", 2.0}}) {
    std::string const& text = form.first;
    double const ratio = form.second;
    CAPTURE(text);
    j["model"]["descriptor"]["sel"] = text;
    dpk::InputConfig const c = parse(j);
    REQUIRE(c.descriptor.sel_auto.has_value());
    CHECK(*c.descriptor.sel_auto == ratio);
    CHECK(c.descriptor.sel.empty());  // the trainer resolves it from the data
  }
}

TEST_CASE("input.json bad input: one error naming the file and the key path") {
  nlohmann::json j = minimal_input();

  SUBCASE("malformed JSON names the file and line") {
    check_error([] { dpk::parse_input("{\n  \"model\": {\n    \"type_map\": [\"O\" \"H\"]\n  }\n}\n", "bad.json", "."); },
                {"bad.json", "malformed JSON", "line 3"});
    check_error([] { dpk::parse_input("", "empty.json", "."); }, {"empty.json", "malformed JSON"});
    check_error([] { dpk::parse_input("[1, 2]", "list.json", "."); }, {"list.json", "expected an object"});
  }
  SUBCASE("missing file") {
    check_error([] { dpk::read_input("/nonexistent/input.json"); }, {"/nonexistent/input.json", "cannot open"});
  }
  SUBCASE("negative sel") {
    j["model"]["descriptor"]["sel"][1] = -3;
    expect(j, {"model.descriptor.sel[1]: expected a non-negative integer, got -3"});
  }
  SUBCASE("sel of the wrong type or length") {
    for (char const* bad : {"automatic", "auto:", "auto:x", "auto:-1", "auto:0", "auto:1:2", "auto:inf", "Auto"}) {
      CAPTURE(bad);
      j["model"]["descriptor"]["sel"] = bad;
      expect(j, {"model.descriptor.sel", "expected a list of integers (one per type), \"auto\" or \"auto:RATIO\"",
                 std::string("got \"") + bad + "\""});
    }
    j["model"]["descriptor"]["sel"] = {4, 1.5};
    expect(j, {"model.descriptor.sel[1]", "got 1.5"});
    j["model"]["descriptor"]["sel"] = {4, 8, 2};
    expect(j, {"model.descriptor.sel", "3 entries", "type_map has 2"});
    j["model"]["descriptor"].erase("sel");
    expect(j, {"model.descriptor.sel", "required"});
  }
  SUBCASE("rcut_smth >= rcut") {
    j["model"]["descriptor"]["rcut_smth"] = 4.0;
    expect(j, {"model.descriptor.rcut_smth", "smaller than rcut"});
    j["model"]["descriptor"]["rcut"] = -1.0;
    expect(j, {"model.descriptor.rcut", "positive number"});
  }
  SUBCASE("unknown descriptor type") {
    j["model"]["descriptor"]["type"] = "se_e3";
    expect(j, {"model.descriptor.type", "unsupported descriptor type \"se_e3\""});
    j["model"]["descriptor"]["type"] = 3;
    expect(j, {"model.descriptor.type", "expected a string"});
  }
  SUBCASE("wrong key types") {
    j["model"]["descriptor"]["rcut"] = "6.0";
    expect(j, {"model.descriptor.rcut: expected a number, got \"6.0\""});
    j = minimal_input();
    j["model"]["descriptor"]["type_one_side"] = "yes";
    expect(j, {"model.descriptor.type_one_side: expected true or false"});
    j = minimal_input();
    j["model"]["descriptor"]["neuron"] = 25;
    expect(j, {"model.descriptor.neuron: expected a list of integers, got 25"});
    j = minimal_input();
    j["model"]["fitting_net"]["neuron"] = {240, 0};
    expect(j, {"model.fitting_net.neuron[1]: expected a positive integer, got 0"});
    j = minimal_input();
    j["model"]["type_map"] = "O H";
    expect(j, {"model.type_map", "expected a list"});
    j = minimal_input();
    j["model"]["type_map"] = {"O", "O"};
    expect(j, {"model.type_map[1]", "twice"});
    j = minimal_input();
    j["model"]["descriptor"]["seed"] = -1;
    expect(j, {"model.descriptor.seed", "non-negative integer"});
    j = minimal_input();
    j["learning_rate"] = {{"decay_steps", 1.5}};
    expect(j, {"learning_rate.decay_steps", "positive integer", "1.5"});
    j = minimal_input();
    j["learning_rate"] = {{"start_lr", 0}};
    expect(j, {"learning_rate.start_lr", "positive number"});
    j = minimal_input();
    j["loss"] = {{"start_pref_f", -1}};
    expect(j, {"loss.start_pref_f", ">= 0"});
    j = minimal_input();
    j["training"]["numb_steps"] = "many";
    expect(j, {"training.numb_steps", "integer"});
    j = minimal_input();
    j["training"]["disp_freq"] = 0;
    expect(j, {"training.disp_freq", "positive integer"});
    j = minimal_input();
    j["training"]["disp_file"] = 5;
    expect(j, {"training.disp_file", "expected a string"});
    j = minimal_input();
    j["model"]["descriptor"] = {1, 2};
    expect(j, {"model.descriptor", "expected an object"});
  }
  SUBCASE("unsupported choices") {
    j["model"]["descriptor"]["activation_function"] = "gelu";
    expect(j, {"model.descriptor.activation_function", "\"gelu\""});
    j = minimal_input();
    j["model"]["descriptor"]["precision"] = "float16";
    expect(j, {"model.descriptor.precision", "\"float16\""});
    j = minimal_input();
    j["learning_rate"] = {{"type", "cosine"}};
    expect(j, {"learning_rate.type", "\"cosine\""});
    j = minimal_input();
    j["loss"] = {{"type", "tensor"}};
    expect(j, {"loss.type", "\"tensor\""});
    j = minimal_input();
    j["model"]["fitting_net"]["type"] = "dipole";
    expect(j, {"model.fitting_net.type", "\"dipole\""});
    j = minimal_input();
    j["model"]["descriptor"]["axis_neuron"] = 9;
    expect(j, {"model.descriptor.axis_neuron", "neuron[-1] = 8"});
  }
  SUBCASE("batch_size and systems") {
    j["training"]["training_data"]["batch_size"] = "automatic";
    expect(j, {"training.training_data.batch_size", "\"auto:N\"", "\"automatic\""});
    j["training"]["training_data"]["batch_size"] = "auto:0";
    expect(j, {"training.training_data.batch_size", "\"auto:0\""});
    j["training"]["training_data"]["batch_size"] = 0;
    expect(j, {"training.training_data.batch_size", "got 0"});
    j["training"]["training_data"]["batch_size"] = {1, 2};
    j["training"]["training_data"]["systems"] = {"a"};
    expect(j, {"training.training_data.batch_size", "2 entries for 1 systems"});
    j = minimal_input();
    j["training"]["training_data"]["systems"] = 5;
    expect(j, {"training.training_data.systems", "got 5"});
    j["training"]["training_data"]["systems"] = "/nonexistent/folder";
    expect(j, {"training.training_data.systems", "/nonexistent/folder"});
    j["training"]["training_data"].erase("systems");
    expect(j, {"training.training_data.systems", "required"});
    j = minimal_input();
    j["training"].erase("training_data");
    expect(j, {"training.training_data", "required"});
    j = minimal_input();
    j["training"]["validation_data"] = {{"systems", {"a"}}, {"numb_btch", -1}};
    expect(j, {"training.validation_data.numb_btch", "positive integer"});
    j = minimal_input();
    j["training"]["training_data"]["auto_prob"] = "prob_by_size";
    expect(j, {"training.training_data.auto_prob", "unsupported value"});
    j = minimal_input();
    j["training"]["training_data"]["systems"] = {"a", "b"};
    j["training"]["training_data"]["sys_probs"] = {0.5};
    expect(j, {"training.training_data.sys_probs", "1 entries for 2 systems"});
  }
  SUBCASE("missing sections") {
    j.erase("model");
    expect(j, {"model: required"});
    j = minimal_input();
    j["model"].erase("descriptor");
    expect(j, {"model.descriptor: required"});
    j = minimal_input();
    j.erase("training");
    expect(j, {"training: required"});
  }
}

// ------------------------------------------------------------------------------------ coincident atoms

namespace {

/// The first coincident pair by brute force: smallest j having an i < j within `limit` (over the
/// periodic images -2..2 along each cell vector when `box` is given), then the smallest such i.
dpk::CoincidentPair brute_force_pair(std::vector<double> const& x, std::vector<double> const* box, double limit) {
  int const n = int(x.size() / 3);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < j; ++i) {
      int const reach = box ? 2 : 0;
      double best = std::numeric_limits<double>::infinity();
      for (int a = -reach; a <= reach; ++a)
        for (int b = -reach; b <= reach; ++b)
          for (int c = -reach; c <= reach; ++c) {
            double r2 = 0;
            for (int k = 0; k < 3; ++k) {
              double d = x[3 * std::size_t(j) + std::size_t(k)] - x[3 * std::size_t(i) + std::size_t(k)];
              if (box) d += a * (*box)[std::size_t(k)] + b * (*box)[std::size_t(3 + k)] + c * (*box)[std::size_t(6 + k)];
              r2 += d * d;
            }
            best = std::min(best, std::sqrt(r2));
          }
      if (best < limit) return {i, j, best};
    }
  return {};
}

}  // namespace

TEST_CASE("coincident atoms: binned search equals brute force (periodic triclinic and open)") {
  std::mt19937_64 engine(18);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int found_pairs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    bool const periodic = trial % 3 != 2;
    int const n = 2 + int(unit(engine) * 150);
    std::vector<double> box = {7.0 + 3 * unit(engine), 0, 0, 2 * unit(engine) - 1, 6.0 + 3 * unit(engine), 0,
                               2 * unit(engine) - 1, 2 * unit(engine) - 1, 8.0 + 2 * unit(engine)};
    std::vector<double> x(std::size_t(n) * 3);
    for (int a = 0; a < n; ++a) {  // fractional positions in [0, 1), spread so that no two are within 0.01 A
      double const f[3] = {unit(engine), unit(engine), unit(engine)};
      for (int k = 0; k < 3; ++k)
        x[3 * std::size_t(a) + std::size_t(k)] = f[0] * box[std::size_t(k)] + f[1] * box[std::size_t(3 + k)] + f[2] * box[std::size_t(6 + k)];
    }
    if (brute_force_pair(x, periodic ? &box : nullptr, 0.01).atom_i >= 0) continue;  // rare random near pair
    // Make atom j (and sometimes a second) coincide with an earlier atom: exactly, through a
    // lattice vector, 5e-7 A away (coincident), or 2e-6 A away (not).
    int const kind = trial % 4;
    if (n >= 3) {
      int const j = 1 + int(unit(engine) * (n - 1)), i = int(unit(engine) * j);
      for (int k = 0; k < 3; ++k) {
        double v = x[3 * std::size_t(i) + std::size_t(k)];
        if (kind == 1 && periodic) v += box[std::size_t(3 + k)] - box[std::size_t(6 + k)];
        if (kind == 2) v += k == 0 ? 5e-7 : 0.0;
        if (kind == 3) v += k == 1 ? 2e-6 : 0.0;
        x[3 * std::size_t(j) + std::size_t(k)] = v;
      }
    }
    dpk::CoincidentPair const expected = brute_force_pair(x, periodic ? &box : nullptr, dpk::min_pair_distance);
    dpk::CoincidentPair const got = dpk::find_coincident_atoms(x.data(), box.data(), n, periodic);
    INFO("trial " << trial << " n " << n << " periodic " << periodic << " kind " << kind);
    CHECK(got.atom_i == expected.atom_i);
    CHECK(got.atom_j == expected.atom_j);
    if (expected.atom_i >= 0) {
      ++found_pairs;
      CHECK(std::fabs(got.distance - expected.distance) < 1e-12);
    }
  }
  CHECK(found_pairs >= 20);  // the cases above are not all near misses
}

TEST_CASE("coincident atoms: read_system refuses every frame, naming the system, frame and atoms") {
  fs::path const dir = scratch("coincident");
  TinySystem const sys(dir / "sys", 2, 3);  // 3 atoms; set.000 frames 0-2, set.001 frames 3-5 (box 9 A)
  std::string const path = sys.dir.string();
  auto coords_of = [&](int s) { return dpk::read_npy((sys.set_dir(s) / "coord.npy").string()).data; };
  CHECK(dpk::read_system(path, {}).nframes == 6);
  // Frame 2 of set.001 (frame 5 of the system): atom 2 exactly on atom 0.
  std::vector<double> coord = coords_of(1);
  for (int k = 0; k < 3; ++k) coord[2 * 9 + 2 * 3 + std::size_t(k)] = coord[2 * 9 + std::size_t(k)];
  sys.write_array(1, "coord.npy", {3, 9}, coord);
  check_error([&] { dpk::read_system(path, {}); },
              {"system '" + path + "' frame 5 (frame 2 of set.001): atoms 0 and 2 are 0 A apart (closer than 1e-06 A): "
               "coincident atoms make the descriptor (1/r) infinite; remove or fix the frame"});
  // Through the periodic image: atom 2 one cell vector (9 A along x) from atom 0.
  coord[2 * 9 + 2 * 3] += 9.0;
  sys.write_array(1, "coord.npy", {3, 9}, coord);
  check_error([&] { dpk::read_system(path, {}); }, {"system '" + path + "' frame 5 (frame 2 of set.001): atoms 0 and 2 are"});
  // Without periodic boundaries the same atoms are 9 A apart: the system loads.
  write_bytes(sys.dir / "nopbc", "");
  CHECK(dpk::read_system(path, {}).nframes == 6);
  fs::remove(sys.dir / "nopbc");
  // 1e-5 A apart is not coincident.
  coord[2 * 9 + 2 * 3] = coord[2 * 9] + 1e-5;
  sys.write_array(1, "coord.npy", {3, 9}, coord);
  CHECK(dpk::read_system(path, {}).nframes == 6);
  fs::remove_all(dir);
}
