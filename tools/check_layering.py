#!/usr/bin/env python3
"""Layering check (docs/architecture.md §3, rule 1): fails when a file under src/ includes a module
that its own module may not depend on. Arrows point down only; the offline half (core, spec, sched,
perf, sim, plan) never includes the runtime half; the runtime uses spec and sched but never perf,
sim or plan; only cli links both halves.

Usage: tools/check_layering.py [--root DIR]. Exit 0 when clean, 1 with one line per violation.
"""
import argparse
import pathlib
import re
import sys

# module -> modules it may include (besides itself). Keep in step with docs/architecture.md §3.
ALLOWED = {
    "core": set(),
    "spec": {"core"},
    "sched": {"core", "spec"},
    "perf": {"core", "spec", "sched"},
    "sim": {"core", "spec", "sched", "perf"},
    "plan": {"core", "spec", "sched", "perf", "sim"},
    "straggler": {"core", "spec", "sched", "perf", "sim", "plan"},
    "report": {"core", "spec", "sched", "perf", "sim", "plan"},
    "tensor": {"core"},
    "backend/cpu": {"core", "tensor"},
    "backend/cuda": {"core", "tensor", "backend/cpu"},
    "backend/emulated": {"core", "spec", "tensor", "backend/cpu"},
    "comm": {"core", "spec", "tensor"},
    "model": {"core", "spec", "tensor"},
    "parallel": {"core", "spec", "sched", "tensor", "comm", "model"},
    "train": {"core", "spec", "sched", "tensor", "backend/cpu", "backend/cuda",
              "backend/emulated", "comm", "model", "parallel"},
    "elastic": None,  # links both halves (the trainer and the straggler loop), like cli
    "cli": None,  # may include anything
}

# Unit tests (foo_test.cc, and foo_test_util.h helpers) of these modules may also include the CPU
# backend, the oracle device they run on; the modules' library code may not.
TEST_EXTRA = {
    "comm": {"backend/cpu"},
    "model": {"backend/cpu"},
    "parallel": {"backend/cpu"},
}


def is_test_file(path: pathlib.Path) -> bool:
    return path.name.endswith("_test.cc") or path.name.endswith("_test_util.h")


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def module_of(rel: pathlib.PurePath) -> str:
    parts = rel.parts
    if parts[0] == "backend" and len(parts) > 2:
        return "backend/" + parts[1]
    return parts[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    src = pathlib.Path(args.root) / "src"
    violations = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".h", ".cc", ".cu", ".cuh"}:
            continue
        rel = path.relative_to(src)
        mod = module_of(rel)
        if mod not in ALLOWED:
            violations.append(f"{path}: module '{mod}' is not in the layering table")
            continue
        allowed = ALLOWED[mod]
        if allowed is not None and is_test_file(path):
            allowed = allowed | TEST_EXTRA.get(mod, set())
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or allowed is None:
                continue
            target = pathlib.PurePath(m.group(1))
            if len(target.parts) < 2:
                continue  # same-folder include without a module prefix
            tmod = module_of(target)
            if tmod not in ALLOWED:
                continue  # not a motley module (e.g. a third-party path)
            if tmod != mod and tmod not in allowed:
                violations.append(f"{path}:{lineno}: '{mod}' may not include '{m.group(1)}' "
                                  f"(allowed: {', '.join(sorted(allowed)) or 'nothing'})")
    for v in violations:
        print(v)
    if violations:
        print(f"layering: {len(violations)} violation(s)")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
