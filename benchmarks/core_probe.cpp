// dpk-core-probe: how much compute two busy cores give compared with one, right now.
//
// On a shared virtual machine the second vCPU can be slower while both are busy (host
// hyperthread siblings busy with other guests, a lower clock when more cores run). A 2-thread
// kernel then cannot reach a 2x speed-up whatever its code does. benchmarks/sweep/measure_all.sh
// logs this probe next to the load average before each benchmark program, and
// benchmarks/sweep/scaling.py runs it around every 1- and 2-thread run, so a poor 2-thread figure
// can be told apart from a machine that had less than two cores to give.
//
// Prints one line: "core probe: alone A GFLOP/s, together B + C GFLOP/s, pair/alone R, round trip
// T ns" where R is (B + C) / A (2.0: two full cores). Each rate is a 0.3 s run of independent
// multiply-adds (vectorised), threads pinned to CPUs 0 and 1 where the OS allows it. T is the
// mean time a cache line takes from CPU 0 to CPU 1 and back (up to 0.2 s of an atomic flag passed
// between them): about 50-100 ns between cores that share a cache, several hundred where the OS
// or a VM's host has put the two far apart, and then every row one thread writes and the other
// reads costs that trip (docs/performance.md, "Twenty-seventh session"). Not printed with fewer
// than two CPUs.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace {

void pin_to_cpu(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: ignore failure
#else
  (void)cpu;
#endif
}

/// GFLOP/s of a multiply-add loop over 64 independent lanes for `seconds`, on CPU `cpu`.
double multiply_add_rate(int cpu, double seconds, std::atomic<int>& ready, int threads) {
  pin_to_cpu(cpu);
  ready.fetch_add(1);
  while (ready.load() < threads) {
  }
  constexpr int lanes = 64;
  double acc[lanes];
  for (int k = 0; k < lanes; ++k) acc[k] = 1.0 + 1e-9 * k;
  double const scale = 0.999999999, shift = 1e-9;
  long rounds = 0;
  auto const start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int r = 0; r < 20000; ++r)
      for (int k = 0; k < lanes; ++k) acc[k] = acc[k] * scale + shift;
    rounds += 20000;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  double sum = 0;
  for (double a : acc) sum += a;
  if (sum == 0) std::printf(" ");  // keeps the loop from being optimised away
  return 2.0 * lanes * double(rounds) / elapsed * 1e-9;
}

/// Mean round trip in ns of a cache line between CPUs 0 and 1: this thread (on CPU 0) sets a flag
/// to 1, a thread on CPU 1 sets it back to 0; up to 200000 trips or 0.2 s, then 2 stops it.
double round_trip_ns() {
  alignas(64) std::atomic<int> flag{0};
  std::atomic<int> ready{0};
  std::thread other([&] {
    pin_to_cpu(1);
    ready.store(1);
    for (;;) {
      int seen;
      while ((seen = flag.load(std::memory_order_acquire)) == 0) {
      }
      if (seen == 2) return;
      flag.store(0, std::memory_order_release);
    }
  });
  pin_to_cpu(0);
  while (ready.load() == 0) {
  }
  long trips = 0;
  auto const start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 1000; ++i) {
      flag.store(1, std::memory_order_release);
      while (flag.load(std::memory_order_acquire) != 0) {
      }
    }
    trips += 1000;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (trips < 200000 && elapsed < 0.2);
  flag.store(2, std::memory_order_release);
  other.join();
  return elapsed / double(trips) * 1e9;
}

}  // namespace

int main() {
  double const seconds = 0.3;
  std::atomic<int> ready{0};
  double const alone = multiply_add_rate(0, seconds, ready, 1);
  std::atomic<int> ready_pair{0};
  double rates[2] = {0, 0};
  std::vector<std::thread> pair;
  for (int t = 0; t < 2; ++t)
    pair.emplace_back([&, t] { rates[t] = multiply_add_rate(t, seconds, ready_pair, 2); });
  for (auto& thread : pair) thread.join();
  std::printf("core probe: alone %.1f GFLOP/s, together %.1f + %.1f GFLOP/s, pair/alone %.2f", alone, rates[0],
              rates[1], (rates[0] + rates[1]) / alone);
  if (std::thread::hardware_concurrency() >= 2) std::printf(", round trip %.0f ns", round_trip_ns());
  std::printf("\n");
  return 0;
}
