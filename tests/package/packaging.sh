#!/usr/bin/env bash
# The packaging tests (label packaging; tests/package/CMakeLists.txt): hvd built with its core
# prerequisites only, installed into a temporary prefix, and used from outside as a user would.
#   packaging.sh core-install SRC WORK GENERATOR [CMAKE_ARGS...]
#       a plain configure of SRC with GoogleTest, Boost, OpenBLAS, zlib and LibTorch made absent
#       (CMAKE_DISABLE_FIND_PACKAGE_*) and CUDA off, a Release build of everything that leaves
#       (the library hvd), and cmake --install --prefix WORK/prefix; checks what was installed
#   packaging.sh find-package WORK GENERATOR MPIEXEC
#       tests/package/consumer (find_package(hvd) + hvd::hvd) built against WORK/prefix, run on
#       2 ranks
#   packaging.sh pkg-config WORK MPIEXEC
#       the same program built by the one-line tests/package/pkg_config/Makefile with
#       `pkg-config --cflags --libs hvd` (PKG_CONFIG_PATH into WORK/prefix), run on 2 ranks
#   packaging.sh clean WORK
# core-install is the setup of the other two (a CTest fixture), clean its cleanup.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
step=$1
shift
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fail() {
  echo "packaging: FAILED: $*" >&2
  exit 1
}
run_mpi() {  # MPIEXEC PROGRAM: runs it on 2 ranks, which must print "consumer: 2 ranks OK"
  local out
  out=$("$1" --oversubscribe --bind-to none -np 2 "$2" 2>&1) || { echo "$out"; fail "mpirun $2"; }
  echo "$out"
  grep -q '^consumer: 2 ranks OK' <<< "$out" || fail "$2 did not print 'consumer: 2 ranks OK'"
  echo "packaging: OK"
}

case $step in
  core-install)
    src=$1 work=$2 gen=$3
    shift 3
    rm -rf "$work"
    mkdir -p "$work"
    start=$(date +%s)
    cmake -S "$src" -B "$work/build" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DHVD_WITH_CUDA=OFF \
      -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON \
      -DCMAKE_DISABLE_FIND_PACKAGE_OpenBLAS=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON \
      -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON "$@" > "$work/configure.log" 2>&1 ||
      { cat "$work/configure.log"; fail "configure with the core prerequisites only"; }
    grep '^-- hvd:' "$work/configure.log" || true
    for part in "the tests are not built" "the examples are not built" "hvdrun is not built"; do
      grep -q "$part" "$work/configure.log" || fail "configure did not say '$part'"
    done
    cmake --build "$work/build" -j2 > "$work/build.log" 2>&1 ||
      { tail -n 40 "$work/build.log"; fail "build"; }
    cmake --install "$work/build" --prefix "$work/prefix" > "$work/install.log" 2>&1 ||
      { cat "$work/install.log"; fail "install"; }
    echo "packaging: configured, built and installed in $(($(date +%s) - start)) s"
    lib=$(find "$work/prefix" -name 'libhvd.so' | head -n 1)
    [[ -n $lib ]] || fail "no libhvd.so under $work/prefix"
    for f in include/hvd/hvd.h include/hvd/version.h include/hvd/config.h; do
      [[ -f $work/prefix/$f ]] || fail "$f is not installed"
    done
    [[ -n $(find "$work/prefix" -path '*/cmake/hvd/hvdConfig.cmake') ]] || fail "no hvdConfig.cmake"
    [[ -n $(find "$work/prefix" -path '*/pkgconfig/hvd.pc') ]] || fail "no hvd.pc"
    [[ ! -e $work/prefix/bin/hvdrun ]] || fail "hvdrun was built without Boost"
    # What libhvd needs at run time: MPI, never a part that was made absent.
    needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $NF}' | tr -d '[]' | tr '\n' ' ')
    echo "packaging: libhvd.so needs $needed"
    [[ $needed == *libmpi* ]] || fail "libhvd.so does not link MPI"
    if grep -Eq 'boost|openblas|torch|gtest|libz\.' <<< "$needed"; then
      fail "libhvd.so links an optional part"
    fi
    echo "packaging: core install OK ($work/prefix)"
    ;;
  find-package)
    work=$1 gen=$2 mpiexec=$3
    rm -rf "$work/find_package"
    cmake -S "$here/consumer" -B "$work/find_package" -G "$gen" \
      -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/find_package.log" 2>&1 ||
      { cat "$work/find_package.log"; fail "configure of the find_package(hvd) consumer"; }
    cmake --build "$work/find_package" >> "$work/find_package.log" 2>&1 ||
      { cat "$work/find_package.log"; fail "build of the find_package(hvd) consumer"; }
    run_mpi "$mpiexec" "$work/find_package/consumer"
    ;;
  pkg-config)
    work=$1 mpiexec=$2
    for tool in make pkg-config; do
      command -v "$tool" > /dev/null || { echo "SKIPPED: $tool not found"; exit 77; }
    done
    dir=$work/pkg_config
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$here/pkg_config/Makefile" "$here/consumer/main.cc" "$dir/"
    pc=$(dirname "$(find "$work/prefix" -path '*/pkgconfig/hvd.pc' | head -n 1)")
    export PKG_CONFIG_PATH=$pc
    echo "packaging: pkg-config --cflags --libs hvd: $(pkg-config --cflags --libs hvd)"
    [[ $(pkg-config --variable=prefix hvd) == "$work/prefix" ]] ||
      fail "hvd.pc names prefix $(pkg-config --variable=prefix hvd), not $work/prefix"
    make -C "$dir" || fail "make with the one-line Makefile"
    run_mpi "$mpiexec" "$dir/consumer"
    ;;
  clean)
    rm -rf "$1"
    ;;
  *)
    fail "unknown step '$step'"
    ;;
esac
