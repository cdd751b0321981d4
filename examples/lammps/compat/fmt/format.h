#pragma once
/// \file format.h
/// \brief Declarations only, so that Debian 12's LAMMPS headers (liblammps-dev 20220106) parse:
/// their pointers.h, utils.h and error.h include "fmt/format.h", which the package does not
/// install (LAMMPS bundles fmt inside liblammps). The formatting templates of those headers are
/// never instantiated by pair_dpk; it calls only the std::string overloads (Error::all(file,
/// line, std::string), utils::logmesg(lmp, std::string)). Used only when the LAMMPS include
/// folder has no fmt/format.h of its own (examples/lammps/CMakeLists.txt).

#include <string_view>

namespace fmt {
using string_view = std::string_view;  ///< stands in for fmt::string_view in declarations
struct format_args {};                 ///< stands in for fmt::format_args in declarations
/// Never called (it has no definition): only named inside uninstantiated templates.
template <class... Args, class S, class... Values>
format_args make_args_checked(S const& format, Values const&... values);
}  // namespace fmt
