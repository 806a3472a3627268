# Rules that keep the library small and plain, checked on src/tower by CTest:
#   cmake -DSRC=<repo>/src/tower -P source_rules_test.cmake
# - The library reads no TOWER_* environment variable: switches are options (ProgramOptions, ...)
#   that the CLI sets from its flags (and, for a few, from variables of its own).
# - No source file over 600 lines. The files still over it are listed here with their size at the
#   time; they may shrink but not grow, and the list may only get shorter (issue: the runtime
#   split).
cmake_minimum_required(VERSION 3.25)
set(max_lines 600)
set(known_long "train/trainer.cc:760")

file(GLOB_RECURSE files ${SRC}/*.h ${SRC}/*.cc ${SRC}/*.cu ${SRC}/*.cuh)
set(errors "")
foreach(file ${files})
  file(RELATIVE_PATH rel ${SRC} ${file})
  file(STRINGS ${file} env_reads REGEX "getenv\\(\"TOWER_")
  if(env_reads)
    string(APPEND errors "  ${rel} reads a TOWER_* environment variable: ${env_reads}\n")
  endif()
  file(STRINGS ${file} lines)
  list(LENGTH lines n)
  set(limit ${max_lines})
  foreach(entry ${known_long})
    string(REPLACE ":" ";" pair ${entry})
    list(GET pair 0 name)
    if(name STREQUAL rel)
      list(GET pair 1 limit)
    endif()
  endforeach()
  if(n GREATER limit)
    string(APPEND errors "  ${rel} has ${n} lines (at most ${limit})\n")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "source rules broken:\n${errors}")
endif()
list(LENGTH files count)
message(STATUS "source rules hold in ${count} files")
