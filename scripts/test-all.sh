#!/usr/bin/env bash
# Installs the dependencies, checks the gates (includes follow the layer graph,
# every C++ file follows .clang-format, -Werror in every build, clang-tidy
# clean), builds, and runs every test: the whole suite on
# the optimized build (CUDA tests skip, with the reason, without a GPU), the
# optimizer and instruction-set tests on the portable TIERFLOW_NATIVE=OFF
# build, the whole suite again under ASan+UBSan, the concurrency tests under TSan, and
# each libFuzzer target for a bounded time (TIERFLOW_FUZZ_SECONDS, default 5).
# CI gives all of it 90 minutes on two cores: each stage prints how long it
# took, so the log shows where the time goes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# stage NAME: ends the running stage with its time, then names the next.
stage_start=$SECONDS
stage() {
  echo "-- $((SECONDS - stage_start)) s (total $((SECONDS / 60)) min)"
  stage_start=$SECONDS
  echo "== $* =="
}
echo "== install dependencies =="
bash scripts/install-deps.sh

stage "gates: layer graph, formatting"
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
bash scripts/check-format.sh

stage "gate: scripts/gpu-check.sh without a GPU exits 77, saying why"
if ! command -v nvidia-smi >/dev/null; then
  rc=0
  bash scripts/gpu-check.sh run build/gpu-check-out || rc=$?
  if [ "$rc" -ne 77 ]; then
    echo "test-all.sh: gpu-check.sh run exited $rc without a GPU (expected 77)" >&2
    exit 1
  fi
fi

stage "release build and tests"
bash scripts/build.sh release
ctest --test-dir build/release --output-on-failure -j "$(nproc)"

stage "gate: clang-tidy (.clang-tidy's checks, warnings as errors)"
bash scripts/tidy.sh build/release

stage "portable build (TIERFLOW_NATIVE=OFF): optimizer and instruction-set tests"
# The x86-64 baseline code, whose host loops pick AVX2/AVX-512 at run time:
# the tests run every level this CPU supports, and check the per-level objects.
# isa_resume_test (the tierflow binary resuming across levels) runs in the
# release flavour above; building the whole binary again here cost CI minutes
# it does not have.
bash scripts/build.sh native-off tests_optim tests_isa
ctest --test-dir build/native-off --output-on-failure -L 'optim|isa' -j "$(nproc)"

stage "ASan + UBSan build and tests"
bash scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$(nproc)"

stage "TSan build and concurrency tests"
# Only the tests labelled concurrency (and the libraries they link).
bash scripts/build.sh tsan tests_concurrency
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$top/scripts/tsan.supp" \
  ctest --test-dir build/tsan --output-on-failure -L concurrency -j "$(nproc)"
stage "fuzzing: every parser of outside input, bounded time each"
bash scripts/fuzz.sh "${TIERFLOW_FUZZ_SECONDS:-5}"
stage "done"
echo "test-all.sh: every test passed"
