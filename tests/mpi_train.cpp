// MPI tests of the trainer (ctest runs them with mpirun -np 1, 2, 3 and 4): Communicator
// collectives, data-parallel training equivalence (N ranks x batch 1 == 1 rank x batch N on the
// same frames after 20 steps), a restart under MPI (10 steps, restart, 10 more == 20 steps,
// bit for bit), and the validation metrics of lcurve.out with 5 validation batches split over
// N ranks (uneven at 2, 3 and 4): the 1-rank values, every validation frame once; the
// neighbour statistics of all training frames searched in shares over the ranks (brute force).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dpk/train.hpp>
#include "train_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dpk_test::water_frames;

dpk::InputConfig tiny_input(int batch) {
  dpk::InputConfig c;
  c.source = "tiny (mpi_train.cpp)";
  c.type_map = {"O", "H"};
  c.descriptor.sel = {46, 92};
  c.descriptor.neuron = {4, 8};
  c.descriptor.axis_neuron = 2;
  c.descriptor.type_one_side = true;
  c.descriptor.seed = 3;
  c.fitting.neuron = {8, 8};
  c.learning_rate.start_lr = 1e-3;
  c.learning_rate.stop_lr = 1e-4;
  c.learning_rate.decay_steps = 5;
  c.learning_rate.scale_by_worker = "none";
  c.training.numb_steps = 20;
  c.training.seed = 7;
  c.training.disp_freq = 10;
  c.training.save_freq = 0;
  c.training.training_data.batch_size = dpk::BatchSize{false, batch, {}};
  return c;
}

/// `c` with validation data: `numb_btch` batches of one frame.
dpk::InputConfig with_validation(dpk::InputConfig c, int numb_btch) {
  dpk::DataConfig validation;
  validation.batch_size = dpk::BatchSize{false, 1, {}};
  validation.numb_btch = numb_btch;
  c.training.validation_data = validation;
  return c;
}

/// Step and validation columns (rmse_val, rmse_e_val, rmse_f_val) of each line of an
/// lcurve.out with validation and without virial, as printed.
std::vector<std::vector<std::string>> validation_columns(std::string const& file) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(bool(in), file);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    REQUIRE_MESSAGE(w.size() == 8, line);  // step, (val, trn) x 3, lr
    rows.push_back({w[0], w[1], w[3], w[5]});
  }
  return rows;
}

double relative_difference(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-300); }

}  // namespace

TEST_CASE("communicator: broadcast, allreduce, gather on N ranks") {
  dpk::Communicator comm;
  int const n = comm.size();
  REQUIRE(n >= 1);
  using Mem = dpk::memory_space_t<dpk::DefaultExecutionSpace>;
  dpk::View1<double, Mem> v("dpk::test::v", 5);
  Kokkos::deep_copy(v, double(comm.rank() + 1));
  comm.allreduce_sum(v);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (int i = 0; i < 5; ++i) CHECK(h(i) == double(n * (n + 1) / 2));  // 1 + 2 + ... + n
  dpk::View1<float, Mem> f("dpk::test::f", 3);
  Kokkos::deep_copy(f, float(comm.rank() == 0 ? 2.5f : -1.0f));
  comm.broadcast(f);
  auto hf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), f);
  CHECK(hf(2) == 2.5f);
  CHECK(comm.allreduce_sum(0.5) == 0.5 * n);
  CHECK(comm.allreduce_max(double(comm.rank())) == double(n - 1));
  auto all = comm.gather_strings("rank" + std::to_string(comm.rank()));
  std::vector<std::string> expected;
  for (int r = 0; r < n; ++r) expected.push_back("rank" + std::to_string(r));
  if (comm.is_root()) CHECK(all == expected);
  CHECK(comm.broadcast_string(comm.is_root() ? "hello" : "") == "hello");
}

