# Builds the clang fuzz project (the ExternalProject of tests/fuzz/CMakeLists.txt):
#   cmake -DBIN=<its build dir> [-DJOBS=N] -P build_fuzzers.cmake
# The parser targets must build (a failure fails the build). fuzz_api compiles the whole runtime
# with clang: if that fails, the build goes on with a warning, fuzz_api is removed and
# fuzz_api.failed holds the compiler's output, which run_fuzz.sh reports as the fuzz.api test's
# failure.
set(_jobs)
if(JOBS)
  set(_jobs -j ${JOBS})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target parser_fuzzers ${_jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz targets failed")
endif()
file(REMOVE ${BIN}/fuzz_api.failed)
if(EXISTS ${BIN}/fuzz_api.skipped)
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} --target fuzz_api ${_jobs}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  file(REMOVE ${BIN}/fuzz_api)
  file(WRITE ${BIN}/fuzz_api.failed "${out}")
  message(WARNING "fuzz_api did not build with clang (the fuzz.api test fails; ${BIN}/fuzz_api.failed):\n${out}")
endif()
