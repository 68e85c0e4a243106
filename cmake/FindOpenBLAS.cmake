# FindOpenBLAS: OpenBLAS's CBLAS interface (cblas.h and libopenblas) as the imported target
# OpenBLAS::OpenBLAS (global: train_cnn_model links it PUBLIC, and tests in other folders link
# train_cnn_model). pkg-config's `openblas` module is a hint when there is one (Debian:
# libopenblas-dev); otherwise the usual search paths, CMAKE_PREFIX_PATH or OpenBLAS_ROOT (e.g. an
# environment module's install). Sets OpenBLAS_FOUND, OpenBLAS_LIBRARY, OpenBLAS_INCLUDE_DIR.
# -DCMAKE_DISABLE_FIND_PACKAGE_OpenBLAS=ON makes it absent (the packaging tests use that).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_OpenBLAS QUIET openblas)
endif()
find_library(OpenBLAS_LIBRARY NAMES openblas HINTS ${PC_OpenBLAS_LIBRARY_DIRS}
  DOC "libopenblas (Debian: libopenblas-dev)")
find_path(OpenBLAS_INCLUDE_DIR cblas.h HINTS ${PC_OpenBLAS_INCLUDE_DIRS} PATH_SUFFIXES openblas
  DOC "the folder of OpenBLAS's cblas.h (Debian: libopenblas-dev)")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR
  VERSION_VAR PC_OpenBLAS_VERSION)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS INTERFACE IMPORTED GLOBAL)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    INTERFACE_LINK_LIBRARIES "${OpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
mark_as_advanced(OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR)
