#pragma once
// Shared pieces of the bad-input tests: the error a call raises, and the checks on its message.
#include <dpk/core/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace dpk_test {

/// Message of the dpk::Error that `f()` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (dpk::Error const& e) {
    return e.what();
  }
  return "";
}

/// True when `text` contains `part`.
inline bool contains(std::string const& text, std::string const& part) {
  return text.find(part) != std::string::npos;
}

/// Runs `f`, requires a dpk::Error, and checks its message contains every string in `parts`.
template <class F>
void check_error(F&& f, std::vector<std::string> const& parts) {
  std::string const message = error_of(f);
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (auto const& p : parts) CHECK_MESSAGE(contains(message, p), "missing '" << p << "'");
}

}  // namespace dpk_test
