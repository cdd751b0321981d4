#pragma once
/// \file tabulated_embedding.hpp
/// \brief Model compression (DeePMD-kit's `dp compress` scheme): every embedding net G(s) is
/// replaced by a table of fifth-order Hermite polynomials per output channel, and the se_e2_a
/// contraction T = (1/nnei) sum_j G(s_j) (x) Rn_j and its adjoint run straight from the table,
/// without materialising G (docs/compression.md).
///
/// Tables: for net k the first table covers [lower_k, upper_k) in intervals of `step`, the second
/// [upper_k, max_k) in intervals of 10 * step (max_k about extrapolate * upper_k). On interval
/// [x0, x0 + h) of channel m, G_m(x0 + u) = a0 + a1 u + ... + a5 u^5, with the six coefficients
/// fixed by G, G' and G'' at both ends (exact forward-mode derivatives of the net). Outside
/// [lower_k, max_k) the value is held at the nearest end (G(lower_k) or G(max_k)) and dG/ds = 0,
/// so energies and forces stay consistent; `count_outside_table` counts such lookups.
///
/// Storage: coefficients (nnets, intervals, 6 * M1), the six coefficients of an interval stored
/// coefficient-major (a_p of channel m at p * M1 + m), so that loops over channels are contiguous.

#include <dpk/core/compat.hpp>
#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/se_a.hpp>
#include <dpk/nn/layer.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace dpk {

/// The range of one net's table (host, double): [lower, upper) at step, [upper, max) at 10 step.
struct TableRange {
  double lower = 0, upper = 0, max = 0;
  int first_intervals = 0, second_intervals = 0;
  int intervals() const { return first_intervals + second_intervals; }
};

/// Every embedding net's table on the host, in double (what the model file stores).
struct EmbeddingTableData {
  double step = 0.01;        ///< stride of the first table; the second uses 10 * step
  double extrapolate = 5;    ///< the second table ends at about extrapolate * upper
  int m1 = 0;                ///< output channels of each net
  std::vector<TableRange> ranges;                 ///< one per net
  std::vector<std::vector<double>> coefficients;  ///< [net][(interval * 6 + p) * m1 + m]
  int nnets() const { return static_cast<int>(ranges.size()); }
};

/// Value, first and second derivative of embedding net `offsets` (layers `shapes`, parameters in
/// the flat host buffer `params`) at input s: forward mode through the layers in double
/// (tanh' = 1 - t^2, tanh'' = -2 t (1 - t^2)). Host code (builds tables; not a kernel).
inline void embedding_net_derivatives(std::vector<nn::LayerShape> const& shapes,
                                      std::vector<nn::LayerOffsets> const& offsets, std::vector<double> const& params,
                                      double s, std::vector<double>& g, std::vector<double>& dg,
                                      std::vector<double>& d2g) {
  std::vector<double> x{s}, dx{1.0}, ddx{0.0};
  for (std::size_t l = 0; l < shapes.size(); ++l) {
    nn::LayerShape const& shape = shapes[l];
    nn::LayerOffsets const& o = offsets[l];
    std::vector<double> y(shape.n_out), dy(shape.n_out), ddy(shape.n_out);
    for (int c = 0; c < shape.n_out; ++c) {
      double z = params[o.b + c], dz = 0, ddz = 0;
      for (int k = 0; k < shape.n_in; ++k) {
        double const w = params[o.w + std::size_t(k) * shape.n_out + c];
        z += x[k] * w;
        dz += dx[k] * w;
        ddz += ddx[k] * w;
      }
      double h = z, dh = dz, ddh = ddz;
      if (shape.tanh) {
        double const t = std::tanh(z), dt = 1 - t * t;
        h = t;
        dh = dt * dz;
        ddh = -2 * t * dt * dz * dz + dt * ddz;
      }
      double const scale = shape.timestep ? params[o.idt + c] : 1.0;
      y[c] = scale * h;
      dy[c] = scale * dh;
      ddy[c] = scale * ddh;
      int const from = shape.skip == nn::Skip::identity ? c
                       : shape.skip == nn::Skip::concat ? (c < shape.n_in ? c : c - shape.n_in)
                                                        : -1;
      if (from >= 0) {
        y[c] += x[from];
        dy[c] += dx[from];
        ddy[c] += ddx[from];
      }
    }
    x.swap(y);
    dx.swap(dy);
    ddx.swap(ddy);
  }
  g = x;
  dg = dx;
  d2g = ddx;
}

