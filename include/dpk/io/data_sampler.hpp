#pragma once
/// \file data_sampler.hpp
/// \brief Batches of frames drawn from deepmd/npy systems as DeePMD-kit draws them (uploaded to
/// the device by dpk::upload, model/host_batch.hpp).
///
/// Random mode (training): a system is chosen with probability proportional to its number of
/// batches (DeePMD-kit's `prob_sys_size`: sum over its sets of max(1, frames // batch_size);
/// other weights may be given), then the next `batch_size` frames of that system's shuffled
/// frame order are taken. By default the order walks the system's set.* folders one at a time,
/// as DeePMD-kit's TensorFlow backend does (deepmd/utils/data.py DeepmdData.get_batch): the
/// frames of one set, shuffled when the walk enters it; when fewer than `batch_size` are left,
/// the next set in folder order (after the last, the first again; a set smaller than the batch
/// gives a short batch). FrameWalk::frames instead treats all frames of a system as one pool
/// (dpk's walk before it followed DeePMD-kit's). A one-set system walks alike either way.
/// Sequential mode (validation/test): every frame of every system in
/// order, batch by batch. The random stream is std::mt19937_64 with dpk's own integer and real
/// draws, so batches are the same on every platform for a given seed.

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/types.hpp>
#include <dpk/io/input.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/host_batch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dpk {

/// How a DataSampler walks its systems.
enum class SamplingMode {
  random,     ///< training: weighted system choice, shuffled frames
  sequential  ///< validation/test: all frames of all systems in order
};

/// How random mode walks the frames of one system (file comment).
enum class FrameWalk {
  sets,   ///< one set.* folder at a time, in folder order (DeePMD-kit TF)
  frames  ///< all frames of the system as one pool
};

/// The name of `walk` as the command line and the sampler state write it.
inline char const* frame_walk_name(FrameWalk walk) { return walk == FrameWalk::sets ? "sets" : "frames"; }

/// The walk named `name` ("sets" or "frames"); throws naming `what` otherwise.
inline FrameWalk parse_frame_walk(std::string const& name, std::string const& what) {
  if (name == "sets") return FrameWalk::sets;
  if (name == "frames") return FrameWalk::frames;
  throw Error(what + ": '" + name + "' is not a frame walk (expected \"sets\" or \"frames\")");
}

/// Options of a DataSampler beyond the batch size and seed.
struct SamplerOptions {
  SamplingMode mode = SamplingMode::random;
  /// Per-system weights of the system choice (need not sum to 1); empty = proportional to the
  /// batch counts (DeePMD-kit's prob_sys_size, see system_batch_counts).
  std::vector<double> weights;
  /// How random mode walks a system's frames.
  FrameWalk walk = FrameWalk::sets;
};

/// The frames of each set of `sys` (System::set_nframes; one set of all frames when empty),
/// checked against its frame count.
inline std::vector<int> set_frame_counts(System const& sys) {
  std::vector<int> sets = sys.set_nframes.empty() ? std::vector<int>{sys.nframes} : sys.set_nframes;
  long total = 0;
  for (int n : sets) total += n;
  require(total == sys.nframes, "system '" + sys.path + "': its sets hold " + std::to_string(total) +
                                    " frames, nframes is " + std::to_string(sys.nframes));
  return sets;
}

/// DeePMD-kit's number of batches of each system (deepmd/utils/data.py get_sys_numb_batch):
/// the sum over its sets of max(1, set frames // batch size), with the batch size the system
/// gets from `batch_size` (not capped at the frame count). A System without per-set counts is
/// one set.
inline std::vector<long> system_batch_counts(std::vector<System> const& systems, BatchSize const& batch_size) {
  std::vector<long> counts(systems.size(), 0);
  for (std::size_t s = 0; s < systems.size(); ++s) {
    System const& sys = systems[s];
    int const b = batch_size.frames_for(s, sys.natoms);
    require(b > 0, "batch size of system '" + sys.path + "' is " + std::to_string(b) + ", expected at least 1");
    for (int n : set_frame_counts(sys)) counts[s] += std::max(1, n / b);
  }
  return counts;
}

