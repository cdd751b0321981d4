#pragma once
/// \file layer.hpp
/// \brief One dense layer of DeePMD-kit's networks: value, forward-mode tangent, and the
/// combined reverse pass of SPEC.md section 8 (tanh or linear, identity/concat skips, timestep).
///
/// Every function works on a block of R rows (one network's rows) held in row-major
/// matrices; GEMMs go through dpk::blas::gemm, elementwise work is one fused Kokkos kernel.

#include <dpk/core/activation.hpp>
#include <dpk/core/compat.hpp>
#include <dpk/core/gemm.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/types.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace dpk::nn {

/// How a layer's input is added back to its output.
enum class Skip {
  none,      ///< out = act(x W + b)
  identity,  ///< out = x + [idt *] act(x W + b)          (n_out == n_in)
  concat     ///< out = [x, x] + [idt *] act(x W + b)     (n_out == 2 n_in)
};

/// Shape and rules of one layer.
struct LayerShape {
  int n_in = 0;
  int n_out = 0;
  bool tanh = true;       ///< false: linear output layer
  Skip skip = Skip::none;
  bool timestep = false;  ///< resnet_dt: a per-feature idt multiplies act(...)
};

/// Offsets of one layer's tensors in the flat parameter buffer (idt = npos when absent).
struct LayerOffsets {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t w = 0, b = 0, idt = npos;
};

/// DeePMD-kit's embedding net: input width 1, tanh layers of widths `neuron`; identity skip when a
/// width repeats, concat skip when it doubles, timesteps on skipped layers when resnet_dt.
inline std::vector<LayerShape> embedding_shapes(std::vector<int> const& neuron, bool resnet_dt) {
  std::vector<LayerShape> shapes;
  int n_in = 1;
  for (int n : neuron) {
    Skip skip = n == n_in ? Skip::identity : (n == 2 * n_in ? Skip::concat : Skip::none);
    shapes.push_back({n_in, n, true, skip, resnet_dt && skip != Skip::none});
    n_in = n;
  }
  return shapes;
}

/// DeePMD-kit's fitting net: tanh hidden layers (identity skip from the second layer on when
/// widths are equal, with timestep when resnet_dt), then a linear layer of width 1.
inline std::vector<LayerShape> fitting_shapes(int n_in, std::vector<int> const& neuron, bool resnet_dt) {
  std::vector<LayerShape> shapes;
  for (std::size_t l = 0; l < neuron.size(); ++l) {
    Skip skip = (l >= 1 && neuron[l] == n_in) ? Skip::identity : Skip::none;
    shapes.push_back({n_in, neuron[l], true, skip, resnet_dt && skip != Skip::none});
    n_in = neuron[l];
  }
  shapes.push_back({n_in, 1, false, Skip::none, false});
  return shapes;
}

/// A layer input whose first n x n columns hold a symmetric matrix, row-major: column a n + b
/// equals column b n + a bit for bit (the fitting nets' D = T^T T<, SPEC.md section 5: its first
/// M2 x M2 block). Inside one host thread the layer's products then run on the n (n + 1) / 2
/// distinct head columns with folded weights (W(a, b) + W(b, a)) and on the other columns in
/// place, which shortens every product's inner dimension (1600 -> 1480 for the water model); the
/// head's input cotangent goes to column a n + b, 0 to its mirror b n + a (the descriptor's
/// cotangent needs only their sum), and its weight gradient to both. Set by NetworkFamily
/// (set_symmetric_input_head) on a net's first layer on the chunked host path only.
template <class Scalar, class MemorySpace>
struct SymmetricHead {
  int n = 0;                    ///< head size (0: no head)
  int const* pairs = nullptr;   ///< [2 packed()]: column a n + b (a <= b) and its mirror b n + a
  MatrixView<Scalar, MemorySpace> folded;  ///< (packed(), n_out): W(a, b) + W(b, a), W(a, a) on the diagonal
  Scalar* scratch = nullptr;    ///< the calling thread's scratch: scratch_size(n, rows, n_out) scalars
  int packed() const { return n * (n + 1) / 2; }
  int columns() const { return n * n; }
  /// Scalars of scratch for products of `rows` rows and `n_out` output columns.
  static std::size_t scratch_size(int n, int rows, int n_out) {
    std::size_t const p = std::size_t(n) * (n + 1) / 2;
    return 2 * p * std::size_t(rows) + p * std::size_t(n_out);
  }
};

