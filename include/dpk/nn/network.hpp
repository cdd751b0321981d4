#pragma once
/// \file network.hpp
/// \brief A family of same-shaped MLPs (the embedding nets, or the per-type fitting nets) that
/// share one set of row buffers: each net owns a contiguous block of rows.

#include <dpk/core/error.hpp>
#include <dpk/core/for_each.hpp>
#include <dpk/core/home_ranges.hpp>
#include <dpk/core/types.hpp>
#include <dpk/nn/layer.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace dpk::nn {

/// Rows [begin, end) of a family's shared buffers, evaluated by net `net`.
struct RowBlock {
  int net = 0, begin = 0, end = 0;
};

/// Several networks with the same layer shapes (one per type or type pair), evaluated on row
/// blocks of shared buffers. Keeps every layer's values (and tangents) for the reverse pass;
/// on the chunked host path the inner layers' outputs are recomputed instead (inner_in_scratch).
template <class Scalar, class ExecutionSpace>
class NetworkFamily {
 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using Matrix = MatrixView<Scalar, memory_space>;
  using Params = LayerParams<Scalar, memory_space>;
  /// Writes rows [r0, r1) of a pass's output-side seed into `out` (r1 - r0, n_output()) from
  /// inside a host thread: lets the chunked host path make each chunk's seed when it needs it
  /// instead of reading a whole-batch seed matrix (see backward_input_blocks, reverse_blocks).
  using Seed = std::function<void(int r0, int r1, Matrix out)>;
  /// Receives a chunk's final output rows [r0, r1) of net `net` (`out`: r1 - r0, n_output())
  /// inside a host thread right after the chunk's pass, while they are in cache (see
  /// forward_blocks, tangent_blocks). Chunks of one block come in row order from one thread;
  /// different blocks may run at the same time.
  using Sink = std::function<void(int net, int r0, int r1, Matrix out)>;

  NetworkFamily() = default;
  /// `shapes` of every net; `offsets[net][layer]` into the flat parameter buffer; `label` names allocations.
  NetworkFamily(std::vector<LayerShape> shapes, std::vector<std::vector<LayerOffsets>> offsets, std::string label)
      : shapes_(std::move(shapes)), offsets_(std::move(offsets)), label_(std::move(label)) {
    for (auto const& s : shapes_) width_max_ = std::max({width_max_, s.n_in, s.n_out});
    inner_tanh_ = !shapes_.empty();
    for (std::size_t l = 0; l + 1 < shapes_.size(); ++l) {
      inner_offset_.push_back(inner_width_);
      inner_width_ += shapes_[l].n_out;
      inner_tanh_ = inner_tanh_ && shapes_[l].tanh;
    }
    std::size_t at = 0;
    transposed_offset_.assign(offsets_.size(), std::vector<std::size_t>(shapes_.size()));
    for (auto& net : transposed_offset_)
      for (std::size_t l = 0; l < shapes_.size(); ++l) {
        net[l] = at;
        at += std::size_t(shapes_[l].n_in) * shapes_[l].n_out;
      }
    transposed_size_ = at;
    transposed_from_.assign(offsets_.size(), nullptr);
    folded_from_.assign(offsets_.size(), nullptr);
    named_.assign(offsets_.size(), 0);
  }

  /// On host spaces, the *_blocks passes hand the blocks out to the threads one at a time, each
  /// thread first from its own range of blocks, the same in every pass (a thread that finishes
  /// early takes blocks from the others' ranges: a core shared with another job slows the pass by
  /// its share only; see for_each_chunk) and run each block in chunks of `rows` rows through
  /// every layer (single-threaded GEMMs and elementwise loops), so a chunk's activations stay in
  /// cache between layers. Weight gradients are summed per block and the block sums added in
  /// block order: the result depends on the blocks, not on which thread ran which, so give these
  /// passes a few blocks per thread (the descriptor's embedding_parts), or one block per thread
  /// of rows a chunk each (the fitting nets, FittingStage::reserve). 0 (the default) runs each
  /// layer over all rows of a net at once, the GEMMs split over the threads (the fitting nets
  /// when each thread would get fewer than 64 rows). Device spaces always run layer by layer.
  void set_host_chunk_rows(int rows) { chunk_rows_ = std::max(0, rows); }
  int host_chunk_rows() const { return chunk_rows_; }

  /// Whether the chunked host path keeps a transposed copy of the weights for its backward
  /// passes (on by default: the embedding nets' small products gain from it). Off for nets whose
  /// weights cost more to transpose at every forward pass than the backward products gain (the
  /// fitting nets' 1600 x 240).
  void set_transposed_weights(bool on) {
    transposed_weights_ = on;
    std::fill(transposed_from_.begin(), transposed_from_.end(), nullptr);
  }

  /// The input's first n x n columns hold a symmetric matrix, row-major (see SymmetricHead; the
  /// fitting nets' D: n = M2). On the chunked host path the first layer's products then run on
  /// its n (n + 1) / 2 distinct columns with weights folded at each forward pass (W(a, b) +
  /// W(b, a)) and on the other columns in place: equal to the full products up to rounding, with
  /// the head's input cotangent all at column a n + b (0 at b n + a). 0 (the default): none.
  /// Call reserve() after changing it.
  void set_symmetric_input_head(int n) {
    require(n >= 0 && std::size_t(n) * n <= std::size_t(n_input()),
            "nn::NetworkFamily::set_symmetric_input_head: the head must fit in the input's columns");
    head_n_ = n;
    head_pairs_.clear();
    for (int a = 0; a < n; ++a)
      for (int b = a; b < n; ++b) {
        head_pairs_.push_back(a * n + b);
        head_pairs_.push_back(b * n + a);
      }
    std::fill(folded_from_.begin(), folded_from_.end(), nullptr);
  }
  int symmetric_input_head() const { return head_n_; }

