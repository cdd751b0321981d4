// The energy model against DeePMD-kit (tests/data/water_model), finite differences of the
// energy (forces, virial) and of the loss (every parameter tensor), and invariances.
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include "execution_spaces.hpp"
#include "water_model_fixture.hpp"

#include <dpk/io/npy.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/train/ener_loss.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace dpk_test;  // water_model_fixture.hpp

double relative_error(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("energy model equals DeePMD-kit on two water frames", Case, fixture_prediction) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  bool const is_double = sizeof(Scalar) == 8;
  for (bool tos : {true, false}) {
    std::string const dir = fixture + (tos ? "tos_true/" : "tos_false/");
    CAPTURE(tos);
    dpk::EnergyModel<Scalar, Space> model(fixture_descriptor(tos), fixture_fitting(), 2);
    load_fixture_model(model, dir);
    for (int frame = 0; frame < 2; ++frame) {
      CAPTURE(frame);
      std::string const p = dir + "frame" + std::to_string(frame) + "_";
      auto frames = make_frames<Scalar, Mem>(dpk::read_npy(p + "coord.npy").data, dpk::read_npy(p + "box.npy").data,
                                             water_types(), 1);
      dpk::Prediction<Scalar, Mem> out;
      model.predict(Space(), frames, out, true, true);
      auto descriptor = host(model.descriptor_values(Space()));
      auto want_d = dpk::read_npy(p + "descriptor.npy").data;
      REQUIRE(descriptor.size() == want_d.size());
      double worst_d = 0;
      for (std::size_t k = 0; k < want_d.size(); ++k)
        worst_d = std::max(worst_d, std::abs(descriptor[k] - want_d[k]) / (std::abs(want_d[k]) + 1e-3));
      CHECK(worst_d < (is_double ? 1e-10 : 1e-4));
      auto atom_energy = host(out.atom_energy);
      auto want_e = dpk::read_npy(p + "atom_energy.npy").data;
      double worst_e = 0, total = 0;
      for (std::size_t i = 0; i < want_e.size(); ++i) {
        worst_e = std::max(worst_e, relative_error(atom_energy[i], want_e[i]) / std::abs(want_e[i]));
        total += want_e[i];
      }
      CHECK(worst_e < (is_double ? 1e-10 : 1e-6));
      CHECK(relative_error(host(out.energy)[0], total) / std::abs(total) < (is_double ? 1e-12 : 1e-6));
      auto force = host(out.force);
      auto want_f = dpk::read_npy(p + "force.npy").data;
      double worst_f = 0;
      for (std::size_t k = 0; k < want_f.size(); ++k) worst_f = std::max(worst_f, std::abs(force[k] - want_f[k]));
      CHECK(worst_f < (is_double ? 1e-8 : 1e-5));
      auto virial = host(out.virial);
      auto want_v = dpk::read_npy(p + "virial.npy").data;
      double worst_v = 0;
      for (int k = 0; k < 9; ++k) worst_v = std::max(worst_v, std::abs(virial[k] - want_v[k]));
      CHECK(worst_v < (is_double ? 1e-6 : 1e-3));
      // Per-atom virials sum to the virial.
      auto atom_virial = host(out.atom_virial);
      for (int k = 0; k < 9; ++k) {
        double sum = 0;
        for (int i = 0; i < 192; ++i) sum += atom_virial[9 * i + k];
        CHECK(sum == doctest::Approx(virial[k]).epsilon(is_double ? 1e-10 : 1e-4));
      }
      MESSAGE("tos=", tos, " frame ", frame, " max rel err D ", worst_d, " E_i ", worst_e, " |dF| ", worst_f,
              " |dW| ", worst_v);
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(fixture_prediction, dpk_test::SpacesAndScalars);

namespace {

// A small random periodic system of `ntypes` types for finite-difference tests.
struct SmallSystem {
  int natoms, nframes;
  std::vector<double> coord, box;
  std::vector<int> types;
  // `ntypes` distinct types cycle over the atoms (types >= ntypes never appear); boxes of edge
  // about `length` (6.5: no atom sees two images of another within rcut 3.2).
  SmallSystem(int ntypes, int natoms_, int nframes_, unsigned seed, double length = 6.5)
      : natoms(natoms_), nframes(nframes_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int f = 0; f < nframes; ++f) {
      double const l = length + 0.3 * f;
      std::vector<double> b = {l, 0, 0, 0.4, l - 0.2, 0, -0.3, 0.2, l + 0.1};
      box.insert(box.end(), b.begin(), b.end());
      for (int a = 0; a < natoms; ++a) {
        double const s0 = u(rng), s1 = u(rng), s2 = u(rng);
        for (int d = 0; d < 3; ++d) coord.push_back(s0 * b[d] + s1 * b[3 + d] + s2 * b[6 + d]);
      }
    }
    for (int a = 0; a < natoms; ++a) types.push_back(a % ntypes);
  }
};

dpk::DescriptorConfig small_descriptor(int ntypes, bool tos, bool resnet_dt) {
  dpk::DescriptorConfig d;
  d.rcut = 3.2;
  d.rcut_smth = 0.8;
  d.sel.assign(ntypes, 12);
  d.neuron = {3, 6, 6};
  d.axis_neuron = 2;
  d.type_one_side = tos;
  d.resnet_dt = resnet_dt;
  return d;
}

dpk::FittingConfig small_fitting(bool resnet_dt) {
  dpk::FittingConfig f;
  f.neuron = {5, 5};
  f.resnet_dt = resnet_dt;
  return f;
}

template <class Scalar, class M = Mem>
dpk::Labels<Scalar, M> random_labels(int nframes, int nloc, bool virial, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  dpk::Labels<Scalar, M> l;
  l.has_virial = virial;
  l.energy = dpk::View1<Scalar, M>("e", nframes);
  l.force = dpk::View2<Scalar, M>("f", nloc, 3);
  l.virial = dpk::View2<Scalar, M>("v", nframes, 9);
  auto he = Kokkos::create_mirror_view(l.energy);
  auto hf = Kokkos::create_mirror_view(l.force);
  auto hv = Kokkos::create_mirror_view(l.virial);
  for (int f = 0; f < nframes; ++f) he(f) = n(rng);
  for (int a = 0; a < nloc; ++a)
    for (int d = 0; d < 3; ++d) hf(a, d) = 0.3 * n(rng);
  for (int f = 0; f < nframes; ++f)
    for (int k = 0; k < 9; ++k) hv(f, k) = n(rng);
  Kokkos::deep_copy(l.energy, he);
  Kokkos::deep_copy(l.force, hf);
  Kokkos::deep_copy(l.virial, hv);
  return l;
}

// Statistics that make the normalised rows O(1) on the small system.
template <class Scalar, class ExecutionSpace>
void small_statistics(dpk::EnergyModel<Scalar, ExecutionSpace>& model, int ntypes) {
  int const nnei = model.descriptor().nnei();
  std::vector<double> avg(ntypes * nnei * 4, 0.0), sd(avg.size(), 0.0);
  for (int t = 0; t < ntypes; ++t)
    for (int s = 0; s < nnei; ++s) {
      avg[(t * nnei + s) * 4] = 0.1 + 0.05 * t;
      sd[(t * nnei + s) * 4] = 0.3;
      for (int c = 1; c < 4; ++c) sd[(t * nnei + s) * 4 + c] = 0.2 + 0.02 * t;
    }
  model.set_statistics(avg, sd);
}

// A small model (parameters from `seed`, small_statistics) and one batch of `sys` with random
// labels (virial included) from `label_seed`.
struct SmallProblem {
  dpk::EnergyModel<double, Space> model;
  dpk::Frames<double, Mem> frames;
  dpk::Labels<double, Mem> labels;
  SmallProblem(SmallSystem const& sys, int ntypes, bool tos, bool resnet_dt, std::uint64_t seed, unsigned label_seed)
      : model(small_descriptor(ntypes, tos, resnet_dt), small_fitting(resnet_dt), ntypes),
        frames(make_frames<double>(sys.coord, sys.box, sys.types, sys.nframes)),
        labels(random_labels<double>(sys.nframes, sys.nframes * sys.natoms, true, label_seed)) {
    model.initialize_parameters(seed);
    small_statistics(model, ntypes);
  }
};

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("loss gradient equals central finite differences for every parameter tensor", Space,
                          finite_differences) {
  using Mem = dpk::memory_space_t<Space>;
  struct Case {
    int ntypes;
    bool tos, resnet_dt;
    double pe, pf, pv;
    int present = 0;  ///< types that occur in the frames (0: all)
  };
  std::vector<Case> cases = {
      {2, true, false, 1.0, 0.0, 0.0},  {2, true, true, 0.0, 1.0, 0.0},   {2, false, true, 0.0, 0.0, 1.0},
      {3, false, false, 0.5, 2.0, 0.7}, {3, true, true, 0.3, 1.0, 0.2},   {2, false, false, 0.0, 1.0, 0.0},
      {3, true, true, 0.3, 1.0, 0.2, 2},  // type 2 absent from the batch: its fitting net gets zero gradient
  };
  for (auto const& c : cases) {
    CAPTURE(c.ntypes);
    CAPTURE(c.tos);
    CAPTURE(c.resnet_dt);
    CAPTURE(c.pe);
    CAPTURE(c.pf);
    CAPTURE(c.pv);
    CAPTURE(c.present);
    SmallSystem sys(c.present > 0 ? c.present : c.ntypes, 14, 2, 11 + c.ntypes);
    dpk::EnergyModel<double, Space> model(small_descriptor(c.ntypes, c.tos, c.resnet_dt), small_fitting(c.resnet_dt),
                                          c.ntypes);
    dpk::EnerLoss<double, Space> loss;
    model.initialize_parameters(5);
    small_statistics(model, c.ntypes);
    model.set_energy_bias(std::vector<double>(c.ntypes, -1.0));
    auto frames = make_frames<double, Mem>(sys.coord, sys.box, sys.types, sys.nframes);
    auto labels = random_labels<double, Mem>(sys.nframes, sys.nframes * sys.natoms, c.pv > 0, 3);
    dpk::LossPrefactors pref{c.pe, c.pf, c.pv};
    // A step with other prefactors first: the gradient buffer then holds stale values that the
    // next step must overwrite (or zero) everywhere.
    loss.loss_and_gradient(Space(), model, frames, labels, dpk::LossPrefactors{1.0, 1.0, c.pv > 0 ? 1.0 : 0.0});
    loss.loss_and_gradient(Space(), model, frames, labels, pref);
    auto grad = model.gradient_host();
    auto params = model.parameters_host();
    REQUIRE(model.neighbor_list().dropped == 0);
    auto loss_at = [&](std::vector<double> const& p) {
      model.set_parameters(p);
      return loss.evaluate(Space(), model, frames, labels, pref).loss;
    };
    double const h = 1e-5;
    int checked = 0, significant = 0;
    for (auto const& t : model.tensors()) {
      // a few entries of every tensor: first, middle, last
      for (std::size_t k : {std::size_t(0), t.size() / 2, t.size() - 1}) {
        std::size_t const idx = t.offset + k;
        auto pp = params, pm = params;
        pp[idx] += h;
        pm[idx] -= h;
        double const fd = (loss_at(pp) - loss_at(pm)) / (2 * h);
        double const scale = std::max(std::abs(fd), std::abs(grad[idx]));
        CAPTURE(t.name);
        CAPTURE(k);
        // relative 1e-6 where the gradient is not tiny; the absolute floor is the FD rounding noise
        CHECK(std::abs(grad[idx] - fd) < 1e-6 * scale + 2e-9);
        if (scale > 1e-4) ++significant;
        ++checked;
      }
    }
    model.set_parameters(params);
    CHECK(significant > checked / 2);
    // The device buffers hold each tensor at its buffer offset (on a cache line) and zeros
    // between tensors, the gradient too after the steps above; the host exchanges are packed.
    auto const& layout = model.layout();
    auto const device_params = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.parameters());
    auto const device_grad = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.gradient());
    REQUIRE(device_params.extent(0) == layout.buffer_size);
    REQUIRE(device_grad.extent(0) == layout.buffer_size);
    CHECK(model.buffer_size() == layout.buffer_size);
    CHECK(model.num_parameters() == params.size());
    std::vector<char> inside(layout.buffer_size, 0);
    std::size_t misplaced = 0, gap_values = 0;
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
      CHECK(reinterpret_cast<std::uintptr_t>(&device_params(layout.buffer_offsets[i])) % 64 == 0);
      for (std::size_t k = 0; k < layout.tensors[i].size(); ++k) {
        std::size_t const at = layout.buffer_offsets[i] + k, packed = layout.tensors[i].offset + k;
        inside[at] = 1;
        misplaced += device_params(at) != params[packed] || device_grad(at) != grad[packed];
      }
    }
    for (std::size_t at = 0; at < layout.buffer_size; ++at)
      gap_values += !inside[at] && (device_params(at) != 0.0 || device_grad(at) != 0.0);
    CHECK(misplaced == 0);
    CHECK(gap_values == 0);
    CHECK(layout.buffer_size > layout.size);  // these models have gaps to check
  }
}
TEST_CASE_TEMPLATE_APPLY(finite_differences, dpk_test::ExecutionSpaces);

