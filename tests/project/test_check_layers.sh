#!/usr/bin/env bash
# scripts/check-layers catches a wrong include: a tree whose ops/ includes runtime/ and whose
# common/ includes comm/ fails with both named; the same tree with allowed includes passes.
set -euo pipefail
script=$(cd "$(dirname "$0")/../.." && pwd)/scripts/check-layers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{ops,common,comm,runtime,training}
echo '#include "common/logging.h"' > "$tmp/ops/good.cc"
echo '#include "ops/collective_op.h"' > "$tmp/runtime/good.cc"
echo '#include "hvd/tensor.h"' > "$tmp/training/good.cc"
"$script" --root "$tmp" || { echo "FAIL: an allowed tree was refused"; exit 1; }
echo '#include "runtime/runtime.h"' > "$tmp/ops/bad.cc"
printf '// x\n#include "comm/mpi_context.h"\n' > "$tmp/common/bad.h"
if out=$("$script" --root "$tmp" 2>&1); then
  echo "FAIL: wrong includes passed"; exit 1
fi
grep -q 'ops/bad.cc:1: layer .ops. includes "runtime/runtime.h"' <<<"$out" || { echo "FAIL: $out"; exit 1; }
grep -q 'common/bad.h:2: layer .common. includes "comm/mpi_context.h"' <<<"$out" || { echo "FAIL: $out"; exit 1; }
[[ $("$script" --root "$tmp" --count) == 2 ]] || { echo "FAIL: count"; exit 1; }
echo "check-layers: wrong includes named, allowed ones pass"
