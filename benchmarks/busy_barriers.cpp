// dpk-busy-barriers: how much a fork-join step loses beside another job on one core, as a
// function of how many barriers (parallel regions) the step has. No dpk code.
//
// A synthetic "training step" of --work-ms of CPU work (default 40: dpk's float32 water step at
// two threads on the development VMs) is split into P parallel regions; each region's work is cut
// into blocks of about --block-us that the OpenMP threads take one at a time (schedule(dynamic, 1),
// as dpk's passes hand out their parts). Optionally --light K more regions per step hold 10 % of
// the work in blocks of 15 us (dpk's float32 step in the fiftieth session: 7 chunked-pass calls
// and 53 short kernels). Each step's work varies by +-15 % (fixed seed) so that the step does not
// lock onto the scheduler's tick. For every P of --phases it times --steps steps quiet and then
// with a child process spinning on CPU --busy-cpu (default: the first CPU this process may run
// on), a stand-in for another job, killed after; it prints
//   "phases P, light K, blocks B us: quiet Q ms, busy S ms per step, busy/quiet R"
// R is 1.33 for a perfect schedule on 1.5 free cores of 2 (the busy CPU shared half and half). Each
// barrier where the thread on the shared CPU is off it costs up to one scheduler turn (4 ms at
// CONFIG_HZ=250), so R grows with P: docs/tuning.md, "Busy node: how many barriers a step can have".
//
//   OMP_NUM_THREADS=2 OMP_PROC_BIND=spread OMP_PLACES=threads
//   build/openmp/benchmarks/dpk-busy-barriers --phases 1,3,6,12,117 [--light 53]
//
// --no-busy times the quiet runs only. Exits 2 on a bad argument, 1 when the busy child cannot be
// started.

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#define DPK_BUSY_CHILD 1
#endif

namespace {

/// One region of a step: microseconds of CPU work, in a parallel region (cut into blocks of about
/// block_us; 0: --block-us) or serial on the master thread (between regions). --regions-us gives
/// them one by one; --phases / --light build them (phase_regions).
struct Region {
  double work_us = 0;
  bool serial = false;
  double block_us = 0;
};

struct Options {
  double work_ms = 40, block_us = 20;
  std::vector<int> phases{1, 3, 6, 12, 117};
  std::vector<Region> regions;  // when given, the step's shape instead of --phases / --light
  int light = 0, steps = 200, busy_cpu = -1;  // -1: the first CPU this process may use
  bool busy = true;
};

[[noreturn]] void usage(char const* why) {
  std::fprintf(stderr,
               "dpk-busy-barriers: %s\nusage: dpk-busy-barriers [--work-ms MS] [--phases P1,P2,...] [--block-us US] "
               "[--light K] [--regions-us [s]US,...] [--steps N] [--busy-cpu CPU] [--no-busy]\n",
               why);
  std::exit(2);
}

double positive(char const* flag, char const* text) {
  char* end = nullptr;
  double const value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value > 0)) usage((std::string(flag) + ": expected a positive number, got '" + text + "'").c_str());
  return value;
}

/// A whole number >= `least` in `text` (the counts and the CPU), else usage().
int whole(char const* flag, char const* text, long least) {
  char* end = nullptr;
  errno = 0;
  long const value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || value < least || value > INT_MAX)
    usage((std::string(flag) + ": expected a whole number >= " + std::to_string(least) + ", got '" + text + "'").c_str());
  return int(value);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string const flag = argv[i];
    if (flag == "--no-busy") {
      o.busy = false;
      continue;
    }
    if (i + 1 >= argc) usage((flag + ": needs a value").c_str());
    char const* value = argv[++i];
    if (flag == "--work-ms") {
      o.work_ms = positive("--work-ms", value);
    } else if (flag == "--block-us") {
      o.block_us = positive("--block-us", value);
    } else if (flag == "--steps") {
      o.steps = whole("--steps", value, 1);
    } else if (flag == "--light") {
      o.light = whole("--light", value, 0);
    } else if (flag == "--busy-cpu") {
      o.busy_cpu = whole("--busy-cpu", value, 0);
    } else if (flag == "--phases") {
      o.phases.clear();
      std::stringstream list(value);
      std::string item;
      while (std::getline(list, item, ',')) o.phases.push_back(whole("--phases", item.c_str(), 1));
      if (o.phases.empty()) usage("--phases: expected a comma-separated list of region counts");
    } else if (flag == "--regions-us") {
      o.regions.clear();
      std::stringstream list(value);
      std::string item;
      while (std::getline(list, item, ',')) {
        bool const serial = !item.empty() && item[0] == 's';
        std::string const number = serial ? item.substr(1) : item;
        o.regions.push_back({positive("--regions-us", number.c_str()), serial});
      }
      if (o.regions.empty()) usage("--regions-us: expected a comma-separated list of microseconds");
    } else {
      usage(("unknown option '" + flag + "'").c_str());
    }
  }
  return o;
}

/// A dependent chain of multiply-adds: `n` of them take a fixed time on a given core.
double spin(long n, double x) {
  for (long i = 0; i < n; ++i) x = x * 0.9999999 + 1e-7;
  return x;
}

/// Chain links per microsecond on the calling thread (before any busy child runs).
double links_per_us() {
  long const n = 20000000;
  volatile double seed = 1.0;  // not a constant: the compiler may not fold the chain
  auto const start = std::chrono::steady_clock::now();
  double const x = spin(n, seed);
  double const us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (x == 0) std::printf(" ");  // keeps the chain
  return double(n) / us;
}

