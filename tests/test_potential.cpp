// <dpk/potential.hpp>: a model with DeePMD-kit's fixture weights (tests/data/water_model),
// written by the model-file writer and loaded by dpk::Potential, reproduces the fixture's
// energies and forces; many frames in one call equal single-frame calls; non-periodic frames;
// the device-View overload; clear errors for bad types and sizes; install_model_data's check of
// a file against a model.
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include "error_test_helpers.hpp"
#include "neighbor_test_helpers.hpp"
#include "water_model_fixture.hpp"

#include <dpk/io/npy.hpp>
#include <dpk/potential.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

// nvcc takes the global allocation functions for host-device ones, where throw is not allowed:
// the count (of host code's allocations) is checked by the host builds.
#if !defined(__CUDACC__)
#define DPK_TEST_COUNTS_ALLOCATIONS 1
/// Every allocation through operator new in this test program (any thread), for the test that a
/// steady-state MD call allocates no more with more atoms. The array and aligned forms are left to
/// the library (its new[] calls this operator new; its aligned forms pair among themselves).
std::atomic<long> dpk_test_allocations{0};

void* operator new(std::size_t bytes) {
  dpk_test_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes > 0 ? bytes : 1)) return p;
  throw std::bad_alloc();
}
// GCC sees free() of what it takes for operator new's memory (this operator new is malloc's).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // !__CUDACC__

namespace {

using dpk_test::Mem;
using dpk_test::Space;
/// The fixture's tos_true case.
std::string const fixture = dpk_test::fixture + "tos_true/";

/// The fixture model's hyperparameters (tests/data/water_model/README.md).
dpk::ModelFileData fixture_model_data() {
  dpk::ModelFileData d;
  d.kind = "model";
  d.precision = "float64";
  d.ntypes = 2;
  d.type_map = {"O", "H"};
  d.descriptor.rcut = 6.0;
  d.descriptor.rcut_smth = 0.5;
  d.descriptor.sel = {46, 92};
  d.descriptor.neuron = {8, 16};
  d.descriptor.axis_neuron = 4;
  d.descriptor.resnet_dt = false;
  d.descriptor.type_one_side = true;
  d.fitting.neuron = {16, 16};
  d.fitting.resnet_dt = true;
  // Parameters in the model's layout, from the fixture's weight files.
  dpk::EnergyModel<double, Space> model(d.descriptor, d.fitting, d.ntypes);
  d.parameters.assign(model.num_parameters(), 0.0);
  for (auto const& t : model.tensors()) {
    auto a = dpk::read_npy(fixture + "weights/" + t.name + ".npy");
    REQUIRE_MESSAGE(a.data.size() == t.size(), t.name);
    std::copy(a.data.begin(), a.data.end(), d.parameters.begin() + std::ptrdiff_t(t.offset));
  }
  d.tensors = model.tensors();
  d.avg = dpk::read_npy(fixture + "avg.npy").data;
  d.stdev = dpk::read_npy(fixture + "std.npy").data;
  d.energy_bias = {-93.5, -187.25};
  return d;
}

/// The fixture model written with the model-file writer into a temporary file, removed at the
/// end of the scope.
struct FixtureModelFile {
  std::string path;
  FixtureModelFile() {
    static int count = 0;
    path = (std::filesystem::temp_directory_path() /
            ("dpk_test_potential_" + std::to_string(::getpid()) + "_" + std::to_string(count++) + ".dpk"))
               .string();
    dpk::write_model_file(path, fixture_model_data());
  }
  ~FixtureModelFile() { std::filesystem::remove(path); }
};

using dpk_test::frame_array;
using dpk_test::max_abs_difference;
using dpk_test::water_types;

}  // namespace

