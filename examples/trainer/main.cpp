// dpk-train: train a DeePMD-kit se_e2_a model from its input.json, or test a trained model.
//
//   dpk-train train input.json [--restart CKPT] [--init-model MODEL] [--init-frz-model COMPRESSED]
//                              [--output DIR] [--stop-at STEP]
//                              [--timing-file FILE]
//   dpk-train test -m MODEL -s SYSTEM [-n N] [-d DETAIL_PREFIX]
//   dpk-train export -m MODEL -o model.dp|model.yaml     (DeePMD-kit 3.x model, docs/interop.md)
//   dpk-train import model.dp|model.yaml -o MODEL        (--init-model also takes .dp/.yaml)
//   dpk-train compress -m MODEL -o COMPRESSED [-t input.json] [--step 0.01] [--extrapolate 5]
//                      [--check-frequency -1]            (tabulated embedding nets, docs/compression.md)
//   mpirun -np N dpk-train train input.json      (data parallel; rank 0 writes the files)
//
// Kokkos options (--kokkos-num-threads=N, ...) and OMP_NUM_THREADS set the threads per rank.
// Thread defaults (docs/tuning.md): OMP_PROC_BIND=spread OMP_PLACES=threads when the user set
// neither, binding is safe and the threads fill the CPUs (fewer stay unbound; applied by
// re-executing before OpenMP starts), OpenBLAS threads
// per call as dpk::program::default_blas_threads unless OPENBLAS_NUM_THREADS is set; both are
// printed at start. DPK_THREAD_DEFAULTS=0 turns the binding default off.
#include <dpk/train.hpp>

#include "program_threads.hpp"

#include <CLI/CLI.hpp>

#if defined(DPK_ENABLE_INTEROP)
#include <dpk/interop/deepmd.hpp>
#endif

#include <dpk/io/load_model.hpp>  // compressed models: their tables as the model takes them

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Space = dpk::DefaultExecutionSpace;

/// Ranks sharing this node (from the MPI launcher's environment; all ranks when unknown).
int local_ranks(dpk::Communicator const& comm) { return dpk::program::local_ranks_from_environment(comm.size()); }

/// Applies the BLAS default and returns the line describing the thread setup.
std::string configure_threads() { return dpk::program::configure_threads(Space().concurrency()); }

void check_oversubscription(dpk::Communicator const& comm) {
  unsigned const cores = std::thread::hardware_concurrency();
  int const threads = Space().concurrency();
  int const ranks = local_ranks(comm);
#if defined(KOKKOS_ENABLE_CUDA)
  (void)threads;
  (void)ranks;
  (void)cores;
#else
  int const mask = dpk::program::launcher_affinity_cpus();
  if (mask > 0 && threads > mask && long(ranks) * threads <= long(cores))
    // Any rank can hit this (its own binding); report it from every rank that does.
    std::cerr << "dpk-train: warning: rank " << comm.rank() << " has " << threads << " thread(s) but may run on "
              << mask << " CPU(s) only (the launcher's binding); use mpirun --map-by slot:PE=" << threads
              << " (or --bind-to none) so that each rank gets " << threads << " cores\n";
  if (!comm.is_root()) return;
  if (cores > 0 && long(ranks) * threads > long(cores))
    std::cerr << "dpk-train: warning: " << ranks << " rank(s) x " << threads << " thread(s) = " << ranks * threads
              << " exceeds the " << cores << " cores of this node; set OMP_NUM_THREADS=" << std::max(1u, cores / ranks)
              << " (and OMP_PROC_BIND=spread OMP_PLACES=threads, mpirun --bind-to none or --map-by "
                 "slot:PE=<threads>) for one thread per core\n";
  int const blas = dpk::blas_threads();
  if (blas > 1 && threads > 1)
    std::cerr << "dpk-train: warning: " << blas << " OpenBLAS thread(s) per call on top of " << threads
              << " Kokkos thread(s) per rank oversubscribe the cores (docs/tuning.md); unset OPENBLAS_NUM_THREADS "
                 "for dpk's default\n";
#endif
}