/// The quintic Hermite coefficients a0..a5 on an interval of width h from value, first and second
/// derivative at its start (y0, d0, s0) and end (y1, d1, s1).
inline void hermite_quintic(double h, double y0, double d0, double s0, double y1, double d1, double s1,
                            double a[6]) {
  double const dy = y1 - y0, h2 = h * h, h3 = h2 * h;
  a[0] = y0;
  a[1] = d0;
  a[2] = s0 / 2;
  a[3] = (20 * dy - (8 * d1 + 12 * d0) * h - (3 * s0 - s1) * h2) / (2 * h3);
  a[4] = (-30 * dy + (14 * d1 + 16 * d0) * h + (3 * s0 - 2 * s1) * h2) / (2 * h3 * h);
  a[5] = (12 * dy - 6 * (d1 + d0) * h + (s1 - s0) * h2) / (2 * h3 * h2);
}

/// Input range of each embedding net, from the normalisation statistics: s = (sw(r)/r - avg)/std
/// of the radial column, so s is smallest at the cutoff (-avg/std, also every empty slot) and
/// largest at the smallest neighbour distance `rmin`. avg/std: (ntypes, nnei, 4) flattened;
/// nets as EmbeddingRows::net_of. Returns per net {smallest s, largest s}.
inline std::vector<std::pair<double, double>> embedding_input_range(std::vector<double> const& avg,
                                                                    std::vector<double> const& std_dev,
                                                                    std::vector<int> const& sel, bool type_one_side,
                                                                    double rcut_smth, double rcut, double rmin) {
  int const ntypes = static_cast<int>(sel.size());
  int nnei = 0;
  for (int s : sel) nnei += s;
  require(rmin > 0, "embedding_input_range: the smallest neighbour distance must be positive, got " +
                        std::to_string(rmin));
  require(avg.size() == std::size_t(ntypes) * nnei * 4 && std_dev.size() == avg.size(),
          "embedding_input_range: avg/std must be (ntypes, nnei, 4)");
  // DeePMD-kit's switch (SPEC.md section 3) at rmin.
  double sw = 1;
  if (rmin >= rcut) {
    sw = 0;
  } else if (rmin > rcut_smth) {
    double const u = (rmin - rcut_smth) / (rcut - rcut_smth);
    sw = u * u * u * (-6 * u * u + 15 * u - 10) + 1;
  }
  int const nnets = type_one_side ? ntypes : ntypes * ntypes;
  std::vector<std::pair<double, double>> out(nnets, {1e300, -1e300});
  int first = 0;
  for (int tj = 0; tj < ntypes; ++tj) {
    for (int ti = 0; ti < ntypes; ++ti) {
      std::size_t const k = (std::size_t(ti) * nnei + first) * 4;
      double const lo = (0 - avg[k]) / std_dev[k];
      double const hi = (sw / rmin - avg[k]) / std_dev[k];
      int const net = EmbeddingRows<Kokkos::HostSpace>::net_of(type_one_side, ntypes, ti, tj);
      out[net].first = std::min(out[net].first, std::min(lo, hi));
      out[net].second = std::max(out[net].second, std::max(lo, hi));
    }
    first += sel[tj];
  }
  return out;
}