TEST_CASE("forces and virial are minus finite differences of the energy") {
  SmallSystem sys(2, 16, 1, 21);
  dpk::EnergyModel<double, Space> model(small_descriptor(2, false, true), small_fitting(true), 2);
  model.initialize_parameters(9);
  small_statistics(model, 2);
  auto energy_at = [&](std::vector<double> const& coord, std::vector<double> const& box) {
    auto f = make_frames<double>(coord, box, sys.types, 1);
    dpk::Prediction<double, Mem> out;
    model.predict(Space(), f, out, false);
    return host(out.energy)[0];
  };
  auto frames = make_frames<double>(sys.coord, sys.box, sys.types, 1);
  dpk::Prediction<double, Mem> out;
  model.predict(Space(), frames, out, true);
  auto force = host(out.force);
  auto virial = host(out.virial);
  double const h = 1e-5;
  for (int a = 0; a < sys.natoms; a += 3)
    for (int d = 0; d < 3; ++d) {
      auto cp = sys.coord, cm = sys.coord;
      cp[3 * a + d] += h;
      cm[3 * a + d] -= h;
      double const fd = -(energy_at(cp, sys.box) - energy_at(cm, sys.box)) / (2 * h);
      CHECK(force[3 * a + d] == doctest::Approx(fd).epsilon(1e-6).scale(1e-3));
    }
  double fsum[3] = {0, 0, 0};
  for (int a = 0; a < sys.natoms; ++a)
    for (int d = 0; d < 3; ++d) fsum[d] += force[3 * a + d];
  for (double s : fsum) CHECK(std::abs(s) < 1e-12);
  // W_ab = -dE/d(eps_ab) for x -> (I + eps) x applied to coordinates and cell vectors.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      auto strained = [&](double eps) {
        auto c = sys.coord, bx = sys.box;
        for (std::size_t r = 0; r < c.size() / 3; ++r) c[3 * r + a] += eps * sys.coord[3 * r + b];
        for (int r = 0; r < 3; ++r) bx[3 * r + a] += eps * sys.box[3 * r + b];
        return energy_at(c, bx);
      };
      double const fd = -(strained(h) - strained(-h)) / (2 * h);
      CHECK(virial[3 * a + b] == doctest::Approx(fd).epsilon(1e-6).scale(1e-3));
    }
}

