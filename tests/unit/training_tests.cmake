# runtime/training/ unit tests: the safetensors format and checkpoint files on disk. They need no
# MPI and no runtime: the format's sources are compiled in directly.
set(_hvd_ckpt_sources
  ${PROJECT_SOURCE_DIR}/runtime/training/safetensors.cc
  ${PROJECT_SOURCE_DIR}/runtime/training/checkpoint_io.cc)

hvd_add_unit_test(test_safetensors test_safetensors.cc test_safetensors_files.cc ${_hvd_ckpt_sources})
target_include_directories(test_safetensors PRIVATE ${PROJECT_SOURCE_DIR}/include)

# Independent reader: a C++ program writes files, the Python safetensors package reads them
# (tests/unit/test_safetensors_reader.py). Skipped (exit 77) where python3, numpy or safetensors
# is missing; `python3 -m pip install safetensors numpy` provides them.
add_executable(test_safetensors_writer test_safetensors_writer.cc ${_hvd_ckpt_sources})
target_include_directories(test_safetensors_writer PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
hvd_set_warnings(test_safetensors_writer)
find_program(HVD_PYTHON3 NAMES python3 DOC "python3 for the independent safetensors reader test")
if(HVD_PYTHON3)
  add_test(NAME test_safetensors_python_reader
    COMMAND ${HVD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_safetensors_reader.py
            $<TARGET_FILE:test_safetensors_writer> ${CMAKE_CURRENT_BINARY_DIR}/safetensors_reader_out)
else()
  add_test(NAME test_safetensors_python_reader
    COMMAND sh -c "echo 'SKIP: python3 not found; install it (apt-get install python3) and run python3 -m pip install safetensors numpy'; exit 77")
endif()
set_tests_properties(test_safetensors_python_reader PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
