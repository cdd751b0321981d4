# dpk-train test on a compressed model and on the model it was compressed from: the reported
# errors against the labels (energy per atom, forces, virial) must agree, the compressed model's
# header line must say "compressed", and no embedding input may fall beyond the tables.
#   cmake -DDPK_TRAIN=<dpk-train> -DMODEL=<original> -DCOMPRESSED=<compressed> -DSYSTEM=<dir>
#         -P check_compressed_test.cmake
foreach(var DPK_TRAIN MODEL COMPRESSED SYSTEM)
  if(NOT ${var})
    message(FATAL_ERROR "check_compressed_test.cmake: ${var} is not set")
  endif()
endforeach()
function(run_test model out_var)
  execute_process(COMMAND ${DPK_TRAIN} test -m ${model} -s ${SYSTEM} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dpk-train test -m ${model}: exit status ${rc}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
run_test(${MODEL} plain)
run_test(${COMPRESSED} packed)
if(NOT packed MATCHES "compressed\\)")
  message(FATAL_ERROR "the compressed model's header line does not say 'compressed'")
endif()
if(packed MATCHES "beyond the compression tables")
  message(FATAL_ERROR "embedding inputs fell beyond the tables")
endif()
# Metric lines "Name : value unit": the printed values (6 significant digits) must be equal.
foreach(metric "Energy RMSE/Natoms" "Force  RMSE" "Virial RMSE/Natoms" "Energy MAE" "Force  MAE")
  string(REGEX MATCH "${metric} *: ([-+0-9.e]+)" _ "${plain}")
  set(a "${CMAKE_MATCH_1}")
  string(REGEX MATCH "${metric} *: ([-+0-9.e]+)" _ "${packed}")
  set(b "${CMAKE_MATCH_1}")
  if(metric MATCHES "Virial" AND a STREQUAL "" AND b STREQUAL "")
    continue()  # a system without virial labels
  endif()
  if(a STREQUAL "" OR NOT a STREQUAL b)
    message(FATAL_ERROR "${metric}: uncompressed '${a}', compressed '${b}'")
  endif()
  message(STATUS "${metric}: ${a} (both)")
endforeach()