template <class Scalar>
dpk::TrainingSummary train_as(dpk::InputConfig const& config, dpk::TrainerOptions const& options,
                              dpk::Communicator& comm) {
  dpk::Trainer<Scalar, Space> trainer(config, options, comm);
  return trainer.run();
}

struct ErrorStats {
  double sum_abs = 0, sum_sq = 0;
  long count = 0;
  void add(double diff) {
    sum_abs += std::fabs(diff);
    sum_sq += diff * diff;
    ++count;
  }
  double mae() const { return count ? sum_abs / count : 0.0; }
  double rmse() const { return count ? std::sqrt(sum_sq / count) : 0.0; }
};

/// The file `dp test -d PREFIX` writes for `suffix` (".e.out", ...): like Python's
/// Path(PREFIX).with_suffix(suffix), so an extension of PREFIX's last component is replaced.
std::string detail_file_name(std::string const& prefix, std::string const& suffix) {
  std::size_t const slash = prefix.find_last_of('/');
  std::size_t const start = slash == std::string::npos ? 0 : slash + 1;
  std::size_t const dot = prefix.find_last_of('.');
  bool const has_suffix = dot != std::string::npos && dot > start && dot + 1 < prefix.size();
  return (has_suffix ? prefix.substr(0, dot) : prefix) + suffix;
}

