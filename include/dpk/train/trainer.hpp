#pragma once
/// \file trainer.hpp
/// \brief The training loop of `dpk-train train` as a class (SPEC.md sections 5, 7, 9),
/// following DeePMD-kit's `dp train`.
///
/// Before training: systems are read with model.type_map; environment statistics come from
/// `model.data_stat_nbatch` (10) training batches of every system (DeePMD-kit's TF backend,
/// make_stat_input); the per-type energy bias is the least-squares fit
/// over all training frames; parameters are initialised from descriptor.seed (else
/// fitting_net.seed, else training.seed). Statistics, bias and parameters are those of rank 0
/// (broadcast), as DeePMD-kit's broadcast of its variables makes them.
///
/// Step s (0-based, s = number of updates already applied): lr(s) from the exp schedule, in
/// float32 as DeePMD-kit's TF backend (times the worker factor for the optimiser), prefactors
/// from lr(s)/start_lr in float32 (learning_rate.hpp), the next batch
/// of this rank's sampler (seeded per rank), loss and gradient, one allreduce of the flat
/// gradient buffer divided by the number of ranks, one Adam update. When s % disp_freq == 0
/// (and at the end of the run) a line of lcurve.out is written for step s: the training
/// metrics of the batch of step s with the parameters after s updates (reduced over ranks),
/// and the validation metrics over numb_btch validation batches (split across ranks). Every
/// save_freq updates a checkpoint holds parameters, statistics, Adam state and every rank's
/// sampler state, so a restart continues bit for bit. A non-finite loss stops training with an
/// error and leaves the last checkpoint as it was.

#include <dpk/core/error.hpp>
#include <dpk/core/frames.hpp>
#include <dpk/core/profiling.hpp>
#include <dpk/core/types.hpp>
#include <dpk/descriptor/statistics.hpp>
#include <dpk/io/data_sampler.hpp>
#include <dpk/io/input.hpp>
#include <dpk/io/load_model.hpp>
#include <dpk/io/model_file.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/neighbor/neighbor_search.hpp>
#include <dpk/parallel/communicator.hpp>
#include <dpk/train/adam.hpp>
#include <dpk/train/data_neighbor_distance.hpp>
#include <dpk/train/data_neighbor_stat.hpp>
#include <dpk/train/ener_loss.hpp>
#include <dpk/train/energy_bias.hpp>
#include <dpk/train/lcurve.hpp>
#include <dpk/train/learning_rate.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dpk {

/// The profiling regions of one update, in the order of the --timing-file columns (each column
/// is the region's name without "dpk::", plus "_s"). The model's stages are nested in none of
/// the trainer's, so their sum is at most update_s.
inline constexpr char const* timing_regions[] = {"dpk::sample",      "dpk::neighbors",  "dpk::environment",
                                                 "dpk::batch_setup", "dpk::kept_setup", "dpk::forward",
                                                 "dpk::forces",      "dpk::loss",       "dpk::backward",
                                                 "dpk::allreduce",   "dpk::optimizer"};

/// Run options that are not part of input.json (command-line flags of `dpk-train train`).
struct TrainerOptions {
  std::string output_dir = ".";    ///< where lcurve.out, checkpoints and the model go
  std::string restart;             ///< checkpoint to continue from (file, or save_ckpt prefix)
  std::string init_model;          ///< model/checkpoint whose parameters, statistics, bias start training
  /// Compressed model (docs/compression.md) to start from like init_model, with its embedding
  /// tables frozen: only the fitting nets train (the embedding nets' gradient is 0).
  std::string init_frz_model;
  std::string model_out = "model.dpk";  ///< final model file name (in output_dir)
  long stop_at = -1;               ///< stop after this many updates (schedule unchanged); <0: numb_steps
  int data_stat_nbatch = 0;        ///< batches for the environment statistics; 0: model.data_stat_nbatch (10)
  int keep_checkpoints = 2;        ///< checkpoint files kept (newest first)
  /// Skip the search for the smallest neighbour distance over all training frames (done once,
  /// before training, when the starting model file does not hold it; stored in the model's
  /// `training.min_neighbor_distance` for `dpk-train compress`). DeePMD-kit's --skip-neighbor-stat.
  bool skip_neighbor_stat = false;
  /// How the training and validation batches walk a system's frames: set.* folder by set.*
  /// folder as DeePMD-kit TF does (default), or all frames as one pool (io/data_sampler.hpp).
  /// A restart continues the checkpoint's walk.
  FrameWalk frame_walk = FrameWalk::sets;
  /// When set, rank 0 writes one line per step to this file: `step update_s display_s save_s`
  /// (wall seconds of the update, of the lcurve/validation line and of the checkpoint; the
  /// execution space is fenced before each reading), then the seconds of each region in
  /// `timing_regions` (fenced at its end) and the number of Kokkos deep copies of the step.
  /// Empty: no timing, no extra fences.
  std::string timing_file;
  std::ostream* log = &std::cout;  ///< progress and summary (rank 0 only); nullptr = silent
};

/// What a finished run reports.
struct TrainingSummary {
  long first_step = 0, last_step = 0;  ///< updates done before and after this run
  double wall_seconds = 0;             ///< whole run including setup
  double train_seconds = 0;            ///< the step loop
  long neighbors_dropped = 0;          ///< neighbours beyond sel, summed over ranks and batches
  std::string model_path, checkpoint_path;
};

/// One line of lcurve.out before its numbers are rounded for printing (the values every rank
/// holds after the reduction over ranks).
struct LearningCurveLine {
  long step = -1;                 ///< -1: no line written yet
  CurveMetrics training, validation;
  double lr = 0;
  /// Validation frames evaluated for the line, summed over ranks (numb_btch batches' frames;
  /// 0 without validation data).
  long validation_frames = 0;
};

/// Path of the newest checkpoint for `path`: `path` itself when it is a file, else the file
/// named in the `checkpoint` pointer file of its folder (written by the trainer).
inline std::string resolve_checkpoint(std::string const& path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(path)) return path;
  fs::path const folder = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  fs::path const pointer = folder / "checkpoint";
  std::ifstream in(pointer);
  std::string name;
  if (in && std::getline(in, name) && !name.empty() && fs::is_regular_file(folder / name))
    return (folder / name).string();
  throw Error("restart: '" + path + "' is not a file and no '" + pointer.string() +
              "' names an existing checkpoint");
}

