#!/usr/bin/env python3
"""scripts/e2e_compare.py's logic with the CPU device standing in for the GPU
and tests/scripts/stand_in_peer.py for PyTorch: the shape it hands both
sides, the planner's advice it follows, and every figure recomputed here
from the files the run left (metrics.jsonl, the plan, the peer's answer).

  e2e_compare_test.py --tierflow BIN --script scripts/e2e_compare.py
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import unittest

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
    "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
    "torch_dtype": "bfloat16",
}


class E2eCompare(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tierflow-e2e-")
        self.model = os.path.join(self.tmp.name, "tiny")
        os.makedirs(self.model)
        with open(os.path.join(self.model, "config.json"), "w") as f:
            json.dump(TINY, f)
        self.work = os.path.join(self.tmp.name, "work")

    def tearDown(self):
        self.tmp.cleanup()

    def compare(self, *extra, env=None):
        cmd = [sys.executable, ARGS.script, "--tierflow", ARGS.tierflow, "--model", self.model,
               "--device", "cpu", "--micro-batch", "2", "--seq-len", "32", "--steps", "3",
               "--warmup", "1", "--work", self.work,
               "--peer", f"{sys.executable} {os.path.join(HERE, 'stand_in_peer.py')}"] + list(extra)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **(env or {})})

    def test_figures_follow_from_the_runs(self):
        p = self.compare()
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        out = json.loads(p.stdout)

        # The planner's advice, asked again here, decides the micro-batches.
        plan = json.loads(subprocess.run(
            [ARGS.tierflow, "plan", "--model", self.model, "--device", "cpu",
             "--offload-optimizer", "host", "--checkpointing", "on", "--json",
             "--micro-batch", "2", "--seq-len", "32"],
            capture_output=True, text=True, check=True).stdout)
        advised = (plan.get("compute_bound") or {}).get("grad_accum") or 1
        self.assertEqual(out["grad_accum"], min(advised, 16))
        self.assertEqual(out["params"], plan["params"])
        self.assertEqual(out["tokens_per_step"], 2 * 32 * out["grad_accum"])

        # Model FLOPs: 6 N plus causal attention, 6 L H d T.
        expected_fpt = 6 * plan["params"] + 6 * 2 * 4 * 16 * 32
        self.assertEqual(out["model_flops_per_token"], expected_fpt)

        # tierflow's figures are the timed steps of its own metrics.
        with open(os.path.join(self.work, "tierflow/metrics.jsonl")) as f:
            steps = [json.loads(line) for line in f]
        self.assertEqual(len(steps), 4)
        tps = statistics.median(s["tokens_per_second"] for s in steps[1:])
        tf = out["tierflow"]
        self.assertEqual(tf["steps_timed"], 3)
        self.assertAlmostEqual(tf["tokens_per_second"], tps)
        self.assertAlmostEqual(tf["model_tflops"], tps * expected_fpt / 1e12)
        self.assertEqual(tf["device_peak_bytes"], max(s["device_peak_bytes"] for s in steps))
        self.assertEqual(tf["plan_device_bytes"], steps[0]["plan_device_bytes"])
        self.assertAlmostEqual(tf["peak_over_plan"],
                               tf["device_peak_bytes"] / tf["plan_device_bytes"])
        self.assertTrue(all(s["tokens"] == out["tokens_per_step"] for s in steps))

        # The peer got the same config and shape, and the ratio is the rates'.
        peer = out["peer"]
        self.assertEqual(peer["config"], os.path.join(self.model, "config.json"))
        self.assertEqual((peer["micro_batch"], peer["seq_len"], peer["grad_accum"]),
                         (2, 32, out["grad_accum"]))
        self.assertEqual((peer["steps_timed"], peer["warmup"]), (3, 1))
        self.assertAlmostEqual(out["figures"]["e2e_ratio_to_peer"],
                               tps / peer["tokens_per_second"])
        self.assertAlmostEqual(out["figures"]["e2e_model_tflops"], tf["model_tflops"])

        # The step against its slowest stage alone, from bench engine.
        self.assertGreater(out["stages"]["step_to_slowest_stage"], 0)
        self.assertIn("recomputation not counted", out["flops_note"])

    def test_grad_accum_given_overrides_the_advice(self):
        p = self.compare("--grad-accum", "3", "--no-stages")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        out = json.loads(p.stdout)
        self.assertEqual(out["grad_accum"], 3)
        self.assertEqual(out["peer"]["grad_accum"], 3)
        self.assertNotIn("stages", out)

    def test_a_failing_peer_fails_the_comparison_naming_its_log(self):
        p = self.compare("--no-stages", env={"STAND_IN_PEER_FAIL": "1"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("exited 3", p.stderr)
        self.assertIn(os.path.join(self.work, "peer.log"), p.stderr)
        with open(os.path.join(self.work, "peer.log")) as f:
            self.assertIn("asked to fail", f.read())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierflow", required=True)
    ap.add_argument("--script", required=True)
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