/// Per-system weights for `data` (DeePMD-kit's DeepmdDataSystem.set_sys_probs): its sys_probs if
/// given; equal weights for "prob_uniform"; for "prob_sys_size" the batch counts
/// (system_batch_counts); with blocks ("prob_sys_size;begin:end:weight;..."), block k gets
/// weight_k / sum(weights) shared by its systems in proportion to their batch counts, and
/// systems in no block get 0.
inline std::vector<double> system_weights(DataConfig const& data, std::vector<System> const& systems) {
  if (!data.sys_probs.empty()) {
    require(data.sys_probs.size() == systems.size(), "sys_probs has " + std::to_string(data.sys_probs.size()) +
                                                         " entries for " + std::to_string(systems.size()) + " systems");
    return data.sys_probs;
  }
  std::vector<double> w(systems.size(), 1.0);
  if (data.auto_prob == "prob_uniform") return w;
  require(data.auto_prob == "prob_sys_size", "auto_prob \"" + data.auto_prob +
                                                 "\" is not one dpk implements (\"prob_sys_size\", \"prob_uniform\")");
  std::vector<long> const batches = system_batch_counts(systems, data.batch_size);
  if (data.prob_blocks.empty()) {
    for (std::size_t s = 0; s < systems.size(); ++s) w[s] = double(batches[s]);
    return w;
  }
  double weight_sum = 0;
  for (auto const& b : data.prob_blocks) weight_sum += b.weight;
  std::fill(w.begin(), w.end(), 0.0);
  for (auto const& b : data.prob_blocks) {
    require(b.begin >= 0 && b.begin < b.end && std::size_t(b.end) <= systems.size(),
            "auto_prob block " + std::to_string(b.begin) + ":" + std::to_string(b.end) + " is outside the " +
                std::to_string(systems.size()) + " systems");
    double block_batches = 0;
    for (int s = b.begin; s < b.end; ++s) block_batches += double(batches[std::size_t(s)]);
    for (int s = b.begin; s < b.end; ++s)
      w[std::size_t(s)] = double(batches[std::size_t(s)]) / block_batches * (b.weight / weight_sum);
  }
  return w;
}

/// DeePMD-kit 3.2's "total number of batches" of `data` (compute_total_numb_batch, which its
/// training.num_epoch multiplies): ceil(max over systems with p > 0 of batches / p), p the
/// system probabilities as DeePMD-kit holds them (set_sys_probs) normalised once more, in its
/// order of operations.
inline long deepmd_total_batches(DataConfig const& data, std::vector<System> const& systems) {
  std::vector<long> const batches = system_batch_counts(systems, data.batch_size);
  std::vector<double> p = system_weights(data, systems);
  auto const sum = [](std::vector<double> const& v) {
    double total = 0;
    for (double x : v) total += x;
    return total;
  };
  if (data.sys_probs.empty() && data.auto_prob == "prob_uniform") {
    std::fill(p.begin(), p.end(), 1.0 / double(p.size()));
  } else if (data.sys_probs.empty() && data.prob_blocks.empty()) {  // prob_sys_size: batches / their sum
    double const total = sum(p);
    for (double& x : p) x /= total;
  }
  double const total = sum(p);
  require(total > 0, "training data: the system probabilities sum to zero");
  double largest = 0;
  for (std::size_t s = 0; s < p.size(); ++s)
    if (p[s] / total > 0) largest = std::max(largest, double(batches[s]) / (p[s] / total));
  return long(std::ceil(largest));
}

/// Draws batches of frames from a list of systems (see the file comment for the rules).
class DataSampler {
 public:
  /// Sampler over `systems` (non-empty) with `batch_size` frames per batch (auto sizes per
  /// system's atom count, at most the system's frame count), deterministic from `seed`.
  DataSampler(std::vector<System> systems, BatchSize batch_size, std::uint64_t seed, SamplerOptions options = {})
      : systems_(std::move(systems)),
        batch_size_(std::move(batch_size)),
        mode_(options.mode),
        walk_(options.walk),
        engine_(seed) {
    require(!systems_.empty(), "DataSampler: no systems given");
    require(batch_size_.per_system.empty() || batch_size_.per_system.size() == systems_.size(),
            "DataSampler: batch_size list has " + std::to_string(batch_size_.per_system.size()) + " entries for " +
                std::to_string(systems_.size()) + " systems");
    weights_ = options.weights;
    if (weights_.empty())
      for (long n : system_batch_counts(systems_, batch_size_)) weights_.push_back(double(n));
    require(weights_.size() == systems_.size(), "DataSampler: " + std::to_string(weights_.size()) +
                                                    " weights for " + std::to_string(systems_.size()) + " systems");
    double total = 0;
    for (double w : weights_) {
      require(w >= 0, "DataSampler: negative system weight");
      total += w;
    }
    require(total > 0, "DataSampler: system weights sum to zero");
    cumulative_.resize(weights_.size());
    double running = 0;
    for (std::size_t s = 0; s < weights_.size(); ++s) cumulative_[s] = (running += weights_[s] / total);
    cumulative_.back() = 1.0;
    for (std::size_t s = 0; s < systems_.size(); ++s) {
      require(systems_[s].nframes > 0, "DataSampler: system '" + systems_[s].path + "' is empty");
      require(frames_per_batch(int(s)) > 0, "DataSampler: batch size of system '" + systems_[s].path + "' is zero");
    }
    set_first_.resize(systems_.size());
    for (std::size_t s = 0; s < systems_.size(); ++s) {
      set_first_[s] = {0};
      for (int n : set_frame_counts(systems_[s])) {
        require(n > 0, "DataSampler: system '" + systems_[s].path + "' has an empty set");
        set_first_[s].push_back(set_first_[s].back() + n);
      }
    }
    order_.resize(systems_.size());
    cursor_.assign(systems_.size(), 0);
    set_.assign(systems_.size(), 0);
    for (std::size_t s = 0; s < systems_.size(); ++s) enter_set(s);
  }

