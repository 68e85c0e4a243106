# The train_cnn test scripts' shared start. A script reads its own arguments into `train_cnn` (the
# binary), `workdir` and `mpiexec` (the launcher and its flags, an array), then sources this file:
#   source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
# It gives:
#   data_dir     TRAIN_CNN_DATA_DIR, default /usr/share/datasets/fashion-mnist
#   device       TRAIN_CNN_DEVICE, default cpu; with cuda and no visible NVIDIA GPU the script
#                prints SKIPPED and exits 77 (ctest: skipped)
#   data         train_cnn's data flags: Fashion-MNIST when installed, else a synthetic set of
#                2048 images (said on one line); have_fashion_mnist tells which
#   fail MSG     prints "FAIL: MSG" and exits 1
#   mpi NP ARGS  train_cnn on NP ranks through the launcher, with the flags of `mpi_args` (an
#                array a script may set, e.g. (--device "$device")) before ARGS
# and leaves the script in a fresh, empty $workdir.
data_dir=${TRAIN_CNN_DATA_DIR:-/usr/share/datasets/fashion-mnist}
device=${TRAIN_CNN_DEVICE:-cpu}
mpi_args=()

fail() {
  echo "FAIL: $*"
  exit 1
}

have_fashion_mnist() {
  [[ -e $data_dir/train-images-idx3-ubyte.gz || -e $data_dir/train-images-idx3-ubyte ]]
}

mpi() {  # mpi NP ARGS...: train_cnn on NP ranks
  local n=$1
  shift
  "${mpiexec[@]}" -np "$n" "$train_cnn" "${mpi_args[@]}" "$@"
}

if [[ $device == cuda ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIPPED: TRAIN_CNN_DEVICE=cuda but no NVIDIA GPU is visible (nvidia-smi -L lists none)"
  exit 77
fi

if have_fashion_mnist; then
  data=(--data-dir "$data_dir")
  echo "data: Fashion-MNIST from $data_dir"
else
  data=(--synthetic --synthetic-size 2048)
  echo "data: synthetic ($data_dir has no Fashion-MNIST)"
fi

rm -rf "$workdir"
mkdir -p "$workdir"
cd "$workdir" || exit 1
