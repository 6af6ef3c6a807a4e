"""Same-run probe of candidate bodies of the dequant kernel (tools/perf/csrc/dequant_variants.cu, v1..v7) against
the shipped one (csrc/dequant.cu via kernels_cuda._dequant.dequantize) and a copy of the same bytes.

    python -m tools.perf.probe_dequant [--shapes 4096x4096,...] [--formats fp8_row,mxfp8,fp8_block,fp8_tensor]

The goal (issue 4): >= 85 % of the copy rate in every cell. Variants (details at their blocks in the .cu):
  v1  2-D grid (x: 16-code chunk of a row, y/z: row), no 64-bit division, scale loaded before the codes
  v2  v1 + evict-first streams (st.global.cs stores; codes loaded with an L2 evict_first cache policy)
  v3  v1 geometry at 8 codes per thread (one 8-byte load, one 16-byte store)
  v4  persistent grid-stride loop (SMs x 4 CTAs of 256), next chunk loaded before the current one is converted
  v5* memory-pattern ceiling: v1's loads and stores, bytes zero-extended instead of decoded (NOT a dequantization)
  v6  4 codes per thread (one 4-byte load, one 8-byte store)
  v7  v3 with streaming stores (st.global.cs): the body csrc/dequant.cu ships since session 17 (mx32: there the e8m0
      decode is branch-free, so the codes load need not wait for the scale byte)
Every v1..v4, v6, v7 output (and the shipped kernel's) is checked bit-identical to dispatch.dequantize(q).to(bf16) on one
weight copy before it is timed ('MISMATCH' instead of a time otherwise); v5 is not checked.

Timing (tools/perf/timing.py): CUDA-graph replay of one pass over weight copies whose codes exceed 3.3x L2, median
of --replays replays. '%' is bytes read (codes + scales) + written (bf16) per second against the copy kernel's
rate on 1 GiB measured in this run (measure_ceilings); 'copy' is that copy kernel (fp32 negation) moving N*K*3
bytes (the codes in, the bf16 out), rotated the same way. Each call allocates its output (as _dequant.dequantize
does), so in a graph consecutive calls reuse one output buffer; the same holds for every column.
"""

from __future__ import annotations

import argparse
import math
import pathlib

SOURCE = "dequant_variants.cu"
VARIANTS = (1, 2, 3, 4, 5, 6, 7)
IDENTICAL = (1, 2, 3, 4, 6, 7)  # v5 is a memory-pattern ceiling, not a dequantization
TARGET_PCT = 85.0
DEFAULT_SHAPES = "4096x4096,6144x4096,8192x2560,6656x2560,4096x14336,8192x8192,28672x4096,128256x4096"
DEFAULT_FORMATS = "fp8_row,mxfp8,fp8_block,fp8_tensor"
MAX_GRID_Y = 65535


