"""The dispatched path (and the Triton kernels alone) against the peer kernels of shared/perf/h200_baseline.md.

GemLite and vLLM are not installed on the GPU machine (no network), so the peers' numbers are the baseline
file's, measured on an H200 with the same method before this project had code. Microseconds do not compare
across runs (the lent machines vary; docs/perf/h200.md), so each route is compared by its **speedup over bf16
F.linear measured in its own run**: ours from a bench results.json, the peer's from the baseline file.

    python -m tools.perf.peers --baseline ../shared/perf/h200_baseline.md \\
        --bench docs/perf/h200_bench_results_2026-11-29_s3.json docs/perf/h200_bench_results_2026-11-29_s4.json \\
        [--candidates C3.json C9.json --candidates-bf16 B3.json B9.json]

Later --bench files replace earlier ones cell by cell. --candidates adds the best Triton kernel of each cell
(autotune files of every candidate's best time, see tools.heuristic_eval); each one's bf16 times come from the
--candidates-bf16 bench at the same position, of the same session (another run on the same kind of machine: a
coarser comparison). Later candidate files replace earlier ones cell by cell where they timed a Triton kernel and
their bench has the cell's bf16 time.

Same semantics (what each peer computes, per the baseline file's variant list):
  fp8_block/fp8 : vllm_block_quant+gemm (vLLM's Triton block kernel + its group quant), gemlite_a8w8_fp8_block_dyn
  fp8_row/fp8   : gemlite_a8w8_fp8_dyn (per-token x, per-channel w, quant included)
  fp8_row/bf16  : gemlite_a16w8_fp8 (fp8 weight-only, per-channel)
  mxfp8/bf16    : gemlite_a16w8_mxfp8 (MXFP8 weight-only)
  fp8_tensor/fp8: no peer kernel in the file (only torch _scaled_mm routes, which the bench compares itself)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

PEERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("fp8_block", "fp8"): ("vllm_block_quant+gemm", "gemlite_a8w8_fp8_block_dyn"),
    ("fp8_row", "fp8"): ("gemlite_a8w8_fp8_dyn",),
    ("fp8_row", "bf16"): ("gemlite_a16w8_fp8",),
    ("mxfp8", "bf16"): ("gemlite_a16w8_mxfp8",),
}

_SHAPE = re.compile(r"^### N=(\d+) K=(\d+)")
_CELL = re.compile(r"^\s*([\d.]+) / [^/]+ / ([\d.]+)x / ")


def parse_baseline(text: str) -> dict[tuple[str, int, int, int], float]:
    """(variant, N, K, M) -> speedup over bf16 from every table of the baseline file ('n/a' cells skipped).
    A cell that appears in several sections (decode, prefill, all-M views) must agree; the first one is kept."""
    out: dict[tuple[str, int, int, int], float] = {}
    shape: tuple[int, int] | None = None
    ms: list[int] = []
    for line in text.splitlines():
        m = _SHAPE.match(line)
        if m:
            shape, ms = (int(m.group(1)), int(m.group(2))), []
            continue
        if line.startswith("## "):
            shape = None
            continue
        if shape is None or not line.startswith("|"):
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols[0] == "variant":
            ms = [int(c[2:]) for c in cols[1:] if c.startswith("M=")]
            continue
        if not ms or set(cols[0]) <= {"-"}:
            continue
        for m_val, cell in zip(ms, cols[1:]):
            c = _CELL.match(cell)
            if c:
                out.setdefault((cols[0], shape[0], shape[1], m_val), float(c.group(2)))
    return out


def dispatched_speedups(bench_files: list[dict[str, Any]]) -> dict[tuple[str, str, int, int, int], float]:
    """(format, act, N, K, M) -> dispatch.linear speedup over bf16 in the same run; later files win."""
    out = {}
    for data in bench_files:
        for cell in data["main"]:
            rows = {r["route"]: r for r in cell["rows"]}
            ours, bf16 = rows.get("dispatch.linear"), rows.get("bf16 F.linear")
            if ours and bf16 and ours.get("us") and bf16.get("us") and ours.get("status", "ok") == "ok":
                out[(cell["format"], cell["act"], cell["n"], cell["k"], cell["m"])] = bf16["us"] / ours["us"]
    return out


def triton_speedups(candidates: dict[str, Any], bf16_bench: dict[str, Any]) -> dict[tuple, tuple[str, float]]:
    """(format, act, N, K, M) -> (the fastest Triton kernel, its speedup over the bench's bf16 time); cells without
    a Triton time or without a bf16 time in the bench are left out."""
    bf16 = {}
    for cell in bf16_bench.get("main", []):
        for r in cell["rows"]:
            if r["route"] == "bf16 F.linear" and r.get("us"):
                bf16[(cell["n"], cell["k"], cell["m"])] = r["us"]
    for prob in bf16_bench.get("problems", []):  # an autotune summary.json: bf16 timed per problem
        if prob.get("bf16_us"):
            bf16[(prob["n"], prob["k"], prob["m"])] = prob["bf16_us"]
    out = {}
    for cell in candidates["main"]:
        tri = [(r["us"], r["route"]) for r in cell["rows"] if r["route"].startswith("triton.") and r.get("us")]
        ref = bf16.get((cell["n"], cell["k"], cell["m"]))
        if tri and ref:
            us, route = min(tri)
            out[(cell["format"], cell["act"], cell["n"], cell["k"], cell["m"])] = (route, ref / us)
    return out


def compare(ours: dict[tuple, float], peers: dict[tuple, float]) -> list[dict[str, Any]]:
    """One row per (format, act, N, K, M) that has a peer measurement of the same semantics."""
    rows = []
    for (fmt, act, n, k, m), sp in sorted(ours.items()):
        for variant in PEERS.get((fmt, act), ()):
            peer = peers.get((variant, n, k, m))
            if peer is not None:
                rows.append(dict(format=fmt, act=act, n=n, k=k, m=m, ours=sp, peer=variant, peer_speedup=peer,
                                 ratio=sp / peer))
    return rows


def _report(title: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"### {title}", "", "| format/act | peer | cells | faster than the peer | slowest ratio (cell) |",
             "|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["format"], r["act"], r["peer"]), []).append(r)
    for (fmt, act, peer), g in sorted(groups.items()):
        worst = min(g, key=lambda r: r["ratio"])
        lines.append(f"| {fmt}/{act} | {peer} | {len(g)} | {sum(r['ratio'] >= 1 for r in g)} | "
                     f"{worst['ratio']:.2f}x ({worst['n']}x{worst['k']} M={worst['m']}) |")
    lines.append(f"\nall: {sum(r['ratio'] >= 1 for r in rows)} of {len(rows)} cells at or above the peer's speedup")
    misses = [r for r in rows if r["ratio"] < 1]
    for r in misses:
        lines.append(f"  below: {r['format']}/{r['act']} {r['n']}x{r['k']} M={r['m']}: {r['ours']:.2f}x vs "
                     f"{r['peer']} {r['peer_speedup']:.2f}x")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="shared/perf/h200_baseline.md")
    ap.add_argument("--bench", nargs="+", required=True, help="tools.bench results.json files (later ones win)")
    ap.add_argument("--candidates", nargs="+", default=[],
                    help="best time of every candidate per cell (docs/perf/h200_candidates_*.json; later ones win)")
    ap.add_argument("--candidates-bf16", nargs="+", default=[],
                    help="bench results.json (or autotune summary.json) files whose bf16 times go with --candidates, "
                         "one per file, same order")
    args = ap.parse_args(argv)
    with open(args.baseline) as f:
        peers = parse_baseline(f.read())
    benches = []
    for path in args.bench:
        with open(path) as f:
            benches.append(json.load(f))
    lines = _report("dispatch.linear against the peers (speedup over bf16, each in its own run)",
                    compare(dispatched_speedups(benches), peers))
    if args.candidates:
        if len(args.candidates_bf16) != len(args.candidates):
            ap.error("--candidates needs one --candidates-bf16 bench per file, in the same order")
        tri: dict[tuple, tuple[str, float]] = {}
        for cpath, bpath in zip(args.candidates, args.candidates_bf16):
            with open(cpath) as f, open(bpath) as g:
                tri.update(triton_speedups(json.load(f), json.load(g)))
        lines += _report("the fastest Triton kernel alone against the peers",
                         compare({k: v[1] for k, v in tri.items()}, peers))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
