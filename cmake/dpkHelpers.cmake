# Helpers shared by tests, benchmarks and examples.

# Values of the DPK_SOURCE_DIR / DPK_TEST_DATA_DIR macros in tests. Default: this source tree.
# scripts/gpu_bundle.sh sets them relative ("." and "./tests/data") so that the test binaries
# find their data inside a relocatable bundle (run from the bundle's root).
set(DPK_TEST_SOURCE_DIR "${PROJECT_SOURCE_DIR}" CACHE STRING "DPK_SOURCE_DIR as seen by the tests")
set(DPK_TEST_DATA_DIR "${DPK_TEST_SOURCE_DIR}/tests/data" CACHE STRING "DPK_TEST_DATA_DIR as seen by the tests")

# dpk_add_test(NAME source... [THREADS n...]): a doctest executable linked to dpk with
# tests/test_main.cpp (compiled once, object library dpk_test_main); registered once per thread
# count (OMP_NUM_THREADS) for OpenMP builds.
function(dpk_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;THREADS;LABELS" ${ARGN})
  if(NOT TARGET dpk_test_main)
    find_package(doctest REQUIRED)
    add_library(dpk_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
    target_link_libraries(dpk_test_main PRIVATE dpk::dpk doctest::doctest)
  endif()
  add_executable(${name} ${ARG_SOURCES} $<TARGET_OBJECTS:dpk_test_main>)
  target_link_libraries(${name} PRIVATE dpk::dpk)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE DPK_TEST_DATA_DIR="${DPK_TEST_DATA_DIR}"
    DPK_SOURCE_DIR="${DPK_TEST_SOURCE_DIR}")
  if(NOT ARG_THREADS)
    set(ARG_THREADS 2)
  endif()
  foreach(t IN LISTS ARG_THREADS)
    add_test(NAME ${name}_omp${t} COMMAND ${name})
    set_tests_properties(${name}_omp${t} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=${t};OMP_PROC_BIND=false"
      LABELS "${ARG_LABELS}")
  endforeach()
endfunction()