/// The training loop (see the file comment) for precision `Scalar` on `ExecutionSpace`.
template <class Scalar, class ExecutionSpace>
class Trainer {
 public:
  using memory_space = memory_space_t<ExecutionSpace>;
  using Model = EnergyModel<Scalar, ExecutionSpace>;

  /// Reads the training/validation systems named in `config`.
  Trainer(InputConfig config, TrainerOptions options, Communicator& comm, ExecutionSpace space = ExecutionSpace())
      : Trainer(config, read_systems(config.training.training_data.systems, config.type_map),
                config.training.validation_data
                    ? read_systems(config.training.validation_data->systems, config.type_map)
                    : std::vector<System>{},
                std::move(options), comm, space) {}

  /// Uses systems already in memory (tests, or codes that build their data themselves).
  Trainer(InputConfig config, std::vector<System> training, std::vector<System> validation, TrainerOptions options,
          Communicator& comm, ExecutionSpace space = ExecutionSpace())
      : config_(with_epoch_steps(std::move(config), training)),
        options_(std::move(options)),
        comm_(comm),
        space_(space),
        schedule_(ExponentialLearningRate::from_config(config_.learning_rate, config_.training.numb_steps)),
        worker_factor_(worker_scale(config_.learning_rate.scale_by_worker, comm.size())) {
    require(!training.empty(), "training.training_data.systems: no training systems");
    if (options_.data_stat_nbatch <= 0) options_.data_stat_nbatch = config_.statistics.nbatch;
    ntypes_ = config_.descriptor.sel_auto ? data_ntypes(training) : int(config_.descriptor.sel.size());
    if (!config_.type_map.empty())
      require(int(config_.type_map.size()) == ntypes_,
              "model.type_map has " + std::to_string(config_.type_map.size()) + " names but descriptor.sel has " +
                  std::to_string(ntypes_) + " entries");
    std::uint64_t const seed = config_.training.seed.value_or(0);
    compute_energy_bias_table(training);
    std::uint64_t const rank_seed = seed ^ (std::uint64_t(comm_.rank()) * 0x9E3779B97F4A7C15ull);
    SamplerOptions train_options;
    train_options.walk = options_.frame_walk;
    train_options.weights = system_weights(config_.training.training_data, training);
    sampler_.emplace(std::move(training), config_.training.training_data.batch_size, rank_seed, train_options);
    if (config_.descriptor.sel_auto) resolve_auto_sel();
    model_ = std::make_unique<Model>(config_.descriptor, config_.fitting, ntypes_);
    if (!validation.empty()) {
      if (!config_.training.validation_data) config_.training.validation_data.emplace();
      SamplerOptions valid_options;
      valid_options.walk = options_.frame_walk;
      valid_options.weights = system_weights(*config_.training.validation_data, validation);
      validation_sampler_.emplace(std::move(validation), config_.training.validation_data->batch_size, seed + 1,
                                  valid_options);
    }
    AdamConfig adam_config;
    adam_config.beta1 = config_.optimizer.adam_beta1;
    adam_config.beta2 = config_.optimizer.adam_beta2;
    adam_ = std::make_unique<Adam<Scalar, ExecutionSpace>>(model_->buffer_size(), adam_config);
  }

