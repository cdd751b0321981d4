// Model benchmarks on the water example model (DeePMD-kit's water se_e2_a input: sel [46, 92],
// embedding [25, 50, 100], axis_neuron 16, fitting [240, 240, 240]): forward, forward + forces,
// and the full training gradient (energy + force loss), batch 1 and 8, float and double; the
// `_compressed` variants run the same model with its embedding nets tabulated (step 0.01,
// extrapolate 5, range from the batch's smallest neighbour distance; docs/compression.md):
// compressed inference, and compressed training (fitting nets only, tables frozen);
// `training_gradient_full_head` runs the first fitting layer on all of D's columns instead of
// its symmetric head's distinct entries (EnergyModel::set_fitting_symmetric_head(false)): run
// both with --benchmark_enable_random_interleaving=true --benchmark_repetitions=N to compare.
// Counters: frames/s, and GFLOP/s against the model FLOP count of docs/performance.md (a
// compressed model's count has no embedding nets: its table lookups are not counted).
#include <benchmark/benchmark.h>
#include "../tests/source_paths.hpp"
#include "water_model_config.hpp"

#include <dpk/io/data_sampler.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/train/ener_loss.hpp>

#include <string>
#include <vector>

namespace {

using Space = dpk::DefaultExecutionSpace;
using Mem = dpk::memory_space_t<Space>;

using dpk_bench::water_descriptor;
using dpk_bench::water_fitting;

dpk::System const& water_system() {
  static dpk::System system = dpk::read_system(std::string(dpk_test::source_dir()) + "/examples/water/data/data_0", {"O", "H"});
  return system;
}

dpk::HostBatch water_batch(int nframes) {
  auto const& s = water_system();
  dpk::HostBatch b;
  b.system = 0;
  b.nframes = nframes;
  b.natoms = s.natoms;
  b.periodic = true;
  b.types = s.types;
  for (int f = 0; f < nframes; ++f) b.frames.push_back(f);
  std::size_t const per = std::size_t(s.natoms) * 3;
  b.coord.assign(s.coord.begin(), s.coord.begin() + nframes * per);
  b.force.assign(s.force.begin(), s.force.begin() + nframes * per);
  b.box.assign(s.box.begin(), s.box.begin() + nframes * 9);
  b.energy.assign(s.energy.begin(), s.energy.begin() + nframes);
  return b;
}

enum class Mode { forward, forces, training };

template <class Scalar>
void run(benchmark::State& state, Mode mode, bool compressed, bool symmetric_head) {
  int const nframes = static_cast<int>(state.range(0));
  dpk::EnergyModel<Scalar, Space> model(water_descriptor(), water_fitting(), 2);
  if (!symmetric_head) model.set_fitting_symmetric_head(false);
  model.initialize_parameters(1);
  model.compute_statistics(Space(), {water_batch(1)});
  model.set_energy_bias({-93.0, -187.0});
  dpk::Frames<Scalar, Mem> frames;
  dpk::Labels<Scalar, Mem> labels;
  dpk::upload(water_batch(nframes), frames, labels);
  if (compressed)
    model.set_embedding_table(model.build_embedding_table(model.min_neighbor_distance(Space(), frames), 0.01, 5));
  dpk::Prediction<Scalar, Mem> out;
  dpk::LossPrefactors pref{0.02, 1000.0, 0.0};
  dpk::EnerLoss<Scalar, Space> loss;
  auto step = [&] {
    if (mode == Mode::training) {
      loss.loss_and_gradient(Space(), model, frames, labels, pref);
    } else {
      model.predict(Space(), frames, out, mode == Mode::forces);
    }
    Space().fence();
  };
  // One untimed step sizes the workspaces and faults their pages in (a training run does this
  // once); the timed steps are the steady state. Batch 8 runs only a few steps per repetition,
  // so without it the first-touch cost (over 1 GB of workspaces) dominated its figures.
  step();
  for (auto _ : state) step();
  state.counters["frames/s"] = benchmark::Counter(double(nframes) * state.iterations(), benchmark::Counter::kIsRate);
  auto const flops = model.flop_count();
  double const per_call = mode == Mode::forward ? flops.forward : (mode == Mode::forces ? flops.forces : flops.training);
  state.counters["GFLOP"] = per_call * 1e-9;
  state.counters["GFLOP/s"] = benchmark::Counter(per_call * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

void run_double(benchmark::State& state, Mode mode, bool compressed, bool symmetric_head = true) {
  run<double>(state, mode, compressed, symmetric_head);
}
void run_float(benchmark::State& state, Mode mode, bool compressed, bool symmetric_head = true) {
  run<float>(state, mode, compressed, symmetric_head);
}

}  // namespace

#define DPK_MODEL_BENCH(name, mode, compressed)                                                            \
  BENCHMARK_CAPTURE(run_double, name##_double, mode, compressed)                                          \
      ->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();                                      \
  BENCHMARK_CAPTURE(run_float, name##_float, mode, compressed)                                            \
      ->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

DPK_MODEL_BENCH(forward, Mode::forward, false)
DPK_MODEL_BENCH(forward_forces, Mode::forces, false)
DPK_MODEL_BENCH(training_gradient, Mode::training, false)
DPK_MODEL_BENCH(forward_forces_compressed, Mode::forces, true)
DPK_MODEL_BENCH(training_gradient_compressed, Mode::training, true)
BENCHMARK_CAPTURE(run_double, training_gradient_full_head_double, Mode::training, false, false)
    ->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_float, training_gradient_full_head_float, Mode::training, false, false)
    ->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

