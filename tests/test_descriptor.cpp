// Environment matrix, statistics, force/virial products and their adjoint: DeePMD-kit's water
// fixture, finite differences, invariances, a plain-loop statistics oracle, the adjoint identity;
// on every execution space of the build (execution_spaces.hpp).
#include <doctest/doctest.h>

#include "execution_spaces.hpp"
#include "neighbor_test_helpers.hpp"

#include <dpk/descriptor/environment_matrix.hpp>
#include <dpk/descriptor/force_virial.hpp>
#include <dpk/descriptor/se_a.hpp>
#include <dpk/descriptor/statistics.hpp>
#include <dpk/neighbor/neighbor_search.hpp>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using dpk_test::HostBatch;
using dpk_test::make_frames;
using dpk_test::random_batch;
using dpk_test::snapshot;
using dpk_test::water_batch;
using dpk_test::water_file;

namespace {

template <class Scalar>
double tolerance() {
  return std::is_same<Scalar, double>::value ? 1e-10 : 1e-4;
}

/// max |got - want| / max |want| over a flat array.
template <class Getter>
double relative_error(std::vector<double> const& want, Getter got) {
  double error = 0, scale = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    error = std::max(error, std::fabs(got(k) - want[k]));
    scale = std::max(scale, std::fabs(want[k]));
  }
  return error / scale;
}

/// Statistics in Mem from flat host (ntypes, nnei, 4) arrays.
template <class Scalar, class Mem>
dpk::EnvironmentStatistics<Scalar, Mem> make_statistics(std::vector<double> const& avg, std::vector<double> const& std,
                                                         int ntypes, int nnei) {
  dpk::EnvironmentStatistics<Scalar, Mem> s;
  s.avg = dpk::View3<Scalar, Mem>("dpk::test::avg", ntypes, nnei, 4);
  s.std = dpk::View3<Scalar, Mem>("dpk::test::std", ntypes, nnei, 4);
  auto a = Kokkos::create_mirror_view(s.avg);
  auto b = Kokkos::create_mirror_view(s.std);
  for (int t = 0; t < ntypes; ++t)
    for (int j = 0; j < nnei; ++j)
      for (int k = 0; k < 4; ++k) {
        a(t, j, k) = Scalar(avg[(t * nnei + j) * 4 + k]);
        b(t, j, k) = Scalar(std[(t * nnei + j) * 4 + k]);
      }
  Kokkos::deep_copy(s.avg, a);
  Kokkos::deep_copy(s.std, b);
  return s;
}

/// Which schedule of compute_force_virial the products use (automatic: the space's own).
enum class Schedule { automatic, private_sums, scatter_gather };

/// Everything for one batch on Space: list, environment matrix, products.
template <class Scalar, class Space>
struct Pipeline {
  using Mem = dpk::memory_space_t<Space>;
  double rcut, rcut_smth;
  dpk::NeighborSearch<Scalar, Space> search;
  dpk::NeighborList<Scalar, Mem> list;
  dpk::EnvironmentMatrix<Scalar, Mem> env;
  dpk::EnvironmentStatistics<Scalar, Mem> statistics;
  Pipeline(double rc, double rs, std::vector<int> sel) : rcut(rc), rcut_smth(rs), search(rc, sel) {}
  void run(HostBatch const& b) {
    auto frames = make_frames<Scalar, Mem>(b);
    search.build(Space(), frames, list);
    if (statistics.avg.extent(0) == 0)
      statistics = dpk::identity_statistics<Scalar, Mem>(int(search.sel().size()), search.nnei());
    dpk::compute_environment_matrix(Space(), list, frames.types, statistics, rcut_smth, rcut, env);
  }
  /// Energy sum(g . rows) with g on the host (nloc*nnei*4).
  double energy(std::vector<double> const& g) const {
    auto rows = snapshot(env.rows);
    double e = 0;
    for (int i = 0; i < list.nloc; ++i)
      for (int s = 0; s < list.nnei; ++s)
        for (int k = 0; k < 4; ++k) e += g[(std::size_t(i) * list.nnei + s) * 4 + k] * double(rows(i, s, k));
    return e;
  }
  /// Force, virial, atom virial (host, double) from g.
  void products(std::vector<double> const& g_host, int natoms, std::vector<double>& force,
                std::vector<double>& virial, std::vector<double>& atom_virial,
                Schedule schedule = Schedule::automatic) const {
    int const nloc = list.nloc, nnei = list.nnei, nframes = nloc / natoms;
    dpk::View3<Scalar, Mem> g("dpk::test::g", nloc, nnei, 4);
    auto gh = Kokkos::create_mirror_view(g);
    for (int i = 0; i < nloc; ++i)
      for (int s = 0; s < nnei; ++s)
        for (int k = 0; k < 4; ++k) gh(i, s, k) = Scalar(g_host[(std::size_t(i) * nnei + s) * 4 + k]);
    Kokkos::deep_copy(g, gh);
    dpk::View2<Scalar, Mem> f("dpk::test::force", nloc, 3), w("dpk::test::virial", nframes, 9),
        aw("dpk::test::atom_virial", nloc, 9);
    dpk::ForceVirialWorkspace<Scalar, Mem> work;
    dpk::detail::ProductOperands<Scalar, Mem> const in{g, env, list, natoms, f, w, aw};
    if (schedule == Schedule::automatic)
      dpk::compute_force_virial(Space(), g, env, list, natoms, f, w, aw, work);
    else if (schedule == Schedule::private_sums)
      dpk::detail::force_virial_private_sums<Scalar>(Space(), in, work);
    else
      dpk::detail::force_virial_scatter_gather<Scalar>(Space(), in, work);
    auto fh = snapshot(f);
    auto wh = snapshot(w);
    auto awh = snapshot(aw);
    force.assign(fh.data(), fh.data() + nloc * 3);
    virial.assign(wh.data(), wh.data() + nframes * 9);
    atom_virial.assign(awh.data(), awh.data() + nloc * 9);
  }
};

