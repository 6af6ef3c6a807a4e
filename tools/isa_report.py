"""Ahead-of-time ISA report: every kernel variant x target -> compiled or the error, with the matrix
instruction family, fp8 conversions (hardware / software), the widest global load, spills, on wgmma
kernels the writes to registers an unfinished wgmma still reads (dispatch.isa.wgmma_register_hazards), and for
the Triton and CUDA rows the barriers in the main loop (dispatch.isa.main_loop_barriers / gcn_main_loop_barriers: a
pipeline's are expected, a layout conversion's through shared memory are a cost; informational), and whether
ptxas serialized a kernel's wgmmas (its info C7515, which Triton's compile never shows: each wgmma then waits for
the one before; informational).

Aggregates `isa_rows()` of kernels_triton.isa, kernels_cuda.isa and kernels_hip.isa (each when importable;
a backend that cannot be imported is listed with the reason). Needs no GPU. Exits 1 when a (kernel, target)
that its backend declares supported failed to compile, or compiled with a wgmma register hazard, so CI
catches a kernel that stopped building or that ptxas made racy.

    python tools/isa_report.py [--backend triton] [--target sm_90,gfx1201] [--jobs N] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

BACKENDS = {"triton": "kernels_triton.isa", "cuda": "kernels_cuda.isa", "hip": "kernels_hip.isa"}


def _collect(backend: str, module: str, targets, jobs):
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # a missing optional toolkit makes that backend's rows unavailable, not the report
        return [], f"{backend}: not importable ({type(e).__name__}: {e})"
    fn = mod.isa_rows
    params = inspect.signature(fn).parameters
    kwargs = {}
    if targets and "targets" in params:
        kwargs["targets"] = tuple(targets)
    if "jobs" in params:
        kwargs["jobs"] = jobs
    rows = list(fn(**kwargs))
    if targets:
        rows = [r for r in rows if r.target in targets]
    return rows, ""


def _table(rows) -> str:
    head = ("backend", "kernel", "target", "supported", "result", "mma", "fp8 cvt", "widest ld", "wgmma hz",
            "wgmma ser", "loop bar", "spills")
    lines = [head]
    for r in sorted(rows, key=lambda r: (r.backend, r.kernel, r.target)):
        result = "compiled" if r.compiled else f"ERROR: {r.error}"
        lines.append((r.backend, r.kernel, r.target, "yes" if r.supported else "no", result, r.mma or "-",
                      r.fp8_cvt or "-", f"{r.widest_load_bits}b" if r.compiled else "-",
                      str(r.wgmma_hazards) if r.compiled and r.mma.startswith("wgmma") else "-",
                      ("yes" if r.wgmma_serialized else "no") if r.compiled and r.mma.startswith("wgmma") else "-",
                      str(r.loop_barriers) if r.compiled and r.loop_barriers >= 0 else "-",
                      str(r.spills) if r.compiled else "-"))
    widths = [min(60, max(len(x[i]) for x in lines)) for i in range(len(head) - 1)]
    out = []
    for x in lines:
        out.append("  ".join(c.ljust(w)[:max(w, 8)] for c, w in zip(x[:-1], widths)) + "  " + x[-1])
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="", help="comma list of backends (triton,cuda,hip); default all")
    ap.add_argument("--target", default="", help="comma list of targets (sm_80,sm_89,sm_90,gfx1201); default all")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile processes")
    ap.add_argument("--json", default="", help="also write the rows as JSON here")
    a = ap.parse_args(argv)
    backends = [b for b in a.backend.split(",") if b] or list(BACKENDS)
    targets = [t for t in a.target.split(",") if t]
    t0 = time.time()
    rows, notes = [], []
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r}; known: {', '.join(BACKENDS)}")
        r, note = _collect(b, BACKENDS[b], targets, a.jobs)
        rows += r
        if note:
            notes.append(note)
    print(_table(rows))
    for n in notes:
        print(f"note: {n}")
    failed = [r for r in rows if r.failed_supported]
    unsafe = [r for r in rows if r.unsafe_supported]
    spilled = [r for r in rows if r.compiled and r.spills > 0]
    serial = [r for r in rows if r.compiled and r.wgmma_serialized]
    print(f"\n{len(rows)} rows, {sum(r.compiled for r in rows)} compiled, {len(failed)} supported-but-failed, "
          f"{len(unsafe)} supported with wgmma register hazards, {len(serial)} with wgmma serialized by ptxas, "
          f"{len(spilled)} with spills, {time.time() - t0:.0f} s")
    if serial:
        print(f"note: ptxas serialized the wgmmas of {len(serial)} rows ({serial[0].wgmma_serialized})")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    for r in failed:
        print(f"FAILED (supported): {r.backend} {r.kernel} on {r.target}: {r.error}", file=sys.stderr)
    for r in unsafe:
        print(f"UNSAFE (supported): {r.backend} {r.kernel} on {r.target}: {r.wgmma_hazards} writes to registers an "
              "unfinished wgmma reads (dispatch.isa.wgmma_register_hazards)", file=sys.stderr)
    return 1 if failed or unsafe else 0


if __name__ == "__main__":
    sys.exit(main())
