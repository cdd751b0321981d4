# Runs PROGRAM ARG1 ARG2 under the kernel-times Kokkos Tools library TOOL (through
# KOKKOS_PROFILE_LIBRARY, which Kokkos 3 reads and Kokkos 4 still honours, deprecated) and checks
# that the program succeeded and that the table it wrote to OUT names a dpk kernel.
#   cmake -DTOOL=... -DPROGRAM=... -DARG1=... -DARG2=... -DOUT=... -P check_kernel_times.cmake
file(REMOVE "${OUT}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=KOKKOS_TOOLS_LIBS KOKKOS_PROFILE_LIBRARY=${TOOL} DPK_KERNEL_TIMES=${OUT}
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