/// One detail file of `dpk-train test -d`: dp test's header line "# SYSTEM: columns", then rows
/// of values in %.16e (17 significant digits: every float64 reads back exactly).
class DetailFile {
 public:
  DetailFile(std::string const& path, std::string const& header) : path_(path), out_(path) {
    if (!out_) throw dpk::Error("test: cannot write detail file '" + path + "'");
    out_ << "# " << header << "\n";
  }
  /// Writes one row of values.
  void row(std::vector<double> const& values) {
    char text[40];
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::snprintf(text, sizeof text, "%.16e", values[i]);
      out_ << (i ? " " : "") << text;
    }
    out_ << "\n";
    if (!out_) throw dpk::Error("test: write failed on detail file '" + path_ + "'");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

template <class Scalar>
int test_as(dpk::ModelFileData const& file, std::string const& model_path, std::string const& system_path,
            int max_frames, std::string const& detail) {
  using Mem = dpk::memory_space_t<Space>;
  dpk::EnergyModel<Scalar, Space> model(file.descriptor, file.fitting, file.ntypes);
  dpk::install_model_data(file, model, model_path);  // a compressed model's tables too
  long outside = 0;
  dpk::System const system = dpk::read_system(system_path, file.type_map);
  int const nframes = max_frames > 0 ? std::min(max_frames, system.nframes) : system.nframes;
  dpk::DataSampler sampler(std::vector<dpk::System>{system}, dpk::BatchSize{false, 1, {}}, 0, {dpk::SamplingMode::sequential, {}});
  dpk::Frames<Scalar, Mem> frames;
  dpk::Labels<Scalar, Mem> labels;
  dpk::Prediction<Scalar, Mem> prediction;
  ErrorStats energy, energy_per_atom, force, virial, virial_per_atom;
  // dp test's detail files (deepmd/infer/model_test/ener.py): .e.out, .e_peratom.out, .f.out,
  // .v.out, .v_peratom.out (reference virial 0 without virial labels, as dp test writes); the
  // header names the system as given.
  std::optional<DetailFile> e_out, e_atom_out, f_out, v_out, v_atom_out;
  if (!detail.empty()) {
    std::string const e_columns = system_path + ": data_e pred_e";
    std::string const v_columns = system_path +
                                  ": data_vxx data_vxy data_vxz data_vyx data_vyy data_vyz data_vzx data_vzy "
                                  "data_vzz pred_vxx pred_vxy pred_vxz pred_vyx pred_vyy pred_vyz pred_vzx pred_vzy "
                                  "pred_vzz";
    e_out.emplace(detail_file_name(detail, ".e.out"), e_columns);
    e_atom_out.emplace(detail_file_name(detail, ".e_peratom.out"), e_columns);
    f_out.emplace(detail_file_name(detail, ".f.out"),
                  system_path + ": data_fx data_fy data_fz pred_fx pred_fy pred_fz");
    v_out.emplace(detail_file_name(detail, ".v.out"), v_columns);
    v_atom_out.emplace(detail_file_name(detail, ".v_peratom.out"), v_columns);
  }
  int const natoms = system.natoms;
  for (int f = 0; f < nframes; ++f) {
    dpk::HostBatch batch = sampler.batch(0, f, 1);
    dpk::upload(batch, frames, labels);
    try {
      model.predict(Space(), frames, prediction, true, false);
    } catch (dpk::CoincidentAtomsError const& e) {
      throw dpk::Error("system '" + system_path + "' frame " + std::to_string(f) + ": " +
                       dpk::CoincidentAtomsError::pair_text(e.atom_i, e.atom_j, e.distance, e.limit));
    }
    outside += model.lookups_outside_table(Space());
    auto e = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prediction.energy);
    auto force_pred = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prediction.force);
    auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prediction.virial);
    double const de = double(e(0)) - batch.energy[0];
    energy.add(de);
    energy_per_atom.add(de / natoms);
    if (e_out) {
      e_out->row({batch.energy[0], double(e(0))});
      e_atom_out->row({batch.energy[0] / natoms, double(e(0)) / natoms});
    }
    for (int a = 0; a < natoms; ++a) {
      for (int d = 0; d < 3; ++d) force.add(double(force_pred(a, d)) - batch.force[std::size_t(a) * 3 + d]);
      if (f_out)
        f_out->row({batch.force[std::size_t(a) * 3], batch.force[std::size_t(a) * 3 + 1],
                    batch.force[std::size_t(a) * 3 + 2], double(force_pred(a, 0)), double(force_pred(a, 1)),
                    double(force_pred(a, 2))});
    }
    if (system.has_virial) {
      for (int c = 0; c < 9; ++c) {
        double const dv = double(w(0, c)) - batch.virial[std::size_t(c)];
        virial.add(dv);
        virial_per_atom.add(dv / natoms);
      }
    }
    if (v_out) {
      std::vector<double> row(18, 0.0), row_per_atom(18);
      for (int c = 0; c < 9; ++c) {
        if (system.has_virial) row[std::size_t(c)] = batch.virial[std::size_t(c)];
        row[std::size_t(c) + 9] = double(w(0, c));
      }
      for (std::size_t c = 0; c < 18; ++c) row_per_atom[c] = row[c] / natoms;
      v_out->row(row);
      v_atom_out->row(row_per_atom);
    }
  }
  std::printf("# model          : %s (%s%s)\n", model_path.c_str(), file.precision.c_str(),
              file.compression ? ", compressed" : "");
  std::printf("# system         : %s\n", system_path.c_str());
  std::printf("# number of test data : %d\n", nframes);
  std::printf("Energy MAE         : %e eV\n", energy.mae());
  std::printf("Energy RMSE        : %e eV\n", energy.rmse());
  std::printf("Energy MAE/Natoms  : %e eV\n", energy_per_atom.mae());
  std::printf("Energy RMSE/Natoms : %e eV\n", energy_per_atom.rmse());
  std::printf("Force  MAE         : %e eV/A\n", force.mae());
  std::printf("Force  RMSE        : %e eV/A\n", force.rmse());
  if (system.has_virial) {
    std::printf("Virial MAE         : %e eV\n", virial.mae());
    std::printf("Virial RMSE        : %e eV\n", virial.rmse());
    std::printf("Virial MAE/Natoms  : %e eV\n", virial_per_atom.mae());
    std::printf("Virial RMSE/Natoms : %e eV\n", virial_per_atom.rmse());
  }
  if (model.neighbors_dropped() > 0)
    std::printf("# neighbours dropped beyond sel: %ld\n", model.neighbors_dropped());
  if (outside > 0)
    std::printf("# embedding inputs beyond the compression tables (value held at the table end): %ld\n", outside);
  return 0;
}