/// Parameter views of one layer, windows into the flat parameter (or gradient) buffer.
template <class Scalar, class MemorySpace>
struct LayerParams {
  MatrixView<Scalar, MemorySpace> w;  ///< (n_in, n_out)
  MatrixView<Scalar, MemorySpace> b;  ///< (1, n_out)
  MatrixView<Scalar, MemorySpace> idt;  ///< (1, n_out), or extent 0 when absent
  /// (n_out, n_in) = w^T for the backward passes' input cotangent gz w^T, or extent 0 (w is
  /// then read transposed). Host BLAS runs the plain product with the stored transpose 1.3-1.6x
  /// faster than the transposed one at the embedding nets' sizes (docs/performance.md).
  MatrixView<Scalar, MemorySpace> wt;
  /// The input's symmetric head (n 0: none; see SymmetricHead).
  SymmetricHead<Scalar, MemorySpace> head;

  /// Views into `buffer` at `offsets`.
  static LayerParams at(Scalar* buffer, LayerShape const& shape, LayerOffsets const& offsets) {
    LayerParams p;
    p.w = MatrixView<Scalar, MemorySpace>(buffer + offsets.w, shape.n_in, shape.n_out);
    p.b = MatrixView<Scalar, MemorySpace>(buffer + offsets.b, 1, shape.n_out);
    if (offsets.idt != LayerOffsets::npos)
      p.idt = MatrixView<Scalar, MemorySpace>(buffer + offsets.idt, 1, shape.n_out);
    return p;
  }
};

/// Branch-free timestep factor: scale(c) = idt(0, c) with a timestep, else exactly 1 (then it
/// reads b and multiplies by 0). Every load stays valid, so host loops vectorise without masks.
template <class Scalar, class MemorySpace>
struct TimestepScale {
  MatrixView<Scalar, MemorySpace> source;  ///< idt, or b when the layer has no timestep
  Scalar weight, offset;
  KOKKOS_INLINE_FUNCTION Scalar operator()(int c) const { return source(0, c) * weight + offset; }
};

/// The timestep factor of a layer with parameters `p`.
template <class Scalar, class MemorySpace>
TimestepScale<Scalar, MemorySpace> timestep_scale(LayerShape const& shape, LayerParams<Scalar, MemorySpace> const& p) {
  if (shape.timestep) return {p.idt, Scalar(1), Scalar(0)};
  return {p.b, Scalar(0), Scalar(1)};
}

namespace detail {

/// A range of a MatrixView's columns (rows keep their stride).
template <class Scalar, class MemorySpace>
using ColumnRange = decltype(Kokkos::subview(std::declval<MatrixView<Scalar, MemorySpace> const&>(), Kokkos::ALL(),
                                             std::declval<std::pair<int, int>>()));

/// Columns [first, extent) of `m`.
template <class Scalar, class MemorySpace>
ColumnRange<Scalar, MemorySpace> columns_from(MatrixView<Scalar, MemorySpace> const& m, int first) {
  return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(first, int(m.extent(1))));
}

/// Rows [first, extent) of `m`.
template <class Scalar, class MemorySpace>
MatrixView<Scalar, MemorySpace> rows_from(MatrixView<Scalar, MemorySpace> const& m, int first) {
  return MatrixView<Scalar, MemorySpace>(m.data() + std::size_t(first) * m.stride(0), m.extent(0) - first,
                                         m.extent(1));
}

/// packed(r, k) = x(r, column of distinct head entry k) in the calling host thread.
template <class Scalar, class MemorySpace>
void pack_head(SymmetricHead<Scalar, MemorySpace> const& head, MatrixView<Scalar, MemorySpace> x,
               MatrixView<Scalar, MemorySpace> packed) {
  int const rows = int(x.extent(0)), np = head.packed();
  for (int r = 0; r < rows; ++r) {
    Scalar const* const in = &x(r, 0);
    Scalar* const out = &packed(r, 0);
    for (int k = 0; k < np; ++k) out[k] = in[head.pairs[2 * k]];
  }
}

/// out = x W in the calling host thread for a layer whose input has a symmetric head: the other
/// columns against W's rows in place, then the packed head against the folded rows.
template <class Scalar, class MemorySpace>
void head_input_product(LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> x,
                        MatrixView<Scalar, MemorySpace> out) {
  SymmetricHead<Scalar, MemorySpace> const& head = p.head;
  int const rows = int(x.extent(0)), h = head.columns();
  blas::gemm(InThread{}, "N", "N", Scalar(1), columns_from(x, h), rows_from(p.w, h), Scalar(0), out);
  MatrixView<Scalar, MemorySpace> const packed(head.scratch, rows, head.packed());
  pack_head(head, x, packed);
  blas::gemm(InThread{}, "N", "N", Scalar(1), packed, head.folded, Scalar(1), out);
}

