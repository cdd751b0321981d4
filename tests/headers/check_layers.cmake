# Include-graph check (issue 15): dpk's layers point one way.
#
#   cmake -DINCLUDE_DIR=<dir holding dpk/> -P check_layers.cmake
#
# Every `#include <dpk/...>` of every header under INCLUDE_DIR/dpk must point to the same or a
# lower layer:
#   0 core  <-  1 neighbor, nn, descriptor  <-  2 model  <-  3 io, parallel  <-  4 train, interop
#   <-  5 the umbrella headers (dpk/*.hpp)
# and the headers an MD code includes for inference (dpk/potential.hpp and everything it pulls in,
# transitively) must contain no trainer (dpk/train/), no input.json schema (dpk/io/input.hpp), no
# data sampler (dpk/io/data_sampler.hpp) and no MPI communicator (dpk/parallel/). Prints every
# violation and fails when there is one. The graph is read from the #include lines themselves
# (conditional includes count too), so no compiler or Kokkos is needed.
cmake_minimum_required(VERSION 3.16)
if(NOT INCLUDE_DIR OR NOT EXISTS "${INCLUDE_DIR}/dpk")
  message(FATAL_ERROR "check_layers: INCLUDE_DIR='${INCLUDE_DIR}' does not hold a dpk/ folder")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)

set(_layer_core 0)
set(_layer_neighbor 1)
set(_layer_nn 1)
set(_layer_descriptor 1)
set(_layer_model 2)
set(_layer_io 3)
set(_layer_parallel 3)
set(_layer_train 4)
set(_layer_interop 4)

# layer_of(<header relative to INCLUDE_DIR> <out var>): its layer, 5 for dpk/<name>.hpp.
function(layer_of header out)
  if(header MATCHES "^dpk/([^/]+)/")
    set(folder ${CMAKE_MATCH_1})
    if(NOT DEFINED _layer_${folder})
      message(SEND_ERROR "check_layers: ${header}: folder '${folder}' has no layer (add it to check_layers.cmake)")
      set(${out} -1 PARENT_SCOPE)
      return()
    endif()
    set(${out} ${_layer_${folder}} PARENT_SCOPE)
  else()
    set(${out} 5 PARENT_SCOPE)
  endif()
endfunction()

# includes_of(<header> <out var>): the dpk headers it includes directly.
function(includes_of header out)
  file(STRINGS "${INCLUDE_DIR}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*<dpk/[^>]+>")
  set(result "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*<(dpk/[^>]+)>.*$" "\\1" target "${line}")
    list(APPEND result ${target})
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/dpk/*.hpp")
list(SORT headers)
set(violations 0)
set(edges 0)
foreach(header IN LISTS headers)
  layer_of(${header} from)
  includes_of(${header} targets)
  foreach(target IN LISTS targets)
    math(EXPR edges "${edges} + 1")
    if(NOT EXISTS "${INCLUDE_DIR}/${target}")
      message("check_layers: ${header} includes <${target}>, which does not exist")
      math(EXPR violations "${violations} + 1")
      continue()
    endif()
    layer_of(${target} to)
    if(to GREATER from)
      message("check_layers: upward include: ${header} (layer ${from}) includes <${target}> (layer ${to})")
      math(EXPR violations "${violations} + 1")
    endif()
  endforeach()
endforeach()

# Everything <dpk/potential.hpp> pulls in.
set(closure "")
set(queue dpk/potential.hpp)
while(queue)
  list(POP_FRONT queue header)
  if(header IN_LIST closure OR NOT EXISTS "${INCLUDE_DIR}/${header}")
    continue()
  endif()
  list(APPEND closure ${header})
  includes_of(${header} targets)
  list(APPEND queue ${targets})
endwhile()
foreach(header IN LISTS closure)
  if(header MATCHES "^dpk/(train|parallel)/" OR header STREQUAL "dpk/io/input.hpp" OR
     header STREQUAL "dpk/io/data_sampler.hpp")
    message("check_layers: <dpk/potential.hpp> pulls in <${header}> (inference must not need it)")
    math(EXPR violations "${violations} + 1")
  endif()
endforeach()
list(LENGTH headers nheaders)
list(LENGTH closure nclosure)
if(violations GREATER 0)
  message(FATAL_ERROR "check_layers: ${violations} violation(s) in ${nheaders} headers")
endif()
message("check_layers: ${nheaders} headers, ${edges} dpk includes, none upward; <dpk/potential.hpp> pulls in ${nclosure} headers, no trainer, input schema, sampler or MPI")