/// Builds the tables of every embedding net (host, double). `range[k]` is net k's input range
/// {smallest, largest s}; the first table starts one step below the smallest s on the grid of
/// `step` and ends at the first grid point at or above the largest s (upper); the second runs
/// from upper at 10 * step to the first point at or above extrapolate * upper (for upper > 0;
/// else it is empty). Throws dpk::Error for step <= 0 or extrapolate < 1.
inline EmbeddingTableData build_embedding_table(std::vector<nn::LayerShape> const& shapes,
                                                std::vector<std::vector<nn::LayerOffsets>> const& offsets,
                                                std::vector<double> const& params,
                                                std::vector<std::pair<double, double>> const& range, double step,
                                                double extrapolate) {
  require(step > 0 && std::isfinite(step), "compress: --step must be positive, got " + std::to_string(step));
  require(extrapolate >= 1 && std::isfinite(extrapolate),
          "compress: --extrapolate must be at least 1, got " + std::to_string(extrapolate));
  require(range.size() == offsets.size(), "build_embedding_table: one input range per net expected");
  EmbeddingTableData table;
  table.step = step;
  table.extrapolate = extrapolate;
  table.m1 = shapes.back().n_out;
  int const m1 = table.m1;
  double const step1 = 10 * step;
  for (std::size_t k = 0; k < offsets.size(); ++k) {
    TableRange r;
    r.lower = step * (std::floor(range[k].first / step) - 1);
    r.first_intervals = static_cast<int>(std::ceil((range[k].second - r.lower) / step));
    if (r.first_intervals < 1) r.first_intervals = 1;
    r.upper = r.lower + r.first_intervals * step;
    double const end = extrapolate * r.upper;
    r.second_intervals = end > r.upper ? static_cast<int>(std::ceil((end - r.upper) / step1)) : 0;
    r.max = r.upper + r.second_intervals * step1;
    require(r.intervals() <= 100000000 / m1,
            "compress: the table would have " + std::to_string(r.intervals()) +
                " intervals per net; increase --step or decrease --extrapolate");
    std::vector<double> coef(std::size_t(r.intervals()) * 6 * m1);
    std::vector<double> g0, d0, s0, g1, d1, s1;
    auto point = [&](int p) { return p <= r.first_intervals ? r.lower + p * step : r.upper + (p - r.first_intervals) * step1; };
    embedding_net_derivatives(shapes, offsets[k], params, point(0), g0, d0, s0);
    for (int p = 0; p < r.intervals(); ++p) {
      double const x0 = point(p), x1 = point(p + 1);
      embedding_net_derivatives(shapes, offsets[k], params, x1, g1, d1, s1);
      for (int m = 0; m < m1; ++m) {
        double a[6];
        hermite_quintic(x1 - x0, g0[m], d0[m], s0[m], g1[m], d1[m], s1[m], a);
        for (int c = 0; c < 6; ++c) coef[(std::size_t(p) * 6 + c) * m1 + m] = a[c];
      }
      g0.swap(g1);
      d0.swap(d1);
      s0.swap(s1);
    }
    table.ranges.push_back(r);
    table.coefficients.push_back(std::move(coef));
  }
  return table;
}

/// The tables on the device in the model's precision.
template <class Scalar, class MemorySpace>
struct EmbeddingTable {
  int nnets = 0, m1 = 0;
  Scalar step = 0, step1 = 0;
  View3<Scalar, MemorySpace> coefficients{"dpk::descriptor::EmbeddingTable::coefficients", 0, 0, 0};  ///< (nnets, intervals, 6 m1)
  View2<Scalar, MemorySpace> range{"dpk::descriptor::EmbeddingTable::range", 0, 3};  ///< (nnets, 3): lower, upper, max
  View2<int, MemorySpace> intervals{"dpk::descriptor::EmbeddingTable::intervals", 0, 2};  ///< (nnets, 2): first, second

  bool empty() const { return nnets == 0; }

  /// Uploads host tables.
  void assign(EmbeddingTableData const& data) {
    nnets = data.nnets();
    m1 = data.m1;
    step = static_cast<Scalar>(data.step);
    step1 = static_cast<Scalar>(10 * data.step);
    int most = 0;
    for (auto const& r : data.ranges) most = r.intervals() > most ? r.intervals() : most;
    coefficients = View3<Scalar, MemorySpace>("dpk::descriptor::EmbeddingTable::coefficients", nnets, most, 6 * m1);
    range = View2<Scalar, MemorySpace>("dpk::descriptor::EmbeddingTable::range", nnets, 3);
    intervals = View2<int, MemorySpace>("dpk::descriptor::EmbeddingTable::intervals", nnets, 2);
    auto hc = Kokkos::create_mirror_view(coefficients);
    auto hr = Kokkos::create_mirror_view(range);
    auto hi = Kokkos::create_mirror_view(intervals);
    for (int k = 0; k < nnets; ++k) {
      auto const& r = data.ranges[k];
      hr(k, 0) = static_cast<Scalar>(r.lower);
      hr(k, 1) = static_cast<Scalar>(r.upper);
      hr(k, 2) = static_cast<Scalar>(r.max);
      hi(k, 0) = r.first_intervals;
      hi(k, 1) = r.second_intervals;
      for (int p = 0; p < r.intervals(); ++p)
        for (int c = 0; c < 6 * m1; ++c) hc(k, p, c) = static_cast<Scalar>(data.coefficients[k][std::size_t(p) * 6 * m1 + c]);
    }
    Kokkos::deep_copy(coefficients, hc);
    Kokkos::deep_copy(range, hr);
    Kokkos::deep_copy(intervals, hi);
  }
};