TEST_CASE("energy is invariant under translation, rotation and permutation, and smooth at rcut") {
  SmallSystem sys(2, 12, 1, 5);
  // Non-periodic cluster so that rotations are exact symmetries.
  dpk::EnergyModel<double, Space> model(small_descriptor(2, true, false), small_fitting(true), 2);
  model.initialize_parameters(3);
  small_statistics(model, 2);
  auto energy_of = [&](std::vector<double> const& coord, std::vector<int> const& types) {
    auto f = make_frames<double>(coord, {}, types, 1, false);
    dpk::Prediction<double, Mem> out;
    model.predict(Space(), f, out, false);
    return host(out.energy)[0];
  };
  std::vector<double> coord(sys.coord.begin(), sys.coord.begin() + 3 * sys.natoms);
  double const e0 = energy_of(coord, sys.types);
  auto moved = coord;
  for (std::size_t k = 0; k < moved.size(); ++k) moved[k] += (k % 3 == 0 ? 1.7 : (k % 3 == 1 ? -2.3 : 0.4));
  CHECK(energy_of(moved, sys.types) == doctest::Approx(e0).epsilon(1e-12));
  double const th = 0.7, ph = -0.4;
  double const r[9] = {std::cos(th), -std::sin(th) * std::cos(ph), std::sin(th) * std::sin(ph),
                       std::sin(th), std::cos(th) * std::cos(ph),  -std::cos(th) * std::sin(ph),
                       0.0,          std::sin(ph),                 std::cos(ph)};
  auto rotated = coord;
  for (int a = 0; a < sys.natoms; ++a)
    for (int d = 0; d < 3; ++d)
      rotated[3 * a + d] = r[3 * d] * coord[3 * a] + r[3 * d + 1] * coord[3 * a + 1] + r[3 * d + 2] * coord[3 * a + 2];
  CHECK(energy_of(rotated, sys.types) == doctest::Approx(e0).epsilon(1e-12));
  std::vector<int> perm(sys.natoms);
  for (int a = 0; a < sys.natoms; ++a) perm[a] = (a * 5 + 3) % sys.natoms;
  std::vector<double> pc(coord.size());
  std::vector<int> pt(sys.natoms);
  for (int a = 0; a < sys.natoms; ++a) {
    for (int d = 0; d < 3; ++d) pc[3 * a + d] = coord[3 * perm[a] + d];
    pt[a] = sys.types[perm[a]];
  }
  CHECK(energy_of(pc, pt) == doctest::Approx(e0).epsilon(1e-12));
  // Two atoms pulled apart through rcut: energy continuous (and flat) at the cutoff.
  std::vector<int> pair_types = {0, 1};
  double const rc = model.descriptor().rcut;
  auto pair_energy = [&](double dist) { return energy_of({0, 0, 0, dist, 0, 0}, pair_types); };
  double const inside = pair_energy(rc - 1e-6), outside = pair_energy(rc + 1e-6), far = pair_energy(rc + 1.0);
  CHECK(std::abs(inside - outside) < 1e-9);
  CHECK(std::abs(outside - far) < 1e-12);
  double const slope = (pair_energy(rc - 1e-4) - pair_energy(rc - 2e-4)) / 1e-4;
  CHECK(std::abs(slope) < 1e-6);
}

