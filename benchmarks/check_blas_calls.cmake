# Runs test_core's in-thread GEMM case (PROGRAM) with the BLAS-call library TOOL preloaded and every
# product on the host BLAS (DPK_SMALL_GEMM=0), then checks that the case passed (the tool forwards
# each call unchanged) and that the table it wrote to OUT has one row per routine and flag pair
# with that case's shape: row-major C (9 x 6) = op(A) op(B), a sum over 7 terms, beta -0.5, which
# reaches the BLAS as m 6, n 9, k 7, one call each.
#   cmake -DTOOL=... -DPROGRAM=... -DOUT=... -P check_blas_calls.cmake
file(REMOVE "${OUT}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env LD_PRELOAD=${TOOL} DPK_BLAS_CALLS=${OUT} DPK_SMALL_GEMM=0 OMP_NUM_THREADS=1
          ${PROGRAM} "--test-case=in-thread gemm (host BLAS and KokkosBatched serial) equals plain loops*"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "blas_calls: '${PROGRAM}' exited with ${rc} under the tool:\n${out}\n${err}")
endif()
if(NOT out MATCHES "test cases: +2 \\| +2 passed")
  message(FATAL_ERROR "blas_calls: expected the case's two instantiations to run and pass:\n${out}")
endif()
if(NOT EXISTS "${OUT}")
  message(FATAL_ERROR "blas_calls: no table written to ${OUT} (tool not loaded?)\n${err}")
endif()
file(READ "${OUT}" table)
if(NOT table MATCHES "# total_ms calls mean_us GFLOP/s routine transa transb m n k beta\n")
  message(FATAL_ERROR "blas_calls: ${OUT} has no header line:\n${table}")
endif()
foreach(routine d s)
  foreach(flags "N N" "N T" "T N" "T T")
    # total ms, exactly one call, mean us, GFLOP/s, then the shape.
    if(NOT table MATCHES "\n *[0-9]+\\.[0-9]+ +1 +[0-9]+\\.[0-9]+ +[0-9]+\\.[0-9]+ ${routine}gemm ${flags} 6 9 7 other\n")
      message(FATAL_ERROR "blas_calls: ${OUT} has no single ${routine}gemm ${flags} 6 9 7 call:\n${table}")
    endif()
  endforeach()
endforeach()
if(NOT table MATCHES "\n# all: [0-9.]+ ms in 8 calls, [0-9.]+ GFLOP/s\n")
  message(FATAL_ERROR "blas_calls: ${OUT} should count 8 calls in all:\n${table}")
endif()
