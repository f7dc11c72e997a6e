#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into build/fuzz and runs each
# for a bounded time on a copy of its seed corpus fuzz/corpus/<target>/, so
# the committed corpus is never modified. Runs every target, then fails if
# any crashed, leaked, timed out or broke an invariant; the input that did it
# is saved under build/fuzz/crashes/<target>/ (replay it with
# `build/fuzz/fuzz/<target> <file>`, then add it to
# tests/fuzz_regressions/inputs/<target>/).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  Default: 20. Total time is about that times the
#                       number of targets (17), plus the build.
#   TARGET              Default: every target fuzz/CMakeLists.txt defines.
#                       Named targets are the only ones built.
# Environment: BUILD_DIR (Default: build/fuzz), JOBS (Default: nproc).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
seconds=${1:-20}
shift || true
build=${BUILD_DIR:-build/fuzz}
jobs=${JOBS:-$(nproc)}

launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$top" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DTIERFLOW_FUZZ=ON -DTIERFLOW_CUDA=OFF \
  -DTIERFLOW_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" "${launcher[@]}" >/dev/null

if [[ $# -gt 0 ]]; then
  targets=("$@")
  ninja -C "$build" -j "$jobs" "${targets[@]}"
else
  ninja -C "$build" -j "$jobs" fuzzers
  mapfile -t targets < "$build/fuzz/fuzzers.txt"
fi

work="$build/fuzz-work"
crashes="$build/crashes"
failed=()
for t in "${targets[@]}"; do
  [[ -z "$t" ]] && continue
  rm -rf "${work:?}/$t"
  mkdir -p "$work/$t" "$crashes/$t"
  if [[ -d "fuzz/corpus/$t" ]]; then cp -r "fuzz/corpus/$t/." "$work/$t/"; fi
  echo "== $t: ${seconds} s =="
  # -artifact_prefix keeps crash-*, leak-*, timeout-* out of the source tree.
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/$t" "$work/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$crashes/$t/" >"$work/$t.log" 2>&1; then
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)" "$work/$t.log" |
      tr '\n' ' '
    echo
  else
    echo "fuzz.sh: $t FAILED; log $work/$t.log, input(s) in $crashes/$t/:"
    ls "$crashes/$t/"
    grep -E "ERROR: |FUZZ_CHECK|runtime error|SUMMARY" "$work/$t.log" | head -5 || true
    failed+=("$t")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s), ${seconds} s each, no crash"
