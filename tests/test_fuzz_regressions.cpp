// Regression tests for what fuzzing the readers found (issue 18, docs/reliability.md): each input
// that crashed a reader, or made it throw something other than dpk::Error, must now give one
// dpk::Error naming the file and what was expected. Inputs saved by libFuzzer live in
// tests/data/fuzz_regressions/; the others are built here from a real model file.
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include "error_test_helpers.hpp"

#include <dpk/io.hpp>
#include <dpk/io/input.hpp>
#include <dpk/io/model_file.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

std::string const regressions = std::string(dpk_test::data_dir()) + "/fuzz_regressions/";

using dpk_test::check_error;

std::string read_bytes(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// A v1 npy file whose header dictionary is `dict` (unpadded), followed by `payload`.
std::string npy_v1(std::string const& dict, std::string const& payload) {
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict + payload;
}

/// A real model file (tests/data/legacy_v1/model.dpk) split into its JSON header and data section.
struct ModelParts {
  nlohmann::json header;
  std::string data;
};
ModelParts legacy_model() {
  std::string const bytes = read_bytes(std::string(dpk_test::data_dir()) + "/legacy_v1/model.dpk");
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= std::uint64_t(static_cast<unsigned char>(bytes[12 + i])) << (8 * i);
  std::size_t const data_start = (20 + header_length + 7) / 8 * 8;
  return {nlohmann::json::parse(bytes.substr(20, header_length)),
          bytes.substr(data_start, bytes.size() - 8 - data_start)};
}

/// The bytes of a model file with header text `header` and data section `data` (framing as in
/// docs/model-format.md; the data section, hence its checksum, unchanged).
std::string frame_model(std::string const& header, std::string const& data) {
  std::string out("DPKMODEL", 8);
  for (int i = 0; i < 4; ++i) out.push_back(char((1u >> (8 * i)) & 0xffu));
  for (int i = 0; i < 8; ++i) out.push_back(char((std::uint64_t(header.size()) >> (8 * i)) & 0xffu));
  out += header;
  while (out.size() % 8 != 0) out.push_back('\0');
  return out + data + "DPKEND01";
}

}  // namespace

TEST_CASE("fuzz regressions: npy") {
  SUBCASE("a shape extent beyond 2^64 (libFuzzer input): no longer wraps around") {
    std::string const path = regressions + "npy_shape_extent_overflow.npy";
    check_error([&] { dpk::read_npy(path); }, {path, "'shape' has an extent larger than 2^63 - 1"});
  }
  SUBCASE("a shape whose product wraps to 0 is not accepted as an empty array") {
    // 2^32 x 2^32 values: the product used to wrap to 0, so the file was read as holding none.
    std::string const bytes =
        npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", "");
    check_error([&] { dpk::parse_npy(bytes, "wrap.npy"); }, {"wrap.npy", "has more values than fit in memory"});
  }
  SUBCASE("a zero extent next to huge ones is still a valid empty array") {
    std::string const bytes =
        npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 0, 4294967296), }\n", "");
    dpk::NpyArray const array = dpk::parse_npy(bytes, "empty.npy");
    CHECK(array.shape == std::vector<std::size_t>{4294967296u, 0u, 4294967296u});
    CHECK(array.data.empty());
  }
}

TEST_CASE("fuzz regressions: input.json") {
  SUBCASE("a number beyond double's range (libFuzzer input) is malformed JSON, not an uncaught out_of_range") {
    std::string const path = regressions + "input_number_overflow.json";
    check_error([&] { dpk::read_input(path); }, {path, "malformed JSON", "number overflow"});
  }
  SUBCASE("nesting 200000 levels deep: an error, not a stack overflow printing the value") {
    std::string const deep = std::string(200000, '[') + std::string(200000, ']');
    check_error([&] { dpk::parse_input("{\"model\": " + deep + "}", "deep.json", "."); },
                {"deep.json", "malformed JSON", "nested deeper than 100 levels"});
    // Brackets inside strings do not count.
    check_error([&] { dpk::parse_input("{\"model\": \"" + std::string(500, '[') + "\"}", "flat.json", "."); },
                {"flat.json", "model: expected an object"});
  }
}

TEST_CASE("fuzz regressions: a symlink loop below a \"systems\" folder is walked once") {
  // Found writing the input.json target: the expansion followed the loop until the path was too
  // long and let a std::filesystem_error escape.
  namespace fs = std::filesystem;
  fs::path const root = fs::temp_directory_path() / ("dpk_fuzz_loop_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "data" / "sys");
  std::ofstream(root / "data" / "sys" / "type.raw") << "0\n";
  fs::create_directory_symlink("..", root / "data" / "sys" / "up");
  std::string const text = R"({"model": {"descriptor": {"type": "se_e2_a", "sel": [4]}, "fitting_net": {}},
                               "training": {"training_data": {"systems": "data"}, "numb_steps": 1}})";
  dpk::InputConfig const config = dpk::parse_input(text, "loop.json", root.string());
  CHECK(config.training.training_data.systems == std::vector<std::string>{(root / "data" / "sys").string()});
  fs::remove_all(root);
}