/// gx = beta gx + gz W^T in the calling host thread for a layer whose input has a symmetric head:
/// the other columns from W's rows in place; the head's from the folded rows, each distinct
/// entry's at column a n + b and 0 at its mirror b n + a.
template <class Scalar, class MemorySpace>
void head_input_cotangent(LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> gz, Scalar beta,
                          MatrixView<Scalar, MemorySpace> gx) {
  SymmetricHead<Scalar, MemorySpace> const& head = p.head;
  int const rows = int(gz.extent(0)), h = head.columns(), np = head.packed();
  blas::gemm(InThread{}, "N", "T", Scalar(1), gz, rows_from(p.w, h), beta, columns_from(gx, h));
  MatrixView<Scalar, MemorySpace> const packed(head.scratch, rows, np);
  blas::gemm(InThread{}, "N", "T", Scalar(1), gz, head.folded, Scalar(0), packed);
  for (int r = 0; r < rows; ++r) {
    Scalar* const out = &gx(r, 0);
    Scalar const* const in = &packed(r, 0);
    for (int k = 0; k < np; ++k) {
      int const at = head.pairs[2 * k], mirror = head.pairs[2 * k + 1];
      if (beta == Scalar(0)) {
        out[at] = in[k];
        if (mirror != at) out[mirror] = Scalar(0);
      } else {
        out[at] = beta * out[at] + in[k];
        if (mirror != at) out[mirror] = beta * out[mirror];
      }
    }
  }
}

/// dW = beta dW + x^T gz + xt^T gzt in the calling host thread for a layer whose input has a
/// symmetric head (xt may be empty): the other rows of dW in place; the head's rows summed once
/// per distinct entry (packed inputs) and written to both rows a n + b and b n + a.
template <class Scalar, class MemorySpace>
void head_weight_gradient(LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> x,
                          MatrixView<Scalar, MemorySpace> gz, MatrixView<Scalar, MemorySpace> xt,
                          MatrixView<Scalar, MemorySpace> gzt, Scalar beta, MatrixView<Scalar, MemorySpace> dw,
                          View1<Scalar, MemorySpace> const& partials) {
  using Matrix = MatrixView<Scalar, MemorySpace>;
  SymmetricHead<Scalar, MemorySpace> const& head = p.head;
  int const rows = int(x.extent(0)), h = head.columns(), np = head.packed(), n_out = int(dw.extent(1));
  bool const two = xt.extent(0) > 0;
  ColumnRange<Scalar, MemorySpace> const x_rest = columns_from(x, h);
  ColumnRange<Scalar, MemorySpace> const xt_rest = two ? columns_from(xt, h) : ColumnRange<Scalar, MemorySpace>();
  blas::gemm_tn_sum(InThread{}, Scalar(1), x_rest, gz, xt_rest, gzt, beta, rows_from(dw, h), partials);
  Matrix const packed(head.scratch, rows, np);
  Matrix const packed_t = two ? Matrix(head.scratch + std::size_t(rows) * np, rows, np) : Matrix();
  Matrix const sum(head.scratch + 2 * std::size_t(rows) * np, np, n_out);
  pack_head(head, x, packed);
  if (two) pack_head(head, xt, packed_t);
  blas::gemm_tn_sum(InThread{}, Scalar(1), packed, gz, packed_t, two ? gzt : Matrix(), Scalar(0), sum, partials);
  for (int k = 0; k < np; ++k) {
    Scalar const* const in = &sum(k, 0);
    for (int mirror = 0; mirror < 2; ++mirror) {
      if (mirror && head.pairs[2 * k + 1] == head.pairs[2 * k]) break;
      Scalar* const out = &dw(head.pairs[2 * k + mirror], 0);
      if (beta == Scalar(0)) {
        DPK_SIMD_LOOP
        for (int c = 0; c < n_out; ++c) out[c] = in[c];
      } else {
        DPK_SIMD_LOOP
        for (int c = 0; c < n_out; ++c) out[c] = beta * out[c] + in[c];
      }
    }
  }
}

// The three products below go through the input's symmetric head only inside one host thread
// (the head's scratch is the calling thread's): each checks the space at compile time, so that
// no other space instantiates the head code, and then whether the layer has a head (p.head.n).

/// out = x W (z of a layer with an input of several columns), through the input's symmetric
/// head where the layer has one (head_input_product).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void input_product(ExecutionSpace const& space, LayerParams<Scalar, MemorySpace> const& p,
                   MatrixView<Scalar, MemorySpace> x, MatrixView<Scalar, MemorySpace> out) {
  if constexpr (std::is_same_v<ExecutionSpace, InThread>) {
    if (p.head.n > 0) return head_input_product(p, x, out);
  }
  blas::gemm(space, "N", "N", Scalar(1), x, p.w, Scalar(0), out);
}

