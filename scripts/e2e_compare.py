#!/usr/bin/env python3
"""A real model trained end to end by tierflow, beside a peer on the same GPU.

gpu-check's e2e_3b stage (issue 41): tierflow fine-tunes MODEL (a directory
with a config.json: random weights) with its optimizer state in host RAM, at
the tokens per step the planner advises for a compute-bound step, and the
peer (scripts/pytorch_peer.py: PyTorch with everything on the GPU) trains the
same config.json with the same micro-batch, sequence length and micro-batches
per step. Prints one JSON object:

  plan        the planner's advice: grad_accum, why, its predicted step
  tierflow    tokens/s (median of the timed steps), model TFLOP/s, device
              peak against the plan, loss
  stages      `bench engine` on the same model and tokens per step: the
              pipelined step against the slowest stage alone
  peer        the peer's own JSON, plus its model TFLOP/s
  figures     e2e_ratio_to_peer, e2e_model_tflops (tierflow's), the names
              gpu-check's summary carries

Model FLOPs per token are 6 N (N: all parameters; a tied head counted once,
its GEMM being the embedding's size) plus causal attention's 6 L H d T
(forward 2 L H d T: QK^T and PV over T/2 keys on average; backward twice
that), as PaLM's MFU counts it halved for the causal mask; recomputation
under activation checkpointing is not counted, in either.

Needs only python3's standard library; the CPU device stands in for the GPU
in tests/scripts/e2e_compare_test.py (with a stand-in peer).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import metrics_jsonl

FLOPS_NOTE = ("model FLOPs: 6 N per token plus causal attention 6 L H d T per token "
              "(forward + backward); activation recomputation not counted")


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run(cmd, log_path, timeout):
    """Runs cmd with its output in log_path; returns stdout (exits on failure)."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
        log.write(p.stdout)
    if p.returncode != 0:
        sys.exit(f"e2e_compare: {cmd[0]} {cmd[1] if len(cmd) > 1 else ''} exited "
                 f"{p.returncode} after {time.monotonic() - t0:.0f} s; see {log_path}")
    return p.stdout


def last_json(text, what):
    """The last line of text that parses as a JSON object."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    try:
        return json.loads(text)
    except ValueError:
        sys.exit(f"e2e_compare: {what} printed no JSON object")


def attention_flops_per_token(config, seq_len):
    """Causal attention's model FLOPs per token, forward and backward."""
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 6 * layers * heads * head_dim * seq_len