TEST_CASE("statistics recomputed from frames 0-9 of water data_0 equal DeePMD-kit's") {
  auto system = dpk::read_system(std::string(dpk_test::source_dir()) + "/examples/water/data/data_0", {"O", "H"});
  std::vector<dpk::HostBatch> batches;
  for (int f = 0; f < 10; ++f) {
    dpk::HostBatch b;
    b.system = 0;
    b.nframes = 1;
    b.natoms = system.natoms;
    b.periodic = system.periodic;
    b.frames = {f};
    b.types = system.types;
    b.coord.assign(system.coord.begin() + f * system.natoms * 3, system.coord.begin() + (f + 1) * system.natoms * 3);
    b.force.assign(system.force.begin() + f * system.natoms * 3, system.force.begin() + (f + 1) * system.natoms * 3);
    b.box.assign(system.box.begin() + f * 9, system.box.begin() + (f + 1) * 9);
    b.energy = {system.energy[f]};
    batches.push_back(b);
  }
  for (bool tos : {true, false}) {
    dpk::EnergyModel<double, Space> model(fixture_descriptor(tos), fixture_fitting(), 2);
    model.compute_statistics(Space(), batches);
    std::string const dir = fixture + (tos ? "tos_true/" : "tos_false/");
    auto avg = dpk::read_npy(dir + "avg.npy").data;
    auto sd = dpk::read_npy(dir + "std.npy").data;
    REQUIRE(avg.size() == model.statistics_avg().size());
    double worst = 0;
    for (std::size_t k = 0; k < avg.size(); ++k) {
      worst = std::max(worst, std::abs(model.statistics_avg()[k] - avg[k]) / std::max(1e-12, std::abs(avg[k])) *
                                  (avg[k] != 0));
      worst = std::max(worst, std::abs(model.statistics_std()[k] - sd[k]) / sd[k]);
      CHECK(std::abs(model.statistics_avg()[k] - avg[k]) <= 1e-10 * std::abs(avg[k]) + 1e-15);
    }
    CHECK(worst < 1e-10);
    MESSAGE("statistics max relative error ", worst);
  }
}

namespace {
std::atomic<long> g_allocations{0};
std::mutex g_allocation_mutex;
std::map<std::string, long> g_allocation_labels;  ///< "space label" -> count, to name what allocated
void count_allocation(Kokkos::Profiling::SpaceHandle space, char const* label, void const*, std::uint64_t) {
  ++g_allocations;
  std::lock_guard<std::mutex> const lock(g_allocation_mutex);
  ++g_allocation_labels[std::string(space.name) + " " + label];
}
}  // namespace

TEST_CASE("a training step allocates no Kokkos memory once workspaces are sized") {
  SmallProblem p(SmallSystem(2, 14, 2, 31), 2, true, true, 2, 4);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  dpk::LossPrefactors pref{1.0, 1.0, 1.0};
  // Two warm-up steps size every workspace (a second batch of the same size but other
  // coordinates may need a few more embedding rows).
  SmallSystem other(2, 14, 2, 32);
  auto frames2 = make_frames<double>(other.coord, other.box, other.types, other.nframes);
  loss.loss_and_gradient(Space(), model, frames, labels, pref);
  loss.loss_and_gradient(Space(), model, frames2, labels, pref);
  g_allocations = 0;
  Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  { dpk::View1<double, Mem> probe("probe", 10); }  // the counter sees allocations
  REQUIRE(g_allocations.load() == 1);
  g_allocations = 0;
  g_allocation_labels.clear();
  for (int step = 0; step < 3; ++step) {
    loss.loss_and_gradient(Space(), model, step % 2 ? frames2 : frames, labels, pref);
  }
  Space().fence();
  Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
  std::ostringstream allocated;
  for (auto const& entry : g_allocation_labels) allocated << entry.second << " x " << entry.first << "\n";
  INFO("allocations in 3 steps:\n" << allocated.str());
  CHECK(g_allocations.load() == 0);
}

// Training must be reproducible at a fixed thread count (restarts continue bit for bit): every
// reduction has a fixed order, also the per-thread sums of the chunked embedding passes.
TEST_CASE("the loss gradient repeats bit for bit, also after a batch of another size") {
  SmallSystem other(2, 20, 3, 17);
  SmallProblem p(SmallSystem(2, 40, 2, 13), 2, false, true, 5, 3);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  auto frames2 = make_frames<double>(other.coord, other.box, other.types, other.nframes);
  auto labels2 = random_labels<double>(other.nframes, other.nframes * other.natoms, true, 3);
  dpk::LossPrefactors pref{1, 1, 1};
  loss.loss_and_gradient(Space(), model, frames, labels, pref);
  auto const first = model.gradient_host();
  loss.loss_and_gradient(Space(), model, frames, labels, pref);
  CHECK(model.gradient_host() == first);
  loss.loss_and_gradient(Space(), model, frames2, labels2, pref);
  loss.loss_and_gradient(Space(), model, frames, labels, pref);
  CHECK(model.gradient_host() == first);
}

