# Finds the GPU stack for HVD_WITH_CUDA=AUTO|ON|OFF.
# AUTO: use CUDA (with NCCL and cuDNN) when all are found, otherwise warn and build without them.
# ON: fail with a hint when something is missing. OFF: never look.
# Sets HVD_HAVE_CUDA/NCCL/CUDNN (and *_01 for config.h), HVD_*_VERSION, and imported targets
# hvd::nccl and hvd::cudnn next to CUDA::cudart.
#
# Where NCCL and cuDNN are looked for (docs/gpu.md, "Building"):
#   HVD_NCCL_ROOT / HVD_CUDNN_ROOT (CMake or environment variables): a prefix with include/ and
#     lib/, e.g. pip's wheel layout <site-packages>/nvidia/nccl and .../nvidia/cudnn. When set, ONLY
#     that prefix is searched (a missing library there is an error, never a silent fallback).
#   otherwise the CUDA toolkit's folders, /usr, CMAKE_PREFIX_PATH; and when that finds nothing, the
#     pip packages nvidia-nccl-cu13 / nvidia-cudnn-cu13 of HVD_PYTHON (default: python3 on PATH).
#   HVD_CUBLAS_ROOT: a prefix with include/cublas_v2.h and lib/libcublas*, used for CUDA::cublas
#     when the toolkit has no cuBLAS (pip's nvidia-cublas: <site-packages>/nvidia/cu13).
# pip's wheels ship only the versioned files (libnccl.so.2, libcudnn.so.9, libcublas.so.13), no
# unversioned .so link: those names are searched too. Outside the toolkit's and the system's
# folders the libraries are linked by full path, so CMake puts their folders in the build tree's
# RUNPATH; libcudnn.so.9 loads its engine libraries from its own folder ($ORIGIN).
set(HVD_HAVE_CUDA OFF)
set(HVD_HAVE_NCCL OFF)
set(HVD_HAVE_CUDNN OFF)
set(HVD_CUDA_VERSION "")
set(HVD_NCCL_VERSION "")
set(HVD_CUDNN_VERSION "")

# The folder of a pip package's Python module (nvidia.nccl, nvidia.cudnn, nvidia.cu13), or "".
# These are namespace packages in recent wheels (no __init__.py: __file__ is None), so read
# __path__, which both kinds have.
function(_hvd_pip_module_dir module out)
  set(${out} "" PARENT_SCOPE)
  set(_py "${HVD_PYTHON}")
  if(NOT _py AND DEFINED ENV{HVD_PYTHON})
    set(_py "$ENV{HVD_PYTHON}")
  endif()
  if(NOT _py)
    find_program(_hvd_python3 NAMES python3)
    set(_py "${_hvd_python3}")
  endif()
  if(NOT _py)
    return()
  endif()
  execute_process(COMMAND "${_py}" -c "import ${module} as m; print(list(m.__path__)[0])"
    OUTPUT_VARIABLE _dir RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 60)
  if(_rc EQUAL 0 AND IS_DIRECTORY "${_dir}")
    set(${out} "${_dir}" PARENT_SCOPE)
  endif()
endfunction()

