// DeePMD-kit interop (include/dpk/interop): models written by DeePMD-kit 3.2's TensorFlow backend
// (tests/data/deepmd_interop, see its README) imported into dpk predict DeePMD-kit's own
// energies, forces, virials, atomic energies and virials; export -> import round trips are
// bit-identical; export writes DeePMD-kit's variables bit for bit; bad input is refused with
// errors naming the file, key and value.
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include <dpk/interop/deepmd.hpp>
#include <dpk/io/npy.hpp>
#include <dpk/potential.hpp>

#include "error_test_helpers.hpp"
#include "model_file_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using dpk::interop::DeepmdDict;

std::string const fixtures = std::string(dpk_test::data_dir()) + "/deepmd_interop";

/// A scratch folder removed at the end of the test.
struct Scratch {
  fs::path dir;
  explicit Scratch(std::string const& name)
      : dir(fs::temp_directory_path() / ("dpk_interop_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(std::string const& name) const { return (dir / name).string(); }
};

/// max |a - b| / max |b|: normwise relative difference of two arrays of the same size.
double relative_difference(std::vector<double> const& a, std::vector<double> const& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

struct Reference {
  std::vector<double> coord, box, energy, force, virial, atom_energy, atom_virial;
  std::vector<int> types;
};

/// A fixture system: coordinates and DeePMD-kit's predictions (labels, set.000/atom_*.npy).
Reference read_reference(std::string const& system, std::vector<std::string> const& type_map) {
  dpk::System const s = dpk::read_system(system, type_map);
  Reference r;
  r.coord = s.coord;
  r.types = s.types;
  if (s.periodic) r.box = s.box;
  r.energy = s.energy;
  r.force = s.force;
  r.virial = s.virial;
  r.atom_energy = dpk::read_npy(system + "/set.000/atom_ener.npy").data;
  r.atom_virial = dpk::read_npy(system + "/set.000/atom_virial.npy").data;
  return r;
}

/// Largest relative difference over energy, force, virial, atom energy and atom virial between
/// dpk (model `data` run in precision Scalar) and DeePMD-kit on `system`.
template <class Scalar>
double max_difference_to_deepmd(dpk::ModelFileData const& data, std::string const& system) {
  dpk::Potential<Scalar> potential(data, "imported");
  Reference const ref = read_reference(system, data.type_map);
  dpk::PotentialResult const r = potential.compute(ref.coord, ref.types, ref.box, true);
  double const e = relative_difference(r.energy, ref.energy), f = relative_difference(r.force, ref.force),
               v = relative_difference(r.virial, ref.virial), ae = relative_difference(r.atom_energy, ref.atom_energy),
               av = relative_difference(r.atom_virial, ref.atom_virial);
  MESSAGE(system << ": relative differences to DeePMD-kit: energy " << e << ", force " << f << ", virial " << v
                 << ", atom energy " << ae << ", atom virial " << av);
  CHECK(potential.neighbors_dropped() == 0);
  return std::max({e, f, v, ae, av});
}

void check_same_model(dpk::ModelFileData const& a, dpk::ModelFileData const& b) {
  dpk_test::check_same_model_layout(a, b);
  // Bit-identical values (== on doubles; no NaNs in models).
  CHECK(a.parameters == b.parameters);
  CHECK(a.avg == b.avg);
  CHECK(a.stdev == b.stdev);
  CHECK(a.energy_bias == b.energy_bias);
}

struct Case {
  std::string name;
  bool float32;
};
std::vector<Case> const cases = {{"tos_true", false}, {"tos_false_3types", false}, {"float32", true}};

using dpk_test::contains;
using dpk_test::error_of;

/// The fixture's dictionary with `edit` applied, refused by the importer with a message holding
/// every string of `expect`.
void check_refused(std::string const& model, std::function<void(DeepmdDict&)> const& edit,
                   std::vector<std::string> const& expect) {
  DeepmdDict tree = dpk::interop::read_deepmd_dict(fixtures + "/" + model + ".dp");
  edit(tree);
  std::string const message = error_of([&] { dpk::interop::model_from_deepmd_dict(tree, "edited.dp"); });
  INFO(message);
  CHECK(contains(message, "edited.dp"));
  for (auto const& part : expect) CHECK(contains(message, part));
}

}  // namespace

TEST_CASE("interop: DeePMD-kit models import with DeePMD-kit's predictions") {
  for (auto const& c : cases) {
    for (std::string const ext : {".dp", ".yaml"}) {
      dpk::ModelFileData const data = dpk::interop::read_deepmd_model(fixtures + "/" + c.name + ext);
      CHECK(data.precision == (c.float32 ? "float32" : "float64"));
      for (std::string const system : {"_triclinic", "_nopbc"}) {
        std::string const path = fixtures + "/" + c.name + system;
        if (c.float32)
          CHECK(max_difference_to_deepmd<float>(data, path) < 2e-5);
        else
          CHECK(max_difference_to_deepmd<double>(data, path) < 1e-10);
      }
    }
    // The .dp and .yaml files DeePMD-kit wrote hold the same model.
    check_same_model(dpk::interop::read_deepmd_model(fixtures + "/" + c.name + ".dp"),
                     dpk::interop::read_deepmd_model(fixtures + "/" + c.name + ".yaml"));
  }
}

TEST_CASE("interop: export -> import round trips are bit-identical") {
  Scratch scratch("roundtrip");
  for (auto const& c : cases) {
    dpk::ModelFileData const data = dpk::interop::read_deepmd_model(fixtures + "/" + c.name + ".dp");
    for (std::string const ext : {".dp", ".yaml"}) {
      std::string const out = scratch / (c.name + ext);
      dpk::interop::write_deepmd_model(out, data, "imported");
      check_same_model(dpk::interop::read_deepmd_model(out), data);
      // dpk's own model file in between changes nothing either.
      dpk::write_model_file(scratch / "model.dpk", dpk::interop::read_deepmd_model(out));
      check_same_model(dpk::read_model_file(scratch / "model.dpk"), data);
    }
  }
  // A dpk-initialised model (not from DeePMD-kit): export and import give it back exactly.
  dpk::ModelFileData data = dpk::interop::read_deepmd_model(fixtures + "/tos_false_3types.dp");
  dpk::ParameterLayout const layout(data.descriptor, data.fitting, data.ntypes);
  data.parameters = dpk::initial_parameters(layout, 7);
  for (std::size_t i = 0; i < data.avg.size(); ++i) data.avg[i] = 0.01 * double(i % 13), data.stdev[i] = 0.3 + 1e-3 * double(i % 7);
  data.energy_bias = {-1.25, -3.5e-3, 7.125};
  dpk::interop::write_deepmd_model(scratch / "init.yaml", data, "initialised");
  dpk::interop::write_deepmd_model(scratch / "init.dp", data, "initialised");
  check_same_model(dpk::interop::read_deepmd_model(scratch / "init.yaml"), data);
  check_same_model(dpk::interop::read_deepmd_model(scratch / "init.dp"), data);
}

TEST_CASE("interop: export writes DeePMD-kit's variables bit for bit and dpk's skip rule per layer") {
  Scratch scratch("export");
  for (auto const& c : cases) {
    DeepmdDict original = dpk::interop::read_deepmd_dict(fixtures + "/" + c.name + ".dp");
    dpk::ModelFileData const data = dpk::interop::model_from_deepmd_dict(original, c.name);
    dpk::interop::write_deepmd_model(scratch / "out.dp", data, c.name);
    DeepmdDict exported = dpk::interop::read_deepmd_dict(scratch / "out.dp");
    // Same variables, same dtypes and shapes, same values, in the same order.
    std::vector<DeepmdDict> a, b;
    std::vector<std::string> paths_a, paths_b;
    dpk::interop::for_each_variable(original["model"], [&](DeepmdDict& n, std::string const& p) {
      if (dpk::interop::is_array(n)) a.push_back(n), paths_a.push_back(p);
    });
    dpk::interop::for_each_variable(exported["model"], [&](DeepmdDict& n, std::string const& p) {
      if (dpk::interop::is_array(n)) b.push_back(n), paths_b.push_back(p);
    });
    CHECK(paths_a == paths_b);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(paths_a[i]);
      CHECK(a[i] == b[i]);
    }
    CHECK(exported["model"]["descriptor"]["sel"] == original["model"]["descriptor"]["sel"]);
    CHECK(exported["model_def_script"]["descriptor"]["sel"] == original["model_def_script"]["descriptor"]["sel"]);
  }
  // tos_false_3types' fitting widths 8 -> 8 -> 8 -> 16: DeePMD-kit's TensorFlow backend writes
  // resnet true on every hidden layer (dpmodel's default, which would add skips that its own
  // TensorFlow graph does not have); dpk writes the flags of the function it computes.
  dpk::interop::write_deepmd_model(scratch / "three.dp", dpk::interop::read_deepmd_model(fixtures + "/tos_false_3types.dp"),
                                   "three");
  DeepmdDict three = dpk::interop::read_deepmd_dict(scratch / "three.dp");
  auto const& layers = three["model"]["fitting"]["nets"]["networks"][0]["layers"];
  REQUIRE(layers.size() == 4);
  CHECK(layers[0]["resnet"] == false);  // 8 -> 8 first layer: no skip (TensorFlow rule)
  CHECK(layers[1]["resnet"] == true);   // 8 -> 8: identity skip
  CHECK(layers[2]["resnet"] == false);  // 8 -> 16: no concat skip in fitting nets
  CHECK(layers[3]["activation_function"] == "none");
  auto const& embedding = three["model"]["descriptor"]["embeddings"]["networks"][0]["layers"];
  CHECK(embedding[0]["resnet"] == true);  // 1 -> 2 concat skip with timestep
  CHECK(embedding[0]["use_timestep"] == true);
  CHECK(three["backend"] == "dpk");
  // The same flags under DeePMD-kit's own reading (not TensorFlow) are refused when they would
  // give another function.
  check_refused("tos_false_3types", [](DeepmdDict& t) { t["backend"] = "PyTorch"; },
                {"model.fitting.nets.networks[0].layers[0].resnet", "8->8", "skip"});
}

TEST_CASE("interop: unsupported models are refused naming the key and value") {
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["type"] = "se_atten"; },
                {"model.descriptor.type", "se_atten"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["activation_function"] = "relu"; },
                {"model.descriptor.activation_function", "relu"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["nets"]["networks"][1]["layers"][0]["activation_function"] = "gelu"; },
                {"model.fitting.nets.networks[1].layers[0].activation_function", "gelu"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["numb_fparam"] = 2; },
                {"model.fitting.numb_fparam", "2", "fparam"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["numb_aparam"] = 1; },
                {"model.fitting.numb_aparam", "aparam"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["mixed_types"] = true; },
                {"model.fitting.mixed_types", "type embedding"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["exclude_types"] = {{0, 1}}; },
                {"model.descriptor.exclude_types", "[[0,1]]"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["atom_exclude_types"] = {1}; },
                {"model.atom_exclude_types", "[1]"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["env_protection"] = 0.5; },
                {"model.descriptor.env_protection", "0.5"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["compress"] = DeepmdDict::object(); },
                {"model.descriptor.compress", "compressed"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["nets"]["networks"][0]["layers"][1]["bias"] = false; },
                {"model.fitting.nets.networks[0].layers[1].bias", "without bias"});
  check_refused("tos_true",
                [](DeepmdDict& t) {
                  auto& s = t["model"]["@variables"]["out_std"]["value"];
                  s[1] = 2.0;
                },
                {"model.@variables.out_std", "out_std = 1"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["precision"] = "float32"; },
                {"model.fitting.precision", "mixed precisions"});
  check_refused("tos_true",
                [](DeepmdDict& t) {
                  t["model"]["descriptor"]["embeddings"]["networks"][0]["layers"][0]["@variables"]["w"]["dtype"] = "float32";
                },
                {"model.descriptor.embeddings.networks[0].layers[0].@variables.w", "float32", "mixed precisions"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["type"] = "zbl"; }, {"model.type", "zbl"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["type"] = "dipole"; },
                {"model.fitting.type", "dipole"});
}

