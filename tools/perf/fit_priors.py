"""Fit the heuristic's memory-bound prior of a decode kernel to measurements (what dispatch/heuristic.py's
Triton GEMV priors were refit to in session 11):

    us = bytes / (mem_gbps x bw_eff) + fixed_us,  bytes = dispatch.heuristic.call_bytes (codes + scales, x, y: bf16)

by least squares per (candidate, format/act) over every measured cell, then the largest relative residual and the
shipped prior next to it (`dispatch.heuristic.MEASURED_PRIORS`; with `--m 1` / `--m 16`, `ONE_ROW_PRIORS` /
`ROWS_16_PRIORS` where they have the pair).

    python -m tools.perf.fit_priors docs/perf/h200_triton_gemv_summary_2026-11-30_s11.json
    python -m tools.perf.fit_priors docs/perf/h200_candidates_triton_gemm_decode_2026-11-30_s12.json --m 1,4,16
    python -m tools.perf.fit_priors docs/perf/h200_candidates_triton_gemv_2026-12-01_s34.json --m 16 --relative

Input: an autotune summary ({"problems": [{format, act, n, k, m, winner, us}]}: each cell's winner) or a candidates
file ({"main": [{format, act, n, k, m, rows: [{route, status, us}]}]}: each candidate's best per cell).
mem_gbps: the arch's ArchSpec (sm_90: the rate the heuristic divides by), not the run's copy ceiling.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class Fit:
    candidate: str
    fmt: str
    act: str
    cells: int
    bw_eff: float
    fixed_us: float
    max_rel_residual: float


def _cells(data: dict[str, Any]) -> list[tuple[str, str, str, int, int, int, float]]:
    """(candidate, format, act, n, k, m, best us) per measured cell and candidate."""
    out = []
    if "problems" in data:
        for p in data["problems"]:
            if p.get("us"):
                out.append((p["winner"], p["format"], p["act"], p["n"], p["k"], p["m"], float(p["us"])))
        return out
    for e in data["main"]:
        best: dict[str, float] = {}
        for r in e["rows"]:
            if r.get("status") == "ok" and r.get("us") and "." in r["route"] and not r["route"].startswith("baseline"):
                best[r["route"]] = min(best.get(r["route"], float("inf")), float(r["us"]))
        out += [(cid, e["format"], e["act"], e["n"], e["k"], e["m"], us) for cid, us in best.items()]
    return out


def fit(data: dict[str, Any], arch: str = "sm_90", ms: tuple[int, ...] | None = None,
        relative: bool = False) -> list[Fit]:
    """`relative`: least squares of the relative residuals ((fit - us) / us, i.e. weights 1 / us^2), so a 7 us cell
    counts as much as a 150 us one (session 34's Triton GEMV priors); else of the absolute residuals."""
    import torch

    from dispatch.formats import Act, Format
    from dispatch.heuristic import call_bytes
    from dispatch.problem import Problem
    from dispatch.target import Target

    bw = Target.simulated_for(arch).spec.mem_gbps * 1e3  # bytes per us
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for cid, fmt, act, n, k, m, us in _cells(data):
        if ms is not None and m not in ms:
            continue
        p = Problem(Format(fmt), Act(act), m, n, k, torch.bfloat16, torch.bfloat16)
        groups.setdefault((cid, fmt, act), []).append((call_bytes(p), us))
    fits = []
    for (cid, fmt, act), pts in sorted(groups.items()):
        n = len(pts)
        if n < 2:
            continue
        wts = [1.0 / (y * y) if relative else 1.0 for _, y in pts]
        sw = sum(wts)
        mx = sum(w * x for w, (x, _) in zip(wts, pts)) / sw
        my = sum(w * y for w, (_, y) in zip(wts, pts)) / sw
        sxx = sum(w * (x - mx) ** 2 for w, (x, _) in zip(wts, pts))
        if sxx == 0:
            continue
        slope = sum(w * (x - mx) * (y - my) for w, (x, y) in zip(wts, pts)) / sxx  # us per byte
        fixed = my - slope * mx
        eff = 1.0 / (slope * bw) if slope > 0 else float("inf")
        worst = max(abs(slope * x + fixed - y) / y for x, y in pts)
        fits.append(Fit(cid, fmt, act, n, eff, fixed, worst))
    return fits


def main(argv: list[str] | None = None) -> None:
    from dispatch.formats import Format
    from dispatch.heuristic import MEASURED_PRIORS, ONE_ROW_PRIORS, ROWS_16_PRIORS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--m", default="", help="only these M values (comma list)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--relative", action="store_true", help="least squares of the relative residuals")
    a = ap.parse_args(argv)
    ms = tuple(int(v) for v in a.m.split(",")) if a.m else None
    print("| candidate | format/act | cells | bw_eff | fixed us | worst residual | shipped prior (bw_eff / fixed) |")
    print("|---|---|---|---|---|---|---|")
    for f in fit(json.load(open(a.path)), a.arch, ms, relative=a.relative):
        pair = (f.candidate, Format(f.fmt))
        pr = (ONE_ROW_PRIORS.get(pair) if ms == (1,) else None) or (ROWS_16_PRIORS.get(pair) if ms == (16,) else None) \
            or MEASURED_PRIORS.get(pair)
        shipped = f"{pr.bw_eff:.2f} / {pr.fixed_us:.1f}" if pr else "-"
        print(f"| {f.candidate} | {f.fmt}/{f.act} | {f.cells} | {f.bw_eff:.2f} | {f.fixed_us:.1f} | "
              f"{100 * f.max_rel_residual:.0f} % | {shipped} |")


if __name__ == "__main__":
    main()