/// dpk-train neighbor-stat: DeePMD-kit's neighbour statistics of `roots` (systems or folders
/// holding them), printed as `dp neighbor-stat` logs them.
void neighbor_stat(std::vector<std::string> const& roots, double rcut, std::vector<std::string> const& type_map) {
  std::vector<std::string> paths;
  for (auto const& root : roots)
    for (auto& p : dpk::expand_systems(root)) paths.push_back(std::move(p));
  std::vector<dpk::System> systems = dpk::read_systems(paths, type_map);
  int ntypes = int(type_map.size());
  for (auto const& s : systems)
    for (int t : s.types) ntypes = std::max(ntypes, t + 1);
  dpk::DataSampler const sampler(std::move(systems), dpk::BatchSize{false, 1, {}}, 0,
                                 {dpk::SamplingMode::sequential, {}});
  dpk::NeighborStat const stat = dpk::data_neighbor_stat<double>(Space(), sampler, rcut, ntypes);
  std::printf("# %zu system(s), %ld frame(s), rcut %g A, %d type(s)", paths.size(), stat.frames, rcut, ntypes);
  if (!type_map.empty()) std::printf(": %s", dpk::detail::join_names(type_map).c_str());
  // numpy's str() of the counts, as DeePMD-kit logs them: right-aligned to the widest
  int width = 1;
  for (int n : stat.max_neighbors) width = std::max(width, int(std::to_string(n).size()));
  std::printf("\nmin_nbor_dist: %f\nmax_nbor_size: [", stat.min_distance);
  for (int t = 0; t < ntypes; ++t) std::printf(t ? " %*d" : "%*d", width, stat.max_neighbors[std::size_t(t)]);
  std::printf("]\n");
}

/// dpk-train compress: tables of every embedding net of model `in` (docs/compression.md),
/// written with the original weights into `out`. The input range comes from the smallest
/// neighbour distance of the training data of `input` (-t), else from the model file.
void compress_model(std::string const& in, std::string const& out, std::string const& input, double step,
                    double extrapolate, long check_frequency) {
  dpk::require(step > 0 && std::isfinite(step), "compress: --step must be positive, got " + std::to_string(step));
  dpk::require(extrapolate >= 1 && std::isfinite(extrapolate),
               "compress: --extrapolate must be at least 1, got " + std::to_string(extrapolate));
  dpk::ModelFileData data = dpk::read_model_file(in);
  dpk::require(!data.compression, "compress: model '" + in +
                                      "' is already compressed; compress the original (uncompressed) model");
  dpk::EnergyModel<double, Space> model(data.descriptor, data.fitting, data.ntypes);
  dpk::install_model_data(data, model, in);
  double rmin = std::numeric_limits<double>::infinity();
  std::string source;
  if (!input.empty()) {
    dpk::InputConfig const config = dpk::read_input(input);
    dpk::DataSampler const sampler(dpk::read_systems(config.training.training_data.systems, data.type_map),
                                   dpk::BatchSize{false, 1, {}}, 0, {dpk::SamplingMode::sequential, {}});
    rmin = dpk::data_min_neighbor_distance(Space(), model, sampler);
    source = "training data of " + input;
  } else if (auto const stored = dpk::stored_min_neighbor_distance(data)) {
    rmin = *stored;
    source = "model file";
  } else {
    throw dpk::Error("compress: model '" + in +
                     "' does not store the smallest neighbour distance of its training data; give the training "
                     "input with -t input.json");
  }
  dpk::require(std::isfinite(rmin) && rmin > 0,
               "compress: no atom of the " + source + " has a neighbour within rcut; nothing to tabulate for");
  dpk::EmbeddingTableData const table = model.build_embedding_table(rmin, step, extrapolate);
  data.compression = dpk::model_compression(table, rmin, check_frequency);
  if (data.kind == "checkpoint") {  // a model file: no optimiser state
    data.kind = "model";
    data.adam_m.clear();
    data.adam_v.clear();
    data.sampler_states.clear();
  }
  dpk::write_model_file(out, data);
  std::size_t values = data.compression->table.size();
  std::printf("dpk-train: compressed %s -> %s\n", in.c_str(), out.c_str());
  std::printf("# smallest neighbour distance: %.6f A (%s)\n", rmin, source.c_str());
  std::printf("# step %g, extrapolate %g, check frequency %ld\n", step, extrapolate, check_frequency);
  for (int k = 0; k < table.nnets(); ++k) {
    auto const& r = table.ranges[std::size_t(k)];
    std::printf("# embedding net %d: s in [%.6f, %.6f) at %g (%d intervals), [%.6f, %.6f) at %g (%d intervals)\n",
                k, r.lower, r.upper, step, r.first_intervals, r.upper, r.max, 10 * step, r.second_intervals);
  }
  std::printf("# table: %zu coefficients (%.1f MiB in float64), the original weights kept\n", values,
              double(values) * 8 / (1024.0 * 1024.0));
}

