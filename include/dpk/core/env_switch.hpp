#pragma once
/// \file env_switch.hpp
/// \brief On/off switches and counts read from environment variables (DPK_HUGE_PAGES,
/// DPK_EMBEDDING_UNIT_TANGENTS, DPK_EMBEDDING_PAIR_ROWS, DPK_EMBEDDING_CHUNK_ROWS,
/// DPK_TN_SUM_KERNEL, DPK_FITTING_SYMMETRIC_HEAD; docs/tuning.md).

#include <dpk/core/error.hpp>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace dpk {

/// The 0/1 environment variable `name`: `fallback` when unset or empty, else its value; any
/// other value is a dpk::Error naming the variable, the value and `expected` (what 0 and 1 mean).
inline bool env_switch(char const* name, bool fallback, char const* expected = "0 or 1") {
  char const* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  std::string const value(env);
  require(value == "0" || value == "1", std::string(name) + ": expected " + expected + ", got '" + value + "'");
  return value == "1";
}

/// The integer environment variable `name` in [0, max]: `fallback` when unset or empty, else its
/// value (decimal digits only); anything else is a dpk::Error naming the variable, the value and
/// `expected`.
inline int env_count(char const* name, int fallback, int max, char const* expected) {
  char const* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  long const value = std::strtol(env, &end, 10);
  require(*env >= '0' && *env <= '9' && *end == '\0' && errno == 0 && value <= max,
          std::string(name) + ": expected " + expected + ", got '" + env + "'");
  return static_cast<int>(value);
}

}  // namespace dpk