TEST_CASE("Potential: a written fixture model reproduces DeePMD-kit's energies and forces") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  CHECK(potential.type_map() == std::vector<std::string>{"O", "H"});
  CHECK(potential.rcut() == 6.0);
  CHECK(potential.ntypes() == 2);
  CHECK(potential.model_precision() == "float64");
  CHECK(potential.type_index("H") == 1);
  CHECK(potential.type_indices({"H", "O"}) == std::vector<int>{1, 0});

  for (int frame = 0; frame < 2; ++frame) {
    CAPTURE(frame);
    auto const r = potential.compute(frame_array(frame, "coord"), water_types(), frame_array(frame, "box"), true);
    REQUIRE(r.nframes == 1);
    REQUIRE(r.natoms == 192);
    auto const want_atom_energy = frame_array(frame, "atom_energy");
    double want_energy = 0;
    for (double e : want_atom_energy) want_energy += e;
    CHECK(std::abs(r.energy[0] - want_energy) / std::abs(want_energy) < 1e-10);
    double worst_atom = 0, atom_sum = 0;
    for (std::size_t i = 0; i < want_atom_energy.size(); ++i) {
      worst_atom = std::max(worst_atom, std::abs(r.atom_energy[i] - want_atom_energy[i]) / std::abs(want_atom_energy[i]));
      atom_sum += r.atom_energy[i];
    }
    CHECK(worst_atom < 1e-10);
    CHECK(std::abs(atom_sum - r.energy[0]) < 1e-9);
    double const force_error = max_abs_difference(r.force, frame_array(frame, "force"));
    CHECK(force_error < 1e-8);
    CHECK(max_abs_difference(r.virial, frame_array(frame, "virial")) < 1e-6);
    REQUIRE(r.atom_virial.size() == 192u * 9);
    for (int k = 0; k < 9; ++k) {
      double sum = 0;
      for (int i = 0; i < 192; ++i) sum += r.atom_virial[std::size_t(9 * i + k)];
      CHECK(sum == doctest::Approx(r.virial[std::size_t(k)]).epsilon(1e-10));
    }
    MESSAGE("frame ", frame, ": E ", r.energy[0], " (want ", want_energy, "), max |dF| ", force_error);
  }
}

TEST_CASE("Potential: two frames in one call equal two single-frame calls") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  std::vector<double> coord = frame_array(0, "coord"), box = frame_array(0, "box");
  auto const c1 = frame_array(1, "coord"), b1 = frame_array(1, "box");
  coord.insert(coord.end(), c1.begin(), c1.end());
  box.insert(box.end(), b1.begin(), b1.end());
  auto const both = potential.compute(coord, water_types(), box);
  REQUIRE(both.nframes == 2);
  CHECK(both.atom_virial.empty());
  for (int frame = 0; frame < 2; ++frame) {
    CAPTURE(frame);
    auto const one = potential.compute(frame_array(frame, "coord"), water_types(), frame_array(frame, "box"));
    CHECK(std::abs(both.energy[std::size_t(frame)] - one.energy[0]) <= 1e-12 * std::abs(one.energy[0]));
    std::size_t const n = 192;
    for (std::size_t k = 0; k < n * 3; ++k) CHECK(std::abs(both.force[frame * n * 3 + k] - one.force[k]) < 1e-12);
    for (std::size_t k = 0; k < n; ++k)
      CHECK(std::abs(both.atom_energy[frame * n + k] - one.atom_energy[k]) < 1e-12);
    for (std::size_t k = 0; k < 9; ++k) CHECK(std::abs(both.virial[frame * 9 + k] - one.virial[k]) < 1e-10);
  }
}

TEST_CASE("Potential: non-periodic frames (a cluster) equal the same cluster in a huge periodic box") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  // A cluster: the atoms of frame 0 within 5 A of atom 0 (positions as stored, no wrapping).
  auto const all = frame_array(0, "coord");
  auto const types_all = water_types();
  std::vector<double> coord;
  std::vector<int> types;
  for (int a = 0; a < 192; ++a) {
    double r2 = 0;
    for (int d = 0; d < 3; ++d) r2 += (all[3 * a + d] - all[d]) * (all[3 * a + d] - all[d]);
    if (r2 < 25.0) {
      coord.insert(coord.end(), {all[3 * a], all[3 * a + 1], all[3 * a + 2]});
      types.push_back(types_all[std::size_t(a)]);
    }
  }
  REQUIRE(types.size() > 10);
  auto const open = potential.compute(coord, types, {});
  std::vector<double> const huge = {200, 0, 0, 0, 200, 0, 0, 0, 200};
  auto const boxed = potential.compute(coord, types, huge);
  CHECK(std::isfinite(open.energy[0]));
  CHECK(std::abs(open.energy[0] - boxed.energy[0]) < 1e-10 * std::abs(boxed.energy[0]));
  CHECK(max_abs_difference(open.force, boxed.force) < 1e-10);
  CHECK(max_abs_difference(open.virial, boxed.virial) < 1e-9);
  // Forces are minus the energy gradient (central differences on one atom), and sum to zero.
  double sum[3] = {0, 0, 0};
  for (std::size_t a = 0; a < types.size(); ++a)
    for (int d = 0; d < 3; ++d) sum[d] += open.force[3 * a + std::size_t(d)];
  for (double s : sum) CHECK(std::abs(s) < 1e-10);
  double const h = 1e-5;
  for (int d = 0; d < 3; ++d) {
    auto plus = coord, minus = coord;
    plus[std::size_t(d)] += h;
    minus[std::size_t(d)] -= h;
    double const fd = -(potential.compute(plus, types, {}).energy[0] - potential.compute(minus, types, {}).energy[0]) / (2 * h);
    CHECK(std::abs(fd - open.force[std::size_t(d)]) < 1e-7);
  }
  MESSAGE("cluster of ", types.size(), " atoms: E ", open.energy[0]);
}