  /// The next batch (random or sequential, by mode).
  HostBatch next() {
    HostBatch out;
    next(out);
    return out;
  }

  /// The next batch, written into `out` (reusing its vectors' capacity).
  void next(HostBatch& out) {
    if (mode_ == SamplingMode::sequential) {
      int const s = sequential_system_;
      int const first = sequential_frame_;
      int const n = std::min(frames_per_batch(s), systems_[std::size_t(s)].nframes - first);
      batch(s, first, n, out);
      sequential_frame_ += n;
      if (sequential_frame_ >= systems_[std::size_t(s)].nframes) {
        sequential_frame_ = 0;
        sequential_system_ = (s + 1) % int(systems_.size());
      }
      return;
    }
    next_of(choose_system(), out);
  }

  /// The next batch of system `system` in random mode (its shuffled frame order), without a
  /// system draw: DeePMD-kit's data statistics take data_stat_nbatch batches of every system.
  void next_of(int system, HostBatch& out) {
    require(mode_ == SamplingMode::random, "DataSampler::next_of: only in random mode");
    require(system >= 0 && std::size_t(system) < systems_.size(),
            "DataSampler::next_of: system " + std::to_string(system) + " out of range");
    std::size_t const s = std::size_t(system);
    std::vector<int>& order = order_[s];
    int n = std::min(frames_per_batch(system), int(order.size()));
    if (cursor_[s] + std::size_t(n) > order.size()) {
      std::size_t const nsets = walked_sets(s, walk_);
      if (nsets == 1) {  // the same frames again: the previous order reshuffled
        shuffle(order);
      } else {           // the next set's frames, in order, shuffled
        set_[s] = (set_[s] + 1) % nsets;
        enter_set(s);
        n = std::min(frames_per_batch(system), int(order.size()));
      }
      cursor_[s] = 0;
    }
    std::vector<int> const frames(order.begin() + std::ptrdiff_t(cursor_[s]),
                                  order.begin() + std::ptrdiff_t(cursor_[s] + std::size_t(n)));
    cursor_[s] += std::size_t(n);
    gather(system, frames, out);
  }

  /// Frames [first_frame, first_frame + nframes) of `system`, in order (for evaluation).
  HostBatch batch(int system, int first_frame, int nframes) const {
    HostBatch out;
    batch(system, first_frame, nframes, out);
    return out;
  }

  /// As above, written into `out`.
  void batch(int system, int first_frame, int nframes, HostBatch& out) const {
    require(system >= 0 && std::size_t(system) < systems_.size(),
            "DataSampler::batch: system " + std::to_string(system) + " out of range");
    int const total = systems_[std::size_t(system)].nframes;
    require(first_frame >= 0 && nframes > 0 && first_frame + nframes <= total,
            "DataSampler::batch: frames [" + std::to_string(first_frame) + ", " + std::to_string(first_frame + nframes) +
                ") outside system '" + systems_[std::size_t(system)].path + "' of " + std::to_string(total) + " frames");
    std::vector<int> frame_indices(static_cast<std::size_t>(nframes));
    for (int i = 0; i < nframes; ++i) frame_indices[std::size_t(i)] = first_frame + i;
    gather(system, frame_indices, out);
  }

  /// Frames per batch of `system`: the batch size for its atom count, at most its frame count
  /// (the sets walk takes fewer from a set smaller than that).
  int frames_per_batch(int system) const {
    System const& s = systems_[std::size_t(system)];
    return std::min(batch_size_.frames_for(std::size_t(system), s.natoms), s.nframes);
  }

  /// Batches that sequential mode takes to visit every frame once.
  long batches_per_epoch() const {
    long n = 0;
    for (std::size_t s = 0; s < systems_.size(); ++s) {
      int const b = frames_per_batch(int(s));
      n += (systems_[s].nframes + b - 1) / b;
    }
    return n;
  }

