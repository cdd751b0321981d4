// Trainer reliability (issue 5): resident memory does not grow while training (step 100 vs
// step 1000 of a tiny model with validation, lcurve lines and checkpoints on the way).
// Issue 18: lcurve.out repair on restart, atomic writes, coincident atoms. The process-level
// tests (kills, write faults, MPI faults, odd data) are tests/reliability/*.py.
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

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DPK_TEST_ADDRESS_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(DPK_TEST_ADDRESS_SANITIZER)
/// Under AddressSanitizer (the `debug` preset) freed blocks wait in a quarantine of up to 256 MB
/// before reuse, which the resident-memory test below would read as growth (17 kB per step of
/// its tiny model): in this program freed memory is reused at once. Leaks are still reported.
extern "C" char const* __asan_default_options() { return "quarantine_size_mb=0"; }
#endif

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
  input.training.validation_data.emplace();
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

namespace {
std::string slurp(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string temp_file(std::string const& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
}
}  // namespace

TEST_CASE("lcurve.out on restart: lines after the checkpoint step and a partial last line are dropped") {
  std::string const path = temp_file("dpk_test_lcurve");
  {
    std::ofstream out(path, std::ios::binary);
    out << "#  step  rmse_trn\n      0  1.0e+00\n      1  9.0e-01\n# a comment\n      2  8.0e-01\n"
           "      3  7.0e-01\n      4  6.";
  }
  CHECK(dpk::truncate_learning_curve(path, 2) == 2);  // step 3 and the partial step 4
  CHECK(slurp(path) == "#  step  rmse_trn\n      0  1.0e+00\n      1  9.0e-01\n# a comment\n      2  8.0e-01\n");
  CHECK(dpk::truncate_learning_curve(path, 2) == 0);  // nothing more to drop: file untouched
  CHECK(dpk::truncate_learning_curve(path + ".missing", 2) == 0);
  CHECK(!std::filesystem::exists(dpk::atomic_temporary_name(path)));
  std::filesystem::remove(path);
}

TEST_CASE("atomic write: a failure names the file and the reason and leaves the old content") {
  std::string const dir = temp_file("dpk_test_atomic");
  std::filesystem::create_directories(dir);
  std::string const path = dir + "/file.txt";
  dpk::write_file_atomically(path, "old\n", "test file");
  CHECK(slurp(path) == "old\n");
  // The target is a folder: the rename fails (EISDIR); the temporary file is removed.
  std::filesystem::create_directories(dir + "/folder");
  std::string message;
  try {
    dpk::write_file_atomically(dir + "/folder", "new\n", "test file");
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  CHECK(message.find("test file '" + dir + "/folder': cannot rename the temporary file into place (Is a directory)") !=
        std::string::npos);
  CHECK(message.find("was removed") != std::string::npos);
  CHECK(!std::filesystem::exists(dpk::atomic_temporary_name(dir + "/folder")));
  // The parent is a regular file: the temporary file cannot be created (ENOTDIR).
  message.clear();
  try {
    dpk::write_file_atomically(path + "/x", "new\n", "test file");
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  CHECK(message.find("test file '" + path + "/x': cannot create the temporary file (Not a directory)") !=
        std::string::npos);
  CHECK(slurp(path) == "old\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE("coincident atoms: an error naming the frame and the atoms, not NaN") {
  using Space = dpk::DefaultExecutionSpace;
  dpk::InputConfig const input = tiny_input(1);
  dpk::EnergyModel<double, Space> model(input.descriptor, input.fitting, 2);
  dpk::System s = water_frames(0, 2);
  for (int d = 0; d < 3; ++d) s.coord[std::size_t(s.natoms + 7) * 3 + d] = s.coord[std::size_t(s.natoms + 3) * 3 + d];
  dpk::DataSampler sampler(std::vector<dpk::System>{s}, dpk::BatchSize{false, 2, {}}, 0,
                           {dpk::SamplingMode::sequential, {}});
  dpk::Frames<double, dpk::memory_space_t<Space>> frames;
  dpk::Labels<double, dpk::memory_space_t<Space>> labels;
  dpk::upload(sampler.batch(0, 0, 2), frames, labels);
  bool thrown = false;
  try {
    model.prepare(Space(), frames);
  } catch (dpk::CoincidentAtomsError const& e) {
    thrown = true;
    CHECK(e.frame == 1);
    CHECK(std::min(e.atom_i, e.atom_j) == 3);
    CHECK(std::max(e.atom_i, e.atom_j) == 7);
    CHECK(e.distance == 0.0);
    CHECK(std::string(e.what()) == "frame 1 of the batch: atoms 3 and 7 are 0 A apart (closer than 1e-06 A): "
                                   "coincident atoms make the descriptor (1/r) infinite; remove or fix the frame");
  }
  CHECK(thrown);
}