/// dW = beta dW + x^T gz + xt^T gzt (the layer's weight gradient over both pairs), through the
/// input's symmetric head where the layer has one (head_weight_gradient).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void weight_gradient(ExecutionSpace const& space, LayerParams<Scalar, MemorySpace> const& p,
                     MatrixView<Scalar, MemorySpace> x, MatrixView<Scalar, MemorySpace> gz,
                     MatrixView<Scalar, MemorySpace> xt, MatrixView<Scalar, MemorySpace> gzt, Scalar beta,
                     MatrixView<Scalar, MemorySpace> dw, View1<Scalar, MemorySpace> const& partials) {
  if constexpr (std::is_same_v<ExecutionSpace, InThread>) {
    if (p.head.n > 0) return head_weight_gradient(p, x, gz, xt, gzt, beta, dw, partials);
  }
  blas::gemm_tn_sum(space, Scalar(1), x, gz, xt, gzt, beta, dw, partials);
}

/// gx = beta gx + gz w^T, through the stored transpose p.wt when the layer has one, or through
/// the input's symmetric head (head_input_cotangent).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void add_input_cotangent(ExecutionSpace const& space, LayerParams<Scalar, MemorySpace> const& p,
                         MatrixView<Scalar, MemorySpace> gz, Scalar beta, MatrixView<Scalar, MemorySpace> gx) {
  if constexpr (std::is_same_v<ExecutionSpace, InThread>) {
    if (p.head.n > 0) return head_input_cotangent(p, gz, beta, gx);
  }
  if (p.wt.extent(0) > 0)
    blas::gemm(space, "N", "N", Scalar(1), gz, p.wt, beta, gx);
  else
    blas::gemm(space, "N", "T", Scalar(1), gz, p.w, beta, gx);
}

/// The fused elementwise part of a tanh layer, specialised at compile time on the input
/// (RankOne: z = x(r,0) w(0,c) computed here, else z already in `acc` from the GEMM) and on the
/// skip rule, so that the body has no runtime selects and host loops vectorise.
/// Tangent = false: h = tanh(z + b); out = scale h + skip(x).
/// Tangent = true:  zt = z'; out' = scale (1 - h^2) z' + skip(x').
template <class Scalar, class MemorySpace, bool Tangent, bool RankOne, Skip SkipRule>
struct DenseTanhKernel {
  MatrixView<Scalar, MemorySpace> x, w, b, h, acc, out;  ///< acc: z (values) or zt (tangents)
  TimestepScale<Scalar, MemorySpace> scale;
  int n_in;

  /// z (or z') of element (r, c): computed for a rank-one input, else the GEMM's result in acc.
  KOKKOS_INLINE_FUNCTION Scalar product(int const r, int const c) const {
    if constexpr (RankOne) {
      return x(r, 0) * w(0, c);
    } else {
      return acc(r, c);
    }
  }

  /// o plus the skip rule's input term of element (r, c).
  KOKKOS_INLINE_FUNCTION Scalar add_skip(int const r, int const c, Scalar o) const {
    if constexpr (SkipRule == Skip::identity) o += x(r, c);
    if constexpr (SkipRule == Skip::concat) o += x(r, c < n_in ? c : c - n_in);
    return o;
  }

  KOKKOS_INLINE_FUNCTION void operator()(int const r, int const c) const {
    Scalar const z = product(r, c);
    if constexpr (Tangent) {
      if constexpr (RankOne) acc(r, c) = z;  // else z' is already there (from the GEMM)
      tangent_output(r, c, z);
    } else {
      h(r, c) = math::activation_tanh(z + b(0, c));
      value_output(r, c);
    }
  }

  /// out = scale h + skip(x) from the stored h (the forward pass's last step; also recomputes a
  /// layer output that a chunked pass did not keep, with the same bits).
  KOKKOS_INLINE_FUNCTION void value_output(int const r, int const c) const {
    out(r, c) = add_skip(r, c, scale(c) * h(r, c));
  }

  /// out' = scale (1 - h^2) z' + skip(x') (the tangent pass's last step, and its recomputation).
  KOKKOS_INLINE_FUNCTION void tangent_output(int const r, int const c, Scalar const z) const {
    Scalar const t = h(r, c);
    out(r, c) = add_skip(r, c, scale(c) * ((Scalar(1) - t * t) * z));
  }
};

/// The rows x cols matrix `m` (rows stored back to back: see all_contiguous) as one row of
/// rows * cols values, so that an elementwise loop over it has one remainder instead of one per
/// row; an empty `m` stays empty.
template <class Scalar, class MemorySpace>
MatrixView<Scalar, MemorySpace> as_one_row(MatrixView<Scalar, MemorySpace> const& m, int rows, int cols) {
  if (m.extent(0) == 0) return m;
  return MatrixView<Scalar, MemorySpace>(m.data(), 1, std::size_t(rows) * std::size_t(cols));
}

/// True when every non-empty matrix in `ms` is rows x cols with rows stored back to back.
template <class... Matrices>
bool all_contiguous(int rows, int cols, Matrices const&... ms) {
  auto ok = [&](auto const& m) {
    return m.extent(0) == 0 || (int(m.extent(0)) == rows && int(m.extent(1)) == cols &&
                                (rows <= 1 || m.stride(0) == std::size_t(cols)));
  };
  return (ok(ms) && ...);
}

