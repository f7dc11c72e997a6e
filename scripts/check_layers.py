#!/usr/bin/env python3
"""Fails when an #include crosses a layer the wrong way.

The allowed graph is the one docs/DESIGN.md draws ("Layers, enforced"): each
layer lists the layers its sources may include, besides itself and the public
headers in include/tierflow/. A few headers are interfaces that a lower layer
may include without depending on the implementation behind them (the model
sees the engine's Trainable contract, not the OffloadEngine).

Every folder of src/ (and offload/, tools/) is a layer of the graph: a source
in one the graph does not name is a violation, so a new layer cannot go
unchecked. The graph in DESIGN.md and ALLOWED below must also say the same:
a layer or an arrow in one and not the other is a violation.

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
    "engine": ["comm", "device", "optim", "offload", "common"],
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
    unknown = set()
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
                if src not in ALLOWED:
                    if src not in unknown:
                        unknown.add(src)
                        out.append(f"{rel}: layer '{src}' is not in the layer graph (ALLOWED, and "
                                   "docs/DESIGN.md's 'Layers, enforced')")
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


GRAPH_LINE = re.compile(r"^([a-z]+)\s+(->|<-)\s+(.*)$")


def design_graph(text):
    """The graph of DESIGN.md's "Layers, enforced" section, as {layer: set of deps}.

    One line per layer, "LAYER -> a, b, c" (a trailing note after two spaces
    and a parenthesis is not part of it; continuation lines are indented);
    "engine's interface (...)" is engine-interface, "any of the above" every
    layer named before, "common <- everything" nothing. A layer that may
    include the engine may include its interface too.
    """
    section = text.split("## Layers, enforced", 1)
    if len(section) < 2 or "```" not in section[1]:
        return None
    block = section[1].split("```")[1]
    graph = {}
    for line in block.splitlines():
        m = GRAPH_LINE.match(line)
        if not m:
            continue
        layer, arrow, rest = m.groups()
        deps = set()
        if arrow == "->":
            rest = re.split(r"\s{2,}\(", rest)[0].strip()
            if rest == "any of the above":
                deps = set(graph) | {"engine-interface"}
            else:
                rest = re.sub(r"engine's interface(\s*\([^)]*\))?", "engine-interface", rest)
                deps = {d.strip() for d in rest.split(",") if d.strip()}
        if "engine" in deps:
            deps.add("engine-interface")
        graph[layer] = deps
    return graph


def design_mismatches(root):
    path = os.path.join(root, "docs", "DESIGN.md")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        graph = design_graph(f.read())
    if graph is None:
        return ["docs/DESIGN.md: no graph under 'Layers, enforced'"]
    out = []
    for layer in sorted(set(graph) | set(ALLOWED)):
        if layer not in graph:
            out.append(f"docs/DESIGN.md: layer '{layer}' is in ALLOWED but not in the graph")
            continue
        if layer not in ALLOWED:
            out.append(f"docs/DESIGN.md: layer '{layer}' is in the graph but not in ALLOWED")
            continue
        allowed = set(ALLOWED[layer])
        if "engine" in allowed:
            allowed.add("engine-interface")
        for dep in sorted(graph[layer] - allowed):
            out.append(f"docs/DESIGN.md: '{layer} -> {dep}' is in the graph but not in ALLOWED")
        for dep in sorted(allowed - graph[layer]):
            out.append(f"docs/DESIGN.md: '{layer} -> {dep}' is in ALLOWED but not in the graph")
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
        put("src/comm/ok.cc", '#include "optim/grad_accumulate.h"\n')
        put("src/bench/ok.cc", '#include "engine/offload_engine.h"\n#include "kernels/gemm.h"\n')
        assert violations(root) == [], violations(root)
        put("src/offload_user/x.cc", "")
        put("src/train/bad.cc", '#include "tier/swap_reader.h"\n')
        put("src/model/bad.h", '#include "engine/offload_engine.h"\n')
        put("offload/bad.cc", '#include "model/transformer.h"\n')
        put("src/engine/bad.cc", '#include "kernels/pointwise.h"\n')
        put("src/comm/bad.cc", '#include "engine/offload_engine.h"\n')
        put("src/bench/bad.cc", '#include "train/trainer.h"\n')
        found = violations(root)
        assert len(found) == 7, found
        assert any("src/offload_user/x.cc" in v and "not in the layer graph" in v for v in found), found
        for planted in ("src/train/bad.cc:1", "src/model/bad.h:1", "offload/bad.cc:1",
                        "src/engine/bad.cc:1", "src/comm/bad.cc:1", "src/bench/bad.cc:1"):
            assert any(planted in v for v in found), (planted, found)

    # The graph in DESIGN.md against ALLOWED: this repository's agrees; a
    # planted extra arrow, a missing one and a missing layer are each caught.
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    assert design_mismatches(here) == [], design_mismatches(here)
    with open(os.path.join(here, "docs", "DESIGN.md"), encoding="utf-8") as f:
        design = f.read()
    graph = design_graph(design)
    assert graph is not None and set(graph) == set(ALLOWED), graph
    assert "kernels" not in graph["engine"] and "engine-interface" in graph["model"], graph
    assert graph["tools"] >= set(ALLOWED) - {"tools"}, graph
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))

        def mismatches(text):
            with open(os.path.join(root, "docs", "DESIGN.md"), "w", encoding="utf-8") as f:
                f.write(text)
            return design_mismatches(root)
        line = re.search(r"^engine +-> .*$", design, re.M).group(0)
        extra = mismatches(design.replace(line, line.replace("-> ", "-> kernels, ", 1)))
        assert extra == ["docs/DESIGN.md: 'engine -> kernels' is in the graph but not in ALLOWED"], extra
        missing = mismatches(design.replace(line, line.replace("comm, ", "", 1)))
        assert missing == ["docs/DESIGN.md: 'engine -> comm' is in ALLOWED but not in the graph"], missing
        line = re.search(r"^bench +-> .*$", design, re.M).group(0)
        gone = mismatches(design.replace(line + "\n", ""))
        assert any("layer 'bench' is in ALLOWED but not in the graph" in v for v in gone), gone
    print("check_layers.py: self-test passed (planted wrong-way includes, an unknown layer and "
          "a graph that disagrees with DESIGN.md are caught)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    found = violations(root) + design_mismatches(root)
    for v in found:
        print(v)
    if found:
        print(f"check_layers.py: {len(found)} violation(s) of the layer graph "
              "(docs/DESIGN.md, 'Layers, enforced')", file=sys.stderr)
        return 1
    print("check_layers.py: every include follows the layer graph, and DESIGN.md draws it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
