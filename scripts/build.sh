#!/usr/bin/env bash
# Configures and builds one flavour of tierflow into build/<flavour>: every
# target, or only the TARGETs named after the flavour.
#   scripts/build.sh release      optimized, CUDA backend when nvcc exists
#   scripts/build.sh main         README command 1: the tierflow binary alone, optimized,
#                                 with the CUDA backend for the GPU present only
#                                 (none when no GPU answers nvidia-smi); no tests
#   scripts/build.sh native-off   optimized for the x86-64 baseline (no -march=native):
#                                 the portable binary; its host loops still pick
#                                 AVX2 or AVX-512 at run time (src/common/cpu_isa.h)
#   scripts/build.sh asan         AddressSanitizer + UndefinedBehaviorSanitizer (host code)
#   scripts/build.sh tsan         ThreadSanitizer (host code only; no CUDA backend,
#                                 since TSan cannot see inside the CUDA driver)
set -euo pipefail
flavour=${1:-release}
top=$(cd "$(dirname "$0")/.." && pwd)
launcher=()
if command -v ccache >/dev/null; then
  # Relative paths in the cache key: a fresh clone elsewhere still hits.
  export CCACHE_BASEDIR="$top"
  export CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
case "$flavour" in
  release) extra=(-DCMAKE_BUILD_TYPE=Release -DTIERFLOW_WERROR=ON) ;;
  main)
    # Four CUDA architectures and every test target took most of command 1's
    # 16.5 minutes on 2 cores, for a job that runs in seconds.
    if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      echo "build.sh main: CUDA backend for the GPU present ($(nvidia-smi -L | head -1))"
      extra=(-DCMAKE_BUILD_TYPE=Release -DTIERFLOW_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=native)
    else
      echo "build.sh main: no GPU answers nvidia-smi: building without the CUDA backend" \
        "(scripts/build.sh release builds it)"
      extra=(-DCMAKE_BUILD_TYPE=Release -DTIERFLOW_WERROR=ON -DTIERFLOW_CUDA=OFF)
    fi
    # Only the binary, unless targets are named.
    (($# > 1)) || set -- "$1" tierflow
    ;;
  native-off) extra=(-DCMAKE_BUILD_TYPE=Release -DTIERFLOW_NATIVE=OFF -DTIERFLOW_CUDA=OFF -DTIERFLOW_WERROR=ON) ;;
  # The sanitizer flavours check host code; the CUDA backend is compiled by the
  # release flavour (nvcc's output is not instrumented by either sanitizer).
  # -O1 -g1, the sanitizers' own advice: -O2 -g took 2.3x as long to compile
  # (68 s against 30 s for tests/engine/engine_test.cc under ASan+UBSan), and
  # -g1 keeps the file:line tables the reports need.
  asan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
               -DTIERFLOW_WERROR=ON -DTIERFLOW_SANITIZE=address,undefined -DTIERFLOW_CUDA=OFF) ;;
  tsan) extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
               -DTIERFLOW_WERROR=ON -DTIERFLOW_SANITIZE=thread -DTIERFLOW_CUDA=OFF) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release, main, native-off, asan, tsan)" >&2; exit 2 ;;
esac
shift || true
targets=()
if (($# > 0)); then targets=(--target "$@"); fi
cmake -S "$top" -B "$top/build/$flavour" -G Ninja "${launcher[@]}" "${extra[@]}" >/dev/null
cmake --build "$top/build/$flavour" -j "$(nproc)" "${targets[@]}"