/// The forward tanh layer inside one host thread (a chunk of the chunked passes), in three
/// loops with the same arithmetic as DenseTanhKernel<false>: z + b per row, tanh over the chunk
/// as one flat loop (rows of 25, 50 or 100 columns would each end in a scalar remainder of the
/// costly tanh), then scale h + skip(x) per row.
template <class Scalar, class MemorySpace, bool RankOne, Skip SkipRule>
void dense_tanh_in_thread(DenseTanhKernel<Scalar, MemorySpace, false, RankOne, SkipRule> const& k, int rows,
                          int cols) {
  for_each_element(InThread{}, "", rows, cols,
                   [=](int const r, int const c) { k.acc(r, c) = k.product(r, c) + k.b(0, c); });
  Scalar const* const z = k.acc.data();
  Scalar* const h = k.h.data();
  math::tanh_host_span(z, h, std::size_t(rows) * std::size_t(cols));
  for_each_element(InThread{}, "", rows, cols, [=](int const r, int const c) { k.value_output(r, c); });
}

/// Calls f(rank_one, skip) with the compile-time flags of `shape` (std::bool_constant, and an
/// integral constant of Skip).
template <class F>
void with_tanh_flags(LayerShape const& shape, F&& f) {
  using One = std::true_type;
  using Many = std::false_type;
  using None = std::integral_constant<Skip, Skip::none>;
  using Identity = std::integral_constant<Skip, Skip::identity>;
  using Concat = std::integral_constant<Skip, Skip::concat>;
  bool const rank_one = shape.n_in == 1;
  switch (shape.skip) {
    case Skip::none: return rank_one ? f(One{}, None{}) : f(Many{}, None{});
    case Skip::identity: return rank_one ? f(One{}, Identity{}) : f(Many{}, Identity{});
    case Skip::concat: return rank_one ? f(One{}, Concat{}) : f(Many{}, Concat{});
  }
}

/// Runs DenseTanhKernel with the flags of `shape` (x: layer input value or tangent).
template <bool Tangent, class ExecutionSpace, class Scalar, class MemorySpace>
void run_dense_tanh(ExecutionSpace const& space, char const* label, LayerShape const& shape,
                    LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> x,
                    MatrixView<Scalar, MemorySpace> h, MatrixView<Scalar, MemorySpace> acc,
                    MatrixView<Scalar, MemorySpace> out) {
  int const rows = static_cast<int>(x.extent(0));
  with_tanh_flags(shape, [&](auto rank_one, auto skip) {
    DenseTanhKernel<Scalar, MemorySpace, Tangent, decltype(rank_one)::value, decltype(skip)::value> kernel{
        x, p.w, p.b, h, acc, out, timestep_scale(shape, p), shape.n_in};
    if constexpr (!Tangent && std::is_same_v<ExecutionSpace, InThread>) {
      if (all_contiguous(rows, shape.n_out, h, acc)) return dense_tanh_in_thread(kernel, rows, shape.n_out);
    }
    for_each_element(space, label, rows, shape.n_out, kernel);
  });
}

}  // namespace detail

/// Forward values: h = act(x W + b); out = skip(x) + [idt *] h. `out` doubles as the z buffer.
/// x: (R, n_in), h and out: (R, n_out). For a linear layer h is not written.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void layer_forward(ExecutionSpace const& space, LayerShape const& shape,
                   LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> x,
                   MatrixView<Scalar, MemorySpace> h, MatrixView<Scalar, MemorySpace> out) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const rows = static_cast<int>(x.extent(0));
  if (rows == 0) return;
  int const n_in = shape.n_in, n_out = shape.n_out;
  bool const rank_one = n_in == 1;
  if (!rank_one) detail::input_product(space, p, x, out);
  auto w = p.w;
  auto b = p.b;
  if (!shape.tanh) {
    for_each_element(space, "dpk::nn::Dense::forward_linear", rows, n_out, KOKKOS_LAMBDA(int const r, int const c) {
          out(r, c) = (rank_one ? x(r, 0) * w(0, c) : out(r, c)) + b(0, c);
        });
    return;
  }
  detail::run_dense_tanh<false>(space, "dpk::nn::Dense::forward", shape, p, x, h, out, out);
}

