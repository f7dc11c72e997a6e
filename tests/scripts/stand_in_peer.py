#!/usr/bin/env python3
"""A stand-in for scripts/pytorch_peer.py where torch is absent (CI): it
answers in the peer's JSON, echoing the shape it was given, at a rate
derived from that shape so the caller's ratio is checkable. With
STAND_IN_PEER_FAIL set it fails as a peer without a GPU would."""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True)
ap.add_argument("--micro-batch", type=int, required=True)
ap.add_argument("--seq-len", type=int, required=True)
ap.add_argument("--grad-accum", type=int, required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--warmup", type=int, required=True)
a = ap.parse_args()
if os.environ.get("STAND_IN_PEER_FAIL"):
    print("stand-in peer: asked to fail", file=sys.stderr)
    sys.exit(3)
with open(a.config) as f:
    vocab = json.load(f)["vocab_size"]
tokens = a.micro_batch * a.seq_len * a.grad_accum
print(json.dumps({"peer": "stand-in", "config": a.config, "vocab_size": vocab,
                  "micro_batch": a.micro_batch, "seq_len": a.seq_len,
                  "grad_accum": a.grad_accum, "steps_timed": a.steps, "warmup": a.warmup,
                  "tokens_per_step": tokens, "step_seconds": 0.25,
                  "tokens_per_second": tokens / 0.25}))
