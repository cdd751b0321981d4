#pragma once
/// \file json_depth.hpp
/// \brief The nesting limit of the JSON that dpk's readers accept (input.json, model headers).

#include <algorithm>
#include <cstddef>

namespace dpk::detail {

/// Deepest nesting of JSON text that dpk's readers accept. input.json and model headers nest a
/// few levels; nlohmann_json prints and copies values recursively, so a value nested thousands
/// of levels deep (a corrupt or hostile file) would overflow the stack in an error message.
inline constexpr std::size_t max_json_depth = 100;

/// Deepest `[`/`{` nesting of JSON text, counting brackets outside strings (escapes honoured).
inline std::size_t json_nesting_depth(char const* begin, char const* end) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (char const* p = begin; p != end; ++p) {
    char const c = *p;
    if (in_string) {
      if (c == '\\' && p + 1 != end) ++p;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace dpk::detail
