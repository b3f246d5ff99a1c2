# Runs one scenario file and fails unless `trainsim run` exits 0 with a
# feasible result and positive throughput.
# usage: cmake -DTRAINSIM=path/to/trainsim -DSCENARIO=file.json -P run_scenario_feasible.cmake
foreach(var TRAINSIM SCENARIO)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "usage: cmake -DTRAINSIM=... -DSCENARIO=... -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
endforeach()

execute_process(COMMAND "${TRAINSIM}" run "${SCENARIO}" --json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SCENARIO}: trainsim run exited with ${rc}\n${err}")
endif()
string(JSON feasible ERROR_VARIABLE json_error GET "${out}" feasible)
if(json_error)
  message(FATAL_ERROR "${SCENARIO}: the result is not the expected JSON: ${json_error}\n${out}")
endif()
if(NOT feasible STREQUAL "ON")
  message(FATAL_ERROR "${SCENARIO}: infeasible\n${err}")
endif()
# The workload's own throughput unit (tokens, epochs, samples; docs/workloads.md).
foreach(key "throughput;per_s" samples_per_s iteration_time_s)
  string(JSON value GET "${out}" ${key})
  if(NOT value GREATER 0)
    message(FATAL_ERROR "${SCENARIO}: ${key} is ${value}, expected > 0")
  endif()
endforeach()
string(JSON rate GET "${out}" throughput per_s)
string(JSON unit GET "${out}" throughput unit)
string(JSON iteration GET "${out}" iteration_time_s)
message(STATUS "${SCENARIO}: feasible, iteration ${iteration} s, ${rate} ${unit}/s")
