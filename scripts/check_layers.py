#!/usr/bin/env python3
"""Fails when an #include crosses a layer the wrong way.

The allowed graph is the one docs/DESIGN.md draws ("Layers, enforced"): each
layer lists the layers its sources may include, besides itself and the public
headers in include/tierflow/. A few headers are interfaces that a lower layer
may include without depending on the implementation behind them (the model
sees the engine's Trainable contract, not the OffloadEngine).

Usage: scripts/check_layers.py [ROOT]   (exit 1 and one line per violation)
       scripts/check_layers.py --self-test
"""
import os
import re
import sys

# layer -> layers it may include (transitively closed below).
ALLOWED = {
    "common": [],
    "device": ["common"],
    "kernels": ["device", "common"],
    "optim": ["common"],
    "comm": ["optim", "common"],
    "offload": ["common"],
    "io": ["common"],
    "data": ["io", "common"],
    "model": ["kernels", "device", "io", "common", "engine-interface"],
    "plan": ["io", "common"],
    "engine": ["comm", "kernels", "device", "optim", "offload", "common", "engine-interface"],
    "checkpoint": ["offload", "io", "common", "engine-interface"],
    "train": ["checkpoint", "comm", "engine", "model", "data", "plan", "io", "offload", "optim", "device", "common",
              "engine-interface"],
    "bench": ["comm", "engine", "model", "data", "plan", "io", "kernels", "device", "optim", "offload", "common",
              "engine-interface"],
    "tier": ["checkpoint", "offload", "io", "plan", "common"],
    "tools": ["checkpoint", "comm", "bench", "tier", "train", "engine", "model", "data", "plan", "io", "offload", "optim",
              "kernels", "device", "common", "engine-interface"],
}

# Headers of a layer that are its interface, usable where the layer is not.
INTERFACES = {
    "engine/trainable.h": "engine-interface",
    "engine/engine_options.h": "engine-interface",
    "engine/loss_scaler.h": "engine-interface",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_source(rel):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("offload", "tools"):
        return parts[0]
    return None  # include/, tests/, fuzz/: not layered


def layer_of_include(inc):
    if inc in INTERFACES:
        return INTERFACES[inc]
    head = inc.split("/")[0]
    if head == "tierflow":
        return "public"
    if head in ALLOWED:
        return head
    return None  # a header beside the file, or a system/third-party header in quotes


def violations(root):
    out = []
    for top in ("src", "offload", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh", ".inc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                src = layer_of_source(rel)
                if src is None:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = layer_of_include(m.group(1))
                        if dst in (None, "public", src):
                            continue
                        if dst == "engine-interface" and src == "engine":
                            continue
                        if dst not in ALLOWED[src]:
                            out.append(f"{rel}:{lineno}: layer '{src}' may not include "
                                       f"\"{m.group(1)}\" (layer '{dst}')")
    return out


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        def put(rel, text):
            p = os.path.join(root, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        put("src/model/ok.cc", '#include "engine/trainable.h"\n#include "kernels/gemm.h"\n')
        put("src/engine/ok.cc", '#include "offload/state_store.h"\n#include "engine/trainable.h"\n')
        assert violations(root) == [], violations(root)
        put("src/offload_user/x.cc", "")
        put("src/train/bad.cc", '#include "tier/swap_reader.h"\n')
        put("src/model/bad.h", '#include "engine/offload_engine.h"\n')
        put("offload/bad.cc", '#include "model/transformer.h"\n')
        found = violations(root)
        assert len(found) == 3, found
        assert any("src/train/bad.cc:1" in v for v in found), found
        assert any("src/model/bad.h:1" in v for v in found), found
        assert any("offload/bad.cc:1" in v for v in found), found
    print("check_layers.py: self-test passed (a planted wrong-way include is caught)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers.py: {len(found)} include(s) cross a layer the wrong way "
              "(docs/DESIGN.md, 'Layers, enforced')", file=sys.stderr)
        return 1
    print("check_layers.py: every include follows the layer graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
