#!/usr/bin/env python3
"""Writes gpu-check's OUTDIR/summary.json from its stages' logs.

  gpu_summary.py OUTDIR GPU STAGES_JSON WORK LOGS [COMMIT]

OUTDIR/summary.json: the GPU, the commit, each stage's exit status and
seconds, the train comparison (tiny-llama on the CPU device and on the GPU),
the 1B run's device peak against its plan, the bench stages' own JSON, the
e2e_3b stage's (scripts/e2e_compare.py), and a top-level "figures" object
with issue 41's acceptance figures, each null where its stage did not run:

  attention_fwd_tflops_t4096, attention_bwd_tflops_t4096
      bench kernels' attention at T = 4096 (B=1, H=32, KV=8, d=128, bf16);
  min_elementwise_ratio_to_copy
      the lowest bandwidth-bound kernel's GB/s against the device copy
      measured in the same bench kernels run ("bound": "memory": every
      kernel of the blocks and the loss but the GEMMs and attention; the
      summary's "bandwidth_kernels" lists them all, slowest first);
  e2e_3b_ratio_to_pytorch, e2e_3b_model_tflops
      the 3B run's tokens/s against PyTorch's on the same GPU, and its model
      TFLOP/s (scripts/e2e_compare.py says how they are counted).

A copy of summary.json is what docs/gpu-runs/ keeps of each GPU run.
"""
import datetime
import json
import os
import sys

import metrics_jsonl


def metrics(work, run):
    path = os.path.join(work, run, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    return metrics_jsonl.read_by_step(path)


def stage_json(logs, name):
    """A stage's stdout as a JSON object (None when absent or anything else)."""
    try:
        with open(os.path.join(logs, name + ".out")) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    return j if isinstance(j, dict) else None


def bandwidth_kernels(kernels):
    """bench kernels' bandwidth-bound cases ("bound": "memory"; a run from
    before that field: those with no TFLOP/s figure), lowest ratio first."""
    def memory_bound(k):
        if "bound" in k:
            return k["bound"] == "memory"
        return not k.get("tflops") and bool(k.get("gb_per_s"))
    found = [k for k in kernels if memory_bound(k) and "ratio_to_peak" in k]
    return sorted(found, key=lambda k: k["ratio_to_peak"])


def figures(summary):
    out = {"attention_fwd_tflops_t4096": None, "attention_bwd_tflops_t4096": None,
           "min_elementwise_ratio_to_copy": None, "e2e_3b_ratio_to_pytorch": None,
           "e2e_3b_model_tflops": None}
    kernels = (summary.get("bench_kernels") or {}).get("kernels") or []
    for k in kernels:
        if k.get("name") == "attention_fwd_t4096":
            out["attention_fwd_tflops_t4096"] = k.get("tflops")
        elif k.get("name") == "attention_bwd_t4096":
            out["attention_bwd_tflops_t4096"] = k.get("tflops")
    bandwidth = [k["ratio_to_peak"] for k in bandwidth_kernels(kernels)]
    if bandwidth:
        out["min_elementwise_ratio_to_copy"] = min(bandwidth)
    e2e = (summary.get("e2e_3b") or {}).get("figures") or {}
    out["e2e_3b_ratio_to_pytorch"] = e2e.get("e2e_ratio_to_peer")
    out["e2e_3b_model_tflops"] = e2e.get("e2e_model_tflops")
    return out


def summarize(gpu, stages, work, logs, commit):
    summary = {"gpu": gpu, "commit": commit,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
               "stages": stages}
    cpu, cuda = metrics(work, "cpu"), metrics(work, "cuda")
    common = sorted(set(cpu) & set(cuda))
    if common:
        diffs = [abs(cpu[s]["loss"] - cuda[s]["loss"]) for s in common]
        summary["tiny_llama_50"] = {
            "steps": len(common), "max_abs_loss_diff": max(diffs),
            "first_loss": [cpu[common[0]]["loss"], cuda[common[0]]["loss"]],
            "last_loss": [cpu[common[-1]]["loss"], cuda[common[-1]]["loss"]]}
    big = metrics(work, "1b")
    if big:
        first, last = big[min(big)], big[max(big)]
        peak = max(r.get("device_peak_bytes", 0) for r in big.values())
        plan = first.get("plan_device_bytes")
        summary["llama_1b_nvme"] = {
            "steps": len(big), "loss": [first["loss"], last["loss"]],
            "tokens_per_second": last.get("tokens_per_second"),
            "device_peak_bytes": peak, "plan_device_bytes": plan,
            "peak_over_plan": peak / plan if plan else None}
    for name in ("bench_copy", "bench_kernels", "bench_engine", "param_sim", "param_cuda",
                 "e2e_3b", "host_sim", "long_ctx_kept", "long_ctx_host", "grads_host",
                 "grads_nvme"):
        j = stage_json(logs, name)
        if j is not None:
            summary[name] = j
    host, nvme = summary.get("grads_host"), summary.get("grads_nvme")
    if host and nvme and host.get("step_seconds"):
        # Issue 45's figure: the step with gradients on the drives over the
        # step with them in host memory, beside the bytes they add.
        written = nvme.get("nvme_written_bytes", 0) - host.get("nvme_written_bytes", 0)
        read = nvme.get("nvme_read_bytes", 0) - host.get("nvme_read_bytes", 0)
        base = host.get("nvme_written_bytes", 0) + host.get("nvme_read_bytes", 0)
        summary["grads_on_nvme"] = {
            "step_ratio": nvme["step_seconds"] / host["step_seconds"],
            "added_bytes_share": (written + read) / base if base else None}
    summary["figures"] = figures(summary)
    kernels = (summary.get("bench_kernels") or {}).get("kernels") or []
    # Which kernels hold the bandwidth figure down, slowest first.
    summary["bandwidth_kernels"] = [[k["name"], k["ratio_to_peak"]]
                                    for k in bandwidth_kernels(kernels)]
    return summary


def main(argv):
    if len(argv) not in (6, 7):
        sys.exit(__doc__.splitlines()[2].strip())
    out, gpu, stages, work, logs = argv[1:6]
    commit = argv[6] if len(argv) == 7 and argv[6] else None
    summary = summarize(gpu, json.loads(stages), work, logs, commit)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items()
                      if not k.startswith("bench") and k not in ("e2e_3b", "e2e_sim")},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
