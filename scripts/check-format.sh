#!/usr/bin/env bash
# Checks every tracked C++/CUDA file against .clang-format (clang-format from
# Debian 12, version 14: the version decides the output, so CI and developers
# use the same one). `--fix` rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  echo "check-format.sh: formatted ${#files[@]} files"
  exit 0
fi
if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  echo "$out" | grep -E "^[^ ].*(warning|error):" | head -40
  echo "check-format.sh: files above differ from .clang-format; run scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format.sh: ${#files[@]} files follow .clang-format"
