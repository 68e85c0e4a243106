#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each one for a while.
#
#   tests/fuzz/run_fuzz.sh                          # every target, 30 s each (a long run by hand)
#   tests/fuzz/run_fuzz.sh --seconds 600 hostlist safetensors
#   tests/fuzz/run_fuzz.sh --bin-dir DIR --seconds 10 hostlist   # prebuilt targets (what ctest runs)
#   tests/fuzz/run_fuzz.sh --make-seeds             # rewrite the binary seed corpora from the writers
#
# Options: --seconds N (per target, default 30), --build-dir DIR (default build-fuzz at the top of
# the repository), --bin-dir DIR (skip the build, take fuzz_<target> from DIR), --work-dir DIR
# (grown corpora and findings; default <build-dir>/work), --jobs N (build parallelism),
# --runs N (stop after N executions instead of a time; 0 just replays the corpus).
# Targets: hostlist task_counts hostfile host_spec safetensors config_values config_env requests
# responses api (default: all). api drives the public API on one rank (an MPI singleton: as root,
# set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1); it checks for leaks only with
# HVD_FUZZ_LEAKS=1 (7x slower). HVD_FUZZ_TRACE=1 makes it print each call (to read a saved input:
# BIN/fuzz_api WORK/api/crash-...).
#
# A finding (crash, sanitizer report, unexpected exception, failed property, leak, timeout, OOM)
# is saved as WORK/<target>/crash-* (or leak-, timeout-, oom-) and makes the script exit 1.
# Replay one with: BIN/fuzz_<target> WORK/<target>/crash-...
# Exit status: 0 no finding, 1 a finding, 2 usage or build error, 77 clang/libFuzzer unavailable.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
all_targets=(hostlist task_counts hostfile host_spec safetensors config_values config_env requests responses api)

seconds=30 build_dir=$root/build-fuzz bin_dir="" work_dir="" jobs="" runs="" make_seeds=0 targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --work-dir) work_dir=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "run_fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "run_fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

if [[ -z $bin_dir ]]; then
  cxx=${CXX_FUZZ:-$(command -v clang++ || true)}
  if [[ -z $cxx ]]; then
    echo "SKIPPED: clang++ not found (Debian: apt-get install clang)"; exit 77
  fi
  probe=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe/p.cc"
  if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
    echo "SKIPPED: $cxx cannot link -fsanitize=fuzzer,address,undefined: $(head -1 "$probe/err") (install libclang-rt-dev)"
    rm -rf "$probe"; exit 77
  fi
  rm -rf "$probe"
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S "$here" -B "$build_dir" "${gen[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= >/dev/null || exit 2
  cmake -DBIN="$build_dir" -DJOBS="$jobs" -P "$here/build_fuzzers.cmake" || exit 2
  bin_dir=$build_dir
  work_dir=${work_dir:-$build_dir/work}
fi
work_dir=${work_dir:-$bin_dir/work}

if ((make_seeds)); then
  [[ -x $bin_dir/make_seeds ]] || { echo "run_fuzz.sh: $bin_dir/make_seeds not built" >&2; exit 2; }
  ASAN_OPTIONS=detect_leaks=0 "$bin_dir/make_seeds" "$here/corpus" || exit 2
  echo "seed corpora rewritten under $here/corpus"
  exit 0
fi

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
status=0
for t in "${targets[@]}"; do
  exe=$bin_dir/fuzz_$t
  if [[ ! -x $exe && -f $bin_dir/fuzz_$t.failed ]]; then
    echo "run_fuzz.sh: fuzz_$t did not build with clang; the compiler said:" >&2
    grep -E 'error|FAILED' "$bin_dir/fuzz_$t.failed" | head -20 >&2
    exit 2
  fi
  if [[ ! -x $exe && -f $bin_dir/fuzz_$t.skipped ]]; then
    echo "SKIPPED: fuzz_$t: $(cat "$bin_dir/fuzz_$t.skipped")"
    ((${#targets[@]} == 1)) && exit 77
    continue
  fi
  if [[ ! -x $exe ]]; then
    echo "run_fuzz.sh: $exe is missing (build the fuzz targets first)" >&2; exit 2
  fi
  mkdir -p "$work_dir/$t/corpus"
  log=$work_dir/$t/last.log
  limit=(-max_total_time="$seconds")
  [[ -n $runs ]] && limit=(-runs="$runs")
  start=$(date +%s)
  # Grown corpus first (libFuzzer adds new inputs there), then the seeds (read only).
  env=()
  # fuzz_api runs the runtime over MPI. Open MPI keeps allocations until exit that LeakSanitizer
  # reports; they are suppressed (tests/sanitizers/lsan.supp) only when the slow unwinder sees
  # Open MPI's frames, which costs 7x in speed. So by default fuzz_api looks for crashes, hangs,
  # sanitizer reports and wrong errors, and HVD_FUZZ_LEAKS=1 adds leak checks at that cost.
  if [[ $t == api ]]; then
    if [[ ${HVD_FUZZ_LEAKS:-0} == 1 ]]; then
      env=(LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0}"
           ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0")
    else
      env=(ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0")
    fi
  fi
  env "${env[@]}" "$exe" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$work_dir/$t/" "$work_dir/$t/corpus" "$here/corpus/$t" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$work_dir/$t/corpus" -type f | wc -l)
  if ((rc == 0)); then
    printf 'fuzz_%-14s %10s executions in %3d s, corpus %5d inputs, no findings\n' "$t" "${execs:-?}" "$secs" "$corpus"
  else
    status=1
    printf 'fuzz_%-14s FINDING (exit %d) after %s executions; log below, input saved in %s\n' \
      "$t" "$rc" "${execs:-?}" "$work_dir/$t/"
    # The report from its first line (sanitizer, property or exception), then where the input went.
    awk '/runtime error|ERROR:|hvd fuzz finding|uncaught|terminate called/{p=1} p' "$log" | grep -v '^ *#[0-9]* 0x.* in fuzzer::' | head -60
    grep -E 'Test unit written|^Base64' "$log" | tail -2
  fi
done
exit $status
