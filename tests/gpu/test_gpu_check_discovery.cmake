# gpu_check.discovery (label unit): how cmake/HvdCuda.cmake finds NCCL and cuDNN in pip's wheel
# layout, as scripts/gpu-check uses it on the GPU machine (docs/gpu.md). No GPU, no CUDA build:
# a fake <site-packages>/nvidia/{nccl,cudnn} (headers with version lines, and only the versioned
# libnccl.so.2 / libcudnn.so.9, no unversioned link, as the wheels ship them) and small CMake
# projects that include HvdCuda.cmake and print what it found. Checks:
#   1. HVD_NCCL_ROOT / HVD_CUDNN_ROOT: the versioned files under those roots are found and the
#      versions read, even where the CUDA toolkit has its own NCCL/cuDNN (roots are searched alone);
#   2. the same through the environment variables of the same names;
#   3. a root that lacks the library fails HVD_WITH_CUDA=ON with a message naming the root;
#   4. without roots, when the system has no NCCL/cuDNN: the pip packages of HVD_PYTHON (namespace
#      packages: nvidia.nccl has no __file__) are found (skipped where the system has NCCL/cuDNN);
#   5. scripts/gpu-check --help prints its usage.
#
# Registered by tests/gpu/CMakeLists.txt; ctest runs this file as `cmake -P`.
# ---- the test (script mode) -------------------------------------------------------------------------
foreach(v SRC WORK)
  if(NOT ${v})
    message(FATAL_ERROR "gpu_check.discovery: -D${v}=... missing")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
set(site_path ${WORK}/site-packages)
# The fake wheels: nvidia/ and nvidia/nccl/ without __init__.py (namespace packages, as installed).
file(WRITE ${site_path}/nvidia/nccl/include/nccl.h "#define NCCL_MAJOR 2\n#define NCCL_MINOR 99\n#define NCCL_PATCH 7\n")
file(WRITE ${site_path}/nvidia/nccl/lib/libnccl.so.2 "not a real library\n")
file(WRITE ${site_path}/nvidia/cudnn/include/cudnn.h "#include \"cudnn_version.h\"\n")
file(WRITE ${site_path}/nvidia/cudnn/include/cudnn_version.h
  "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 99\n#define CUDNN_PATCHLEVEL 3\n")
file(WRITE ${site_path}/nvidia/cudnn/lib/libcudnn.so.9 "not a real library\n")
file(MAKE_DIRECTORY ${WORK}/empty-root/include ${WORK}/empty-root/lib)
# The paths as regular expressions (a build folder may hold '+' or '.').
string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" site "${site_path}")
string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" work_re "${WORK}")

# A project that includes HvdCuda.cmake (no language: nothing is compiled) and prints the results.
file(WRITE ${WORK}/project/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.25)
project(gpu_check_discovery LANGUAGES NONE)
list(APPEND CMAKE_MODULE_PATH ${HVD_SRC}/cmake)
include(HvdCuda)
message(STATUS "RESULT NCCL_LIBRARY=${HVD_NCCL_LIBRARY}")
message(STATUS "RESULT NCCL_INCLUDE_DIR=${HVD_NCCL_INCLUDE_DIR}")
message(STATUS "RESULT CUDNN_LIBRARY=${HVD_CUDNN_LIBRARY}")
message(STATUS "RESULT CUDNN_INCLUDE_DIR=${HVD_CUDNN_INCLUDE_DIR}")
message(STATUS "RESULT HAVE_CUDA=${HVD_HAVE_CUDA} NCCL_VERSION=${HVD_NCCL_VERSION} CUDNN_VERSION=${HVD_CUDNN_VERSION}")
]=])