  /// Unit input tangents, for nets with one input column on the chunked host path (the
  /// descriptor's embedding nets; see unit_tangents()). forward_blocks(..., tangents = true) then
  /// also runs the tangent layers for the input tangent 1 while each chunk is in cache, keeping
  /// z' per unit input and the output's derivative dout/dx0. Every later input tangent x0t is a
  /// per-row multiple of that one, so tangent_blocks only scales it (out' = x0t dout/dx0),
  /// backward_input_blocks takes one dot product per row (g_in = g . dout/dx0) instead of a pass
  /// through the layers, and reverse_blocks folds x0t into the tangent seed and carries the
  /// tangent cotangents down itself (one input-cotangent product more per layer) instead of
  /// reading the first-order pass's. Equal to the layer-by-layer passes up to rounding; two fewer
  /// passes over the per-layer buffers. Call reserve() after changing it.
  void set_unit_input_tangents(bool on) {
    unit_input_tangents_ = on;
    unit_ready_ = false;
  }
  bool unit_input_tangents() const { return unit_input_tangents_; }
  /// True while the passes use the unit input tangents of the last forward_blocks (host only).
  bool unit_tangents() const { return unit_ready_; }
  /// dout/dx0 on rows [r0, r1) from the last forward_blocks (valid while unit_tangents()).
  Matrix output_derivative(int r0, int r1) const { return unit_rows(r0, r1); }

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
    }
    for (std::size_t l = 0; l < layers; ++l) {
      std::size_t const n = static_cast<std::size_t>(shapes_[l].n_out);
      grow(h_[l], rows * n, "h");
      grow(out_[l], rows * n, "out");
      if (tangents) {
        grow(zt_[l], rows * n, "zt");
        grow(outt_[l], rows * n, "outt");
        grow(g1_[l], rows * n, "first_order_cotangent");
      }
    }
    // Scratch rows: a whole net's rows, or chunk_rows_ per host thread on the chunked path.
    std::size_t scratch_rows = rows;
    if (host_schedule_v<ExecutionSpace> && chunk_rows_ > 0)
      scratch_rows = std::max(rows, std::size_t(ExecutionSpace().concurrency()) * chunk_rows_);
    std::size_t const flat = scratch_rows * static_cast<std::size_t>(width_max_);
    for (auto* v : {&g_a_, &g_b_, &gz_, &seed_g_}) grow(*v, flat, "cotangent");
    if (uses_head()) {
      std::size_t const threads = std::size_t(ExecutionSpace().concurrency());
      head_scratch_size_ = SymmetricHead<Scalar, memory_space>::scratch_size(head_n_, chunk_rows_, shapes_[0].n_out);
      grow(head_scratch_, threads * head_scratch_size_, "symmetric_head_scratch");
      grow(folded_, std::size_t(num_nets()) * head_weights_size(), "folded_head_weights");
    }
    if (inner_in_scratch()) {
      std::size_t const inner = std::size_t(ExecutionSpace().concurrency()) * chunk_rows_ * inner_width_;
      grow(inner_, inner, "inner_outputs");
      if (tangents) grow(inner_t_, inner, "inner_output_tangents");
    }
    if (tangents) {
      grow(product_, flat, "cotangent");
      grow(gzt_, flat, "cotangent");
      grow(seed_gt_, flat, "cotangent");
      grow(last_tangent_, flat, "last_tangent");
      std::size_t weights_max = 0;
      for (auto const& l : shapes_) weights_max = std::max(weights_max, std::size_t(l.n_in) * l.n_out);
      grow(partials_, blas::tn_sum_partials_size(ExecutionSpace(), weights_max), "weight_partials");
      if (ones_.extent(0) < scratch_rows) {
        grow(ones_, scratch_rows, "ones");
        Kokkos::deep_copy(ones_, Scalar(1));
      }
      if (host_schedule_v<ExecutionSpace> && chunk_rows_ > 0) reserve_block_gradients();
      if (unit_capable()) {
        grow(unit_out_, rows * std::size_t(n_output()), "output_derivative");
        for (auto* v : {&g_c_, &g_d_}) grow(*v, flat, "tangent_cotangent");
      }
    }
    unit_ready_ = false;
  }

  /// Output of layer `l` on rows [r0, r1).
  Matrix out(int l, int r0, int r1) const { return rows_of(out_[l], shapes_[l].n_out, r0, r1); }
  /// Output tangent of layer `l` on rows [r0, r1).
  Matrix out_tangent(int l, int r0, int r1) const { return rows_of(outt_[l], shapes_[l].n_out, r0, r1); }
  /// Final output (values) on rows [r0, r1).
  Matrix output(int r0, int r1) const { return out(num_layers() - 1, r0, r1); }
  /// Final output tangent on rows [r0, r1).
  Matrix output_tangent(int r0, int r1) const { return out_tangent(num_layers() - 1, r0, r1); }

  /// forward() of every block; x0 holds the input of all rows (row r of the shared buffers at r).
  /// `sink` (only where host_chunks()) receives each chunk's output. `tangents`: tangent or
  /// input-cotangent passes on these rows will follow (with set_unit_input_tangents, the unit
  /// tangents are made now; otherwise it changes nothing).
  void forward_blocks(ExecutionSpace const& space, Scalar* params, std::vector<RowBlock> const& blocks, Matrix x0,
                      Sink const& sink = {}, bool tangents = false) {
    require(!sink || host_chunks(), "nn::NetworkFamily::forward_blocks: a sink needs the chunked host path");
    if (host_chunks()) {
      name_nets(blocks);
      transpose_weights(space, params);
      fold_head_weights(space, params);
    }
    bool const unit = tangents && unit_capable();
    if (unit) {
      int end = 0;
      for (auto const& b : blocks) end = std::max(end, b.end);
      require(unit_out_.extent(0) >= std::size_t(end) * n_output(),
              "nn::NetworkFamily::forward_blocks: call reserve(rows, true) after set_unit_input_tangents()");
    }
    unit_ready_ = false;
    run_blocks(space, blocks, "dpk::nn::NetworkFamily::forward_chunks",
               [&](auto const& on, int worker, int net, int r0, int r1) {
                 int const inner = chunk_worker(worker);
                 forward_layers(on, params, net, rows_of(x0, r0, r1), r0, r1, inner, worker);
                 if (unit)  // the tangents for input tangent 1, while the chunk's h is in cache
                   tangent_layers(on, params, net, ones_rows(r1 - r0), r0, r1, unit_rows(r0, r1), inner, worker);
                 if (sink) sink(net, r0, r1, output(r0, r1));
               });
    unit_ready_ = unit;
  }

  /// tangent() of every block; x0t indexed like x0 in forward_blocks. With `sink` (only where
  /// host_chunks()) each chunk's output tangent goes to it instead of output_tangent(), which
  /// is then not written.
  void tangent_blocks(ExecutionSpace const& space, Scalar* params, std::vector<RowBlock> const& blocks, Matrix x0t,
                      Sink const& sink = {}) {
    require(!sink || host_chunks(), "nn::NetworkFamily::tangent_blocks: a sink needs the chunked host path");
    run_blocks(space, blocks, "dpk::nn::NetworkFamily::tangent_chunks",
               [&](auto const& on, int worker, int net, int r0, int r1) {
                 int const inner = chunk_worker(worker);
                 if (unit_ready_) {  // out' = x0t dout/dx0 (see set_unit_input_tangents; host only)
                   if constexpr (host_schedule_v<ExecutionSpace>) {
                     Matrix const dst = sink ? Matrix(last_tangent_.data() + scratch_start(worker), r1 - r0,
                                                      n_output())
                                             : output_tangent(r0, r1);
                     scale_rows(rows_of(x0t, r0, r1), unit_rows(r0, r1), dst);
                     if (sink) sink(net, r0, r1, dst);
                   }
                   return;
                 }
                 if (!sink)
                   return tangent_layers(on, params, net, rows_of(x0t, r0, r1), r0, r1, Matrix(), inner, worker);
                 Matrix const last(last_tangent_.data() + scratch_start(worker), r1 - r0, n_output());
                 tangent_layers(on, params, net, rows_of(x0t, r0, r1), r0, r1, last, inner, worker);
                 sink(net, r0, r1, last);
               });
  }

  /// backward_input() of every block; g_out and g_in indexed by buffer row. With `seed` (only on
  /// the chunked host path, see host_chunks()) g_out is not read: each chunk's rows come from it.
  void backward_input_blocks(ExecutionSpace const& space, Scalar* params, std::vector<RowBlock> const& blocks,
                             Matrix g_out, Matrix g_in, Seed const& seed = {}) {
    require(!seed || host_chunks(), "nn::NetworkFamily::backward_input_blocks: seeds need the chunked host path");
    run_blocks(space, blocks, "dpk::nn::NetworkFamily::backward_input_chunks",
               [&](auto const& on, int worker, int net, int r0, int r1) {
                 std::size_t const s0 = scratch_start(worker);
                 Matrix g = seed ? seed_rows(seed, seed_g_, s0, r0, r1) : rows_of(g_out, r0, r1);
                 if (unit_ready_) {  // g_in = g . dout/dx0 (host only)
                   if constexpr (host_schedule_v<ExecutionSpace>) dot_rows(g, unit_rows(r0, r1), rows_of(g_in, r0, r1));
                   return;
                 }
                 backward_input_layers(on, params, net, r0, r1, g, rows_of(g_in, r0, r1), s0, worker);
               });
  }

  /// True where the *_blocks passes run chunk by chunk in host threads (host spaces with
  /// set_host_chunk_rows > 0): only there do they take seeds and sinks and use a stored w^T.
  bool host_chunks() const { return host_schedule_v<ExecutionSpace> && chunk_rows_ > 0; }

  /// True where the *_blocks passes keep the outputs of the inner layers (all but the last;
  /// tanh layers only) in the worker's scratch rows, not in the family's buffers: the forward
  /// and tangent passes write them there, and the reverse pass recomputes them from the stored
  /// h and z' (layer_outputs_in_thread: the same bits) instead of streaming them back from
  /// memory. out(l) and out_tangent(l) of inner layers are then written only by the single-net
  /// passes (forward(), tangent()).
  bool inner_in_scratch() const { return host_chunks() && inner_tanh_; }

  /// reverse() of every block (x0, x0t, g_out, gt_out, g_in indexed by buffer row; g_in may be
  /// empty). The gradient of each net named in `blocks` is accumulated or overwritten as in
  /// reverse(); on the chunked host path each block sums into its own buffer and the buffers
  /// are added in block order (deterministic for given blocks, whatever thread ran which).
  /// With `seed` and `seed_t` (only where host_chunks()) g_out and gt_out are not read: each
  /// chunk's rows come from them. With unit tangents an empty x0t means that seed_t (or gt_out)
  /// already carries each row's input tangent (x0t gt, see set_unit_input_tangents).
  void reverse_blocks(ExecutionSpace const& space, Scalar* params, Scalar* grads, std::vector<RowBlock> const& blocks,
                      Matrix x0, Matrix x0t, Matrix g_out, Matrix gt_out, Matrix g_in, bool accumulate = true,
                      Seed const& seed = {}, Seed const& seed_t = {}) {
    require(bool(seed) == bool(seed_t) && (!seed || host_chunks()),
            "nn::NetworkFamily::reverse_blocks: seeds come in pairs and need the chunked host path");
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (chunk_rows_ > 0) {
        reverse_chunks(space, params, grads, blocks, x0, x0t, g_out, gt_out, g_in, accumulate, seed, seed_t);
        return;
      }
    }
    std::vector<char> seen(offsets_.size(), 0);  // a net's later blocks add to its first block's gradient
    for (auto const& b : blocks) {
      reverse(space, params, grads, b.net, rows_of(x0, b.begin, b.end), rows_of(x0t, b.begin, b.end), b.begin, b.end,
              rows_of(g_out, b.begin, b.end), rows_of(gt_out, b.begin, b.end), rows_of(g_in, b.begin, b.end),
              accumulate || seen[b.net]);
      seen[b.net] = 1;
    }
  }

  /// Stores w^T of every layer of the nets marked by name_nets() (read by the backward passes,
  /// see LayerParams::wt) on the chunked host path, whose small single-threaded GEMMs gain from
  /// it; elsewhere the backward passes read w transposed. Runs with each forward pass, whose
  /// weights the backward passes use: one parallel region over all (net, layer) pairs, each
  /// transposed by one thread (a few thousand elements each), unmarked nets skipped.
  void transpose_weights(ExecutionSpace const& space, Scalar* params) {
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (!host_chunks() || !transposed_weights_) return;
      grow(transposed_, transposed_size_, "transposed_weights");
      int const layers = num_layers();
      Scalar* const out = transposed_.data();
      space.fence();
      Kokkos::parallel_for(
          "dpk::nn::NetworkFamily::transpose_weights",
          DynamicRangePolicy<ExecutionSpace>(space, 0, num_nets() * layers).set_chunk_size(1), [&](int const item) {
            int const net = item / layers, l = item % layers;
            if (!named_[net]) return;
            auto const w = param(params, net, l).w;
            int const n_in = shapes_[l].n_in, n_out = shapes_[l].n_out;
            Scalar* const wt = out + transposed_offset_[net][l];  // n_out x n_in, row-major
            for (int r = 0; r < n_in; ++r)
              for (int c = 0; c < n_out; ++c) wt[std::size_t(c) * n_in + r] = w(r, c);
          });
      space.fence();
      for (int net = 0; net < num_nets(); ++net)
        if (named_[net]) transposed_from_[net] = params;
    }
  }

  /// Folds the first layer's head rows of the nets marked by name_nets() (see
  /// set_symmetric_input_head) on the chunked host path: folded(k) = W(a n + b) + W(b n + a) for
  /// the k-th distinct entry (a <= b), W(a n + a) on the diagonal. Runs with each forward pass,
  /// like transpose_weights; one parallel region over (net, entry) pairs, unmarked nets skipped.
  void fold_head_weights(ExecutionSpace const& space, Scalar* params) {
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (!uses_head()) return;
      require(folded_.extent(0) >= std::size_t(num_nets()) * head_weights_size(),
              "nn::NetworkFamily: call reserve() after set_symmetric_input_head()");
      int const np = int(head_pairs_.size() / 2), n_out = shapes_[0].n_out;
      Scalar* const out = folded_.data();
      int const* const pairs = head_pairs_.data();
      space.fence();
      Kokkos::parallel_for(
          "dpk::nn::NetworkFamily::fold_head_weights",
          Kokkos::RangePolicy<ExecutionSpace>(space, 0, num_nets() * np), [&](int const item) {
            int const net = item / np, k = item % np;
            if (!named_[net]) return;
            auto const w = param(params, net, 0).w;
            int const at = pairs[2 * k], mirror = pairs[2 * k + 1];
            Scalar* const f = out + std::size_t(net) * head_weights_size() + std::size_t(k) * n_out;
            Scalar const* const wa = &w(at, 0);
            Scalar const* const wb = &w(mirror, 0);
            if (at == mirror)
              for (int c = 0; c < n_out; ++c) f[c] = wa[c];
            else
              for (int c = 0; c < n_out; ++c) f[c] = wa[c] + wb[c];
          });
      space.fence();
      for (int net = 0; net < num_nets(); ++net)
        if (named_[net]) folded_from_[net] = params;
    }
  }

  /// Values of net `net` for input x0 (rows [r0, r1), width n_input()).
  void forward(ExecutionSpace const& space, Scalar* params, int net, Matrix x0, int r0, int r1) {
    unit_ready_ = false;
    if (host_chunks()) {
      name_nets({RowBlock{net, r0, r1}});
      transpose_weights(space, params);
      fold_head_weights(space, params);
    }
    forward_layers(space, params, net, x0, r0, r1);
  }

  /// Tangents of net `net` for the input tangent x0t (after forward on the same rows).
  void tangent(ExecutionSpace const& space, Scalar* params, int net, Matrix x0t, int r0, int r1) {
    unit_ready_ = false;
    tangent_layers(space, params, net, x0t, r0, r1);
  }

  /// d(output . g_out)/d(input): g_out (R, n_output()) -> g_in (R, n_input()). No parameter
  /// gradient. With tangent buffers reserved, every layer's cotangents are kept for reverse().
  void backward_input(ExecutionSpace const& space, Scalar* params, int net, int r0, int r1, Matrix g_out,
                      Matrix g_in) {
    backward_input_layers(space, params, net, r0, r1, g_out, g_in, 0);
  }

  /// Combined reverse pass of values and tangents (SPEC.md section 8) for net `net` on rows
  /// [r0, r1): value seed g_out (R, n_output()), tangent seed gt_out, which must be the seed
  /// of the backward_input() call made on these rows since the last forward (its per-layer
  /// cotangents are the tangent cotangents here). Accumulates parameter gradients into `grads`
  /// (same layout as params; `accumulate` false: overwrites this net's gradient instead); writes
  /// the input value cotangent g_in (R, n_input()) unless empty. Reads the inner layers' outputs
  /// that forward() and tangent() keep (the *_blocks passes of a chunked family do not keep them:
  /// pair those with reverse_blocks).
  void reverse(ExecutionSpace const& space, Scalar* params, Scalar* grads, int net, Matrix x0, Matrix x0t, int r0,
               int r1, Matrix g_out, Matrix gt_out, Matrix g_in, bool accumulate = true) {
    reverse_layers(space, params, grads, offsets_, net, x0, x0t, r0, r1, g_out, gt_out, g_in, accumulate, 0);
  }

 private:
  Params param(Scalar* buffer, int net, int l) const { return param(buffer, offsets_, net, l); }
  /// Parameters for a backward pass: with the transpose of w made by the last forward pass of
  /// net `net`, when that pass read the same buffer (otherwise w is read transposed).
  Params backward_param(Scalar* buffer, int net, int l) const {
    Params p = param(buffer, net, l);
    if (transposed_from_[net] == buffer)
      p.wt = Matrix(transposed_.data() + transposed_offset_[net][l], shapes_[l].n_out, shapes_[l].n_in);
    return p;
  }

  Params param(Scalar* buffer, std::vector<std::vector<LayerOffsets>> const& offsets, int net, int l) const {
    return Params::at(buffer, shapes_[l], offsets[net][l]);
  }

  /// True where the first layer's products go through the input's symmetric head: one set, on
  /// the chunked host path.
  bool uses_head() const { return head_n_ > 0 && host_chunks(); }
  /// Scalars of one net's folded head weights (distinct entries x the first layer's outputs).
  std::size_t head_weights_size() const { return head_pairs_.size() / 2 * std::size_t(shapes_[0].n_out); }

  /// `p` (layer l of net `net`, read from `buffer`) for a pass inside host thread `worker` of the
  /// chunked path: the first layer gets the input's symmetric head when the last forward pass
  /// folded its weights from the same buffer (otherwise it runs the full products).
  template <class Space>
  Params with_head(Params p, Scalar* buffer, int net, int l, int worker) const {
    if constexpr (std::is_same_v<Space, InThread>) {
      if (l == 0 && worker >= 0 && uses_head() && folded_from_[net] == buffer) {
        int const np = int(head_pairs_.size() / 2), n_out = shapes_[0].n_out;
        p.head.n = head_n_;
        p.head.pairs = head_pairs_.data();
        p.head.folded = Matrix(folded_.data() + std::size_t(net) * head_weights_size(), np, n_out);
        p.head.scratch = head_scratch_.data() + std::size_t(worker) * head_scratch_size_;
      }
    }
    (void)buffer, (void)net, (void)l, (void)worker;
    return p;
  }

  static Matrix rows_of(View1<Scalar, memory_space> const& v, int ncol, int r0, int r1) {
    return Matrix(v.data() + static_cast<std::size_t>(r0) * ncol, r1 - r0, ncol);
  }
  /// Rows [r0, r1) of a matrix indexed by buffer row (empty stays empty).
  static Matrix rows_of(Matrix const& m, int r0, int r1) {
    if (m.extent(0) == 0) return m;
    return Matrix(m.data() + static_cast<std::size_t>(r0) * m.extent(1), r1 - r0, m.extent(1));
  }

  // The passes over all layers of net `net` on rows [r0, r1), on `space` (the family's space, or
  // InThread for one chunk inside a parallel region). Scratch matrices (whose width changes from
  // layer to layer) start at element `s0` of the scratch buffers: 0 for a whole net,
  // scratch_start(worker) for a chunk (each worker owns chunk_rows_ * width_max_ elements).
  // `inner` (chunk_worker()): the worker whose scratch rows hold the inner layers' outputs, or
  // -1 for the family's buffers.
  // `worker`: the host thread of a chunk (its scratch for the symmetric head, with_head), or -1.
  template <class Space>
  void forward_layers(Space const& space, Scalar* params, int net, Matrix x0, int r0, int r1, int inner = -1,
                      int worker = -1) {
    Matrix x = x0;
    for (int l = 0; l < num_layers(); ++l) {
      Matrix const o = inner_rows(inner_, inner, l, r0, r1, out(l, r0, r1));
      layer_forward(space, shapes_[l], with_head<Space>(param(params, net, l), params, net, l, worker), x,
                    rows_of(h_[l], shapes_[l].n_out, r0, r1), o);
      x = o;
    }
  }

  /// `last`: where the final output tangent goes (default: output_tangent()).
  template <class Space>
  void tangent_layers(Space const& space, Scalar* params, int net, Matrix x0t, int r0, int r1, Matrix last = {},
                      int inner = -1, int worker = -1) {
    Matrix xt = x0t;
    for (int l = 0; l < num_layers(); ++l) {
      int const n = shapes_[l].n_out;
      Matrix const outt = l == num_layers() - 1 && last.extent(0) > 0
                              ? last
                              : inner_rows(inner_t_, inner, l, r0, r1, out_tangent(l, r0, r1));
      layer_tangent(space, shapes_[l], with_head<Space>(param(params, net, l), params, net, l, worker), xt,
                    rows_of(h_[l], n, r0, r1), rows_of(zt_[l], n, r0, r1), outt);
      xt = outt;
    }
  }

  /// Worker `worker`'s scratch rows of the inner layers on the chunked path (-1 elsewhere).
  int chunk_worker(int worker) const { return inner_in_scratch() ? worker : -1; }

  /// Layer l's output rows [r0, r1) in worker `inner`'s scratch of `buffer` when l is an inner
  /// layer and inner >= 0, else `stored` (the family's buffer).
  Matrix inner_rows(View1<Scalar, memory_space> const& buffer, int inner, int l, int r0, int r1, Matrix stored) const {
    if (inner < 0 || l == num_layers() - 1) return stored;
    std::size_t const at = (std::size_t(inner) * inner_width_ + inner_offset_[l]) * chunk_rows_;
    return Matrix(buffer.data() + at, r1 - r0, shapes_[l].n_out);
  }

  template <class Space>
  void backward_input_layers(Space const& space, Scalar* params, int net, int r0, int r1, Matrix g_out, Matrix g_in,
                             std::size_t s0, int worker = -1) {
    int const rows = r1 - r0;
    auto scratch = [&](View1<Scalar, memory_space> const& v, int ncol) { return Matrix(v.data() + s0, rows, ncol); };
    bool const keep = g1_.size() == shapes_.size() && g1_.back().extent(0) > 0;
    Matrix g = g_out;
    for (int l = num_layers() - 1; l >= 0; --l) {
      LayerShape const& s = shapes_[l];
      Matrix gx = l == 0 ? g_in
                         : (keep ? rows_of(g1_[l - 1], s.n_in, r0, r1) : scratch(l % 2 ? g_a_ : g_b_, s.n_in));
      Matrix gz = scratch(gz_, s.n_out);
      layer_backward_input(space, s, with_head<Space>(backward_param(params, net, l), params, net, l, worker),
                           rows_of(h_[l], s.n_out, r0, r1), g, gz, gx);
      g = gx;
    }
  }

  /// The reverse pass with parameter-gradient tensors at `grad_offsets` of `grads`. `unit`: the
  /// tangents are unit-input ones (x0t = 1, gt_out already times the input tangent, see
  /// set_unit_input_tangents) and the tangent cotangents are carried down here, not read from
  /// the first-order pass.
  template <class Space>
  void reverse_layers(Space const& space, Scalar* params, Scalar* grads,
                      std::vector<std::vector<LayerOffsets>> const& grad_offsets, int net, Matrix x0, Matrix x0t, int r0,
                      int r1, Matrix g_out, Matrix gt_out, Matrix g_in, bool accumulate, std::size_t s0, int inner = -1,
                      bool unit = false, int worker = -1) {
    int const rows = r1 - r0;
    auto scratch = [&](View1<Scalar, memory_space> const& v, int ncol) { return Matrix(v.data() + s0, rows, ncol); };
    auto inner_out = [&](int l) { return inner_rows(inner_, inner, l, r0, r1, out(l, r0, r1)); };
    auto inner_outt = [&](int l) { return inner_rows(inner_t_, inner, l, r0, r1, out_tangent(l, r0, r1)); };
    if (inner >= 0)  // the inner layers' outputs, which the chunk's forward and tangent passes did not keep
      for (int l = 0; l + 1 < num_layers(); ++l) {
        int const n = shapes_[l].n_out;
        layer_outputs_in_thread(shapes_[l], param(params, net, l), l == 0 ? x0 : inner_out(l - 1),
                                l == 0 ? x0t : inner_outt(l - 1), rows_of(h_[l], n, r0, r1), rows_of(zt_[l], n, r0, r1),
                                inner_out(l), inner_outt(l));
      }
    Matrix g = g_out, gt_carried = gt_out;
    for (int l = num_layers() - 1; l >= 0; --l) {
      LayerShape const& s = shapes_[l];
      int const n = s.n_out;
      Matrix x = l == 0 ? x0 : inner_out(l - 1);
      Matrix xt = l == 0 ? x0t : inner_outt(l - 1);
      Matrix gt = unit || l == num_layers() - 1 ? gt_carried : rows_of(g1_[l], n, r0, r1);
      Matrix gx = l == 0 ? g_in : scratch(l % 2 ? g_a_ : g_b_, s.n_in);
      ReverseScratch<Scalar, memory_space> work{scratch(gz_, n), scratch(gzt_, n), scratch(product_, n),
                                                Matrix(ones_.data(), rows, 1),
                                                partials_};
      Params const p = with_head<Space>(backward_param(params, net, l), params, net, l, worker);
      layer_reverse(space, s, p, param(grads, grad_offsets, net, l), x, xt, rows_of(h_[l], n, r0, r1),
                    rows_of(zt_[l], n, r0, r1), g, gt, work, gx, accumulate);
      if (unit && l > 0) {  // the first-order recursion for the tangent seed: gt' = gzt w^T + skip(gt)
        Matrix const gxt = scratch(l % 2 ? g_c_ : g_d_, s.n_in);
        Scalar const beta = layer_skip_cotangent(space, s, gt, gxt);
        detail::add_input_cotangent(space, p, s.tanh ? work.gzt : gt, beta, gxt);
        gt_carried = gxt;
      }
      g = gx;
    }
  }

  /// Runs pass(on, worker, net, r0, r1) over `blocks`: on the chunked host path once per chunk
  /// with on = InThread, else once per block with on = `space` and worker 0 (scratch_start(0) = 0).
  template <class Pass>
  void run_blocks(ExecutionSpace const& space, std::vector<RowBlock> const& blocks, char const* label,
                  Pass const& pass) {
    if constexpr (host_schedule_v<ExecutionSpace>) {
      if (chunk_rows_ > 0) {
        for_each_chunk(space, blocks, label, [&](int worker, int, int net, int r0, int r1) {
          pass(InThread{}, worker, net, r0, r1);
        });
        return;
      }
    }
    for (auto const& b : blocks) pass(space, 0, b.net, b.begin, b.end);
  }

  /// The chunked host reverse pass (see reverse_blocks). The first non-empty block of each net
  /// (in block order) sums its chunks straight into `grads`; each later block into a slab of its
  /// own, added to `grads` afterwards in block order. Without `accumulate` these are the bits of
  /// summing every block apart and adding the block sums in order (0 + x = x), and a net of one
  /// block needs no pass over its gradient after the chunks (the fitting nets' million weights).
  void reverse_chunks(ExecutionSpace const& space, Scalar* params, Scalar* grads, std::vector<RowBlock> const& blocks,
                      Matrix x0, Matrix x0t, Matrix g_out, Matrix gt_out, Matrix g_in, bool accumulate,
                      Seed const& seed, Seed const& seed_t) {
    int const nets = num_nets();
    std::size_t const nblocks = blocks.size();
    first_block_.assign(std::size_t(nets), -1);
    slot_.assign(nblocks, -1);
    int extra = 0;
    for (std::size_t k = 0; k < nblocks; ++k) {
      RowBlock const& b = blocks[k];
      if (b.end <= b.begin) continue;  // no chunks
      if (first_block_[b.net] < 0)
        first_block_[b.net] = int(k);
      else
        slot_[k] = extra++;
    }
    reserve_block_gradients(std::size_t(extra));
    touched_.assign(nblocks, 0);
    Scalar* slabs = block_grads_.data();
    std::size_t const slab = slab_size_;
    bool const unit = unit_ready_;
    for_each_chunk(space, blocks, "dpk::nn::NetworkFamily::reverse_chunks",
                   [&](int worker, int block, int net, int r0, int r1) {
                     char& seen = touched_[std::size_t(block)];
                     bool const direct = slot_[std::size_t(block)] < 0;  // the net's first block
                     std::size_t const s0 = scratch_start(worker);
                     Matrix const g = seed ? seed_rows(seed, seed_g_, s0, r0, r1) : rows_of(g_out, r0, r1);
                     Matrix gt = seed_t ? seed_rows(seed_t, seed_gt_, s0, r0, r1) : rows_of(gt_out, r0, r1);
                     Matrix xt = rows_of(x0t, r0, r1);
                     if (unit) {  // the input tangent moves into the tangent seed; the tangents are per unit input
                       if (xt.extent(0) > 0) {  // (no x0t: seed_t has it already)
                         Matrix const scaled(seed_gt_.data() + s0, r1 - r0, n_output());
                         scale_rows(xt, gt, scaled);
                         gt = scaled;
                       }
                       xt = ones_rows(r1 - r0);
                     }
                     reverse_layers(InThread{}, params,
                                    direct ? grads : slabs + std::size_t(slot_[std::size_t(block)]) * slab,
                                    direct ? offsets_ : slab_offsets_, net, rows_of(x0, r0, r1), xt, r0, r1, g, gt,
                                    rows_of(g_in, r0, r1), seen != 0 || (direct && accumulate), s0,
                                    chunk_worker(worker), unit, worker);
                     seen = 1;
                   });
    // grads += the later blocks' sums in block order; a net named in blocks without any rows gets
    // a zero gradient (or keeps its own with `accumulate`).
    name_nets(blocks);
    std::vector<int>& slots = net_slots_;
    for (int net = 0; net < nets; ++net) {
      if (!named_[net]) continue;
      slots.clear();
      for (std::size_t k = 0; k < nblocks; ++k)
        if (blocks[k].net == net && slot_[k] >= 0) slots.push_back(slot_[k]);
      bool const keep = first_block_[net] >= 0 || accumulate;  // its first block's sum, or its own
      if (slots.empty() && keep) continue;
      // Contiguous runs of the slab and the flat buffer, a few thousand elements each: plain
      // loops that vectorise (an index per element took 0.63 ms, runs take 0.08 ms per float32
      // water step at 2 threads).
      SlabRun const* const runs = slab_runs_.data();
      int const* const slot_list = slots.data();
      int const nslots = static_cast<int>(slots.size());
      Kokkos::parallel_for(
          "dpk::nn::NetworkFamily::reduce_block_gradients",
          DynamicRangePolicy<ExecutionSpace>(space, static_cast<std::int64_t>(slab_run_begin_[net]),
                                             static_cast<std::int64_t>(slab_run_begin_[net + 1]))
              .set_chunk_size(1),
          [=](std::int64_t const r) {
            SlabRun const run = runs[r];
            Scalar* const out = grads + run.flat;
            if (!keep)
              for (std::size_t i = 0; i < run.count; ++i) out[i] = Scalar(0);
            for (int q = 0; q < nslots; ++q) {  // sum, then the later blocks in block order
              Scalar const* const in = slabs + std::size_t(slot_list[q]) * slab + run.slab;
              DPK_SIMD_LOOP
              for (std::size_t i = 0; i < run.count; ++i) out[i] += in[i];
            }
          });
    }
    space.fence();
  }

  /// Rows [r0, r1) of `seed` written into the worker's buffer `v` at scratch element s0.
  Matrix seed_rows(Seed const& seed, View1<Scalar, memory_space> const& v, std::size_t s0, int r0, int r1) const {
    Matrix const out(v.data() + s0, r1 - r0, n_output());
    seed(r0, r1, out);
    return out;
  }

  /// True where set_unit_input_tangents applies: asked for, one input column, chunked host path.
  bool unit_capable() const { return unit_input_tangents_ && host_chunks() && n_input() == 1; }

  /// `rows` rows of ones (the unit input tangent), n_input() == 1.
  Matrix ones_rows(int rows) const { return Matrix(ones_.data(), rows, 1); }

  /// Rows [r0, r1) of the output's derivative dout/dx0 kept by the last forward_blocks.
  Matrix unit_rows(int r0, int r1) const { return rows_of(unit_out_, n_output(), r0, r1); }

  /// out(r, c) = column(r, 0) m(r, c) in the calling host thread (out may be m).
  static void scale_rows(Matrix column, Matrix m, Matrix out) {
    int const rows = static_cast<int>(m.extent(0)), n = static_cast<int>(m.extent(1));
    for (int r = 0; r < rows; ++r) {
      Scalar const a = column(r, 0);
      Scalar const* const in = &m(r, 0);
      Scalar* const o = &out(r, 0);
      DPK_SIMD_LOOP
      for (int c = 0; c < n; ++c) o[c] = a * in[c];
    }
  }

  /// out(r, 0) = sum_c a(r, c) b(r, c) in the calling host thread, in 16 interleaved partial
  /// sums (a fixed order that vectorises without reassociation); nothing for an empty `out`.
  static void dot_rows(Matrix a, Matrix b, Matrix out) {
    if (out.extent(0) == 0) return;
    constexpr int lanes = 16;
    int const rows = static_cast<int>(a.extent(0)), n = static_cast<int>(a.extent(1));
    for (int r = 0; r < rows; ++r) {
      Scalar const* const x = &a(r, 0);
      Scalar const* const y = &b(r, 0);
      Scalar acc[lanes] = {};
      int k = 0;
      for (; k + lanes <= n; k += lanes)
        for (int l = 0; l < lanes; ++l) acc[l] += x[k + l] * y[k + l];
      for (int l = 0; k < n; ++k, ++l) acc[l] += x[k] * y[k];
      Scalar sum = 0;
      for (int l = 0; l < lanes; ++l) sum += acc[l];
      out(r, 0) = sum;
    }
  }

  /// Marks in named_ the nets that `blocks` name (and no other).
  void name_nets(std::vector<RowBlock> const& blocks) {
    std::fill(named_.begin(), named_.end(), char(0));
    for (auto const& b : blocks) named_[b.net] = 1;
  }

  /// First scratch element of `worker` on the chunked path.
  std::size_t scratch_start(int worker) const { return std::size_t(worker) * chunk_rows_ * width_max_; }

  /// Runs body(worker, block, net, r0, r1) on chunks of at most chunk_rows_ rows covering every
  /// block, one worker per host thread (at most one per block). Each worker owns a home range of
  /// consecutive blocks (the same in every pass for the same blocks and threads, so the rows a
  /// thread wrote in one pass are the rows it reads in the next, from its own caches) and takes
  /// its next untaken block there; once its range is done it takes untaken blocks from the other
  /// workers' ranges (self-scheduling: a worker on a busy core takes fewer blocks). Chunks run in
  /// row order. `worker` (0 .. concurrency - 1) names the scratch rows in use.
  template <class Body>
  void for_each_chunk(ExecutionSpace const& space, std::vector<RowBlock> const& blocks, char const* label,
                      Body const& body) {
    int const nblocks = static_cast<int>(blocks.size());
    int const threads = std::max(1, static_cast<int>(space.concurrency()));
    if (nblocks == 0) return;
    int const chunk = chunk_rows_;
    require(gz_.extent(0) >= std::size_t(threads) * chunk * width_max_,
            "nn::NetworkFamily: call reserve() after set_host_chunk_rows()");
    RowBlock const* first = blocks.data();
    home_ranges_.run(space, label, nblocks, [&](int const worker, int const k) {
      RowBlock const& b = first[k];
      for (int r0 = b.begin; r0 < b.end; r0 += chunk) body(worker, k, b.net, r0, std::min(b.end, r0 + chunk));
    });
  }

  HomeRanges home_ranges_;  ///< for_each_chunk's schedule

  /// Gradient buffers of the chunked reverse pass: `blocks` slabs (at least one per host thread)
  /// for the blocks that are not their net's first, each holding every net's tensors (compact
  /// layout slab_offsets_, net by net), and the map back to the flat buffer.
  void reserve_block_gradients(std::size_t blocks = 0) {
    std::size_t const slabs = std::max<std::size_t>(
        {std::size_t(1), std::size_t(ExecutionSpace().concurrency()), blocks});
    if (slab_offsets_.size() != offsets_.size()) {
      slab_offsets_.assign(offsets_.size(), std::vector<LayerOffsets>(shapes_.size()));
      slab_runs_.clear();
      slab_run_begin_.assign(1, 0);
      std::size_t size = 0;
      auto add = [&](std::size_t from, std::size_t count) {
        std::size_t const at = size;
        for (std::size_t done = 0; done < count; done += slab_run_length)
          slab_runs_.push_back({size + done, from + done, std::min(slab_run_length, count - done)});
        size += count;
        return at;
      };
      for (std::size_t k = 0; k < offsets_.size(); ++k) {
        for (std::size_t l = 0; l < shapes_.size(); ++l) {
          LayerShape const& s = shapes_[l];
          LayerOffsets const& o = offsets_[k][l];
          LayerOffsets& slab = slab_offsets_[k][l];
          slab.w = add(o.w, std::size_t(s.n_in) * s.n_out);
          slab.b = add(o.b, std::size_t(s.n_out));
          if (o.idt != LayerOffsets::npos) slab.idt = add(o.idt, std::size_t(s.n_out));
        }
        slab_run_begin_.push_back(slab_runs_.size());
      }
      slab_size_ = size;
    }
    grow(block_grads_, slabs * slab_size_, "block_gradients");
  }

  /// ensure_extent_with_headroom (core/types.hpp: row counts creep up from one MD step to the
  /// next) on a buffer named `label_::what` the first time it is sized.
  void grow(View1<Scalar, memory_space>& v, std::size_t n, char const* what) {
    if (v.label().empty() && v.extent(0) < n) v = View1<Scalar, memory_space>(label_ + "::" + what, 0);
    ensure_extent_with_headroom(v, n);
  }

  std::vector<LayerShape> shapes_;
  std::vector<std::vector<LayerOffsets>> offsets_;
  std::string label_;
  int width_max_ = 1;
  int inner_width_ = 0;               ///< sum of the inner layers' output widths
  std::vector<int> inner_offset_;     ///< [l]: first column of inner layer l in a worker's inner rows
  bool inner_tanh_ = false;           ///< every inner layer is a tanh layer (see inner_in_scratch)
  int chunk_rows_ = 0;
  std::vector<std::vector<LayerOffsets>> slab_offsets_;
  /// A contiguous piece of a block's gradient slab and where it goes in the flat buffer.
  struct SlabRun {
    std::size_t slab;   ///< first element in the slab
    std::size_t flat;   ///< first element in the flat gradient
    std::size_t count;  ///< elements, at most slab_run_length
  };
  static constexpr std::size_t slab_run_length = 4096;
  std::vector<SlabRun> slab_runs_;           ///< every net's tensors in slab order, cut into runs
  std::vector<std::size_t> slab_run_begin_;  ///< [net]: the net's first run; [nets]: all runs
  std::size_t slab_size_ = 0;
  std::vector<char> touched_;      ///< [block]: a chunk of the block has run (reverse_chunks)
  std::vector<int> first_block_;   ///< [net]: its first non-empty block, which sums into grads (or -1)
  std::vector<int> slot_;          ///< [block]: its slab, -1 for a net's first block (reverse_chunks)
  std::vector<int> net_slots_;     ///< one net's slabs in block order (reverse_chunks)
  std::vector<char> named_;  ///< [net]: named by the blocks of the current pass (name_nets)
  View1<Scalar, memory_space> block_grads_;
  std::vector<std::vector<std::size_t>> transposed_offset_;  ///< [net][layer] into transposed_
  std::size_t transposed_size_ = 0;
  std::vector<Scalar*> transposed_from_;  ///< [net]: the parameter buffer transposed_ holds
  View1<Scalar, memory_space> transposed_;
  int head_n_ = 0;                      ///< see set_symmetric_input_head
  std::vector<int> head_pairs_;         ///< [2 k], [2 k + 1]: column a n + b of distinct head entry k, and b n + a
  std::vector<Scalar*> folded_from_;    ///< [net]: the parameter buffer folded_ holds
  View1<Scalar, memory_space> folded_;  ///< every net's folded head weights (fold_head_weights)
  View1<Scalar, memory_space> head_scratch_;  ///< per host thread: SymmetricHead::scratch_size scalars
  std::size_t head_scratch_size_ = 0;
  std::vector<View1<Scalar, memory_space>> h_, out_, zt_, outt_, g1_;
  View1<Scalar, memory_space> g_a_, g_b_, gz_, gzt_, product_, ones_, partials_;
  View1<Scalar, memory_space> seed_g_, seed_gt_;  ///< chunk seeds (value, tangent) per worker
  View1<Scalar, memory_space> last_tangent_;      ///< a chunk's output tangent for a sink, per worker
  bool transposed_weights_ = true;                ///< see set_transposed_weights
  bool unit_input_tangents_ = false;              ///< see set_unit_input_tangents
  bool unit_ready_ = false;                       ///< zt_ and unit_out_ hold unit tangents of the last forward_blocks
  View1<Scalar, memory_space> unit_out_;          ///< dout/dx0 of every row (rows, n_output()), unit mode
  View1<Scalar, memory_space> g_c_, g_d_;         ///< tangent cotangents of the unit-mode reverse pass, per worker
  View1<Scalar, memory_space> inner_, inner_t_;   ///< inner layers' outputs and tangents per worker (chunked path)
};

}  // namespace dpk::nn