/// Forward tangent: z' = x' W; out' = skip(x') + [idt *] (1 - h^2) z'. For a linear layer
/// out' = z'. x': (R, n_in); zt, outt: (R, n_out). `zt` is kept for the reverse pass.
template <class ExecutionSpace, class Scalar, class MemorySpace>
void layer_tangent(ExecutionSpace const& space, LayerShape const& shape, LayerParams<Scalar, MemorySpace> const& p,
                   MatrixView<Scalar, MemorySpace> xt, MatrixView<Scalar, MemorySpace> h,
                   MatrixView<Scalar, MemorySpace> zt, MatrixView<Scalar, MemorySpace> outt) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const rows = static_cast<int>(xt.extent(0));
  if (rows == 0) return;
  int const n_in = shape.n_in, n_out = shape.n_out;
  bool const rank_one = n_in == 1;
  if (!rank_one) detail::input_product(space, p, xt, zt);
  auto w = p.w;
  if (!shape.tanh) {
    for_each_element(space, "dpk::nn::Dense::tangent_linear", rows, n_out, KOKKOS_LAMBDA(int const r, int const c) {
          Scalar const z = rank_one ? xt(r, 0) * w(0, c) : zt(r, c);
          zt(r, c) = z;
          outt(r, c) = z;
        });
    return;
  }
  detail::run_dense_tanh<true>(space, "dpk::nn::Dense::tangent", shape, p, xt, h, zt, outt);
}

/// A tanh layer's output value and tangent, out = skip(x) + [idt *] h and out' = skip(x') +
/// [idt *] (1 - h^2) z', from its stored h and z' and its inputs x, x', inside one host thread,
/// with the expressions of layer_forward and layer_tangent (the same bits): for the chunked
/// reverse pass, whose forward and tangent passes did not keep them. x, x': (R, n_in).
template <class Scalar, class MemorySpace>
void layer_outputs_in_thread(LayerShape const& shape, LayerParams<Scalar, MemorySpace> const& p,
                             MatrixView<Scalar, MemorySpace> x, MatrixView<Scalar, MemorySpace> xt,
                             MatrixView<Scalar, MemorySpace> h, MatrixView<Scalar, MemorySpace> zt,
                             MatrixView<Scalar, MemorySpace> out, MatrixView<Scalar, MemorySpace> outt) {
  int const rows = static_cast<int>(h.extent(0));
  detail::with_tanh_flags(shape, [&](auto, auto skip) {
    constexpr Skip rule = decltype(skip)::value;
    auto const scale = timestep_scale(shape, p);
    detail::DenseTanhKernel<Scalar, MemorySpace, false, false, rule> const value{x, p.w, p.b, h, zt, out, scale, shape.n_in};
    detail::DenseTanhKernel<Scalar, MemorySpace, true, false, rule> const tangent{xt, p.w, p.b, h, zt, outt, scale, shape.n_in};
    for_each_element(InThread{}, "", rows, shape.n_out, [=](int const r, int const c) {
      value.value_output(r, c);
      tangent.tangent_output(r, c, tangent.acc(r, c));
    });
  });
}

namespace detail {

/// The fused elementwise part of a tanh layer's backward pass, specialised at compile time.
/// Reverse = false (first-order): gz = scale g (1 - h^2).
/// Reverse = true (combined pass, SPEC.md section 8): gz = (scale g - 2 h z' scale g') (1 - h^2),
/// the tangent cotangent gzt = scale g' (1 - h^2) (the first-order pass's gz for the seed g', the
/// same expression: bit for bit) and, with a timestep, product = h g + (1 - h^2) z' g'.
/// With a skip rule the same pass also writes gx = skip(g) (R, n_in), which the following GEMM
/// accumulates into; it then runs over n_in columns and covers column c + n_in too (concat).
template <class Scalar, class MemorySpace, bool Reverse, bool Timestep, Skip SkipRule>
struct DenseCotangentKernel {
  MatrixView<Scalar, MemorySpace> h, g, gt, zt, gz, product, gx, gzt;
  TimestepScale<Scalar, MemorySpace> scale;
  int n_in;