TEST_CASE("Potential: device-View overload equals the host-array overload") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  auto const coord = frame_array(1, "coord");
  auto const box = frame_array(1, "box");
  auto const want = potential.compute(coord, water_types(), box);
  dpk::View2<double, Mem> coord_view("coord", 192, 3);
  dpk::View1<int, Mem> types_view("types", 192);
  dpk::View2<double, Mem> box_view("box", 1, 9);
  auto hc = Kokkos::create_mirror_view(coord_view);
  auto ht = Kokkos::create_mirror_view(types_view);
  auto hb = Kokkos::create_mirror_view(box_view);
  auto const types = water_types();
  for (int a = 0; a < 192; ++a) {
    for (int d = 0; d < 3; ++d) hc(a, d) = coord[std::size_t(3 * a + d)];
    ht(a) = types[std::size_t(a)];
  }
  for (int k = 0; k < 9; ++k) hb(0, k) = box[std::size_t(k)];
  Kokkos::deep_copy(coord_view, hc);
  Kokkos::deep_copy(types_view, ht);
  Kokkos::deep_copy(box_view, hb);
  dpk::Prediction<double, Mem> out;
  potential.compute(Space(), coord_view, types_view, box_view, 1, out);
  Space().fence();
  auto e = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out.energy);
  auto f = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out.force);
  CHECK(e(0) == doctest::Approx(want.energy[0]).epsilon(1e-14));
  double worst = 0;
  for (int a = 0; a < 192; ++a)
    for (int d = 0; d < 3; ++d) worst = std::max(worst, std::abs(f(a, d) - want.force[std::size_t(3 * a + d)]));
  CHECK(worst < 1e-13);

  // Bad type on the device: a clear error naming the atom and the type_map.
  ht(5) = 7;
  Kokkos::deep_copy(types_view, ht);
  CHECK_THROWS_WITH_AS(potential.compute(Space(), coord_view, types_view, box_view, 1, out),
                       doctest::Contains("atom 5 has type index 7, outside the model's 2 types [O, H]"), dpk::Error);
}

TEST_CASE("Potential: float precision runs the same model") {
  FixtureModelFile file;
  dpk::Potential<float> potential(file.path);
  auto const r = potential.compute(frame_array(0, "coord"), water_types(), frame_array(0, "box"));
  auto const want_atom_energy = frame_array(0, "atom_energy");
  double want_energy = 0;
  for (double e : want_atom_energy) want_energy += e;
  CHECK(std::abs(r.energy[0] - want_energy) / std::abs(want_energy) < 1e-6);
  CHECK(max_abs_difference(r.force, frame_array(0, "force")) < 1e-5);
}

