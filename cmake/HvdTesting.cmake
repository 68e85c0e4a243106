# Test helpers.
#   hvd_add_unit_test(NAME SOURCES... [LIBS ...])       gtest binary, no MPI, label unit
#   hvd_add_mpi_test(NAME SOURCES... [NP 1 2 3 4] [LIBS ...] [TIMEOUT s] [ENV K=V...])
#       one gtest binary run by ctest under mpirun once per rank count (tests NAME.npN), label mpi.
#       Every rank runs the test body and checks its own values; a failure on any rank makes that
#       rank exit non-zero, and mpirun with it.
find_package(GTest REQUIRED)

set(HVD_MPIEXEC ${MPIEXEC_EXECUTABLE})
set(HVD_MPIEXEC_FLAGS --oversubscribe --bind-to none)
execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_uid STREQUAL "0")
  set(HVD_TEST_ROOT_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
else()
  set(HVD_TEST_ROOT_ENV "")
endif()

function(hvd_add_unit_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "LIBS" ${ARGN})
  add_executable(${name} ${A_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main ${A_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  hvd_set_warnings(${name})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${A_TIMEOUT})
endfunction()

function(hvd_add_mpi_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "NP;LIBS;ENV" ${ARGN})
  add_executable(${name} ${A_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE hvd GTest::gtest MPI::MPI_C ${A_LIBS})
  target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/mpi/mpi_test_main.cc)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  hvd_set_warnings(${name})
  if(NOT A_NP)
    set(A_NP 1 2 3 4)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  foreach(np ${A_NP})
    add_test(NAME ${name}.np${np}
      COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np ${np} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}.np${np} PROPERTIES LABELS mpi TIMEOUT ${A_TIMEOUT}
      PROCESSORS ${np} ENVIRONMENT "${HVD_TEST_ROOT_ENV};${A_ENV}")
  endforeach()
endfunction()