/// One region: `blocks` blocks of `links` each, taken one at a time by the team.
void region(std::vector<double>& out, int blocks, long links) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < blocks; ++b) out[std::size_t(b)] = spin(links, out[std::size_t(b)]);
}

/// The step of --phases P (and --light K): P heavy regions of blocks of --block-us holding the
/// work (90 % of it with --light), the K light regions of 15 us blocks spread evenly between them.
std::vector<Region> phase_regions(Options const& o, int phases) {
  double const heavy_share = o.light > 0 ? 0.9 : 1.0, light_us = 15;
  int const heavy_blocks = std::max(1, int(o.work_ms * heavy_share * 1000 / phases / o.block_us));
  int const light_blocks = o.light > 0 ? std::max(1, int(o.work_ms * (1 - heavy_share) * 1000 / o.light / light_us)) : 0;
  std::vector<Region> regions;
  for (int p = 0; p < phases; ++p) {
    regions.push_back({heavy_blocks * o.block_us, false, o.block_us});
    int const light_here = o.light * (p + 1) / phases - o.light * p / phases;
    for (int l = 0; l < light_here; ++l) regions.push_back({light_blocks * light_us, false, light_us});
  }
  return regions;
}

/// Mean wall ms per step over `steps` steps after 5 untimed ones, the step given region by
/// region: each parallel region's work cut into blocks of about its block size.
double time_regions(Options const& o, std::vector<Region> const& regions, double rate) {
  auto const blocks_of = [&](Region const& r) {
    return std::max(1, int(r.work_us / (r.block_us > 0 ? r.block_us : o.block_us) + 0.5));
  };
  std::size_t most = 1;
  for (Region const& r : regions) most = std::max(most, std::size_t(blocks_of(r)));
  std::vector<double> out(most, 1.0);
  std::mt19937 jitter(12345);
  std::uniform_real_distribution<double> factor(0.85, 1.15);
  double sum = 0;
  volatile double serial_sink = 0;  // keeps the serial chains
  for (int s = 0; s < o.steps + 5; ++s) {
    double const f = factor(jitter);
    auto const start = std::chrono::steady_clock::now();
    for (Region const& r : regions) {
      if (r.serial) {
        serial_sink += spin(long(f * r.work_us * rate), 1.0);
        continue;
      }
      int const blocks = blocks_of(r);
      region(out, blocks, long(f * r.work_us / blocks * rate));
    }
    double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (s >= 5) sum += ms;
  }
  return sum / o.steps;
}

#if defined(DPK_BUSY_CHILD)
/// The lowest CPU in this process's affinity mask (0 if it cannot be read).
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) return cpu;
  return 0;
}

/// A child process spinning on CPU `cpu` until killed; its pid, or -1.
pid_t start_busy(int cpu) {
  pid_t const pid = fork();
  if (pid != 0) return pid;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(3);
  volatile unsigned long n = 0;
  for (;;) n = n + 1;
}

void stop_busy(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
#if defined(DPK_BUSY_CHILD)
  if (o.busy_cpu < 0) o.busy_cpu = first_allowed_cpu();
#else
  if (o.busy_cpu < 0) o.busy_cpu = 0;
#endif
  double const rate = links_per_us();
  double shape_ms = 0;
  for (Region const& r : o.regions) shape_ms += r.work_us / 1000;
  std::printf("dpk-busy-barriers: %d OpenMP threads, %.1f ms of work per step, %d steps, busy CPU %s\n",
              omp_get_max_threads(), o.regions.empty() ? o.work_ms : shape_ms, o.steps,
              o.busy ? std::to_string(o.busy_cpu).c_str() : "none");
  // Times `step` (mean ms per step) quiet and then beside the busy child; prints the line.
  auto quiet_and_busy = [&](std::string const& label, auto const& step) {
    double const quiet = step();
    std::printf("%s: quiet %.2f ms", label.c_str(), quiet);
    if (o.busy) {
#if defined(DPK_BUSY_CHILD)
      pid_t const child = start_busy(o.busy_cpu);
      if (child < 0) {
        std::fprintf(stderr, "dpk-busy-barriers: cannot start the busy process: %s\n", std::strerror(errno));
        return false;
      }
      usleep(300000);  // the child is on its CPU
      if (waitpid(child, nullptr, WNOHANG) == child) {
        std::fprintf(stderr, "dpk-busy-barriers: the busy process could not be bound to CPU %d\n", o.busy_cpu);
        return false;
      }
      double const busy = step();
      stop_busy(child);
      std::printf(", busy %.2f ms per step, busy/quiet %.2f", busy, busy / quiet);
#else
      std::fprintf(stderr, "dpk-busy-barriers: the busy process needs Linux (use --no-busy)\n");
      return false;
#endif
    } else {
      std::printf(" per step");
    }
    std::printf("\n");
    std::fflush(stdout);
    return true;
  };
  if (!o.regions.empty()) {
    int parallel = 0;
    for (Region const& r : o.regions) parallel += r.serial ? 0 : 1;
    char label[128];
    std::snprintf(label, sizeof label, "regions %d, serial %d, blocks %.0f us", parallel, int(o.regions.size()) - parallel,
                  o.block_us);
    return quiet_and_busy(label, [&] { return time_regions(o, o.regions, rate); }) ? 0 : 1;
  }
  for (int const phases : o.phases) {
    char label[128];
    std::snprintf(label, sizeof label, "phases %d, light %d, blocks %.0f us", phases, o.light, o.block_us);
    std::vector<Region> const regions = phase_regions(o, phases);
    if (!quiet_and_busy(label, [&] { return time_regions(o, regions, rate); })) return 1;
  }
  return 0;
}