def read_metrics(path):
    by_step = metrics_jsonl.read_by_step(path)
    return [by_step[s] for s in sorted(by_step)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tierflow", required=True, help="the tierflow binary")
    ap.add_argument("--model", required=True, help="a directory holding config.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--micro-batch", type=positive, default=4)
    ap.add_argument("--seq-len", type=positive, default=2048)
    ap.add_argument("--grad-accum", type=positive,
                    help="micro-batches per step (default: the planner's advice)")
    ap.add_argument("--max-grad-accum", type=positive, default=16,
                    help="the most micro-batches per step the advice may set (time)")
    ap.add_argument("--steps", type=positive, default=4, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--work", required=True, help="a directory for the runs and logs")
    ap.add_argument("--peer", default="",
                    help="the peer's command line (config and shape flags are added); "
                         "empty: no peer")
    ap.add_argument("--no-stages", action="store_true", help="skip bench engine")
    ap.add_argument("--timeout", type=positive, default=600, help="seconds per command")
    a = ap.parse_args()
    if a.warmup < 0:
        ap.error("--warmup must be at least 0")

    config_path = os.path.join(a.model, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    os.makedirs(a.work, exist_ok=True)
    shape = ["--micro-batch", str(a.micro_batch), "--seq-len", str(a.seq_len)]

    # The planner's advice for a compute-bound step, with the state in host RAM.
    plan = last_json(run([a.tierflow, "plan", "--model", config_path, "--device", a.device,
                          "--offload-optimizer", "host", "--checkpointing", "on", "--json"] +
                         shape, os.path.join(a.work, "plan.log"), a.timeout), "plan")
    advice = plan.get("compute_bound") or {}
    advised = int(advice.get("grad_accum") or 1)
    if a.grad_accum:
        grad_accum, why = a.grad_accum, "given (--grad-accum)"
    elif advised > a.max_grad_accum:
        grad_accum, why = a.max_grad_accum, f"the planner advised {advised}, capped"
    elif advice:
        grad_accum, why = advised, "the planner's advice: " + advice.get("advice", "")
    else:
        grad_accum, why = 1, "the planner finds the step compute-bound at one micro-batch"
    tokens_per_step = a.micro_batch * a.seq_len * grad_accum
    params = int(plan["params"])
    flops_per_token = 6 * params + attention_flops_per_token(config, a.seq_len)

    out = {
        "model": a.model, "device": a.device, "params": params,
        "micro_batch": a.micro_batch, "seq_len": a.seq_len, "grad_accum": grad_accum,
        "tokens_per_step": tokens_per_step,
        "model_flops_per_token": flops_per_token, "flops_note": FLOPS_NOTE,
        "plan": {"advised_grad_accum": advised, "why": why,
                 "predicted_step_seconds": plan.get("predicted_step_seconds"),
                 "binding_constraint": plan.get("binding_constraint")},
    }

    # tierflow: state in host RAM, bf16 weights on the device, the bundled
    # corpus as bytes (the peer draws random ids: the rate depends on the
    # shape, not on which tokens), nothing saved at the end (a 3B model's
    # checkpoint is 38 GB of fp32 state).
    run_dir = os.path.join(a.work, "tierflow")
    run([a.tierflow, "train", "--model", config_path, "--tokenizer", "byte", "--device",
         a.device, "--offload-optimizer", "host", "--dtype", "bf16",
         "--activation-checkpointing", "--grad-accum", str(grad_accum), "--steps",
         str(a.warmup + a.steps), "--eval-every", "0", "--checkpoint-every", "0",
         "--final-save", "none", "--out", run_dir] + shape,
        os.path.join(a.work, "tierflow.log"), a.timeout)
    steps = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    timed = steps[a.warmup:]
    if not timed:
        sys.exit(f"e2e_compare: tierflow wrote {len(steps)} steps, none past the warm-up")
    tps = statistics.median(r["tokens_per_second"] for r in timed)
    peak = max(r.get("device_peak_bytes", 0) for r in steps)
    plan_bytes = steps[0].get("plan_device_bytes")
    out["tierflow"] = {
        "steps_timed": len(timed),
        "tokens_per_second": tps,
        "step_seconds": tokens_per_step / tps,
        "model_tflops": tps * flops_per_token / 1e12,
        "device_peak_bytes": peak, "plan_device_bytes": plan_bytes,
        "peak_over_plan": peak / plan_bytes if plan_bytes else None,
        "loss": [steps[0]["loss"], steps[-1]["loss"]],
    }

    # The pipelined step against each stage alone, at the same tokens per
    # step (bench engine takes them as one micro-batch).
    if not a.no_stages:
        bench = last_json(run([a.tierflow, "bench", "engine", "--model", config_path, "--device",
                               a.device, "--offload-optimizer", "host", "--micro-batch",
                               str(a.micro_batch * grad_accum), "--seq-len", str(a.seq_len),
                               "--steps", "2", "--rounds", "1", "--json"],
                              os.path.join(a.work, "bench_engine.log"), a.timeout),
                          "bench engine")
        out["stages"] = {k: bench.get(k) for k in (
            "slowest_stage", "slowest_stage_seconds", "step_seconds", "step_to_slowest_stage")}

    figures = {"e2e_model_tflops": out["tierflow"]["model_tflops"]}
    if a.peer:
        peer = last_json(run(shlex.split(a.peer) + [
            "--config", config_path, "--grad-accum", str(grad_accum),
            "--steps", str(a.steps), "--warmup", str(a.warmup)] + shape,
            os.path.join(a.work, "peer.log"), a.timeout), "the peer")
        if "tokens_per_second" not in peer:
            sys.exit(f"e2e_compare: the peer reported no tokens_per_second: {peer}")
        peer["model_tflops"] = peer["tokens_per_second"] * flops_per_token / 1e12
        out["peer"] = peer
        figures["e2e_ratio_to_peer"] = tps / peer["tokens_per_second"]
    out["figures"] = figures
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