/// Where s falls in net k's table: the interval, the offset u into it, and whether s is outside
/// [lower, max) (then u is clamped to the nearest end and the caller uses dG/ds = 0).
template <class Scalar, class MemorySpace>
KOKKOS_INLINE_FUNCTION void table_locate(EmbeddingTable<Scalar, MemorySpace> const& table, int k, Scalar s,
                                         int& interval, Scalar& u, bool& outside) {
  Scalar const lower = table.range(k, 0), upper = table.range(k, 1), max = table.range(k, 2);
  int const n1 = table.intervals(k, 0), n = n1 + table.intervals(k, 1);
  outside = !(s >= lower && s < max);  // also NaN
  if (outside) {
    bool const below = !(s >= lower);
    interval = below ? 0 : n - 1;
    u = below ? Scalar(0) : max - (n > n1 ? upper + Scalar(n - 1 - n1) * table.step1 : lower + Scalar(n - 1) * table.step);
    return;
  }
  if (s < upper) {
    int p = static_cast<int>((s - lower) / table.step);
    p = p < 0 ? 0 : (p >= n1 ? n1 - 1 : p);
    interval = p;
    u = s - (lower + Scalar(p) * table.step);
  } else {
    int p = static_cast<int>((s - upper) / table.step1);
    p = p < 0 ? 0 : (p >= n - n1 ? n - n1 - 1 : p);
    interval = n1 + p;
    u = s - (upper + Scalar(p) * table.step1);
  }
}

/// G_m(s) of one channel from the interval's coefficients `a` (coefficient-major, stride m1).
template <class Scalar>
KOKKOS_INLINE_FUNCTION Scalar table_value(Scalar const* a, int m1, int m, Scalar u) {
  return a[m] + u * (a[m1 + m] + u * (a[2 * m1 + m] + u * (a[3 * m1 + m] + u * (a[4 * m1 + m] + u * a[5 * m1 + m]))));
}

/// dG_m/ds of one channel.
template <class Scalar>
KOKKOS_INLINE_FUNCTION Scalar table_derivative(Scalar const* a, int m1, int m, Scalar u) {
  return a[m1 + m] +
         u * (Scalar(2) * a[2 * m1 + m] +
              u * (Scalar(3) * a[3 * m1 + m] + u * (Scalar(4) * a[4 * m1 + m] + u * Scalar(5) * a[5 * m1 + m])));
}

/// Which schedule the tabulated kernels use: the space's own (automatic), the host schedule
/// (one centre per host thread, plain vectorised loops over channels) or the device schedule
/// (one team per centre, channels over the vector lanes; pairs one per thread for the adjoint).
/// Both run on any space; tests run both on the host.
enum class TableSchedule { automatic, host, device };

namespace detail {

template <class ExecutionSpace>
bool table_host_schedule(TableSchedule schedule) {
  return schedule == TableSchedule::host || (schedule == TableSchedule::automatic && host_schedule_v<ExecutionSpace>);
}

}  // namespace detail

/// Operands of the tabulated kernels (copied into each kernel).
template <class Scalar, class MemorySpace>
struct TabulatedOperands {
  View3<Scalar, MemorySpace> env, empty_row;
  View2<int, MemorySpace> count;
  View1<int, MemorySpace> types, position, sel_offset;
  EmbeddingTable<Scalar, MemorySpace> table;
  int ntypes = 0, m1 = 0, m2 = 0, nnei = 0, centre_rows = 0;
  bool type_one_side = true;
  Scalar inv_nnei = 0;

  TabulatedOperands(SeAInputs<Scalar, MemorySpace> const& in, EmbeddingTable<Scalar, MemorySpace> const& t)
      : env(in.env), empty_row(in.empty_row), count(in.count), types(in.types), position(in.position),
        sel_offset(in.rows.sel_offset), table(t), ntypes(in.ntypes), m1(in.m1), m2(in.m2), nnei(in.nnei),
        centre_rows(in.centre_rows < 0 ? in.nloc : in.centre_rows), type_one_side(in.type_one_side),
        inv_nnei(Scalar(1) / Scalar(in.nnei)) {
    require(t.m1 == in.m1, "tabulated descriptor: the table has " + std::to_string(t.m1) + " channels, the model " +
                               std::to_string(in.m1));
    require(t.nnets == (in.type_one_side ? in.ntypes : in.ntypes * in.ntypes),
            "tabulated descriptor: the table has " + std::to_string(t.nnets) + " nets, the model another count");
    require(sel_offset.extent(0) == std::size_t(in.ntypes + 1), "tabulated descriptor: embedding rows not set up");
  }
};

/// Kernel tags of the two schedules.
struct TableHostTag {};
struct TableDeviceTag {};