  /// The systems, in the order given.
  std::vector<System> const& systems() const { return systems_; }
  /// Probability of choosing each system in random mode.
  std::vector<double> probabilities() const {
    std::vector<double> p(cumulative_.size());
    for (std::size_t s = 0; s < p.size(); ++s) p[s] = cumulative_[s] - (s ? cumulative_[s - 1] : 0.0);
    return p;
  }
  /// The batch size this sampler was made with.
  BatchSize const& batch_size() const { return batch_size_; }
  /// Sampling mode.
  SamplingMode mode() const { return mode_; }
  /// How random mode walks a system's frames (a restored state brings its own walk).
  FrameWalk walk() const { return walk_; }

  /// Version of the text rng_state() writes. 3: the frame walk and each system's current set
  /// are written (versions 1 and 2 walked frames); 2: systems drawn by batch count (DeePMD-kit's
  /// prob_sys_size); 1 (dpk before): by frame count.
  static constexpr int state_version = 3;

  /// Version of a state text from rng_state() (0 when it is not one).
  static int version_of_state(std::string const& state) {
    std::istringstream in(state);
    std::string tag;
    int version = 0;
    in >> tag >> version;
    return in && tag == "dpk::DataSampler" ? version : 0;
  }

  /// The whole sampling state (random engine, frame orders, positions) as text, for checkpoints.
  std::string rng_state() const {
    std::ostringstream out;
    out << "dpk::DataSampler " << state_version << " " << frame_walk_name(walk_) << "\n"
        << engine_ << "\n"
        << systems_.size() << " " << sequential_system_ << " " << sequential_frame_ << "\n";
    for (std::size_t s = 0; s < systems_.size(); ++s) {
      out << order_[s].size() << " " << cursor_[s] << " " << set_[s];
      for (int f : order_[s]) out << " " << f;
      out << "\n";
    }
    return out.str();
  }

  /// Restores a state from rng_state() of a sampler over the same systems, its frame walk
  /// included (versions 1 and 2 walked frames; the caller decides whether a version-1 state's
  /// system probabilities still hold); throws when the text is not such a state.
  void set_rng_state(std::string const& state) {
    std::istringstream in(state);
    std::string tag, walk_name = "frames";
    int version = 0;
    in >> tag >> version;
    require(in && tag == "dpk::DataSampler" && version >= 1 && version <= 3,
            "DataSampler::set_rng_state: not a sampler state (versions 1 to 3 are read)");
    if (version >= 3) in >> walk_name;
    require(bool(in), "DataSampler::set_rng_state: the state names no frame walk");
    FrameWalk const walk = parse_frame_walk(walk_name, "DataSampler::set_rng_state");
    std::mt19937_64 engine;
    in >> engine;
    std::size_t nsystems = 0;
    int seq_system = 0, seq_frame = 0;
    in >> nsystems >> seq_system >> seq_frame;
    require(in && nsystems == systems_.size(), "DataSampler::set_rng_state: state is for " + std::to_string(nsystems) +
                                                   " systems, this sampler has " + std::to_string(systems_.size()));
    std::vector<std::vector<int>> order(nsystems);
    std::vector<std::size_t> cursor(nsystems), set(nsystems, 0);
    for (std::size_t s = 0; s < nsystems; ++s) {
      std::size_t n = 0;
      in >> n >> cursor[s];
      if (version >= 3) in >> set[s];
      require(in && set[s] < walked_sets(s, walk), "DataSampler::set_rng_state: state does not match system '" + systems_[s].path + "'");
      auto const [first, last] = walked_frames(s, set[s], walk);
      require(n == std::size_t(last - first) && cursor[s] <= n,
              "DataSampler::set_rng_state: state does not match system '" + systems_[s].path + "'");
      order[s].resize(n);
      for (auto& f : order[s]) {
        in >> f;
        require(in && f >= first && f < last, "DataSampler::set_rng_state: corrupt frame order");
      }
    }
    require(seq_system >= 0 && std::size_t(seq_system) < nsystems && seq_frame >= 0 &&
                seq_frame < systems_[std::size_t(seq_system)].nframes,
            "DataSampler::set_rng_state: corrupt sequential position");
    walk_ = walk;
    engine_ = engine;
    order_ = std::move(order);
    cursor_ = std::move(cursor);
    set_ = std::move(set);
    sequential_system_ = seq_system;
    sequential_frame_ = seq_frame;
  }

