"""How good is the dispatcher without any tuned table? Replays a bench run's measurements.

For every (format, act, N, K, M) cell of a `tools.bench` results.json, asks `dispatch.select` with NO tables
(the analytic heuristic alone) on a simulated target of the bench's arch, and compares the measured time of
the candidate it picks with the best measured candidate of that cell. This is the fallback a shape in no
table gets (issue 7 asks for within 15 % of autotuned).

    python -m tools.heuristic_eval docs/perf/h200_bench_results_2026-11-29.json

Note: the heuristic's priors were fitted to that same run (dispatch/heuristic.py), so on it the score is
in-sample; a later run on new shapes is the out-of-sample check.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dispatch import registry
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.select import select
from dispatch.tables import EMPTY
from dispatch.target import Target


def evaluate(results: dict[str, Any], arch: str = "sm_90", torch_version: str = "2.11.0",
             slack: float = 1.15) -> dict[str, Any]:
    target = Target.simulated_for(arch, torch_version=torch_version)
    cands = registry.candidates()
    cells, misses = [], []
    for e in results["main"]:
        best: dict[str, float] = {}
        for row in e["rows"]:
            cid = row["route"].split(" ")[0]
            if row.get("status") == "ok" and row.get("us") and "." in cid and not cid.startswith("dispatch"):
                best[cid] = min(best.get(cid, float("inf")), row["us"])
        if not best:
            continue
        p = Problem(Format(e["format"]), Act(e["act"]), e["m"], e["n"], e["k"])
        pick = select(p, target, EMPTY, cands, unavailable={}).candidate_id
        fastest = min(best, key=best.get)
        ratio = best[pick] / best[fastest] if pick in best else float("inf")
        cell = {"format": e["format"], "act": e["act"], "n": e["n"], "k": e["k"], "m": e["m"], "pick": pick,
                "fastest": fastest, "ratio": ratio}
        cells.append(cell)
        if ratio > slack:
            misses.append(cell)
    ok = sum(c["ratio"] <= slack for c in cells)
    return {"cells": len(cells), "within": ok, "slack": slack, "misses": misses}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="results.json written by tools.bench")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--torch-version", default="2.11.0")
    args = ap.parse_args(argv)
    with open(args.results) as f:
        r = evaluate(json.load(f), args.arch, args.torch_version)
    print(f"heuristic alone (no tables): {r['within']} of {r['cells']} cells within "
          f"{(r['slack'] - 1) * 100:.0f}% of the fastest measured candidate")
    for c in r["misses"]:
        print(f"  {c['format']}/{c['act']} {c['n']}x{c['k']} M={c['m']}: picks {c['pick']} "
              f"({c['ratio']:.2f}x the fastest, {c['fastest']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