TEST_CASE("data parallel: N ranks x batch 1 == 1 rank x batch N after 20 steps (scale_by_worker none); MPI restart") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator world;
  int const n = world.size();
  std::string const base = "/tmp/dpk_mpi_train_" + world.broadcast_string(std::to_string(::getpid()));
  std::string const init = base + "/init", reference = base + "/reference", parallel = base + "/parallel";
  if (world.is_root()) {
    std::filesystem::remove_all(base);
    // The common start: statistics, bias and parameters (rank 0 alone).
    dpk::Communicator self(MPI_COMM_SELF);
    dpk::TrainerOptions o;
    o.output_dir = init;
    o.stop_at = 0;
    o.log = nullptr;
    dpk::Trainer<double, Space>(tiny_input(n), {water_frames(0, n)}, {}, o, self).run();
    // Reference: one rank, batches of all n frames.
    o.output_dir = reference;
    o.stop_at = -1;
    o.init_model = init + "/model.dpk";
    dpk::Trainer<double, Space>(tiny_input(n), {water_frames(0, n)}, {}, o, self).run();
  }
  world.barrier();
  // n ranks: rank r trains on frame r only, batch 1.
  dpk::TrainerOptions o;
  o.output_dir = parallel;
  o.init_model = init + "/model.dpk";
  o.log = nullptr;
  dpk::Trainer<double, Space>(tiny_input(1), {water_frames(world.rank(), 1)}, {}, o, world).run();
  // The same on n ranks in two runs: 10 steps (checkpoint), then a restart from it to step 20.
  std::string const restarted = base + "/restarted";
  dpk::TrainerOptions first = o;
  first.output_dir = restarted;
  first.stop_at = 10;
  dpk::Trainer<double, Space>(tiny_input(1), {water_frames(world.rank(), 1)}, {}, first, world).run();
  dpk::TrainerOptions second = o;
  second.output_dir = restarted;
  second.init_model.clear();
  second.restart = restarted + "/model.ckpt";
  dpk::Trainer<double, Space>(tiny_input(1), {water_frames(world.rank(), 1)}, {}, second, world).run();
  world.barrier();
  if (world.is_root()) {
    auto const a = dpk::read_model_file(reference + "/model.dpk");
    auto const b = dpk::read_model_file(parallel + "/model.dpk");
    REQUIRE(a.parameters.size() == b.parameters.size());
    auto const start = dpk::read_model_file(init + "/model.dpk");
    double max_diff = 0, max_move = 0;
    for (std::size_t i = 0; i < a.parameters.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(a.parameters[i] - b.parameters[i]));
      max_move = std::max(max_move, std::fabs(a.parameters[i] - start.parameters[i]));
    }
    MESSAGE("max |reference - parallel| = " << max_diff << ", max parameter change in 20 steps = " << max_move);
    CHECK(max_move > 1e-4);  // training did move the parameters
    CHECK(max_diff < 1e-10);
    // Restarted under MPI: bit for bit the uninterrupted run (parameters, statistics, bias).
    auto const c = dpk::read_model_file(restarted + "/model.dpk");
    CHECK(c.parameters == b.parameters);
    CHECK(c.avg == b.avg);
    CHECK(c.stdev == b.stdev);
    CHECK(c.energy_bias == b.energy_bias);
    std::filesystem::remove_all(base);
  }
}

