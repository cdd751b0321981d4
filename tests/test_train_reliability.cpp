// Trainer reliability (issue 5): resident memory does not grow while training (step 100 vs
// step 1000 of a tiny model with validation, lcurve lines and checkpoints on the way).
// The type_map-mismatch error of `dpk-train test` is a ctest in tests/CMakeLists.txt
// (dpk_train_cli_test_type_map_mismatch).
#include <doctest/doctest.h>

#include <dpk/train.hpp>
#include "train_test_helpers.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

/// Resident set size of this process in kB (VmRSS of /proc/self/status), -1 when unavailable.
long resident_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

/// A stream buffer that reads the trainer's log line by line and records the resident memory
/// when a progress line "dpk-train: step N/..." arrives (the trainer prints it after step N).
class ResidentMemoryAtSteps : public std::streambuf {
 public:
  std::map<long, long> kb_at_step;  ///< step -> VmRSS (kB)
  std::string log;                  ///< everything the trainer wrote

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    char const ch = traits_type::to_char_type(c);
    log.push_back(ch);
    if (ch == '\n') {
      line_done();
      line_.clear();
    } else {
      line_.push_back(ch);
    }
    return c;
  }

 private:
  void line_done() {
    std::string const prefix = "dpk-train: step ";
    if (line_.rfind(prefix, 0) != 0) return;
    long const step = std::stol(line_.substr(prefix.size()));
    kb_at_step[step] = resident_kb();
  }
  std::string line_;
};

using dpk_test::water_frames;

/// A tiny se_e2_a model (rcut 4, sel [16, 32], nets [4, 8] and [8, 8]): ~1 ms per step.
dpk::InputConfig tiny_input(long numb_steps) {
  dpk::InputConfig c = dpk_test::tiny_input("tiny (test_train_reliability.cpp)", numb_steps);
  c.descriptor.sel = {16, 32};
  c.descriptor.rcut = 4.0;
  c.descriptor.axis_neuron = 4;
  c.learning_rate.decay_steps = 100;
  c.training.disp_freq = 50;
  c.training.save_freq = 250;
  return c;
}

}  // namespace

TEST_CASE("trainer: resident memory does not grow between step 100 and step 1000") {
  using Space = dpk::DefaultExecutionSpace;
  REQUIRE(resident_kb() > 0);
  std::string const dir =
      (std::filesystem::temp_directory_path() / ("dpk_test_rss_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  ResidentMemoryAtSteps spy;
  std::ostream log(&spy);
  dpk::TrainerOptions options;
  options.output_dir = dir;
  options.log = &log;
  dpk::Communicator comm;
  dpk::InputConfig input = tiny_input(1000);
  input.training.validation_data = dpk::DataConfig{};
  input.training.validation_data->batch_size = dpk::BatchSize{false, 1, {}};
  input.training.validation_data->numb_btch = 2;
  dpk::TrainingSummary summary;
  {
    dpk::Trainer<double, Space> trainer(input, {water_frames(0, 16)}, {water_frames(16, 4)}, options, comm);
    summary = trainer.run();
  }
  std::filesystem::remove_all(dir);
  REQUIRE(summary.last_step == 1000);
  REQUIRE(spy.kb_at_step.count(100) == 1);
  REQUIRE(spy.kb_at_step.count(1000) == 1);
  long const at_100 = spy.kb_at_step[100], at_1000 = spy.kb_at_step[1000];
  std::ostringstream trace;
  for (auto const& [step, kb] : spy.kb_at_step) trace << " " << step << ":" << kb;
  MESSAGE("VmRSS (kB) at steps:", trace.str(), "; training took ", summary.train_seconds, " s");
  CHECK(at_1000 - at_100 < 4 * 1024);  // < 4 MB
}
