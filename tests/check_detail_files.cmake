# Runs `dpk-train test -d PREFIX` and checks the detail files against dp test's layout
# (deepmd/infer/model_test/ener.py: np.savetxt with header "SYSTEM: columns") and full precision.
#   cmake -DDPK_TRAIN=<exe> -DMODEL=<model.dpk> -DSYSTEM=<water data_3> -DPREFIX=<dir/name.test> -P check_detail_files.cmake
# PREFIX ends in an extension, which dp test (Path.with_suffix) replaces: files are dir/name.e.out etc.
execute_process(COMMAND ${DPK_TRAIN} test -m ${MODEL} -s ${SYSTEM} -n 2 -d ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dpk-train test failed (${rc})")
endif()
string(REGEX REPLACE "\\.[^./]+$" "" base "${PREFIX}")
set(num "-?[0-9]\\.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]e[-+][0-9][0-9]")
# suffix | header columns | values per row | rows
foreach(spec
    ".e.out|data_e pred_e|2|2"
    ".e_peratom.out|data_e pred_e|2|2"
    ".f.out|data_fx data_fy data_fz pred_fx pred_fy pred_fz|6|384"
    ".v.out|data_vxx data_vxy data_vxz data_vyx data_vyy data_vyz data_vzx data_vzy data_vzz pred_vxx pred_vxy pred_vxz pred_vyx pred_vyy pred_vyz pred_vzx pred_vzy pred_vzz|18|2"
    ".v_peratom.out|data_vxx data_vxy data_vxz data_vyx data_vyy data_vyz data_vzx data_vzy data_vzz pred_vxx pred_vxy pred_vxz pred_vyx pred_vyy pred_vyz pred_vzx pred_vzy pred_vzz|18|2")
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 suffix)
  list(GET parts 1 columns)
  list(GET parts 2 nvalues)
  list(GET parts 3 nrows)
  set(file "${base}${suffix}")
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "missing detail file ${file}")
  endif()
  file(STRINGS "${file}" lines)
  list(LENGTH lines n)
  math(EXPR expect "${nrows} + 1")
  if(NOT n EQUAL expect)
    message(FATAL_ERROR "${file}: ${n} lines, expected a header and ${nrows} rows")
  endif()
  list(GET lines 0 header)
  if(NOT header STREQUAL "# ${SYSTEM}: ${columns}")
    message(FATAL_ERROR "${file}: header '${header}', expected '# ${SYSTEM}: ${columns}'")
  endif()
  set(row_regex "^${num}")
  foreach(i RANGE 2 ${nvalues})
    string(APPEND row_regex " ${num}")
  endforeach()
  string(APPEND row_regex "$")
  list(SUBLIST lines 1 -1 rows)
  foreach(row IN LISTS rows)
    if(NOT row MATCHES "${row_regex}")
      message(FATAL_ERROR "${file}: row '${row}' is not ${nvalues} values with 17 significant digits")
    endif()
  endforeach()
  set(rows_${suffix} ${rows})
endforeach()
# Reference columns: the stored float32 labels of data_3 as float64 in %.16e (numpy on the .npy files;
# the per-atom energy divided by 192 in float64).
list(GET rows_.e.out 0 e0)
list(GET rows_.e.out 1 e1)
list(GET rows_.e_peratom.out 0 ea0)
list(GET rows_.f.out 0 f0)
list(GET rows_.f.out 383 f383)
list(GET rows_.v.out 0 v0)
foreach(check
    "e0|^-2\\.9942814453125000e\\+04 "
    "e1|^-2\\.9943123046875000e\\+04 "
    "ea0|^-1\\.5595215861002603e\\+02 "
    "f0|^-7\\.3955368995666504e-01 -3\\.2290530204772949e-01 -6\\.5553426742553711e-01 "
    "f383|^-?[^ ]+ -?[^ ]+ 2\\.3717449605464935e-01 "
    "v0|^0\\.0000000000000000e\\+00 ")
  string(REPLACE "|" ";" parts "${check}")
  list(GET parts 0 var)
  list(GET parts 1 regex)
  if(NOT "${${var}}" MATCHES "${regex}")
    message(FATAL_ERROR "detail row ${var} = '${${var}}' does not match '${regex}'")
  endif()
endforeach()
message("detail files OK")