TEST_CASE("Potential: clear errors for bad types, sizes and files") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  auto const coord = frame_array(0, "coord");
  auto const box = frame_array(0, "box");
  auto types = water_types();
  types[3] = 2;
  CHECK_THROWS_WITH_AS(potential.compute(coord, types, box),
                       doctest::Contains("atom 3 has type index 2, outside the model's 2 types [O, H]"), dpk::Error);
  types[3] = -1;
  CHECK_THROWS_WITH_AS(potential.compute(coord, types, box), doctest::Contains("type index -1"), dpk::Error);
  CHECK_THROWS_WITH_AS(potential.type_index("C"), doctest::Contains("element 'C' is not in the model's type_map [O, H]"),
                       dpk::Error);
  std::vector<double> short_coord(coord.begin(), coord.end() - 1);
  CHECK_THROWS_WITH_AS(potential.compute(short_coord, water_types(), box), doctest::Contains("'coord' has"), dpk::Error);
  CHECK_THROWS_WITH_AS(potential.compute(coord, water_types(), {1, 2, 3}), doctest::Contains("'box' has 3 values"),
                       dpk::Error);
  CHECK_THROWS_WITH_AS(dpk::Potential<double>("/nonexistent/model.dpk"),
                       doctest::Contains("model file '/nonexistent/model.dpk'"), dpk::Error);
}

TEST_CASE("install_model_data: one check of a file against a model, errors name the file and what differs") {
  // The loader of load_energy_model (Potential, dpk-train test) and of the trainer
  // (--restart, --init-model, --init-frz-model).
  dpk::ModelFileData const good = fixture_model_data();
  std::string const file = "fixture.dpk";
  auto model_for = [](dpk::ModelFileData const& d) {
    return dpk::EnergyModel<double, Space>(d.descriptor, d.fitting, d.ntypes);
  };
  SUBCASE("a matching file: parameters, statistics and bias as written") {
    auto model = model_for(good);
    dpk::install_model_data(good, model, file);
    CHECK(model.parameters_host() == good.parameters);
    CHECK(model.statistics_avg() == good.avg);
    CHECK(model.statistics_std() == good.stdev);
    CHECK(model.energy_bias() == good.energy_bias);
    CHECK_FALSE(model.compressed());
  }
  SUBCASE("type count") {
    auto model = model_for(good);
    auto bad = good;
    bad.ntypes = 3;
    dpk_test::check_error([&] { dpk::install_model_data(bad, model, file); },
                          {"model file 'fixture.dpk' has 3 types, the model has 2"});
  }
  SUBCASE("parameter and tensor count (other fitting_net.neuron)") {
    auto settings = good;
    settings.fitting.neuron = {16, 16, 16};
    auto model = model_for(settings);
    dpk_test::check_error([&] { dpk::install_model_data(good, model, file); },
                          {"model file 'fixture.dpk' has " + std::to_string(good.parameters.size()) + " parameters in " +
                               std::to_string(good.tensors.size()) + " tensors; the model's descriptor/fitting_net "
                               "settings give " + std::to_string(model.num_parameters()) + " in " +
                               std::to_string(model.tensors().size())});
  }
  SUBCASE("a tensor's shape, name or offset (same sizes)") {
    auto model = model_for(good);
    auto bad = good;
    REQUIRE(bad.tensors[0].shape == std::vector<int>{1, 8});
    bad.tensors[0].shape = {8, 1};
    dpk_test::check_error([&] { dpk::install_model_data(bad, model, file); },
                          {"model file 'fixture.dpk': tensor 0 'embedding_net0_layer0_w' shape [8, 1] at offset 0 "
                           "does not match the model's 'embedding_net0_layer0_w' shape [1, 8] at offset 0"});
    bad = good;
    bad.tensors[2].name = "embedding_net0_layer1_x";
    dpk_test::check_error([&] { dpk::install_model_data(bad, model, file); },
                          {"tensor 2 'embedding_net0_layer1_x'", "the model's 'embedding_net0_layer1_w'"});
    bad = good;
    std::swap(bad.tensors[0].offset, bad.tensors[1].offset);  // b before w, as a file may tile them
    dpk_test::check_error([&] { dpk::install_model_data(bad, model, file); },
                          {"tensor 0 'embedding_net0_layer0_w' shape [1, 8] at offset 8", "at offset 0"});
  }
  SUBCASE("statistics of another sel (same tensor table)") {
    auto settings = good;
    settings.descriptor.sel = {46, 90};
    auto model = model_for(settings);
    REQUIRE(model.tensors() == good.tensors);
    dpk_test::check_error([&] { dpk::install_model_data(good, model, file); },
                          {"model file 'fixture.dpk' has statistics avg/std of " + std::to_string(good.avg.size()),
                           "(nnei 136: different descriptor.sel?)"});
  }
  SUBCASE("a compressed model's tables: installed by default, left out with ModelTables::ignore") {
    auto compressed = good;
    auto model = model_for(good);
    dpk::install_model_data(good, model, file);
    compressed.compression = dpk::model_compression(model.build_embedding_table(0.8, 0.01, 5), 0.8, -1);
    auto with_tables = model_for(good);
    dpk::install_model_data(compressed, with_tables, file);
    CHECK(with_tables.compressed());
    auto weights_only = model_for(good);
    dpk::install_model_data(compressed, weights_only, file, dpk::ModelTables::ignore);
    CHECK_FALSE(weights_only.compressed());
    CHECK(weights_only.parameters_host() == good.parameters);
    CHECK(dpk::load_energy_model<double, Space>(compressed, file)->compressed());
    compressed.compression->m1 = 3;  // tables the model cannot take
    auto wrong = model_for(good);
    dpk_test::check_error([&] { dpk::install_model_data(compressed, wrong, file); },
                          {"model file 'fixture.dpk': ", "set_embedding_table"});
  }
}

