"""How good is the dispatcher without any tuned table? Replays a bench run's measurements.

For every (format, act, N, K, M) cell of a `tools.bench` results.json, asks `dispatch.select` with NO tables
(the analytic heuristic alone) on a simulated target of the bench's arch, and compares the measured time of
the candidate it picks with the best measured candidate of that cell. This is the fallback a shape in no
table gets (issue 7 asks for within 15 % of autotuned).

    python -m tools.heuristic_eval docs/perf/h200_bench_results_2026-11-29.json
    python -m tools.heuristic_eval --journal J1.jsonl [J2.jsonl ...]   # autotune journals: every candidate timed
    python -m tools.heuristic_eval --journal ... --leave-one-shape-out tuning_db/nvidia_h200.yaml
    python -m tools.heuristic_eval --journal J.jsonl --write-cells docs/perf/h200_candidates_DATE.json --source "..."
    python -m tools.heuristic_eval --journal ... --leave-one-shape-out TABLE --without-backends cuda   # no CuPy

Note: the heuristic's priors were fitted to that same run (dispatch/heuristic.py), so on it the score is
in-sample; a later run on new shapes is the out-of-sample check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from dispatch import registry, tables
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.select import select
from dispatch.tables import EMPTY
from dispatch.target import Target


def evaluate(results: dict[str, Any], arch: str = "sm_90", torch_version: str = "2.11.0",
             slack: float = 1.15, table: "tables.Table | None" = None,
             without_backends: tuple[str, ...] = (), without_candidates: tuple[str, ...] = ()) -> dict[str, Any]:
    """`table`: leave-one-shape-out instead of no tables: each cell is decided with `table` minus every entry
    of the cell's own (N, K), i.e. the whole fallback chain (nearest measured shape, then the heuristic) as a
    shape in no table meets it. `without_backends`: as an install without them (e.g. "cuda": no CuPy) meets it;
    their measurements leave the cells too. `without_candidates`: candidate ids left out the same way (those added
    after the run: it cannot judge them). A pick with no measurement in its cell counts against the score
    (`unmeasured` says how many)."""
    target = Target.simulated_for(arch, torch_version=torch_version)
    cands = [c for c in registry.candidates() if c.backend not in without_backends and c.id not in without_candidates]
    # Replay the decisions as they were when measured: the table's entries count as current even after the
    # kernel sources changed (the live dispatcher would skip them as stale until the next autotune).
    measured_hash = {e.impl: e.source_hash for e in table.entries} if table is not None else {}

    def as_measured(c: Any) -> str:
        return measured_hash.get(c.id) or registry.source_hash(c)

    cells, misses = [], []
    formats = {f.value for f in Format}
    for e in results["main"]:
        if e["format"] not in formats:
            continue  # the run's bf16 baseline, which autotune journals hold as cells of format "bf16"
        best: dict[str, float] = {}
        for row in e["rows"]:
            cid = row["route"].split(" ")[0]
            if (row.get("status") == "ok" and row.get("us") and "." in cid and not cid.startswith("dispatch")
                    and cid.split(".")[0] not in without_backends):
                best[cid] = min(best.get(cid, float("inf")), row["us"])
        if not best:
            continue
        p = Problem(Format(e["format"]), Act(e["act"]), e["m"], e["n"], e["k"])
        ts = EMPTY
        if table is not None:
            rest = dataclasses.replace(table, entries=tuple(x for x in table.entries if (x.n, x.k) != (p.n, p.k)))
            ts = tables.TableSet((tables.Tier("device", rest),))
        pick = select(p, target, ts, cands, unavailable={}, source_hash=as_measured).candidate_id
        fastest = min(best, key=best.get)
        ratio = best[pick] / best[fastest] if pick in best else float("inf")
        cell = {"format": e["format"], "act": e["act"], "n": e["n"], "k": e["k"], "m": e["m"], "pick": pick,
                "fastest": fastest, "ratio": ratio}
        cells.append(cell)
        if ratio > slack:
            misses.append(cell)
    ok = sum(c["ratio"] <= slack for c in cells)
    unmeasured = sum(c["ratio"] == float("inf") for c in cells)
    return {"cells": len(cells), "within": ok, "slack": slack, "misses": misses, "unmeasured": unmeasured}


def results_from_journals(lines_per_journal: list[list[str]]) -> dict[str, Any]:
    """The bench-results shape ({"main": [cells with rows]}) built from autotune journals: per cell and
    candidate the best measured time, a config's final-stage time preferred over its quick one. Later journals
    are merged in (a re-tune of some candidates adds to the cells)."""
    records = [json.loads(line) for lines in lines_per_journal for line in lines if line.strip()]
    records = [r for r in records if r.get("kind") == "result" and r.get("status") == "ok" and r.get("us")]
    # One code version per implementation: the last one measured (a journal can span kernel edits).
    latest = {r["key"]["impl"]: r["key"].get("source_hash") for r in records}
    times: dict[tuple, dict[tuple, dict[str, float]]] = {}
    for rec in records:
        k = rec["key"]
        if k.get("source_hash") != latest[k["impl"]]:
            continue
        cell = (k["fmt"], k["act"], int(k["n"]), int(k["k"]), int(k["m"]))
        times.setdefault(cell, {}).setdefault((k["impl"], k["config"]), {})[k["stage"]] = float(rec["us"])
    main = []
    for (fmt, act, n, k, m), per_cfg in sorted(times.items()):
        rows = [{"route": impl, "status": "ok", "us": st.get("final", st.get("quick"))}
                for (impl, _cfg), st in per_cfg.items()]
        main.append({"format": fmt, "act": act, "n": n, "k": k, "m": m, "rows": rows})
    return {"main": main}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?", help="results.json written by tools.bench")
    ap.add_argument("--journal", nargs="+", default=[], help="autotune journal.jsonl files instead of results")
    ap.add_argument("--leave-one-shape-out", metavar="TABLE",
                    help="decide each cell with this table minus the cell's own shape (the fallback chain)")
    ap.add_argument("--write-cells", metavar="OUT.json",
                    help="with --journal: also write the per-cell best times (the docs/perf/h200_candidates_*.json form)")
    ap.add_argument("--source", default="", help="with --write-cells: where the journals came from (stored as 'source')")
    ap.add_argument("--without-backends", default="",
                    help="comma list of backends to replay as absent (e.g. cuda: an install without CuPy)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--torch-version", default="2.11.0")
    args = ap.parse_args(argv)
    if args.journal:
        data = results_from_journals([open(p).read().splitlines() for p in args.journal])
        if args.write_cells:
            with open(args.write_cells, "w") as f:
                json.dump({"source": args.source, **data}, f, indent=1)
    elif args.results:
        with open(args.results) as f:
            data = json.load(f)
    else:
        ap.error("give a results.json or --journal")
    table = tables.load_table(args.leave_one_shape_out) if args.leave_one_shape_out else None
    without = tuple(b for b in args.without_backends.split(",") if b)
    r = evaluate(data, args.arch, args.torch_version, table=table, without_backends=without)
    how = "fallback chain, own shape left out of the table" if table is not None else "heuristic alone (no tables)"
    print(f"{how}{' without ' + ', '.join(without) if without else ''}: {r['within']} of {r['cells']} cells within "
          f"{(r['slack'] - 1) * 100:.0f}% of the fastest measured candidate ({r['unmeasured']} picks unmeasured)")
    for c in r["misses"]:
        print(f"  {c['format']}/{c['act']} {c['n']}x{c['k']} M={c['m']}: picks {c['pick']} "
              f"({c['ratio']:.2f}x the fastest, {c['fastest']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
