"""Reads a training run's metrics.jsonl (one JSON object a step) for the
scripts that report on runs (e2e_compare.py, gpu_summary.py)."""
import json


def read_by_step(path):
    """The file's records by their "step"; a step written twice keeps its last record."""
    by_step = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                by_step[r["step"]] = r
    return by_step