namespace {

/// The periodic frame (coord, box rows) as an MD domain: the atoms wrapped into the cell, then
/// every periodic image (up to `reach` cells away) within `cutoff` of the cell as a ghost.
/// `owner[g]` is the atom that ghost g images (local atoms own themselves).
struct GhostDomain {
  std::vector<double> coord;
  std::vector<int> types, owner;
  int nlocal = 0;
};

GhostDomain expand_with_ghosts(std::vector<double> const& coord, std::vector<int> const& types,
                               std::vector<double> const& box, double cutoff, int reach) {
  // Inverse of the box (rows = cell vectors): fractional s = x B^-1.
  double const* b = box.data();
  double const det = b[0] * (b[4] * b[8] - b[5] * b[7]) - b[1] * (b[3] * b[8] - b[5] * b[6]) +
                     b[2] * (b[3] * b[7] - b[4] * b[6]);
  double const inv[9] = {(b[4] * b[8] - b[5] * b[7]) / det, (b[2] * b[7] - b[1] * b[8]) / det,
                         (b[1] * b[5] - b[2] * b[4]) / det, (b[5] * b[6] - b[3] * b[8]) / det,
                         (b[0] * b[8] - b[2] * b[6]) / det, (b[2] * b[3] - b[0] * b[5]) / det,
                         (b[3] * b[7] - b[4] * b[6]) / det, (b[1] * b[6] - b[0] * b[7]) / det,
                         (b[0] * b[4] - b[1] * b[3]) / det};
  // Distance between opposite faces along each cell vector: 1 / |column d of B^-1|.
  double margin[3];
  for (int d = 0; d < 3; ++d)
    margin[d] = cutoff * std::sqrt(inv[d] * inv[d] + inv[3 + d] * inv[3 + d] + inv[6 + d] * inv[6 + d]);
  std::size_t const n = types.size();
  std::vector<double> frac(3 * n);
  for (std::size_t a = 0; a < n; ++a)
    for (int d = 0; d < 3; ++d) {
      double s = 0;
      for (int e = 0; e < 3; ++e) s += coord[3 * a + std::size_t(e)] * inv[3 * e + d];
      frac[3 * a + std::size_t(d)] = s - std::floor(s);
    }
  GhostDomain out;
  out.nlocal = int(n);
  auto add = [&](std::size_t a, int i0, int i1, int i2) {
    double const s[3] = {frac[3 * a] + i0, frac[3 * a + 1] + i1, frac[3 * a + 2] + i2};
    for (int d = 0; d < 3; ++d) out.coord.push_back(s[0] * b[d] + s[1] * b[3 + d] + s[2] * b[6 + d]);
    out.types.push_back(types[a]);
    out.owner.push_back(int(a));
  };
  for (std::size_t a = 0; a < n; ++a) add(a, 0, 0, 0);
  for (int i0 = -reach; i0 <= reach; ++i0)
    for (int i1 = -reach; i1 <= reach; ++i1)
      for (int i2 = -reach; i2 <= reach; ++i2) {
        if (i0 == 0 && i1 == 0 && i2 == 0) continue;
        int const image[3] = {i0, i1, i2};
        for (std::size_t a = 0; a < n; ++a) {
          bool near = true;
          for (int d = 0; d < 3; ++d) {
            double const s = frac[3 * a + std::size_t(d)] + image[d];
            near = near && s > -margin[d] && s < 1 + margin[d];
          }
          if (near) add(a, i0, i1, i2);
        }
      }
  return out;
}

/// The ghosts' images (compute_with_ghosts' ghost_image_of) of a domain.
std::vector<int> ghost_images(GhostDomain const& domain) {
  return std::vector<int>(domain.owner.begin() + domain.nlocal, domain.owner.end());
}

/// compute_with_ghosts on the expanded domain, folded back to owners, equals the periodic path;
/// with the ghosts' images (`images`) pairs across the box's faces share their embedding rows
/// too, so the domain has as many rows as the periodic frame (where the model pairs rows).
void check_ghost_domain(dpk::Potential<double>& potential, std::vector<double> const& coord,
                        std::vector<int> const& types, std::vector<double> const& box, int reach,
                        bool images = false) {
  auto const periodic = potential.compute(coord, types, box, true);
  int const periodic_rows = potential.model().batch_layout().embedding_rows();
  bool const paired = potential.model().batch_layout().in.rows.paired;
  auto const domain = expand_with_ghosts(coord, types, box, potential.rcut() + 0.5, reach);
  auto const ghosts = potential.compute_with_ghosts(domain.coord, domain.types, domain.nlocal, true,
                                                    images ? ghost_images(domain) : std::vector<int>());
  int const domain_rows = potential.model().batch_layout().embedding_rows();
  if (images) CHECK(domain_rows == periodic_rows);
  if (!images && paired) CHECK(domain_rows > periodic_rows);  // only pairs inside the box share rows
  int const n = domain.nlocal, nall = int(domain.types.size());
  REQUIRE(ghosts.natoms == nall);
  CHECK(std::abs(ghosts.energy[0] - periodic.energy[0]) <= 1e-10 * std::abs(periodic.energy[0]));
  std::vector<double> force(std::size_t(3 * n), 0.0), atom_virial(std::size_t(9 * n), 0.0);
  for (int g = 0; g < nall; ++g) {
    auto const o = std::size_t(domain.owner[std::size_t(g)]);
    for (int d = 0; d < 3; ++d) force[3 * o + std::size_t(d)] += ghosts.force[3 * std::size_t(g) + std::size_t(d)];
    for (int k = 0; k < 9; ++k)
      atom_virial[9 * o + std::size_t(k)] += ghosts.atom_virial[9 * std::size_t(g) + std::size_t(k)];
  }
  std::vector<double> local_energy(ghosts.atom_energy.begin(), ghosts.atom_energy.begin() + n);
  for (int g = n; g < nall; ++g) CHECK(ghosts.atom_energy[std::size_t(g)] == 0.0);
  CHECK(max_abs_difference(force, periodic.force) < 1e-10);
  CHECK(max_abs_difference(local_energy, periodic.atom_energy) < 1e-10);
  CHECK(max_abs_difference(ghosts.virial, periodic.virial) < 1e-9);
  CHECK(max_abs_difference(atom_virial, periodic.atom_virial) < 1e-10);
  MESSAGE(n, " local + ", nall - n, " ghost atoms", std::string(images ? " with images" : ""), ": E ", ghosts.energy[0],
          " (periodic ", periodic.energy[0], "), max |dF| ", max_abs_difference(force, periodic.force),
          "; embedding rows ", domain_rows, " (periodic ", periodic_rows, ")");
}

/// The ghosts' rows of the workspaces are skipped (no neighbours, no environment rows, no
/// cotangents): what an earlier call left there must not matter. A first call that makes every
/// atom of the domain a centre fills every row (as after an MPI migration that shrank nlocal);
/// the call with the true nlocal must then equal the same call on a fresh Potential, bit for bit.
/// With `images` the calls with the true nlocal name the ghosts' images.
void check_stale_ghost_rows(std::string const& model_path, std::vector<double> const& coord,
                            std::vector<int> const& types, std::vector<double> const& box, bool images = false) {
  dpk::Potential<double> fresh(model_path), reused(model_path);
  auto const domain = expand_with_ghosts(coord, types, box, fresh.rcut() + 0.5, 1);
  int const nall = int(domain.types.size());
  REQUIRE(domain.nlocal < nall);
  std::vector<int> const image_of = images ? ghost_images(domain) : std::vector<int>();
  auto const expected = fresh.compute_with_ghosts(domain.coord, domain.types, domain.nlocal, true, image_of);
  auto const all_centres = reused.compute_with_ghosts(domain.coord, domain.types, nall, true);
  CHECK(all_centres.energy[0] != expected.energy[0]);  // the ghosts' rows were really filled
  auto const again = reused.compute_with_ghosts(domain.coord, domain.types, domain.nlocal, true, image_of);
  CHECK(again.energy == expected.energy);
  CHECK(again.atom_energy == expected.atom_energy);
  CHECK(again.force == expected.force);
  CHECK(again.virial == expected.virial);
  CHECK(again.atom_virial == expected.atom_virial);
}

}  // namespace