def row_tile(chunks_per_row: int, cap: int = 256) -> int:
    """Threads along a row: the largest multiple of 32 <= cap dividing the row's chunks (no idle lanes), else
    min(cap, the chunks rounded up to a warp) with the kernel's bounds check idling the rest."""
    for t in range(cap, 31, -32):
        if chunks_per_row % t == 0:
            return t
    return min(cap, -(-chunks_per_row // 32) * 32)


def variant_geometry(variant: int, n: int, k: int, sms: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of fp8d_dequant_v<variant> for an [n, k] weight (k % 16 == 0) on a GPU with `sms` SMs."""
    if k % 16:
        raise ValueError(f"the variants need K % 16 == 0, got K = {k}")
    if variant == 4:
        if n * k >= 1 << 31:
            raise ValueError(f"v4 uses 32-bit indices: N*K = {n * k} >= 2^31")
        chunks = n * k // 16
        return (max(1, min(sms * 4, -(-chunks // 256))), 1, 1), (256, 1, 1)
    per_thread = {3: 8, 6: 4, 7: 8}.get(variant, 16)
    cpr = k // per_thread  # chunks per row
    tx = row_tile(cpr)
    ty = max(1, 256 // tx) if tx <= 128 else 1  # short rows: several rows per CTA
    row_blocks = -(-n // ty)
    gy = min(row_blocks, MAX_GRID_Y)
    return (-(-cpr // tx), gy, -(-row_blocks // gy)), (tx, ty, 1)


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for nk in text.split(","):
        n, k = (int(v) for v in nk.lower().split("x"))
        if k % 16:
            raise SystemExit(f"shape {nk}: the variants need K % 16 == 0")
        shapes.append((n, k))
    return shapes


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.perf.probe_dequant", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="NxK,... (K %% 16 == 0)")
    ap.add_argument("--formats", default=DEFAULT_FORMATS, help="weight formats, comma-separated")
    ap.add_argument("--variants", default=",".join(map(str, VARIANTS)), help="which of v1..v7 to run")
    ap.add_argument("--replays", type=int, default=10, help="graph replays per timing (median)")
    ap.add_argument("--json", default=None, help="also write every cell to this JSON file")
    args = ap.parse_args(argv)
    shapes = _parse_shapes(args.shapes)
    variants = [int(v) for v in args.variants.split(",") if v.strip()]
    if not set(variants) <= set(VARIANTS):
        raise SystemExit(f"--variants must be among {VARIANTS}")

    import json

    import torch

    import dispatch
    from dispatch.formats import Format
    from kernels_cuda import _dequant, _driver, _launch
    from kernels_cuda._driver import ptr
    from kernels_cuda._kinds import DTYPE_CODE, SCALE_CODE
    from tools.perf.timing import (CudaTimer, DeviceLost, RotationPolicy, check_device, l2_bytes, measure_ceilings,
                                   one_rotation, warm_gpu)

    formats = [Format.parse(f.strip()) for f in args.formats.split(",") if f.strip()]
    # The variants live beside this tool, not in the product's csrc: compiled as if they were there (same headers).
    from kernels_cuda import compiler
    real_sources = compiler.sources
    variants_text = (pathlib.Path(__file__).parent / "csrc" / SOURCE).read_text()
    compiler.sources = lambda: {**real_sources(), SOURCE: variants_text}
    _launch.require_gpu()
    arch = _launch.device_arch(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    timer, rotation, l2 = CudaTimer(), RotationPolicy(), l2_bytes("cuda")
    bf16 = int(DTYPE_CODE[torch.bfloat16])

    # Compile everything first (NVRTC; cached on disk), so no compile lands between timings.
    for fmt in formats:
        for v in variants:
            _launch._kernel(SOURCE, f"fp8d_dequant_v{v}", _defines(SCALE_CODE[fmt], v), 0, arch)

    def variant_call(v: int, qw) -> torch.Tensor:
        n, k = qw.shape
        out = torch.empty((n, k), dtype=torch.bfloat16, device=qw.device)
        scale = qw.scale.view(torch.uint8) if qw.format is Format.MXFP8 else qw.scale
        kern = _launch._kernel(SOURCE, f"fp8d_dequant_v{v}", _defines(SCALE_CODE[qw.format], v), 0, arch)
        grid, block = variant_geometry(v, n, k, sms)
        _driver.launch(kern, grid, block, (ptr(qw.qdata), ptr(scale), ptr(out), int(n), int(k), bf16))
        return out

    def shipped_call(qw) -> torch.Tensor:
        return _dequant.dequantize(qw, torch.bfloat16)

    warm_gpu(1.0)
    copy_gbps = measure_ceilings(timer).copy_gbps
    if not copy_gbps:
        raise SystemExit("measure_ceilings could not time the copy kernel")
    print(f"copy kernel on 1 GiB: {copy_gbps:.1f} GB/s (read + write); arch {arch}, {sms} SMs, L2 {l2 >> 20} MiB; "
          f"graph replay median of {args.replays}; target {TARGET_PCT:.0f} % of copy")

    def pct(moved: int, us: float) -> float:
        return moved / (us * 1e-6) / (copy_gbps * 1e9) * 100

    def timed(fn, ncopies: int) -> float:
        t = timer.time(fn, ncopies, one_rotation(args.replays))
        if t.us is None:
            raise RuntimeError(t.note)
        return t.us

    cols = ["shipped"] + [f"v{v}" + ("*" if v not in IDENTICAL else "") for v in variants] + ["copy"]
    head = f"{'N x K':>12} {'fmt':>10} " + " ".join(f"{c:>15}" for c in cols)
    print("columns: us per call and % of the copy rate; v5* is the no-decode memory-pattern ceiling (unchecked)")
    print(head, flush=True)
    cells: list[dict] = []  # one per (shape, format, column)
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda") * 0.02
        geo = {}
        for v in variants:
            try:
                geo[v] = variant_geometry(v, n, k, sms)
            except ValueError as e:  # v4 past 2^31 codes: its cells record the error
                geo[v] = str(e)
        copy_us = None
        for fmt in formats:
            qw = dispatch.quantize(w, fmt, act="bf16")
            moved = qw.nbytes + 2 * n * k
            nc = rotation.copies(qw.nbytes, l2)
            qws = [dispatch.QWeight(qw.format, qw.act, qw.qdata.clone(), qw.scale.clone()) for _ in range(nc)]
            ref = dispatch.dequantize(qws[0]).to(torch.bfloat16)
            runs = [("shipped", shipped_call, True)] + [
                (c, (lambda q, v=v: variant_call(v, q)), v in IDENTICAL) for c, v in zip(cols[1:-1], variants)]
            row = []
            warm_gpu(0.1)  # quantization and the reference ran on a mostly idle GPU: clocks back up
            for name, fn, check in runs:
                cell = {"n": n, "k": k, "fmt": fmt.value, "col": name, "us": None, "pct": None, "status": "ok"}
                try:
                    if check and not torch.equal(fn(qws[0]), ref):
                        cell["status"] = "MISMATCH"
                    else:
                        us = timed(lambda i, f=fn, q=qws: f(q[i]), nc)
                        cell.update(us=us, pct=pct(moved, us))
                except DeviceLost:
                    raise
                except Exception as e:  # a launch or compile failure: record it; a dead context ends the run
                    why = check_device(torch)
                    if why:
                        raise DeviceLost(f"{name} {n}x{k} {fmt.value}: {type(e).__name__}: {e}; device: {why}") from e
                    cell["status"] = f"ERROR {type(e).__name__}: {str(e)[:120]}"
                cells.append(cell)
                row.append(cell)
            del ref
            if copy_us is None:
                half = 3 * n * k // 2 // 4  # fp32 elements in (and out): N*K*3 bytes moved
                srcs = [torch.zeros(half, device="cuda") for _ in range(rotation.copies(half * 4, l2))]
                dst = torch.empty(half, device="cuda")
                copy_us = timed(lambda i, s=srcs: torch.neg(s[i], out=dst), len(srcs))
                del srcs, dst
            cells.append({"n": n, "k": k, "fmt": fmt.value, "col": "copy", "us": copy_us,
                          "pct": pct(3 * n * k, copy_us), "status": "ok"})
            txt = [f"{c['us']:7.1f} {c['pct']:5.1f}%" if c["us"] is not None else c["status"][:15] for c in row]
            txt.append(f"{copy_us:7.1f} {pct(3 * n * k, copy_us):5.1f}%")
            print(f"{f'{n}x{k}':>12} {fmt.value:>10} " + " ".join(f"{t:>15}" for t in txt), flush=True)
            del qws, qw
        del w
        torch.cuda.empty_cache()
        print("  geometry " + "; ".join(f"v{v} {g}" if isinstance(g, str) else f"v{v} grid {g[0]} block {g[1]}"
                                        for v, g in geo.items()), flush=True)

    # ---- summary: per column, geomean %, cells >= target, wins over shipped ----------------------------------
    print()
    shipped_us = {(c["n"], c["k"], c["fmt"]): c["us"] for c in cells if c["col"] == "shipped"}
    ncell = len(shapes) * len(formats)
    for col in cols:
        mine = [c for c in cells if c["col"] == col]
        ps = [c["pct"] for c in mine if c["pct"] is not None]
        bad = [c for c in mine if c["us"] is None]
        wins = sum(1 for c in mine if c["us"] is not None and shipped_us.get((c["n"], c["k"], c["fmt"]))
                   and c["us"] < shipped_us[(c["n"], c["k"], c["fmt"])])
        extra = f"; faster than shipped in {wins} of {ncell}" if col not in ("shipped", "copy") else ""
        extra += f"; {len(bad)} not timed ({', '.join(sorted({c['status'][:40] for c in bad}))})" if bad else ""
        print(f"summary {col:>8}: geomean {_geomean(ps):5.1f} % of copy, min {min(ps, default=float('nan')):5.1f} %, "
              f">= {TARGET_PCT:.0f} % in {sum(p >= TARGET_PCT for p in ps)} of {ncell} cells{extra}")

    # ---- short table: per shape, geomean % over the formats, per column ----------------------------------------
    print()
    print(f"{'geomean %':>12} " + " ".join(f"{c:>8}" for c in cols))
    for n, k in shapes:
        vals = []
        for col in cols:
            ps = [c["pct"] for c in cells if c["col"] == col and (c["n"], c["k"]) == (n, k) and c["pct"] is not None]
            vals.append(f"{_geomean(ps):8.1f}" if ps else f"{'-':>8}")
        print(f"{f'{n}x{k}':>12} " + " ".join(vals))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbps": copy_gbps, "arch": arch, "sms": sms, "cells": cells}, f, indent=1)
        print(f"cells written to {args.json}")


def _defines(scale_code: int, variant: int) -> tuple[tuple[str, int], ...]:
    return (("FP8D_CFG_SCALE", int(scale_code)), ("FP8D_DQ_VARIANT", int(variant)))


if __name__ == "__main__":
    main()
