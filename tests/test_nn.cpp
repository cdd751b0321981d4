// Dense layers and network families: forward values against a plain C++ oracle written here,
// the tangent + combined reverse pass against central finite differences, and the chunked
// host path of the block passes against the per-net passes. The kernel cases run on every
// execution space of the build (execution_spaces.hpp).
#include <doctest/doctest.h>

#include "execution_spaces.hpp"

#include <dpk/core/activation.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/model/parameters.hpp>
#include <dpk/nn/network.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

// A family stays copyable, as before for_each_chunk kept home ranges (a model or potential that
// holds one by value can be copied): a copy makes that scratch afresh.
static_assert(std::is_copy_constructible_v<dpk::nn::NetworkFamily<double, Kokkos::DefaultHostExecutionSpace>> &&
              std::is_copy_assignable_v<dpk::nn::NetworkFamily<double, Kokkos::DefaultHostExecutionSpace>>);

namespace {

// Plain-loop oracle of one net (SPEC.md sections 4-5), on the host in double.
std::vector<double> oracle_forward(std::vector<dpk::nn::LayerShape> const& shapes,
                                   std::vector<dpk::nn::LayerOffsets> const& off, std::vector<double> const& p,
                                   std::vector<double> x, int rows) {
  for (auto const& s : shapes) {
    std::vector<double> y(std::size_t(rows) * s.n_out);
    std::size_t const l = &s - shapes.data();
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < s.n_out; ++c) {
        double z = p[off[l].b + c];
        for (int k = 0; k < s.n_in; ++k) z += x[r * s.n_in + k] * p[off[l].w + k * s.n_out + c];
        if (!s.tanh) {
          y[r * s.n_out + c] = z;
          continue;
        }
        double h = std::tanh(z);
        if (s.timestep) h *= p[off[l].idt + c];
        if (s.n_out == s.n_in) h += x[r * s.n_in + c];
        else if (s.n_out == 2 * s.n_in) h += x[r * s.n_in + (c % s.n_in)];
        y[r * s.n_out + c] = h;
      }
    x = y;
  }
  return x;
}

template <class Scalar, class Mem>
dpk::View1<Scalar, Mem> to_device(std::vector<double> const& v, char const* label) {
  dpk::View1<Scalar, Mem> d(std::string(label), v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t k = 0; k < v.size(); ++k) h(k) = Scalar(v[k]);
  Kokkos::deep_copy(d, h);
  return d;
}

template <class Scalar, class Mem>
std::vector<double> to_host(dpk::MatrixView<Scalar, Mem> m) {
  dpk::View2<Scalar, Mem> copy("copy", m.extent(0), m.extent(1));
  Kokkos::deep_copy(copy, m);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), copy);
  return std::vector<double>(h.data(), h.data() + h.size());
}