set(failures 0)
function(expect_match what text regex)
  string(REGEX REPLACE "[ \t\r\n]+" " " text "${text}")  # CMake wraps long messages
  if(NOT text MATCHES "${regex}")
    message(SEND_ERROR "gpu_check.discovery: ${what}: expected to match '${regex}', got:\n${text}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message(STATUS "ok: ${what}")
  endif()
endfunction()

# configure(NAME OUT_VAR RC_VAR "K=V;K2=V2" cmake-args...): the project configured with those
# environment variables set (an empty string for none).
function(configure name out rc_var env)
  file(REMOVE_RECURSE ${WORK}/build-${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=HVD_NCCL_ROOT --unset=HVD_CUDNN_ROOT
                          --unset=HVD_CUBLAS_ROOT --unset=HVD_PYTHON ${env} ${CMAKE_COMMAND} -S ${WORK}/project -B ${WORK}/build-${name}
                          -DHVD_SRC=${SRC} ${ARGN}
    OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc TIMEOUT 120)
  set(${out} "${o}${e}" PARENT_SCOPE)
  set(${rc_var} ${rc} PARENT_SCOPE)
endfunction()

# 1. Roots as CMake variables (AUTO: a missing toolkit only turns the GPU path off).
configure(roots out rc "" -DHVD_WITH_CUDA=AUTO -DHVD_NCCL_ROOT=${site_path}/nvidia/nccl -DHVD_CUDNN_ROOT=${site_path}/nvidia/cudnn)
expect_match("roots: configure succeeds" "${rc}" "^0$")
expect_match("roots: libnccl.so.2 under HVD_NCCL_ROOT" "${out}" "RESULT NCCL_LIBRARY=${site}/nvidia/nccl/lib/libnccl\\.so\\.2")
expect_match("roots: nccl.h under HVD_NCCL_ROOT" "${out}" "RESULT NCCL_INCLUDE_DIR=${site}/nvidia/nccl/include")
expect_match("roots: libcudnn.so.9 under HVD_CUDNN_ROOT" "${out}" "RESULT CUDNN_LIBRARY=${site}/nvidia/cudnn/lib/libcudnn\\.so\\.9")
if(out MATCHES "RESULT HAVE_CUDA=ON")
  expect_match("roots: versions read from the pip headers" "${out}" "NCCL_VERSION=2\\.99\\.7 CUDNN_VERSION=9\\.99\\.3")
endif()

# 2. The same roots through the environment.
configure(env out rc "HVD_NCCL_ROOT=${site_path}/nvidia/nccl;HVD_CUDNN_ROOT=${site_path}/nvidia/cudnn" -DHVD_WITH_CUDA=AUTO)
expect_match("env roots: libnccl.so.2" "${out}" "RESULT NCCL_LIBRARY=${site}/nvidia/nccl/lib/libnccl\\.so\\.2")
expect_match("env roots: libcudnn.so.9" "${out}" "RESULT CUDNN_LIBRARY=${site}/nvidia/cudnn/lib/libcudnn\\.so\\.9")

# 3. A root without the library: HVD_WITH_CUDA=ON fails and names the root.
configure(bad out rc "" -DHVD_WITH_CUDA=ON -DHVD_NCCL_ROOT=${WORK}/empty-root -DHVD_CUDNN_ROOT=${site_path}/nvidia/cudnn)
expect_match("bad root: configure fails" "${rc}" "^[1-9]")
expect_match("bad root: the message names HVD_NCCL_ROOT" "${out}" "NCCL \\(libnccl, nccl\\.h; looked in: HVD_NCCL_ROOT=${work_re}/empty-root\\)")

# 4. No roots: the system's NCCL/cuDNN if any, else the pip packages of HVD_PYTHON.
if(PYTHON)
  configure(pip out rc "PYTHONPATH=${site_path}" -DHVD_WITH_CUDA=AUTO -DHVD_PYTHON=${PYTHON})
  if(out MATCHES "RESULT NCCL_LIBRARY=[^\n]*-NOTFOUND" OR out MATCHES "RESULT NCCL_LIBRARY=${site}")
    expect_match("pip fallback: libnccl.so.2 from HVD_PYTHON's nvidia.nccl" "${out}"
      "RESULT NCCL_LIBRARY=${site}/nvidia/nccl/lib/libnccl\\.so\\.2")
  else()
    message(STATUS "skipped: pip fallback (this system has its own NCCL)")
  endif()
else()
  message(STATUS "skipped: pip fallback (no python3)")
endif()

# 5. The script's usage.
execute_process(COMMAND bash ${SRC}/scripts/gpu-check --help OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
expect_match("scripts/gpu-check --help" "${o}${e}" "scripts/gpu-check \\[options\\] OUTDIR")

if(failures GREATER 0)
  message(FATAL_ERROR "gpu_check.discovery: ${failures} check(s) failed")
endif()
message(STATUS "gpu_check.discovery: all checks passed")
