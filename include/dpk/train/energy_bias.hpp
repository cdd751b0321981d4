#pragma once
/// \file energy_bias.hpp
/// \brief Per-type energy bias by least squares (SPEC.md section 5), on the host.
///
/// Rows are frames: (number of atoms of each type in the frame) . bias = frame energy.
/// The solution is the minimum-norm least-squares one, as numpy.linalg.lstsq returns it:
/// singular values at or below rcond * (largest singular value) are treated as zero. This
/// matters for the usual case where every frame has the same composition (water: 64 O and
/// 128 H in every frame), where the system is rank deficient and the minimum-norm solution is
/// bias = counts * mean(E) / |counts|^2.
///
/// The SVD is a one-sided Jacobi SVD of the (frames x types) matrix: accurate singular values
/// without forming A^T A, and cheap because the number of types is small.

#include <dpk/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dpk {

/// Minimum-norm least-squares solution x of A x = b, A row-major (rows x cols).
/// `rcond` < 0 selects numpy's default, machine epsilon * max(rows, cols).
inline std::vector<double> least_squares_min_norm(std::vector<double> const& a, int rows, int cols,
                                                  std::vector<double> const& b, double rcond = -1.0) {
  require(rows > 0 && cols > 0, "least_squares_min_norm: empty system (" + std::to_string(rows) + " x " +
                                    std::to_string(cols) + ")");
  require(a.size() == std::size_t(rows) * std::size_t(cols) && b.size() == std::size_t(rows),
          "least_squares_min_norm: matrix/right-hand side sizes do not match rows x cols");
  // One-sided Jacobi: rotate columns of U (= A V) until they are mutually orthogonal.
  std::vector<double> u = a;
  std::vector<double> v(std::size_t(cols) * cols, 0.0);
  for (int j = 0; j < cols; ++j) v[std::size_t(j) * cols + j] = 1.0;
  double const eps = std::numeric_limits<double>::epsilon();
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (int p = 0; p < cols - 1; ++p)
      for (int q = p + 1; q < cols; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int r = 0; r < rows; ++r) {
          double const up = u[std::size_t(r) * cols + p], uq = u[std::size_t(r) * cols + q];
          alpha += up * up;
          beta += uq * uq;
          gamma += up * uq;
        }
        if (gamma == 0.0 || std::fabs(gamma) <= eps * std::sqrt(alpha * beta)) continue;
        rotated = true;
        double const zeta = (beta - alpha) / (2.0 * gamma);
        double const t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        double const c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
        for (int r = 0; r < rows; ++r) {
          double& up = u[std::size_t(r) * cols + p];
          double& uq = u[std::size_t(r) * cols + q];
          double const np = c * up - s * uq, nq = s * up + c * uq;
          up = np;
          uq = nq;
        }
        for (int r = 0; r < cols; ++r) {
          double& vp = v[std::size_t(r) * cols + p];
          double& vq = v[std::size_t(r) * cols + q];
          double const np = c * vp - s * vq, nq = s * vp + c * vq;
          vp = np;
          vq = nq;
        }
      }
    if (!rotated) break;
  }
  std::vector<double> sigma(cols, 0.0);
  for (int j = 0; j < cols; ++j) {
    double s2 = 0;
    for (int r = 0; r < rows; ++r) s2 += u[std::size_t(r) * cols + j] * u[std::size_t(r) * cols + j];
    sigma[j] = std::sqrt(s2);
  }
  double const sigma_max = *std::max_element(sigma.begin(), sigma.end());
  double const cutoff = (rcond < 0 ? eps * std::max(rows, cols) : rcond) * sigma_max;
  std::vector<double> x(cols, 0.0);
  for (int j = 0; j < cols; ++j) {
    if (!(sigma[j] > cutoff)) continue;
    // u_j . b / sigma_j with u_j = U[:, j] / sigma_j.
    double ub = 0;
    for (int r = 0; r < rows; ++r) ub += u[std::size_t(r) * cols + j] * b[r];
    double const coefficient = ub / (sigma[j] * sigma[j]);
    for (int k = 0; k < cols; ++k) x[k] += coefficient * v[std::size_t(k) * cols + j];
  }
  return x;
}

/// Per-type energy bias from `type_counts` (nframes x ntypes, row-major: atoms of each type
/// per frame) and `energies` (nframes). Throws dpk::Error when sizes disagree or no frames.
inline std::vector<double> energy_bias_least_squares(std::vector<double> const& type_counts,
                                                     std::vector<double> const& energies, int ntypes,
                                                     double rcond = -1.0) {
  require(ntypes > 0, "energy bias: expected at least one atom type");
  require(!energies.empty(), "energy bias: no training frames to fit the per-type energy bias on");
  require(type_counts.size() == energies.size() * std::size_t(ntypes),
          "energy bias: type count table has " + std::to_string(type_counts.size()) + " entries, expected " +
              std::to_string(energies.size() * std::size_t(ntypes)));
  return least_squares_min_norm(type_counts, int(energies.size()), ntypes, energies, rcond);
}

}  // namespace dpk
