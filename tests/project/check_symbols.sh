#!/usr/bin/env bash
# tests/project/check_symbols.sh LIBRARY...: what hvd's shared libraries take from, and give to, the
# process's other libraries (docs/libtorch.md, "pip's LibTorch and std::filesystem").
#
# 1. No std::filesystem imported. In a process that loads pip's LibTorch 2.x, the dynamic linker
#    binds such a call to the copy libtorch.so exports (pytorch/pytorch#133437), whose remove_all
#    jumps to address 0 (torch 2.11.0, reproduced on this project's machine and seen on an H200).
#    hvd makes and lists directories with POSIX calls instead (training/checkpoint_io.cc).
# 2. No libstdc++ code exported. A toolchain that links libstdc++ statically (the H200 machine's)
#    would otherwise hand its copy of std::thread and the rest to every library of the process;
#    CMake keeps it private (hvd_keep_runtime_private, --exclude-libs).
#
#   tests/project/check_symbols.sh build/libhvd.so build/torch/libhvd_torch.so
#   tests/project/check_symbols.sh --self-test    # the checks catch a library that breaks them
#
# Exit status: 0 clean, 1 a library breaks a rule (each named with its symbols), 2 bad usage or a
# missing tool, 77 nm or c++filt is not installed (ctest: skipped).
set -uo pipefail

for tool in nm c++filt; do
  command -v "$tool" > /dev/null || { echo "SKIPPED: $tool not found (apt-get install binutils)"; exit 77; }
done

# check LIBRARY: prints what breaks the rules; returns 1 when something does.
check() {
  local lib=$1 bad=0 imports exports
  if [[ ! -f $lib ]]; then
    echo "check_symbols: $lib does not exist: build it first" >&2
    return 2
  fi
  imports=$(nm -D --undefined-only "$lib" | c++filt | grep -E 'std::(__fs::)?filesystem::' || true)
  if [[ -n $imports ]]; then
    echo "$lib imports std::filesystem, which pip's LibTorch would interpose (use POSIX calls):"
    echo "$imports" | sed 's/^/    /'
    bad=1
  fi
  exports=$(nm -D --defined-only "$lib" | c++filt |
    grep -E ' T (std::thread::_M_start_thread|std::thread::join\(\)|std::(__cxx11::)?basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_create|std::(__fs::)?filesystem::|std::ios_base::Init::Init)' || true)
  if [[ -n $exports ]]; then
    echo "$lib exports libstdc++'s own code (a statically linked libstdc++ not kept private):"
    echo "$exports" | head -n 10 | sed 's/^/    /'
    bad=1
  fi
  return $bad
}

if [[ ${1:-} == --self-test ]]; then
  cxx=${CXX:-c++}
  command -v "$cxx" > /dev/null || { echo "check_symbols: no C++ compiler ($cxx)" >&2; exit 2; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat > "$tmp/fs.cc" << 'EOF'
#include <filesystem>
void remove_dir(const char* p) { std::filesystem::remove_all(p); }
EOF
  cat > "$tmp/thread.cc" << 'EOF'
#include <thread>
void run() { std::thread([] {}).join(); }
EOF
  cat > "$tmp/clean.cc" << 'EOF'
#include <string>
std::string greet(const std::string& who) { return "hello " + who; }
EOF
  "$cxx" -std=c++17 -shared -fPIC "$tmp/fs.cc" -o "$tmp/libfs.so" || exit 2
  "$cxx" -std=c++17 -shared -fPIC -static-libstdc++ "$tmp/thread.cc" -o "$tmp/libstatic.so" || exit 2
  "$cxx" -std=c++17 -shared -fPIC -static-libstdc++ -Wl,--exclude-libs,libstdc++.a:libsupc++.a:libgcc_eh.a \
    "$tmp/thread.cc" -o "$tmp/libprivate.so" || exit 2
  "$cxx" -std=c++17 -shared -fPIC "$tmp/clean.cc" -o "$tmp/libclean.so" || exit 2
  fail=0
  for case in "libfs.so 1" "libstatic.so 1" "libprivate.so 0" "libclean.so 0"; do
    set -- $case
    out=$(check "$tmp/$1")
    rc=$?
    if [[ $rc != "$2" ]]; then
      echo "self-test: $1: the check returned $rc, expected $2"
      echo "$out"
      fail=1
    else
      echo "self-test: $1: $([[ $2 == 1 ]] && echo caught || echo clean), as expected"
    fi
  done
  exit $fail
fi

(($# > 0)) || { echo "usage: $0 LIBRARY... | --self-test" >&2; exit 2; }
status=0
for lib in "$@"; do
  check "$lib"
  rc=$?
  ((rc == 2)) && exit 2
  ((rc != 0)) && status=1
  ((rc == 0)) && echo "$lib: imports no std::filesystem, exports no libstdc++ code"
done
exit $status