// Kept batch setups (model/batch_setup_cache.hpp): a keyed prepare of a frame met before reuses
// its neighbour list, environment matrix and row layout; the result must be the one a fresh
// build gives, bit for bit, whatever was prepared in between.
TEST_CASE("kept batch setups: a frame prepared again by key gives the same gradient bit for bit") {
  SmallSystem a_sys(2, 40, 1, 13), b_sys(2, 40, 1, 17), big_sys(2, 20, 3, 19);
  SmallProblem p(a_sys, 2, false, true, 5, 3);
  auto& model = p.model;  // named references: CUDA's lambdas may not capture structured bindings
  auto& frames_a = p.frames;
  auto& labels = p.labels;
  auto frames_b = make_frames<double>(b_sys.coord, b_sys.box, b_sys.types, b_sys.nframes);
  auto frames_big = make_frames<double>(big_sys.coord, big_sys.box, big_sys.types, big_sys.nframes);
  auto labels_big = random_labels<double>(big_sys.nframes, big_sys.nframes * big_sys.natoms, true, 4);
  dpk::EnerLoss<double, Space> loss;
  dpk::LossPrefactors pref{1, 1, 1};
  // References: fresh builds (prepare without a key), and the dropped neighbours they count.
  long const dropped0 = model.neighbors_dropped();
  loss.loss_and_gradient(Space(), model, frames_a, labels, pref);
  auto const grad_a = model.gradient_host();
  long const dropped_a = model.neighbors_dropped() - dropped0;
  loss.loss_and_gradient(Space(), model, frames_b, labels, pref);
  auto const grad_b = model.gradient_host();
  CHECK(model.kept_setups().size() == 0);
  auto keyed = [&](dpk::Frames<double, Mem> const& frames, std::uint64_t key) {
    model.prepare(Space(), frames, key);
    loss.loss_and_gradient_prepared(Space(), model, labels, pref);
    return model.gradient_host();
  };
  CHECK(keyed(frames_a, 1) == grad_a);  // built and kept
  CHECK(keyed(frames_b, 2) == grad_b);  // built into the workspace's own Views, kept
  CHECK(model.kept_setups().size() == 2);
  CHECK(model.kept_setups().hits() == 0);
  long const before_hit = model.neighbors_dropped();
  CHECK(keyed(frames_a, 1) == grad_a);  // kept setup
  CHECK(model.neighbors_dropped() - before_hit == dropped_a);  // counted as if searched
  // A batch of another size without a key (and its larger Views) between two uses.
  loss.loss_and_gradient(Space(), model, frames_big, labels_big, pref);
  CHECK(keyed(frames_b, 2) == grad_b);
  CHECK(keyed(frames_a, 1) == grad_a);
  CHECK(model.kept_setups().hits() == 3);
  CHECK(model.kept_setups().misses() == 2);
  CHECK(model.kept_setups().bytes() > 0);
  CHECK(model.kept_setups().bytes() <= model.kept_setups().budget());
  // New statistics change every environment matrix: the kept setups are dropped.
  std::vector<double> avg = model.statistics_avg(), sd = model.statistics_std();
  for (double& x : sd) x *= 1.25;
  model.set_statistics(avg, sd);
  CHECK(model.kept_setups().size() == 0);
  loss.loss_and_gradient(Space(), model, frames_a, labels, pref);
  auto const grad_a2 = model.gradient_host();
  CHECK(grad_a2 != grad_a);
  CHECK(keyed(frames_a, 1) == grad_a2);
  CHECK(keyed(frames_a, 1) == grad_a2);
  CHECK(model.kept_setups().size() == 1);
}

TEST_CASE("kept batch setups: the byte budget, and DPK_SETUP_CACHE_MB") {
  SmallProblem p(SmallSystem(2, 40, 1, 13), 2, true, false, 5, 3);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  dpk::LossPrefactors pref{1, 1, 1};
  loss.loss_and_gradient(Space(), model, frames, labels, pref);
  auto const reference = model.gradient_host();
  model.set_kept_setup_budget(0);  // keeps nothing, changes nothing else
  for (int k = 0; k < 2; ++k) {
    model.prepare(Space(), frames, 7);
    loss.loss_and_gradient_prepared(Space(), model, labels, pref);
    CHECK(model.gradient_host() == reference);
  }
  CHECK(model.kept_setups().size() == 0);
  CHECK(model.kept_setups().bytes() == 0);
  ::setenv("DPK_SETUP_CACHE_MB", "3", 1);
  using Cache = dpk::BatchSetupCache<double, Space>;
  CHECK(Cache().budget() == (std::size_t(3) << 20));
  ::setenv("DPK_SETUP_CACHE_MB", "lots", 1);
  CHECK_THROWS_WITH_AS(Cache(), doctest::Contains("DPK_SETUP_CACHE_MB"), dpk::Error);
  ::unsetenv("DPK_SETUP_CACHE_MB");
  CHECK(Cache().budget() == (std::size_t(1024) << 20));
}