  /// Runs from the current state (fresh, --init-model or --restart) to numb_steps or stop_at.
  TrainingSummary run() {
    Kokkos::Timer wall;
    namespace fs = std::filesystem;
    if (comm_.is_root()) {
      std::error_code ec;
      fs::create_directories(options_.output_dir, ec);
      if (ec || !fs::is_directory(options_.output_dir))
        throw Error("--output '" + options_.output_dir + "': cannot create the output folder (" +
                    (ec ? ec.message() : std::string("exists and is not a folder")) + ")");
    }
    comm_.barrier();
    setup();
    long const numb_steps = config_.training.numb_steps;
    long const last = options_.stop_at >= 0 && options_.stop_at < numb_steps ? options_.stop_at : numb_steps;
    TrainingSummary summary;
    summary.first_step = step_;
    bool const has_validation = bool(validation_sampler_);
    bool const has_virial = config_.loss.start_pref_v != 0 || config_.loss.limit_pref_v != 0;
    std::optional<LearningCurveWriter> curve;
    if (comm_.is_root()) {
      remove_stale_temporaries();
      if (step_ > 0) {
        long const dropped = truncate_learning_curve(path(config_.training.disp_file), step_);
        if (dropped > 0 && log())
          *log() << "dpk-train: " << path(config_.training.disp_file) << ": dropped " << dropped
                 << " line(s) after step " << step_ << " (written after the checkpoint, before the previous run "
                 << "stopped; those steps run again)\n";
      }
    }
    if (comm_.is_root())
      curve.emplace(path(config_.training.disp_file), has_validation, has_virial, /*append=*/step_ > 0);
    banner(last);

    long const disp_freq = config_.training.disp_freq > 0 ? config_.training.disp_freq : numb_steps + 1;
    long const save_freq = config_.training.save_freq;
    Kokkos::Timer timer;
    double last_report_time = 0;
    long last_report_step = step_;
    // Line of step 0 before any update (a restart continues after its predecessor's lines).
    if (step_ == 0) display(curve_ptr(curve));
    long last_saved = step_ > 0 ? step_ : -1;
    bool const timed = !options_.timing_file.empty();
    std::ofstream timing;
    std::optional<RegionTimes> regions;  // per-stage seconds for the timing file
    if (timed) regions.emplace();
    if (timed && comm_.is_root()) {
      timing.open(options_.timing_file, std::ios::trunc);
      require(bool(timing), "--timing-file: cannot write '" + options_.timing_file + "'");
      timing << "# step update_s display_s save_s";
      for (char const* name : timing_regions) timing << " " << (name + 5) << "_s";  // without "dpk::"
      timing << " deep_copies\n";
    }
    for (; step_ < last;) {
      Kokkos::Timer step_timer;
      if (regions) regions->take();
      double const lr = optimizer_rate(schedule_, step_, worker_factor_);
      LossPrefactors const pref = prefactors_at(step_);
      {
        ScopedRegion<ExecutionSpace> region("dpk::sample", space_);
        sampler_->next(host_batch_);
        upload(host_batch_, frames_, labels_);
      }
      LossMetrics const metrics = on_batch(host_batch_, *sampler_, [&] {
        // One-frame batches keep their setup per frame (EnergyModel::prepare with a key).
        if (host_batch_.nframes != 1) return loss_.loss_and_gradient(space_, *model_, frames_, labels_, pref);
        model_->prepare(space_, frames_, frame_key(host_batch_));
        return loss_.loss_and_gradient_prepared(space_, *model_, labels_, pref);
      });
      auto gradient = model_->gradient();
      {
        ScopedRegion<ExecutionSpace> region("dpk::allreduce", space_);
        double const total_loss = comm_.allreduce_sum(metrics.loss);
        if (!std::isfinite(total_loss)) nan_stop(metrics.loss);
        comm_.allreduce_sum(gradient);
        if (comm_.size() > 1) scale(gradient, Scalar(1.0 / comm_.size()));
      }
      {
        ScopedRegion<ExecutionSpace> region("dpk::optimizer", space_);
        adam_->step(space_, model_->parameters(), gradient, lr);
      }
      if (timed) space_.fence();
      double const update_seconds = step_timer.seconds();
      ++step_;
      // Display before saving: a checkpoint's sampler states are those after its step's line.
      if (step_ % disp_freq == 0) display(curve_ptr(curve));
      if (timed) space_.fence();
      double const display_seconds = step_timer.seconds();
      if ((save_freq > 0 && step_ % save_freq == 0) || step_ == last) {
        save_checkpoint(step_);
        last_saved = step_;
      }
      if (timing.is_open()) {
        double const save_seconds = step_timer.seconds();
        char line[128];
        std::snprintf(line, sizeof(line), "%ld %.6f %.6f %.6f", step_, update_seconds,
                      display_seconds - update_seconds, save_seconds - display_seconds);
        timing << line;
        for (char const* name : timing_regions) {
          std::snprintf(line, sizeof(line), " %.6f", regions->seconds(name));
          timing << line;
        }
        timing << " " << regions->deep_copies() << "\n";
      }
      if (step_ % disp_freq == 0 || step_ == last) {
        double const now = timer.seconds();
        progress(step_, last, (step_ - last_report_step) / std::max(1e-9, now - last_report_time), now);
        last_report_time = now;
        last_report_step = step_;
      }
    }
    space_.fence();
    summary.train_seconds = timer.seconds();
    if (last_saved != step_) save_checkpoint(step_);
    summary.model_path = path(options_.model_out);
    if (comm_.is_root()) write_model_file(summary.model_path, snapshot(false));
    summary.checkpoint_path = last_checkpoint_;
    summary.last_step = step_;
    summary.neighbors_dropped = long(comm_.allreduce_sum(double(model_->neighbors_dropped())));
    summary.wall_seconds = wall.seconds();
    if (log()) {
      long const steps = summary.last_step - summary.first_step;
      double const step_seconds = steps > 0 ? summary.train_seconds / steps : 0.0;
      double const gflop = model_->flop_count().training * 1e-9;  // of the last batch (docs/performance.md)
      *log() << "dpk-train: finished " << steps << " steps (" << summary.first_step << " -> " << summary.last_step
             << ") in " << format_seconds(summary.wall_seconds) << " wall, " << step_seconds * 1e3 << " ms/step, "
             << gflop << " GFLOP/step per rank (model count, last batch)"
             << (step_seconds > 0 ? ", " + std::to_string(gflop / step_seconds) + " GFLOP/s per rank" : std::string())
             << "\n"
             << "dpk-train: neighbours dropped beyond sel: " << summary.neighbors_dropped
             << (summary.neighbors_dropped > 0 ? " (increase descriptor.sel)" : "") << "\n"
             << kept_setups_line() << "\n"
             << "dpk-train: model written to " << summary.model_path << ", checkpoint " << summary.checkpoint_path
             << ", learning curve " << path(config_.training.disp_file) << "\n";
    }
    return summary;
  }

  /// The model being trained.
  Model& model() { return *model_; }
  /// Updates applied so far.
  long step() const { return step_; }
  /// The optimiser.
  Adam<Scalar, ExecutionSpace>& optimizer() { return *adam_; }
  /// The input as the run uses it (numb_steps set from num_epoch when that was given).
  InputConfig const& config() const { return config_; }
  /// The last lcurve.out line this run computed, unrounded (on every rank, not only rank 0).
  LearningCurveLine const& last_curve_line() const { return last_curve_line_; }

  /// The current state as a model file (`checkpoint`: with optimiser and sampler states;
  /// collective: every rank must call it when `checkpoint`).
  ModelFileData snapshot(bool checkpoint) const {
    ModelFileData d;
    d.kind = checkpoint ? "checkpoint" : "model";
    d.precision = std::is_same_v<Scalar, float> ? "float32" : "float64";
    d.ntypes = ntypes_;
    d.type_map = config_.type_map;
    d.descriptor = config_.descriptor;
    d.fitting = config_.fitting;
    d.tensors = model_->tensors();
    d.parameters = model_->parameters_host();
    d.avg = model_->statistics_avg();
    d.stdev = model_->statistics_std();
    d.energy_bias = model_->energy_bias();
    d.training["input"] = config_.source;
    d.training["numb_steps"] = config_.training.numb_steps;
    d.training["ranks"] = comm_.size();
    d.training["step"] = step_;
    if (min_neighbor_distance_) d.training[min_neighbor_distance_key] = *min_neighbor_distance_;
    if (compression_) d.compression = *compression_;  // compressed training: the frozen tables
    if (checkpoint) {
      d.step = step_;
      d.adam_step = adam_->step_count();
      d.adam_m = model_->layout().to_packed(adam_->first_moment_host());  // files: packed order
      d.adam_v = model_->layout().to_packed(adam_->second_moment_host());
      d.sampler_states = comm_.gather_strings(sampler_->rng_state());
      if (validation_sampler_) d.training["validation_sampler_state"] = validation_sampler_->rng_state();
    }
    return d;
  }

