// Wall time per Kokkos kernel name: a Kokkos Tools library (no dpk or Kokkos code), loaded with
//   KOKKOS_TOOLS_LIBS=build/openmp/benchmarks/libdpk-kernel-times.so program ...   (Kokkos 4)
//   KOKKOS_PROFILE_LIBRARY=build/openmp/benchmarks/libdpk-kernel-times.so program ... (Kokkos 3)
// At exit it writes one line per kernel name -- total ms, calls, mean us, kind and name, largest
// total first -- to the file named by DPK_KERNEL_TIMES (default: standard error). A kernel's time
// runs from its launch to its end on the host thread that launched it (host backends are
// synchronous; on GPUs use a fencing connector instead). Used for the busy-node table of
// docs/tuning.md: the same run with and without a competing busy loop, kernel by kernel.
// With DPK_KERNEL_SEQUENCE=FILE it also writes the first 2^20 calls in launch order -- start us,
// end us (from the first launch), kind and name -- for benchmarks/step_shape.py, which turns a
// training run's calls into the shape of its step (docs/tuning.md, "The step's shape").
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Total {
  long calls = 0;
  double us = 0;
};

struct Open {
  std::string key;
  double start = 0;
};

std::map<std::string, Total>& totals() {
  static std::map<std::string, Total> t;
  return t;
}
std::unordered_map<std::uint64_t, Open>& open_kernels() {
  static std::unordered_map<std::uint64_t, Open> o;
  return o;
}
std::uint64_t next_id = 1;

/// One call for DPK_KERNEL_SEQUENCE: its key in totals() and its start and end.
struct Call {
  std::string const* key = nullptr;
  double start = 0, end = 0;
};
std::vector<Call>& calls() {
  static std::vector<Call> c;
  return c;
}
/// The sequence keeps the first max_calls calls (24 MiB; about 17000 water training steps).
constexpr std::size_t max_calls = std::size_t(1) << 20;
std::size_t dropped_calls = 0;
/// DPK_KERNEL_SEQUENCE, read once at load; empty: no sequence kept.
std::string const sequence_path = [] {
  char const* path = std::getenv("DPK_KERNEL_SEQUENCE");
  return std::string(path ? path : "");
}();
bool const keep_sequence = !sequence_path.empty();

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void begin(char const* kind, char const* name, std::uint64_t* id) {
  *id = next_id++;
  open_kernels()[*id] = Open{std::string(kind) + " " + (name ? name : "?"), now_us()};
}

void end(std::uint64_t id) {
  auto it = open_kernels().find(id);
  if (it == open_kernels().end()) return;
  double const stop = now_us();
  auto const slot = totals().try_emplace(it->second.key).first;
  Total& t = slot->second;
  t.calls += 1;
  t.us += stop - it->second.start;
  if (keep_sequence) {
    if (calls().size() < max_calls)
      calls().push_back({&slot->first, it->second.start, stop});
    else
      ++dropped_calls;
  }
  open_kernels().erase(it);
}

}  // namespace

extern "C" {
void kokkosp_init_library(int, std::uint64_t, std::uint32_t, void*) {}

void kokkosp_finalize_library() {
  std::vector<std::pair<std::string, Total>> rows(totals().begin(), totals().end());
  std::sort(rows.begin(), rows.end(), [](auto const& a, auto const& b) { return a.second.us > b.second.us; });
  char const* path = std::getenv("DPK_KERNEL_TIMES");
  FILE* out = path && *path ? std::fopen(path, "w") : stderr;
  if (!out) {
    std::fprintf(stderr, "dpk-kernel-times: cannot write DPK_KERNEL_TIMES='%s'\n", path);
    out = stderr;
  }
  std::fprintf(out, "# total_ms calls mean_us kind name\n");
  for (auto const& [key, t] : rows)
    std::fprintf(out, "%10.3f %8ld %10.2f %s\n", t.us * 1e-3, t.calls, t.us / double(t.calls), key.c_str());
  if (out != stderr) std::fclose(out);
  if (!keep_sequence) return;
  FILE* seq = std::fopen(sequence_path.c_str(), "w");
  if (!seq) {
    std::fprintf(stderr, "dpk-kernel-times: cannot write DPK_KERNEL_SEQUENCE='%s'\n", sequence_path.c_str());
    return;
  }
  // calls() is in end order; nested launches aside (none in dpk), that is launch order
  double const origin = calls().empty() ? 0 : calls().front().start;
  std::fprintf(seq, "# start_us end_us kind name\n");
  if (dropped_calls > 0)
    std::fprintf(seq, "# the first %zu calls; %zu later calls not kept\n", max_calls, dropped_calls);
  for (Call const& c : calls()) std::fprintf(seq, "%.1f %.1f %s\n", c.start - origin, c.end - origin, c.key->c_str());
  std::fclose(seq);
}

void kokkosp_begin_parallel_for(char const* name, std::uint32_t, std::uint64_t* id) { begin("for", name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_reduce(char const* name, std::uint32_t, std::uint64_t* id) { begin("reduce", name, id); }
void kokkosp_end_parallel_reduce(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_scan(char const* name, std::uint32_t, std::uint64_t* id) { begin("scan", name, id); }
void kokkosp_end_parallel_scan(std::uint64_t id) { end(id); }
}
