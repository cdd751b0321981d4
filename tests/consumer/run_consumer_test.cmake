# ctest driver of the find_package(dpk) consumer test (cmake -P). Steps:
#   1. cmake --install the current dpk build tree into WORK_DIR/prefix;
#   2. configure tests/consumer against that prefix (plus the dependency prefixes dpk was
#      configured with), with the same compiler, flags and generator;
#   3. build it and run the app on examples/water/se_e2_a/input.json.
# Inputs (-D): DPK_BINARY_DIR, DPK_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, CXX_FLAGS,
# BUILD_TYPE, PREFIX_PATH (";" replaced by "|"), KOKKOS_DIR, KOKKOSKERNELS_DIR, NLOHMANN_JSON_DIR.
foreach(var DPK_BINARY_DIR DPK_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" PREFIX_PATH "${PREFIX_PATH}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    set(hint "")
    if(err MATCHES "cannot find")
      # cmake --install installs every install() rule of the tree, programs included.
      set(hint "\nHint: `cmake --install` needs the whole tree built; run `cmake --build ${DPK_BINARY_DIR}` first.")
    endif()
    message(FATAL_ERROR "consumer test: ${what} failed (exit ${rc})${hint}\n--- command: ${ARGN}\n--- stdout:\n${out}\n--- stderr:\n${err}")
  endif()
  message(STATUS "consumer test: ${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

run_step("install dpk into ${prefix}" ${CMAKE_COMMAND} --install "${DPK_BINARY_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/include/dpk/io.hpp")
  message(FATAL_ERROR "consumer test: ${prefix}/include/dpk/io.hpp was not installed")
endif()
file(GLOB_RECURSE config_files "${prefix}/*/dpkConfig.cmake")
if(NOT config_files)
  message(FATAL_ERROR "consumer test: no dpkConfig.cmake under ${prefix}")
endif()

set(configure_args -S "${DPK_SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_PREFIX_PATH=${prefix};${PREFIX_PATH}")
# Point at exactly the dependencies dpk itself was configured with.
foreach(pair "Kokkos_DIR=${KOKKOS_DIR}" "KokkosKernels_DIR=${KOKKOSKERNELS_DIR}" "nlohmann_json_DIR=${NLOHMANN_JSON_DIR}")
  if(NOT pair MATCHES "=$" AND NOT pair MATCHES "NOTFOUND$")
    list(APPEND configure_args "-D${pair}")
  endif()
endforeach()
run_step("configure the consumer project" ${CMAKE_COMMAND} ${configure_args})
run_step("build the consumer project" ${CMAKE_COMMAND} --build "${WORK_DIR}/build" -j 2)

find_program(app NAMES app PATHS "${WORK_DIR}/build" "${WORK_DIR}/build/${BUILD_TYPE}" NO_DEFAULT_PATH)
if(NOT app)
  message(FATAL_ERROR "consumer test: the app executable was not built")
endif()
run_step("run the consumer app" "${app}" "${DPK_SOURCE_DIR}/examples/water/se_e2_a/input.json")
message(STATUS "${last_output}")
if(NOT last_output MATCHES "dpk consumer: 3 systems")
  message(FATAL_ERROR "consumer test: unexpected output: ${last_output}")
endif()

# Inference only: potential_app runs a real model and links no MPI library.
find_program(potential_app NAMES potential_app PATHS "${WORK_DIR}/build" "${WORK_DIR}/build/${BUILD_TYPE}" NO_DEFAULT_PATH)
if(NOT potential_app)
  message(FATAL_ERROR "consumer test: the potential_app executable was not built")
endif()
run_step("run the inference-only consumer" "${potential_app}" "${DPK_SOURCE_DIR}/tests/data/legacy_v1/model.dpk")
message(STATUS "${last_output}")
if(NOT last_output MATCHES "dpk potential consumer: E = ")
  message(FATAL_ERROR "consumer test: unexpected output: ${last_output}")
endif()
find_program(ldd NAMES ldd)
if(ldd)
  execute_process(COMMAND ${ldd} "${potential_app}" OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND libs MATCHES "libmpi")
    message(FATAL_ERROR "consumer test: potential_app links an MPI library:\n${libs}")
  endif()
  message(STATUS "consumer test: potential_app links no MPI library: ok")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