  KOKKOS_INLINE_FUNCTION void column(int const r, int const k) const {
    Scalar const t = h(r, k);
    Scalar const d = Scalar(1) - t * t;
    Scalar const sc = scale(k);
    if constexpr (Reverse) {
      Scalar const z_t = zt(r, k);
      gz(r, k) = (sc * g(r, k) - Scalar(2) * t * z_t * sc * gt(r, k)) * d;
      gzt(r, k) = sc * gt(r, k) * d;
      if constexpr (Timestep) product(r, k) = t * g(r, k) + d * z_t * gt(r, k);
    } else {
      gz(r, k) = sc * g(r, k) * d;
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(int const r, int const c) const {
    column(r, c);
    if constexpr (SkipRule == Skip::identity) gx(r, c) = g(r, c);
    if constexpr (SkipRule == Skip::concat) {
      column(r, c + n_in);
      gx(r, c) = g(r, c) + g(r, c + n_in);
    }
  }
};

/// Runs DenseCotangentKernel for `shape`; writes gx = skip(g) when `gx` is non-empty. Returns the
/// beta of the GEMM that adds gz W^T into gx (1 when the skip was written, else 0).
template <bool Reverse, class ExecutionSpace, class Scalar, class MemorySpace>
Scalar run_dense_cotangent(ExecutionSpace const& space, char const* label, LayerShape const& shape,
                           LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> h,
                           MatrixView<Scalar, MemorySpace> g, MatrixView<Scalar, MemorySpace> gt,
                           MatrixView<Scalar, MemorySpace> zt, MatrixView<Scalar, MemorySpace> gz,
                           MatrixView<Scalar, MemorySpace> product, MatrixView<Scalar, MemorySpace> gx,
                           MatrixView<Scalar, MemorySpace> gzt = {}) {
  int const rows = static_cast<int>(g.extent(0));
  Skip const skip = gx.extent(0) > 0 ? shape.skip : Skip::none;
  if constexpr (std::is_same_v<ExecutionSpace, InThread>) {
    // Inside a host thread, no skip written here and no timestep (the scale is then exactly 1:
    // columns play no part): the kernel as one flat loop over the chunk, same arithmetic, one
    // loop remainder instead of one per row. (With a concat skip the fused kernel measured
    // faster than a flat loop plus a separate skip pass in float64.)
    if (skip == Skip::none && !shape.timestep && all_contiguous(rows, shape.n_out, h, g, gt, zt, gz, gzt)) {
      int const n = shape.n_out;
      auto flat = [&](MatrixView<Scalar, MemorySpace> const& m) { return as_one_row(m, rows, n); };
      MatrixView<Scalar, MemorySpace> none;
      auto const hf = flat(h);  // a valid load of finite values for the unit scale (times 0, plus 1)
      DenseCotangentKernel<Scalar, MemorySpace, Reverse, false, Skip::none> kernel{
          hf, flat(g), flat(gt), flat(zt), flat(gz), none, none, flat(gzt), {hf, Scalar(0), Scalar(1)}, shape.n_in};
      for_each_element(space, label, 1, rows * n, kernel);
      return Scalar(0);
    }
  }
  auto launch = [&](auto timestep, auto rule) {
    constexpr Skip rule_v = decltype(rule)::value;
    DenseCotangentKernel<Scalar, MemorySpace, Reverse, decltype(timestep)::value, rule_v> kernel{
        h, g, gt, zt, gz, product, gx, gzt, timestep_scale(shape, p), shape.n_in};
    for_each_element(space, label, rows, rule_v == Skip::concat ? shape.n_in : shape.n_out, kernel);
  };
  using None = std::integral_constant<Skip, Skip::none>;
  using Identity = std::integral_constant<Skip, Skip::identity>;
  using Concat = std::integral_constant<Skip, Skip::concat>;
  bool const timestep = Reverse && shape.timestep;  // the first-order pass folds idt into scale
  switch (skip) {
    case Skip::none: timestep ? launch(std::true_type{}, None{}) : launch(std::false_type{}, None{}); break;
    case Skip::identity:
      timestep ? launch(std::true_type{}, Identity{}) : launch(std::false_type{}, Identity{});
      break;
    case Skip::concat: timestep ? launch(std::true_type{}, Concat{}) : launch(std::false_type{}, Concat{}); break;
  }
  return skip == Skip::none ? Scalar(0) : Scalar(1);
}

}  // namespace detail

/// Writes skip(g) into gx (R, n_in): gx[c] = g[c] (identity) or g[c] + g[c + n_in] (concat).
/// Returns the beta the following GEMM must use (1 when something was written, else 0).
template <class ExecutionSpace, class Scalar, class MemorySpace>
Scalar layer_skip_cotangent(ExecutionSpace const& space, LayerShape const& shape, MatrixView<Scalar, MemorySpace> g,
                            MatrixView<Scalar, MemorySpace> gx) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  if (shape.skip == Skip::none) return Scalar(0);
  int const rows = static_cast<int>(g.extent(0));
  int const n_in = shape.n_in;
  bool const concat = shape.skip == Skip::concat;
  for_each_element(space, "dpk::nn::Dense::skip", rows, n_in, KOKKOS_LAMBDA(int const r, int const c) {
        gx(r, c) = concat ? g(r, c) + g(r, c + n_in) : g(r, c);
      });
  return Scalar(1);
}

/// First-order backward to the input only (forces): gz = [idt *] g (1 - h^2); gx = gz W^T + skip(g).
/// g: (R, n_out) output cotangent, gz: (R, n_out) scratch, gx: (R, n_in).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void layer_backward_input(ExecutionSpace const& space, LayerShape const& shape,
                          LayerParams<Scalar, MemorySpace> const& p, MatrixView<Scalar, MemorySpace> h,
                          MatrixView<Scalar, MemorySpace> g, MatrixView<Scalar, MemorySpace> gz,
                          MatrixView<Scalar, MemorySpace> gx) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const rows = static_cast<int>(g.extent(0));
  if (rows == 0) return;
  if (!shape.tanh) {
    Scalar const beta = layer_skip_cotangent(space, shape, g, gx);
    detail::add_input_cotangent(space, p, g, beta, gx);
    return;
  }
  MatrixView<Scalar, MemorySpace> none;
  Scalar const beta =
      detail::run_dense_cotangent<false>(space, "dpk::nn::Dense::backward_input", shape, p, h, g, none, none, gz, none, gx);
  detail::add_input_cotangent(space, p, gz, beta, gx);
}

