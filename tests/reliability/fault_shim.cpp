// LD_PRELOAD shim for the fault tests (tests/reliability/write_faults.py, mpi_faults.py): makes
// the C library's write/writev, fsync/fdatasync, rename or read fail for one file, as a full
// disk, a failing device or a refused rename would, optionally on one MPI rank only.
// Everything else passes through unchanged.
//
//   DPK_FAULT_PATH   the file: matched in the path of the file descriptor (write, fsync) or in
//                    the rename target, where it must be followed by the end of the path or a
//                    '.' ("model.ckpt-6" matches model.ckpt-6.tmp.123, not model.ckpt-60)
//   DPK_FAULT_OP     write (default) | fsync | rename | read
//   DPK_FAULT_BYTES  write: bytes the matching files may take in all before writes fail (a
//                    write crossing the limit is cut short, the next one fails); default 0
//   DPK_FAULT_ERRNO  ENOSPC (default) | EIO | EDQUOT | EFBIG | EACCES
//   DPK_FAULT_RANK   only in the process whose OMPI_COMM_WORLD_RANK (or PMI_RANK) is this
#include <dlfcn.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

enum class Op { write, fsync, rename, read };

struct Config {
  char const* pattern = nullptr;
  Op op = Op::write;
  long budget = 0;
  int error = ENOSPC;
};

Config const& config() {
  static Config const c = [] {
    Config r;
    r.pattern = std::getenv("DPK_FAULT_PATH");
    if (r.pattern && !*r.pattern) r.pattern = nullptr;
    if (char const* only = std::getenv("DPK_FAULT_RANK")) {
      char const* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (!rank) rank = std::getenv("PMI_RANK");
      if (!rank || std::strcmp(rank, only) != 0) r.pattern = nullptr;  // not this rank: no faults
    }
    if (char const* op = std::getenv("DPK_FAULT_OP")) {
      if (std::strcmp(op, "fsync") == 0) r.op = Op::fsync;
      else if (std::strcmp(op, "rename") == 0) r.op = Op::rename;
      else if (std::strcmp(op, "read") == 0) r.op = Op::read;
    }
    if (char const* bytes = std::getenv("DPK_FAULT_BYTES")) r.budget = std::atol(bytes);
    if (char const* e = std::getenv("DPK_FAULT_ERRNO")) {
      if (std::strcmp(e, "EIO") == 0) r.error = EIO;
      else if (std::strcmp(e, "EDQUOT") == 0) r.error = EDQUOT;
      else if (std::strcmp(e, "EFBIG") == 0) r.error = EFBIG;
      else if (std::strcmp(e, "EACCES") == 0) r.error = EACCES;
    }
    return r;
  }();
  return c;
}

std::atomic<long> used{0};

bool path_matches(char const* path) {
  char const* pattern = config().pattern;
  if (!pattern || !path) return false;
  std::size_t const n = std::strlen(pattern);
  for (char const* p = std::strstr(path, pattern); p; p = std::strstr(p + 1, pattern))
    if (p[n] == '\0' || p[n] == '.') return true;
  return false;
}

bool fd_matches(int fd) {
  if (!config().pattern) return false;
  char link[64], target[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t const n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return path_matches(target);
}

template <class F>
F real(char const* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" ssize_t write(int fd, void const* buffer, size_t count) {
  static auto const next = real<ssize_t (*)(int, void const*, size_t)>("write");
  if (count > 0 && config().op == Op::write && fd_matches(fd)) {
    long const left = config().budget - used.load();
    if (left <= 0) {
      errno = config().error;
      return -1;
    }
    if (long(count) > left) count = size_t(left);
    ssize_t const n = next(fd, buffer, count);
    if (n > 0) used += n;
    return n;
  }
  return next(fd, buffer, count);
}

extern "C" ssize_t writev(int fd, struct iovec const* iov, int iovcnt) {
  static auto const next = real<ssize_t (*)(int, struct iovec const*, int)>("writev");
  if (config().op == Op::write && fd_matches(fd)) {
    // Through write() above, one piece at a time (short counts end the call, as writev's would).
    ssize_t total = 0;
    for (int i = 0; i < iovcnt; ++i) {
      if (iov[i].iov_len == 0) continue;
      ssize_t const n = write(fd, iov[i].iov_base, iov[i].iov_len);
      if (n < 0) return total > 0 ? total : -1;
      total += n;
      if (size_t(n) < iov[i].iov_len) break;
    }
    return total;
  }
  return next(fd, iov, iovcnt);
}

extern "C" int fsync(int fd) {
  static auto const next = real<int (*)(int)>("fsync");
  if (config().op == Op::fsync && fd_matches(fd)) {
    errno = config().error;
    return -1;
  }
  return next(fd);
}

extern "C" int fdatasync(int fd) {
  static auto const next = real<int (*)(int)>("fdatasync");
  if (config().op == Op::fsync && fd_matches(fd)) {
    errno = config().error;
    return -1;
  }
  return next(fd);
}

extern "C" int rename(char const* from, char const* to) {
  static auto const next = real<int (*)(char const*, char const*)>("rename");
  if (config().op == Op::rename && path_matches(to)) {
    errno = config().error;
    return -1;
  }
  return next(from, to);
}

extern "C" ssize_t read(int fd, void* buffer, size_t count) {
  static auto const next = real<ssize_t (*)(int, void*, size_t)>("read");
  if (config().op == Op::read && fd_matches(fd)) {
    errno = config().error;
    return -1;
  }
  return next(fd, buffer, count);
}