TEST_CASE("validation over N ranks: 5 batches (uneven at 2, 3, 4 ranks) give the 1-rank metrics, each frame once") {
  // docs/trainer.md: validation metrics averaged over numb_btch validation batches, split across
  // ranks (batch b on rank b % N), batches weighted by their atom count. 5 validation frames,
  // batch 1, numb_btch 5: every lcurve line evaluates one shuffled pass over the 5 frames.
  using Space = dpk::DefaultExecutionSpace;
  using Mem = dpk::memory_space_t<Space>;
  dpk::Communicator world;
  int const n = world.size();
  int const nvalid = 5;
  auto input = [&](int batch) { return with_validation(tiny_input(batch), nvalid); };
  auto validation = [&] { return std::vector<dpk::System>{water_frames(40, nvalid)}; };
  std::string const base = "/tmp/dpk_mpi_validation_" + world.broadcast_string(std::to_string(::getpid()));
  std::string const init = base + "/init", reference = base + "/reference", parallel = base + "/parallel";
  dpk::LearningCurveLine one_rank;
  if (world.is_root()) {
    std::filesystem::remove_all(base);
    // The start and the 1-rank reference (batch n on frames 0..n-1), as the test above.
    dpk::Communicator self(MPI_COMM_SELF);
    dpk::TrainerOptions o;
    o.output_dir = init;
    o.stop_at = 0;
    o.log = nullptr;
    dpk::Trainer<double, Space>(input(n), {water_frames(0, n)}, validation(), o, self).run();
    o.output_dir = reference;
    o.stop_at = -1;
    o.init_model = init + "/model.dpk";
    dpk::Trainer<double, Space> trainer(input(n), {water_frames(0, n)}, validation(), o, self);
    trainer.run();
    one_rank = trainer.last_curve_line();
  }
  world.barrier();
  // n ranks, rank r on training frame r; the same validation data on every rank.
  dpk::TrainerOptions o;
  o.output_dir = parallel;
  o.init_model = init + "/model.dpk";
  o.log = nullptr;
  dpk::Trainer<double, Space> trainer(input(1), {water_frames(world.rank(), 1)}, validation(), o, world);
  trainer.run();
  dpk::LearningCurveLine const line = trainer.last_curve_line();
  CHECK(line.step == 20);
  CHECK(line.validation_frames == nvalid);  // summed over ranks: no batch skipped or doubled
  world.barrier();
  if (world.is_root()) {
    std::string shares;
    for (int r = 0; r < n; ++r) shares += " " + std::to_string((nvalid - r + n - 1) / n);
    // 1. The 1-rank run's metrics (step 20, unrounded) and its printed validation columns.
    REQUIRE(one_rank.step == 20);
    CHECK(one_rank.validation_frames == nvalid);
    double const vs_one_rank = std::max({relative_difference(line.validation.loss, one_rank.validation.loss),
                                         relative_difference(line.validation.rmse_e, one_rank.validation.rmse_e),
                                         relative_difference(line.validation.rmse_f, one_rank.validation.rmse_f)});
    auto const printed_one = validation_columns(reference + "/lcurve.out");
    auto const printed = validation_columns(parallel + "/lcurve.out");
    CHECK(printed_one.size() == 3);  // steps 0, 10, 20
    CHECK(printed == printed_one);
    // 2. Each validation frame once: the atom-weighted mean of the 5 frames' own metrics with
    // the step-20 parameters (the model file) and the step-20 prefactors.
    std::string const model_file = parallel + "/model.dpk";
    auto model = dpk::load_energy_model<double, Space>(dpk::read_model_file(model_file), model_file);
    dpk::InputConfig const config = input(1);
    auto const schedule =
        dpk::ExponentialLearningRate::from_config(config.learning_rate, config.training.numb_steps);
    dpk::PrefactorValues const p = dpk::prefactors(config.loss, schedule, 20);
    dpk::DataSampler frames_of(validation(), dpk::BatchSize{false, 1, {}}, 0);
    dpk::Frames<double, Mem> frames;
    dpk::Labels<double, Mem> labels;
    dpk::EnerLoss<double, Space> loss;
    double sum[3] = {0, 0, 0}, weight = 0;
    std::vector<double> losses;
    for (int f = 0; f < nvalid; ++f) {
      dpk::HostBatch const batch = frames_of.batch(0, f, 1);
      dpk::upload(batch, frames, labels);
      dpk::LossMetrics const m = loss.evaluate(Space(), *model, frames, labels, {p.energy, p.force, p.virial});
      sum[0] += batch.natoms * m.loss;
      sum[1] += batch.natoms * m.rmse_e;
      sum[2] += batch.natoms * m.rmse_f;
      weight += batch.natoms;
      losses.push_back(m.loss);
    }
    double const vs_frames = std::max({relative_difference(line.validation.loss, sum[0] / weight),
                                       relative_difference(line.validation.rmse_e, sum[1] / weight),
                                       relative_difference(line.validation.rmse_f, sum[2] / weight)});
    // The frames' losses differ by far more than the tolerance: a frame left out, or one used
    // in another's place, would show.
    std::sort(losses.begin(), losses.end());
    double closest = 1;
    for (int f = 1; f < nvalid; ++f) closest = std::min(closest, relative_difference(losses[f], losses[f - 1]));
    MESSAGE(n << " rank(s), validation batches per rank" << shares << ": step-20 validation metrics vs 1 rank: max "
              << "relative difference " << vs_one_rank << "; vs the 5 frames evaluated once each: " << vs_frames
              << " (closest two frame losses differ by " << closest << " relative)");
    CHECK(vs_one_rank <= 1e-12);
    CHECK(vs_frames <= 1e-12);
    CHECK(closest > 1e-6);
    std::filesystem::remove_all(base);
  }
}