namespace detail {
/// m = 0 elementwise (nothing for an empty matrix).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void fill_zero(ExecutionSpace const& space, MatrixView<Scalar, MemorySpace> m) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  for_each_element(space, "dpk::nn::Dense::zero", int(m.extent(0)), int(m.extent(1)),
                   KOKKOS_LAMBDA(int const r, int const c) { m(r, c) = Scalar(0); });
}
}  // namespace detail

/// Scratch of the reverse pass: gz, gzt and product (R, n_out), ones (R, 1) filled with 1, and
/// per-thread partial sums of the weight gradient (see blas::gemm_tn_sum).
template <class Scalar, class MemorySpace>
struct ReverseScratch {
  MatrixView<Scalar, MemorySpace> gz, gzt, product, ones;
  View1<Scalar, MemorySpace> partials;
};

/// Combined reverse pass over values and tangents (SPEC.md section 8) for one layer.
/// Inputs: x, xt (R, n_in) the layer's input value/tangent; h, zt (R, n_out) from the forward
/// and tangent passes; g, gt (R, n_out) the output cotangents. Accumulates (+=, or writes when
/// `accumulate` is false) dW, db, didt into `grad`; writes gx (R, n_in) unless empty.
/// The tangent cotangents follow the same linear recursion as the first-order backward pass
/// (layer_backward_input) when seeded alike, so the caller passes that pass's output cotangent
/// of this layer as `gt` and keeps its input cotangent as the next layer's: no GEMM is spent on
/// it here (its gz, gzt here, is recomputed from gt and h in the elementwise pass).
template <class ExecutionSpace, class Scalar, class MemorySpace>
void layer_reverse(ExecutionSpace const& space, LayerShape const& shape, LayerParams<Scalar, MemorySpace> const& p,
                   LayerParams<Scalar, MemorySpace> const& grad, MatrixView<Scalar, MemorySpace> x,
                   MatrixView<Scalar, MemorySpace> xt, MatrixView<Scalar, MemorySpace> h,
                   MatrixView<Scalar, MemorySpace> zt, MatrixView<Scalar, MemorySpace> g,
                   MatrixView<Scalar, MemorySpace> gt, ReverseScratch<Scalar, MemorySpace> const& scratch,
                   MatrixView<Scalar, MemorySpace> gx, bool accumulate = true) {
  static_assert(accessible_v<ExecutionSpace, MemorySpace>, DPK_ACCESSIBLE_MESSAGE);
  int const rows = static_cast<int>(g.extent(0));
  if (rows == 0) {  // an empty sum: the gradient is zero unless accumulating
    if (!accumulate) {
      detail::fill_zero(space, grad.w);
      detail::fill_zero(space, grad.b);
      detail::fill_zero(space, grad.idt);
    }
    return;
  }
  bool const act = shape.tanh, has_idt = shape.timestep;
  auto gz = scratch.gz, product = scratch.product;
  // Unlike the first-order pass, the skip is not fused here: the fused concat variant of this
  // wider kernel measured slower (6.7-7.1 vs 4.9 ms per step, double, 2 threads).
  MatrixView<Scalar, MemorySpace> none;  // empty: no skip written here, no second pair below
  if (act)
    detail::run_dense_cotangent<true>(space, "dpk::nn::Dense::reverse", shape, p, h, g, gt, zt, gz, product, none,
                                      scratch.gzt);
  auto const& gz_use = act ? gz : g;
  auto const& gzt_use = act ? scratch.gzt : gt;
  MatrixView<Scalar, MemorySpace> ones_r(scratch.ones.data(), rows, 1);
  // dW += x^T gz + x'^T gz';  db += 1^T gz;  didt += 1^T (h g + h' g')
  Scalar const beta = accumulate ? Scalar(1) : Scalar(0);
  detail::weight_gradient(space, p, x, gz_use, xt, gzt_use, beta, grad.w, scratch.partials);
  blas::gemm_tn_sum(space, Scalar(1), ones_r, gz_use, none, none, beta, grad.b, scratch.partials);
  if (has_idt) blas::gemm_tn_sum(space, Scalar(1), ones_r, product, none, none, beta, grad.idt, scratch.partials);
  if (gx.extent(0) > 0) {
    Scalar const gx_beta = layer_skip_cotangent(space, shape, g, gx);
    detail::add_input_cotangent(space, p, gz_use, gx_beta, gx);
  }
}

}  // namespace dpk::nn
