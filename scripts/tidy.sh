#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks, warnings as errors) over the library
# and tool sources, using the compile commands of a configured build.
# Usage: scripts/tidy.sh [BUILD_DIR]   (default build/release; build it first)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build/release}
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "tidy.sh: no $build/compile_commands.json; run scripts/build.sh release first" >&2
  exit 2
fi
# GCC-only warning options and attributes (optimize) in the project mean
# nothing to clang.
out=$(run-clang-tidy -quiet -p "$build" -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
  -extra-arg=-Wno-unknown-attributes \
  "$top/(src|offload|tools)/.*\.cc\$" 2>&1) || status=$?
if [[ ${status:-0} -ne 0 ]] || grep -q "error:" <<<"$out"; then
  grep -E "(warning|error):" <<<"$out" | sed 's/\x1b\[[0-9;]*m//g' | sort -u | head -60
  echo "tidy.sh: clang-tidy found the problems above" >&2
  exit 1
fi
echo "tidy.sh: clang-tidy clean"