 private:
  std::ostream* log() const { return comm_.is_root() ? options_.log : nullptr; }
  std::string path(std::string const& name) const {
    return (std::filesystem::path(options_.output_dir) / name).string();
  }
  static LearningCurveWriter* curve_ptr(std::optional<LearningCurveWriter>& c) { return c ? &*c : nullptr; }

  /// Checkpoint files `<save_ckpt>-N` in the checkpoint folder, as (N, path) sorted by N.
  std::vector<std::pair<long, std::string>> checkpoint_files() const {
    namespace fs = std::filesystem;
    fs::path const stem(path(config_.training.save_ckpt));
    fs::path const folder = stem.has_parent_path() ? stem.parent_path() : fs::path(".");
    std::string const prefix = stem.filename().string() + "-";
    std::vector<std::pair<long, std::string>> files;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      std::string const name = it->path().filename().string();
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      std::string const digits = name.substr(prefix.size());
      if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      files.emplace_back(std::stol(digits), (folder / name).string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  /// Restart from `file`: when it is one of this run's checkpoint files, the older ones of
  /// the folder count as saved by this run, so that keep_checkpoints prunes them as an
  /// uninterrupted run would have (checkpoints of later steps are left alone; they are
  /// rewritten when the run gets there).
  void adopt_checkpoints(std::string const& file) {
    namespace fs = std::filesystem;
    std::error_code ec;
    saved_.clear();
    bool ours = false;
    for (auto const& [n, name] : checkpoint_files())
      if (fs::equivalent(name, file, ec)) ours = true;
    if (!ours) return;
    for (auto const& [n, name] : checkpoint_files()) {
      if (n > step_) continue;
      if (fs::equivalent(name, file, ec)) last_checkpoint_ = name;  // the spelling save_checkpoint uses
      saved_.push_back(name);
    }
    // save_checkpoint adds a file only when it differs from last_checkpoint_.
    saved_.erase(std::remove(saved_.begin(), saved_.end(), last_checkpoint_), saved_.end());
    saved_.push_back(last_checkpoint_);
  }

  /// Removes temporary files an interrupted write of this run's files left behind (the
  /// checkpoint/model files', the pointer's and lcurve.out's `<name>.tmp.<pid>`); the
  /// files under their final names are complete (written under a temporary name and renamed).
  void remove_stale_temporaries() const {
    namespace fs = std::filesystem;
    auto is_pid_suffix = [](std::string const& name, std::string const& base) {
      std::string const head = base + ".tmp.";
      if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) return false;
      return name.find_first_not_of("0123456789", head.size()) == std::string::npos;
    };
    fs::path const stem(path(config_.training.save_ckpt));
    fs::path const ckpt_folder = stem.has_parent_path() ? stem.parent_path() : fs::path(".");
    std::string const prefix = stem.filename().string() + "-";
    std::vector<fs::path> stale;
    std::error_code ec;
    for (fs::directory_iterator it(ckpt_folder, ec), end; !ec && it != end; it.increment(ec)) {
      std::string const name = it->path().filename().string();
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      std::size_t const dot = name.find(".tmp.");
      if (dot == std::string::npos) continue;
      std::string const digits = name.substr(prefix.size(), dot - prefix.size());
      if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
          is_pid_suffix(name, name.substr(0, dot)))
        stale.push_back(it->path());
    }
    fs::path const out(options_.output_dir);
    for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
      std::string const name = it->path().filename().string();
      if (is_pid_suffix(name, "checkpoint") || is_pid_suffix(name, fs::path(config_.training.disp_file).filename().string()) ||
          is_pid_suffix(name, fs::path(options_.model_out).filename().string()))
        stale.push_back(it->path());
    }
    for (auto const& f : stale)
      if (fs::remove(f, ec) && log())
        *log() << "dpk-train: removed " << f.string() << " (left by an interrupted write)\n";
  }

  /// Frame energies and type counts of every training frame (for the bias fit).
  void compute_energy_bias_table(std::vector<System> const& systems) {
    bias_counts_.clear();
    bias_energies_.clear();
    for (auto const& s : systems) {
      std::vector<double> counts(ntypes_, 0.0);
      for (int t : s.types) {
        require(t >= 0 && t < ntypes_, "system '" + s.path + "': atom type " + std::to_string(t) +
                                           " outside the model's " + std::to_string(ntypes_) + " types");
        counts[t] += 1.0;
      }
      for (int f = 0; f < s.nframes; ++f) {
        bias_counts_.insert(bias_counts_.end(), counts.begin(), counts.end());
        bias_energies_.push_back(s.energy[f]);
      }
    }
  }

  /// Initial parameters/statistics/bias (fresh, init-model or restart), broadcast from rank 0.
  void setup() {
    if (!options_.restart.empty()) {
      std::string const file = resolve_checkpoint(options_.restart);
      ModelFileData const d = read_model_file(file);
      require(d.kind == "checkpoint", "restart: '" + file + "' is a model file, not a checkpoint (use --init-model)");
      load_weights(d, file, ModelTables::install);
      ParameterLayout const& layout = model_->layout();
      adam_->set_state(layout.to_buffer(d.adam_m), layout.to_buffer(d.adam_v), d.adam_step);
      step_ = d.step;
      require(int(d.sampler_states.size()) == comm_.size(),
              "restart: '" + file + "' was written by " + std::to_string(d.sampler_states.size()) +
                  " ranks; restart with the same number of ranks to continue bit for bit");
      std::string const& state = d.sampler_states[std::size_t(comm_.rank())];
      if (DataSampler::version_of_state(state) == 1) check_legacy_probabilities(file);
      sampler_->set_rng_state(state);
      if (validation_sampler_ && d.training.contains("validation_sampler_state"))
        validation_sampler_->set_rng_state(d.training["validation_sampler_state"].get<std::string>());
      if (sampler_->walk() != options_.frame_walk && log())
        *log() << "dpk-train: the checkpoint walks the training frames by " << frame_walk_name(sampler_->walk())
               << "; the restart continues its walk (the frame walk " << frame_walk_name(options_.frame_walk)
               << " applies to fresh runs)\n";
      last_checkpoint_ = file;
      if (comm_.is_root()) adopt_checkpoints(file);
      if (log()) *log() << "dpk-train: restarting from " << file << " at step " << step_ << "\n";
      find_min_neighbor_distance(d);
      check_sel();
      return;
    }
    if (!options_.init_frz_model.empty()) {
      ModelFileData const d = read_model_file(options_.init_frz_model);
      require(d.compression.has_value(), "--init-frz-model: '" + options_.init_frz_model +
                                             "' is not a compressed model (compress it first: dpk-train compress)");
      load_weights(d, options_.init_frz_model, ModelTables::install);
      if (log())
        *log() << "dpk-train: parameters, statistics and bias from " << options_.init_frz_model
               << "; its embedding tables are frozen, the fitting nets train\n";
      find_min_neighbor_distance(d);
    } else if (!options_.init_model.empty()) {
      ModelFileData const d = read_model_file(options_.init_model);
      load_weights(d, options_.init_model, ModelTables::ignore);
      if (log()) *log() << "dpk-train: parameters, statistics and bias from " << options_.init_model << "\n";
      find_min_neighbor_distance(d);
      check_sel();
    } else {
      find_min_neighbor_distance(ModelFileData{});  // first: its sel warning covers every training frame
      compute_statistics();
      model_->set_energy_bias(
          energy_bias_least_squares(bias_counts_, bias_energies_, ntypes_, config_.statistics.rcond.value_or(-1.0)));
      std::uint64_t const init_seed = config_.descriptor.seed ? *config_.descriptor.seed
                                      : config_.fitting.seed ? *config_.fitting.seed
                                                             : config_.training.seed.value_or(0);
      model_->initialize_parameters(init_seed);
    }
    // Rank 0's state everywhere.
    comm_.broadcast(model_->parameters());
    if (comm_.size() > 1) {
      auto avg = broadcast_vector(model_->statistics_avg());
      auto std_dev = broadcast_vector(model_->statistics_std());
      model_->set_statistics(avg, std_dev);
      model_->set_energy_bias(broadcast_vector(model_->energy_bias()));
    }
    if (log()) {
      auto const& bias = model_->energy_bias();
      *log() << "dpk-train: energy bias per type:";
      for (int t = 0; t < ntypes_; ++t)
        *log() << " " << (config_.type_map.empty() ? std::to_string(t) : config_.type_map[t]) << " " << bias[t];
      *log() << " eV\n";
    }
  }

  std::vector<double> broadcast_vector(std::vector<double> values) const {
    View1<double, Kokkos::HostSpace> view("dpk::train::broadcast", values.size());
    for (std::size_t i = 0; i < values.size(); ++i) view(i) = values[i];
    comm_.broadcast(view);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = view(i);
    return values;
  }

  /// Parameters, statistics and bias from a model file (install_model_data: its layout must be
  /// the input's model's). With ModelTables::install (--restart, --init-frz-model) a compressed
  /// model's (or compressed training's checkpoint's) tables come too, frozen for training;
  /// --init-model takes the weights alone.
  void load_weights(ModelFileData const& d, std::string const& file, ModelTables tables) {
    if (!d.type_map.empty() && !config_.type_map.empty())
      require(d.type_map == config_.type_map, "model file '" + file + "': type_map differs from the input's model.type_map");
    install_model_data(d, *model_, file, tables);
    if (tables == ModelTables::install && d.compression) compression_ = *d.compression;
  }

  /// The smallest neighbour distance of the training data: the starting file's (`from`, its
  /// `training.min_neighbor_distance`) when it holds one, else a search over every training
  /// frame (unless skip_neighbor_stat; all_frames_neighbor_stat), then the same value on every rank.
  void find_min_neighbor_distance(ModelFileData const& from) {
    double distance = 0;  // 0: unknown
    if (auto const stored = stored_min_neighbor_distance(from)) {
      distance = *stored;
    } else if (auto_sel_min_distance_) {
      distance = *auto_sel_min_distance_;
    } else if (!options_.skip_neighbor_stat) {
      NeighborStat const stat = all_frames_neighbor_stat(config_.descriptor.sel);
      double const found = stat.min_distance;
      if (std::isfinite(found) && found > 0) distance = found;
      all_frames_counted_ = true;
      if (short_of_sel(stat)) set_sel_warning(stat, "the " + std::to_string(stat.frames) + " training frames", true);
      if (log() && distance > 0)
        *log() << "dpk-train: smallest neighbour distance in the training data: " << distance
               << " A (stored in the model for dpk-train compress)\n";
      else if (log())
        *log() << "dpk-train: no atom of the training data has a neighbour within rcut; no distance stored "
                  "(dpk-train compress will need -t input.json)\n";
    }
    if (comm_.size() > 1) distance = broadcast_vector({distance})[0];
    if (distance > 0) min_neighbor_distance_ = distance;
  }

  /// A checkpoint whose sampler state is version 1 was written when dpk drew systems by frame
  /// count; it continues only when this input's system probabilities are those it used.
  void check_legacy_probabilities(std::string const& file) const {
    DataConfig const& data = config_.training.training_data;
    auto const& systems = sampler_->systems();
    std::vector<double> old_weights(systems.size(), 1.0);
    if (!data.sys_probs.empty()) old_weights = data.sys_probs;
    else if (data.auto_prob != "prob_uniform")
      for (std::size_t s = 0; s < systems.size(); ++s) old_weights[s] = double(systems[s].nframes);
    double total = 0;
    for (double w : old_weights) total += w;
    std::vector<double> const now = sampler_->probabilities();
    bool same = true;
    std::ostringstream old_text, now_text;
    for (std::size_t s = 0; s < systems.size(); ++s) {
      same = same && std::fabs(old_weights[s] / total - now[s]) <= 1e-12;
      old_text << (s ? ", " : "") << old_weights[s] / total;
      now_text << (s ? ", " : "") << now[s];
    }
    require(same, "restart: '" + file + "' was written by a dpk that drew training systems in proportion to "
                  "their frame counts (probabilities [" + old_text.str() + "]); this dpk follows DeePMD-kit's "
                  "prob_sys_size (batch counts: [" + now_text.str() + "]), so the run cannot continue as it "
                  "would have. Start a new run with --init-model '" + file + "' or use the old dpk to finish it");
  }

  /// avg/std from data_stat_nbatch training batches of every system, as DeePMD-kit's TF backend
  /// (make_stat_input: that many batches of each system, at the system's training batch size),
  /// batch by batch so that an error names the batch's system and frames.
  void compute_statistics() {
    if (!comm_.is_root()) return;  // rank 0's statistics are broadcast
    DataSampler stat_sampler = *sampler_;  // a copy: the first batches of each system of rank 0's stream
    StatisticsAccumulator<Scalar, ExecutionSpace> accumulator(ntypes_, config_.descriptor.nnei());
    HostBatch batch;
    Frames<Scalar, memory_space> frames;
    Labels<Scalar, memory_space> labels;
    for (std::size_t s = 0; s < stat_sampler.systems().size(); ++s)
      for (int b = 0; b < options_.data_stat_nbatch; ++b) {
        stat_sampler.next_of(int(s), batch);
        upload(batch, frames, labels);
        on_batch(batch, stat_sampler, [&] {
          accumulator.add(space_, model_->raw_environment(space_, frames), frames.types, frames.nloc());
        });
      }
    std::vector<double> avg, std_dev;
    accumulator.finalize(avg, std_dev);
    if (config_.statistics.set_davg_zero) std::fill(avg.begin(), avg.end(), 0.0);  // DeePMD-kit: std kept
    model_->set_statistics(avg, std_dev);
    // Without the all-frames statistics (find_min_neighbor_distance, run before) the warning
    // covers the statistics frames.
    if (model_->neighbors_dropped() > 0 && !all_frames_counted_)
      set_sel_warning(probe_neighbor_stat(), "the statistics frames", false);
  }

  /// Types of a model whose input gives no sel list: model.type_map's, else the training data's
  /// (its largest type index + 1), as DeePMD-kit does for "sel": "auto".
  int data_ntypes(std::vector<System> const& training) const {
    if (!config_.type_map.empty()) return int(config_.type_map.size());
    int most = 0;
    for (auto const& s : training)
      for (int t : s.types) most = std::max(most, t + 1);
    return most;
  }

  /// The neighbour statistics of every training frame (exact counts; `start_sel` the slots the
  /// search starts from, empty: 32): each rank searches every comm_.size()-th group of frames,
  /// and the shares are reduced over ranks, so every rank holds the statistics of all frames.
  NeighborStat all_frames_neighbor_stat(std::vector<int> start_sel) {
    NeighborStat const share = data_neighbor_stat<Scalar>(space_, *sampler_, config_.descriptor.rcut, ntypes_,
                                                          std::move(start_sel), comm_.rank(), comm_.size());
    return comm_.size() > 1 ? reduce_neighbor_stat(comm_, share) : share;
  }

  /// `"sel": "auto[:ratio]"`: the neighbour statistics of every training frame
  /// (all_frames_neighbor_stat: every rank gets the same sel), sel = auto_sel(counts, ratio) like
  /// DeePMD-kit's; the smallest distance is kept for the model file.
  void resolve_auto_sel() {
    double const ratio = *config_.descriptor.sel_auto;
    require(!options_.skip_neighbor_stat, "model.descriptor.sel \"auto\" needs the neighbour statistics of the "
                                          "training data; drop --skip-neighbor-stat or give sel as a list");
    NeighborStat const stat = all_frames_neighbor_stat({});
    config_.descriptor.sel = auto_sel(stat.max_neighbors, ratio);
    config_.descriptor.sel_auto.reset();
    if (std::isfinite(stat.min_distance) && stat.min_distance > 0) auto_sel_min_distance_ = stat.min_distance;
    all_frames_counted_ = true;  // sel covers them
    if (log()) {
      char text[64];
      std::snprintf(text, sizeof text, "%g", ratio);
      *log() << "dpk-train: sel " << list_text(config_.descriptor.sel) << " (\"auto:" << text << "\": the "
             << stat.frames << " training frames have up to " << list_text(stat.max_neighbors)
             << " neighbours of each type within rcut " << config_.descriptor.rcut << " A)\n";
    }
  }

  /// "[a, b, c]" for messages.
  static std::string list_text(std::vector<int> const& v) {
    std::string text = "[";
    for (std::size_t t = 0; t < v.size(); ++t) text += (t ? ", " : "") + std::to_string(v[t]);
    return text + "]";
  }

  /// A run that starts from --restart or --init-model computes no statistics: unless every
  /// training frame was counted (a file without a stored neighbour distance), the statistics
  /// frames (probe_neighbor_stat) get the sel warning when the model's sel drops neighbours of them.
  /// Rank 0 only, as compute_statistics.
  void check_sel() {
    if (!comm_.is_root() || all_frames_counted_) return;
    NeighborStat const stat = probe_neighbor_stat();
    if (short_of_sel(stat))
      set_sel_warning(stat, "the frames checked at start (" + std::to_string(options_.data_stat_nbatch) +
                                " batches of each system)", false);
  }

  /// Neighbour statistics (exact counts, the model's sel as start) of the statistics frames:
  /// data_stat_nbatch batches of each system from a copy of the sampler (the run's own draws are
  /// unchanged), the frames compute_statistics uses.
  NeighborStat probe_neighbor_stat() {
    NeighborStatAccumulator<Scalar, ExecutionSpace> accumulator(config_.descriptor.rcut, ntypes_,
                                                                 config_.descriptor.sel);
    DataSampler probe = *sampler_;
    HostBatch batch;
    Frames<Scalar, memory_space> frames;
    Labels<Scalar, memory_space> labels;
    for (std::size_t s = 0; s < probe.systems().size(); ++s)
      for (int b = 0; b < options_.data_stat_nbatch; ++b) {
        probe.next_of(int(s), batch);
        upload(batch, frames, labels);
        accumulator.add(space_, frames);
      }
    return accumulator.stat();
  }

  bool short_of_sel(NeighborStat const& stat) const {
    for (int t = 0; t < ntypes_; ++t)
      if (stat.max_neighbors[std::size_t(t)] > config_.descriptor.sel[std::size_t(t)]) return true;
    return false;
  }

  /// The warning printed before the first step: the neighbour counts `stat` of `frames` exceed
  /// sel. `all_frames`: every training frame was counted (else: how many neighbours the model drops
  /// in them, and where to get the counts of all).
  void set_sel_warning(NeighborStat const& stat, std::string const& frames, bool all_frames) {
    char rcut[32];
    std::snprintf(rcut, sizeof rcut, "%g", config_.descriptor.rcut);
    std::string const need = list_text(stat.max_neighbors);
    sel_warning_ = "descriptor.sel " + list_text(config_.descriptor.sel) + " is too small for these data: " + frames +
                   " have up to " + need + " neighbours of each type within rcut " + rcut + " A";
    if (all_frames)
      sel_warning_ += "; use sel >= " + need + " (\"sel\": \"auto\" takes them from the data)";
    else
      sel_warning_ += " (" + std::to_string(stat.beyond_start_sel) + " neighbours beyond sel dropped in them); use sel >= " +
                      need + " (dpk-train neighbor-stat counts over all frames)";
  }

  /// Key of a one-frame training batch for EnergyModel::prepare: its system and frame.
  static std::uint64_t frame_key(HostBatch const& batch) {
    return (std::uint64_t(std::uint32_t(batch.system)) << 32) | std::uint32_t(batch.frames.at(0));
  }
  /// Summary of the frames whose setup the model kept (this rank).
  std::string kept_setups_line() const {
    auto const& kept = model_->kept_setups();
    auto mib = [](std::size_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20); };
    return "dpk-train: batch setups kept for " + std::to_string(kept.size()) + " frame(s), " + mib(kept.bytes()) +
           " of " + mib(kept.budget()) + " MiB (DPK_SETUP_CACHE_MB); reused in " + std::to_string(kept.hits()) + " of " +
           std::to_string(kept.hits() + kept.misses()) + " steps (rank 0)";
  }

  /// Runs `f` on the batch `batch` drawn from `sampler`; coincident atoms become an error
  /// naming the system and its frame.
  template <class F>
  static auto on_batch(HostBatch const& batch, DataSampler const& sampler, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (CoincidentAtomsError const& e) {
      auto const& systems = sampler.systems();
      std::string const system =
          batch.system >= 0 && std::size_t(batch.system) < systems.size() ? systems[std::size_t(batch.system)].path : "?";
      int const frame = e.frame >= 0 && std::size_t(e.frame) < batch.frames.size() ? batch.frames[std::size_t(e.frame)] : -1;
      throw Error("system '" + system + "' frame " + std::to_string(frame) + ": " +
                  CoincidentAtomsError::pair_text(e.atom_i, e.atom_j, e.distance, e.limit));
    }
  }

  void scale(View1<Scalar, memory_space> const& v, Scalar factor) const {
    scale_view(space_, v, factor);
  }
 public:
  /// v *= factor on `space` (public: CUDA extended lambdas may not live in private members).
  static void scale_view(ExecutionSpace const& space, View1<Scalar, memory_space> const& v, Scalar factor) {
    Kokkos::parallel_for(
        "dpk::train::average_gradient", Kokkos::RangePolicy<ExecutionSpace>(space, 0, v.extent(0)),
        KOKKOS_LAMBDA(std::size_t const i) { v(i) *= factor; });
  }

 private:

  /// `config` with training.numb_steps = ceil(num_epoch x deepmd_total_batches) when num_epoch
  /// is given (DeePMD-kit 3.2's rule, deepmd/tf/entrypoints/train.py).
  static InputConfig with_epoch_steps(InputConfig config, std::vector<System> const& training) {
    if (config.training.num_epoch && !training.empty())
      config.training.numb_steps = long(std::ceil(*config.training.num_epoch *
                                                  double(deepmd_total_batches(config.training.training_data, training))));
    return config;
  }

  /// Loss prefactors at `step`.
  LossPrefactors prefactors_at(long step) const {
    PrefactorValues const p = prefactors(config_.loss, schedule_, step);
    return LossPrefactors{p.energy, p.force, p.virial};
  }

  /// Writes the lcurve line of step_: training metrics of the batch the next step will use
  /// (with the current parameters; the sampler is rewound afterwards) and validation metrics
  /// over numb_btch validation batches, both reduced over ranks.
  void display(LearningCurveWriter* curve) {
    double const lr = schedule_.value_f32(step_);  // the lcurve column, as DeePMD-kit prints its float32 rate
    LossPrefactors const pref = prefactors_at(step_);
    std::string const state = sampler_->rng_state();
    sampler_->next(host_batch_);
    sampler_->set_rng_state(state);
    upload(host_batch_, frames_, labels_);
    LossMetrics const train =
        on_batch(host_batch_, *sampler_, [&] { return loss_.evaluate(space_, *model_, frames_, labels_, pref); });
    std::vector<double> t = {double(train.nframes) * train.loss, double(train.nframes) * train.rmse_e,
                             double(train.nframes) * train.rmse_f, double(train.nframes) * train.rmse_v,
                             double(train.nframes)};
    comm_.allreduce_sum(t);
    CurveMetrics training{t[0] / t[4], t[1] / t[4], t[2] / t[4], t[3] / t[4]};
    CurveMetrics validation;
    long validation_frames = 0;
    if (validation_sampler_) {
      // numb_btch batches: every rank draws them all (same stream), evaluates its share
      // (batch b on rank b % ranks).
      std::vector<double> v(6, 0.0);
      int const nbatch = config_.training.validation_data->numb_btch;
      HostBatch batch;
      for (int b = 0; b < nbatch; ++b) {
        validation_sampler_->next(batch);
        if (b % comm_.size() != comm_.rank()) continue;
        upload(batch, valid_frames_, valid_labels_);
        LossMetrics const m = on_batch(batch, *validation_sampler_, [&] {
          return loss_.evaluate(space_, *model_, valid_frames_, valid_labels_, pref);
        });
        double const w = double(batch.natoms);  // DeePMD-kit weights batches by atom count
        v[0] += w * m.loss;
        v[1] += w * m.rmse_e;
        v[2] += w * m.rmse_f;
        v[3] += w * m.rmse_v;
        v[4] += w;
        v[5] += double(batch.nframes);
      }
      comm_.allreduce_sum(v);
      validation = {v[0] / v[4], v[1] / v[4], v[2] / v[4], v[3] / v[4]};
      validation_frames = long(v[5]);
    }
    last_curve_line_ = {step_, training, validation, lr, validation_frames};
    if (curve) curve->write(step_, validation, training, lr);
  }

  /// Checkpoint `<save_ckpt>-<done>` (atomic), pointer file `checkpoint`, old ones pruned.
  void save_checkpoint(long done) {
    ModelFileData const d = snapshot(true);  // collective (sampler states)
    if (comm_.is_root()) {
      std::string const name = config_.training.save_ckpt + "-" + std::to_string(done);
      std::string const file = path(name);
      write_model_file(file, d);
      // The pointer goes into place after its checkpoint: it always names a complete file.
      write_file_atomically(path("checkpoint"), name + "\n", "checkpoint pointer");
      if (file != last_checkpoint_) saved_.push_back(file);
      while (int(saved_.size()) > std::max(1, options_.keep_checkpoints)) {
        std::remove(saved_.front().c_str());
        saved_.erase(saved_.begin());
      }
      last_checkpoint_ = file;
    }
    comm_.barrier();
  }

  [[noreturn]] void nan_stop(double local_loss) {
    std::ostringstream message;
    message << "training stopped: the loss is not finite at step " << step_ << " (this rank's loss " << local_loss
            << "). Parameters were not updated with it; the last good checkpoint is "
            << (last_checkpoint_.empty() ? std::string("(none written yet)") : "'" + last_checkpoint_ + "'")
            << ". Lower learning_rate.start_lr or check the data for bad frames.";
    throw Error(message.str());
  }

  void banner(long last) const {
    if (!log()) return;
    // A device's concurrency counts its hardware threads (hundreds of thousands): say "device".
    std::string const workers = host_schedule_v<ExecutionSpace>
                                    ? std::to_string(ExecutionSpace().concurrency()) + " thread(s) per rank"
                                    : std::string("one device per rank");
    *log() << "dpk-train: backend " << ExecutionSpace::name() << ", " << workers << ", "
           << comm_.size() << " rank(s), precision " << (std::is_same_v<Scalar, float> ? "float32" : "float64")
           << ", " << model_->num_parameters() << " parameters\n";
    *log() << "dpk-train: " << config_.training.numb_steps << " steps in the schedule";
    if (config_.training.num_epoch)
      *log() << " (num_epoch " << *config_.training.num_epoch << " x "
             << deepmd_total_batches(config_.training.training_data, sampler_->systems()) << " batches)";
    *log() << " (lr " << schedule_.start_lr()
           << " -> " << schedule_.stop_lr() << ", decay_steps " << schedule_.decay_steps() << ", rate "
           << schedule_.decay_rate() << (schedule_.smooth() ? " smooth" : "");
    if (schedule_.warmup_steps() > 0) *log() << ", warmup " << schedule_.warmup_steps() << " steps";
    *log() << "), running steps " << step_ << " -> " << last << "\n";
    for (auto const& w : config_.warnings) *log() << "dpk-train: warning: " << w << "\n";
    if (!sel_warning_.empty()) *log() << "dpk-train: warning: " << sel_warning_ << "\n";
    // DeePMD-kit's "Summary of DataSystem" table: atoms, batch size, batches, probability.
    auto const& systems = sampler_->systems();
    std::vector<long> const batches = system_batch_counts(systems, sampler_->batch_size());
    std::vector<double> const probability = sampler_->probabilities();
    *log() << "dpk-train: training systems (natoms, batch size, batches, probability, pbc):\n";
    for (std::size_t s = 0; s < systems.size(); ++s) {
      char text[128];
      std::snprintf(text, sizeof text, " %6d %6d %6ld  %.3e  %c  ", systems[s].natoms,
                    sampler_->batch_size().frames_for(s, systems[s].natoms), batches[s], probability[s],
                    systems[s].periodic ? 'T' : 'F');
      *log() << "dpk-train:  " << text << systems[s].path << "\n";
    }
  }

  void progress(long done, long last, double steps_per_second, double elapsed) const {
    if (!log()) return;
    double const eta = steps_per_second > 0 ? double(last - done) / steps_per_second : 0.0;
    char text[256];
    std::snprintf(text, sizeof(text), "dpk-train: step %ld/%ld  %.2f steps/s  elapsed %s  ETA %s", done, last,
                  steps_per_second, format_seconds(elapsed).c_str(), format_seconds(eta).c_str());
    *log() << text << std::endl;
  }

  static std::string format_seconds(double seconds) {
    long s = long(seconds + 0.5);
    char text[64];
    if (s >= 86400)
      std::snprintf(text, sizeof(text), "%ldd%02ldh%02ldm", s / 86400, (s % 86400) / 3600, (s % 3600) / 60);
    else if (s >= 3600)
      std::snprintf(text, sizeof(text), "%ldh%02ldm%02lds", s / 3600, (s % 3600) / 60, s % 60);
    else if (seconds >= 60)
      std::snprintf(text, sizeof(text), "%ldm%02lds", s / 60, s % 60);
    else
      std::snprintf(text, sizeof(text), "%.1fs", seconds);
    return text;
  }

  InputConfig config_;
  TrainerOptions options_;
  Communicator& comm_;
  ExecutionSpace space_;
  ExponentialLearningRate schedule_;
  double worker_factor_ = 1;
  int ntypes_ = 0;
  std::unique_ptr<Model> model_;
  EnerLoss<Scalar, ExecutionSpace> loss_;  ///< prediction and loss cotangent of the current batch
  std::optional<ModelCompression> compression_;  ///< frozen tables of compressed training (--init-frz-model)
  std::unique_ptr<Adam<Scalar, ExecutionSpace>> adam_;
  std::optional<DataSampler> sampler_, validation_sampler_;
  std::vector<double> bias_counts_, bias_energies_;
  HostBatch host_batch_;
  Frames<Scalar, memory_space> frames_, valid_frames_;
  Labels<Scalar, memory_space> labels_, valid_labels_;
  long step_ = 0;
  std::string last_checkpoint_;
  std::vector<std::string> saved_;
  std::optional<double> min_neighbor_distance_;  ///< A, of the training data (model file key training.min_neighbor_distance)
  std::optional<double> auto_sel_min_distance_;  ///< A, from the statistics of "sel": "auto" (every rank)
  bool all_frames_counted_ = false;  ///< the neighbours of every training frame were counted (sel warning from them)
  std::string sel_warning_;  ///< set when sel is below the neighbour counts (all training frames, else the statistics frames)
  LearningCurveLine last_curve_line_;
};

}  // namespace dpk
