# Runs PROGRAM ARG1 ARG2 under the kernel-times Kokkos Tools library TOOL (through
# KOKKOS_PROFILE_LIBRARY, which Kokkos 3 reads and Kokkos 4 still honours, deprecated) and checks
# that the program succeeded, that the table it wrote to OUT names a dpk kernel and that the
# sequence it wrote to OUT.seq (DPK_KERNEL_SEQUENCE) lists dpk kernels' calls, each ending after it
# starts.
#   cmake -DTOOL=... -DPROGRAM=... -DARG1=... -DARG2=... -DOUT=... -P check_kernel_times.cmake
file(REMOVE "${OUT}" "${OUT}.seq")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=KOKKOS_TOOLS_LIBS KOKKOS_PROFILE_LIBRARY=${TOOL} DPK_KERNEL_TIMES=${OUT}
          DPK_KERNEL_SEQUENCE=${OUT}.seq
          OMP_NUM_THREADS=1 ${PROGRAM} ${ARG1} ${ARG2}
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kernel_times: '${PROGRAM}' exited with ${rc}:\n${err}")
endif()
if(NOT EXISTS "${OUT}")
  message(FATAL_ERROR "kernel_times: no table written to ${OUT} (tool not loaded?)\n${err}")
endif()
file(READ "${OUT}" table)
if(NOT table MATCHES "# total_ms calls mean_us kind name")
  message(FATAL_ERROR "kernel_times: ${OUT} has no header line:\n${table}")
endif()
# A row: total ms, a positive call count, mean us, kind, then a dpk kernel name.
if(NOT table MATCHES "\n *[0-9]+\\.[0-9]+ +[1-9][0-9]* +[0-9]+\\.[0-9]+ (for|reduce|scan) dpk::neighbor::")
  message(FATAL_ERROR "kernel_times: ${OUT} lists no dpk::neighbor kernel:\n${table}")
endif()
if(NOT EXISTS "${OUT}.seq")
  message(FATAL_ERROR "kernel_times: no sequence written to ${OUT}.seq")
endif()
file(STRINGS "${OUT}.seq" calls REGEX "^[0-9]+\\.[0-9] [0-9]+\\.[0-9] (for|reduce|scan) dpk::neighbor::")
list(LENGTH calls ncalls)
if(ncalls EQUAL 0)
  message(FATAL_ERROR "kernel_times: ${OUT}.seq lists no dpk::neighbor call")
endif()
foreach(call IN LISTS calls)
  string(REPLACE " " ";" fields "${call}")
  list(GET fields 0 start)
  list(GET fields 1 end)
  string(REPLACE "." "" start10 "${start}")
  string(REPLACE "." "" end10 "${end}")
  if(end10 LESS start10)
    message(FATAL_ERROR "kernel_times: a call ends before it starts in ${OUT}.seq: ${call}")
  endif()
endforeach()
