#!/usr/bin/env bash
# Runs scripts/gpu-check on this (GPU-less) development machine as a bare GPU machine would see it:
# in a private mount namespace where the system's Open MPI, PMIx, Boost, GTest and OpenBLAS are
# hidden (empty folders and /dev/null bound over them), so that the build and every mpirun must use
# the Debian packages carried in .deps/debs (docs/gpu.md). Nothing outside the namespace changes.
# Root only (unshare -m, mount --bind). Not a ctest test: it needs .deps/debs and a full build.
#
#   tests/gpu/gpu_check_without_system_deps.sh OUTDIR [gpu-check options...]
#   e.g. tests/gpu/gpu_check_without_system_deps.sh /tmp/gc-nodeps --python /tmp/gpuwheels/bin/python --jobs 2 --budget 1800 --build-timeout 1200
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 1 ]] || { sed -n '2,10p' "$0"; exit 2; }
[[ $(id -u) == 0 ]] || { echo "root only (unshare -m)" >&2; exit 2; }
ls .deps/debs/*.deb > /dev/null || { echo "no .deps/debs: make them as docs/gpu.md says" >&2; exit 2; }
out=$1; shift
exec unshare -m bash -s -- "$out" "$@" <<'EOF'
set -euo pipefail
mount --make-rprivate /
empty=$(mktemp -d)
A=/usr/lib/x86_64-linux-gnu
for d in $A/openmpi $A/pmix2 /usr/share/openmpi /etc/openmpi /usr/include/boost /usr/include/gtest \
         $A/cmake/GTest $A/openblas-pthread /usr/include/x86_64-linux-gnu/openblas-pthread $A/cmake/[Bb]oost*; do
  [[ -d $d ]] && mount --bind "$empty" "$d"
done
for f in /usr/bin/orterun /usr/bin/opal_wrapper $A/libmpi.so.40.* $A/libopen-rte.so.40.* $A/libopen-pal.so.40.* \
         $A/libpmix.so.2.* $A/libboost_program_options.so.1.74.0; do
  [[ -f $f ]] && mount --bind /dev/null "$f"
done
echo "hidden: system Open MPI, PMIx, Boost, GTest, OpenBLAS; mpirun on PATH: $(command -v mpirun || echo none)"
out=$1; shift
# A fixed prefix: the build folder's CMake cache remembers the paths of the first run.
exec scripts/gpu-check --no-gpu --force-debs --deps-prefix /tmp/hvd-deps-nodeps --build-dir build-gpu-check-nodeps "$@" "$out"
EOF