TEST_CASE("the embedding chunk size and unit tangents change results only by rounding; bad settings are errors") {
  SmallProblem p(SmallSystem(3, 30, 2, 19), 3, false, true, 3, 5);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  dpk::LossPrefactors pref{0.5, 1.0, 0.3};
  std::vector<std::vector<double>> grads, forces;
  CHECK(model.embedding_unit_tangents());  // the default
  CHECK(model.embedding_pair_rows());     // the default
  struct Setting {
    int chunk;
    bool unit, pair;
  };
  for (Setting const setting : {Setting{0, true, true}, Setting{5, false, true}, Setting{5, true, false},
                                Setting{5, true, true}, Setting{128, false, false}, Setting{128, true, false},
                                Setting{128, true, true}}) {
    int const chunk = setting.chunk;
    bool const unit = setting.unit, pair = setting.pair;
    CAPTURE(chunk);
    CAPTURE(unit);
    CAPTURE(pair);
    model.set_embedding_chunk_rows(chunk);
    model.set_embedding_unit_tangents(unit);
    model.set_embedding_pair_rows(pair);
    CHECK(model.embedding_chunk_rows() == chunk);
    loss.loss_and_gradient(Space(), model, frames, labels, pref);
    grads.push_back(model.gradient_host());
    forces.push_back(host(loss.prediction().force));
    if constexpr (dpk::host_schedule_v<Space>) {
      // The parts handed out to the threads: each net's rows in order, cut only where a
      // centre's rows end, at least 4 chunks each (save a net's last); with several threads
      // (8 parts per thread) and 5-row chunks there are more parts than nets.
      auto const& layout = model.batch_layout();
      auto const& parts = layout.embedding_parts;
      auto const& row_atom = layout.in.rows.row_atom;
      std::size_t next = 0;
      for (auto const& block : layout.embedding_blocks) {
        int at = block.begin;
        while (next < parts.size() && parts[next].net == block.net && parts[next].begin == at) {
          auto const& part = parts[next++];
          REQUIRE(part.end > part.begin);
          if (part.end < block.end) {
            CHECK(part.end - part.begin >= 4 * chunk);
            CHECK(row_atom(part.end) >= 0);  // filled rows (constant rows come last in a block)
            CHECK(row_atom(part.end - 1) != row_atom(part.end));
          }
          at = part.end;
        }
        CHECK(at == block.end);
      }
      CHECK(next == parts.size());
      if (chunk == 5 && Space().concurrency() > 1) CHECK(parts.size() > layout.embedding_blocks.size());
      CHECK(layout.in.rows.paired == (pair && unit && chunk > 0));
    }
  }
  for (std::size_t c = 1; c < grads.size(); ++c) {
    double worst = 0;
    for (std::size_t k = 0; k < grads[0].size(); ++k)
      worst = std::max(worst, std::abs(grads[c][k] - grads[0][k]) / std::max(1e-3, std::abs(grads[0][k])));
    for (std::size_t k = 0; k < forces[0].size(); ++k)
      worst = std::max(worst, std::abs(forces[c][k] - forces[0][k]) / std::max(1e-3, std::abs(forces[0][k])));
    CHECK(worst < 1e-11);
  }
  ::setenv("DPK_EMBEDDING_CHUNK_ROWS", "12x", 1);
  auto make = [] { dpk::EnergyModel<double, Space> m(small_descriptor(2, true, false), small_fitting(false), 2); };
  CHECK_THROWS_WITH_AS(make(), doctest::Contains("DPK_EMBEDDING_CHUNK_ROWS"), std::runtime_error);
  ::unsetenv("DPK_EMBEDDING_CHUNK_ROWS");
  ::setenv("DPK_EMBEDDING_UNIT_TANGENTS", "yes", 1);
  CHECK_THROWS_WITH_AS(make(), doctest::Contains("DPK_EMBEDDING_UNIT_TANGENTS"), std::runtime_error);
  ::setenv("DPK_EMBEDDING_UNIT_TANGENTS", "0", 1);
  CHECK_FALSE(dpk::EnergyModel<double, Space>(small_descriptor(2, true, false), small_fitting(false), 2)
                  .embedding_unit_tangents());
  ::unsetenv("DPK_EMBEDDING_UNIT_TANGENTS");
  ::setenv("DPK_EMBEDDING_PAIR_ROWS", "2", 1);
  CHECK_THROWS_WITH_AS(make(), doctest::Contains("DPK_EMBEDDING_PAIR_ROWS"), std::runtime_error);
  ::setenv("DPK_EMBEDDING_PAIR_ROWS", "0", 1);
  CHECK_FALSE(dpk::EnergyModel<double, Space>(small_descriptor(2, true, false), small_fitting(false), 2)
                  .embedding_pair_rows());
  ::unsetenv("DPK_EMBEDDING_PAIR_ROWS");
}