TEST_CASE("Potential: compute_with_ghosts after a call with more centres equals a fresh Potential") {
  FixtureModelFile file;
  SUBCASE("ghosts without images") {
    check_stale_ghost_rows(file.path, frame_array(0, "coord"), water_types(), frame_array(0, "box"));
  }
  SUBCASE("ghosts with their images (paired rows across the box's faces)") {
    check_stale_ghost_rows(file.path, frame_array(0, "coord"), water_types(), frame_array(0, "box"), true);
  }
}

TEST_CASE("Potential: compute_with_ghosts on explicit ghost images equals the periodic box") {
  FixtureModelFile file;
  dpk::Potential<double> potential(file.path);
  auto const coord = frame_array(0, "coord");
  auto const box = frame_array(0, "box");
  SUBCASE("water box (12.4 A, rcut 6)") {
    check_ghost_domain(potential, coord, water_types(), box, 1);
    check_ghost_domain(potential, coord, water_types(), box, 1, true);
  }
  // The atoms of the water box inside a 7 A cell (smaller than 2 rcut), orthogonal and tilted:
  // ghosts reach two cells out.
  std::vector<double> small_coord;
  std::vector<int> small_types;
  auto const all_types = water_types();
  for (int a = 0; a < 192; ++a) {
    bool inside = true;
    for (int d = 0; d < 3; ++d) {
      double const x = coord[std::size_t(3 * a + d)] - box[std::size_t(4 * d)] * std::floor(coord[std::size_t(3 * a + d)] / box[std::size_t(4 * d)]);
      inside = inside && x < 7.0;
    }
    if (inside) {
      for (int d = 0; d < 3; ++d) small_coord.push_back(coord[std::size_t(3 * a + d)]);
      small_types.push_back(all_types[std::size_t(a)]);
    }
  }
  REQUIRE(small_types.size() > 10);
  SUBCASE("7 A orthogonal cell") {
    for (bool images : {false, true})
      check_ghost_domain(potential, small_coord, small_types, {7, 0, 0, 0, 7, 0, 0, 0, 7}, 2, images);
  }
  SUBCASE("7 A triclinic cell") {
    for (bool images : {false, true})
      check_ghost_domain(potential, small_coord, small_types, {7, 0, 0, 1.5, 7, 0, -1.0, 2.0, 7}, 2, images);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(potential.compute_with_ghosts(coord, water_types(), 193),
                         doctest::Contains("nlocal = 193 must be in [0, 192]"), dpk::Error);
    CHECK_THROWS_WITH_AS(potential.compute_with_ghosts({1.0, 2.0}, water_types(), 10),
                         doctest::Contains("'coord' has 2 values"), dpk::Error);
    // 190 local atoms (64 O, 126 H), the last two H as ghosts.
    CHECK_THROWS_WITH_AS(potential.compute_with_ghosts(coord, water_types(), 190, false, {0}),
                         doctest::Contains("'ghost_image_of' has 1 entries, expected one per ghost atom (2"),
                         dpk::Error);
    CHECK_THROWS_WITH_AS(potential.compute_with_ghosts(coord, water_types(), 190, false, {-1, 190}),
                         doctest::Contains("ghost_image_of[1] = 190 (ghost atom 191) must be a local atom in [0, 190)"),
                         dpk::Error);
    CHECK_THROWS_WITH_AS(potential.compute_with_ghosts(coord, water_types(), 190, false, {0, -1}),
                         doctest::Contains("ghost atom 190 has type 1 but ghost_image_of[0] = 0 has type 0"),
                         dpk::Error);
    CHECK_NOTHROW(potential.compute_with_ghosts(coord, water_types(), 190, false, {-1, 189}));
  }
}