TEST_CASE("interop: malformed dictionaries are refused naming the key, value and expectation") {
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"].erase("sel"); },
                {"model.descriptor.sel is missing"});
  check_refused("tos_true", [](DeepmdDict& t) { t.erase("model"); }, {"model is missing"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["rcut"] = "six"; },
                {"model.descriptor.rcut", "wrong type", "six"});
  check_refused("tos_true",
                [](DeepmdDict& t) {
                  auto& davg = t["model"]["descriptor"]["@variables"]["davg"];
                  davg = dpk::interop::make_array("float64", {2, 23, 4}, std::vector<double>(2 * 23 * 4, 0.0));
                },
                {"model.descriptor.@variables.davg", "shape [2, 23, 4]", "expected [2, 24, 4]"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["@variables"]["bias_atom_e"]["dtype"] = "int64"; },
                {"model.fitting.@variables.bias_atom_e", "int64", "float64 or float32"});
  check_refused("tos_true",
                [](DeepmdDict& t) {
                  auto& w = t["model"]["fitting"]["nets"]["networks"][0]["layers"][0]["@variables"]["w"];
                  w = dpk::interop::make_array("float64", {23, 10}, std::vector<double>(230, 0.0));
                },
                {"model.fitting.nets.networks[0].layers[0].@variables.w", "[23, 10]", "expected [24, 10]"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["type_map"] = {"O", "H", "C"}; },
                {"model.type_map", "3 names", "2 types"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["type_map"] = {"H", "O"}; },
                {"model.descriptor.type_map", "[\"H\",\"O\"]"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["type_map"] = {"O", "C"}; },
                {"model.fitting.type_map", "[\"O\",\"C\"]", "[\"O\",\"H\"]"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["nets"]["networks"][0]["layers"][1]["@variables"].erase("idt"); },
                {"model.fitting.nets.networks[0].layers[1].@variables.idt", "missing"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["descriptor"]["embeddings"]["networks"].erase(1); },
                {"model.descriptor.embeddings.networks", "1 networks, expected 2"});
}

