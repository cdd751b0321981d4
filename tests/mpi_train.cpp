// MPI tests of the trainer (ctest runs them with mpirun -np 1, 2, 3 and 4): Communicator
// collectives, data-parallel training equivalence (N ranks x batch 1 == 1 rank x batch N on the
// same frames after 20 steps), and a restart under MPI (10 steps, restart, 10 more == 20 steps,
// bit for bit).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dpk/train.hpp>
#include "train_test_helpers.hpp"

#include <filesystem>
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
