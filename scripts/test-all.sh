#!/usr/bin/env bash
# Installs the dependencies, checks the gates (includes follow the layer graph,
# every C++ file follows .clang-format, -Werror in every build, clang-tidy
# clean), builds, and runs every test: the whole suite on
# the optimized build (CUDA tests skip, with the reason, without a GPU), the
# optimizer and instruction-set tests on the portable TIERFLOW_NATIVE=OFF
# build, the whole suite again under ASan+UBSan, the concurrency tests under TSan, and
# each libFuzzer target for a bounded time (TIERFLOW_FUZZ_SECONDS, default 15).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/install-deps.sh

echo "== gates: layer graph, formatting =="
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
bash scripts/check-format.sh

echo "== gate: scripts/gpu-check.sh without a GPU exits 77, saying why =="
if ! command -v nvidia-smi >/dev/null; then
  rc=0
  bash scripts/gpu-check.sh run build/gpu-check-out || rc=$?
  if [ "$rc" -ne 77 ]; then
    echo "test-all.sh: gpu-check.sh run exited $rc without a GPU (expected 77)" >&2
    exit 1
  fi
fi

echo "== release build and tests =="
bash scripts/build.sh release
ctest --test-dir build/release --output-on-failure -j "$(nproc)"

echo "== gate: clang-tidy (.clang-tidy's checks, warnings as errors) =="
bash scripts/tidy.sh build/release

echo "== portable build (TIERFLOW_NATIVE=OFF): optimizer and instruction-set tests =="
# The x86-64 baseline binary, whose host loops pick AVX2/AVX-512 at run time:
# the tests run every level this CPU supports, and check the per-level objects.
bash scripts/build.sh native-off optim_test optim_isa_test optim_concurrency_test isa_test \
  isa_resume_test tierflow
ctest --test-dir build/native-off --output-on-failure -L 'optim|isa' -j "$(nproc)"

echo "== ASan + UBSan build and tests =="
bash scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$(nproc)"

echo "== TSan build and concurrency tests =="
bash scripts/build.sh tsan
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$top/scripts/tsan.supp" \
  ctest --test-dir build/tsan --output-on-failure -L concurrency -j "$(nproc)"
echo "== fuzzing: every parser of outside input, bounded time each =="
bash scripts/fuzz.sh "${TIERFLOW_FUZZ_SECONDS:-15}"
echo "test-all.sh: every test passed"
