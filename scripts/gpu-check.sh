#!/usr/bin/env bash
# The CUDA path's check on a lent GPU machine, in one command.
#
#   scripts/gpu-check.sh prepare
#       Here (Debian 12, as root, with apt): downloads into .gpu-deps/
#       (git-ignored) the Debian packages the build needs and the GPU
#       machine lacks: liburing, oneTBB, Eigen, CLI11, nlohmann-json,
#       PCRE2, utf8proc, SentencePiece, GoogleTest/GoogleMock, pkgconf, and
#       OpenMPI's library and headers with what libmpi loads (every build
#       links MPI; the check never starts mpirun, so MPI_Init never runs).
#
#   scripts/gpu-check.sh run OUTDIR
#       On the GPU machine (nvcc, CMake and ninja, no package registry):
#       unpacks .gpu-deps/ without apt, configures for the GPU present only
#       (CMAKE_CUDA_ARCHITECTURES=native; GPU_CHECK_ARCH overrides), builds tierflow and its tests (no
#       sanitizer builds, no fuzzers), then runs, each stage logged to OUTDIR:
#         cuda_tests   every CUDA test (ctest -R Cuda, less the emulated ones): kernels against the
#                      CPU reference, the device, the transformer, the
#                      device gradient statistics;
#         nccl_smoke   the NCCL backend on one rank (NCCL's group without MPI,
#                      each collective on device buffers); NCCL comes from
#                      the CUDA toolkit or the image's nvidia-nccl package;
#         bench_copy   tierflow bench copy --device cuda --json;
#         bench_kernels tierflow bench kernels --device cuda --json (GEMM,
#                      attention, LM head and elementwise against the
#                      measured peaks);
#         bench_engine tierflow bench engine --device cuda --json (the
#                      synthetic model, each stage alone, then pipelined);
#         param_sim / param_cuda
#                      bench engine on the 0.5B model with half its blocks
#                      streamed from host (parameter offload), on the sim's
#                      H100-PCIe timed on this machine's cores, then on the GPU;
#         train_cpu / train_cuda
#                      tiny-llama for 50 steps on each device; the summary
#                      gives the largest loss difference (bf16 noise);
#         sanitize     compute-sanitizer memcheck and racecheck on the
#                      attention tests' small shapes;
#         train_1b     a Llama-3.2-1B-shaped model, 4 steps, state on NVMe,
#                      its peak device memory against the plan's;
#         e2e_3b       issue 41's end-to-end figure (scripts/e2e_compare.py):
#                      a Llama-3.2-3B-shaped model (data/llama-3b, random
#                      weights) trained by tierflow with its state in host
#                      RAM at the planner's compute-bound tokens per step,
#                      beside PyTorch on the same GPU with the same shape
#                      (scripts/pytorch_peer.py); tokens/s, model TFLOP/s,
#                      step / slowest stage alone, device peak / plan;
#         long_ctx_kept / long_ctx_host
#                      bench engine on the 0.5B model, 8 x 4096 tokens, the
#                      activation checkpoints on the device, then in pinned
#                      host memory (issue 43: the offload's cost of the step);
#         grads_host / grads_nvme
#                      bench engine on the 0.5B model with its state on this
#                      machine's NVMe, the gradients in host memory, then on
#                      the drives (issue 45: the step grows by at most the
#                      added bytes' share of the NVMe traffic plus 5%);
#         host_sim     bench engine on the 0.5B model with its state in host
#                      RAM on the sim's H100-PCIe, this machine's 16 cores
#                      as its host (#13's overlap figure).
#       OUTDIR/summary.json (scripts/gpu_summary.py) holds the commit, every
#       stage's exit status and seconds, the figures above, and a top-level
#       "figures" object with issue 41's acceptance figures; copy it to
#       docs/gpu-runs/DATE-GPU.json and commit it. GPU_CHECK_COMMIT names the
#       commit where the copy has no .git. OUTDIR/logs.tar.gz each stage's stdout and stderr
#       (two files: the device tool brings back at most eight). Exits 77 where there is no GPU, saying why; 1 if a
#       stage failed or was left out (the summary says which), 0 otherwise.
#       About 8 minutes on 16 cores from a fresh clone. The whole run keeps
#       to GPU_CHECK_BUDGET seconds (default 530) so that the summary is
#       always written inside the device tool's call: each stage has its own
#       limit (a stage that hits it shows rc 124), cut to what the budget has
#       left, and a stage the budget cannot start is recorded as left out.
#       The stages run most telling first: the CUDA tests, parameter
#       offload's step, the train comparison, the kernels' figures, then
#       the rest. GPU_CHECK_ONLY (stage names, comma-separated) runs only
#       those after the build, for a second, shorter run inside the same
#       lease; the others are recorded as not asked for.
#
# With the device tool: carry .gpu-deps, e.g.
#   run(command="bash scripts/gpu-check.sh run $OUT", carry=[".gpu-deps"], timeout_s=560)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
deps="$top/.gpu-deps"
packages=(liburing-dev liburing2 libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libhwloc15
  libeigen3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
  libpcre2-posix3 libutf8proc-dev libutf8proc2 libsentencepiece-dev libsentencepiece0
  nlohmann-json3-dev libgtest-dev libgmock-dev googletest pkgconf pkgconf-bin libpkgconf3
  libopenmpi-dev libopenmpi3 libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1)

