// Uses an installed dpk for inference only, the way an MD code does: includes nothing but
// <dpk/potential.hpp> and links dpk::dpk, which carries no MPI. Evaluates a model on two water
// molecules without a box and checks what physics requires of any potential: the forces sum to
// zero and a rigid translation leaves the energy unchanged. Exit status 0 when both hold.
#include <dpk/potential.hpp>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: potential_app model.dpk\n");
    return 2;
  }
  Kokkos::ScopeGuard guard(argc, argv);
  try {
    dpk::Potential<double> potential(argv[1]);
    std::vector<int> const types = {0, 1, 1, 0, 1, 1};  // O H H, O H H
    std::vector<double> coord = {0.0, 0.0, 0.0,  0.96, 0.0, 0.0,  -0.24, 0.93, 0.0,
                                 2.9, 0.1, 0.2,  3.86, 0.1, 0.2,  2.66, 1.03, 0.2};
    dpk::PotentialResult first, moved;
    potential.compute(first, coord, types, {});
    for (std::size_t i = 0; i < coord.size(); ++i) coord[i] += (i % 3 == 0 ? 1.25 : i % 3 == 1 ? -0.5 : 7.0);
    potential.compute(moved, coord, types, {});
    double sum[3] = {0, 0, 0}, scale = 0;
    for (std::size_t i = 0; i < first.force.size(); ++i) {
      sum[i % 3] += first.force[i];
      scale = std::fmax(scale, std::fabs(first.force[i]));
    }
    double const net = std::fmax(std::fabs(sum[0]), std::fmax(std::fabs(sum[1]), std::fabs(sum[2])));
    double const shift = std::fabs(moved.energy[0] - first.energy[0]);
    std::printf("dpk potential consumer: E = %.12f eV, max |F| = %.3e eV/A, |sum F| = %.1e, |E(moved) - E| = %.1e\n",
                first.energy[0], scale, net, shift);
    bool const ok = std::isfinite(first.energy[0]) && scale > 0 && net <= 1e-12 * (1 + scale) &&
                    shift <= 1e-12 * (1 + std::fabs(first.energy[0]));
    return ok ? 0 : 1;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "dpk potential consumer: %s\n", e.what());
    return 1;
  }
}
