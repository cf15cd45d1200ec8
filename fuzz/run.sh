#!/usr/bin/env bash
# Usage: bash fuzz/run.sh TARGET SECONDS [extra libFuzzer flags...]
# Configures build-fuzz/ with clang (SPACE_FUZZ=ON, SPACE_SANITIZE=ON), builds fuzz_TARGET,
# and fuzzes it for SECONDS on a copy of fuzz/corpus/TARGET (in build-fuzz/fuzz-work/TARGET/,
# so the checked-in seeds stay small). Prints the execution count and any crash files.
# Exits 1 if the fuzzer found a crash, leak, timeout or OOM.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET SECONDS [libFuzzer flags...]" >&2
  echo "targets (one per fuzz/corpus/ directory): $(ls "$root/fuzz/corpus" | tr '\n' ' ')" >&2
  exit 2
fi
target=$1 secs=$2
shift 2
build=${SPACE_FUZZ_BUILD:-$root/build-fuzz}
[ -d "$root/fuzz/corpus/$target" ] || { echo "no such target: $target" >&2; exit 2; }

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSPACE_FUZZ=ON -DSPACE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option >/dev/null  # g++-only -Wno-restrict
fi
cmake --build "$build" --target "fuzz_$target" -j"$(nproc)"

work=$build/fuzz-work/$target
mkdir -p "$work/corpus" "$work/artifacts"
cp -n "$root/fuzz/corpus/$target/"* "$work/corpus/" 2>/dev/null || true
log=$work/fuzz-$(date -u +%Y%m%dT%H%M%SZ).log
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
rc=0
"$build/bin/fuzz_$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" \
  >"$log" 2>&1 || rc=$?
echo "target: $target  time: ${secs}s  log: $log  exit: $rc"
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
grep -E '^#[0-9]+ +DONE' "$log" | tail -1 || true
echo "corpus: $(ls "$work/corpus" | wc -l) files"
crashes=$(ls "$work/artifacts" 2>/dev/null || true)
if [ -n "$crashes" ] || [ $rc -ne 0 ]; then
  echo "FINDINGS in $work/artifacts:"
  ls -l "$work/artifacts"
  grep -E 'ERROR: |SUMMARY: |invariant violated|runtime error' "$log" | head -20 || true
  exit 1
fi
echo "no crashes"