struct TestNet {
  dpk::ParameterLayout layout;
  std::vector<double> params;
  TestNet(bool type_one_side, bool resnet_dt, std::vector<int> const& neuron = {2, 4, 4})
      : layout(make_descriptor(type_one_side, resnet_dt, neuron), make_fitting(resnet_dt), 2) {
    params = dpk::initial_parameters(layout, 7);
    // idt ~ N(0.1, 0.001) would hide errors in the timestep path: make it O(1).
    for (auto const& t : layout.tensors)
      if (t.name.find("idt") != std::string::npos)
        for (std::size_t k = 0; k < t.size(); ++k) params[t.offset + k] = 0.5 + 0.1 * double(k);
  }
  static dpk::DescriptorConfig make_descriptor(bool tos, bool resnet_dt, std::vector<int> const& neuron) {
    dpk::DescriptorConfig d;
    d.sel = {3, 4};
    d.neuron = neuron;  // default: 1->2 concat, 2->4 concat, 4->4 identity
    d.axis_neuron = 2;
    d.type_one_side = tos;
    d.resnet_dt = resnet_dt;
    return d;
  }
  static dpk::FittingConfig make_fitting(bool resnet_dt) {
    dpk::FittingConfig f;
    f.neuron = {5, 5, 5};
    f.resnet_dt = resnet_dt;
    return f;
  }
};

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("network forward equals the plain-loop oracle", Case, network_forward) {
  using Space = typename Case::execution_space;
  using Mem = typename Case::memory_space;
  using Scalar = typename Case::scalar;
  for (bool resnet_dt : {false, true}) {
    TestNet net(true, resnet_dt);
    int const rows = 9;
    for (int family = 0; family < 2; ++family) {
      auto const& shapes = family == 0 ? net.layout.embedding_shapes : net.layout.fitting_shapes;
      auto const& offsets = family == 0 ? net.layout.embedding_offsets : net.layout.fitting_offsets;
      dpk::nn::NetworkFamily<Scalar, Space> f(shapes, offsets, "dpk::test::net");
      f.reserve(rows, false);
      int const n_in = shapes.front().n_in;
      std::vector<double> x(std::size_t(rows) * n_in);
      for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.7 * k + 0.2);
      auto xd = to_device<Scalar, Mem>(x, "x");
      auto pd = to_device<Scalar, Mem>(net.params, "p");
      f.forward(Space(), pd.data(), 1, dpk::MatrixView<Scalar, Mem>(xd.data(), rows, n_in), 0, rows);
      auto got = to_host<Scalar>(f.output(0, rows));
      auto want = oracle_forward(shapes, offsets[1], net.params, x, rows);
      REQUIRE(got.size() == want.size());
      double const tol = sizeof(Scalar) == 8 ? 1e-12 : 1e-5;
      for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == doctest::Approx(want[k]).epsilon(tol));
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(network_forward, dpk_test::SpacesAndScalars);

// F(theta, x, x') = sum c . out(x) + sum d . out'(x; x'), with out' the directional derivative
// along x'. The reverse pass with seeds (c, d) must give dF/dtheta, dF/dx and dF/dx'.
TEST_CASE_TEMPLATE_DEFINE("network tangent and reverse pass equal finite differences", Space, network_tangent_reverse) {
  using Mem = dpk::memory_space_t<Space>;
  using Scalar = double;
  for (bool resnet_dt : {false, true}) {
    for (int family = 0; family < 2; ++family) {
      TestNet net(true, resnet_dt);
      auto const& shapes = family == 0 ? net.layout.embedding_shapes : net.layout.fitting_shapes;
      auto const& offsets = family == 0 ? net.layout.embedding_offsets : net.layout.fitting_offsets;
      int const rows = 6, n_in = shapes.front().n_in, n_out = shapes.back().n_out;
      std::vector<double> x(rows * n_in), xt(rows * n_in), c(rows * n_out), d(rows * n_out);
      for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.9 * k + 0.1), xt[k] = std::cos(1.3 * k);
      for (std::size_t k = 0; k < c.size(); ++k) c[k] = 0.3 + std::sin(2.1 * k), d[k] = std::cos(0.4 * k) - 0.2;
      dpk::nn::NetworkFamily<Scalar, Space> f(shapes, offsets, "dpk::test::net");
      f.reserve(rows, true);
      auto objective = [&](std::vector<double> const& p, std::vector<double> const& xv, std::vector<double> const& xtv) {
        auto pd = to_device<Scalar, Mem>(p, "p");
        auto xd = to_device<Scalar, Mem>(xv, "x");
        auto xtd = to_device<Scalar, Mem>(xtv, "xt");
        f.forward(Space(), pd.data(), 0, dpk::MatrixView<Scalar, Mem>(xd.data(), rows, n_in), 0, rows);
        f.tangent(Space(), pd.data(), 0, dpk::MatrixView<Scalar, Mem>(xtd.data(), rows, n_in), 0, rows);
        auto out = to_host<Scalar>(f.output(0, rows));
        auto outt = to_host<Scalar>(f.output_tangent(0, rows));
        double sum = 0;
        for (std::size_t k = 0; k < out.size(); ++k) sum += c[k] * out[k] + d[k] * outt[k];
        return sum;
      };
      objective(net.params, x, xt);
      auto pd = to_device<Scalar, Mem>(net.params, "p");
      auto xd = to_device<Scalar, Mem>(x, "x");
      auto xtd = to_device<Scalar, Mem>(xt, "xt");
      auto cd = to_device<Scalar, Mem>(c, "c");
      auto dd = to_device<Scalar, Mem>(d, "d");
      dpk::View1<Scalar, Mem> grad("grad", net.params.size()), gx("gx", x.size()), gxt("gxt", x.size());
      f.forward(Space(), pd.data(), 0, dpk::MatrixView<Scalar, Mem>(xd.data(), rows, n_in), 0, rows);
      f.tangent(Space(), pd.data(), 0, dpk::MatrixView<Scalar, Mem>(xtd.data(), rows, n_in), 0, rows);
      using M = dpk::MatrixView<Scalar, Mem>;
      // dF/dx' comes from the first-order backward pass seeded with d; reverse() reuses it.
      f.backward_input(Space(), pd.data(), 0, 0, rows, M(dd.data(), rows, n_out), M(gxt.data(), rows, n_in));
      f.reverse(Space(), pd.data(), grad.data(), 0, M(xd.data(), rows, n_in), M(xtd.data(), rows, n_in), 0, rows,
                M(cd.data(), rows, n_out), M(dd.data(), rows, n_out), M(gx.data(), rows, n_in));
      auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
      auto hgx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gx);
      auto hgxt = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gxt);
      double const h = 1e-6;
      int checked = 0;
      for (auto const& off : offsets[0]) {
        for (std::size_t base : {off.w, off.b, off.idt}) {
          if (base == dpk::nn::LayerOffsets::npos) continue;
          for (std::size_t k = base; k < base + 2; ++k) {
            auto pp = net.params, pm = net.params;
            pp[k] += h;
            pm[k] -= h;
            double const fd = (objective(pp, x, xt) - objective(pm, x, xt)) / (2 * h);
            CHECK(hg(k) == doctest::Approx(fd).epsilon(1e-6));
            ++checked;
          }
        }
      }
      CHECK(checked >= 6);
      for (std::size_t k = 0; k < x.size(); k += 3) {
        auto xp = x, xm = x, tp = xt, tm = xt;
        xp[k] += h;
        xm[k] -= h;
        tp[k] += h;
        tm[k] -= h;
        CHECK(hgx(k) == doctest::Approx((objective(net.params, xp, xt) - objective(net.params, xm, xt)) / (2 * h)).epsilon(1e-6));
        CHECK(hgxt(k) == doctest::Approx((objective(net.params, x, tp) - objective(net.params, x, tm)) / (2 * h)).epsilon(1e-6));
      }
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(network_tangent_reverse, dpk_test::ExecutionSpaces);

// The chunked host path of the *_blocks passes (each thread's rows in chunks through all
// layers, per-thread gradient sums) against the per-net passes checked above, for chunk sizes
// that split blocks unevenly, with tangents through the layers and with unit input tangents
// (made by the forward pass, scaled afterwards); the chunked gradient must also repeat bit for bit.
TEST_CASE_TEMPLATE_DEFINE("network block passes in row chunks equal the per-net passes", Space, network_blocks) {
  using Mem = dpk::memory_space_t<Space>;
  using Scalar = double;
  using M = dpk::MatrixView<Scalar, Mem>;
  // Wide: a 72 x 72 layer, so that a weight tensor spans several of the runs in which the
  // later blocks' gradients are added (NetworkFamily::slab_run_length, 4096 elements).
  for (int variant = 0; variant < 3; ++variant) {
    bool const resnet_dt = variant > 0, wide = variant == 2;
    TestNet net(false, resnet_dt, wide ? std::vector<int>{2, 4, 72, 72} : std::vector<int>{2, 4, 4});  // four nets
    auto const& shapes = net.layout.embedding_shapes;
    auto const& offsets = net.layout.embedding_offsets;
    int const n_in = shapes.front().n_in, n_out = shapes.back().n_out;
    // Blocks out of net order, with a gap of unused rows, net 2 not evaluated, nets 1 and 3 in
    // two blocks each (as the parts of a net that the chunked passes hand out to threads), net
    // 3's first block empty (the chunked reverse pass sums a net's first non-empty block into
    // the gradient itself, the others through slabs).
    std::vector<dpk::nn::RowBlock> const blocks = {{1, 0, 12}, {0, 23, 40}, {3, 45, 45}, {3, 45, 61},
                                                   {1, 12, 23}, {3, 61, 83}};
    int const rows = 83;
    std::vector<double> x(rows * n_in), xt(rows * n_in), c(rows * n_out), d(rows * n_out);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.9 * k + 0.1), xt[k] = std::cos(1.3 * k);
    for (std::size_t k = 0; k < c.size(); ++k) c[k] = 0.3 + std::sin(2.1 * k), d[k] = std::cos(0.4 * k) - 0.2;
    auto pd = to_device<Scalar, Mem>(net.params, "p");
    auto xd = to_device<Scalar, Mem>(x, "x"), xtd = to_device<Scalar, Mem>(xt, "xt");
    auto cd = to_device<Scalar, Mem>(c, "c"), dd = to_device<Scalar, Mem>(d, "d");
    struct Result {
      std::vector<double> out, outt, gxt, gx, grad;
    };
    auto run = [&](int chunk_rows, bool accumulate, bool unit) {
      dpk::nn::NetworkFamily<Scalar, Space> f(shapes, offsets, "dpk::test::net");
      f.set_host_chunk_rows(chunk_rows);
      f.set_unit_input_tangents(unit);
      f.reserve(rows, true);
      std::vector<double> start(net.params.size());
      for (std::size_t k = 0; k < start.size(); ++k) start[k] = 0.01 * double(k % 17) - 0.05;  // stale values
      auto grad = to_device<Scalar, Mem>(start, "grad");
      dpk::View1<Scalar, Mem> gx("gx", x.size()), gxt("gxt", x.size());
      f.forward_blocks(Space(), pd.data(), blocks, M(xd.data(), rows, n_in), {}, true);
      // Unit tangents only where the passes run in chunks on the host (the nets have one input).
      CHECK(f.unit_tangents() == (unit && f.host_chunks()));
      f.tangent_blocks(Space(), pd.data(), blocks, M(xtd.data(), rows, n_in));
      f.backward_input_blocks(Space(), pd.data(), blocks, M(dd.data(), rows, n_out), M(gxt.data(), rows, n_in));
      f.reverse_blocks(Space(), pd.data(), grad.data(), blocks, M(xd.data(), rows, n_in), M(xtd.data(), rows, n_in),
                       M(cd.data(), rows, n_out), M(dd.data(), rows, n_out), M(gx.data(), rows, n_in), accumulate);
      Result r;
      for (auto const& b : blocks) {
        auto o = to_host<Scalar>(f.output(b.begin, b.end)), ot = to_host<Scalar>(f.output_tangent(b.begin, b.end));
        r.out.insert(r.out.end(), o.begin(), o.end());
        r.outt.insert(r.outt.end(), ot.begin(), ot.end());
        auto gi = to_host<Scalar>(M(gx.data() + b.begin * n_in, b.end - b.begin, n_in));
        auto gti = to_host<Scalar>(M(gxt.data() + b.begin * n_in, b.end - b.begin, n_in));
        r.gx.insert(r.gx.end(), gi.begin(), gi.end());
        r.gxt.insert(r.gxt.end(), gti.begin(), gti.end());
      }
      auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
      r.grad.assign(hg.data(), hg.data() + hg.size());
      return r;
    };
    auto close = [](std::vector<double> const& a, std::vector<double> const& b) {
      REQUIRE(a.size() == b.size());
      double worst = 0;
      for (std::size_t k = 0; k < a.size(); ++k)
        worst = std::max(worst, std::abs(a[k] - b[k]) / std::max(1.0, std::abs(b[k])));
      return worst;
    };
    for (bool accumulate : {false, true}) {
      Result const want = run(0, accumulate, false);
      // Net 2 has no block: its gradient keeps its stale values on every path.
      for (auto const& l : offsets[2]) CHECK(want.grad[l.w] == doctest::Approx(0.01 * double(l.w % 17) - 0.05));
      for (bool unit : {false, true})
        for (int chunk : {1, 7, 1000}) {
          CAPTURE(resnet_dt);
          CAPTURE(wide);
          CAPTURE(accumulate);
          CAPTURE(unit);
          CAPTURE(chunk);
          Result const got = run(chunk, accumulate, unit);
          CHECK(close(got.out, want.out) < 1e-14);
          CHECK(close(got.outt, want.outt) < 1e-14);
          CHECK(close(got.gxt, want.gxt) < 1e-14);
          CHECK(close(got.gx, want.gx) < 1e-14);
          CHECK(close(got.grad, want.grad) < 1e-13);
          Result const again = run(chunk, accumulate, unit);
          CHECK(again.grad == got.grad);
          CHECK(again.gxt == got.gxt);
        }
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(network_blocks, dpk_test::ExecutionSpaces);

// The fitting nets' input D = T^T T< has a symmetric M2 x M2 head; with set_symmetric_input_head
// the chunked host path runs the first layer's products on its distinct entries with folded
// weights. Against central finite differences of the per-net passes (full products): the
// gradient of every first-layer weight, head rows (a, b) and (b, a) apart, and the input
// cotangents along symmetric changes of D (both (a, b) and (b, a) moved: the head's cotangent
// sits at (a, b) only, 0 at (b, a)); against the same chunked passes without the head to
// rounding; repeated bit for bit. Several blocks per net (the gradient slabs), uneven chunks.
TEST_CASE_TEMPLATE_DEFINE("network block passes with a symmetric input head equal finite differences", Space,
                          network_symmetric_head) {
  using Mem = dpk::memory_space_t<Space>;
  using Scalar = double;
  using M = dpk::MatrixView<Scalar, Mem>;
  dpk::DescriptorConfig descriptor;
  descriptor.sel = {3, 4};
  descriptor.neuron = {2, 4, 5};  // M1 = 5
  descriptor.axis_neuron = 3;     // M2 = 3: D has 15 columns, a 3 x 3 head of 6 distinct entries
  dpk::FittingConfig fitting;
  fitting.neuron = {6, 6};
  fitting.resnet_dt = true;
  dpk::ParameterLayout const layout(descriptor, fitting, 2);
  auto const& shapes = layout.fitting_shapes;
  auto const& offsets = layout.fitting_offsets;
  int const m1 = 5, m2 = 3, n_in = m1 * m2, rows = 30;
  REQUIRE(shapes.front().n_in == n_in);
  std::vector<double> params = dpk::initial_parameters(layout, 11);
  // Each row's D = T^T T< and D' = T'^T T< + T^T T'< from its own T, T' (4 x M1), as the descriptor makes them.
  std::vector<double> x(rows * n_in), xt(rows * n_in), c(rows), d(rows);
  for (int r = 0; r < rows; ++r) {
    double t[4][5], tt[4][5];
    for (int k = 0; k < 4; ++k)
      for (int m = 0; m < m1; ++m) t[k][m] = std::sin(0.7 * r + 1.1 * k + 0.3 * m), tt[k][m] = std::cos(0.5 * r - 0.9 * k + 0.4 * m);
    for (int m = 0; m < m1; ++m)
      for (int n = 0; n < m2; ++n) {
        double v = 0, vt = 0;
        for (int k = 0; k < 4; ++k) v += t[k][m] * t[k][n], vt += tt[k][m] * t[k][n] + t[k][m] * tt[k][n];
        x[r * n_in + m * m2 + n] = v;
        xt[r * n_in + m * m2 + n] = vt;
      }
    c[r] = 0.3 + std::sin(2.1 * r);
    d[r] = std::cos(0.4 * r) - 0.2;
  }
  // Net 0 in two blocks (the second sums through a slab), net 1 in one.
  std::vector<dpk::nn::RowBlock> const blocks = {{0, 0, 12}, {1, 12, 21}, {0, 21, 30}};
  auto pd = to_device<Scalar, Mem>(params, "p");
  auto cd = to_device<Scalar, Mem>(c, "c"), dd = to_device<Scalar, Mem>(d, "d");
  struct Result {
    std::vector<double> out, outt, gx, gxt, grad;
    bool head = false;
  };
  auto run = [&](int head, int chunk) {
    dpk::nn::NetworkFamily<Scalar, Space> f(shapes, offsets, "dpk::test::fitting");
    f.set_transposed_weights(false);
    f.set_host_chunk_rows(chunk);
    f.set_symmetric_input_head(head);
    f.reserve(rows, true);
    auto xd = to_device<Scalar, Mem>(x, "x"), xtd = to_device<Scalar, Mem>(xt, "xt");
    auto grad = to_device<Scalar, Mem>(std::vector<double>(params.size(), 0.25), "grad");
    dpk::View1<Scalar, Mem> gx("gx", x.size()), gxt("gxt", x.size());
    f.forward_blocks(Space(), pd.data(), blocks, M(xd.data(), rows, n_in));
    f.tangent_blocks(Space(), pd.data(), blocks, M(xtd.data(), rows, n_in));
    f.backward_input_blocks(Space(), pd.data(), blocks, M(dd.data(), rows, 1), M(gxt.data(), rows, n_in));
    f.reverse_blocks(Space(), pd.data(), grad.data(), blocks, M(xd.data(), rows, n_in), M(xtd.data(), rows, n_in),
                     M(cd.data(), rows, 1), M(dd.data(), rows, 1), M(gx.data(), rows, n_in), false);
    Result r;
    r.head = head > 0 && f.host_chunks();
    r.out = to_host<Scalar>(f.output(0, rows));
    r.outt = to_host<Scalar>(f.output_tangent(0, rows));
    r.gx = to_host<Scalar>(M(gx.data(), rows, n_in));
    r.gxt = to_host<Scalar>(M(gxt.data(), rows, n_in));
    auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
    r.grad.assign(hg.data(), hg.data() + hg.size());
    return r;
  };
  // The objective sum_r c_r out_r + d_r out'_r through the per-net passes (full products).
  dpk::nn::NetworkFamily<Scalar, Space> plain(shapes, offsets, "dpk::test::fitting_plain");
  plain.reserve(rows, true);
  auto objective = [&](std::vector<double> const& p, std::vector<double> const& xv, std::vector<double> const& xtv) {
    auto pv = to_device<Scalar, Mem>(p, "p");
    auto xv_d = to_device<Scalar, Mem>(xv, "x"), xtv_d = to_device<Scalar, Mem>(xtv, "xt");
    double sum = 0;
    for (auto const& b : blocks) {
      int const n = b.end - b.begin;
      plain.forward(Space(), pv.data(), b.net, M(xv_d.data() + b.begin * n_in, n, n_in), b.begin, b.end);
      plain.tangent(Space(), pv.data(), b.net, M(xtv_d.data() + b.begin * n_in, n, n_in), b.begin, b.end);
      auto out = to_host<Scalar>(plain.output(b.begin, b.end)), outt = to_host<Scalar>(plain.output_tangent(b.begin, b.end));
      for (int k = 0; k < n; ++k) sum += c[b.begin + k] * out[k] + d[b.begin + k] * outt[k];
    }
    return sum;
  };
  auto worst = [](std::vector<double> const& a, std::vector<double> const& b) {
    REQUIRE(a.size() == b.size());
    double w = 0;
    for (std::size_t k = 0; k < a.size(); ++k) w = std::max(w, std::abs(a[k] - b[k]) / std::max(1.0, std::abs(b[k])));
    return w;
  };
  // The cotangent along a symmetric change of D: (a, b) and (b, a) together.
  auto symmetric_sum = [&](std::vector<double> const& g, int r, int a, int b) {
    double v = g[r * n_in + a * m2 + b];
    if (a != b) v += g[r * n_in + b * m2 + a];
    return v;
  };
  double const h = 1e-6;
  for (int chunk : {7, 1000}) {
    CAPTURE(chunk);
    Result const full = run(0, chunk), got = run(m2, chunk);
    CHECK(got.head == dpk::host_schedule_v<Space>);  // the head runs on the chunked host path only
    CHECK(worst(got.out, full.out) < 1e-14);
    CHECK(worst(got.outt, full.outt) < 1e-14);
    CHECK(worst(got.grad, full.grad) < 1e-13);
    for (int r = 0; r < rows; ++r) {
      for (int k = m2 * m2; k < n_in; ++k) {  // the other columns: each on its own
        CHECK(got.gx[r * n_in + k] == doctest::Approx(full.gx[r * n_in + k]).epsilon(1e-13));
        CHECK(got.gxt[r * n_in + k] == doctest::Approx(full.gxt[r * n_in + k]).epsilon(1e-13));
      }
      for (int a = 0; a < m2; ++a)
        for (int b = a; b < m2; ++b) {
          CHECK(symmetric_sum(got.gx, r, a, b) == doctest::Approx(symmetric_sum(full.gx, r, a, b)).epsilon(1e-13));
          CHECK(symmetric_sum(got.gxt, r, a, b) == doctest::Approx(symmetric_sum(full.gxt, r, a, b)).epsilon(1e-13));
          if (got.head && a != b) {  // the mirror's share is at (a, b)
            CHECK(got.gx[r * n_in + b * m2 + a] == 0.0);
            CHECK(got.gxt[r * n_in + b * m2 + a] == 0.0);
          }
        }
    }
    Result const again = run(m2, chunk);
    CHECK(again.grad == got.grad);
    CHECK(again.gx == got.gx);
    if (chunk != 7) continue;
    // Finite differences: first-layer weights of both nets at head rows (a, b), (b, a), the
    // diagonal and the other rows, a few columns each; the biases.
    int checked = 0;
    for (int net : {0, 1}) {
      auto const& l0 = offsets[net][0];
      for (int row : {0 * m2 + 1, 1 * m2 + 0, 2 * m2 + 2, 1 * m2 + 2, 2 * m2 + 1, 10, 14})
        for (int col : {0, 5}) {
          std::size_t const k = l0.w + std::size_t(row) * shapes[0].n_out + col;
          auto pp = params, pm = params;
          pp[k] += h;
          pm[k] -= h;
          CAPTURE(net);
          CAPTURE(row);
          CHECK(got.grad[k] == doctest::Approx((objective(pp, x, xt) - objective(pm, x, xt)) / (2 * h)).epsilon(1e-6));
          ++checked;
        }
      std::size_t const kb = l0.b + 3;
      auto pp = params, pm = params;
      pp[kb] += h;
      pm[kb] -= h;
      CHECK(got.grad[kb] == doctest::Approx((objective(pp, x, xt) - objective(pm, x, xt)) / (2 * h)).epsilon(1e-6));
    }
    CHECK(checked == 28);
    // Input cotangents along symmetric changes of D (and of D' for the tangent seed's cotangent).
    for (int r : {0, 13, 29})
      for (std::pair<int, int> const& entry : {std::pair{0, 1}, std::pair{2, 2}, std::pair{1, 2}, std::pair{4, 0}}) {
        int const a = entry.first, b = entry.second;
        auto move = [&](std::vector<double> v, double by) {
          v[r * n_in + a * m2 + b] += by;
          if (a < m2 && a != b) v[r * n_in + b * m2 + a] += by;
          return v;
        };
        double const want = a < m2 ? symmetric_sum(got.gx, r, a, b) : got.gx[r * n_in + a * m2 + b];
        double const want_t = a < m2 ? symmetric_sum(got.gxt, r, a, b) : got.gxt[r * n_in + a * m2 + b];
        CAPTURE(r);
        CAPTURE(a);
        CAPTURE(b);
        CHECK(want == doctest::Approx((objective(params, move(x, h), xt) - objective(params, move(x, -h), xt)) / (2 * h))
                          .epsilon(1e-6));
        CHECK(want_t == doctest::Approx((objective(params, x, move(xt, h)) - objective(params, x, move(xt, -h))) / (2 * h))
                            .epsilon(1e-6));
      }
  }
}
TEST_CASE_TEMPLATE_APPLY(network_symmetric_head, dpk_test::ExecutionSpaces);

TEST_CASE_TEMPLATE_DEFINE("a reverse pass over no rows writes a zero gradient, or leaves it when accumulating", Space,
                          reverse_no_rows) {
  using Mem = dpk::memory_space_t<Space>;
  using Scalar = double;
  using M = dpk::MatrixView<Scalar, Mem>;
  TestNet net(true, true);
  auto const& shapes = net.layout.embedding_shapes;
  auto const& offsets = net.layout.embedding_offsets;
  dpk::nn::NetworkFamily<Scalar, Space> f(shapes, offsets, "dpk::test::net");
  f.reserve(4, true);
  auto pd = to_device<Scalar, Mem>(net.params, "p");
  // The same through reverse_blocks with net 1 named by an empty block, layer by layer and on
  // the chunked host path (where no chunk runs for it).
  dpk::nn::NetworkFamily<Scalar, Space> chunked(shapes, offsets, "dpk::test::net");
  chunked.set_host_chunk_rows(2);
  chunked.reserve(4, true);
  std::vector<dpk::nn::RowBlock> const empty = {{1, 3, 3}};
  for (int pass = 0; pass < 3; ++pass)
    for (bool accumulate : {false, true}) {
      CAPTURE(pass);
      CAPTURE(accumulate);
      auto grad = to_device<Scalar, Mem>(std::vector<double>(net.params.size(), 1.0), "grad");
      if (pass == 0)
        f.reverse(Space(), pd.data(), grad.data(), 1, M(), M(), 0, 0, M(), M(), M(), accumulate);
      else
        (pass == 1 ? f : chunked)
            .reverse_blocks(Space(), pd.data(), grad.data(), empty, M(), M(), M(), M(), M(), accumulate);
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), grad);
      for (std::size_t net_index : {0, 1})
        for (auto const& l : offsets[net_index]) {
          double const want = (net_index == 1 && !accumulate) ? 0.0 : 1.0;
          CHECK(h(l.w) == want);
          CHECK(h(l.b) == want);
          if (l.idt != dpk::nn::LayerOffsets::npos) CHECK(h(l.idt) == want);
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(reverse_no_rows, dpk_test::ExecutionSpaces);

TEST_CASE_TEMPLATE("activation tanh equals libm tanh, including signed zeros, infinities and NaN", Scalar, double,
                   float) {
  // Absolute error bound against std::tanh in double: a few ulp of 1 in each precision.
  double const tol = sizeof(Scalar) == 8 ? 1e-15 : 4e-7;
  double worst = 0;
  for (double x = -25; x <= 25; x += 1.0 / 4096) {
    Scalar const xs = static_cast<Scalar>(x);
    double const got = dpk::math::activation_tanh(xs);
    worst = std::max(worst, std::fabs(got - std::tanh(double(xs))));
  }
  CHECK(worst < tol);
  // Tiny arguments: relative accuracy (tanh x ~ x).
  for (Scalar x : {Scalar(1e-30), Scalar(-3e-20), Scalar(1e-8)})
    CHECK(dpk::math::activation_tanh(x) == doctest::Approx(x).epsilon(1e-6));
  Scalar const inf = std::numeric_limits<Scalar>::infinity();
  CHECK(dpk::math::activation_tanh(inf) == Scalar(1));
  CHECK(dpk::math::activation_tanh(-inf) == Scalar(-1));
  CHECK(dpk::math::activation_tanh(Scalar(1e30)) == Scalar(1));
  CHECK(dpk::math::activation_tanh(Scalar(-1e30)) == Scalar(-1));
  CHECK(std::isnan(dpk::math::activation_tanh(std::numeric_limits<Scalar>::quiet_NaN())));
  CHECK(!std::signbit(dpk::math::activation_tanh(Scalar(0))));
  CHECK(std::signbit(dpk::math::activation_tanh(Scalar(-0.0))));
}

namespace {
/// activation_tanh in a call of its own (not vectorised with its caller's loop).
template <class Scalar>
[[gnu::noinline]] Scalar scalar_tanh(Scalar x) {
  return dpk::math::activation_tanh(x);
}
}  // namespace

TEST_CASE_TEMPLATE("activation tanh in a vectorised loop (as the layers run it) has the bits of the scalar call", Scalar,
                   double, float) {
  // The layers apply tanh over whole chunks in one loop (math::tanh_host_span, 512-bit vectors
  // where GCC targets AVX-512); with AVX2 (no 64-bit arithmetic shifts or integer conversions) as
  // with AVX-512 the loop must give the scalar function's bits.
  using Int = std::conditional_t<sizeof(Scalar) == 8, std::int64_t, std::int32_t>;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> wide(-25, 25), narrow(-1e-3, 1e-3);
  std::vector<Scalar> x;
  for (int i = 0; i < 20000; ++i) x.push_back(Scalar(i % 2 ? wide(rng) : narrow(rng)));
  for (int i = 0; i < 5000; ++i) {  // any bit pattern: huge, tiny, subnormal, infinite, NaN
    Int const bits = Int(rng());
    Scalar v;
    std::memcpy(&v, &bits, sizeof v);
    x.push_back(v);
  }
  Scalar const inf = std::numeric_limits<Scalar>::infinity();
  for (Scalar v : {Scalar(0), Scalar(-0.0), inf, -inf, std::numeric_limits<Scalar>::quiet_NaN(), Scalar(20), Scalar(9),
                   std::numeric_limits<Scalar>::denorm_min()})
    x.push_back(v);
  std::vector<Scalar> h(x.size());
  Scalar const* const in = x.data();
  Scalar* const out = h.data();
  std::size_t const n = x.size();
  DPK_SIMD_LOOP
  for (std::size_t i = 0; i < n; ++i) out[i] = dpk::math::activation_tanh(in[i]);
  // tanh_host_span over the whole input and over spans of every length 0..40 from odd offsets
  // (vector remainders, unaligned starts), into a buffer filled with a marker that must stay
  // past each span's end.
  // The scalar call's bits (any NaN for a NaN).
  auto same_bits = [](Scalar want, Scalar got) {
    return std::memcmp(&want, &got, sizeof want) == 0 || (std::isnan(want) && std::isnan(got));
  };
  std::vector<Scalar> span(n);
  dpk::math::tanh_host_span(in, span.data(), n);
  int span_differ = 0, overrun = 0;
  std::vector<Scalar> part(64);
  for (std::size_t len = 0; len <= 40; ++len) {
    std::size_t const from = (7 * len + 3) % (n - len);
    std::fill(part.begin(), part.end(), Scalar(42));
    dpk::math::tanh_host_span(in + from, part.data() + 1, len);
    for (std::size_t i = 0; i < len; ++i) span_differ += !same_bits(scalar_tanh(x[from + i]), part[i + 1]);
    overrun += part[0] != Scalar(42) || part[len + 1] != Scalar(42);
  }
  int differ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Scalar const want = scalar_tanh(x[i]);
    differ += !same_bits(want, h[i]);
    span_differ += !same_bits(want, span[i]);
  }
  CHECK(differ == 0);
  CHECK(span_differ == 0);
  CHECK(overrun == 0);
}

/// The water example's descriptor (sel [46, 92], neuron [25, 50, 100], axis 16, type_one_side)
/// and fitting net ([240, 240, 240], resnet_dt) settings.
std::pair<dpk::DescriptorConfig, dpk::FittingConfig> water_settings() {
  dpk::DescriptorConfig d;
  d.sel = {46, 92};
  d.neuron = {25, 50, 100};
  d.axis_neuron = 16;
  d.type_one_side = true;
  dpk::FittingConfig f;
  f.neuron = {240, 240, 240};
  f.resnet_dt = true;
  return {d, f};
}

TEST_CASE("parameter layout follows DeePMD-kit's tensor names and counts") {
  auto [d, f] = water_settings();
  dpk::ParameterLayout layout(d, f, 2);
  // embedding: (1*25+25) + (25*50+50) + (50*100+100) per net; fitting: 1600*240+240 + 2*(240*240+240+240) + 241
  std::size_t const emb = 50 + 1300 + 5100, fit = 1600 * 240 + 240 + 2 * (240 * 240 + 480) + 241;
  CHECK(layout.size == 2 * emb + 2 * fit);
  REQUIRE(layout.find("embedding_net1_layer2_w") != nullptr);
  CHECK(layout.find("embedding_net1_layer2_w")->shape == std::vector<int>{50, 100});
  CHECK(layout.find("fitting_net0_layer1_idt") != nullptr);
  CHECK(layout.find("fitting_net0_layer0_idt") == nullptr);
  CHECK(layout.find("fitting_net1_layer3_w")->shape == std::vector<int>{240, 1});
  d.type_one_side = false;
  CHECK(dpk::ParameterLayout(d, f, 2).find("embedding_net3_layer0_w") != nullptr);
}

TEST_CASE("parameter layout: packed tensors for files, each tensor on a cache line in the model's buffers") {
  auto const [d, f] = water_settings();
  dpk::ParameterLayout const layout(d, f, 2);
  std::size_t const align = dpk::ParameterLayout::buffer_alignment;
  REQUIRE(layout.buffer_offsets.size() == layout.tensors.size());
  std::size_t packed_end = 0, buffer_end = 0;
  for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
    CAPTURE(layout.tensors[i].name);
    CHECK(layout.tensors[i].offset == packed_end);          // files: back to back
    CHECK(layout.buffer_offsets[i] % align == 0);           // buffers: on a multiple of 16 scalars
    CHECK(layout.buffer_offsets[i] >= buffer_end);          // in the same order, no overlap
    CHECK(layout.buffer_offsets[i] < buffer_end + align);   // the smallest such gap
    packed_end += layout.tensors[i].size();
    buffer_end = layout.buffer_offsets[i] + layout.tensors[i].size();
  }
  CHECK(layout.size == packed_end);
  CHECK(layout.buffer_size == buffer_end);
  // The water model's first fitting weights lie 4 and 5 scalars off a multiple of 16 packed (the
  // reason for the buffer placement); the per-layer offsets follow the tensors of each placement.
  auto const* w0 = layout.find("fitting_net0_layer0_w");
  auto const* w1 = layout.find("fitting_net1_layer0_w");
  REQUIRE(w0 != nullptr);
  REQUIRE(w1 != nullptr);
  CHECK(w0->offset % align == 4);
  CHECK(w1->offset % align == 5);
  CHECK(layout.fitting_offsets[0][0].w == w0->offset);
  CHECK(layout.fitting_offsets[1][0].w == w1->offset);
  CHECK(layout.fitting_buffer_offsets[0][0].w == layout.buffer_offsets[std::size_t(w0 - layout.tensors.data())]);
  CHECK(layout.fitting_buffer_offsets[1][0].w == layout.buffer_offsets[std::size_t(w1 - layout.tensors.data())]);
  CHECK(layout.fitting_buffer_offsets[1][1].idt % align == 0);
  CHECK(layout.fitting_buffer_offsets[1][0].idt == dpk::nn::LayerOffsets::npos);
  CHECK(layout.embedding_buffer_offsets[1][2].b % align == 0);
  // Packed -> buffer -> packed is the identity; the gaps are zero.
  std::vector<double> packed(layout.size);
  for (std::size_t k = 0; k < packed.size(); ++k) packed[k] = 1.0 + double(k);
  std::vector<double> const buffer = layout.to_buffer(packed);
  REQUIRE(buffer.size() == layout.buffer_size);
  CHECK(layout.to_packed(buffer) == packed);
  std::size_t nonzero = 0;
  for (double v : buffer) nonzero += v != 0.0;
  CHECK(nonzero == layout.size);
  for (std::size_t i = 0; i < layout.tensors.size(); ++i)
    CHECK(buffer[layout.buffer_offsets[i]] == packed[layout.tensors[i].offset]);
  CHECK_THROWS_WITH_AS(layout.to_buffer(std::vector<double>(3)),
                       doctest::Contains(("ParameterLayout::to_buffer: expected " + std::to_string(layout.size)).c_str()), dpk::Error);
  CHECK_THROWS_WITH_AS(layout.to_packed(packed), doctest::Contains("ParameterLayout::to_packed"), dpk::Error);
}
