#!/usr/bin/env python3
"""PyTorch on the same GPU, as the peer of gpu-check's e2e_3b stage.

Trains transformers' LlamaForCausalLM, built from the same config.json that
tierflow trains (random weights), the way a PyTorch user fine-tunes on one
GPU that holds everything: fp32 weights with bf16 autocast, SDPA attention,
gradient checkpointing, and fused AdamW on the GPU. Same micro-batch,
sequence length and micro-batches per step as tierflow's run, random tokens.
Prints one JSON object: tokens/s (median of the timed steps), seconds per
step, peak device memory, versions.

Needs torch and transformers (the GPU image has them); never part of the
tests. scripts/e2e_compare.py runs it; by hand:

  python3 scripts/pytorch_peer.py --config data/llama-3b/config.json \\
      --micro-batch 4 --seq-len 2048 --grad-accum 8 --steps 6 --warmup 2
"""
import argparse
import json
import statistics
import sys
import time


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a Hugging Face config.json")
    ap.add_argument("--micro-batch", type=positive, required=True)
    ap.add_argument("--seq-len", type=positive, required=True)
    ap.add_argument("--grad-accum", type=positive, default=1)
    ap.add_argument("--steps", type=positive, default=6, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-checkpointing", action="store_true",
                    help="keep every activation (more memory, no recompute)")
    a = ap.parse_args()

    import torch
    import transformers

    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return 77
    torch.manual_seed(a.seed)
    config = transformers.AutoConfig.from_pretrained(a.config)
    config.use_cache = False
    dev = torch.device("cuda")
    # Built on the GPU (a 3B model's random init on the host takes longer
    # than the timed steps), in fp32 whatever the file's torch_dtype says.
    with torch.device(dev):
        model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    model = model.float()
    if not a.no_checkpointing:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, fused=True)
    gen = torch.Generator(device=dev).manual_seed(a.seed)

    def batch():
        return torch.randint(0, config.vocab_size, (a.micro_batch, a.seq_len), device=dev,
                             generator=gen)

    seconds = []
    losses = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.grad_accum):
            ids = batch()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss / a.grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            seconds.append(time.perf_counter() - t0)
            losses.append(float(loss) * a.grad_accum)
    tokens = a.micro_batch * a.seq_len * a.grad_accum
    step_s = statistics.median(seconds)
    print(json.dumps({
        "peer": "pytorch",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(),
        "params": params,
        "setup": "fp32 weights, bf16 autocast, sdpa, fused AdamW on the GPU, "
                 + ("no checkpointing" if a.no_checkpointing else "gradient checkpointing"),
        "micro_batch": a.micro_batch, "seq_len": a.seq_len, "grad_accum": a.grad_accum,
        "tokens_per_step": tokens,
        "steps_timed": len(seconds),
        "step_seconds": step_s,
        "tokens_per_second": tokens / step_s,
        "loss": losses,
        "device_peak_bytes": torch.cuda.max_memory_allocated(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