/// Channel loops of the two schedules: a plain vectorised loop (host), the team's vector lanes (device).
struct HostChannels {
  int m1;
  template <class F>
  KOKKOS_INLINE_FUNCTION void operator()(F const& f) const {
    DPK_SIMD_LOOP
    for (int m = 0; m < m1; ++m) f(m);
  }
};
template <class Team>
struct TeamChannels {
  Team const& team;
  int m1;
  template <class F>
  KOKKOS_INLINE_FUNCTION void operator()(F const& f) const {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, m1), f);
  }
};

/// The two schedules of a kernel that makes T (or T') of one centre and then that centre's row of
/// D (or D'). Derived (CRTP) holds `op` and has centre(i, channels) and descriptor_row(i, m).
template <class Derived>
struct TableCentreSchedule {
  /// Host schedule: one centre per call.
  KOKKOS_INLINE_FUNCTION void operator()(TableHostTag, int const i) const {
    Derived const& kernel = static_cast<Derived const&>(*this);
    kernel.centre(i, HostChannels{kernel.op.m1});
    if (kernel.op.position(i) >= kernel.op.centre_rows) return;  // not a centre: its D row is never read
    for (int m = 0; m < kernel.op.m1; ++m) kernel.descriptor_row(i, m);
  }

  /// Device schedule: one team per centre, channels over the vector lanes.
  template <class Team>
  KOKKOS_INLINE_FUNCTION void operator()(TableDeviceTag, Team const& team) const {
    Derived const& kernel = static_cast<Derived const&>(*this);
    int const i = team.league_rank();
    kernel.centre(i, TeamChannels<Team>{team, kernel.op.m1});
    team.team_barrier();
    if (kernel.op.position(i) >= kernel.op.centre_rows) return;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, kernel.op.m1), [&](int const m) { kernel.descriptor_row(i, m); });
  }
};

namespace detail {
/// Runs a TableCentreSchedule kernel over the nloc centres in the schedule `schedule` picks,
/// labelled host_label or device_label.
template <class ExecutionSpace, class Kernel>
void run_table_centres(ExecutionSpace const& space, TableSchedule schedule, int nloc, char const* host_label,
                       char const* device_label, Kernel const& kernel) {
  if (table_host_schedule<ExecutionSpace>(schedule))
    Kokkos::parallel_for(host_label, Kokkos::RangePolicy<ExecutionSpace, TableHostTag>(space, 0, nloc), kernel);
  else
    Kokkos::parallel_for(device_label,
                         Kokkos::TeamPolicy<ExecutionSpace, TableDeviceTag>(space, nloc, 1, vector_lanes<ExecutionSpace>()),
                         kernel);
}
}  // namespace detail

/// TabulatedDescriptor: T and D of one centre from the tables (see tabulated_descriptor).
template <class Scalar, class MemorySpace>
struct TabulatedDescriptorKernel : TableCentreSchedule<TabulatedDescriptorKernel<Scalar, MemorySpace>> {
  TabulatedOperands<Scalar, MemorySpace> op;
  View3<Scalar, MemorySpace> t_out;
  MatrixView<Scalar, MemorySpace> d;

  /// Adds G_k(s) (x) w to the (4, m1) block tr.
  template <class Channels>
  KOKKOS_INLINE_FUNCTION void add_slot(Scalar* tr, int k, Scalar s, Scalar const w[4], Channels const& channels) const {
    int interval;
    Scalar u;
    bool outside;
    table_locate(op.table, k, s, interval, u, outside);
    Scalar const* const a = &op.table.coefficients(k, interval, 0);
    int const m1 = op.m1;
    Scalar const w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    channels([&](int const m) {
      Scalar const g = table_value(a, m1, m, u);
      tr[m] += g * w0;
      tr[m1 + m] += g * w1;
      tr[2 * m1 + m] += g * w2;
      tr[3 * m1 + m] += g * w3;
    });
  }

  /// T_i into t_out(i, ., .).
  template <class Channels>
  KOKKOS_INLINE_FUNCTION void centre(int i, Channels const& channels) const {
    int const ti = op.types(i), m1 = op.m1;
    Scalar* const tr = &t_out(i, 0, 0);
    channels([&](int const m) {
      for (int c = 0; c < 4; ++c) tr[c * m1 + m] = Scalar(0);
    });
    for (int tj = 0; tj < op.ntypes; ++tj) {
      int const k = EmbeddingRows<MemorySpace>::net_of(op.type_one_side, op.ntypes, ti, tj);
      int const first = op.sel_offset(tj), n = op.count(i, tj);
      for (int j = 0; j < n; ++j) {
        Scalar const* const r = &op.env(i, first + j, 0);
        Scalar const w[4] = {r[0] * op.inv_nnei, r[1] * op.inv_nnei, r[2] * op.inv_nnei, r[3] * op.inv_nnei};
        add_slot(tr, k, r[0], w, channels);
      }
      int const empty = op.sel_offset(tj + 1) - first - n;
      if (empty > 0) {
        Scalar const scale = Scalar(empty) * op.inv_nnei;
        Scalar const w[4] = {op.empty_row(ti, tj, 0) * scale, op.empty_row(ti, tj, 1) * scale,
                             op.empty_row(ti, tj, 2) * scale, op.empty_row(ti, tj, 3) * scale};
        add_slot(tr, k, op.empty_row(ti, tj, 0), w, channels);
      }
    }
  }

