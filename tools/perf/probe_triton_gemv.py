"""The Triton decode GEMV alone (issue 3's Triton-only decode rows) over a config space wider than its autotune space.

Issue 3 asks the Triton kernels alone for >= 85 % of the copy rate at M = 1 and 16 on the four large shapes and for
>= 1.5x bf16 on 4096x4096 and 6144x4096; session 15's best of 16 configs reached 46-95 % at M = 1 for fp8_row/bf16.
This times `kernels_triton._gemv.w8a16_gemv` / `w8a8_gemv` per cell over `--space` (default: the FMA path's tiles
of 4-32 KB, 4- and 8-row ones included, at M <= 8, the tensor-core tiles at M > 8; each with warps 4 and 8, automatic
split K and no split), checks
each config's output against the cell's first config (relative error of the whole output), and reports per cell the
best config, its time, % of the copy rate measured in the same run and the speedup over bf16 F.linear. Timing: the
bench's (graph replay over weight copies rotating through > 3.3x L2, median); W8A8 includes its activation
quantization. One JSON line per cell; a table last.

    python -m tools.perf.probe_triton_gemv [--shapes 4096x14336,...] [--m 1,16] [--formats fp8_row,mxfp8]
        [--space fma|dot|all] [--tiles 32x256,8x512] [--dot-warps 4,8] [--out probe.jsonl]
"""

from __future__ import annotations

import itertools

from tools.perf.probe_harness import Probe, parser

# (block_n, block_k) of the FMA path (M <= 8): weight tiles of 4-32 KB per loop step.
FMA_TILES = [(4, 1024), (8, 512), (8, 1024), (16, 256), (16, 512), (16, 1024), (32, 256), (32, 512), (32, 1024),
             (64, 256), (64, 512), (128, 128), (128, 256)]
# (block_n, block_k, num_stages) of the tensor-core path (M > 8).
DOT_TILES = [(32, 128, 1), (64, 128, 1), (128, 128, 1), (64, 128, 3), (128, 128, 3), (64, 256, 1), (32, 256, 1),
             (128, 64, 1), (64, 64, 3)]


def configs(m: int, w8a8: bool, space: str, tiles: list | None = None, dot_warps: tuple = (4,)) -> list:
    """The configs timed per cell; `tiles`: only these (block_n, block_k) of the FMA path; `dot_warps`: the warps of
    the tensor-core configs."""
    from kernels_triton.configs import GemvConfig

    bm = 1 if m == 1 else (2 if m == 2 else (4 if m <= 4 else (8 if m <= 8 else (16 if m <= 16 else 32))))
    out = []
    if space in ("fma", "all") and bm <= 8:
        for (bn, bk), warps, split in itertools.product(tiles or FMA_TILES, (4, 8), (0, 1)):
            out.append(GemvConfig(bm, bn, bk, split, warps, 1, fuse_act_quant=False))
    if space in ("dot", "all") or bm > 8:
        for (bn, bk, st), split, warps in itertools.product(DOT_TILES, (0, 1), dot_warps):
            out.append(GemvConfig(max(bm, 16), bn, bk, split, warps, st, fuse_act_quant=False))
    return out


def main(argv: list[str] | None = None) -> None:
    import torch

    from dispatch.formats import Act
    from kernels_triton import _gemv
    from tools.perf.timing import measure_ceilings

    ap = parser(__doc__, m="1,16", formats="fp8_row,mxfp8", shapes="28672x4096,4096x14336,128256x4096,8192x8192,"
                "4096x4096,6144x4096")
    ap.add_argument("--space", default="fma", choices=("fma", "dot", "all"))
    ap.add_argument("--tiles", help="only these FMA tiles, e.g. 32x256,8x512 (block_n x block_k)")
    ap.add_argument("--dot-warps", default="4", help="warps of the tensor-core configs, e.g. 4,8")
    args = ap.parse_args(argv)
    tiles = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")] if args.tiles else None
    probe = Probe(args)
    copy_gbps = measure_ceilings(probe.timer, "cuda").copy_gbps
    print(f"copy {copy_gbps:.1f} GB/s", flush=True)
    for c in probe.cells("bf16"):
        w8a8 = c.act is Act.FP8
        launch = _gemv.w8a8_gemv if w8a8 else _gemv.w8a16_gemv
        ref = None
        times: list[tuple[float, dict]] = []
        errors: dict[str, str] = {}
        for cfg in configs(c.m, w8a8, args.space, tiles, tuple(int(w) for w in args.dot_warps.split(","))):
            name = f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} split{cfg.split_k}"
            try:
                y = launch(c.x, c.ws.copies[0], config=cfg).float()
                torch.cuda.synchronize()
            except Exception as e:  # a config that does not compile or launch is reported, not timed
                errors[name] = f"{type(e).__name__}: {str(e)[:160]}"
                continue
            if ref is None:
                ref = y
            err = ((y - ref).norm() / ref.norm().clamp_min(1e-30)).item()
            if not err < 1e-2:
                errors[name] = f"relative error {err:.2e} against the first config"
                continue
            us = probe.timer.time(lambda i, cfg=cfg: launch(c.x, c.ws.copies[i], config=cfg), c.ws.ncopies,
                                  probe.policy).best_us
            times.append((us, {"config": name, "us": us}))
        times.sort(key=lambda t: t[0])
        bf16 = probe.bf16_us(c)
        nbytes = c.ws.copies[0].qdata.nbytes
        best = times[0][0] if times else float("nan")
        row = {"fmt": c.fmt.value, "act": c.act.value, "n": c.n, "k": c.k, "m": c.m, "copy_gbps": copy_gbps,
               "best": times[0][1] if times else None, "pct_copy": 100 * nbytes / (best * 1e-6) / (copy_gbps * 1e9),
               "x_bf16": bf16 / best, "bf16_us": bf16, "all": [t[1] for t in times], "errors": errors}
        probe.emit(row, f"{c.fmt.value}/{c.act.value} {c.n}x{c.k} M={c.m}: best {row['best']} "
                        f"{row['pct_copy']:.1f} % copy, {row['x_bf16']:.2f}x bf16; {len(errors)} errors")
    print("\n| format/act | N x K | M | best config | us | % copy | x bf16 |\n|---|---|---|---|---|---|---|")
    for r in probe.rows:
        b = r["best"] or {"config": "-", "us": float("nan")}
        print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {b['config']} | {b['us']:.2f} | "
              f"{r['pct_copy']:.1f} | {r['x_bf16']:.2f} |")


if __name__ == "__main__":
    main()