 private:
  /// Uniform integer in [0, n) without modulo bias (platform-independent, unlike std distributions).
  std::uint64_t uniform_below(std::uint64_t n) {
    std::uint64_t const limit = std::uint64_t(-1) - (std::uint64_t(-1) % n + 1) % n;
    std::uint64_t x;
    do x = engine_();
    while (x > limit);
    return x % n;
  }
  /// Uniform real in [0, 1) with 53 random bits.
  double uniform_real() { return double(engine_() >> 11) * (1.0 / 9007199254740992.0); }
  /// The frames [first, last) that random mode walks in set `set` of `system` under `walk`
  /// (the whole system when walking frames).
  std::pair<int, int> walked_frames(std::size_t system, std::size_t set, FrameWalk walk) const {
    if (walk == FrameWalk::frames) return {0, systems_[system].nframes};
    return {set_first_[system][set], set_first_[system][set + 1]};
  }
  std::pair<int, int> walked_frames(std::size_t system, std::size_t set) const { return walked_frames(system, set, walk_); }
  /// The number of sets random mode walks in `system` under `walk` (1 when walking frames).
  std::size_t walked_sets(std::size_t system, FrameWalk walk) const {
    return walk == FrameWalk::sets ? set_first_[system].size() - 1 : 1;
  }
  /// order_[system] = the frames of its current set (set_), in order, shuffled in random mode.
  void enter_set(std::size_t system) {
    auto const [first, last] = walked_frames(system, set_[system]);
    order_[system].clear();
    for (int f = first; f < last; ++f) order_[system].push_back(f);
    if (mode_ == SamplingMode::random) shuffle(order_[system]);
  }
  /// Fisher-Yates shuffle with uniform_below.
  void shuffle(std::vector<int>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[std::size_t(uniform_below(i))]);
  }
  int choose_system() {
    if (systems_.size() == 1) return 0;
    double const u = uniform_real();
    for (std::size_t s = 0; s < cumulative_.size(); ++s)
      if (u < cumulative_[s]) return int(s);
    return int(cumulative_.size() - 1);
  }
  void gather(int system, std::vector<int> const& frames, HostBatch& out) const {
    System const& s = systems_[std::size_t(system)];
    std::size_t const na = std::size_t(s.natoms);
    out.system = system;
    out.nframes = int(frames.size());
    out.natoms = s.natoms;
    out.periodic = s.periodic;
    out.has_virial = s.has_virial;
    out.frames = frames;
    out.types = s.types;
    out.coord.resize(frames.size() * na * 3);
    out.force.resize(frames.size() * na * 3);
    out.box.resize(frames.size() * 9);
    out.energy.resize(frames.size());
    out.virial.resize(s.has_virial ? frames.size() * 9 : 0);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      std::size_t const f = std::size_t(frames[i]);
      std::copy_n(s.coord.begin() + std::ptrdiff_t(f * na * 3), na * 3, out.coord.begin() + std::ptrdiff_t(i * na * 3));
      std::copy_n(s.force.begin() + std::ptrdiff_t(f * na * 3), na * 3, out.force.begin() + std::ptrdiff_t(i * na * 3));
      std::copy_n(s.box.begin() + std::ptrdiff_t(f * 9), 9, out.box.begin() + std::ptrdiff_t(i * 9));
      out.energy[i] = s.energy[f];
      if (s.has_virial)
        std::copy_n(s.virial.begin() + std::ptrdiff_t(f * 9), 9, out.virial.begin() + std::ptrdiff_t(i * 9));
    }
  }

  std::vector<System> systems_;
  BatchSize batch_size_;
  SamplingMode mode_;
  FrameWalk walk_;
  std::mt19937_64 engine_;
  std::vector<double> weights_, cumulative_;
  std::vector<std::vector<int>> order_;
  std::vector<std::size_t> cursor_;
  std::vector<std::size_t> set_;                 ///< each system's current set (FrameWalk::sets)
  std::vector<std::vector<int>> set_first_;      ///< each system's first frame of each set, then nframes
  int sequential_system_ = 0, sequential_frame_ = 0;
};

/// Reads the systems of `data` (remapped to `model_type_map`) and makes a sampler with the
/// batch size and system weights `data` asks for.
inline DataSampler make_sampler(DataConfig const& data, std::vector<std::string> const& model_type_map,
                                std::uint64_t seed, SamplingMode mode = SamplingMode::random) {
  std::vector<System> systems = read_systems(data.systems, model_type_map);
  SamplerOptions options;
  options.mode = mode;
  options.weights = system_weights(data, systems);
  return DataSampler(std::move(systems), data.batch_size, seed, std::move(options));
}

}  // namespace dpk