  /// Row m of D_i = T_i T_i<^T.
  KOKKOS_INLINE_FUNCTION void descriptor_row(int i, int m) const {
    int const m1 = op.m1, m2 = op.m2;
    Scalar const* const tr = &t_out(i, 0, 0);
    Scalar* const dr = &d(op.position(i), 0);
    DPK_SIMD_LOOP
    for (int n = 0; n < m2; ++n) {
      Scalar sum = 0;
      for (int c = 0; c < 4; ++c) sum += tr[c * m1 + m] * tr[c * m1 + n];
      dr[m * m2 + n] = sum;
    }
  }
};

/// T_i = (1/nnei) sum_j G_k(s_j) (x) Rn_j straight from the tables (filled slots one by one,
/// the empty slots of a block as one term weighted by their number) and D_i = T_i T_i<^T into
/// row position(i) of `d`, as contract_descriptor does for the materialised G. Of `in.rows` only
/// sel_offset is read (no embedding rows are evaluated). t_out: (nloc, 4, M1); rows past
/// in.rows_with_neighbours() (ghosts: not centres) are left.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void tabulated_descriptor(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                          EmbeddingTable<Scalar, MemorySpace> const& table, View3<Scalar, MemorySpace> const& t_out,
                          MatrixView<Scalar, MemorySpace> d, TableSchedule schedule = TableSchedule::automatic) {
  TabulatedDescriptorKernel<Scalar, MemorySpace> kernel{{}, TabulatedOperands<Scalar, MemorySpace>(in, table), t_out, d};
  detail::run_table_centres(space, schedule, in.rows_with_neighbours(), "dpk::descriptor::TabulatedDescriptor_host",
                            "dpk::descriptor::TabulatedDescriptor_device", kernel);
}

/// TabulatedDescriptor_tangent: T' and D' of one centre (see tabulated_descriptor_tangent).
template <class Scalar, class MemorySpace>
struct TabulatedTangentKernel : TableCentreSchedule<TabulatedTangentKernel<Scalar, MemorySpace>> {
  TabulatedOperands<Scalar, MemorySpace> op;
  View3<Scalar, MemorySpace> v, t_value, t_out;
  MatrixView<Scalar, MemorySpace> d;

  template <class Channels>
  KOKKOS_INLINE_FUNCTION void centre(int i, Channels const& channels) const {
    int const ti = op.types(i), m1 = op.m1;
    Scalar* const tr = &t_out(i, 0, 0);
    channels([&](int const m) {
      for (int c = 0; c < 4; ++c) tr[c * m1 + m] = Scalar(0);
    });
    for (int tj = 0; tj < op.ntypes; ++tj) {
      int const k = EmbeddingRows<MemorySpace>::net_of(op.type_one_side, op.ntypes, ti, tj);
      int const first = op.sel_offset(tj), n = op.count(i, tj);
      for (int j = 0; j < n; ++j) {  // empty slots: constant rows, zero tangent
        Scalar const* const r = &op.env(i, first + j, 0);
        Scalar const* const vr = &v(i, first + j, 0);
        int interval;
        Scalar u;
        bool outside;
        table_locate(op.table, k, r[0], interval, u, outside);
        Scalar const* const a = &op.table.coefficients(k, interval, 0);
        Scalar const ds = outside ? Scalar(0) : vr[0] * op.inv_nnei;  // s' / nnei (G' = 0 beyond the table)
        Scalar const r0 = r[0] * ds, r1 = r[1] * ds, r2 = r[2] * ds, r3 = r[3] * ds;
        Scalar const v0 = vr[0] * op.inv_nnei, v1 = vr[1] * op.inv_nnei, v2 = vr[2] * op.inv_nnei,
                     v3 = vr[3] * op.inv_nnei;
        channels([&](int const m) {
          Scalar const g = table_value(a, m1, m, u), dg = table_derivative(a, m1, m, u);
          tr[m] += dg * r0 + g * v0;
          tr[m1 + m] += dg * r1 + g * v1;
          tr[2 * m1 + m] += dg * r2 + g * v2;
          tr[3 * m1 + m] += dg * r3 + g * v3;
        });
      }
    }
  }

