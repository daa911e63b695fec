# cmake -DSOURCE_DIR=<repository> -P check_trainers_step_through_parallel.cmake
# The trainers layer steps only through parallel (parallel::TrainingStep, ARCHITECTURE in docs/): no source of it
# includes comm's device collectives (tandem/comm/comm.h, or the comm aggregate header) or calls them. Process
# groups (tandem/comm/process_group.h: launch facts, the processes' exchanges, the read of the losses) stay allowed.
# The umbrella header tandem/tandem.h, which includes every layer for users, is the one exception.
set(collectives "scatter|scatter_all|gather|broadcast|broadcast_coalesced|reduce_add|reduce_add_coalesced")
string(APPEND collectives "|all_reduce|all_reduce_async|warm_up")
file(GLOB_RECURSE sources "${SOURCE_DIR}/trainers/*.h" "${SOURCE_DIR}/trainers/*.cpp")
set(failures "")
foreach(source ${sources})
  if(source MATCHES "/trainers/include/tandem/tandem\\.h$")
    continue()
  endif()
  file(STRINGS "${source}" lines)
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]tandem/comm(/comm)?\\.h[>\"]")
      string(APPEND failures "${source}:${number}: includes comm's collectives: ${line}\n")
    elseif(line MATCHES "comm::(${collectives})[ \t]*\\(" AND NOT line MATCHES "^[ \t]*//")
      string(APPEND failures "${source}:${number}: calls a comm collective: ${line}\n")
    endif()
  endforeach()
endforeach()
if(failures)
  message(FATAL_ERROR "trainers must step through parallel (parallel::TrainingStep), not comm:\n${failures}")
endif()
list(LENGTH sources count)
message(STATUS "${count} sources of trainers checked: none reaches comm's collectives")
