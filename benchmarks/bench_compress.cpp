// Model compression (docs/compression.md): inference (energy + forces + virial) of the water
// example model (sel [46, 92], embedding [25, 50, 100], axis_neuron 16, fitting [240, 240, 240],
// random parameters, statistics of the frame) with the embedding nets (plain) and with their
// tables (compressed: step 0.01, extrapolate 5, range from the frame's smallest neighbour
// distance), side by side in one run. Arg: replicas per box edge (1: 192 atoms, 4: 12288).
// Counters: ms per call of each stage (profiling regions; embedding_ms and fitting_ms are the
// two model stages inside forward and forces, so they overlap those two).
#include "../tests/neighbor_test_helpers.hpp"
#include "water_model_config.hpp"

#include <dpk/core/profiling.hpp>
#include <dpk/model/energy_model.hpp>

#include <benchmark/benchmark.h>

#include <string>

namespace {

using dpk_test::Mem;
using dpk_test::Space;

using dpk_bench::water_descriptor;
using dpk_bench::water_fitting;

template <class Scalar>
void inference(benchmark::State& state, bool compressed) {
  int const replica = static_cast<int>(state.range(0));
  auto const batch = dpk_test::replicate(dpk_test::water_batch(), replica, replica, replica);
  auto frames = dpk_test::make_frames<Scalar>(batch);
  dpk::EnergyModel<Scalar, Space> model(water_descriptor(), water_fitting(), 2);
  model.initialize_parameters(1);
  {
    auto const w = dpk_test::water_batch();  // statistics from the 192-atom frame
    dpk::HostBatch b;
    b.nframes = 1;
    b.natoms = w.natoms;
    b.types = w.types;
    b.coord = w.coord;
    b.box = w.box;
    b.frames = {0};
    b.energy = {0.0};
    b.force.assign(w.coord.size(), 0.0);
    model.compute_statistics(Space(), {b});
  }
  model.set_energy_bias({-93.0, -187.0});
  if (compressed) {
    double const rmin = model.min_neighbor_distance(Space(), frames);
    model.set_embedding_table(model.build_embedding_table(rmin, 0.01, 5));
  }
  dpk::Prediction<Scalar, Mem> out;
  auto step = [&] {
    model.predict(Space(), frames, out, true);
    Space().fence();
  };
  step();  // sizes the workspaces (steady state is what an MD run sees)
  dpk::RegionTimes regions;  // milliseconds per step of each stage (profiling regions, fenced)
  for (auto _ : state) step();
  for (char const* stage : {"neighbors", "environment", "batch_setup", "forward", "forces", "embedding", "fitting"})
    state.counters[std::string(stage) + "_ms"] =
        1e3 * regions.seconds(std::string("dpk::") + stage) / double(state.iterations());
  state.counters["atoms"] = batch.natoms;
  state.counters["atom-steps/s"] =
      benchmark::Counter(double(batch.natoms) * state.iterations(), benchmark::Counter::kIsRate);
}

void plain_double(benchmark::State& state) { inference<double>(state, false); }
void compressed_double(benchmark::State& state) { inference<double>(state, true); }
void plain_float(benchmark::State& state) { inference<float>(state, false); }
void compressed_float(benchmark::State& state) { inference<float>(state, true); }

}  // namespace

BENCHMARK(plain_double)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(compressed_double)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(plain_float)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(compressed_float)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