# Finds <lib> (names: e.g. "nccl;libnccl.so.2") and <header> into HVD_<KEY>_LIBRARY and
# HVD_<KEY>_INCLUDE_DIR. With HVD_<KEY>_ROOT set (cache or environment): there only. Otherwise the
# default places, then the pip module's folder.
function(_hvd_find_gpu_lib key names header pip_module)
  set(_root "${HVD_${key}_ROOT}")
  if(NOT _root AND DEFINED ENV{HVD_${key}_ROOT})
    set(_root "$ENV{HVD_${key}_ROOT}")
  endif()
  if(_root)
    # A root given after an earlier configure found the library elsewhere: look again.
    foreach(_v HVD_${key}_LIBRARY HVD_${key}_INCLUDE_DIR)
      string(FIND "${${_v}}" "${_root}" _at)
      if(${_v} AND NOT _at EQUAL 0)
        unset(${_v} CACHE)
      endif()
    endforeach()
    find_library(HVD_${key}_LIBRARY NAMES ${names} PATHS "${_root}" PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    find_path(HVD_${key}_INCLUDE_DIR ${header} PATHS "${_root}" PATH_SUFFIXES include NO_DEFAULT_PATH)
    set(HVD_${key}_SOURCE "HVD_${key}_ROOT=${_root}" PARENT_SCOPE)
    return()
  endif()
  find_library(HVD_${key}_LIBRARY NAMES ${names}
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  find_path(HVD_${key}_INCLUDE_DIR ${header}
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  set(HVD_${key}_SOURCE "system" PARENT_SCOPE)
  if((NOT HVD_${key}_LIBRARY OR NOT HVD_${key}_INCLUDE_DIR) AND pip_module)
    _hvd_pip_module_dir(${pip_module} _pip)
    if(_pip)
      unset(HVD_${key}_LIBRARY CACHE)
      unset(HVD_${key}_INCLUDE_DIR CACHE)
      find_library(HVD_${key}_LIBRARY NAMES ${names} PATHS "${_pip}" PATH_SUFFIXES lib NO_DEFAULT_PATH)
      find_path(HVD_${key}_INCLUDE_DIR ${header} PATHS "${_pip}" PATH_SUFFIXES include NO_DEFAULT_PATH)
      set(HVD_${key}_SOURCE "pip package ${pip_module} (${_pip})" PARENT_SCOPE)
    endif()
  endif()
endfunction()

if(NOT HVD_WITH_CUDA STREQUAL "OFF")
  set(HVD_NCCL_ROOT "" CACHE PATH "Prefix of NCCL (include/nccl.h, lib/libnccl.so*): searched alone when set")
  set(HVD_CUDNN_ROOT "" CACHE PATH "Prefix of cuDNN (include/cudnn.h, lib/libcudnn.so*): searched alone when set")
  set(HVD_CUBLAS_ROOT "" CACHE PATH "Prefix of cuBLAS, used when the CUDA toolkit has none (pip: nvidia/cu13)")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  find_package(CUDAToolkit QUIET)
  _hvd_find_gpu_lib(NCCL "nccl;libnccl.so.2" nccl.h nvidia.nccl)
  _hvd_find_gpu_lib(CUDNN "cudnn;libcudnn.so.9" cudnn.h nvidia.cudnn)
  # cuBLAS (train_cnn's GPU model): the toolkit's, else HVD_CUBLAS_ROOT, else pip's nvidia/cu13.
  if(CUDAToolkit_FOUND AND (HVD_CUBLAS_ROOT OR NOT TARGET CUDA::cublas))
    set(_cublas_root "${HVD_CUBLAS_ROOT}")
    if(NOT _cublas_root)
      _hvd_pip_module_dir(nvidia.cu13 _cublas_root)
    endif()
    if(_cublas_root)
      find_library(HVD_CUBLAS_LIBRARY NAMES cublas libcublas.so.13 PATHS "${_cublas_root}" PATH_SUFFIXES lib NO_DEFAULT_PATH)
      find_library(HVD_CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 PATHS "${_cublas_root}" PATH_SUFFIXES lib NO_DEFAULT_PATH)
      find_path(HVD_CUBLAS_INCLUDE_DIR cublas_v2.h PATHS "${_cublas_root}" PATH_SUFFIXES include NO_DEFAULT_PATH)
      if(HVD_CUBLAS_LIBRARY AND HVD_CUBLASLT_LIBRARY AND HVD_CUBLAS_INCLUDE_DIR)
        if(TARGET CUDA::cublas)
          set_target_properties(CUDA::cublas PROPERTIES IMPORTED_LOCATION ${HVD_CUBLAS_LIBRARY}
            INTERFACE_LINK_LIBRARIES "CUDA::cudart;${HVD_CUBLASLT_LIBRARY}")
          set_property(TARGET CUDA::cublas PROPERTY INTERFACE_INCLUDE_DIRECTORIES
            ${HVD_CUBLAS_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
          set_property(TARGET CUDA::cublas PROPERTY IMPORTED_NO_SYSTEM TRUE)
        else()
          add_library(CUDA::cublas UNKNOWN IMPORTED)
          set_target_properties(CUDA::cublas PROPERTIES IMPORTED_LOCATION ${HVD_CUBLAS_LIBRARY}
            INTERFACE_INCLUDE_DIRECTORIES ${HVD_CUBLAS_INCLUDE_DIR}
            INTERFACE_LINK_LIBRARIES "CUDA::cudart;${HVD_CUBLASLT_LIBRARY}")
        endif()
        message(STATUS "hvd: cuBLAS from ${_cublas_root}")
      endif()
    endif()
  endif()
  set(_missing "")
  if(NOT CUDAToolkit_FOUND)
    list(APPEND _missing "the CUDA toolkit (nvcc, cudart)")
  endif()
  if(NOT HVD_NCCL_LIBRARY OR NOT HVD_NCCL_INCLUDE_DIR)
    list(APPEND _missing "NCCL (libnccl, nccl.h; looked in: ${HVD_NCCL_SOURCE})")
  endif()
  if(NOT HVD_CUDNN_LIBRARY OR NOT HVD_CUDNN_INCLUDE_DIR)
    list(APPEND _missing "cuDNN (libcudnn, cudnn.h; looked in: ${HVD_CUDNN_SOURCE})")
  endif()
  if(_missing)
    if(HVD_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "HVD_WITH_CUDA=ON but missing: ${_missing}. Install them, or point "
        "HVD_NCCL_ROOT / HVD_CUDNN_ROOT at their prefixes (pip: <site-packages>/nvidia/nccl and "
        "/nvidia/cudnn) and CUDAToolkit_ROOT at the toolkit, or configure with -DHVD_WITH_CUDA=OFF.")
    else()
      message(WARNING "hvd: building without the GPU path; missing: ${_missing}")
    endif()
  else()
    set(HVD_HAVE_CUDA ON)
    set(HVD_HAVE_NCCL ON)
    set(HVD_HAVE_CUDNN ON)
    set(HVD_CUDA_VERSION "${CUDAToolkit_VERSION}")
    file(STRINGS ${HVD_NCCL_INCLUDE_DIR}/nccl.h _nccl_v REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3" HVD_NCCL_VERSION "${_nccl_v}")
    set(_cudnn_h ${HVD_CUDNN_INCLUDE_DIR}/cudnn_version.h)
    if(NOT EXISTS ${_cudnn_h})
      set(_cudnn_h ${HVD_CUDNN_INCLUDE_DIR}/cudnn.h)
    endif()
    file(STRINGS ${_cudnn_h} _cudnn_v REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1.\\2.\\3" HVD_CUDNN_VERSION "${_cudnn_v}")
    if(NOT TARGET hvd::nccl)
      # IMPORTED_NO_SYSTEM: their headers come as -I, which the compiler searches before every
      # -isystem folder, so a toolkit that carries its own nccl.h/cudnn.h (CUDA::cudart's include
      # folder) cannot shadow the ones of the library that is linked.
      add_library(hvd::nccl UNKNOWN IMPORTED)
      set_target_properties(hvd::nccl PROPERTIES IMPORTED_LOCATION ${HVD_NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${HVD_NCCL_INCLUDE_DIR} IMPORTED_NO_SYSTEM TRUE)
      add_library(hvd::cudnn UNKNOWN IMPORTED)
      set_target_properties(hvd::cudnn PROPERTIES IMPORTED_LOCATION ${HVD_CUDNN_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${HVD_CUDNN_INCLUDE_DIR} IMPORTED_NO_SYSTEM TRUE)
    endif()
    set(HVD_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING "CUDA architectures (default: sm_90 code and PTX)")
    set(CMAKE_CUDA_ARCHITECTURES ${HVD_CUDA_ARCHITECTURES})
    message(STATUS "hvd: GPU path on: CUDA ${HVD_CUDA_VERSION}, NCCL ${HVD_NCCL_VERSION} (${HVD_NCCL_LIBRARY}), "
      "cuDNN ${HVD_CUDNN_VERSION} (${HVD_CUDNN_LIBRARY})")
  endif()
endif()

foreach(_x CUDA NCCL CUDNN)
  if(HVD_HAVE_${_x})
    set(HVD_HAVE_${_x}_01 1)
  else()
    set(HVD_HAVE_${_x}_01 0)
  endif()
endforeach()

# hvd_enable_cuda(): enables CUDA in the calling directory (a macro: the flags below are directory
# variables). CMake 3.25 predates nvcc's C++20 support (CUDA 12+) and knows no flag for it;
# hvd/tensor.h needs C++20, as the rest of hvd, so the directory learns the flag when CMake does
# not know it.
macro(hvd_enable_cuda)
  enable_language(CUDA)
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
endmacro()

# hvd_add_cuda_kernels(target sources...): a static library of hvd's own kernels, linked into libhvd
# (call hvd_enable_cuda() in the directory first). No relocatable device code, so no device link
# step; sm_90 code and PTX by default (HVD_CUDA_ARCHITECTURES); C++20; hvd's include roots.
function(hvd_add_cuda_kernels target)
  add_library(${target} STATIC ${ARGN})
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES "${HVD_CUDA_ARCHITECTURES}"
    CUDA_STANDARD 20
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Shared
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${target} PUBLIC CUDA::cudart)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
