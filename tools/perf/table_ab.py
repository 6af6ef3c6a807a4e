"""Cell-by-cell comparison of two tuning tables written by the same autotune run with one change between them
(the same-run A/Bs of tools/perf/ab_*.sh): the best time of each table key (format, act, N, K, M bucket) in both,
their ratio, and the geomean per format/act and over all cells.

    python -m tools.perf.table_ab BASE.yaml NEW.yaml [--labels base,new]

The ratio is BASE / NEW: above 1 the NEW variant is faster.
"""

from __future__ import annotations

import argparse
import collections
import math
import sys

from dispatch.tables import load_table


def best_times(path: str) -> dict[tuple, float]:
    """Table key (format, act, N, K, M bucket) -> the entry's time (us)."""
    return {e.key: e.us for e in load_table(path).entries}


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--labels", default="base,new", help="two names for the columns")
    a = ap.parse_args(argv)
    lb, ln = a.labels.split(",")
    base, new = best_times(a.base), best_times(a.new)
    keys = sorted(set(base) & set(new), key=lambda k: (k[0].value, k[1].value) + k[2:])
    per_format: dict[str, list[float]] = collections.defaultdict(list)
    for k in keys:
        r = base[k] / new[k]
        fa = f"{k[0].value}/{k[1].value}"
        per_format[fa].append(r)
        print(f"{fa:>15} {k[2]:>6}x{k[3]:<6} M={k[4]:<5} {lb} {base[k]:9.1f} us  {ln} {new[k]:9.1f} us  "
              f"{lb}/{ln} {r:5.2f}x")
    for fmt, r in per_format.items():
        print(f"{fmt}: geomean {lb}/{ln} {geomean(r):.3f}, {min(r):.2f}-{max(r):.2f} over {len(r)} cells")
    every = [x for r in per_format.values() for x in r]
    if every:
        print(f"all: geomean {lb}/{ln} {geomean(every):.3f} over {len(every)} cells")
    only = sorted((f"{k[0].value}/{k[1].value} {k[2]}x{k[3]} M={k[4]}" for k in set(base) ^ set(new)))
    if only:
        print(f"{len(only)} cells in one table only (a problem the other run did not finish): {only[:4]}")
    return 0 if keys else 1


if __name__ == "__main__":
    sys.exit(main())
