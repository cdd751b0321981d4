# Runs dpk-busy-barriers briefly (two region counts, light regions, quiet and busy) and checks that
# it succeeded and printed one line per region count with positive times and their ratio; then that
# a bad option is refused with exit status 2 and a message naming it.
#   cmake -DPROGRAM=... -P check_busy_barriers.cmake
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=2 ${PROGRAM} --work-ms 2 --phases 1,4 --light 8 --steps 5
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "busy_barriers: exited with ${rc}:\n${out}\n${err}")
endif()
foreach(phases 1 4)
  set(number "[0-9]+\\.[0-9][0-9]")
  if(NOT out MATCHES "phases ${phases}, light 8, blocks 20 us: quiet ${number} ms, busy ${number} ms per step, busy/quiet ${number}\n")
    message(FATAL_ERROR "busy_barriers: no line for ${phases} regions in:\n${out}")
  endif()
endforeach()
execute_process(COMMAND ${PROGRAM} --phases 0 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--phases: expected a positive number, got '0'")
  message(FATAL_ERROR "busy_barriers: '--phases 0' gave exit ${rc}, expected 2 with a message naming it:\n${err}")
endif()
