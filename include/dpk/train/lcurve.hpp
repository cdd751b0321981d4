#pragma once
/// \file lcurve.hpp
/// \brief The learning-curve file (`lcurve.out`) in DeePMD-kit's column layout.
///
/// Header, then one line per display step:
/// ```
/// #  step      rmse_val    rmse_trn    rmse_e_val  rmse_e_trn    rmse_f_val  rmse_f_trn         lr
///       0      3.33e+01    3.41e+01      1.03e+01    1.03e+01      8.39e-01    8.72e-01    1.0e-03
/// ```
/// Step: printf "%7d"; each (validation, training) pair: "   %11.2e %11.2e"; lr: "   %8.1e".
/// The header uses the same widths ("# %5s", "   %11s %11s", "   %8s"). Without validation data
/// only the *_trn columns are written ("   %11.2e" each). rmse_v_val/rmse_v_trn come before lr
/// when the virial is trained. rmse (the first pair) is sqrt(loss) as DeePMD-kit prints it.

#include <dpk/core/error.hpp>
#include <dpk/io/atomic_file.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace dpk {

/// Metrics of one evaluation (a training batch or the validation batches).
struct CurveMetrics {
  double loss = 0;     ///< total loss L (SPEC 7); printed as rmse = sqrt(L)
  double rmse_e = 0;   ///< eV/atom
  double rmse_f = 0;   ///< eV/A
  double rmse_v = 0;   ///< eV/atom
};

/// Writes lcurve.out lines; every line is flushed so the file can be followed during training.
class LearningCurveWriter {
 public:
  /// Opens `path`; `append` continues an existing file (restarts) without a new header.
  LearningCurveWriter(std::string const& path, bool has_validation, bool has_virial, bool append = false)
      : path_(path), has_validation_(has_validation), has_virial_(has_virial) {
    bool const write_header = !append || !std::ifstream(path).good();
    errno = 0;
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!file_.good()) throw Error("lcurve: cannot open '" + path + "' for writing" + reason());
    if (write_header) {
      file_ << header(has_validation, has_virial) << '\n';
      file_.flush();
      if (!file_.good()) throw Error("lcurve: write to '" + path + "' failed" + reason());
    }
  }

  /// The header line (without newline).
  static std::string header(bool has_validation, bool has_virial) {
    std::string line = format("# %5s", "step");
    char const* names[] = {"rmse", "rmse_e", "rmse_f", "rmse_v"};
    int const count = has_virial ? 4 : 3;
    for (int k = 0; k < count; ++k) {
      std::string const name = names[k];
      if (has_validation)
        line += format("   %11s", (name + "_val").c_str()) + format(" %11s", (name + "_trn").c_str());
      else
        line += format("   %11s", (name + "_trn").c_str());
    }
    line += format("   %8s", "lr");
    return line;
  }

  /// One data line (without newline).
  static std::string line(long step, CurveMetrics const& validation, CurveMetrics const& training, double lr,
                          bool has_validation, bool has_virial) {
    std::string text = format("%7ld", step);
    double const val[] = {std::sqrt(validation.loss), validation.rmse_e, validation.rmse_f, validation.rmse_v};
    double const trn[] = {std::sqrt(training.loss), training.rmse_e, training.rmse_f, training.rmse_v};
    int const count = has_virial ? 4 : 3;
    for (int k = 0; k < count; ++k) {
      if (has_validation)
        text += format("   %11.2e", val[k]) + format(" %11.2e", trn[k]);
      else
        text += format("   %11.2e", trn[k]);
    }
    text += format("   %8.1e", lr);
    return text;
  }

  /// Appends the line for `step` and flushes.
  void write(long step, CurveMetrics const& validation, CurveMetrics const& training, double lr) {
    file_ << line(step, validation, training, lr, has_validation_, has_virial_) << '\n';
    errno = 0;
    file_.flush();
    if (!file_.good()) throw Error("lcurve: write to '" + path_ + "' failed" + reason());
  }

 private:
  /// " (<strerror(errno)>)" when the failed stream operation left an OS error in errno.
  static std::string reason() { return errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string(); }

  template <class... Args>
  static std::string format(char const* fmt, Args... args) {
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer), fmt, args...);
    return buffer;
  }

  std::string path_;
  bool has_validation_;
  bool has_virial_;
  std::ofstream file_;
};

/// Restarts: keeps the lines of `path` up to and including `last_step` (and every comment line)
/// and drops the rest: lines of steps after the checkpoint the run restarts from, written
/// before the previous run was interrupted, and an incomplete last line (no newline). The run
/// writes those steps again, so lcurve.out ends up as an uninterrupted run's. The file is
/// rewritten with write_file_atomically (an interruption leaves the old or the new file). Returns the number of lines dropped; a missing file drops nothing.
inline long truncate_learning_curve(std::string const& path, long last_step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string const text = buffer.str();
  std::string kept;
  long dropped = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t const end = text.find('\n', start);
    if (end == std::string::npos) {  // an incomplete last line
      ++dropped;
      break;
    }
    std::string const line = text.substr(start, end - start + 1);
    start = end + 1;
    char const* p = line.c_str();
    while (*p == ' ') ++p;
    bool keep = true;
    if (*p != '#' && *p != '\n') {
      char* after = nullptr;
      errno = 0;
      long const step = std::strtol(p, &after, 10);
      keep = after != p && errno == 0 && step <= last_step;
    }
    if (keep) kept += line;
    else ++dropped;
  }
  if (dropped == 0) return 0;
  write_file_atomically(path, kept, "lcurve");
  return dropped;
}

}  // namespace dpk
