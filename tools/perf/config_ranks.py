"""How each config of a candidate ranks across the cells of autotune journals: per (candidate, act, M), every config
timed in all of those cells, with the median and worst ratio of its quick-pass time to the cell's best quick-pass
time, and the cells whose winner it was (best final-stage time). What a default config should be chosen from.

    python -m tools.perf.config_ranks docs/perf/h200_triton_gemv_journal_m1_4_2026-11-30_s11.jsonl.gz \
        --impl triton.w8a16_gemv [--by-format]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict


def load(paths: list[str]) -> list[dict]:
    records = []
    for p in paths:
        with (gzip.open(p, "rt") if p.endswith(".gz") else open(p)) as f:
            records += [r for r in map(json.loads, f) if r.get("kind") == "result" and r.get("status") == "ok"
                        and r.get("us")]
    return records


def ranks(records: list[dict], impl: str | None = None, top: int = 4, by_format: bool = False) -> list[str]:
    quick: dict[tuple, dict[tuple, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))  # group -> cell -> cfg
    final: dict[tuple, dict[tuple, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        k = r["key"]
        if impl and k["impl"] != impl:
            continue
        group, cell = (k["impl"], k["act"], k["m"]) + ((k["fmt"],) if by_format else ()), (k["fmt"], k["n"], k["k"])
        (quick if k["stage"] == "quick" else final)[group][cell][k["config"]] = r["us"]
    lines = []
    for group in sorted(quick):
        cells = quick[group]
        ratios: dict[str, list[float]] = defaultdict(list)
        for times in cells.values():
            best = min(times.values())
            for cfg, us in times.items():
                ratios[cfg].append(us / best)
        wins = defaultdict(int)
        for times in final[group].values():
            wins[min(times, key=times.get)] += 1
        everywhere = sorted((statistics.median(v), max(v), cfg) for cfg, v in ratios.items() if len(v) == len(cells))
        fmt = f" fmt={group[3]}" if by_format else ""
        lines.append(f"{group[0]} act={group[1]} M={group[2]}{fmt}: {len(cells)} cells")
        for med, worst, cfg in everywhere[:top]:
            lines.append(f"  median {med:.2f}x  worst {worst:.2f}x  wins {wins[cfg]:>2}  {cfg}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("journals", nargs="+", help="autotune journal.jsonl files (.gz too)")
    ap.add_argument("--impl", default=None, help="only this candidate id")
    ap.add_argument("--top", type=int, default=4, help="configs listed per group")
    ap.add_argument("--by-format", action="store_true", help="one group per weight format too")
    args = ap.parse_args(argv)
    print("\n".join(ranks(load(args.journals), args.impl, args.top, args.by_format)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
