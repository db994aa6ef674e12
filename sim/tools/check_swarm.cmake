# Runs verbsim-swarm over a command that fails for every seed divisible by 3 and checks that
# it says so, with a command line that reproduces each failure.
execute_process(
  COMMAND ${SWARM} --seeds 7 --jobs 2 --fault-probability 0.1 -- sh -c "test $((VERBSIM_SEED % 3)) -ne 0"
  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "verbsim-swarm exited ${rc}, expected 1")
endif()
foreach(needle "FAIL seed 3 " "FAIL seed 6 " "swarm: 7 seeds, 2 failed" "VERBSIM_SEED=3 VERBSIM_FAULTS='drop p=")
  string(FIND "${out}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "verbsim-swarm output lacks '${needle}'")
  endif()
endforeach()
