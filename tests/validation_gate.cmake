# Accuracy guard in one pass over the validation set: `trainsim validate` gates
# the overall MAPE and the largest |error| itself (--max-mape, --max-error);
# each GROUP=LIMIT in GROUP_MAX_MAPE also bounds that group's MAPE, read from
# the same run's JSON (mape_by_group_pct), instead of simulating the group again.
# usage: cmake -DTRAINSIM=... -DMAX_MAPE=P -DMAX_ERROR=P "-DGROUP_MAX_MAPE=group=P;..." [-DFIDELITY=flow]
#        -P validation_gate.cmake
foreach(var TRAINSIM MAX_MAPE MAX_ERROR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "usage: cmake -DTRAINSIM=... -DMAX_MAPE=P -DMAX_ERROR=P [-DGROUP_MAX_MAPE=group=P;...] -P "
                        "${CMAKE_CURRENT_LIST_FILE}")
  endif()
endforeach()

# PATHS (optional): validation scenario files or directories instead of the shipped set.
# FIDELITY (optional): the network fidelity (analytical when absent).
set(fidelity_args)
if(DEFINED FIDELITY)
  set(fidelity_args --fidelity ${FIDELITY})
endif()
execute_process(COMMAND "${TRAINSIM}" validate ${PATHS} ${fidelity_args} --max-mape ${MAX_MAPE} --max-error ${MAX_ERROR} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JSON mape ERROR_VARIABLE json_error GET "${out}" mape_pct)
if(json_error)
  message(FATAL_ERROR "trainsim validate exited with ${rc} and no JSON report: ${json_error}\n${err}")
endif()
string(JSON max_error GET "${out}" max_error_pct)
message(STATUS "validation set: MAPE ${mape}% (limit ${MAX_MAPE}%), largest |error| ${max_error}% (limit ${MAX_ERROR}%)")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainsim validate exited with ${rc}\n${err}")
endif()

foreach(entry IN LISTS GROUP_MAX_MAPE)
  if(NOT entry MATCHES "^([^=]+)=(.+)$")
    message(FATAL_ERROR "GROUP_MAX_MAPE entry \"${entry}\" is not group=limit")
  endif()
  set(group ${CMAKE_MATCH_1})
  set(limit ${CMAKE_MATCH_2})
  string(JSON group_mape ERROR_VARIABLE json_error GET "${out}" mape_by_group_pct ${group})
  if(json_error)
    message(FATAL_ERROR "no validation case of group ${group}: ${json_error}")
  endif()
  message(STATUS "group ${group}: MAPE ${group_mape}% (limit ${limit}%)")
  if(group_mape GREATER limit)
    message(FATAL_ERROR "group ${group}: MAPE ${group_mape}% exceeds ${limit}%")
  endif()
endforeach()