/// Reads the DeePMD-kit model `path` (.dp/.yaml) into dpk's model (docs/interop.md).
dpk::ModelFileData read_deepmd(std::string const& path) {
#if defined(DPK_ENABLE_INTEROP)
  return dpk::interop::read_deepmd_model(path);
#else
  throw dpk::Error("'" + path + "': this dpk-train was built without DeePMD-kit interop (needs HDF5 and yaml-cpp)");
#endif
}

/// True when `path` names a DeePMD-kit model file (.dp, .yaml, .yml).
bool is_deepmd_path(std::string const& path) {
  for (char const* ext : {".dp", ".yaml", ".yml"}) {
    std::string const e = ext;
    if (path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

/// dpk-train export: dpk model `in` -> DeePMD-kit model `out` (.dp or .yaml).
void export_deepmd(std::string const& in, std::string const& out) {
#if defined(DPK_ENABLE_INTEROP)
  dpk::ModelFileData const data = dpk::read_model_file(in);
  dpk::require(!data.compression, "export: '" + in +
                                      "' is a compressed model; DeePMD-kit export of the tables is not implemented "
                                      "(export the original model)");
  dpk::interop::write_deepmd_model(out, data, in);
  std::cout << "dpk-train: wrote DeePMD-kit model " << out << " (" << data.parameters.size() << " parameters, "
            << data.precision << ")" << std::endl;
#else
  (void)in;
  throw dpk::Error("export to '" + out + "': this dpk-train was built without DeePMD-kit interop (needs HDF5 and yaml-cpp)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
#if defined(KOKKOS_ENABLE_OPENMP)
  // Before MPI and before the OpenMP runtime has threads: binding defaults need a re-exec.
  dpk::program::reexec_with_environment_defaults(
      argv, dpk::program::openmp_binding_defaults(dpk::program::requested_threads(argc, argv)));
#endif
  dpk::MpiSession mpi(&argc, &argv);
  int status = 0;
  // Kokkos::initialize prints Kokkos' help for --help (and leaves the argument in place): hide
  // --help from Kokkos behind a placeholder and restore it for CLI11, so that `dpk-train --help`
  // and `dpk-train train --help` print dpk's help (--kokkos-help still prints Kokkos').
  static char help_placeholder[] = "--dpk-help-placeholder";
  static char help_flag[] = "--help";
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) argv[i] = help_placeholder;
  dpk::translate_kokkos_arguments(argc, argv);  // --kokkos-num-threads works with Kokkos 3.4 too
  {
    Kokkos::ScopeGuard kokkos(argc, argv);  // consumes --kokkos-* options
    for (int i = 1; i < argc; ++i)
      if (argv[i] == help_placeholder) argv[i] = help_flag;
    dpk::Communicator comm;
    CLI::App app{"dpk-train: train DeePMD-kit se_e2_a models with Kokkos (dpk)"};
    app.require_subcommand(1);
    auto* train = app.add_subcommand("train", "train a model from a DeePMD-kit input.json");
    std::string input;
    dpk::TrainerOptions options;
    train->add_option("input", input, "DeePMD-kit input.json")->required()->check(CLI::ExistingFile);
    train->add_option("--restart", options.restart, "continue from a checkpoint (file, or the save_ckpt prefix)");
    train->add_option("--init-model", options.init_model, "start from this model's parameters and statistics")
        ->check(CLI::ExistingFile);
    train->add_option("--init-frz-model", options.init_frz_model,
                      "start from a compressed model (dpk-train compress) and train only its fitting nets, the "
                      "embedding tables frozen")
        ->check(CLI::ExistingFile);
    train->add_option("-o,--output", options.output_dir, "folder for lcurve.out, checkpoints and the model");
    train->add_option("--stop-at", options.stop_at,
                      "stop after this many steps without changing the schedule (continue later with --restart)")
        ->check(CLI::NonNegativeNumber);
    train->add_option("--model-out", options.model_out, "file name of the final model (in --output)");
    train->add_option("--timing-file", options.timing_file,
                      "write one line per step: step, wall seconds of the update, of the lcurve/validation "
                      "line and of the checkpoint (rank 0)");
    train->add_flag("--skip-neighbor-stat", options.skip_neighbor_stat,
                    "do not search all training frames for the smallest neighbour distance (stored in the model "
                    "for compress; without it compress needs -t input.json)");
    train->add_option("--data-stat-nbatch", options.data_stat_nbatch,
                      "training batches of every system for the statistics (default: the input's "
                      "model.data_stat_nbatch, else 10)")
        ->check(CLI::PositiveNumber);
    std::string frame_walk = "sets";
    train->add_option("--frame-walk", frame_walk,
                      "how batches walk a system's frames: 'sets', one set.* folder at a time as DeePMD-kit's "
                      "TensorFlow backend does (default), or 'frames', all frames of a system as one pool; a "
                      "restart continues its checkpoint's walk")
        ->check(CLI::IsMember({"sets", "frames"}));

    auto* test = app.add_subcommand("test", "energy/force/virial errors of a model on a system (like dp test)");
    std::string model_path, system_path, detail;
    int max_frames = 0;
    test->add_option("-m,--model", model_path, "model file written by dpk-train (or a DeePMD-kit .dp/.yaml)")->required()->check(CLI::ExistingFile);
    test->add_option("-s,--system", system_path, "deepmd/npy system directory")->required()->check(CLI::ExistingDirectory);
    test->add_option("-n,--numb-test", max_frames, "frames to test (0 = all)")->check(CLI::NonNegativeNumber);
    test->add_option("-d,--detail-file", detail, "prefix of per-frame output files (.e.out, .f.out, .v.out)");

    auto* export_cmd = app.add_subcommand("export", "write a model as a DeePMD-kit 3.x model (.dp HDF5 or .yaml)");
    std::string export_in, export_out;
    export_cmd->add_option("-m,--model", export_in, "dpk model file")->required()->check(CLI::ExistingFile);
    export_cmd->add_option("-o,--output", export_out, "DeePMD-kit model to write: model.dp or model.yaml")->required();
    auto* import_cmd = app.add_subcommand("import", "convert a DeePMD-kit 3.x model (.dp or .yaml) into a dpk model");
    std::string import_in, import_out;
    import_cmd->add_option("input", import_in, "DeePMD-kit model: model.dp or model.yaml")->required()
        ->check(CLI::ExistingFile);
    import_cmd->add_option("-o,--output", import_out, "dpk model file to write")->required();

    auto* compress = app.add_subcommand("compress", "tabulate the embedding nets of a model (like dp compress)");
    std::string compress_in, compress_out = "model-compressed.dpk", compress_input;
    double compress_step = 0.01, compress_extrapolate = 5;
    long check_frequency = -1;
    compress->add_option("-m,--model", compress_in, "dpk model file to compress")->required()->check(CLI::ExistingFile);
    compress->add_option("-o,--output", compress_out, "compressed model file to write")->capture_default_str();
    compress->add_option("-t,--training-script", compress_input,
                         "input.json of the training: its training systems give the smallest neighbour distance")
        ->check(CLI::ExistingFile);
    compress->add_option("--step", compress_step, "stride of the first table (the second uses 10 x step)")->capture_default_str();
    compress->add_option("--extrapolate", compress_extrapolate,
                         "the second table ends at extrapolate x the first table's upper end")->capture_default_str();
    compress->add_option("--check-frequency", check_frequency,
                         "count embedding inputs beyond the tables every N evaluations (-1: never)")->capture_default_str();

    auto* nstat = app.add_subcommand("neighbor-stat", "the smallest neighbour distance and the most neighbours of "
                                                      "each type within rcut over every frame (like dp neighbor-stat)");
    std::vector<std::string> nstat_systems, nstat_types;
    double nstat_rcut = 6.0;
    nstat->add_option("-s,--system", nstat_systems,
                      "deepmd/npy systems, or folders searched for them (every folder holding a type.raw)")
        ->required();
    nstat->add_option("-r,--rcut", nstat_rcut, "cutoff radius (A)")->capture_default_str()->check(CLI::PositiveNumber);
    nstat->add_option("-t,--type-map", nstat_types,
                      "element names in the model's type order (default: the systems' own type indices)");

    try {
      app.parse(argc, argv);
    } catch (CLI::ParseError const& e) {
      int const code = app.exit(e);
      return code;  // ScopeGuard and MpiSession clean up
    }
    try {
      if (*train) {
        dpk::InputConfig const config = dpk::read_input(input);
        dpk::require(int(!options.restart.empty()) + int(!options.init_model.empty()) +
                         int(!options.init_frz_model.empty()) <= 1,
                     "--restart, --init-model and --init-frz-model cannot be used together");
        std::string const threads = configure_threads();
        if (comm.is_root())
          std::cout << "dpk-train: " << threads << "\ndpk-train: " << dpk::program::describe_blas_kernels() << std::endl;
        check_oversubscription(comm);
        options.frame_walk = dpk::parse_frame_walk(frame_walk, "--frame-walk");
        std::string converted;  // --init-model model.dp|model.yaml: a dpk model file for the trainer
        std::string const init_model = options.init_model;
        if (!options.init_model.empty() && is_deepmd_path(options.init_model)) {
          converted = (std::filesystem::temp_directory_path() /
                       ("dpk-init-model." + std::to_string(::getpid()) + ".dpk")).string();
          dpk::write_model_file(converted, read_deepmd(options.init_model));
          if (comm.is_root()) std::cout << "dpk-train: --init-model " << options.init_model << " (DeePMD-kit)" << std::endl;
          options.init_model = converted;
        }
        try {
          if (config.precision() == "float32")
            train_as<float>(config, options, comm);
          else
            train_as<double>(config, options, comm);
        } catch (dpk::Error const& e) {
          if (converted.empty()) throw;
          std::remove(converted.c_str());
          throw dpk::Error("--init-model '" + init_model + "' (converted to '" + converted + "'): " + e.what());
        } catch (...) {
          if (!converted.empty()) std::remove(converted.c_str());
          throw;
        }
        if (!converted.empty()) std::remove(converted.c_str());
      } else if (*compress) {
        configure_threads();
        compress_model(compress_in, compress_out, compress_input, compress_step, compress_extrapolate,
                       check_frequency);
      } else if (*nstat) {
        configure_threads();
        neighbor_stat(nstat_systems, nstat_rcut, nstat_types);
      } else if (*export_cmd) {
        export_deepmd(export_in, export_out);
      } else if (*import_cmd) {
        dpk::ModelFileData const data = read_deepmd(import_in);
        dpk::write_model_file(import_out, data);
        std::cout << "dpk-train: wrote " << import_out << " from DeePMD-kit model " << import_in << " ("
                  << data.parameters.size() << " parameters, " << data.precision << ")" << std::endl;
      } else if (*test) {
        configure_threads();
        dpk::ModelFileData const file =
            is_deepmd_path(model_path) ? read_deepmd(model_path) : dpk::read_model_file(model_path);
        status = file.precision == "float32" ? test_as<float>(file, model_path, system_path, max_frames, detail)
                                             : test_as<double>(file, model_path, system_path, max_frames, detail);
      }
    } catch (std::exception const& e) {
      // Under MPI the rank that failed says so, then takes every rank down (MPI_Abort): the
      // others may be waiting in a collective for it and would hang otherwise.
      if (comm.size() > 1)
        std::cerr << "dpk-train: error on rank " << comm.rank() << " of " << comm.size() << ": " << e.what()
                  << "\ndpk-train: rank " << comm.rank() << " stops every rank (MPI_Abort)" << std::endl;
      else
        std::cerr << "dpk-train: error: " << e.what() << std::endl;
      if (comm.size() > 1) comm.abort(1);
      status = 1;
    }
  }
  return status;
}