TEST_CASE("same-type neighbour pairs share one embedding row; results equal a row per slot to rounding") {
  // Boxes of edge 6.5 (one image per pair), 4.5 (two images of some pairs within rcut 3.2) and
  // 2.9 (atoms see their own images; crowded, so sel drops neighbours and some slots have no
  // partner), with type_one_side on and off.
  struct Case {
    double length;
    int natoms;
    bool tos;
  };
  for (Case const c : {Case{6.5, 30, false}, Case{4.5, 12, true}, Case{2.9, 5, false}}) {
    CAPTURE(c.length);
    SmallProblem p(SmallSystem(2, c.natoms, 2, 23, c.length), 2, c.tos, true, 4, 8);
    auto& [model, frames, labels] = p;
    dpk::EnerLoss<double, Space> loss;
    dpk::LossPrefactors pref{0.5, 1.0, 0.3};
    std::vector<std::vector<double>> grads, values;
    std::vector<int> rows;
    std::vector<double> forward_flops;
    for (bool const pair : {false, true}) {
      model.set_embedding_pair_rows(pair);
      loss.loss_and_gradient(Space(), model, frames, labels, pref);
      grads.push_back(model.gradient_host());
      forward_flops.push_back(model.flop_count().forward);
      std::vector<double> v = host(loss.prediction().force);
      for (double x : host(loss.prediction().energy)) v.push_back(x);
      for (double x : host(loss.prediction().virial)) v.push_back(x);
      values.push_back(v);
      auto const& layout = model.batch_layout();
      rows.push_back(layout.embedding_rows());
      if constexpr (!dpk::host_schedule_v<Space>) continue;
      CHECK(layout.in.rows.paired == pair);
      if (!pair) continue;
      // Brute force over the neighbour list: a slot reads another's row exactly when that slot
      // is the same pair seen from the other atom (same types, opposite displacement), and when
      // nothing was dropped every same-type slot is paired (the list is symmetric).
      auto const& nl = model.neighbor_list();
      auto const index = host(nl.index);
      auto const rij = host(nl.rij);
      auto const count = host(nl.count);
      auto const types = host(frames.types);
      auto const& rs = layout.in.rows;
      int const nloc = nl.nloc, nnei = nl.nnei;
      int same_type = 0, readers = 0;
      for (int i = 0; i < nloc; ++i)
        for (int t = 0; t < 2; ++t)
          for (int a = nl.sel_offset[t]; a < nl.sel_offset[t] + count[i * 2 + t]; ++a) {
            if (t == types[i]) ++same_type;
            if (rs.slot_pair(i, a) < -1) ++readers;
          }
      int shared = 0;
      for (int r = 0; r < rows[1]; ++r) {
        int const p = rs.row_partner(r);
        if (p < 0) continue;
        ++shared;
        int const i = p / nnei, a = p % nnei, j = rs.row_atom(r), b = rs.row_slot(r);
        CHECK(rs.slot_pair(i, a) == -2 - (j * nnei + b));  // the reader points at the row's owner
        CHECK(rs.slot_pair(j, b) == p);
        CHECK(types[i] == types[j]);
        CHECK(index[i * nnei + a] == j);
        CHECK(index[j * nnei + b] == i);
        for (int d = 0; d < 3; ++d)
          CHECK(std::abs(rij[(i * nnei + a) * 3 + d] + rij[(j * nnei + b) * 3 + d]) < 1e-12);
        CHECK(rs.row_shared(r) >= rs.shared_begin(i));  // its copy lies in the reader's range
        CHECK(rs.row_shared(r) < rs.shared_begin(i + 1));
      }
      CHECK(shared == readers);
      CHECK(rs.shared_rows == readers);
      CHECK(readers > 0);
      CHECK(rows[0] - rows[1] == readers);
      if (nl.dropped == 0) CHECK(2 * readers == same_type);
      MESSAGE("box ", c.length, ": ", rows[0], " rows -> ", rows[1], " (", same_type, " same-type slots, dropped ",
              nl.dropped, ")");
    }
    if constexpr (dpk::host_schedule_v<Space>) CHECK(rows[1] < rows[0]);
    // Executed products: the nets (1x3, 3x6, 6x6 multiply-adds per row) run once per shared
    // row; the contractions T still take every slot.
    CHECK(forward_flops[0] - forward_flops[1] == doctest::Approx(2.0 * 57 * (rows[0] - rows[1])));
    for (std::size_t k = 0; k < grads[0].size(); ++k)
      CHECK(std::abs(grads[1][k] - grads[0][k]) <= 1e-11 * std::max(1e-3, std::abs(grads[0][k])));
    for (std::size_t k = 0; k < values[0].size(); ++k)
      CHECK(std::abs(values[1][k] - values[0][k]) <= 1e-11 * std::max(1e-3, std::abs(values[0][k])));
  }
}

TEST_CASE("an energies-only prediction between predictions with forces (unit tangents) changes nothing") {
  // An energies-only forward pass makes no unit tangents: the passes after a later prediction
  // with forces must not read stale ones.
  SmallProblem p(SmallSystem(2, 24, 2, 5), 2, true, false, 2, 3);
  auto& [model, frames, labels] = p;
  model.set_embedding_chunk_rows(4);
  dpk::Prediction<double, dpk::memory_space_t<Space>> a, b;
  model.predict(Space(), frames, a, true);
  auto const want = host(a.force);
  model.predict(Space(), frames, b, false);
  CHECK(host(b.energy) == host(a.energy));
  model.predict(Space(), frames, b, true);
  CHECK(host(b.force) == want);
}

TEST_CASE("float32 loss gradient equals the float64 one (itself checked against finite differences)") {
  // The float64 gradient is the reference (the finite-difference test above validates it); the
  // float32 model gets the same parameters, statistics, bias, frames and labels.
  struct Case {
    int ntypes;
    bool tos, resnet_dt;
    double pe, pf, pv;
  };
  for (Case const c : {Case{2, true, false, 1.0, 1.0, 0.0}, Case{3, false, true, 0.5, 2.0, 0.7}}) {
    CAPTURE(c.ntypes);
    CAPTURE(c.tos);
    SmallSystem sys(c.ntypes, 14, 2, 31 + c.ntypes);
    dpk::EnergyModel<double, Space> m64(small_descriptor(c.ntypes, c.tos, c.resnet_dt), small_fitting(c.resnet_dt),
                                        c.ntypes);
    dpk::EnergyModel<float, Space> m32(small_descriptor(c.ntypes, c.tos, c.resnet_dt), small_fitting(c.resnet_dt),
                                       c.ntypes);
    m64.initialize_parameters(7);
    m32.set_parameters(m64.parameters_host());
    small_statistics(m64, c.ntypes);
    small_statistics(m32, c.ntypes);
    m64.set_energy_bias(std::vector<double>(c.ntypes, -1.0));
    m32.set_energy_bias(std::vector<double>(c.ntypes, -1.0));
    dpk::LossPrefactors const pref{c.pe, c.pf, c.pv};
    auto f64 = make_frames<double>(sys.coord, sys.box, sys.types, sys.nframes);
    auto f32 = make_frames<float>(sys.coord, sys.box, sys.types, sys.nframes);
    auto l64 = random_labels<double>(sys.nframes, sys.nframes * sys.natoms, c.pv > 0, 9);
    auto l32 = random_labels<float>(sys.nframes, sys.nframes * sys.natoms, c.pv > 0, 9);
    dpk::EnerLoss<double, Space> ener64;
    dpk::EnerLoss<float, Space> ener32;
    double const loss64 = ener64.loss_and_gradient(Space(), m64, f64, l64, pref).loss;
    double const loss32 = ener32.loss_and_gradient(Space(), m32, f32, l32, pref).loss;
    auto const g64 = m64.gradient_host(), g32 = m32.gradient_host();
    REQUIRE(g64.size() == g32.size());
    CHECK(loss32 == doctest::Approx(loss64).epsilon(1e-5));
    // |g32 - g64| / |g64| in the 2-norm, over the whole gradient and per tensor. Measured (two
    // cases): whole 1.4e-7 / 3.8e-7, worst tensor 1.2e-6 / 9.4e-5 (a tensor whose gradient is small
    // next to the others: float rounding of the whole loss lands on it).
    double diff_all = 0, norm_all = 0, worst = 0;
    for (auto const& t : m64.tensors()) {
      double diff = 0, norm = 0;
      for (std::size_t k = t.offset; k < t.offset + t.size(); ++k) {
        diff += (g32[k] - g64[k]) * (g32[k] - g64[k]);
        norm += g64[k] * g64[k];
      }
      diff_all += diff;
      norm_all += norm;
      CAPTURE(t.name);
      double const rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
      if (norm > 1e-20) CHECK(rel < 1e-3);
      worst = std::max(worst, rel);
    }
    double const rel_all = std::sqrt(diff_all / norm_all);
    CHECK(rel_all < 1e-5);
    MESSAGE("float32 vs float64 gradient: relative 2-norm difference " << rel_all << ", worst tensor " << worst);
  }
}