TEST_CASE("Potential: a compressed model on explicit ghost images equals it on the periodic box") {
  // The path of LAMMPS' pair_style dpk (compute_with_ghosts) with the embedding tables
  // (docs/compression.md): ghosts have no neighbour list, their descriptor rows are never read.
  dpk::ModelFileData data = fixture_model_data();
  dpk::EnergyModel<double, Space> model(data.descriptor, data.fitting, data.ntypes);
  model.set_parameters(data.parameters);
  model.set_statistics(data.avg, data.stdev);
  data.compression = dpk::model_compression(model.build_embedding_table(0.8, 0.01, 5), 0.8, -1);
  std::string const path = (std::filesystem::temp_directory_path() /
                            ("dpk_test_potential_compressed_" + std::to_string(::getpid()) + ".dpk"))
                               .string();
  dpk::write_model_file(path, data);
  {
    dpk::Potential<double> potential(path);
    REQUIRE(potential.compressed());
    check_ghost_domain(potential, frame_array(0, "coord"), water_types(), frame_array(0, "box"), 1);
  }
  check_stale_ghost_rows(path, frame_array(0, "coord"), water_types(), frame_array(0, "box"));
  std::filesystem::remove(path);
}

#if defined(DPK_TEST_COUNTS_ALLOCATIONS)
TEST_CASE("Potential: a steady-state compute_with_ghosts allocates no more with more ghosts") {
  // LAMMPS calls compute_with_ghosts at every step with thousands of ghosts (pair_style dpk).
  // Workspaces are kept from call to call, so a call that repeats the last one's sizes may
  // allocate only what does not depend on the atoms (Kokkos' kernel labels, say). A host loop
  // over the atoms that allocates (an error message built before its check passed: about 0.7 ms of a
  // 4.7 ms LAMMPS step, docs/md.md) makes the count grow with the ghosts.
  FixtureModelFile file;
  auto const coord = frame_array(0, "coord");
  auto const box = frame_array(0, "box");
  auto steady_allocations = [&](double cutoff_margin) {
    dpk::Potential<double> potential(file.path);
    auto const domain = expand_with_ghosts(coord, water_types(), box, potential.rcut() + cutoff_margin, 1);
    auto const images = ghost_images(domain);
    dpk::PotentialResult out;
    for (int call = 0; call < 2; ++call)
      potential.compute_with_ghosts(out, domain.coord, domain.types, domain.nlocal, true, images);
    long const before = dpk_test_allocations.load();
    potential.compute_with_ghosts(out, domain.coord, domain.types, domain.nlocal, true, images);
    return std::make_pair(dpk_test_allocations.load() - before, int(domain.types.size()));
  };
  auto const [near_allocations, near_atoms] = steady_allocations(0.5);
  auto const [far_allocations, far_atoms] = steady_allocations(2.5);
  REQUIRE(far_atoms > near_atoms + 500);
  MESSAGE("allocations per steady-state call: ", near_allocations, " with ", near_atoms, " atoms, ", far_allocations,
          " with ", far_atoms);
  CHECK(far_allocations == near_allocations);
}

TEST_CASE("Potential: a steady-state periodic compute allocates no more with more atoms") {
  // dpk-md's path (and any MD code's with a periodic box): the water box and its 2 x 2 x 2 replica.
  FixtureModelFile file;
  dpk_test::HostBatch water;
  water.nframes = 1;
  water.types = water_types();
  water.natoms = int(water.types.size());
  water.coord = frame_array(0, "coord");
  water.box = frame_array(0, "box");
  auto steady_allocations = [&](int copies) {
    auto const big = dpk_test::replicate(water, copies, copies, copies);
    dpk::Potential<double> potential(file.path);
    dpk::PotentialResult out;
    for (int call = 0; call < 2; ++call) potential.compute(out, big.coord, big.types, big.box, true);
    long const before = dpk_test_allocations.load();
    potential.compute(out, big.coord, big.types, big.box, true);
    return dpk_test_allocations.load() - before;
  };
  long const one = steady_allocations(1), eight = steady_allocations(2);
  MESSAGE("allocations per steady-state call: ", one, " with 192 atoms, ", eight, " with 1536");
  CHECK(eight == one);
}
#endif  // DPK_TEST_COUNTS_ALLOCATIONS
