#pragma once
/// \file error.hpp
/// \brief The exception type dpk throws on the host for bad input or misuse.

#include <stdexcept>
#include <string>

namespace dpk {

/// Error with a message that names the file, key or value at fault and what was expected.
/// Thrown only from host code (never inside kernels).
class Error : public std::runtime_error {
 public:
  explicit Error(std::string const& message) : std::runtime_error(message) {}
};

/// Throws dpk::Error(message) when `condition` is false. The message is built before the call,
/// whatever the condition: in a loop over atoms, or anything run at every MD step, write
/// `if (!condition) throw Error(...)` instead (docs/md.md, "Forty-third session": 8623 strings per
/// LAMMPS call from one such loop).
inline void require(bool condition, std::string const& message) {
  if (!condition) throw Error(message);
}

}  // namespace dpk
