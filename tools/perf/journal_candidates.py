"""Every candidate's time per cell from autotune journals, in the docs/perf/h200_candidates_*.json layout that
tools.perf.peers, tools.perf.fit_priors and tests/test_heuristic_eval.py read:

    python -m tools.perf.journal_candidates OUT.json --source "what ran" JOURNAL.jsonl [JOURNAL.jsonl ...]

One row per (candidate, config) and cell: its final-stage time where the autotune re-timed it, else its quick-stage
time; failed measurements keep their status with no time. Later journals win for the same (cell, candidate, config).
"""

from __future__ import annotations

import argparse
import json


def collect(paths: list[str]) -> list[dict]:
    best: dict[tuple, dict[tuple, tuple[int, str, float | None]]] = {}
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            if r.get("kind") != "result":
                continue
            k = r["key"]
            cell = (k["fmt"], k["act"], k["n"], k["k"], k["m"])
            rank = 1 if k.get("stage") == "final" else 0
            slot = (k["impl"], k["config"])
            old = best.setdefault(cell, {}).get(slot)
            if old is None or rank >= old[0]:
                best[cell][slot] = (rank, r["status"], r.get("us") if r["status"] == "ok" else None)
    return [{"format": f, "act": a, "n": n, "k": kk, "m": m,
             "rows": [{"route": impl, "status": st, "us": us} for (impl, _), (_, st, us) in sorted(rows.items())]}
            for (f, a, n, kk, m), rows in sorted(best.items())]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("journals", nargs="+")
    ap.add_argument("--source", required=True, help="what ran: session, command, sources digest, device, versions")
    a = ap.parse_args(argv)
    cells = collect(a.journals)
    with open(a.out, "w") as f:
        json.dump({"source": a.source, "main": cells}, f, indent=1)
    print(f"{len(cells)} cells, {sum(len(c['rows']) for c in cells)} rows -> {a.out}")


if __name__ == "__main__":
    main()
