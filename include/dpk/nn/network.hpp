#pragma once
/// \file network.hpp
/// \brief A family of same-shaped MLPs (the embedding nets, or the per-type fitting nets) that
/// share one set of row buffers: each net owns a contiguous block of rows.

#include <dpk/core/error.hpp>
#include <dpk/nn/layer.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace dpk::nn {

/// Several networks with the same layer shapes (one per type or type pair), evaluated on row
/// blocks of shared buffers. Keeps every layer's values (and tangents) for the reverse pass.
template <class Scalar, class ExecutionSpace>
class NetworkFamily {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = MatrixView<Scalar, memory_space>;
  using Params = LayerParams<Scalar, memory_space>;

  NetworkFamily() = default;
  /// `shapes` of every net; `offsets[net][layer]` into the flat parameter buffer; `label` names allocations.
  NetworkFamily(std::vector<LayerShape> shapes, std::vector<std::vector<LayerOffsets>> offsets, std::string label)
      : shapes_(std::move(shapes)), offsets_(std::move(offsets)), label_(std::move(label)) {
    for (auto const& s : shapes_) width_max_ = std::max({width_max_, s.n_in, s.n_out});
  }

  /// Layer shapes (same for every net).
  std::vector<LayerShape> const& shapes() const { return shapes_; }
  /// Parameter offsets of net `net`.
  std::vector<LayerOffsets> const& offsets(int net) const { return offsets_[net]; }
  /// Number of nets.
  int num_nets() const { return static_cast<int>(offsets_.size()); }
  /// Number of layers per net.
  int num_layers() const { return static_cast<int>(shapes_.size()); }
  /// Width of the input and of the output.
  int n_input() const { return shapes_.front().n_in; }
  int n_output() const { return shapes_.back().n_out; }

  /// Makes room for `rows` rows (grows only); `tangents` also keeps tangent buffers.
  void reserve(std::size_t rows, bool tangents) {
    std::size_t const layers = shapes_.size();
    if (h_.size() != layers) {
      h_.resize(layers);
      out_.resize(layers);
      zt_.resize(layers);
      outt_.resize(layers);
      g1_.resize(layers);
      gz1_.resize(layers);
    }
    for (std::size_t l = 0; l < layers; ++l) {
      std::size_t const n = static_cast<std::size_t>(shapes_[l].n_out);
      grow(h_[l], rows * n, "h");
      grow(out_[l], rows * n, "out");
      if (tangents) {
        grow(zt_[l], rows * n, "zt");
        grow(outt_[l], rows * n, "outt");
        grow(g1_[l], rows * n, "first_order_cotangent");
        grow(gz1_[l], rows * n, "first_order_gz");
      }
    }
    std::size_t const flat = rows * static_cast<std::size_t>(width_max_);
    for (auto* v : {&g_a_, &g_b_, &gz_}) grow(*v, flat, "cotangent");
    if (tangents) {
      grow(product_, flat, "cotangent");
      std::size_t weights_max = 0;
      for (auto const& l : shapes_) weights_max = std::max(weights_max, std::size_t(l.n_in) * l.n_out);
      grow(partials_, std::size_t(std::max(0, ExecutionSpace().concurrency() - 1)) * weights_max, "weight_partials");
      if (ones_.extent(0) < rows) {
        grow(ones_, rows, "ones");
        Kokkos::deep_copy(ones_, Scalar(1));
      }
    }
  }

  /// Output of layer `l` on rows [r0, r1).
  Matrix out(int l, int r0, int r1) const { return rows_of(out_[l], shapes_[l].n_out, r0, r1); }
  /// Output tangent of layer `l` on rows [r0, r1).
  Matrix out_tangent(int l, int r0, int r1) const { return rows_of(outt_[l], shapes_[l].n_out, r0, r1); }
  /// Final output (values) on rows [r0, r1).
  Matrix output(int r0, int r1) const { return out(num_layers() - 1, r0, r1); }
  /// Final output tangent on rows [r0, r1).
  Matrix output_tangent(int r0, int r1) const { return out_tangent(num_layers() - 1, r0, r1); }

  /// Values of net `net` for input x0 (rows [r0, r1), width n_input()).
  void forward(ExecutionSpace const& space, Scalar* params, int net, Matrix x0, int r0, int r1) {
    for (int l = 0; l < num_layers(); ++l) {
      Matrix x = l == 0 ? x0 : out(l - 1, r0, r1);
      layer_forward(space, shapes_[l], param(params, net, l), x, rows_of(h_[l], shapes_[l].n_out, r0, r1),
                    out(l, r0, r1));
    }
  }