TEST_CASE("interop: bad files are refused and failed writes leave nothing behind") {
  Scratch scratch("badfiles");
  // Not HDF5.
  {
    std::ofstream(scratch / "text.dp") << "this is not an HDF5 file\n";
    std::string const m = error_of([&] { dpk::interop::read_deepmd_model(scratch / "text.dp"); });
    CHECK(contains(m, "text.dp"));
    CHECK(contains(m, "not an HDF5 file"));
  }
  // Truncated .dp.
  {
    std::ifstream in(fixtures + "/tos_true.dp", std::ios::binary);
    std::string const bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::size_t keep : {std::size_t(100), bytes.size() / 2, bytes.size() - 100}) {
      std::ofstream(scratch / "cut.dp", std::ios::binary) << bytes.substr(0, keep);
      std::string const m = error_of([&] { dpk::interop::read_deepmd_model(scratch / "cut.dp"); });
      INFO(keep << ": " << m);
      CHECK(contains(m, "cut.dp"));
      CHECK(!m.empty());
    }
  }
  // An HDF5 file without DeePMD-kit's 'json' attribute.
  {
    dpk::interop::DeepmdDict tree = dpk::interop::read_deepmd_dict(fixtures + "/tos_true.dp");
    dpk::interop::write_deepmd_hdf5(scratch / "ok.dp", tree);
    CHECK(error_of([&] { dpk::interop::read_deepmd_model(scratch / "ok.dp"); }).empty());
  }
  // YAML: not YAML, not a mapping, a missing key, a ragged array.
  {
    std::ofstream(scratch / "bad.yaml") << "model: [unclosed\n";
    CHECK(contains(error_of([&] { dpk::interop::read_deepmd_model(scratch / "bad.yaml"); }), "not valid YAML"));
    std::ofstream(scratch / "list.yaml") << "- 1\n- 2\n";
    CHECK(contains(error_of([&] { dpk::interop::read_deepmd_model(scratch / "list.yaml"); }), "not a mapping"));
    std::ofstream(scratch / "empty.yaml") << "backend: TensorFlow\n";
    CHECK(contains(error_of([&] { dpk::interop::read_deepmd_model(scratch / "empty.yaml"); }), "model is missing"));
    std::ofstream(scratch / "ragged.yaml")
        << "model:\n  x:\n    '@class': np.ndarray\n    dtype: float64\n    value: [[1.0, 2.0], [3.0]]\n";
    std::string const m = error_of([&] { dpk::interop::read_deepmd_model(scratch / "ragged.yaml"); });
    CHECK(contains(m, "model.x"));
    CHECK(contains(m, "ragged"));
  }
  CHECK(contains(error_of([&] { dpk::interop::read_deepmd_model(scratch / "model.pb"); }), "unknown extension"));
  // Failed exports write nothing: no type_map, a folder that does not exist.
  dpk::ModelFileData data = dpk::interop::read_deepmd_model(fixtures + "/tos_true.dp");
  dpk::ModelFileData no_names = data;
  no_names.type_map.clear();
  for (std::string const ext : {".dp", ".yaml"}) {
    CHECK(contains(error_of([&] { dpk::interop::write_deepmd_model(scratch / ("x" + ext), no_names, "m.dpk"); }),
                   "type_map"));
    CHECK_FALSE(fs::exists(scratch / ("x" + ext)));
    CHECK_FALSE(error_of([&] { dpk::interop::write_deepmd_model(scratch / ("missing/x" + ext), data, "m.dpk"); }).empty());
  }
  // A failed export does not damage the previous file at that path.
  dpk::interop::write_deepmd_model(scratch / "keep.dp", data, "m.dpk");
  CHECK_FALSE(error_of([&] { dpk::interop::write_deepmd_model(scratch / "keep.dp", no_names, "m.dpk"); }).empty());
  check_same_model(dpk::interop::read_deepmd_model(scratch / "keep.dp"), data);
  std::size_t leftovers = 0;
  for (auto const& entry : fs::directory_iterator(scratch.dir))
    leftovers += entry.path().string().find(".tmp.") != std::string::npos;
  CHECK(leftovers == 0);
}

