// Model benchmarks on the water example model (DeePMD-kit's water se_e2_a input: sel [46, 92],
// embedding [25, 50, 100], axis_neuron 16, fitting [240, 240, 240]): forward, forward + forces,
// and the full training gradient (energy + force loss), batch 1 and 8, float and double.
// Counters: frames/s, and GFLOP/s against the model FLOP count of docs/performance.md.
#include <benchmark/benchmark.h>

#include <dpk/io/data_sampler.hpp>
#include <dpk/io/system.hpp>
#include <dpk/model/energy_model.hpp>
#include <dpk/train/ener_loss.hpp>

#include <string>
#include <vector>

namespace {

using Space = dpk::DefaultExecutionSpace;
using Mem = dpk::memory_space_t<Space>;

dpk::DescriptorConfig water_descriptor() {
  dpk::DescriptorConfig d;
  d.sel = {46, 92};
  d.rcut = 6.0;
  d.rcut_smth = 0.5;
  d.neuron = {25, 50, 100};
  d.axis_neuron = 16;
  d.type_one_side = true;
  return d;
}

dpk::FittingConfig water_fitting() {
  dpk::FittingConfig f;
  f.neuron = {240, 240, 240};
  f.resnet_dt = true;
  return f;
}

dpk::System const& water_system() {
  static dpk::System system = dpk::read_system(std::string(DPK_SOURCE_DIR) + "/examples/water/data/data_0", {"O", "H"});
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
void run(benchmark::State& state, Mode mode) {
  int const nframes = static_cast<int>(state.range(0));
  dpk::EnergyModel<Scalar, Space> model(water_descriptor(), water_fitting(), 2);
  model.initialize_parameters(1);
  model.compute_statistics(Space(), {water_batch(1)});
  model.set_energy_bias({-93.0, -187.0});
  dpk::Frames<Scalar, Mem> frames;
  dpk::Labels<Scalar, Mem> labels;
  dpk::upload(water_batch(nframes), frames, labels);
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

void run_double(benchmark::State& state, Mode mode) { run<double>(state, mode); }
void run_float(benchmark::State& state, Mode mode) { run<float>(state, mode); }

}  // namespace

#define DPK_MODEL_BENCH(name, mode)                                                                      \
  BENCHMARK_CAPTURE(run_double, name##_double, mode)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(run_float, name##_float, mode)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

DPK_MODEL_BENCH(forward, Mode::forward)
DPK_MODEL_BENCH(forward_forces, Mode::forces)
DPK_MODEL_BENCH(training_gradient, Mode::training)

