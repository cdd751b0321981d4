# Configure-time checks of the Kokkos / Kokkos Kernels that find_package found (docs/install.md).

# Reads `#define NAME` flags from the installed KokkosCore_config.h (empty when not found).
function(_dpk_kokkos_config_header out)
  set(_header "")
  get_target_property(_dirs Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_d IN LISTS _dirs Kokkos_DIR)
    if(EXISTS "${_d}/KokkosCore_config.h")
      set(_header "${_d}/KokkosCore_config.h")
      break()
    endif()
  endforeach()
  if(NOT _header)
    find_file(_dpk_kokkos_config_h KokkosCore_config.h PATHS "${Kokkos_DIR}/../../../include" NO_DEFAULT_PATH)
    if(_dpk_kokkos_config_h)
      set(_header "${_dpk_kokkos_config_h}")
    endif()
  endif()
  set(${out} "${_header}" PARENT_SCOPE)
endfunction()

function(dpk_check_kokkos)
  set(_min 3.4)
  if(Kokkos_VERSION VERSION_LESS _min)
    message(FATAL_ERROR "dpk needs Kokkos >= ${_min}; found ${Kokkos_VERSION} in ${Kokkos_DIR}. "
      "Run scripts/bootstrap.sh or point CMAKE_PREFIX_PATH at a newer Kokkos (docs/install.md).")
  endif()
  # Kokkos Kernels must match Kokkos' major.minor (each release is built against one Kokkos).
  if(DEFINED KokkosKernels_VERSION)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _k "${Kokkos_VERSION}")
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _kk "${KokkosKernels_VERSION}")
    if(NOT _k STREQUAL _kk)
      message(WARNING "dpk: Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}) with Kokkos Kernels ${KokkosKernels_VERSION} "
        "(${KokkosKernels_DIR}): use a Kokkos Kernels of the same version as Kokkos.")
    endif()
  endif()
  # Kokkos' new View implementation (develop after 4.6, default from 4.7) is miscompiled by
  # g++ 12 (default-constructed Views; upstream Kokkos issue #7464): warn unless the legacy View
  # is selected. Kokkos <= 4.6.x releases use the legacy View and are not affected.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13 AND Kokkos_VERSION VERSION_GREATER 4.6.90)
    _dpk_kokkos_config_header(_h)
    set(_legacy FALSE)
    if(_h)
      file(STRINGS "${_h}" _lines REGEX "^#define KOKKOS_ENABLE_IMPL_VIEW_LEGACY")
      if(_lines)
        set(_legacy TRUE)
      endif()
    endif()
    if(NOT _legacy)
      message(WARNING "dpk: g++ ${CMAKE_CXX_COMPILER_VERSION} with Kokkos ${Kokkos_VERSION}'s new View "
        "implementation miscompiles default-constructed Views (Kokkos issue #7464: tests segfault). "
        "Use g++ 11 or 13+, clang, or rebuild Kokkos with -DKokkos_ENABLE_IMPL_VIEW_LEGACY=ON (docs/install.md).")
    endif()
  endif()
endfunction()
