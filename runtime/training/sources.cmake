# runtime/training/: checkpointing (safetensors format, file I/O, the collective Checkpointer).
# Included from runtime/CMakeLists.txt.
target_sources(hvd PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_io.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpointer.cc)
