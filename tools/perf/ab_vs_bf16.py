"""One side of a stored A/B (docs/perf/h200_triton_ab_*.jsonl, written from tools/perf/ab_triton_gemm.sh's tables)
against bf16 F.linear times of another run (a tools/perf/measure_triton_gemv.sh summary: problems[].bf16_us), cell by
cell: the winner's time, its % of copy bandwidth (its own run's ceiling), and its speedup over that bf16 time. The bf16
times come from another run on the same kind of machine: a coarser comparison than a same-run one (docs/perf/h200.md).

    python -m tools.perf.ab_vs_bf16 docs/perf/h200_triton_ab_2026-11-30_s15.jsonl gemv_m1 new \\
        docs/perf/h200_triton_gemv_summary_2026-11-30_s11.json
"""

from __future__ import annotations

import argparse
import json


def rows(ab_path: str, ab: str, side: str, bf16_path: str) -> list[tuple]:
    bf16 = {(p["format"], p["act"], p["n"], p["k"], p["m"]): p["bf16_us"]
            for p in json.load(open(bf16_path))["problems"] if p.get("bf16_us")}
    out = []
    for line in open(ab_path):
        r = json.loads(line)
        if r.get("ab") != ab or r.get("side") != side:
            continue
        ref = bf16.get((r["format"], r["act"], r["n"], r["k"], r["m_bucket"]))
        out.append((r["format"], r["act"], r["n"], r["k"], r["m_bucket"], r["us"], r.get("pct_copy_bw"),
                    ref / r["us"] if ref else None))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ab_jsonl")
    ap.add_argument("ab")
    ap.add_argument("side", choices=("base", "new"))
    ap.add_argument("bf16_summary")
    a = ap.parse_args(argv)
    print("| format/act | N x K | M | us | % copy BW | x bf16 |\n|---|---|---|---|---|---|")
    for fmt, act, n, k, m, us, pct, sp in sorted(rows(a.ab_jsonl, a.ab, a.side, a.bf16_summary)):
        print(f"| {fmt}/{act} | {n}x{k} | {m} | {us:.1f} | {pct if pct is not None else '-'} | "
              f"{f'{sp:.2f}' if sp else '-'} |")


if __name__ == "__main__":
    main()
