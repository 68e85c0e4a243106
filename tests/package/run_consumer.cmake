# Installs hvd into a fresh prefix, builds the consumer project against it and runs it on 3 ranks.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${HVD_BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# A sanitizer build of hvd needs the consumer built with the same sanitizer (its runtime first).
set(san_flags "")
if(SANITIZE)
  set(san_flags -DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE})
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
    ${san_flags})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${MPIEXEC} --oversubscribe --bind-to none -np 3 ${WORK_DIR}/build/consumer)