TEST_CASE("fuzz regressions: model file") {
  SUBCASE("a non-string 'format' (libFuzzer input) is an error, not an uncaught type_error") {
    std::string const path = regressions + "model_format_not_string.dpk";
    check_error([&] { dpk::read_model_file(path); }, {path, "header 'format' is not \"dpk-model\""});
  }

  ModelParts const base = legacy_model();
  REQUIRE_NOTHROW(dpk::parse_model_file(frame_model(base.header.dump(), base.data), "base.dpk"));
  auto with = [&](auto&& edit) {
    nlohmann::json header = base.header;
    edit(header);
    return frame_model(header.dump(), base.data);
  };

  SUBCASE("a deeply nested header value: an error, not a stack overflow copying it") {
    std::string header = base.header.dump();
    header.insert(header.size() - 1, ", \"deep\": " + std::string(100000, '[') + std::string(100000, ']'));
    check_error([&] { dpk::parse_model_file(frame_model(header, base.data), "deep.dpk"); },
                {"deep.dpk", "nested deeper than 100 levels"});
  }
  SUBCASE("integers that do not fit (or are not integers) are refused, not converted") {
    check_error([&] { dpk::parse_model_file(with([](auto& h) { h["ntypes"] = 1e30; }), "m.dpk"); },
                {"m.dpk", "'ntypes' has the wrong type (expected an integer that fits in 32 bits, got 1e+30)"});
    check_error([&] { dpk::parse_model_file(with([](auto& h) { h["ntypes"] = 2.5; }), "m.dpk"); },
                {"m.dpk", "'ntypes' has the wrong type"});
    check_error(
        [&] { dpk::parse_model_file(with([](auto& h) { h["descriptor"]["sel"] = {4294967296ll, 1}; }), "m.dpk"); },
        {"m.dpk", "'descriptor.sel' has the wrong type (expected a list, each entry an integer that fits in 32 bits, got "
         "[4294967296,1])"});
    check_error(
        [&] { dpk::parse_model_file(with([](auto& h) { h["tensors"][0]["offset"] = -1; }), "m.dpk"); },
        {"m.dpk", "'tensors[].offset' has the wrong type (expected a non-negative integer, got -1)"});
  }
  SUBCASE("sel entries that are negative or sum past 2^31 - 1") {
    int const ntypes = base.header["ntypes"].get<int>();
    std::vector<long long> sel(std::size_t(ntypes), 1);
    sel[0] = -1;
    check_error([&] { dpk::parse_model_file(with([&](auto& h) { h["descriptor"]["sel"] = sel; }), "m.dpk"); },
                {"m.dpk", "'descriptor.sel' has a negative entry (-1)"});
    sel[0] = 2147483647;
    check_error([&] { dpk::parse_model_file(with([&](auto& h) { h["descriptor"]["sel"] = sel; }), "m.dpk"); },
                {"m.dpk", "'descriptor.sel' sums to more than 2^31 - 1 neighbours"});
  }
  SUBCASE("a data_bytes so large that the expected size wraps around") {
    // header + padding + 7 bytes: 2^64 - 1 + 8 wraps to 7, which used to make the reader hash
    // 2^64 - 1 bytes from the data section (a read far beyond the buffer).
    std::string file = with([](auto& h) { h["data_bytes"] = 18446744073709551615ull; });
    file.resize(file.size() - base.data.size() - 8 + 7);
    check_error([&] { dpk::parse_model_file(file, "m.dpk"); },
                {"m.dpk", "truncated: header 'data_bytes' is 18446744073709551615"});
  }
  SUBCASE("a tensor shape whose product wraps around") {
    check_error([&] {
      dpk::parse_model_file(with([](auto& h) { h["tensors"][0]["shape"] = {65536, 65536, 65536, 65536}; }), "m.dpk");
    }, {"m.dpk", "lies outside the"});
  }
  SUBCASE("tensors that overlap (sizes adding up is not enough)") {
    // The second tensor moved onto the first: the sizes still add up to the parameter count.
    check_error([&] {
      dpk::parse_model_file(with([](auto& h) { h["tensors"][1]["offset"] = h["tensors"][0]["offset"]; }), "m.dpk");
    }, {"m.dpk", "tensor table overlaps at parameter"});
  }
}