std::vector<double> water_net_deriv() {
  std::vector<double> g(192 * 138 * 4);
  for (std::size_t n = 0; n < g.size(); ++n) {
    volatile double a = 0.001 * double(n);  // no FMA in the argument, as the fixture says
    g[n] = std::sin(a + 0.3);
  }
  return g;
}

std::vector<double> random_vector(std::mt19937& rng, std::size_t n, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("environment matrix equals DeePMD-kit's on the water frame", Case, environment_water) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  HostBatch const b = water_batch();
  Pipeline<Scalar, Space> p(6.0, 0.5, {46, 92});
  p.run(b);
  auto rows = snapshot(p.env.rows);
  dpk::View4<Scalar, Mem> full;
  dpk::environment_derivative(Space(), p.env, p.list, full);
  auto deriv = snapshot(full);
  auto em = dpk::read_npy(water_file("em.npy"));
  auto em_deriv = dpk::read_npy(water_file("em_deriv.npy"));
  double const tol = tolerance<Scalar>();
  CHECK(relative_error(em.data, [&](std::size_t k) { return double(rows.data()[k]); }) <= tol);
  // The fixture differentiates w.r.t. the centre: em_deriv = -d em / d r_ij.
  CHECK(relative_error(em_deriv.data, [&](std::size_t k) { return -double(deriv.data()[k]); }) <= tol);

  // Normalised with the fixture's avg/std: rows = em_normalized, deriv = -em_deriv / std.
  auto avg = dpk::read_npy(water_file("avg.npy"));
  auto std = dpk::read_npy(water_file("std.npy"));
  p.statistics = make_statistics<Scalar, Mem>(avg.data, std.data, 2, 138);
  p.run(b);
  rows = snapshot(p.env.rows);
  dpk::environment_derivative(Space(), p.env, p.list, full);
  deriv = snapshot(full);
  auto em_normalized = dpk::read_npy(water_file("em_normalized.npy"));
  auto atype = dpk::read_npy(water_file("atype.npy"));
  CHECK(relative_error(em_normalized.data, [&](std::size_t k) { return double(rows.data()[k]); }) <= tol);
  std::vector<double> scaled(em_deriv.data.size());
  for (std::size_t k = 0; k < scaled.size(); ++k) {
    std::size_t const i = k / (138 * 12), j = (k / 12) % 138, c = (k / 3) % 4;
    scaled[k] = -em_deriv.data[k] / std.data[int(atype.data[i]) * 552 + 4 * j + c];
  }
  CHECK(relative_error(scaled, [&](std::size_t k) { return double(deriv.data()[k]); }) <= tol);
  // Empty slots hold -avg/std.
  auto index = snapshot(p.list.index);
  int empties = 0;
  for (int i = 0; i < 192; ++i)
    for (int s = 0; s < 138; ++s)
      if (index(i, s) < 0) {
        ++empties;
        CHECK(double(rows(i, s, 0)) == doctest::Approx(-0.1 * (atype.data[i] + 1) / 0.5));
        CHECK(rows(i, s, 1) == Scalar(0));
      }
  CHECK(empties == 192 * 138 - 17064);
}
TEST_CASE_TEMPLATE_APPLY(environment_water, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("force, virial and atom virial equal DeePMD-kit's on the water frame", Case,
                          force_virial_water) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  HostBatch const b = water_batch();
  Pipeline<Scalar, Space> p(6.0, 0.5, {46, 92});
  p.run(b);
  double const tol = tolerance<Scalar>();
  auto f_ref = dpk::read_npy(water_file("force.npy"));
  auto w_ref = dpk::read_npy(water_file("virial.npy"));
  auto aw_ref = dpk::read_npy(water_file("atom_virial.npy"));
  int const nloc = 192, nnei = 138;
  dpk::View3<Scalar, Mem> g("dpk::test::g", nloc, nnei, 4);
  auto gh = Kokkos::create_mirror_view(g);
  auto nd = water_net_deriv();
  for (std::size_t k = 0; k < nd.size(); ++k) gh.data()[k] = Scalar(nd[k]);
  Kokkos::deep_copy(g, gh);
  for (Schedule schedule : {Schedule::automatic, Schedule::private_sums, Schedule::scatter_gather}) {
    CAPTURE(int(schedule));
    std::vector<double> force, virial, atom_virial;
    p.products(nd, 192, force, virial, atom_virial, schedule);
    CHECK(relative_error(f_ref.data, [&](std::size_t k) { return force[k]; }) <= tol);
    CHECK(relative_error(w_ref.data, [&](std::size_t k) { return virial[k]; }) <= tol);
    CHECK(relative_error(aw_ref.data, [&](std::size_t k) { return atom_virial[k]; }) <= tol);

    // Without atom virial: the same force and virial.
    dpk::View2<Scalar, Mem> f("dpk::test::force", nloc, 3), w("dpk::test::virial", 1, 9), none;
    dpk::ForceVirialWorkspace<Scalar, Mem> work;
    dpk::detail::ProductOperands<Scalar, Mem> const in{g, p.env, p.list, 192, f, w, none};
    if (schedule == Schedule::scatter_gather)
      dpk::detail::force_virial_scatter_gather<Scalar>(Space(), in, work);
    else if (schedule == Schedule::private_sums)
      dpk::detail::force_virial_private_sums<Scalar>(Space(), in, work);
    else
      dpk::compute_force_virial(Space(), g, p.env, p.list, 192, f, w, none, work);
    auto fh = snapshot(f);
    auto wh = snapshot(w);
    for (int k = 0; k < 9; ++k) CHECK(double(wh(0, k)) == doctest::Approx(virial[k]).epsilon(1e-12));
    for (int k = 0; k < nloc * 3; ++k) CHECK(double(fh.data()[k]) == doctest::Approx(force[k]).epsilon(1e-12));
  }
}
TEST_CASE_TEMPLATE_APPLY(force_virial_water, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("forces and virial equal finite differences of sum(g . rows)", Space, finite_differences) {
  using Mem = dpk::memory_space_t<Space>;
  using Scalar = double;
  std::mt19937 rng(2024);
  HostBatch b = random_batch(rng, 2, 40, 2, 7.0, 9.0, true);
  std::vector<int> const sel = {80, 80};
  Pipeline<Scalar, Space> p(4.0, 1.0, sel);
  int const nnei = 160, nloc = 80;
  // Non-trivial normalisation.
  std::vector<double> avg(2 * nnei * 4, 0.0), sd(2 * nnei * 4, 1.0);
  for (int t = 0; t < 2; ++t)
    for (int j = 0; j < nnei; ++j) {
      avg[(t * nnei + j) * 4] = 0.2 + 0.1 * t;
      sd[(t * nnei + j) * 4] = 0.7 - 0.1 * t;
      for (int k = 1; k < 4; ++k) sd[(t * nnei + j) * 4 + k] = 0.4 + 0.05 * t;
    }
  p.statistics = make_statistics<Scalar, Mem>(avg, sd, 2, nnei);
  p.run(b);
  std::vector<double> const g = random_vector(rng, std::size_t(nloc) * nnei * 4);
  std::vector<double> force, virial, atom_virial;
  p.products(g, 40, force, virial, atom_virial);
  // The other schedule (the device's on a host build) agrees with the one checked below.
  {
    std::vector<double> f2, w2, aw2;
    p.products(g, 40, f2, w2, aw2,
               dpk::host_schedule_v<Space> ? Schedule::scatter_gather : Schedule::private_sums);
    for (std::size_t k = 0; k < force.size(); ++k) CHECK(f2[k] == doctest::Approx(force[k]).epsilon(1e-12));
    for (std::size_t k = 0; k < virial.size(); ++k) CHECK(w2[k] == doctest::Approx(virial[k]).epsilon(1e-12));
    for (std::size_t k = 0; k < atom_virial.size(); ++k)
      CHECK(aw2[k] == doctest::Approx(atom_virial[k]).epsilon(1e-12));
  }
  auto index0 = snapshot(p.list.index);
  auto same_list = [&]() {
    auto index = snapshot(p.list.index);
    for (int i = 0; i < nloc; ++i)
      for (int s = 0; s < nnei; ++s)
        if (index(i, s) != index0(i, s)) return false;
    return true;
  };
  double const h = 1e-5;
  double max_error = 0, max_force = 0;
  for (int a : {0, 17, 39, 40, 63, 79}) {
    for (int d = 0; d < 3; ++d) {
      HostBatch plus = b, minus = b;
      plus.coord[3 * a + d] += h;
      minus.coord[3 * a + d] -= h;
      p.run(plus);
      bool const same_plus = same_list();
      double const e_plus = p.energy(g);
      p.run(minus);
      bool const same_minus = same_list();
      double const e_minus = p.energy(g);
      if (!same_plus || !same_minus) continue;
      double const fd = -(e_plus - e_minus) / (2 * h);
      max_error = std::max(max_error, std::fabs(fd - force[3 * a + d]));
      max_force = std::max(max_force, std::fabs(force[3 * a + d]));
    }
  }
  CHECK(max_force > 0.1);
  CHECK(max_error / max_force < 1e-7);
  // Virial: W_ab = -dE/d eps_ab for x -> (I + eps) x applied to positions and cell, per frame.
  double const strain = 1e-6;
  double max_virial_error = 0, max_virial = 0;
  for (int f = 0; f < 2; ++f)
    for (int a = 0; a < 3; ++a)
      for (int c = 0; c < 3; ++c) {
        double e[2];
        bool same = true;
        for (int sign = 0; sign < 2; ++sign) {
          double const eps = sign == 0 ? strain : -strain;
          HostBatch s = b;
          for (int atom = 0; atom < 40; ++atom) s.coord[3 * (40 * f + atom) + a] += eps * b.coord[3 * (40 * f + atom) + c];
          for (int row = 0; row < 3; ++row) s.box[9 * f + 3 * row + a] += eps * b.box[9 * f + 3 * row + c];
          p.run(s);
          same = same && same_list();
          e[sign] = p.energy(g);
        }
        if (!same) continue;
        double const fd = -(e[0] - e[1]) / (2 * strain);
        max_virial_error = std::max(max_virial_error, std::fabs(fd - virial[9 * f + 3 * a + c]));
        max_virial = std::max(max_virial, std::fabs(virial[9 * f + 3 * a + c]));
      }
  CHECK(max_virial > 0.1);
  CHECK(max_virial_error / max_virial < 1e-6);
  // Per-atom virials sum to the frame virial.
  for (int f = 0; f < 2; ++f)
    for (int k = 0; k < 9; ++k) {
      double sum = 0;
      for (int atom = 0; atom < 40; ++atom) sum += atom_virial[9 * (40 * f + atom) + k];
      CHECK(sum == doctest::Approx(virial[9 * f + k]).epsilon(1e-10));
    }
}
TEST_CASE_TEMPLATE_APPLY(finite_differences, dpk_test::ExecutionSpaces);

TEST_CASE_TEMPLATE_DEFINE("environment matrix and forces are invariant under translation, rotation, permutation", Case,
                          invariances) {
  using Space = typename Case::execution_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(5);
  HostBatch b = random_batch(rng, 1, 50, 2, 20.0, 20.0, false);  // cluster: rotations keep the list
  std::vector<int> const sel = {100, 100};
  int const nloc = 50, nnei = 200;
  double const tol = std::is_same<Scalar, double>::value ? 1e-9 : 1e-4;
  Pipeline<Scalar, Space> p(5.0, 2.0, sel);
  p.run(b);
  auto rows0 = snapshot(p.env.rows);
  auto index0 = snapshot(p.list.index);
  std::vector<double> const g = random_vector(rng, std::size_t(nloc) * nnei * 4);
  std::vector<double> f0, w0, aw0;
  p.products(g, nloc, f0, w0, aw0);
  double fscale = 0, rscale = 0;
  for (double v : f0) fscale = std::max(fscale, std::fabs(v));
  for (std::size_t k = 0; k < rows0.size(); ++k) rscale = std::max(rscale, std::fabs(double(rows0.data()[k])));

  SUBCASE("translation") {
    HostBatch t = b;
    for (int a = 0; a < nloc; ++a)
      for (int d = 0; d < 3; ++d) t.coord[3 * a + d] += 1.5 + 0.7 * d;
    p.run(t);
    auto rows = snapshot(p.env.rows);
    for (std::size_t k = 0; k < rows.size(); ++k)
      CHECK(std::fabs(double(rows.data()[k]) - double(rows0.data()[k])) <= tol * rscale);
    std::vector<double> f, w, aw;
    p.products(g, nloc, f, w, aw);
    for (int k = 0; k < nloc * 3; ++k) CHECK(std::fabs(f[k] - f0[k]) <= tol * fscale);
  }
  SUBCASE("rotation") {
    // Rotation about a tilted axis; column 0 invariant, columns 1..3 and forces rotate.
    double const angle = 0.7, axis[3] = {0.48, -0.6, 0.64};
    double rot[3][3];
    double const c = std::cos(angle), s = std::sin(angle);
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y) rot[x][y] = (x == y ? c : 0) + (1 - c) * axis[x] * axis[y];
    rot[0][1] -= s * axis[2];
    rot[0][2] += s * axis[1];
    rot[1][0] += s * axis[2];
    rot[1][2] -= s * axis[0];
    rot[2][0] -= s * axis[1];
    rot[2][1] += s * axis[0];
    HostBatch r = b;
    for (int a = 0; a < nloc; ++a)
      for (int x = 0; x < 3; ++x) {
        r.coord[3 * a + x] = 0;
        for (int y = 0; y < 3; ++y) r.coord[3 * a + x] += rot[x][y] * b.coord[3 * a + y];
      }
    p.run(r);
    auto rows = snapshot(p.env.rows);
    auto index = snapshot(p.list.index);
    for (int i = 0; i < nloc; ++i)
      for (int j = 0; j < nnei; ++j) {
        REQUIRE(index(i, j) == index0(i, j));
        CHECK(std::fabs(double(rows(i, j, 0)) - double(rows0(i, j, 0))) <= tol * rscale);
        for (int x = 0; x < 3; ++x) {
          double want = 0;
          for (int y = 0; y < 3; ++y) want += rot[x][y] * double(rows0(i, j, 1 + y));
          CHECK(std::fabs(double(rows(i, j, 1 + x)) - want) <= tol * rscale);
        }
      }
  }
  SUBCASE("permutation") {
    // Atom a of the permuted batch is atom perm[a] of the original.
    std::vector<int> perm(nloc);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int> inverse(nloc);
    for (int a = 0; a < nloc; ++a) inverse[perm[a]] = a;
    HostBatch q = b;
    for (int a = 0; a < nloc; ++a) {
      for (int d = 0; d < 3; ++d) q.coord[3 * a + d] = b.coord[3 * perm[a] + d];
      q.types[a] = b.types[perm[a]];
    }
    p.run(q);
    auto rows = snapshot(p.env.rows);
    auto index = snapshot(p.list.index);
    // Same neighbours (mapped) in the same slots, unless two are at exactly equal distance.
    std::vector<double> gq(g.size());
    for (int a = 0; a < nloc; ++a)
      for (int j = 0; j < nnei; ++j) {
        int const want = index0(perm[a], j);
        CHECK(index(a, j) == (want < 0 ? -1 : inverse[want]));
        for (int k = 0; k < 4; ++k) {
          CHECK(std::fabs(double(rows(a, j, k)) - double(rows0(perm[a], j, k))) <= tol * rscale);
          gq[(std::size_t(a) * nnei + j) * 4 + k] = g[(std::size_t(perm[a]) * nnei + j) * 4 + k];
        }
      }
    std::vector<double> f, w, aw;
    p.products(gq, nloc, f, w, aw);
    for (int a = 0; a < nloc; ++a)
      for (int d = 0; d < 3; ++d) CHECK(std::fabs(f[3 * a + d] - f0[3 * perm[a] + d]) <= tol * fscale);
    for (int k = 0; k < 9; ++k) CHECK(std::fabs(w[k] - w0[k]) <= tol * std::max(1.0, std::fabs(w0[k])) * 10);
  }
}
TEST_CASE_TEMPLATE_APPLY(invariances, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("statistics equal a plain loop over raw rows", Case, statistics) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(11);
  HostBatch b = random_batch(rng, 2, 30, 3, 8.0, 9.0, true);
  for (int& t : b.types) t = t == 2 ? 0 : t;  // type 2 has no atoms
  std::vector<int> const sel = {40, 40, 10};
  int const ntypes = 3, nnei = 90, nloc = 60;
  Pipeline<Scalar, Space> p(4.0, 1.0, sel);
  dpk::StatisticsAccumulator<Scalar, Space> accumulator(ntypes, nnei);
  double n[3] = {0, 0, 0}, s0[3] = {0, 0, 0}, s00[3] = {0, 0, 0}, sa[3] = {0, 0, 0}, saa[3] = {0, 0, 0};
  for (int batch = 0; batch < 2; ++batch) {
    HostBatch c = b;
    for (double& x : c.coord) x += 0.37 * batch * x / 9.0;
    p.run(c);
    auto frames = make_frames<Scalar, Mem>(c);
    accumulator.add(Space(), p.env, frames.types, nloc);
    auto rows = snapshot(p.env.rows);
    for (int i = 0; i < nloc; ++i) {
      int const t = c.types[i];
      for (int j = 0; j < nnei; ++j) {
        n[t] += 1;
        s0[t] += double(rows(i, j, 0));
        s00[t] += double(rows(i, j, 0)) * double(rows(i, j, 0));
        for (int k = 1; k < 4; ++k) {
          sa[t] += double(rows(i, j, k));
          saa[t] += double(rows(i, j, k)) * double(rows(i, j, k));
        }
      }
    }
  }
  std::vector<double> avg, std;
  accumulator.finalize(avg, std);
  REQUIRE(avg.size() == std::size_t(ntypes * nnei * 4));
  for (int t = 0; t < ntypes; ++t) {
    double want_avg = 0, want_r = 1, want_a = 1;
    if (n[t] > 0) {
      want_avg = s0[t] / n[t];
      want_r = std::max(1e-2, std::sqrt(s00[t] / n[t] - want_avg * want_avg));
      double const ma = sa[t] / (3 * n[t]);
      want_a = std::max(1e-2, std::sqrt(saa[t] / (3 * n[t]) - ma * ma));
    }
    for (int j = 0; j < nnei; ++j) {
      std::size_t const base = (std::size_t(t) * nnei + j) * 4;
      CHECK(avg[base] == doctest::Approx(want_avg).epsilon(1e-12));
      CHECK(std[base] == doctest::Approx(want_r).epsilon(1e-12));
      for (int k = 1; k < 4; ++k) {
        CHECK(avg[base + k] == 0.0);
        CHECK(std[base + k] == doctest::Approx(want_a).epsilon(1e-12));
      }
    }
  }
  CHECK(avg[2 * nnei * 4] == 0.0);
  CHECK(std[2 * nnei * 4] == 1.0);
}
TEST_CASE_TEMPLATE_APPLY(statistics, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE_DEFINE("force/virial adjoint satisfies <v, g> = <cF, F(g)> + <cW, W(g)>", Case, adjoint) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  std::mt19937 rng(77);
  HostBatch b = random_batch(rng, 3, 30, 2, 7.0, 9.0, true);
  std::vector<int> const sel = {60, 60};
  int const natoms = 30, nloc = 90, nnei = 120, nframes = 3;
  Pipeline<Scalar, Space> p(4.0, 1.0, sel);
  p.run(b);
  std::vector<double> const g = random_vector(rng, std::size_t(nloc) * nnei * 4);
  std::vector<double> const cf = random_vector(rng, std::size_t(nloc) * 3);
  std::vector<double> const cw = random_vector(rng, std::size_t(nframes) * 9);
  std::vector<double> force, virial, atom_virial;
  p.products(g, natoms, force, virial, atom_virial);
  dpk::View2<Scalar, Mem> cF("dpk::test::cF", nloc, 3), cW("dpk::test::cW", nframes, 9);
  dpk::View3<Scalar, Mem> v("dpk::test::v", nloc, nnei, 4);
  auto cFh = Kokkos::create_mirror_view(cF);
  auto cWh = Kokkos::create_mirror_view(cW);
  for (std::size_t k = 0; k < cf.size(); ++k) cFh.data()[k] = Scalar(cf[k]);
  for (std::size_t k = 0; k < cw.size(); ++k) cWh.data()[k] = Scalar(cw[k]);
  Kokkos::deep_copy(cF, cFh);
  Kokkos::deep_copy(cW, cWh);
  dpk::force_virial_adjoint(Space(), cF, cW, p.env, p.list, natoms, v);
  auto vh = snapshot(v);
  auto index = snapshot(p.list.index);
  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t k = 0; k < g.size(); ++k) {
    lhs += double(vh.data()[k]) * g[k];
    scale += std::fabs(double(vh.data()[k]) * g[k]);
  }
  for (std::size_t k = 0; k < cf.size(); ++k) rhs += cf[k] * force[k];
  for (std::size_t k = 0; k < cw.size(); ++k) rhs += cw[k] * virial[k];
  CHECK(std::fabs(lhs - rhs) <= tolerance<Scalar>() * 10 * scale);
  for (int i = 0; i < nloc; ++i)
    for (int s = 0; s < nnei; ++s)
      if (index(i, s) < 0)
        for (int k = 0; k < 4; ++k) CHECK(vh(i, s, k) == Scalar(0));
}
TEST_CASE_TEMPLATE_APPLY(adjoint, dpk_test::SpacesAndScalars);

