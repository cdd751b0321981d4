# Runs dpk-busy-barriers briefly (two region counts, light regions, quiet and busy; then a step
# given region by region with --regions-us, quiet only) and checks that it succeeded and printed
# one line per run with positive times (and their ratio); then that bad values are refused with
# exit status 2 and a message naming the option and the value.
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
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=2 ${PROGRAM} --regions-us 300,s40,5,900 --steps 5 --no-busy
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "1\\.2 ms of work per step"
   OR NOT out MATCHES "regions 3, serial 1, blocks 20 us: quiet [0-9]+\\.[0-9][0-9] ms per step\n")
  message(FATAL_ERROR "busy_barriers: --regions-us run exited with ${rc} or printed no line for its shape:\n${out}\n${err}")
endif()
foreach(bad "--regions-us;300,x;--regions-us: expected a positive number, got 'x'"
            "--regions-us;s0;--regions-us: expected a positive number, got '0'"
            "--phases;0;--phases: expected a whole number >= 1, got '0'"
            "--steps;0.5;--steps: expected a whole number >= 1, got '0.5'"
            "--work-ms;0;--work-ms: expected a positive number, got '0'")
  list(GET bad 0 flag)
  list(GET bad 1 value)
  list(GET bad 2 message)
  execute_process(COMMAND ${PROGRAM} ${flag} ${value} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${message}" at)
  if(NOT rc EQUAL 2 OR at LESS 0)
    message(FATAL_ERROR "busy_barriers: '${flag} ${value}' gave exit ${rc}, expected 2 and \"${message}\":\n${err}")
  endif()
endforeach()
