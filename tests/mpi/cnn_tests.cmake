# train_cnn end to end under mpirun (included by tests/mpi/CMakeLists.txt), label mpi. The script
# tests/mpi/test_train_cnn.sh says what each mode proves.
#   train_cnn.same_loss.np2   1 rank x 64 == 2 ranks x 32: 20 steps of losses and the weights, 1e-4
#   train_cnn.same_loss.np3   1 rank x 21 == 3 ranks x 7 (odd counts), 8 steps
#   train_cnn.resume.np2      SIGKILL after the first epoch's checkpoint, --resume: bitwise the
#                             weights of an uninterrupted run (also resuming inside an epoch)
#   train_cnn.errors.np2      bad flags, missing data, impossible settings: fast non-zero exit and
#                             a clear line from every rank
#   train_cnn.default_lr.np8  8 ranks, default flags, 117 steps: the loss stays finite and falls
#                             (issue 9.1: the scaled rate without warm-up diverged); the script is
#                             tests/mpi/test_train_cnn_lr.sh
if(NOT TARGET train_cnn)
  return()
endif()

add_executable(test_train_cnn_compare ${CMAKE_CURRENT_SOURCE_DIR}/test_train_cnn_compare.cc)
hvd_set_warnings(test_train_cnn_compare)

set(_cnn_script ${CMAKE_CURRENT_SOURCE_DIR}/test_train_cnn.sh)
set(_cnn_dir ${CMAKE_CURRENT_BINARY_DIR}/train_cnn)
function(_hvd_train_cnn_test name mode np timeout)
  add_test(NAME ${name}
    COMMAND bash ${_cnn_script} ${mode} $<TARGET_FILE:train_cnn> $<TARGET_FILE:test_train_cnn_compare>
            ${_cnn_dir}/${name} ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT ${timeout} PROCESSORS ${np}
    ENVIRONMENT "${HVD_TEST_ROOT_ENV};${ARGN}")
endfunction()

_hvd_train_cnn_test(train_cnn.same_loss.np2 same-loss 2 120 TRAIN_CNN_NP=2 TRAIN_CNN_BATCH=32 TRAIN_CNN_STEPS=20)
_hvd_train_cnn_test(train_cnn.same_loss.np3 same-loss 3 120 TRAIN_CNN_NP=3 TRAIN_CNN_BATCH=7 TRAIN_CNN_STEPS=8)
_hvd_train_cnn_test(train_cnn.resume.np2 resume 2 180)
_hvd_train_cnn_test(train_cnn.errors.np2 errors 2 180)

# The default learning-rate schedule on 8 ranks (linear scaling, capped, with the automatic
# warm-up): the whole first epoch, 117 steps, i.e. the ramp up to the peak rate 0.4; 40-110 s on
# the shared 2-core VM. Skipped (77) without Fashion-MNIST.
add_test(NAME train_cnn.default_lr.np8
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_cnn_lr.sh $<TARGET_FILE:train_cnn>
          ${_cnn_dir}/train_cnn.default_lr.np8 ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS})
set_tests_properties(train_cnn.default_lr.np8 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 8 SKIP_RETURN_CODE 77
  ENVIRONMENT "${HVD_TEST_ROOT_ENV};TRAIN_CNN_NP=8;TRAIN_CNN_STEPS=117")