  /// Tangents of net `net` for the input tangent x0t (after forward on the same rows).
  void tangent(ExecutionSpace const& space, Scalar* params, int net, Matrix x0t, int r0, int r1) {
    for (int l = 0; l < num_layers(); ++l) {
      Matrix xt = l == 0 ? x0t : out_tangent(l - 1, r0, r1);
      int const n = shapes_[l].n_out;
      layer_tangent(space, shapes_[l], param(params, net, l), xt, rows_of(h_[l], n, r0, r1), rows_of(zt_[l], n, r0, r1),
                    out_tangent(l, r0, r1));
    }
  }

  /// d(output . g_out)/d(input): g_out (R, n_output()) -> g_in (R, n_input()). No parameter
  /// gradient. With tangent buffers reserved, every layer's cotangents are kept for reverse().
  void backward_input(ExecutionSpace const& space, Scalar* params, int net, int r0, int r1, Matrix g_out,
                      Matrix g_in) {
    int const rows = r1 - r0;
    bool const keep = g1_.size() == shapes_.size() && g1_.back().extent(0) > 0;
    Matrix g = g_out;
    for (int l = num_layers() - 1; l >= 0; --l) {
      LayerShape const& s = shapes_[l];
      Matrix gx = l == 0 ? g_in
                         : (keep ? rows_of(g1_[l - 1], s.n_in, r0, r1)
                                 : Matrix((l % 2 ? g_a_ : g_b_).data(), rows, s.n_in));
      Matrix gz = keep ? rows_of(gz1_[l], s.n_out, r0, r1) : Matrix(gz_.data(), rows, s.n_out);
      layer_backward_input(space, s, param(params, net, l), rows_of(h_[l], s.n_out, r0, r1), g, gz, gx);
      g = gx;
    }
  }

  /// Combined reverse pass of values and tangents (SPEC.md section 8) for net `net` on rows
  /// [r0, r1): value seed g_out (R, n_output()), tangent seed gt_out, which must be the seed
  /// of the backward_input() call made on these rows since the last forward (its per-layer
  /// cotangents are the tangent cotangents here). Accumulates parameter gradients into `grads`
  /// (same layout as params; `accumulate` false: overwrites this net's gradient instead); writes
  /// the input value cotangent g_in (R, n_input()) unless empty.
  void reverse(ExecutionSpace const& space, Scalar* params, Scalar* grads, int net, Matrix x0, Matrix x0t, int r0,
               int r1, Matrix g_out, Matrix gt_out, Matrix g_in, bool accumulate = true) {
    int const rows = r1 - r0;
    Matrix g = g_out;
    for (int l = num_layers() - 1; l >= 0; --l) {
      LayerShape const& s = shapes_[l];
      int const n = s.n_out;
      Matrix x = l == 0 ? x0 : out(l - 1, r0, r1);
      Matrix xt = l == 0 ? x0t : out_tangent(l - 1, r0, r1);
      Matrix gt = l == num_layers() - 1 ? gt_out : rows_of(g1_[l], n, r0, r1);
      Matrix gx = l == 0 ? g_in : Matrix((l % 2 ? g_a_ : g_b_).data(), rows, s.n_in);
      ReverseScratch<Scalar, memory_space> scratch{Matrix(gz_.data(), rows, n), Matrix(product_.data(), rows, n),
                                                   Matrix(ones_.data(), rows, 1), partials_};
      layer_reverse(space, s, param(params, net, l), param(grads, net, l), x, xt, rows_of(h_[l], n, r0, r1),
                    rows_of(zt_[l], n, r0, r1), g, gt, rows_of(gz1_[l], n, r0, r1), scratch, gx, accumulate);
      g = gx;
    }
  }

 private:
  Params param(Scalar* buffer, int net, int l) const { return Params::at(buffer, shapes_[l], offsets_[net][l]); }

  static Matrix rows_of(View1<Scalar, memory_space> const& v, int ncol, int r0, int r1) {
    return Matrix(v.data() + static_cast<std::size_t>(r0) * ncol, r1 - r0, ncol);
  }

  void grow(View1<Scalar, memory_space>& v, std::size_t n, char const* what) {
    if (v.extent(0) >= n) return;
    v = View1<Scalar, memory_space>();
    v = View1<Scalar, memory_space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "::" + what), n);
  }

  std::vector<LayerShape> shapes_;
  std::vector<std::vector<LayerOffsets>> offsets_;
  std::string label_;
  int width_max_ = 1;
  std::vector<View1<Scalar, memory_space>> h_, out_, zt_, outt_, g1_, gz1_;
  View1<Scalar, memory_space> g_a_, g_b_, gz_, product_, ones_, partials_;
};

}  // namespace dpk::nn
