#!/usr/bin/env bash
# Installs Horovod 0.28.1 for hvd's side-by-side (scripts/horovod/README.md) on a Debian 12 machine
# (CPU only):
#   Debian's PyTorch 1.13.1 (python3-torch, CPU, for /usr/bin/python3 = Python 3.11.2)
#   Horovod 0.28.1 built from the PyPI sdist: PyTorch frontend, MPI controller, MPI CPU ops
#   (Gloo is built too, as Horovod always does when it can; it is not used under mpirun).
# Idempotent: skips what is already there. FORCE=1 rebuilds Horovod.
# Needs root (apt), the Debian archive and PyPI. Takes ~4 min on 2 cores (apt ~1 min, build ~3 min).
set -euo pipefail

PY=/usr/bin/python3            # Debian's python: python3-torch is installed for it, not for pyenv's
WORK=${WORK:-/tmp/anchor-horovod}
HVD_VERSION=0.28.1
HVD_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0   # horovod-0.28.1.tar.gz
mkdir -p "$WORK"

# 1. Debian packages: MPI (normally there already), torch + its headers, the build deps Horovod's
#    setup.py / CMake need with --no-build-isolation (pybind11-dev: torch's headers include
#    <pybind11/pybind11.h>, which Debian's libtorch-dev does not pull in).
PKGS="openmpi-bin libopenmpi-dev cmake g++ make python3-dev python3-pip python3-torch libtorch-dev
      pybind11-dev python3-cloudpickle python3-packaging python3-psutil python3-yaml python3-cffi"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get -o DPkg::Lock::Timeout=900 update
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends $missing
fi
"$PY" -c 'import torch; print("torch", torch.__version__)'

# 2. Horovod from the PyPI sdist.
have=$("$PY" -c 'import horovod, horovod.torch; print(horovod.__version__)' 2>/dev/null || true)
if [ "$have" = "$HVD_VERSION" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "horovod $have already installed"
else
  cd "$WORK"
  if [ ! -f "sdist/horovod-$HVD_VERSION.tar.gz" ]; then
    "$PY" -m pip download --no-deps --no-binary :all: --no-build-isolation \
        "horovod==$HVD_VERSION" -d sdist
  fi
  echo "$HVD_SHA256  sdist/horovod-$HVD_VERSION.tar.gz" | sha256sum -c -
  start=$(date +%s)
  env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
      HOROVOD_WITH_MPI=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS=-j2 \
      "$PY" -m pip install --no-build-isolation --no-cache-dir --break-system-packages \
      ${FORCE:+--force-reinstall --no-deps} "sdist/horovod-$HVD_VERSION.tar.gz"
  echo "horovod build+install took $(( $(date +%s) - start )) s"
fi

# 3. Checks: build flags, then a 2-rank allreduce.
horovodrun --check-build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo -np 2 \
  "$PY" -c '
import torch, horovod.torch as hvd
hvd.init()
t = torch.full((4,), float(hvd.rank() + 1))
r = hvd.allreduce(t, name="smoke", op=hvd.Sum)
exp = hvd.size() * (hvd.size() + 1) / 2
assert bool((r == exp).all()), (r, exp)
print(f"rank {hvd.rank()}/{hvd.size()}: allreduce sum {r.tolist()} OK (mpi_enabled {hvd.mpi_enabled()})")
hvd.shutdown()
'