// Run by ctest in two steps (tests/CMakeLists.txt, fixture dpk_schedules): test_model (host
// schedule) writes what one training step produced to DPK_SCHEDULE_DUMP, then
// test_model_device_schedule (DPK_DEVICE_SCHEDULE_ON_HOST) recomputes it with the device
// schedule and compares: integers exactly, values within 1e-12 of the largest magnitude.
TEST_CASE("host and device schedules agree: neighbour list, environment matrix, descriptor, forces, gradient" *
          doctest::skip()) {
  char const* path = std::getenv("DPK_SCHEDULE_DUMP");
  REQUIRE_MESSAGE(path != nullptr, "DPK_SCHEDULE_DUMP must name the dump file (ctest sets it)");
  SmallProblem p(SmallSystem(3, 40, 2, 23), 3, false, true, 11, 13);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  model.set_energy_bias({-1.0, -0.5, 0.25});
  loss.loss_and_gradient(Space(), model, frames, labels, dpk::LossPrefactors{0.5, 1.0, 0.3});
  REQUIRE(model.neighbor_list().dropped == 0);
  auto const& list = model.neighbor_list();
  std::vector<std::pair<std::string, std::vector<double>>> const got = {
      {"neighbor.index", host(list.index)},
      {"neighbor.count", host(list.count)},
      {"neighbor.reverse_offset", host(list.reverse_offset)},
      {"neighbor.reverse_pair", host(Kokkos::subview(list.reverse_pair, std::make_pair(0, int(host(list.reverse_offset).back()))))},
      {"environment.rows", host(model.environment().rows)},
      {"descriptor", host(model.descriptor_values(Space()))},
      {"energy", host(loss.prediction().energy)},
      {"force", host(loss.prediction().force)},
      {"virial", host(loss.prediction().virial)},
      {"gradient", model.gradient_host()},
  };
  if (dpk::host_schedule_v<Space>) {
    std::ofstream out(path);
    out.precision(17);
    for (auto const& [name, values] : got) {
      out << name << ' ' << values.size();
      for (double v : values) out << ' ' << v;
      out << '\n';
    }
    REQUIRE(out.good());
    MESSAGE("host schedule: wrote " << got.size() << " arrays to " << std::string(path));
    return;
  }
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "no host-schedule dump at " << path << " (run test_model_schedule_write first)");
  for (auto const& entry : got) {  // no structured binding: CAPTURE's lambda cannot take one under nvcc
    std::string const& name = entry.first;
    std::vector<double> const& values = entry.second;
    std::string stored_name;
    std::size_t n = 0;
    in >> stored_name >> n;
    REQUIRE(stored_name == name);
    std::vector<double> ref(n);
    for (auto& v : ref) in >> v;
    REQUIRE(in.good());
    CAPTURE(name);
    REQUIRE(values.size() == n);
    double scale = 0, worst = 0;
    for (double v : ref) scale = std::max(scale, std::abs(v));
    for (std::size_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(values[k] - ref[k]));
    bool const integer = name.rfind("neighbor.", 0) == 0;
    CHECK(worst <= (integer ? 0.0 : 1e-12 * scale));
    MESSAGE(name << ": " << n << " values, max |device - host| = " << worst << " (scale " << scale << ")");
  }
}

TEST_CASE("profiling regions: the embedding and fitting stages lie inside forward, forces and backward") {
  SmallProblem p(SmallSystem(2, 30, 2, 41), 2, false, true, 7, 3);
  auto& [model, frames, labels] = p;
  dpk::EnerLoss<double, Space> loss;
  loss.loss_and_gradient(Space(), model, frames, labels, dpk::LossPrefactors{1, 1, 1});  // sizes the workspaces
  dpk::RegionTimes times;
  loss.loss_and_gradient(Space(), model, frames, labels, dpk::LossPrefactors{1, 1, 1});
  double const embedding = times.seconds("dpk::embedding"), fitting = times.seconds("dpk::fitting");
  double const passes = times.seconds("dpk::forward") + times.seconds("dpk::forces") + times.seconds("dpk::backward");
  MESSAGE("embedding ", embedding, " s, fitting ", fitting, " s, forward + forces + backward ", passes, " s");
  CHECK(embedding > 0);
  CHECK(fitting > 0);
  CHECK(embedding + fitting <= passes + 1e-4);  // nested in them (two clock reads: 1e-4 s of slack)
}