TEST_CASE("neighbour statistics over N ranks: each rank searches its share; sel auto and distance of all frames") {
  // The trainer's search of every training frame (sel "auto", the smallest neighbour distance):
  // rank r searches frame groups r, r + N, ... (10 frames of 192 atoms per group: 5 groups of
  // 43 frames), the shares are reduced. Against brute force over all 43 frames.
  using Space = dpk::DefaultExecutionSpace;
  dpk::Communicator world;
  std::vector<dpk::System> const frames = {water_frames(0, 43)};
  dpk_test::BruteSystemStat const brute = dpk_test::brute_system_stat(frames[0], 2, 6.0);
  std::vector<int> const& most = brute.max_neighbors;
  double const nearest = brute.min_distance;
  // This rank's share alone: its groups' frames, and at most the counts of all frames.
  dpk::DataSampler const sampler(frames, dpk::BatchSize{false, 1, {}}, 1);
  dpk::NeighborStat const share =
      dpk::data_neighbor_stat<double>(Space(), sampler, 6.0, 2, {}, world.rank(), world.size());
  long expected_share = 0;
  for (int g = world.rank(); g < 5; g += world.size()) expected_share += g < 4 ? 10 : 3;
  CHECK(share.frames == expected_share);
  for (int t = 0; t < 2; ++t) CHECK(share.max_neighbors[std::size_t(t)] <= most[std::size_t(t)]);
  dpk::NeighborStat const all = dpk::reduce_neighbor_stat(world, share);
  CHECK(all.frames == 43);
  CHECK(all.max_neighbors == most);
  CHECK(all.min_distance == doctest::Approx(nearest).epsilon(1e-13));

  std::string const dir = "/tmp/dpk_mpi_auto_sel_" + world.broadcast_string(std::to_string(::getpid()));
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.stop_at = 0;
  options.data_stat_nbatch = 1;
  options.log = nullptr;
  dpk::InputConfig config = tiny_input(1);
  config.descriptor.sel.clear();
  config.descriptor.sel_auto = 1.1;
  dpk::Trainer<double, Space> trainer(config, frames, {}, options, world);
  CHECK(trainer.config().descriptor.sel == dpk::auto_sel(most, 1.1));  // on every rank
  trainer.run();
  if (world.is_root()) {
    dpk::ModelFileData const data = dpk::read_model_file(dir + "/model.dpk");
    CHECK(data.descriptor.sel == dpk::auto_sel(most, 1.1));
    CHECK(data.training["min_neighbor_distance"].get<double>() == doctest::Approx(nearest).epsilon(1e-13));
    std::filesystem::remove_all(dir);
  }
}

int main(int argc, char** argv) {
  dpk::MpiSession mpi(&argc, &argv);
  int result = 0;
  {
    Kokkos::ScopeGuard guard(argc, argv);
    doctest::Context context(argc, argv);
    result = context.run();
  }
  dpk::Communicator comm;
  return int(comm.allreduce_max(double(result)));
}
