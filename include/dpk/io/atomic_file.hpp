#pragma once
/// \file atomic_file.hpp
/// \brief Writing a file so that a crash, a kill or a full disk never leaves a partial file
/// under its final name (model files, checkpoints, the `checkpoint` pointer, lcurve.out repair).
///
/// The bytes go to `<path>.tmp.<pid>`, which is fsynced and closed, then renamed over `path`
/// (atomic on POSIX file systems), then the folder is fsynced. When a step fails the error
/// names `path`, the step, the OS reason (strerror of errno) and what happened to the
/// temporary file (removed); `path` keeps its previous content.

#include <dpk/core/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace dpk {

namespace detail::atomic_file {

/// Folder part of `path` ("." when none).
inline std::string parent_folder(std::string const& path) {
  auto const slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// Writes `bytes` to a new file `temp` and fsyncs it. Returns "" or the failed step with the
/// OS reason. `fail_after_bytes` >= 0 (tests): stop after that many bytes, as a crash would.
inline std::string write_synced(std::string const& temp, std::string const& bytes, long fail_after_bytes) {
  int const fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::string("cannot create the temporary file (") + std::strerror(errno) + ")";
  std::size_t const limit = fail_after_bytes >= 0 && std::size_t(fail_after_bytes) < bytes.size()
                                ? std::size_t(fail_after_bytes)
                                : bytes.size();
  std::size_t written = 0;
  while (written < limit) {
    ssize_t const n = ::write(fd, bytes.data() + written, limit - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string const reason = std::strerror(errno);
      ::close(fd);
      return "write failed after " + std::to_string(written) + " of " + std::to_string(bytes.size()) + " bytes (" +
             reason + ")";
    }
    written += std::size_t(n);
  }
  if (limit < bytes.size()) {
    ::close(fd);
    return "write interrupted after " + std::to_string(limit) + " bytes (fault injection)";
  }
  if (::fsync(fd) != 0) {
    std::string const reason = std::strerror(errno);
    ::close(fd);
    return "fsync failed (" + reason + ")";
  }
  if (::close(fd) != 0) return std::string("close failed (") + std::strerror(errno) + ")";
  return {};
}

}  // namespace detail::atomic_file

/// The temporary name write_file_atomically uses for `path` in this process.
inline std::string atomic_temporary_name(std::string const& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

/// Writes `bytes` to `path` atomically (see the file comment). `what` starts error messages
/// ("model file", "checkpoint pointer", ...): `<what> '<path>': <step> (<OS reason>); '<path>'
/// is unchanged, the temporary file '<temp>' was removed`. `fail_after_bytes` >= 0 (tests only)
/// simulates a crash in the middle of the write: the partial temporary file stays, as it would.
inline void write_file_atomically(std::string const& path, std::string const& bytes, std::string const& what,
                                  long fail_after_bytes = -1) {
  std::string const temp = atomic_temporary_name(path);
  auto removed = [&]() -> std::string {
    if (std::remove(temp.c_str()) == 0 || errno == ENOENT) return "the temporary file '" + temp + "' was removed";
    return "the temporary file '" + temp + "' could not be removed (" + std::strerror(errno) + ")";
  };
  std::string const failure = detail::atomic_file::write_synced(temp, bytes, fail_after_bytes);
  if (!failure.empty()) {
    if (fail_after_bytes >= 0)
      throw Error(what + " '" + path + "': " + failure + "; the partial temporary file '" + temp + "' is left");
    std::string const cleanup = removed();
    throw Error(what + " '" + path + "': " + failure + " on the temporary file; '" + path + "' is unchanged, " + cleanup);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::string const reason = std::strerror(errno);
    std::string const cleanup = removed();
    throw Error(what + " '" + path + "': cannot rename the temporary file into place (" + reason + "); '" + path +
                "' is unchanged, " + cleanup);
  }
  int const dir = ::open(detail::atomic_file::parent_folder(path).c_str(), O_RDONLY);
  if (dir >= 0) {  // makes the rename durable; file systems that cannot fsync a folder are fine
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace dpk