  /// Row m of D'_i = T'_i T_i<^T + T_i T'_i<^T.
  KOKKOS_INLINE_FUNCTION void descriptor_row(int i, int m) const {
    int const m1 = op.m1, m2 = op.m2;
    Scalar const* const tt = &t_out(i, 0, 0);
    Scalar const* const tv = &t_value(i, 0, 0);
    Scalar* const dr = &d(op.position(i), 0);
    DPK_SIMD_LOOP
    for (int n = 0; n < m2; ++n) {
      Scalar sum = 0;
      for (int c = 0; c < 4; ++c) sum += tt[c * m1 + m] * tv[c * m1 + n] + tv[c * m1 + m] * tt[c * m1 + n];
      dr[m * m2 + n] = sum;
    }
  }
};

/// Tangent of tabulated_descriptor along a direction v of the environment rows (nloc, nnei, 4):
/// T'_i = (1/nnei) sum_j (G'(s_j) v_j0 (x) Rn_j + G(s_j) (x) v_j) over filled slots (the empty
/// slots' rows are constants) and D' = T' T<^T + T T'<^T into row position(i) of `d`. t_value
/// holds T from tabulated_descriptor; T' goes to t_out. The tables are constants (not trained).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void tabulated_descriptor_tangent(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                                  EmbeddingTable<Scalar, MemorySpace> const& table,
                                  View3<Scalar, MemorySpace> const& v, View3<Scalar, MemorySpace> const& t_value,
                                  View3<Scalar, MemorySpace> const& t_out, MatrixView<Scalar, MemorySpace> d,
                                  TableSchedule schedule = TableSchedule::automatic) {
  TabulatedTangentKernel<Scalar, MemorySpace> kernel{{}, TabulatedOperands<Scalar, MemorySpace>(in, table), v, t_value,
                                                     t_out, d};
  detail::run_table_centres(space, schedule, in.rows_with_neighbours(),
                            "dpk::descriptor::TabulatedDescriptor_tangent_host",
                            "dpk::descriptor::TabulatedDescriptor_tangent_device", kernel);
}

/// TabulatedEnvironment_cotangent: g of one pair (see tabulated_environment_cotangent).
template <class Scalar, class MemorySpace>
struct TabulatedCotangentKernel {
  TabulatedOperands<Scalar, MemorySpace> op;
  View3<Scalar, MemorySpace> a, out;

  /// g of pair (i, slot), the sums over channels in 8 interleaved partial sums (fixed order).
  KOKKOS_INLINE_FUNCTION void pair(int const i, int const slot) const {
    int tj = 0;
    while (tj + 1 < op.ntypes && slot >= op.sel_offset(tj + 1)) ++tj;
    Scalar* const o = &out(i, slot, 0);
    if (slot - op.sel_offset(tj) >= op.count(i, tj)) {
      for (int c = 0; c < 4; ++c) o[c] = Scalar(0);
      return;
    }
    int const k = EmbeddingRows<MemorySpace>::net_of(op.type_one_side, op.ntypes, op.types(i), tj);
    Scalar const* const r = &op.env(i, slot, 0);
    int interval;
    Scalar u;
    bool outside;
    table_locate(op.table, k, r[0], interval, u, outside);
    Scalar const dscale = outside ? Scalar(0) : Scalar(1);
    Scalar const* const co = &op.table.coefficients(k, interval, 0);
    Scalar const* const ar = &a(i, 0, 0);
    int const m1 = op.m1;
    Scalar const r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
    constexpr int lanes = 8;
    Scalar acc[5][lanes] = {};
    int m = 0;
    for (; m + lanes <= m1; m += lanes) {
      DPK_SIMD_LOOP
      for (int l = 0; l < lanes; ++l) {
        int const q = m + l;
        Scalar const g = table_value(co, m1, q, u), dg = table_derivative(co, m1, q, u);
        Scalar const a0 = ar[q], a1 = ar[m1 + q], a2 = ar[2 * m1 + q], a3 = ar[3 * m1 + q];
        acc[0][l] += a0 * g;
        acc[1][l] += a1 * g;
        acc[2][l] += a2 * g;
        acc[3][l] += a3 * g;
        acc[4][l] += (a0 * r0 + a1 * r1 + a2 * r2 + a3 * r3) * dg;
      }
    }
    for (; m < m1; ++m) {
      Scalar const g = table_value(co, m1, m, u), dg = table_derivative(co, m1, m, u);
      Scalar const a0 = ar[m], a1 = ar[m1 + m], a2 = ar[2 * m1 + m], a3 = ar[3 * m1 + m];
      acc[0][0] += a0 * g;
      acc[1][0] += a1 * g;
      acc[2][0] += a2 * g;
      acc[3][0] += a3 * g;
      acc[4][0] += (a0 * r0 + a1 * r1 + a2 * r2 + a3 * r3) * dg;
    }
    Scalar sum[5];
    for (int c = 0; c < 5; ++c) {
      sum[c] = 0;
      for (int l = 0; l < lanes; ++l) sum[c] += acc[c][l];
    }
    o[0] = (sum[0] + dscale * sum[4]) * op.inv_nnei;
    for (int c = 1; c < 4; ++c) o[c] = sum[c] * op.inv_nnei;
  }

