# Checks benchmarks/step_shape.py on a kernel sequence of known timing: three steps of 400 us
# (kernels a 100 us, b 50 us, Adam's update 100 us, with 100, 10 and 40 us of host code before
# them); the first step is always dropped, so the means are those of steps 2 and 3. Then the
# same with --merge, and a malformed file refused with its name and line.
#   cmake -DPYTHON=... -DSCRIPT=... -DDIR=... -P check_step_shape.cmake
set(seq "${DIR}/step_shape_check.txt")
set(text "# start_us end_us kind name\n")
foreach(k 0 1 2)
  math(EXPR t "400 * ${k}")
  math(EXPR a1 "${t} + 100")
  math(EXPR b0 "${t} + 110")
  math(EXPR b1 "${t} + 160")
  math(EXPR c0 "${t} + 200")
  math(EXPR c1 "${t} + 300")
  string(APPEND text "${t}.0 ${a1}.0 for a\n${b0}.0 ${b1}.0 for b\n${c0}.0 ${c1}.0 for dpk::train::adam::step\n")
endforeach()
file(WRITE "${seq}" "${text}")
foreach(case "--skip;1;--merge=;--regions-us s100,200,100,s40,200\n"
             "--skip;1;--merge=1-2;--regions-us s100,200,300\n")
  list(GET case 0 flag)
  list(GET case 1 value)
  list(GET case 2 merge)
  list(GET case 3 expected)
  execute_process(COMMAND ${PYTHON} ${SCRIPT} ${seq} ${flag} ${value} --threads 2 ${merge}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${out}" "${expected}" at)
  if(NOT rc EQUAL 0 OR at LESS 0)
    message(FATAL_ERROR "step_shape: '${merge}' exited with ${rc}, expected '${expected}' in:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "2 of 2 steps, wall 0\\.40 ms per step, kernels 0\\.25, between kernels 0\\.15")
    message(FATAL_ERROR "step_shape: wrong step summary:\n${out}")
  endif()
endforeach()
file(WRITE "${seq}" "# start_us end_us kind name\n0.0 x for a\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${seq} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "${seq}:2: start and end must be numbers" at)
if(rc EQUAL 0 OR at LESS 0)
  message(FATAL_ERROR "step_shape: a malformed line gave exit ${rc} without naming it:\n${err}")
endif()