TEST_CASE_TEMPLATE("one centre's descriptor cotangent equals a plain loop and blas::gemm's two products", Scalar, double,
                   float) {
  // out = [out +] T[:, :m2] gD^T, then out[:, :m2] += T gD: the tile kernel where it is compiled in
  // (AVX-512 or AVX2; m2 one or two vectors; partial last tiles, passes of 64 rows), blas::gemm otherwise.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<std::pair<int, int>> const shapes = {{100, 16}, {200, 16}, {25, 16}, {40, 32}, {130, 8}, {16, 16}, {30, 12}, {50, 4}};
  for (auto const& shape : shapes) {
    int const m1 = shape.first, m2 = shape.second;
    for (bool const accumulate : {false, true}) {
      CAPTURE(m1);
      CAPTURE(m2);
      CAPTURE(accumulate);
      std::vector<Scalar> t(4 * m1), gd(std::size_t(m1) * m2), out(4 * m1), start(4 * m1);
      for (auto& x : t) x = Scalar(uniform(rng));
      for (auto& x : gd) x = Scalar(uniform(rng));
      for (auto& x : start) x = Scalar(uniform(rng));
      out = start;
      dpk::descriptor_cotangent_centre(t.data(), gd.data(), m1, m2, accumulate, out.data());
      // The plain loop in long double.
      double error = 0, scale = 0;
      for (int c = 0; c < 4; ++c)
        for (int m = 0; m < m1; ++m) {
          long double want = accumulate ? start[c * m1 + m] : 0;
          for (int n = 0; n < m2; ++n) want += (long double)t[c * m1 + n] * gd[m * m2 + n];
          if (m < m2)
            for (int mm = 0; mm < m1; ++mm) want += (long double)t[c * m1 + mm] * gd[mm * m2 + m];
          error = std::max(error, std::fabs(double(want) - double(out[c * m1 + m])));
          scale = std::max(scale, std::fabs(double(want)));
        }
      CHECK(error <= (std::is_same_v<Scalar, double> ? 1e-14 : 1e-5) * scale);
      // The same bits as blas::gemm's two calls (what the kernel replaces) where dpk's kernel
      // takes those products (DPK_SMALL_GEMM, small_gemm_use); against the host BLAS' own
      // kernels only rounding differs (checked above).
      if (dpk::blas::detail::small_gemm_takes(m1, m2) && dpk::blas::detail::small_gemm_takes(m2, m1)) {
        std::vector<Scalar> by_gemm = start;
        dpk::descriptor_cotangent_gemms(t.data(), gd.data(), m1, m2, accumulate, by_gemm.data());
        CHECK(std::memcmp(by_gemm.data(), out.data(), out.size() * sizeof(Scalar)) == 0);
      }
    }
  }
}