TEST_CASE("interop: fuzz findings in the YAML reader are dpk::Errors naming the file (regressions)") {
  // libFuzzer (fuzz_deepmd_yaml, 45 s): invalid UTF-8 inside an array made the error message's
  // JSON dump throw nlohmann's type_error (uncaught, not a dpk::Error).
  std::string const file = std::string(dpk_test::data_dir()) + "/fuzz_regressions/deepmd_yaml_invalid_utf8.yaml";
  std::string message;
  try {
    dpk::interop::read_deepmd_yaml(file);
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find(file) != std::string::npos);
  CHECK(message.find("is not a number") != std::string::npos);
  // Flow collections nested deeper than DeePMD-kit's models are refused before yaml-cpp recurses.
  std::string const deep = "model: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  message.clear();
  try {
    dpk::interop::parse_deepmd_yaml(deep, "deep.yaml");
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  CHECK(message == "DeePMD-kit model 'deep.yaml': not valid YAML (flow collections nested deeper than 64 levels)");
}

namespace {

/// A `.dp`-like HDF5 file at `path`: root attribute `json` holding `count` copies of `json_text`
/// (one: a scalar variable-length string, as DeePMD-kit writes it) and, when `dims` is given, a
/// float64 dataset `/variable_0000` of that shape whose values are never written.
void write_hdf5(std::string const& path, std::string const& json_text, hsize_t count = 1,
                std::vector<hsize_t> const& dims = {}, bool null_space = false) {
  using dpk::interop::detail::hdf5::Handle;
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  REQUIRE(file);
  if (!dims.empty() || null_space) {
    Handle space(null_space ? H5Screate(H5S_NULL) : H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    Handle dataset(H5Dcreate2(file.id, "/variable_0000", H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   H5Dclose);
    REQUIRE(dataset);
  }
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id, H5T_VARIABLE);
  H5Tset_cset(type.id, H5T_CSET_UTF8);
  Handle space(count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr), H5Sclose);
  Handle attribute(H5Acreate2(file.id, "json", type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::vector<char const*> texts(count, json_text.c_str());
  REQUIRE(H5Awrite(attribute.id, type.id, texts.data()) >= 0);
}

}  // namespace

TEST_CASE("interop: .dp reader refusals found writing fuzz_deepmd_hdf5 (regressions)") {
  Scratch scratch("dp_regressions");
  std::string const path = scratch / "m.dp";
  std::string const ok_json = R"({"model": {"@variables": {"x": "/variable_0000"}}})";
  // The `json` attribute as a list of two strings: read into one pointer, HDF5 wrote past it.
  write_hdf5(path, ok_json, 2);
  CHECK(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }) ==
        "DeePMD-kit model '" + path + "': root attribute 'json' is not a single string (2 elements)");
  // A dataset whose shape promises 2^31 x 2^20 values that were never written: the reader
  // allocated what the shape said (std::length_error / bad_alloc, not a dpk::Error).
  write_hdf5(path, ok_json, 1, {hsize_t(1) << 31, hsize_t(1) << 20});
  CHECK(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }) ==
        "DeePMD-kit model '" + path + "': variable 'model.@variables.x' (dataset '/variable_0000') has shape "
        "[2147483648, 1048576] but only 0 bytes stored (unwritten, damaged or truncated)");
  // A small dataset that was never written is refused the same way (its values would be fill values).
  write_hdf5(path, ok_json, 1, {3, 4});
  CHECK(contains(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }), "has shape [3, 4] but only 0 bytes stored"));
  // A null dataspace (no shape at all).
  write_hdf5(path, ok_json, 1, {}, true);
  CHECK(contains(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }),
                 "(dataset '/variable_0000') has no shape (null or unreadable dataspace)"));
  // JSON nested 100,000 levels deep: nlohmann parses it, then for_each_variable recursed per level.
  write_hdf5(path, std::string(100000, '[') + std::string(100000, ']'));
  CHECK(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }) ==
        "DeePMD-kit model '" + path + "': root attribute 'json' is nested deeper than 100 levels of lists/objects");
  // An array written into the attribute itself (DeePMD-kit writes datasets) with a shape that is
  // not a list: it passed through unchecked, and the importer's array_shape threw nlohmann's type_error.
  write_hdf5(path, R"({"model": {"@variables": {"x": {"@class": "np.ndarray", "dtype": "float64", "shape": "two", "value": [1, 2]}}}})");
  CHECK(error_of([&] { dpk::interop::read_deepmd_hdf5(path); }) ==
        "DeePMD-kit model '" + path + "': variable 'model.@variables.x' has shape \"two\", expected a list of non-negative integers");
  // The same bytes read from memory (what fuzz_deepmd_hdf5 calls) give the same refusal.
  std::ifstream in(path, std::ios::binary);
  std::string const bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(error_of([&] { dpk::interop::parse_deepmd_hdf5(bytes, "memory.dp"); }) ==
        "DeePMD-kit model 'memory.dp': variable 'model.@variables.x' has shape \"two\", expected a list of non-negative integers");
  // And a real model read from memory equals the model read from its file.
  std::ifstream real(fixtures + "/tos_true.dp", std::ios::binary);
  std::string const real_bytes((std::istreambuf_iterator<char>(real)), std::istreambuf_iterator<char>());
  CHECK(dpk::interop::parse_deepmd_hdf5(real_bytes, "memory.dp") == dpk::interop::read_deepmd_hdf5(fixtures + "/tos_true.dp"));
  CHECK(contains(error_of([&] { dpk::interop::parse_deepmd_hdf5("not HDF5", "memory.dp"); }), "'memory.dp': not an HDF5 file"));
}

