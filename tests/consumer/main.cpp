// Uses an installed dpk: reads an input.json and its data, uploads one batch to the default
// execution space, and prints what it found. Exit status 0 means the installed package works.
#include <dpk/io.hpp>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: app input.json\n");
    return 2;
  }
  Kokkos::ScopeGuard guard(argc, argv);
  try {
    dpk::InputConfig const config = dpk::read_input(argv[1]);
    dpk::DataSampler sampler = dpk::make_sampler(config.training.training_data, config.type_map, 1);
    using Space = dpk::DefaultExecutionSpace;
    dpk::Frames<double, dpk::memory_space_t<Space>> frames;
    dpk::Labels<double, dpk::memory_space_t<Space>> labels;
    dpk::upload(sampler.next(), frames, labels);
    std::printf("dpk consumer: %zu systems, batch of %d frame(s) x %d atoms on %s, sel = [%d, %d]\n",
                sampler.systems().size(), frames.nframes, frames.natoms, Space::name(), config.descriptor.sel.at(0),
                config.descriptor.sel.at(1));
    return frames.nloc() > 0 ? 0 : 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "dpk consumer: %s\n", e.what());
    return 1;
  }
}
