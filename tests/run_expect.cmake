# Runs one command and checks its exit status and output (stdout + stderr together).
#   cmake -DCOMMAND=<prog|arg|arg...> [-DEXPECT_RC=0] [-DEXPECT=<regex>] [-DFORBID=<regex>]
#         [-DWORK_DIR=<dir>] -P run_expect.cmake
# Arguments are separated by '|' (CMake lists would be split by add_test). Unlike ctest's
# PASS_REGULAR_EXPRESSION, which ignores the exit status, this checks both.
if(NOT COMMAND)
  message(FATAL_ERROR "run_expect.cmake: COMMAND is not set")
endif()
string(REPLACE "|" ";" _command "${COMMAND}")
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()
if(NOT WORK_DIR)
  set(WORK_DIR ".")
endif()
execute_process(COMMAND ${_command} WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${_out}")
if(NOT "${_rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "run_expect.cmake: exit status ${_rc}, expected ${EXPECT_RC}")
endif()
if(DEFINED EXPECT AND NOT "${_out}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "run_expect.cmake: output does not match '${EXPECT}'")
endif()
if(DEFINED FORBID AND "${_out}" MATCHES "${FORBID}")
  message(FATAL_ERROR "run_expect.cmake: output matches the forbidden '${FORBID}'")
endif()