TEST_CASE("interop: dictionary -> model refusals found writing fuzz_deepmd_model (regressions)") {
  // Each edit made model_from_deepmd_dict throw something other than a dpk::Error, wrap an
  // integer, overflow an int or allocate what the file does not hold; each is now a dpk::Error.
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["@variables"]["bias_atom_e"]["shape"] = "two"; },
                {"model.fitting.@variables.bias_atom_e", "has shape \"two\", expected a list of non-negative integers"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["@variables"]["bias_atom_e"]["shape"] = {2, -1}; },
                {"model.fitting.@variables.bias_atom_e", "[2,-1]"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["@variables"]["bias_atom_e"]["value"] = {1.0, "x"}; },
                {"model.fitting.@variables.bias_atom_e", "has a value \"x\" that is not a number"});
  check_refused("tos_true",
                [](DeepmdDict& t) { t["model"]["fitting"]["@variables"]["bias_atom_e"]["value"] = {1.0, 2.0, 3.0}; },
                {"model.fitting.@variables.bias_atom_e", "has shape [2,1] but 3 values"});
  // 2^32 + 10 read as int was 10: tos_true (sel [10, 14]) was accepted as if sel were [10, 14].
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["sel"][0] = 4294967306LL; },
                {"model.descriptor.sel", "expected a list of non-negative integers below 2^31"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["sel"] = {2147483647, 2147483647}; },
                {"model.descriptor.sel", "sums to more than 2^31 - 1 neighbours"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["axis_neuron"] = 4294967300LL; },
                {"model.descriptor.axis_neuron", "has the wrong type (4294967300)"});
  // neuron [2^31 - 1]: the layer shapes overflowed int, the buffer asked for ~10^19 values.
  check_refused("tos_true",
                [](DeepmdDict& t) {
                  t["model"]["descriptor"]["neuron"] = {2147483647};
                  t["model"]["fitting"]["dim_descrpt"] = nullptr;
                },
                {"model settings", "more than the file's arrays hold"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["fitting"]["neuron"] = {100000, 100000}; },
                {"model settings", "fitting.neuron [100000,100000]", "need 200", "more than the file's arrays hold"});
  check_refused("tos_true", [](DeepmdDict& t) { t["model"]["descriptor"]["neuron"] = {0, 8}; },
                {"model.descriptor.neuron", "expected entries >= 1"});
}
