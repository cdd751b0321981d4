# Helpers shared by tests, benchmarks and examples.

# dpk_add_test(NAME source... [THREADS n...]): a doctest executable linked to dpk with
# tests/test_main.cpp; registered once per thread count (OMP_NUM_THREADS) for OpenMP builds.
function(dpk_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;THREADS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
  target_link_libraries(${name} PRIVATE dpk::dpk)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE DPK_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    DPK_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT ARG_THREADS)
    set(ARG_THREADS 2)
  endif()
  foreach(t IN LISTS ARG_THREADS)
    add_test(NAME ${name}_omp${t} COMMAND ${name})
    set_tests_properties(${name}_omp${t} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=${t};OMP_PROC_BIND=false"
      LABELS "${ARG_LABELS}")
  endforeach()
endfunction()
