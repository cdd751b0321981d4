#pragma once
// Shared pieces of the model tests (test_model, test_compress, test_potential): the water fixture that DeePMD-kit
// 3.2 generated (tests/data/water_model, see its NOTICE) and host <-> device helpers.
#include <dpk/io/npy.hpp>
#include "source_paths.hpp"
#include <dpk/model/energy_model.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace dpk_test {

using Space = dpk::DefaultExecutionSpace;
using Mem = dpk::memory_space_t<Space>;
inline std::string const fixture = std::string(dpk_test::data_dir()) + "/water_model/";

/// Types of the 192-atom water frame: 64 O (0), then 128 H (1).
inline std::vector<int> water_types() {
  std::vector<int> t(192, 1);
  for (int i = 0; i < 64; ++i) t[i] = 0;
  return t;
}

/// Array `what` of frame `frame` of the fixture's tos_true case (frame<frame>_<what>.npy).
inline std::vector<double> frame_array(int frame, char const* what) {
  return dpk::read_npy(fixture + "tos_true/frame" + std::to_string(frame) + "_" + what + ".npy").data;
}

/// Largest |a[k] - b[k]| of two arrays of the same size.
inline double max_abs_difference(std::vector<double> const& a, std::vector<double> const& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
  return worst;
}

/// The fixture model's descriptor (rcut 6, sel [46, 92], embedding [8, 16], axis 4).
inline dpk::DescriptorConfig fixture_descriptor(bool tos) {
  dpk::DescriptorConfig d;
  d.rcut = 6.0;
  d.rcut_smth = 0.5;
  d.sel = {46, 92};
  d.neuron = {8, 16};
  d.axis_neuron = 4;
  d.resnet_dt = false;
  d.type_one_side = tos;
  return d;
}

/// The fixture model's fitting net ([16, 16], resnet_dt).
inline dpk::FittingConfig fixture_fitting() {
  dpk::FittingConfig f;
  f.neuron = {16, 16};
  f.resnet_dt = true;
  return f;
}

/// Parameters (weights/<tensor>.npy), statistics and the fixture's energy bias from `dir`.
template <class Scalar, class ExecutionSpace>
void load_fixture_model(dpk::EnergyModel<Scalar, ExecutionSpace>& model, std::string const& dir) {
  std::vector<double> params(model.num_parameters(), 0.0);
  for (auto const& t : model.tensors()) {
    auto a = dpk::read_npy(dir + "weights/" + t.name + ".npy");
    REQUIRE_MESSAGE(a.data.size() == t.size(), t.name);
    std::copy(a.data.begin(), a.data.end(), params.begin() + std::ptrdiff_t(t.offset));
  }
  model.set_parameters(params);
  model.set_statistics(dpk::read_npy(dir + "avg.npy").data, dpk::read_npy(dir + "std.npy").data);
  model.set_energy_bias({-93.5, -187.25});
}

/// `nframes` frames of `types.size()` atoms in memory space M (box rows per frame; empty box: zeros).
template <class Scalar, class M = Mem>
dpk::Frames<Scalar, M> make_frames(std::vector<double> const& coord, std::vector<double> const& box,
                                   std::vector<int> const& types, int nframes = 1, bool periodic = true) {
  dpk::Frames<Scalar, M> f;
  int const natoms = static_cast<int>(types.size());
  f.nframes = nframes;
  f.natoms = natoms;
  f.periodic = periodic;
  f.coord = dpk::View2<Scalar, M>("coord", nframes * natoms, 3);
  f.box = dpk::View2<Scalar, M>("box", nframes, 9);
  f.types = dpk::View1<int, M>("types", nframes * natoms);
  auto hc = Kokkos::create_mirror_view(f.coord);
  auto hb = Kokkos::create_mirror_view(f.box);
  auto ht = Kokkos::create_mirror_view(f.types);
  for (int a = 0; a < nframes * natoms; ++a) {
    for (int d = 0; d < 3; ++d) hc(a, d) = Scalar(coord[3 * a + d]);
    ht(a) = types[a % natoms];
  }
  for (int fr = 0; fr < nframes; ++fr)
    for (int k = 0; k < 9; ++k) hb(fr, k) = Scalar(box.empty() ? 0.0 : box[9 * fr + k]);
  Kokkos::deep_copy(f.coord, hc);
  Kokkos::deep_copy(f.box, hb);
  Kokkos::deep_copy(f.types, ht);
  return f;
}

/// Host copy of any View, flattened, as doubles.
template <class V>
std::vector<double> host(V const& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

}  // namespace dpk_test
