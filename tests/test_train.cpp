// Training machinery: schedules, Adam, energy bias, lcurve layout, model file, communicator; the
// trainer end to end, its reliability (issues 5 and 18) and its timing file.
#include <doctest/doctest.h>
#include "source_paths.hpp"

#include <dpk/parallel/communicator.hpp>
#include "brute_distance.hpp"
#include "error_test_helpers.hpp"
#include "model_file_test_helpers.hpp"
#include "train_test_helpers.hpp"
#include <dpk/train/adam.hpp>
#include <dpk/train/energy_bias.hpp>
#include <dpk/train/lcurve.hpp>
#include <dpk/train/learning_rate.hpp>
#include <dpk/io/model_file.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string temp_path(std::string const& name) {
  return std::string("/tmp/dpk_test_train_") + std::to_string(::getpid()) + "_" + name;
}

std::string slurp(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(std::string const& path, std::string const& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

using dpk_test::contains;
using dpk_test::error_of;

dpk::ModelFileData sample_model(bool checkpoint) {
  dpk::ModelFileData d;
  d.kind = checkpoint ? "checkpoint" : "model";
  d.precision = "float64";
  d.ntypes = 2;
  d.type_map = {"O", "H"};
  d.descriptor.sel = {3, 2};
  d.descriptor.neuron = {4, 8};
  d.descriptor.axis_neuron = 2;
  d.descriptor.type_one_side = true;
  d.descriptor.seed = 7;
  d.fitting.neuron = {5, 5};
  d.tensors = {{"embedding.0.w", {1, 4}, 0}, {"embedding.0.b", {4}, 4}, {"fitting.0.w", {2, 3}, 8}};
  for (int i = 0; i < 14; ++i) d.parameters.push_back(0.1 * i - 0.37 + 1e-17 * i);
  d.parameters[3] = -0.0;
  d.parameters[5] = 1.0 / 3.0;
  for (int i = 0; i < 2 * 5 * 4; ++i) {
    d.avg.push_back(0.01 * i);
    d.stdev.push_back(1.0 + 0.02 * i);
  }
  d.energy_bias = {-93.57446655273442, -187.14893310546876};
  if (checkpoint) {
    d.step = 1234;
    d.adam_step = 1234;
    for (int i = 0; i < 14; ++i) {
      d.adam_m.push_back(1e-3 * i);
      d.adam_v.push_back(1e-6 * i * i);
    }
    d.sampler_states = {"rank0 state 1 2 3", "rank1 state 4 5 6"};
    d.training["numb_steps"] = 1000000;
  }
  return d;
}

void check_same(dpk::ModelFileData const& a, dpk::ModelFileData const& b) {
  dpk_test::check_same_model_layout(a, b);
  CHECK(a.kind == b.kind);
  CHECK(a.descriptor.seed == b.descriptor.seed);
  // Bit-for-bit: compare the bytes, so -0.0 and the last ulp count.
  auto same_bits = [](std::vector<double> const& x, std::vector<double> const& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  };
  CHECK(same_bits(a.parameters, b.parameters));
  CHECK(same_bits(a.avg, b.avg));
  CHECK(same_bits(a.stdev, b.stdev));
  CHECK(same_bits(a.energy_bias, b.energy_bias));
  CHECK(same_bits(a.adam_m, b.adam_m));
  CHECK(same_bits(a.adam_v, b.adam_v));
  CHECK(a.step == b.step);
  CHECK(a.adam_step == b.adam_step);
  CHECK(a.sampler_states == b.sampler_states);
}

}  // namespace

TEST_CASE("exp learning rate: DeePMD-kit water schedule (1e-3 -> 3.51e-8, decay 5000, 1e6 steps)") {
  auto const lr = dpk::ExponentialLearningRate(1e-3, 3.51e-8, 5000, 1000000);
  // decay_rate = exp(ln(3.51e-8 / 1e-3) / (1e6 / 5000)), computed by hand (Python math).
  CHECK(lr.decay_steps() == 5000);
  CHECK(lr.decay_rate() == doctest::Approx(0.9500064099092085).epsilon(1e-14));
  CHECK(lr.value(0) == 1e-3);
  CHECK(lr.value(4999) == 1e-3);
  CHECK(lr.value(5000) == doctest::Approx(0.0009500064099092084).epsilon(1e-13));
  CHECK(lr.value(10000) == doctest::Approx(0.0009025121788685831).epsilon(1e-13));
  CHECK(lr.value(123456) == doctest::Approx(0.0002920363111186241).epsilon(1e-12));
  CHECK(lr.value(999999) == doctest::Approx(3.6947119128759015e-08).epsilon(1e-12));
  CHECK(lr.value(1000000) == doctest::Approx(3.51e-8).epsilon(1e-12));
  CHECK(lr.value(2000000) == 3.51e-8);  // floored at stop_lr
}

TEST_CASE("exp learning rate: decay_steps shrink rule for short runs") {
  // decay_steps >= numb_steps: 100 when numb_steps / 10 > 100, else numb_steps / 100 + 1.
  CHECK(dpk::ExponentialLearningRate(1e-3, 1e-8, 5000, 2000).decay_steps() == 100);
  CHECK(dpk::ExponentialLearningRate(1e-3, 1e-8, 5000, 1000).decay_steps() == 11);
  CHECK(dpk::ExponentialLearningRate(1e-3, 1e-8, 5000, 50).decay_steps() == 1);
  CHECK(dpk::ExponentialLearningRate(1e-3, 1e-8, 5000, 5000).decay_steps() == 100);
  CHECK(dpk::ExponentialLearningRate(1e-3, 1e-8, 500, 1000).decay_steps() == 500);
  // 1000 steps -> decay 11: rate = (1e-5)^(11/1000).
  auto const lr = dpk::ExponentialLearningRate(1e-3, 1e-8, 5000, 1000);
  CHECK(lr.decay_rate() == doctest::Approx(std::pow(1e-5, 11.0 / 1000.0)).epsilon(1e-14));
  CHECK(lr.value(21) == doctest::Approx(1e-3 * std::pow(lr.decay_rate(), 1)).epsilon(1e-14));
  CHECK(lr.value(22) == doctest::Approx(1e-3 * std::pow(lr.decay_rate(), 2)).epsilon(1e-14));
}

TEST_CASE("exp learning rate: bad values are errors naming the key") {
  CHECK(contains(error_of([] { dpk::ExponentialLearningRate(-1, 1e-8, 10, 100); }), "learning_rate.start_lr"));
  CHECK(contains(error_of([] { dpk::ExponentialLearningRate(1e-3, 0, 10, 100); }), "learning_rate.stop_lr"));
  CHECK(contains(error_of([] { dpk::ExponentialLearningRate(1e-3, 1e-8, 0, 100); }), "learning_rate.decay_steps"));
  CHECK(contains(error_of([] { dpk::ExponentialLearningRate(1e-3, 1e-8, 10, 0); }), "training.numb_steps"));
}

TEST_CASE("exp learning rate: DeePMD-kit 3.2's warmup, smooth decay, decay_rate and stop_lr_ratio") {
  // Expected values: DeePMD-kit 3.2.0's deepmd.dpmodel.utils.learning_rate.LearningRateExp (the
  // schedule of its TF backend), value(step) printed with repr().
  auto schedule = [](auto&& set, long numb_steps) {
    dpk::LearningRateConfig c;
    set(c);
    return dpk::ExponentialLearningRate(c, numb_steps);
  };
  auto const near = [](double a, double b) { return a == doctest::Approx(b).epsilon(1e-13); };
  {  // warmup_steps 100 from 0.1 x start_lr, then stairs of 50 steps over the 900 left
    auto const lr = schedule([](auto& c) { c.start_lr = 1e-3, c.stop_lr = 1e-8, c.decay_steps = 50,
                                           c.warmup_steps = 100, c.warmup_start_factor = 0.1; }, 1000);
    CHECK(lr.warmup_steps() == 100);
    CHECK(near(lr.decay_rate(), 0.5274997063702619));
    std::vector<std::pair<long, double>> const expected = {{0, 0.0001}, {1, 0.000109}, {50, 0.00055}, {99, 0.000991},
                                                           {100, 0.001}, {101, 0.001}, {149, 0.001},
                                                           {150, 0.0005274997063702619}, {999, 1.895735652406379e-08}};
    for (auto const& e : expected) CHECK_MESSAGE(near(lr.value(e.first), e.second), "step " << e.first);
    CHECK(near(lr.ratio(50), 0.55));  // the prefactors follow the warmup too (lr / start_lr)
  }
  {  // smooth decay, stop_lr from stop_lr_ratio (the parser sets stop_lr = start_lr x ratio)
    auto const lr = schedule([](auto& c) { c.start_lr = 2e-3, c.stop_lr = 2e-3 * 1e-3, c.decay_steps = 100,
                                           c.smooth = true; }, 2000);
    CHECK(near(lr.decay_rate(), 0.7079457843841379));
    std::vector<std::pair<long, double>> const expected = {{0, 0.002}, {1, 0.0019931041602695367},
                                                           {37, 0.0017600702233746457}, {1000, 6.324555320336759e-05},
                                                           {1999, 2.006919698295679e-06}};
    for (auto const& e : expected) CHECK_MESSAGE(near(lr.value(e.first), e.second), "step " << e.first);
  }
  {  // a given decay_rate, floored at stop_lr
    auto const lr = schedule([](auto& c) { c.start_lr = 1e-3, c.stop_lr = 1e-5, c.decay_steps = 10,
                                           c.decay_rate = 0.5; }, 1000);
    std::vector<std::pair<long, double>> const expected = {{0, 0.001}, {9, 0.001}, {10, 0.0005}, {25, 0.00025},
                                                           {999, 1e-05}};
    for (auto const& e : expected) CHECK_MESSAGE(near(lr.value(e.first), e.second), "step " << e.first);
  }
  {  // warmup_ratio 0.05 of 1000 steps, from 0; decay_steps 5000 >= the 950 steps left shrinks to 10
    auto const lr = schedule([](auto& c) { c.start_lr = 1e-3, c.stop_lr = 1e-6, c.decay_steps = 5000,
                                           c.warmup_ratio = 0.05; }, 1000);
    CHECK(lr.warmup_steps() == 50);
    CHECK(lr.decay_steps() == 10);
    CHECK(near(lr.decay_rate(), 0.9298674652605264));
    CHECK(lr.value(0) == 0.0);
    std::vector<std::pair<long, double>> const expected = {{25, 0.0005}, {49, 0.00098}, {50, 0.001}, {51, 0.001},
                                                           {999, 1.0754220761125566e-06}};
    for (auto const& e : expected) CHECK_MESSAGE(near(lr.value(e.first), e.second), "step " << e.first);
  }
  CHECK(contains(error_of([&] { schedule([](auto& c) { c.warmup_steps = 100; }, 100); }),
                 "learning_rate.warmup_steps: the warmup (100 steps) must be shorter than training.numb_steps (100)"));
}

TEST_CASE("prefactor schedule and worker scaling") {
  dpk::LossConfig loss;  // water: e 0.02 -> 1, f 1000 -> 1, v 0 -> 0
  auto const lr = dpk::ExponentialLearningRate(1e-3, 3.51e-8, 5000, 1000000);
  // DeePMD-kit's TF backend: limit + (start - limit) lr / start_lr from its float32 rate, in
  // float32 (equal to the double formula to float32 rounding).
  auto p0 = dpk::prefactors(loss, lr, 0);
  CHECK(p0.energy == doctest::Approx(0.02).epsilon(1e-6));
  CHECK(p0.force == 1000.0);
  CHECK(p0.virial == 0.0);
  for (long step : {0L, 10000L, 123456L, 1000000L}) {
    CAPTURE(step);
    double const r = lr.ratio(step);
    auto const p = dpk::prefactors(loss, lr, step);
    CHECK(p.energy == doctest::Approx(1.0 - 0.98 * r).epsilon(1e-7));
    CHECK(p.force == doctest::Approx(1.0 + 999.0 * r).epsilon(1e-7));
    float const lr32 = float(lr.value(step));
    CHECK(p.force == double(1.0f + 999.0f * lr32 / 1e-3f));  // the float32 operations, in TF's order
    CHECK(p.energy == double(1.0f + float(0.02 - 1.0) * lr32 / 1e-3f));
  }
  CHECK(lr.value_f32(10000) == float(0.0009025121788685831));
  CHECK(dpk::optimizer_rate(lr, 10000, 1.0) == double(float(0.0009025121788685831)));
  CHECK(dpk::optimizer_rate(lr, 10000, std::sqrt(2.0)) == double(float(0.0009025121788685831) * float(std::sqrt(2.0))));
  CHECK(dpk::worker_scale("linear", 4) == 4.0);
  CHECK(dpk::worker_scale("sqrt", 4) == 2.0);
  CHECK(dpk::worker_scale("none", 4) == 1.0);
  CHECK(contains(error_of([] { dpk::worker_scale("cubic", 2); }), "scale_by_worker"));
}

TEST_CASE_TEMPLATE("Adam matches a hand-written reference (TensorFlow form)", Scalar, double, float) {
  using Space = dpk::DefaultExecutionSpace;
  using Mem = dpk::memory_space_t<Space>;
  int const n = 5;
  dpk::View1<Scalar, Mem> params("dpk::test::params", n), grad("dpk::test::grad", n);
  auto hp = Kokkos::create_mirror_view(params);
  auto hg = Kokkos::create_mirror_view(grad);
  std::vector<double> theta(n), m(n, 0.0), v(n, 0.0);
  for (int i = 0; i < n; ++i) theta[i] = hp(i) = Scalar(0.5 - 0.2 * i);
  Kokkos::deep_copy(params, hp);
  double b1 = 0.9, b2 = 0.999;  // DeePMD-kit's defaults
  SUBCASE("default betas") {}
  SUBCASE("other betas (input.json's optimizer.adam_beta1/2)") { b1 = 0.8, b2 = 0.99; }
  dpk::AdamConfig config;
  config.beta1 = b1;
  config.beta2 = b2;
  dpk::Adam<Scalar, Space> adam(n, config);
  double const lr = 1e-2, eps = 1e-8;
  for (int t = 1; t <= 4; ++t) {
    std::vector<double> g(n);
    for (int i = 0; i < n; ++i) g[i] = hg(i) = Scalar(std::sin(1.0 + i * t) * (i == 3 ? 1e-9 : 1.0) + (i == 4 ? 0.0 : 0.0));
    if (t == 2) g[4] = hg(4) = Scalar(0);  // a zero gradient
    Kokkos::deep_copy(grad, hg);
    adam.step(Space(), params, grad, lr);
    // Reference: the paper's bias-corrected moments with epsilon_hat = eps / sqrt(1 - b2^t),
    // which is algebraically TensorFlow's update.
    for (int i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double const m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
      theta[i] -= lr * m_hat / (std::sqrt(v_hat) + eps / std::sqrt(1 - std::pow(b2, t)));
    }
  }
  CHECK(adam.step_count() == 4);
  Kokkos::deep_copy(hp, params);
  double const tol = std::is_same_v<Scalar, double> ? 1e-12 : 1e-5;
  for (int i = 0; i < n; ++i) CHECK(double(hp(i)) == doctest::Approx(theta[i]).epsilon(tol));
  // First step moves each parameter by about lr (sign of the gradient): Adam's hallmark.
  CHECK(std::fabs(double(hp(0)) - 0.5) < 4.5 * lr);
  dpk::View1<Scalar, Mem> wrong("dpk::test::wrong", n + 1);
  CHECK(contains(error_of([&] { adam.step(Space(), wrong, grad, lr); }), "Adam::step"));
}

TEST_CASE_TEMPLATE("Adam on the host over several blocks matches a double reference with plain and streaming stores", Scalar, double,
                   float) {
  // With several host threads step() writes the parameters with plain or streaming stores,
  // whichever was faster (the first two steps use one each), a tile of 512 at a time within
  // blocks of 8192: 3 blocks and a partial one, 20 steps, against a reference in double.
  using Space = Kokkos::DefaultHostExecutionSpace;
  std::size_t const n = 3 * 8192 + 700;
  dpk::View1<Scalar, Kokkos::HostSpace> params("dpk::test::params", n), grad("dpk::test::grad", n);
  std::vector<double> theta(n), m(n, 0.0), v(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) theta[i] = params(i) = Scalar(std::cos(0.001 * double(i)));
  dpk::Adam<Scalar, Space> adam(n);
  double const lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (int t = 1; t <= 20; ++t) {
    for (std::size_t i = 0; i < n; ++i) grad(i) = Scalar(std::sin(0.01 * double(i) * t + t));
    adam.step(Space(), params, grad, lr);
    double const lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < n; ++i) {
      double const g = double(grad(i));
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      theta[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  double const tol = std::is_same_v<Scalar, double> ? 1e-12 : 2e-5;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::fabs(double(params(i)) - theta[i]) > tol * (1 + std::fabs(theta[i]))) ++bad;
  CHECK(bad == 0);
}

TEST_CASE("energy bias: min-norm least squares equals numpy.linalg.lstsq") {
  SUBCASE("water, rank deficient: every frame has 64 O and 128 H") {
    // energy.npy of data_0/set.000, frames 0-9 (float32 values, exactly representable).
    std::vector<double> const e = {-29943.90625,  -29943.787109375, -29943.142578125, -29943.47265625,
                                   -29943.8203125, -29942.66796875,  -29943.765625,    -29944.236328125,
                                   -29943.9140625, -29945.580078125};
    std::vector<double> counts;
    for (std::size_t f = 0; f < e.size(); ++f) counts.insert(counts.end(), {64.0, 128.0});
    auto bias = dpk::energy_bias_least_squares(counts, e, 2);
    // numpy 1.24: np.linalg.lstsq(A, e, rcond=None)[0]
    CHECK(bias[0] == doctest::Approx(-93.57446655273442).epsilon(1e-13));
    CHECK(bias[1] == doctest::Approx(-187.14893310546876).epsilon(1e-13));
  }
  SUBCASE("full rank, overdetermined") {
    std::vector<double> const a = {2, 1, 3, 1, 1, 4, 0, 2, 5, 5};
    auto x = dpk::least_squares_min_norm(a, 5, 2, {-10.0, -13.5, -20.25, -7.0, -40.0});
    CHECK(x[0] == doctest::Approx(-3.4951994091580505).epsilon(1e-13));
    CHECK(x[1] == doctest::Approx(-4.248153618906944).epsilon(1e-13));
  }
  SUBCASE("full rank, rcond (model.fitting_net.rcond) cutting the smaller singular value") {
    // singular values 8.788 and 2.961 (ratio 0.337): rcond 0.3 keeps both, 0.5 drops the second.
    std::vector<double> const a = {2, 1, 3, 1, 1, 4, 0, 2, 5, 5};
    std::vector<double> const e = {-10.0, -13.5, -20.25, -7.0, -40.0};
    auto x = dpk::least_squares_min_norm(a, 5, 2, e, 0.3);  // numpy 2.4: lstsq(A, e, rcond=0.3)
    CHECK(x[0] == doctest::Approx(-3.4951994091580505).epsilon(1e-13));
    CHECK(x[1] == doctest::Approx(-4.248153618906944).epsilon(1e-13));
    x = dpk::least_squares_min_norm(a, 5, 2, e, 0.5);  // numpy 2.4: lstsq(A, e, rcond=0.5)
    CHECK(x[0] == doctest::Approx(-3.6529361417845188).epsilon(1e-13));
    CHECK(x[1] == doctest::Approx(-4.107886296516131).epsilon(1e-13));
  }
  SUBCASE("three types, rank 2") {
    std::vector<double> const a = {1, 2, 3, 2, 1, 3, 4, 4, 8, 0, 1, 1};
    auto x = dpk::least_squares_min_norm(a, 4, 3, {1.0, 2.0, 3.5, 0.25});
    CHECK(x[0] == doctest::Approx(0.5524193548387102).epsilon(1e-12));
    CHECK(x[1] == doctest::Approx(-0.2500000000000003).epsilon(1e-12));
    CHECK(x[2] == doctest::Approx(0.30241935483870963).epsilon(1e-12));
  }
  CHECK(contains(error_of([] { dpk::energy_bias_least_squares({}, {}, 2); }), "no training frames"));
  CHECK(contains(error_of([] { dpk::energy_bias_least_squares({1.0}, {1.0, 2.0}, 2); }), "type count table"));
}

TEST_CASE("lcurve.out uses DeePMD-kit's column layout") {
  CHECK(dpk::LearningCurveWriter::header(true, false) ==
        "#  step      rmse_val    rmse_trn    rmse_e_val  rmse_e_trn    rmse_f_val  rmse_f_trn         lr");
  dpk::CurveMetrics val{33.3 * 33.3, 10.3, 0.839, 0}, trn{34.1 * 34.1, 10.3, 0.872, 0};
  CHECK(dpk::LearningCurveWriter::line(0, val, trn, 1e-3, true, false) ==
        "      0      3.33e+01    3.41e+01      1.03e+01    1.03e+01      8.39e-01    8.72e-01    1.0e-03");
  CHECK(dpk::LearningCurveWriter::header(true, true) ==
        "#  step      rmse_val    rmse_trn    rmse_e_val  rmse_e_trn    rmse_f_val  rmse_f_trn    rmse_v_val  "
        "rmse_v_trn         lr");
  CHECK(dpk::LearningCurveWriter::header(false, false) == "#  step      rmse_trn    rmse_e_trn    rmse_f_trn         lr");
  std::string const path = temp_path("lcurve.out");
  {
    dpk::LearningCurveWriter w(path, true, false);
    w.write(0, val, trn, 1e-3);
  }
  {
    dpk::LearningCurveWriter w(path, true, false, /*append=*/true);
    w.write(100, val, trn, 9.5e-4);
  }
  std::istringstream lines(slurp(path));
  std::string l0, l1, l2, l3;
  std::getline(lines, l0);
  std::getline(lines, l1);
  std::getline(lines, l2);
  CHECK(l0[0] == '#');
  CHECK(l1.substr(0, 7) == "      0");
  CHECK(l2.substr(0, 7) == "    100");
  CHECK(!std::getline(lines, l3));
  std::remove(path.c_str());
}

TEST_CASE("model file: round trip, bit for bit") {
  for (bool checkpoint : {false, true}) {
    auto const data = sample_model(checkpoint);
    std::string const path = temp_path(checkpoint ? "roundtrip.ckpt" : "roundtrip.model");
    dpk::write_model_file(path, data);
    auto const back = dpk::read_model_file(path);
    check_same(data, back);
    std::string const bytes = slurp(path);
    CHECK(bytes.substr(0, 8) == "DPKMODEL");
    CHECK(bytes.substr(bytes.size() - 8) == "DPKEND01");
    std::remove(path.c_str());
  }
}

TEST_CASE("model file: damaged files give clear errors naming the file") {
  auto const data = sample_model(true);
  std::string const good = dpk::model_file_bytes(data);
  std::string const path = temp_path("damaged.ckpt");
  auto error_for = [&](std::string const& bytes) {
    spit(path, bytes);
    return error_of([&] { dpk::read_model_file(path); });
  };
  CHECK(contains(error_for(good.substr(0, good.size() - 3)), path));
  CHECK(contains(error_for(good.substr(0, good.size() - 3)), "truncated"));
  CHECK(contains(error_for(good.substr(0, 30)), "truncated"));
  CHECK(contains(error_for(good.substr(0, 10)), "not a dpk model file"));
  CHECK(contains(error_for(""), "not a dpk model file"));
  CHECK(contains(error_for("{\"json\": 1}"), "not a dpk model file"));
  CHECK(contains(error_for(good + "xx"), "unexpected bytes"));
  {
    std::string flipped = good;
    flipped[flipped.size() - 8 - 5] ^= 0x10;  // a bit inside the last data block
    CHECK(contains(error_for(flipped), "checksum"));
  }
  {
    std::string v2 = good;
    v2[8] = 2;
    CHECK(contains(error_for(v2), "format version 2 is not supported"));
  }
  {
    std::string header_damage = good;
    header_damage[21] = '#';
    CHECK(contains(error_for(header_damage), "not valid JSON"));
  }
  {
    auto bad = data;
    bad.avg.pop_back();
    CHECK(contains(error_for(dpk::model_file_bytes(bad)), "statistics blocks"));
  }
  {
    auto bad = data;
    bad.tensors[2].shape = {3, 3};
    CHECK(contains(error_for(dpk::model_file_bytes(bad)), "tensor 'fitting.0.w'"));
  }
  {
    auto bad = data;
    bad.type_map = {"O"};
    CHECK(contains(error_for(dpk::model_file_bytes(bad)), "type_map"));
  }
  CHECK(contains(error_of([] { dpk::read_model_file("/nonexistent/dir/model.dpk"); }), "/nonexistent/dir/model.dpk"));
  std::remove(path.c_str());
}

namespace {

/// FNV-1a-64 written from the published definition (offset basis 0xcbf29ce484222325,
/// prime 0x100000001b3), independent of dpk's implementation.
std::uint64_t reference_fnv1a64(std::string const& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The data section of a model file's bytes (between the padded header and the end marker).
std::string data_section(std::string const& bytes) {
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= std::uint64_t(static_cast<unsigned char>(bytes[12 + i])) << (8 * i);
  std::size_t start = 20 + header_length;
  while (start % 8) ++start;
  return bytes.substr(start, bytes.size() - 8 - start);
}

/// `bytes` with its JSON header replaced by `edit(header)` (the data section unchanged).
template <class Edit>
std::string with_header(std::string const& bytes, Edit edit) {
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= std::uint64_t(static_cast<unsigned char>(bytes[12 + i])) << (8 * i);
  auto header = nlohmann::json::parse(bytes.substr(20, header_length));
  edit(header);
  std::string const text = header.dump(1);
  std::string out = bytes.substr(0, 12);
  for (int i = 0; i < 8; ++i) out.push_back(char((std::uint64_t(text.size()) >> (8 * i)) & 0xffu));
  out += text;
  while (out.size() % 8) out.push_back('\0');
  return out + data_section(bytes) + "DPKEND01";
}

}  // namespace

TEST_CASE("model file: FNV-1a-64 checksum with the standard offset basis (published test vectors)") {
  auto fnv = [](std::string const& text) {
    return dpk::detail::model_file::fnv1a64(reinterpret_cast<unsigned char const*>(text.data()), text.size());
  };
  CHECK(fnv("") == 0xcbf29ce484222325ull);
  CHECK(fnv("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv("foobar") == 0x85944171f73967e8ull);
  // A written file carries the standard hash of its data section, as docs/model-format.md says.
  std::string const bytes = dpk::model_file_bytes(sample_model(true));
  std::uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= std::uint64_t(static_cast<unsigned char>(bytes[12 + i])) << (8 * i);
  auto const written = nlohmann::json::parse(bytes.substr(20, header_length));
  CHECK(written["data_checksum_fnv1a64"].get<std::string>() == std::to_string(reference_fnv1a64(data_section(bytes))));
  // A file assembled by another writer to the documented format (standard hash) loads.
  std::string const path = temp_path("documented.model");
  auto const data = sample_model(false);
  std::string const other = with_header(dpk::model_file_bytes(data), [](nlohmann::json& h) {
    h["data_checksum_fnv1a64"] = "0";  // replaced below with the reference hash
  });
  std::string const fixed = with_header(other, [&](nlohmann::json& h) {
    h["data_checksum_fnv1a64"] = std::to_string(reference_fnv1a64(data_section(other)));
  });
  spit(path, fixed);
  check_same(data, dpk::read_model_file(path));
  spit(path, other);  // checksum "0": damaged
  CHECK(contains(error_of([&] { dpk::read_model_file(path); }), "checksum mismatch"));
  std::remove(path.c_str());
}

TEST_CASE("model file: files written by dpk before the checksum fix (legacy offset basis) still load") {
  // tests/data/legacy_v1: written by dpk-train at commit 1152686 (FNV basis 1469598103934665603).
  for (std::string const name : {"model.dpk", "model.ckpt-2"}) {
    std::string const path = std::string(dpk_test::data_dir()) + "/legacy_v1/" + name;
    std::string const bytes = slurp(path);
    REQUIRE(bytes.size() > 100);
    std::uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i) header_length |= std::uint64_t(static_cast<unsigned char>(bytes[12 + i])) << (8 * i);
    auto const header = nlohmann::json::parse(bytes.substr(20, header_length));
    std::string const stored = header["data_checksum_fnv1a64"].get<std::string>();
    CHECK(stored != std::to_string(reference_fnv1a64(data_section(bytes))));  // really a legacy file
    auto const d = dpk::read_model_file(path);
    CHECK(d.kind == (name == "model.dpk" ? "model" : "checkpoint"));
    CHECK(d.type_map == std::vector<std::string>{"O", "H"});
    CHECK(d.descriptor.sel == std::vector<int>{16, 32});
    CHECK(d.avg.size() == 2 * 48 * 4);
    // A damaged legacy file is still rejected.
    std::string damaged = bytes;
    damaged[damaged.size() - 8 - 3] ^= 0x01;
    std::string const copy = temp_path("legacy_damaged");
    spit(copy, damaged);
    CHECK(contains(error_of([&] { dpk::read_model_file(copy); }), "checksum mismatch"));
    std::remove(copy.c_str());
  }
}

TEST_CASE("model file: descriptor/fitting types and activations dpk does not implement are rejected") {
  std::string const good = dpk::model_file_bytes(sample_model(false));
  std::string const path = temp_path("unimplemented.model");
  auto error_with = [&](char const* section, char const* key, char const* value) {
    spit(path, with_header(good, [&](nlohmann::json& h) { h[section][key] = value; }));
    return error_of([&] { dpk::read_model_file(path); });
  };
  std::string e = error_with("descriptor", "activation_function", "gelu");
  CHECK(contains(e, path));
  CHECK(contains(e, "'descriptor.activation_function' is \"gelu\", dpk implements only \"tanh\""));
  e = error_with("fitting_net", "activation_function", "relu");
  CHECK(contains(e, "'fitting_net.activation_function' is \"relu\", dpk implements only \"tanh\""));
  e = error_with("descriptor", "type", "se_e2_r");
  CHECK(contains(e, "'descriptor.type' is \"se_e2_r\", dpk implements only \"se_e2_a\", \"se_a\""));
  e = error_with("fitting_net", "type", "dipole");
  CHECK(contains(e, "'fitting_net.type' is \"dipole\", dpk implements only \"ener\""));
  // The alias se_a and the implemented values load.
  CHECK(error_with("descriptor", "type", "se_a").empty());
  CHECK(error_with("descriptor", "activation_function", "tanh").empty());
  spit(path, with_header(good, [](nlohmann::json& h) { h["fitting_net"].erase("type"); }));
  CHECK(contains(error_of([&] { dpk::read_model_file(path); }), "missing 'fitting_net.type'"));
  std::remove(path.c_str());
}

TEST_CASE("model file: an interrupted write leaves the previous file loadable") {
  std::string const path = temp_path("interrupted.ckpt");
  auto first = sample_model(true);
  dpk::write_model_file(path, first);
  auto second = first;
  second.step = 2000;
  second.parameters[0] = 42.0;
  dpk::ModelFileWriteOptions crash;
  crash.fail_after_bytes = 100;
  CHECK(contains(error_of([&] { dpk::write_model_file(path, second, crash); }), "interrupted"));
  auto const back = dpk::read_model_file(path);
  CHECK(back.step == 1234);
  CHECK(back.parameters[0] == first.parameters[0]);
  // The half-written temporary file is there (as after a crash) and is itself rejected.
  std::string const temp = path + ".tmp." + std::to_string(::getpid());
  CHECK(contains(error_of([&] { dpk::read_model_file(temp); }), "truncated"));
  std::remove(temp.c_str());
  dpk::write_model_file(path, second);
  CHECK(dpk::read_model_file(path).step == 2000);
  std::remove(path.c_str());
}

TEST_CASE("communicator: one rank without MPI or outside mpirun") {
  dpk::Communicator comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  using Mem = dpk::memory_space_t<dpk::DefaultExecutionSpace>;
  dpk::View1<double, Mem> v("dpk::test::v", 3);
  Kokkos::deep_copy(v, 2.0);
  comm.allreduce_sum(v);
  comm.broadcast(v);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  CHECK(h(2) == 2.0);
  CHECK(comm.allreduce_sum(1.5) == 1.5);
  CHECK(comm.gather_strings("x") == std::vector<std::string>{"x"});
}

// ---------------------------------------------------------------- end to end (the trainer)
#include <dpk/train/trainer.hpp>

#include <filesystem>

namespace {

/// The shared tiny model, displaying and saving every 2 steps.
dpk::InputConfig tiny_input(long numb_steps) {
  dpk::InputConfig c = dpk_test::tiny_input("tiny (test_train.cpp)", numb_steps);
  c.training.disp_freq = 2;
  c.training.save_freq = 2;
  return c;
}

using dpk_test::water_frames;

std::string fresh_dir(std::string const& name) {
  std::string const dir = temp_path(name);
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("trainer: stop + restart continues bit for bit (float64 and float32)") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  auto run = [&](auto scalar_tag, std::string const& dir, long stop_at, std::string const& restart) {
    using Scalar = decltype(scalar_tag);
    dpk::TrainerOptions options;
    options.output_dir = dir;
    options.stop_at = stop_at;
    options.restart = restart;
    options.data_stat_nbatch = 2;
    options.log = nullptr;
    // Three sets, so the stop falls inside the sets walk's second pass (its set index is state).
    dpk::System training = water_frames(0, 4);
    training.set_nframes = {2, 1, 1};
    dpk::Trainer<Scalar, Space> trainer(tiny_input(6), {training}, {water_frames(4, 2)}, options, comm);
    return trainer.run();
  };
  auto check = [&](auto scalar_tag, std::string const& tag) {
    std::string const straight = fresh_dir("straight_" + tag), split = fresh_dir("split_" + tag);
    run(scalar_tag, straight, -1, "");
    auto first = run(scalar_tag, split, 3, "");
    CHECK(first.last_step == 3);
    auto second = run(scalar_tag, split, -1, split + "/model.ckpt");
    CHECK(second.first_step == 3);
    CHECK(second.last_step == 6);
    auto a = dpk::read_model_file(straight + "/model.dpk");
    auto b = dpk::read_model_file(split + "/model.dpk");
    REQUIRE(a.parameters.size() == b.parameters.size());
    // The model has no atomic accumulation and every reduction has a fixed order for a given
    // thread count, so the runs agree bit for bit at 1 and at 2 threads.
    CHECK(std::memcmp(a.parameters.data(), b.parameters.data(), a.parameters.size() * sizeof(double)) == 0);
    CHECK(slurp(straight + "/lcurve.out") == slurp(split + "/lcurve.out"));
    auto ckpt = dpk::read_model_file(dpk::resolve_checkpoint(split + "/model.ckpt"));
    CHECK(ckpt.kind == "checkpoint");
    CHECK(ckpt.step == 6);
    CHECK(ckpt.adam_step == 6);
    std::filesystem::remove_all(straight);
    std::filesystem::remove_all(split);
  };
  check(double(), "f64");
  check(float(), "f32");
}

TEST_CASE("trainer: stored neighbour distance; compressed training moves only the fitting nets") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::string const dir = fresh_dir("frz_training");
  dpk::TrainerOptions options;
  options.output_dir = dir + "/full";
  options.data_stat_nbatch = 2;
  options.log = nullptr;
  std::vector<dpk::System> const frames = {water_frames(0, 4)};
  dpk::Trainer<double, Space>(tiny_input(2), frames, {}, options, comm).run();
  dpk::ModelFileData data = dpk::read_model_file(dir + "/full/model.dpk");
  // The trainer's search over every training frame equals a brute-force one.
  REQUIRE(data.training.contains("min_neighbor_distance"));
  double const stored = data.training["min_neighbor_distance"].get<double>();
  CHECK(stored == doctest::Approx(dpk_test::brute_system_stat(frames[0], 2, 6.0).min_distance).epsilon(1e-13));
  CHECK(stored > 0.8);
  CHECK(stored < 1.0);

  // Compress with the stored distance (as `dpk-train compress` without -t), then train 4 steps
  // with the tables frozen (--init-frz-model).
  dpk::EnergyModel<double, Space> model(data.descriptor, data.fitting, data.ntypes);
  dpk::install_model_data(data, model, dir + "/full/model.dpk");
  data.compression = dpk::model_compression(model.build_embedding_table(stored, 0.01, 5), stored, -1);
  dpk::write_model_file(dir + "/compressed.dpk", data);
  options.output_dir = dir + "/frz";
  options.init_frz_model = dir + "/compressed.dpk";
  dpk::Trainer<double, Space>(tiny_input(4), frames, {}, options, comm).run();
  auto const after = dpk::read_model_file(dir + "/frz/model.dpk");
  REQUIRE(after.compression.has_value());
  CHECK(after.compression->table == data.compression->table);
  CHECK(after.training["min_neighbor_distance"].get<double>() == stored);
  REQUIRE(after.tensors == data.tensors);
  int embedding = 0, fitting = 0, fitting_moved = 0;
  for (auto const& t : data.tensors) {
    bool const same = std::memcmp(&data.parameters[t.offset], &after.parameters[t.offset], t.size() * sizeof(double)) == 0;
    CAPTURE(t.name);
    if (t.name.rfind("embedding", 0) == 0) {
      ++embedding;
      CHECK(same);  // bit for bit: the tables stand for them, their gradient is 0
    } else {
      ++fitting;
      fitting_moved += same ? 0 : 1;
    }
  }
  CHECK(embedding > 0);
  CHECK(fitting > 0);
  CHECK(fitting_moved == fitting);
  CHECK(after.energy_bias == data.energy_bias);
  std::filesystem::remove_all(dir);
}

TEST_CASE("neighbour statistics: counts and nearest distance of every frame equal a brute-force search") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::System const frames = water_frames(0, 6);
  dpk_test::BruteSystemStat const brute = dpk_test::brute_system_stat(frames, 2, 6.0);
  std::vector<int> const& want = brute.max_neighbors;
  double const nearest = brute.min_distance;
  dpk::DataSampler const sampler({frames}, dpk::BatchSize{false, 1, {}}, 0, {dpk::SamplingMode::sequential, {}});
  // The default start (32 slots per type) is short for both types here: the search grows them.
  // beyond_start_sel: the neighbours a search with the start sel drops, sum of max(0, count - sel).
  for (std::vector<int> start : {std::vector<int>{}, std::vector<int>{46, 92}, std::vector<int>{8, 8}}) {
    CAPTURE(start.size() ? start[0] : 0);
    std::vector<int> const slots = start.empty() ? std::vector<int>{32, 32} : start;
    long beyond = 0;
    for (int f = 0; f < frames.nframes; ++f)
      beyond += dpk_test::brute_neighbors_beyond(&frames.coord[std::size_t(f) * 3 * frames.natoms],
                                                 &frames.box[std::size_t(f) * 9], frames.types.data(), frames.natoms,
                                                 slots, 6.0);
    dpk::NeighborStat const stat = dpk::data_neighbor_stat<double>(Space(), sampler, 6.0, 2, start);
    CHECK(stat.max_neighbors == want);
    CHECK(stat.min_distance == doctest::Approx(nearest).epsilon(1e-13));
    CHECK(stat.frames == 6);
    CHECK(stat.beyond_start_sel == beyond);
    CHECK((beyond > 0) == (start != std::vector<int>{46, 92}));
  }
  CHECK(want[0] > 32);  // the growth above was exercised
  CHECK(want[1] > 32);
  // DeePMD-kit's rule for "sel": "auto:ratio" (deepmd/utils/update_sel.py): int(count * ratio),
  // rounded up to a multiple of 4; DeePMD-kit 3.2 resolves the water example's data to [44, 80].
  CHECK(dpk::auto_sel({38, 72}, 1.1) == std::vector<int>{44, 80});
  CHECK(dpk::auto_sel({59, 15, 11}, 1.25) == std::vector<int>{76, 20, 16});
  CHECK(dpk::auto_sel({40, 0, 1}, 1.0) == std::vector<int>{40, 0, 4});
}

TEST_CASE("trainer: sel \"auto\" from the training frames; a too small sel warned about over all of them") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::vector<dpk::System> const frames = {water_frames(0, 4)};
  dpk_test::BruteSystemStat const brute = dpk_test::brute_system_stat(frames[0], 2, 6.0);
  std::vector<int> const& counts = brute.max_neighbors;
  auto bracket = [](std::vector<int> const& v) {
    std::string text;
    for (int n : v) text += (text.empty() ? "[" : ", ") + std::to_string(n);
    return text + "]";
  };
  std::string const dir = fresh_dir("auto_sel");
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.data_stat_nbatch = 2;
  std::ostringstream log;
  options.log = &log;
  dpk::InputConfig config = tiny_input(2);
  config.descriptor.sel.clear();
  config.descriptor.sel_auto = 1.25;
  dpk::Trainer<double, Space>(config, frames, {}, options, comm).run();
  dpk::ModelFileData const data = dpk::read_model_file(dir + "/model.dpk");
  CHECK(data.descriptor.sel == dpk::auto_sel(counts, 1.25));
  CHECK(data.training["min_neighbor_distance"].get<double>() == doctest::Approx(brute.min_distance).epsilon(1e-13));
  CHECK(contains(log.str(), "dpk-train: sel " + bracket(data.descriptor.sel) +
                                " (\"auto:1.25\": the 4 training frames have up to " +
                                bracket(counts) + " neighbours"));
  // --skip-neighbor-stat leaves nothing to take sel from
  options.skip_neighbor_stat = true;
  CHECK(contains(error_of([&] { dpk::Trainer<double, Space>(config, frames, {}, options, comm); }),
                 "sel \"auto\" needs the neighbour statistics"));
  // An explicit sel below the counts: the warning names the counts of all training frames.
  options.skip_neighbor_stat = false;
  options.output_dir = dir + "/small";
  log.str("");
  config = tiny_input(2);
  config.descriptor.sel = {20, 40};
  dpk::Trainer<double, Space>(config, frames, {}, options, comm).run();
  CHECK(contains(log.str(), "dpk-train: warning: descriptor.sel [20, 40] is too small for these data: the 4 training "
                            "frames have up to " + bracket(counts) +
                            " neighbours of each type within rcut 6 A; use sel >= " +
                            bracket(counts)));
  CHECK(!contains(log.str(), "the statistics frames"));  // one warning, from all frames
  // Without the all-frames search the warning covers the statistics frames: 4 batches of one
  // frame from the shuffled order are the 4 frames; the neighbours beyond sel [20, 40] in them
  // by brute force.
  long beyond = 0;
  for (int f = 0; f < 4; ++f)
    beyond += dpk_test::brute_neighbors_beyond(&frames[0].coord[std::size_t(f) * 3 * frames[0].natoms],
                                               &frames[0].box[std::size_t(f) * 9], frames[0].types.data(),
                                               frames[0].natoms, {20, 40}, 6.0);
  options.skip_neighbor_stat = true;
  options.data_stat_nbatch = 4;
  options.output_dir = dir + "/small_skip";
  log.str("");
  dpk::Trainer<double, Space>(config, frames, {}, options, comm).run();
  CHECK(contains(log.str(), "dpk-train: warning: descriptor.sel [20, 40] is too small for these data: the statistics "
                            "frames have up to " + bracket(counts) + " neighbours of each type within rcut 6 A (" +
                            std::to_string(beyond) + " neighbours beyond sel dropped in them); use sel >= " +
                            bracket(counts) + " (dpk-train neighbor-stat counts over all frames)"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("trainer: a NaN loss stops training and keeps the last good checkpoint") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::string const init_dir = fresh_dir("nan_init"), dir = fresh_dir("nan");
  dpk::TrainerOptions options;
  options.data_stat_nbatch = 1;
  options.log = nullptr;
  auto input = tiny_input(40);
  input.training.save_freq = 1;
  input.training.disp_freq = 100;
  {
    // A good starting model (statistics, bias, parameters) from clean frames.
    dpk::TrainerOptions o = options;
    o.output_dir = init_dir;
    o.stop_at = 0;
    dpk::Trainer<double, Space>(input, {water_frames(0, 8)}, {}, o, comm).run();
  }
  dpk::System bad = water_frames(0, 8);
  bad.energy[5] = std::nan("");  // one bad label among 8 frames
  options.output_dir = dir;
  options.init_model = init_dir + "/model.dpk";
  std::string message;
  try {
    dpk::Trainer<double, Space>(input, {bad}, {}, options, comm).run();
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(contains(message, "loss is not finite at step"));
  CHECK(contains(message, "last good checkpoint"));
  CHECK(!std::filesystem::exists(dir + "/model.dpk"));  // no final model from a failed run
  if (!contains(message, "none written yet")) {
    auto const ckpt = dpk::read_model_file(dpk::resolve_checkpoint(dir + "/model.ckpt"));
    CHECK(ckpt.step > 0);
    CHECK(contains(message, "step " + std::to_string(ckpt.step)));
    for (double v : ckpt.parameters) REQUIRE(std::isfinite(v));
  }
  std::filesystem::remove_all(init_dir);
  std::filesystem::remove_all(dir);
}

namespace {

/// An input.json for the systems of tests/data/multi_system (absolute paths), written into `dir`.
std::string multi_system_input_file(std::string const& dir, nlohmann::json const& batch_size, int rcut_sel_small) {
  std::string const root = std::string(dpk_test::data_dir()) + "/multi_system/";
  nlohmann::json descriptor = {{"type", "se_e2_a"}, {"sel", {46, 92}}, {"rcut", 6.0}, {"rcut_smth", 0.5},
                               {"neuron", {4, 8}}, {"axis_neuron", 4}, {"seed", 1}, {"precision", "float64"}};
  if (rcut_sel_small) {  // the model of tests/data/legacy_v1/input.json
    descriptor["sel"] = {16, 32};
    descriptor["rcut"] = 4.0;
    descriptor.erase("precision");
    descriptor["type_one_side"] = true;
    descriptor["resnet_dt"] = false;
  }
  nlohmann::json j = {
      {"model", {{"type_map", {"O", "H"}}, {"descriptor", descriptor},
                 {"fitting_net", {{"neuron", {8, 8}}, {"resnet_dt", true}, {"seed", 1}}}}},
      {"learning_rate", {{"type", "exp"}, {"decay_steps", 5000}, {"start_lr", 0.001}, {"stop_lr", 3.51e-8}}},
      {"loss", {{"type", "ener"}}},
      {"training",
       {{"training_data", {{"systems", {root + "sys_a", root + "sys_b", root + "sys_c"}}, {"batch_size", batch_size}}},
        {"numb_steps", 4},
        {"seed", 10},
        {"disp_freq", 1},
        {"save_freq", 2}}}};
  std::filesystem::create_directories(dir);
  std::string const path = dir + "/input.json";
  spit(path, j.dump(1));
  return path;
}

}  // namespace

TEST_CASE("trainer: descriptor statistics from data_stat_nbatch batches of every system, as DeePMD-kit") {
  // tests/data/multi_system/reference.json cases "stat" and "stat_davg_zero": DeePMD-kit 3.2.0
  // (TF) trained 0 steps on the three systems with batch_size [2, 1, 1] and data_stat_nbatch 10
  // (the second with the descriptor's set_davg_zero) and stored these avg/std.
  std::ifstream in(std::string(dpk_test::data_dir()) + "/multi_system/reference.json");
  REQUIRE(in.good());
  auto const cases = nlohmann::json::parse(in)["cases"];
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::string const dir = fresh_dir("stat_per_system");
  std::size_t const nnei = 46 + 92;
  // Trains 0 steps from the input with `edit` applied and --data-stat-nbatch `nbatch` (0: none);
  // returns the largest difference to the reference case's avg/std (relative for std).
  auto worst_difference = [&](auto const& edit, int nbatch, nlohmann::json const& reference) {
    std::string const input = multi_system_input_file(dir, {2, 1, 1}, false);
    nlohmann::json j = nlohmann::json::parse(slurp(input));
    edit(j);
    spit(input, j.dump(1));
    dpk::TrainerOptions options;
    options.output_dir = dir;
    options.stop_at = 0;
    options.data_stat_nbatch = nbatch;
    options.log = nullptr;
    dpk::Trainer<double, Space>(dpk::read_input(input), options, comm).run();
    auto const model = dpk::read_model_file(dir + "/model.dpk");
    REQUIRE(model.avg.size() == 2 * nnei * 4);
    double worst = 0;
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t k = 0; k < nnei; ++k)
        for (std::size_t c = 0; c < 4; ++c) {
          double const a = reference["avg"][t][c].get<double>(), s = reference["std"][t][c].get<double>();
          worst = std::max(worst, std::fabs(model.avg[(t * nnei + k) * 4 + c] - a));
          worst = std::max(worst, std::fabs(model.stdev[(t * nnei + k) * 4 + c] - s) / s);
        }
    INFO("O avg_r " << model.avg[0] << " std_r " << model.stdev[0] << " std_a " << model.stdev[1]);
    INFO("H avg_r " << model.avg[nnei * 4] << " std_r " << model.stdev[nnei * 4] << " std_a " << model.stdev[nnei * 4 + 1]);
    return worst;
  };
  auto const unchanged = [](nlohmann::json&) {};
  CHECK(worst_difference(unchanged, 10, cases["stat"]) < 1e-12);  // --data-stat-nbatch 10
  CHECK(worst_difference(unchanged, 0, cases["stat"]) < 1e-12);   // DeePMD-kit's default, 10
  // model.data_stat_nbatch from the input: 1 batch of each system gives other statistics, and
  // --data-stat-nbatch overrides it.
  auto const one_batch = [](nlohmann::json& j) { j["model"]["data_stat_nbatch"] = 1; };
  CHECK(worst_difference(one_batch, 0, cases["stat"]) > 1e-3);
  CHECK(worst_difference(one_batch, 10, cases["stat"]) < 1e-12);
  CHECK(worst_difference([](nlohmann::json& j) { j["model"]["data_stat_nbatch"] = 10; }, 0, cases["stat"]) < 1e-12);
  // set_davg_zero: the mean is zero (exactly: DeePMD-kit keeps its zeros), the std as before.
  auto const davg_zero = [](nlohmann::json& j) { j["model"]["descriptor"]["set_davg_zero"] = true; };
  REQUIRE(cases["stat_davg_zero"]["avg"] == nlohmann::json({{0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 0.0}}));
  CHECK(worst_difference(davg_zero, 0, cases["stat_davg_zero"]) < 1e-12);
  std::filesystem::remove_all(dir);
}

TEST_CASE("trainer: training.num_epoch sets numb_steps as DeePMD-kit 3.2 does") {
  // reference.json case "stat" (batch_size [2, 1, 1]): DeePMD-kit's total_numb_batch is 12, so
  // num_epoch 2.4 trains ceil(2.4 x 12) = ceil(28.799999999999997) = 29 steps (its train.py rule).
  std::ifstream in(std::string(dpk_test::data_dir()) + "/multi_system/reference.json");
  REQUIRE(in.good());
  REQUIRE(nlohmann::json::parse(in)["cases"]["stat"]["total_numb_batch"] == 12);
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::string const dir = fresh_dir("num_epoch");
  std::string const input = multi_system_input_file(dir, {2, 1, 1}, false);
  nlohmann::json j = nlohmann::json::parse(slurp(input));
  j["training"].erase("numb_steps");
  j["training"]["num_epoch"] = 2.4;
  spit(input, j.dump(1));
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.stop_at = 0;
  options.log = nullptr;
  dpk::Trainer<double, Space> trainer(dpk::read_input(input), options, comm);
  CHECK(trainer.config().training.numb_steps == 29);
  std::filesystem::remove_all(dir);
}

TEST_CASE("trainer: a checkpoint of the frame-count convention restarts only when probabilities agree") {
  // tests/data/legacy_v1/model.ckpt-2: written by dpk before the change (sampler state version 1,
  // systems drawn by frame count 10/17, 5/17, 2/17) with batch_size "auto".
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator comm;
  std::string const ckpt = std::string(dpk_test::data_dir()) + "/legacy_v1/model.ckpt-2";
  REQUIRE(dpk::DataSampler::version_of_state(dpk::read_model_file(ckpt).sampler_states.at(0)) == 1);
  std::string const dir = fresh_dir("legacy_restart");
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.restart = ckpt;
  options.log = nullptr;
  // batch_size "auto" now gives 5, 1, 1 batches: the run cannot continue as it would have.
  std::string message;
  try {
    dpk::Trainer<double, Space>(dpk::read_input(multi_system_input_file(dir, "auto", true)), options, comm).run();
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(contains(message, ckpt));
  CHECK(contains(message, "frame counts"));
  CHECK(contains(message, "--init-model"));
  // batch_size 1: batches = frames, the same probabilities: it restarts, continues the checkpoint's
  // walk of all frames as one pool, and writes state version 3 naming that walk.
  std::ostringstream log;
  options.log = &log;
  REQUIRE(options.frame_walk == dpk::FrameWalk::sets);  // the default, which the checkpoint predates
  auto const summary =
      dpk::Trainer<double, Space>(dpk::read_input(multi_system_input_file(dir, 1, true)), options, comm).run();
  INFO(log.str());
  CHECK(contains(log.str(), "the checkpoint walks the training frames by frames; the restart continues its walk"));
  CHECK(summary.first_step == 2);
  CHECK(summary.last_step == 4);
  auto const after = dpk::read_model_file(dpk::resolve_checkpoint(dir + "/model.ckpt"));
  CHECK(after.step == 4);
  CHECK(dpk::DataSampler::version_of_state(after.sampler_states.at(0)) == 3);
  CHECK(after.sampler_states.at(0).rfind("dpk::DataSampler 3 frames\n", 0) == 0);
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- reliability (issues 5 and 18)
// Resident memory does not grow while training (step 100 vs step 1000 of a tiny model with
// validation, lcurve lines and checkpoints on the way); lcurve.out repair on restart, atomic
// writes, coincident atoms. The process-level tests (kills, write faults, MPI faults, odd data)
// are tests/reliability/*.py; the type_map-mismatch error of `dpk-train test` is a ctest in
// tests/CMakeLists.txt (dpk_train_cli_test_type_map_mismatch). In this file rather than one of
// their own so that the trainer's templates are compiled once for all of its tests (each
// trainer test program cost 70-145 s of compiler time per toolchain in CI).
#include <dpk/train.hpp>

#include <map>
#include <ostream>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DPK_TEST_ADDRESS_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(DPK_TEST_ADDRESS_SANITIZER)
/// Under AddressSanitizer (the `debug` preset) freed blocks wait in a quarantine of up to 256 MB
/// before reuse, which the resident-memory test below would read as growth (17 kB per step of
/// its tiny model): in this program freed memory is reused at once. Leaks are still reported.
extern "C" char const* __asan_default_options() { return "quarantine_size_mb=0"; }
#endif

namespace {

/// Resident set size of this process in kB (VmRSS of /proc/self/status), -1 when unavailable.
long resident_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

/// A stream buffer that reads the trainer's log line by line and records the resident memory
/// when a progress line "dpk-train: step N/..." arrives (the trainer prints it after step N).
class ResidentMemoryAtSteps : public std::streambuf {
 public:
  std::map<long, long> kb_at_step;  ///< step -> VmRSS (kB)
  std::string log;                  ///< everything the trainer wrote

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    char const ch = traits_type::to_char_type(c);
    log.push_back(ch);
    if (ch == '\n') {
      line_done();
      line_.clear();
    } else {
      line_.push_back(ch);
    }
    return c;
  }

 private:
  void line_done() {
    std::string const prefix = "dpk-train: step ";
    if (line_.rfind(prefix, 0) != 0) return;
    long const step = std::stol(line_.substr(prefix.size()));
    kb_at_step[step] = resident_kb();
  }
  std::string line_;
};

/// A tiny se_e2_a model (rcut 4, sel [16, 32], nets [4, 8] and [8, 8]): ~1 ms per step.
dpk::InputConfig reliability_input(long numb_steps) {
  dpk::InputConfig c = dpk_test::tiny_input("tiny (reliability, test_train.cpp)", numb_steps);
  c.descriptor.sel = {16, 32};
  c.descriptor.rcut = 4.0;
  c.descriptor.axis_neuron = 4;
  c.learning_rate.decay_steps = 100;
  c.training.disp_freq = 50;
  c.training.save_freq = 250;
  return c;
}

}  // namespace

TEST_CASE("trainer: resident memory does not grow between step 100 and step 1000") {
  using Space = dpk::DefaultExecutionSpace;
  REQUIRE(resident_kb() > 0);
  std::string const dir = fresh_dir("rss");
  ResidentMemoryAtSteps spy;
  std::ostream log(&spy);
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.log = &log;
  dpk::Communicator comm;
  dpk::InputConfig input = reliability_input(1000);
  input.training.validation_data.emplace();
  input.training.validation_data->batch_size = dpk::BatchSize{false, 1, {}};
  input.training.validation_data->numb_btch = 2;
  dpk::TrainingSummary summary;
  {
    dpk::Trainer<double, Space> trainer(input, {water_frames(0, 16)}, {water_frames(16, 4)}, options, comm);
    summary = trainer.run();
  }
  std::filesystem::remove_all(dir);
  REQUIRE(summary.last_step == 1000);
  REQUIRE(spy.kb_at_step.count(100) == 1);
  REQUIRE(spy.kb_at_step.count(1000) == 1);
  long const at_100 = spy.kb_at_step[100], at_1000 = spy.kb_at_step[1000];
  std::ostringstream trace;
  for (auto const& [step, kb] : spy.kb_at_step) trace << " " << step << ":" << kb;
  MESSAGE("VmRSS (kB) at steps:", trace.str(), "; training took ", summary.train_seconds, " s");
  CHECK(at_1000 - at_100 < 4 * 1024);  // < 4 MB
}

TEST_CASE("lcurve.out on restart: lines after the checkpoint step and a partial last line are dropped") {
  std::string const path = temp_path("lcurve");
  {
    std::ofstream out(path, std::ios::binary);
    out << "#  step  rmse_trn\n      0  1.0e+00\n      1  9.0e-01\n# a comment\n      2  8.0e-01\n"
           "      3  7.0e-01\n      4  6.";
  }
  CHECK(dpk::truncate_learning_curve(path, 2) == 2);  // step 3 and the partial step 4
  CHECK(slurp(path) == "#  step  rmse_trn\n      0  1.0e+00\n      1  9.0e-01\n# a comment\n      2  8.0e-01\n");
  CHECK(dpk::truncate_learning_curve(path, 2) == 0);  // nothing more to drop: file untouched
  CHECK(dpk::truncate_learning_curve(path + ".missing", 2) == 0);
  CHECK(!std::filesystem::exists(dpk::atomic_temporary_name(path)));
  std::filesystem::remove(path);
}

TEST_CASE("atomic write: a failure names the file and the reason and leaves the old content") {
  std::string const dir = temp_path("atomic");
  std::filesystem::create_directories(dir);
  std::string const path = dir + "/file.txt";
  dpk::write_file_atomically(path, "old\n", "test file");
  CHECK(slurp(path) == "old\n");
  // The target is a folder: the rename fails (EISDIR); the temporary file is removed.
  std::filesystem::create_directories(dir + "/folder");
  std::string message = error_of([&] { dpk::write_file_atomically(dir + "/folder", "new\n", "test file"); });
  CHECK(contains(message,
                 "test file '" + dir + "/folder': cannot rename the temporary file into place (Is a directory)"));
  CHECK(contains(message, "was removed"));
  CHECK(!std::filesystem::exists(dpk::atomic_temporary_name(dir + "/folder")));
  // The parent is a regular file: the temporary file cannot be created (ENOTDIR).
  message = error_of([&] { dpk::write_file_atomically(path + "/x", "new\n", "test file"); });
  CHECK(contains(message, "test file '" + path + "/x': cannot create the temporary file (Not a directory)"));
  CHECK(slurp(path) == "old\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("coincident atoms: an error naming the frame and the atoms, not NaN") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::InputConfig const input = reliability_input(1);
  dpk::EnergyModel<double, Space> model(input.descriptor, input.fitting, 2);
  dpk::System s = water_frames(0, 2);
  for (int d = 0; d < 3; ++d) s.coord[std::size_t(s.natoms + 7) * 3 + d] = s.coord[std::size_t(s.natoms + 3) * 3 + d];
  dpk::DataSampler sampler(std::vector<dpk::System>{s}, dpk::BatchSize{false, 2, {}}, 0,
                           {dpk::SamplingMode::sequential, {}});
  dpk::Frames<double, dpk::memory_space_t<Space>> frames;
  dpk::Labels<double, dpk::memory_space_t<Space>> labels;
  dpk::upload(sampler.batch(0, 0, 2), frames, labels);
  bool thrown = false;
  try {
    model.prepare(Space(), frames);
  } catch (dpk::CoincidentAtomsError const& e) {
    thrown = true;
    CHECK(e.frame == 1);
    CHECK(std::min(e.atom_i, e.atom_j) == 3);
    CHECK(std::max(e.atom_i, e.atom_j) == 7);
    CHECK(e.distance == 0.0);
    CHECK(std::string(e.what()) == "frame 1 of the batch: atoms 3 and 7 are 0 A apart (closer than 1e-06 A): "
                                   "coincident atoms make the descriptor (1/r) infinite; remove or fix the frame");
  }
  CHECK(thrown);
}

// ---------------------------------------------------------------- the trainer's timing file
#include <cstdint>

// Kokkos deep copies in one training step of the timing-file test (update with the batch
// upload, lcurve line with validation, checkpoint): measured 20 with Kokkos 3.4 and 4.6, 1 and 2
// threads; 15 since the embedding-row boundaries are gathered on the device (one copy instead of
// one per net plus one); 14 since the fitting rows are sorted by centre type on the device (one copy
// of ntypes + 4 integers instead of the types down and the rows up); 12 since the frame virials
// are reduced on the device and the fitting seed of ones is filled only when it grows. What is
// left and why: docs/architecture.md ("Host round trips of a training step").
#define DPK_TEST_MAX_DEEP_COPIES_PER_STEP 12

namespace {

dpk::InputConfig timing_input() {
  dpk::InputConfig c = dpk_test::tiny_input("small (timing file, test_train.cpp)", 5);
  c.descriptor.type_one_side = false;
  c.training.disp_freq = 5;
  c.training.save_freq = 100;
  return c;
}


/// Every deep copy of the run as "destination <- source (space to space)", in order: the
/// trainer's clock chains to this callback, so a count over the bound names its copies.
std::vector<std::string> g_copy_labels;
void record_deep_copy(Kokkos_Profiling_SpaceHandle dst_space, char const* dst_name, void const*,
                      Kokkos_Profiling_SpaceHandle src_space, char const* src_name, void const*, std::uint64_t bytes) {
  g_copy_labels.push_back(std::string(dst_name) + " <- " + src_name + " (" + src_space.name + " to " + dst_space.name +
                          ", " + std::to_string(bytes) + " B)");
}

}  // namespace

TEST_CASE("trainer --timing-file: one line per step, update/display/save seconds, stage regions, deep copies") {
  using Space = dpk::DefaultExecutionSpace;
  std::string const dir = fresh_dir("timing_file");
  dpk::Communicator comm;
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.data_stat_nbatch = 1;
  options.log = nullptr;
  options.timing_file = dir + "/timing.txt";
  options.stop_at = 4;
  dpk::Trainer<double, Space> trainer(timing_input(), {water_frames(0, 3)}, {water_frames(3, 1)}, options, comm);
  g_copy_labels.clear();
  auto const previous = Kokkos::Tools::Experimental::get_callbacks().begin_deep_copy;
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(&record_deep_copy);
  trainer.run();
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(previous);
  std::string copies;
  for (auto const& label : g_copy_labels) copies += label + "\n";
  INFO("deep copies of the run (construction excluded):\n" << copies);
  std::ifstream in(options.timing_file);
  REQUIRE(in);
  std::string line;
  std::getline(in, line);
  CHECK(line ==
        "# step update_s display_s save_s sample_s neighbors_s environment_s batch_setup_s kept_setup_s forward_s "
        "forces_s loss_s "
        "backward_s allreduce_s optimizer_s deep_copies");
  std::vector<long> steps;
  int kept_steps = 0;
  while (std::getline(in, line)) {
    INFO(line);
    std::istringstream fields(line);
    long step = 0, deep_copies = -1;
    double update = -1, display = -1, save = -1;
    fields >> step >> update >> display >> save;
    std::vector<double> region(11, -1.0);
    for (double& r : region) fields >> r;
    fields >> deep_copies;
    REQUIRE(fields);
    std::string rest;
    CHECK(!(fields >> rest));  // nothing after the deep copies
    CHECK(update > 0);
    CHECK(display >= 0);
    CHECK(save >= 0);
    if (step == 4) CHECK(save > 0);  // the final checkpoint is written after step 4
    // The stages lie inside the update, one after the other: each took time, and together they
    // take no more than the update (two clocks: 1e-4 s of slack). No lower bound on their sum:
    // a thread preempted between two stages (ctest -j, a busy node) leaves a gap of any length.
    double sum = 0;
    for (double r : region) sum += r;
    for (int k : {0, 5, 6, 7, 8, 10}) CHECK(region[std::size_t(k)] > 0);  // allreduce: 1 rank, may be ~0
    CHECK(region[9] >= 0);
    // A frame met before reuses its kept setup (kept_setup), others build it (neighbours,
    // environment, row layout): one or the other.
    bool const kept = region[4] > 0;
    for (int k : {1, 2, 3}) CHECK((region[std::size_t(k)] > 0) == !kept);
    if (kept) ++kept_steps;
    CHECK(sum <= update + 1e-4);
    // Host <-> device copies of a whole step (update, lcurve line, checkpoint), counted by Kokkos
    // Tools: MESSAGE shows the count; the bound holds it where it is (issue 15 asks to shrink it).
    MESSAGE("step " << step << ": " << deep_copies << " deep copies");
    CHECK(deep_copies >= 1);
    CHECK(deep_copies <= DPK_TEST_MAX_DEEP_COPIES_PER_STEP);
    steps.push_back(step);
  }
  CHECK(steps == std::vector<long>{1, 2, 3, 4});
  // Four one-frame steps drawn from three frames: at least one frame came again.
  CHECK(kept_steps >= 1);
  std::filesystem::remove_all(dir);
}
