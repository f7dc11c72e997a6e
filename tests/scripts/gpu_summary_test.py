#!/usr/bin/env python3
"""scripts/gpu_summary.py: the acceptance figures are read from the stages'
own output (bench kernels' JSON, the e2e comparison's), null where a stage
did not run, and the train comparison from the runs' metrics.

  gpu_summary_test.py --script scripts/gpu_summary.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def kernel(name, tflops, gb_per_s, ratio, bound=None):
    k = {"name": name, "tflops": tflops, "gb_per_s": gb_per_s, "ratio_to_peak": ratio}
    if bound is not None:
        k["bound"] = bound
    return k


class GpuSummary(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tierflow-gpu-summary-")
        self.out = os.path.join(self.tmp.name, "out")
        self.work = os.path.join(self.tmp.name, "work")
        self.logs = os.path.join(self.tmp.name, "logs")
        for d in (self.out, self.work, self.logs):
            os.makedirs(d)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, obj):
        with open(os.path.join(self.logs, name + ".out"), "w") as f:
            json.dump(obj, f)

    def metrics(self, run, losses):
        os.makedirs(os.path.join(self.work, run))
        with open(os.path.join(self.work, run, "metrics.jsonl"), "w") as f:
            for step, loss in enumerate(losses, 1):
                f.write(json.dumps({"step": step, "loss": loss}) + "\n")

    def summarize(self, commit="abc123"):
        stages = [{"stage": "bench_kernels", "rc": 0, "seconds": 3.5}]
        p = subprocess.run([sys.executable, ARGS.script, self.out, "Test GPU, 80 GiB",
                            json.dumps(stages), self.work, self.logs, commit],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.out, "summary.json")) as f:
            return json.load(f)

    def test_figures_are_the_stages(self):
        self.write("bench_kernels", {"kernels": [
            kernel("gemm", 700.0, 0.0, 1.0),
            kernel("attention_fwd_t2048", 280.0, 0.0, 0.4),
            kernel("attention_fwd_t4096", 310.5, 0.0, 0.44),
            kernel("attention_bwd_t4096", 255.25, 0.0, 0.36),
            kernel("elementwise", 0.0, 3500.0, 0.86),
            kernel("rmsnorm", 0.0, 3300.0, 0.81),
        ]})
        self.write("e2e_3b", {"figures": {"e2e_ratio_to_peer": 0.93, "e2e_model_tflops": 261.0}})
        self.metrics("cpu", [5.5, 5.0, 4.5])
        self.metrics("cuda", [5.5, 5.1, 4.4])
        s = self.summarize()
        self.assertEqual(s["gpu"], "Test GPU, 80 GiB")
        self.assertEqual(s["commit"], "abc123")
        self.assertEqual(s["stages"][0]["stage"], "bench_kernels")
        f = s["figures"]
        self.assertEqual(f["attention_fwd_tflops_t4096"], 310.5)
        self.assertEqual(f["attention_bwd_tflops_t4096"], 255.25)
        self.assertEqual(f["min_elementwise_ratio_to_copy"], 0.81)
        self.assertEqual(f["e2e_3b_ratio_to_pytorch"], 0.93)
        self.assertEqual(f["e2e_3b_model_tflops"], 261.0)
        self.assertEqual(s["bandwidth_kernels"], [["rmsnorm", 0.81], ["elementwise", 0.86]])
        t = s["tiny_llama_50"]
        self.assertEqual(t["steps"], 3)
        self.assertAlmostEqual(t["max_abs_loss_diff"], 0.1)

    def test_bound_names_the_bandwidth_kernels(self):
        # A memory-bound kernel is one bench kernels marks so, whatever its
        # other fields; a compute-bound one with a low ratio never counts.
        self.write("bench_kernels", {"kernels": [
            kernel("gemm", 700.0, 10.0, 1.0, "compute"),
            kernel("attention_bwd_t4096", 40.0, 5.0, 0.05, "compute"),
            kernel("rope_fwd", 0.0, 2800.0, 0.7, "memory"),
            kernel("swiglu_bwd", 0.0, 3400.0, 0.84, "memory"),
        ]})
        s = self.summarize()
        self.assertEqual(s["figures"]["min_elementwise_ratio_to_copy"], 0.7)
        self.assertEqual([k for k, _ in s["bandwidth_kernels"]], ["rope_fwd", "swiglu_bwd"])

    def test_a_stage_that_did_not_run_leaves_its_figures_null(self):
        self.write("bench_kernels", "not JSON at all")
        with open(os.path.join(self.logs, "e2e_3b.out"), "w") as f:
            f.write("e2e_compare: interrupted\n")
        s = self.summarize(commit="")
        self.assertIsNone(s["commit"])
        self.assertEqual(set(s["figures"]), {
            "attention_fwd_tflops_t4096", "attention_bwd_tflops_t4096",
            "min_elementwise_ratio_to_copy", "e2e_3b_ratio_to_pytorch", "e2e_3b_model_tflops"})
        self.assertTrue(all(v is None for v in s["figures"].values()), s["figures"])
        self.assertNotIn("tiny_llama_50", s)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
