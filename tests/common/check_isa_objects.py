#!/usr/bin/env python3
"""Checks the per-level objects of the host loops (src/common/cpu_isa.h).

Each instruction-set level's objects (tierflow_isa_objects in CMakeLists.txt)
must hold only code that level's CPUs run, and must share nothing with the
other levels that the linker could merge: an inline function compiled into
both the AVX2 and the AVX-512 objects is a weak symbol, and the linker keeps
one copy for both, so the AVX2 path could run AVX-512 code.

  check_isa_objects.py --baseline A.o... --avx2 B.o... --avx512 C.o...

Violations (each printed as "KIND: detail"; exit status 1 when any):
  evex       an EVEX-encoded instruction, a zmm or an opmask register in the
             avx2 or baseline objects
  vex        a VEX-encoded instruction or a ymm register in the baseline objects
  weak       a weak symbol (nm W/V/w/v) in any level's objects
  shared     a defined global symbol of one level also defined by another
  undefined  a call to C++ code outside the objects (an undefined _Z symbol):
             an out-of-line copy of a header function, which could be another
             level's
  namespace  a defined global symbol outside the level's own namespace
             (tierflow::isa_LEVEL)

--expect KIND,... inverts the check for planted objects: succeeds only when
every listed kind is reported (tests/common/isa_planted.cc).
"""
import argparse
import re
import subprocess
import sys

LEVELS = ("baseline", "avx2", "avx512")
# What sanitizer instrumentation adds (ASan's ODR indicators for globals):
# per-object names, never merged across levels.
SANITIZER_SYMBOL = re.compile(r"^(__odr_asan|___?asan|__ubsan|__tsan|__sancov)")
LEGACY_PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67}


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def instructions(obj):
    """Yields (bytes, text) for each instruction objdump decodes in obj."""
    for line in run(["objdump", "-d", "-w", obj]).splitlines():
        m = re.match(r"^\s*[0-9a-f]+:\s+((?:[0-9a-f]{2} )+)\s*(.*)$", line)
        if m:
            yield bytes(int(b, 16) for b in m.group(1).split()), m.group(2)


def first_opcode_byte(code):
    i = 0
    while i < len(code) and code[i] in LEGACY_PREFIXES:
        i += 1
    return code[i] if i < len(code) else None


def check_encodings(level, obj, violations):
    for code, text in instructions(obj):
        if not text or text.startswith("("):
            continue  # continuation line of a long instruction
        op = first_opcode_byte(code)
        if level in ("baseline", "avx2"):
            if op == 0x62 or "zmm" in text or re.search(r"%k[0-7]\b", text) or re.search(
                    r"%[xy]mm(1[6-9]|2[0-9]|3[01])\b", text):
                violations.append(f"evex: {obj} ({level}): {text.strip()}")
        if level == "baseline":
            if op in (0xC4, 0xC5) or "ymm" in text:
                violations.append(f"vex: {obj} ({level}): {text.strip()}")


def symbols(obj):
    """(kind, mangled name, demangled name) for each symbol nm lists in obj."""
    raw = run(["nm", obj]).splitlines()
    readable = run(["nm", "-C", obj]).splitlines()
    result = []
    for line, pretty in zip(raw, readable):
        parts = line.split(maxsplit=2)
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        pretty_name = pretty.split(maxsplit=2 if len(parts) == 3 else 1)[-1]
        result.append((kind, name, pretty_name))
    return result


def check(objects):
    violations = []
    defined_by = {}
    readable = {}
    for level, objs in objects.items():
        for obj in objs:
            check_encodings(level, obj, violations)
            for kind, name, pretty in symbols(obj):
                readable[name] = pretty
                if name.startswith("DW.ref."):
                    # The compiler's pointer to the exception personality
                    # routine (e.g. __gxx_personality_v0) for unwind tables,
                    # emitted weak and identical in every object: data, no code.
                    continue
                if kind in "WVwv":
                    violations.append(f"weak: {obj} ({level}): {pretty}")
                elif kind == "U":
                    if name.startswith("_Z"):
                        violations.append(f"undefined: {obj} ({level}): {pretty}")
                    continue
                elif not kind.isupper() or SANITIZER_SYMBOL.match(name):
                    continue  # local (invisible to the linker) or a sanitizer's own
                elif not pretty.startswith(f"tierflow::isa_{level}::"):
                    violations.append(f"namespace: {obj} ({level}): {pretty}")
                defined_by.setdefault(name, set()).add(level)
    for name, levels in sorted(defined_by.items()):
        if len(levels) > 1:
            violations.append(f"shared: {readable[name]} defined by {', '.join(sorted(levels))}")
    return violations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for level in LEVELS:
        parser.add_argument(f"--{level}", nargs="*", default=[], metavar="OBJ")
    parser.add_argument("--expect", default="", help="comma-separated kinds that must be found")
    args = parser.parse_args()
    objects = {level: getattr(args, level) for level in LEVELS}
    if not any(objects.values()):
        parser.error("no objects given")
    violations = check(objects)
    if args.expect:
        expected = set(args.expect.split(","))
        found = {v.split(":", 1)[0] for v in violations}
        missing = expected - found
        for v in violations:
            print(f"found (planted): {v}")
        if missing:
            print(f"check_isa_objects: planted violations not detected: {', '.join(sorted(missing))}",
                  file=sys.stderr)
            return 1
        print(f"check_isa_objects: every planted violation detected ({', '.join(sorted(expected))})")
        return 0
    for v in violations:
        print(v)
    if violations:
        print(f"check_isa_objects: {len(violations)} violation(s)", file=sys.stderr)
        return 1
    count = sum(len(o) for o in objects.values())
    print(f"check_isa_objects: {count} objects clean (no EVEX/zmm below avx512, no VEX in "
          "baseline, no weak, shared or outside symbols)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
