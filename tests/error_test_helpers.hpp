#pragma once
// Shared piece of the bad-input tests: the error a call must raise.
#include <dpk/core/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace dpk_test {

/// Runs `f`, requires a dpk::Error, and checks its message contains every string in `parts`.
template <class F>
void check_error(F&& f, std::vector<std::string> const& parts) {
  std::string message;
  try {
    f();
  } catch (dpk::Error const& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (auto const& p : parts) CHECK_MESSAGE(message.find(p) != std::string::npos, "missing '" << p << "'");
}

}  // namespace dpk_test