  /// Host schedule: every slot of one centre.
  KOKKOS_INLINE_FUNCTION void operator()(TableHostTag, int const i) const {
    for (int slot = 0; slot < op.nnei; ++slot) pair(i, slot);
  }
  /// Device schedule: one pair per thread.
  KOKKOS_INLINE_FUNCTION void operator()(TableDeviceTag, int const i, int const slot) const { pair(i, slot); }
};

/// The adjoint of tabulated_descriptor for forces and virials: from A = dE/dT (nloc, 4, M1)
/// (descriptor_cotangent), g_j = dE/dRn_j = (1/nnei) (A^T G(s_j) + e0 sum_m (A Rn_j)_m G'_m(s_j))
/// on filled slots, 0 on empty slots (their rows are constants), into `out` (nloc, nnei, 4), as
/// environment_cotangent writes it for compute_force_virial (rows past in.rows_with_neighbours()
/// not written). Outside a table G' = 0.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void tabulated_environment_cotangent(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                                     EmbeddingTable<Scalar, MemorySpace> const& table,
                                     View3<Scalar, MemorySpace> const& a, View3<Scalar, MemorySpace> const& out,
                                     TableSchedule schedule = TableSchedule::automatic) {
  TabulatedCotangentKernel<Scalar, MemorySpace> kernel{TabulatedOperands<Scalar, MemorySpace>(in, table), a, out};
  if (detail::table_host_schedule<ExecutionSpace>(schedule))
    Kokkos::parallel_for("dpk::descriptor::TabulatedEnvironment_cotangent_host",
                         Kokkos::RangePolicy<ExecutionSpace, TableHostTag>(space, 0, in.rows_with_neighbours()), kernel);
  else
    Kokkos::parallel_for("dpk::descriptor::TabulatedEnvironment_cotangent_device",
                         Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>, TableDeviceTag>(
                             space, {0, 0}, {in.rows_with_neighbours(), in.nnei}),
                         kernel);
}

/// Lookups of the last batch that fall outside their net's table (filled slots and the
/// empty-slot input of every (centre, block) with empty slots).
template <class ExecutionSpace, class Scalar, class MemorySpace>
long count_outside_table(ExecutionSpace const& space, SeAInputs<Scalar, MemorySpace> const& in,
                         EmbeddingTable<Scalar, MemorySpace> const& table) {
  auto env = in.env;
  auto count = in.count;
  auto types = in.types;
  auto empty_row = in.empty_row;
  auto sel_offset = in.rows.sel_offset;
  int const ntypes = in.ntypes;
  bool const tos = in.type_one_side;
  long outside_total = 0;
  Kokkos::parallel_reduce(
      "dpk::descriptor::EmbeddingTable::count_outside",
      Kokkos::RangePolicy<ExecutionSpace>(space, 0, in.nloc * ntypes), KOKKOS_LAMBDA(int const p, long& sum) {
        int const i = p / ntypes, tj = p % ntypes, ti = types(i);
        int const k = EmbeddingRows<MemorySpace>::net_of(tos, ntypes, ti, tj);
        int const first = sel_offset(tj), n = count(i, tj);
        Scalar const lower = table.range(k, 0), max = table.range(k, 2);
        for (int j = 0; j < n; ++j) {
          Scalar const s = env(i, first + j, 0);
          if (!(s >= lower && s < max)) ++sum;
        }
        if (sel_offset(tj + 1) - first > n) {
          Scalar const s = empty_row(ti, tj, 0);
          if (!(s >= lower && s < max)) ++sum;
        }
      },
      outside_total);
  return outside_total;
}

}  // namespace dpk