usage() {
  echo "usage: scripts/gpu-check.sh prepare | run OUTDIR" >&2
  exit 2
}

prepare() {
  set -e
  if [ "$(id -u)" -ne 0 ]; then
    echo "gpu-check.sh prepare: run as root (it calls apt-get)" >&2
    exit 1
  fi
  mkdir -p "$deps"
  apt-get update -qq
  # apt-get download writes into the current directory, as _apt where it can.
  (cd "$deps" && rm -f ./*.deb && apt-get download -qq -o APT::Sandbox::User=root "${packages[@]}")
  local n
  n=$(find "$deps" -maxdepth 1 -name '*.deb' | wc -l)
  if [ "$n" -ne "${#packages[@]}" ]; then
    echo "gpu-check.sh prepare: expected ${#packages[@]} packages, got $n in $deps" >&2
    exit 1
  fi
  echo "gpu-check.sh prepare: $n packages ($(du -sh "$deps" | cut -f1)) in $deps;" \
    "carry .gpu-deps to the GPU machine"
}

# ---- run ----
out=""
scratch="$top/build/gpu-check"  # unpacked packages, stage logs, training runs
logs="$scratch/logs"
summary_stages=()
failed=0
now() { date +%s.%N; }
started=$(date +%s)
budget=${GPU_CHECK_BUDGET:-530}
[[ "$budget" =~ ^[0-9]+$ ]] || {
  echo "gpu-check.sh: GPU_CHECK_BUDGET must be whole seconds, not '$budget'" >&2
  exit 2
}
reserve=20 # seconds kept for the summary and the log archive

# stage NAME LIMIT COMMAND...: runs it under a time limit of LIMIT seconds,
# or what the budget has left if less, with its output in logs/NAME.out and
# .err, and records its exit status and seconds. A stage with under 10
# seconds left is not started; the summary says so.
stage() {
  local name=$1 limit=$2
  shift 2
  case "$name" in
    env | configure | build) ;;
    *)
      if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ ",$GPU_CHECK_ONLY," != *",$name,"* ]]; then
        echo "== $name: not asked for (GPU_CHECK_ONLY=$GPU_CHECK_ONLY)"
        summary_stages+=("{\"stage\": \"$name\", \"rc\": null, \"left_out\": \"not in GPU_CHECK_ONLY\"}")
        return 0
      fi
      ;;
  esac
  local left=$((budget - reserve - ($(date +%s) - started)))
  if [ "$left" -lt 10 ]; then
    echo "== $name: left out (the ${budget} s budget is spent)"
    summary_stages+=("{\"stage\": \"$name\", \"rc\": null, \"left_out\": \"budget spent\"}")
    failed=1
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0 rc
  t0=$(now)
  echo "== $name (limit ${limit} s): $*"
  timeout -k 5 "$limit" "$@" >"$logs/$name.out" 2>"$logs/$name.err"
  rc=$?
  local secs
  secs=$(python3 -c "print(round($(now) - $t0, 1))")
  echo "   rc=$rc, ${secs} s"
  summary_stages+=("{\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $secs}")
  if [ "$rc" -ne 0 ]; then failed=1; fi
  return "$rc"
}

no_gpu() {
  echo "gpu-check.sh run: no GPU here ($1); nothing to check" >&2
  mkdir -p "$out"
  printf '{"gpu": null, "skipped": "%s"}\n' "$1" >"$out/summary.json"
  exit 77
}

run() {
  out=$1
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  rm -rf "$scratch" && mkdir -p "$logs"
  command -v nvidia-smi >/dev/null || no_gpu "nvidia-smi is not installed"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
    head -1) || true
  [ -n "$gpu" ] || no_gpu "nvidia-smi lists no GPU"
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || no_gpu "no nvcc"
  [ -d "$deps" ] || {
    echo "gpu-check.sh run: no $deps: run 'scripts/gpu-check.sh prepare' where apt works and" \
      "carry .gpu-deps" >&2
    exit 1
  }
  echo "gpu-check.sh: $gpu"

  # Unpack the packages into a private root (never into /).
  local root="$scratch/deps-root"
  mkdir -p "$root"
  for f in "$deps"/*.deb; do dpkg-deb -x "$f" "$root"; done
  local lib="$root/usr/lib/x86_64-linux-gnu"
  # .pc files name /usr (prefix=, libdir=, includedir=); point them at the private root.
  sed -E -i "s#^([a-z_]+)=/usr(/|\$)#\1=$root/usr\2#" "$lib"/pkgconfig/*.pc \
    "$root"/usr/share/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig"
  if ! command -v pkg-config >/dev/null; then
    export PATH="$root/usr/bin:$PATH"
    ln -sf pkgconf "$root/usr/bin/pkg-config"
  fi
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="/usr/local/cuda/bin:$PATH"
  # OpenMPI through its library and headers, not its compiler wrapper
  # (which would look for its own files under /usr).
  local mpi="$lib/openmpi"
  local mpi_flags=(-DMPI_C_COMPILER=/nonexistent/mpicc -DMPI_C_HEADER_DIR="$mpi/include"
    -DMPI_C_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$mpi/lib/libmpi.so")
  # NCCL: the toolkit's, else the image's nvidia-nccl Python package.
  local nccl_root=""
  if [ ! -e /usr/local/cuda/include/nccl.h ]; then
    nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) || true
    if [ -n "$nccl_root" ]; then
      export LD_LIBRARY_PATH="$nccl_root/lib:$LD_LIBRARY_PATH"
    fi
  fi

  local build="$top/build/gpu"
  local jobs
  jobs=$(nproc)
  stage env 20 sh -c 'nvidia-smi; nvcc --version; c++ --version; cmake --version; ninja --version; nproc; free -g; df -h .; true'
  stage configure 120 cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTIERFLOW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${GPU_CHECK_ARCH:-native}" \
    -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake" -DEigen3_DIR="$root/usr/share/eigen3/cmake" \
    "${mpi_flags[@]}" ${nccl_root:+-DNCCL_ROOT="$nccl_root"} ||
    finish "$gpu"
  stage build 300 cmake --build "$build" -j "$jobs" || finish "$gpu"
  local tf="$build/tools/tierflow"

  # Most telling first: whatever the budget leaves out is the least missed.
  # Not the emulated kernels (OpsCudaEmulated): CI runs those, and the GPU's time is short.
  stage cuda_tests 150 env TIERFLOW_REQUIRE=gpu ctest --test-dir "$build" -R Cuda -E CudaEmulated \
    --output-on-failure -j 4

  # The 3B model end to end beside PyTorch (issue 41): about 2 minutes.
  local work="$scratch/work"
  mkdir -p "$work"
  stage e2e_3b 240 python3 "$top/scripts/e2e_compare.py" --tierflow "$build/tools/tierflow" \
    --model "$top/data/llama-3b" --device cuda --micro-batch 4 --seq-len 2048 --steps 4 \
    --warmup 2 --work "$work/e2e" --peer "python3 $top/scripts/pytorch_peer.py"

  # Parameter offload's figure (#17): the streamed step against its slowest
  # stage, on the sim's H100-PCIe with this machine's 16 cores as its host
  # (on 2 vCPUs the sim's copies take a core from the optimizer), and on
  # the GPU itself, half of the 0.5B model's blocks streamed from host.
  local engine=(bench engine --model "$top/data/llama-0.5b" --offload-param host --json)
  stage param_sim 100 "$tf" "${engine[@]}" --device sim:h100-pcie --rounds 3
  stage param_cuda 80 "$tf" "${engine[@]}" --device cuda --rounds 2
  # Long contexts (#43): the 0.5B model at 32K tokens a micro-batch (its
  # positions stop at 4096: 8 sequences) with the activation
  # checkpoints on the device and in pinned host memory, on the GPU.
  local long=(bench engine --model "$top/data/llama-0.5b" --micro-batch 8 --seq-len 4096
    --rounds 2 --json --device cuda)
  stage long_ctx_kept 90 "$tf" "${long[@]}" --offload-activations none
  stage long_ctx_host 90 "$tf" "${long[@]}" --offload-activations host
  # Gradients on the drives (#45): the state on NVMe, the gradients in host
  # memory, then beside the state on the drive.
  local grads=(bench engine --model "$top/data/llama-0.5b" --device cuda --rounds 2 --json
    --offload-optimizer nvme --nvme-path "$scratch/nvme-grads")
  mkdir -p "$scratch/nvme-grads"
  stage grads_host 70 "$tf" "${grads[@]}" --offload-gradients host
  stage grads_nvme 70 "$tf" "${grads[@]}" --offload-gradients nvme
  # The host-state overlap (#13) at the sim's proportions on 16 host cores.
  stage host_sim 60 "$tf" bench engine --model "$top/data/llama-0.5b" --device sim:h100-pcie \
    --rounds 3 --json
  local small=(train --model tiny-llama --steps 50 --micro-batch 4 --seq-len 128 --seed 3
    --dtype bf16 --offload-optimizer host --eval-every 0 --checkpoint-every 0)
  stage train_cpu 60 "$tf" "${small[@]}" --device cpu --out "$work/cpu"
  stage train_cuda 60 "$tf" "${small[@]}" --device cuda --out "$work/cuda"
  stage bench_kernels 60 "$tf" bench kernels --device cuda --json
  stage bench_copy 30 "$tf" bench copy --device cuda --json
  if [ -x "$build/tests/comm/nccl_communicator_test" ]; then
    # A GPU is required here: a skip would be a silent pass.
    stage nccl_smoke 45 env TIERFLOW_REQUIRE=gpu "$build/tests/comm/nccl_communicator_test"
  else
    stage nccl_smoke 5 sh -c 'echo "NCCL was not found at configure time: no NCCL backend built" >&2; exit 1'
  fi
  # The attention kernels under compute-sanitizer (memcheck, then racecheck
  # on shared memory) at the small test shapes, the tensor-core ones among them.
  local cs=/usr/local/cuda/bin/compute-sanitizer
  local filter='OpsCuda/*.AttentionShapes:OpsCuda/*.AttentionAndRopeWithPackedSamples'
  if [ -x "$cs" ]; then
    stage sanitize 120 env TIERFLOW_REQUIRE=gpu sh -c "$cs --tool memcheck --error-exitcode 9 \
      $build/tests/kernels/kernels_test --gtest_filter='$filter' &&
      $cs --tool racecheck --error-exitcode 9 $build/tests/kernels/kernels_test \
      --gtest_filter='$filter'"
  else
    stage sanitize 5 sh -c "echo 'no $cs on this machine' >&2; exit 1"
  fi
  # Every step reads and writes the 1B model's whole fp32 state on NVMe
  # (about 15 GB each way): a few steps show the device peak against the
  # plan (about 15 s a step on the first GPU run, then a checkpoint of the
  # whole state); the metrics are written per step, so a cut run still reports.
  stage train_1b 150 "$tf" train --model llama-1b --steps 4 --micro-batch 1 --seq-len 1024 \
    --activation-checkpointing --offload-optimizer nvme --nvme-path "$work/nvme" --device cuda \
    --eval-every 0 --checkpoint-every 0 --out "$work/1b"
  stage bench_engine 60 "$tf" bench engine --device cuda --rounds 2 --json
  finish "$gpu"
}

# Writes OUTDIR/summary.json (scripts/gpu_summary.py) and the log archive,
# and exits.
finish() {
  local gpu=$1
  local stages commit
  stages=$(
    IFS=,
    echo "${summary_stages[*]}"
  )
  commit=${GPU_CHECK_COMMIT:-$(git -C "$top" rev-parse HEAD 2>/dev/null || true)}
  python3 "$top/scripts/gpu_summary.py" "$out" "$gpu" "[$stages]" "$scratch/work" "$logs" \
    "$commit"
  tar czf "$out/logs.tar.gz" -C "$logs" .
  exit "$failed"
}

case "${1:-}" in
  prepare) prepare ;;
  run)
    [ $# -eq 2 ] || usage
    run "$2"
    ;;
  *) usage ;;
esac
