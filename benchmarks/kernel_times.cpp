// Wall time per Kokkos kernel name: a Kokkos Tools library (no dpk or Kokkos code), loaded with
//   KOKKOS_TOOLS_LIBS=build/openmp/benchmarks/libdpk-kernel-times.so program ...   (Kokkos 4)
//   KOKKOS_PROFILE_LIBRARY=build/openmp/benchmarks/libdpk-kernel-times.so program ... (Kokkos 3)
// At exit it writes one line per kernel name -- total ms, calls, mean us, kind and name, largest
// total first -- to the file named by DPK_KERNEL_TIMES (default: standard error). A kernel's time
// runs from its launch to its end on the host thread that launched it (host backends are
// synchronous; on GPUs use a fencing connector instead). Used for the busy-node table of
// docs/tuning.md: the same run with and without a competing busy loop, kernel by kernel.
#include <algorithm>
#include <chrono>
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
  Total& t = totals()[it->second.key];
  t.calls += 1;
  t.us += now_us() - it->second.start;
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
}

void kokkosp_begin_parallel_for(char const* name, std::uint32_t, std::uint64_t* id) { begin("for", name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_reduce(char const* name, std::uint32_t, std::uint64_t* id) { begin("reduce", name, id); }
void kokkosp_end_parallel_reduce(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_scan(char const* name, std::uint32_t, std::uint64_t* id) { begin("scan", name, id); }
void kokkosp_end_parallel_scan(std::uint64_t id) { end(id); }
}
