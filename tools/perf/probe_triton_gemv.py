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
        [--space fma|dot|all] [--tiles 32x256,8x512] [--dot-tiles 64x128x3,64x256x4] [--dot-warps 4,8]
        [--toggle FAST_BF16_DECODE] [--out probe.jsonl]

--toggle: an A/B inside the run: each config is timed with these boolean switches of kernels_triton._gemv all off
and all on, in alternating order (best of two rounds each); the row's "all" entries then carry "us_off" too and the
cell gets "best_off". The switches are put back as they were at the end. (Session 33 timed its pre-wait load this
way: PREFETCH_CODES and EARLY_TRIGGER of docs/perf/h200_s33_gemv_prewait_load.patch.)
"""

from __future__ import annotations

import itertools
import math

from tools.perf.probe_harness import Probe, parser

# (block_n, block_k) of the FMA path (M <= 8): weight tiles of 4-32 KB per loop step.
FMA_TILES = [(4, 1024), (8, 512), (8, 1024), (16, 256), (16, 512), (16, 1024), (32, 256), (32, 512), (32, 1024),
             (64, 256), (64, 512), (128, 128), (128, 256)]
# (block_n, block_k, num_stages) of the tensor-core path (M > 8).
DOT_TILES = [(32, 128, 1), (64, 128, 1), (128, 128, 1), (64, 128, 3), (128, 128, 3), (64, 256, 1), (32, 256, 1),
             (128, 64, 1), (64, 64, 3)]


def configs(m: int, w8a8: bool, space: str, tiles: list | None = None, dot_warps: tuple = (4,),
            dot_tiles: list | None = None) -> list:
    """The configs timed per cell; `tiles`: only these (block_n, block_k) of the FMA path; `dot_tiles`: only these
    (block_n, block_k, num_stages) of the tensor-core path; `dot_warps`: the warps of the tensor-core configs."""
    from kernels_triton.configs import GemvConfig

    bm = 1 if m == 1 else (2 if m == 2 else (4 if m <= 4 else (8 if m <= 8 else (16 if m <= 16 else 32))))
    out = []
    if space in ("fma", "all") and bm <= 8:
        for (bn, bk), warps, split in itertools.product(tiles or FMA_TILES, (4, 8), (0, 1)):
            out.append(GemvConfig(bm, bn, bk, split, warps, 1, fuse_act_quant=False))
    if space in ("dot", "all") or bm > 8:
        for (bn, bk, st), split, warps in itertools.product(dot_tiles or DOT_TILES, (0, 1), dot_warps):
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
    ap.add_argument("--dot-tiles", help="only these tensor-core tiles, e.g. 64x128x3,64x256x4 (block_n x block_k x "
                    "num_stages)")
    ap.add_argument("--dot-warps", default="4", help="warps of the tensor-core configs, e.g. 4,8")
    ap.add_argument("--toggle", help="boolean switches of kernels_triton._gemv timed off and on, e.g. FAST_BF16_DECODE")
    args = ap.parse_args(argv)
    tiles = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")] if args.tiles else None
    dot_tiles = [tuple(int(v) for v in t.split("x")) for t in args.dot_tiles.split(",")] if args.dot_tiles else None
    toggles = args.toggle.split(",") if args.toggle else []
    for name in toggles:
        if not isinstance(getattr(_gemv, name, None), bool):
            raise SystemExit(f"--toggle {name}: not a boolean switch of kernels_triton._gemv")
    shipped = {name: getattr(_gemv, name) for name in toggles}

    def switched(on: bool, fn):
        def run(*a, **kw):
            for name in toggles:
                setattr(_gemv, name, on)
            return fn(*a, **kw)
        return run

    probe = Probe(args)
    copy_gbps = measure_ceilings(probe.timer, "cuda").copy_gbps
    print(f"copy {copy_gbps:.1f} GB/s", flush=True)
    for c in probe.cells("bf16"):
        w8a8 = c.act is Act.FP8
        launch = _gemv.w8a8_gemv if w8a8 else _gemv.w8a16_gemv
        ref = None
        times: list[tuple[float, dict]] = []
        errors: dict[str, str] = {}
        for cfg in configs(c.m, w8a8, args.space, tiles, tuple(int(w) for w in args.dot_warps.split(",")), dot_tiles):
            name = f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} split{cfg.split_k}"
            try:
                for on in ((False, True) if toggles else (True,)):
                    y = switched(on, launch)(c.x, c.ws.copies[0], config=cfg).float()
                    torch.cuda.synchronize()
                    if ref is None:
                        ref = y
                    err = ((y - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                    if not err < 1e-2:
                        raise ValueError(f"relative error {err:.2e} against the first config"
                                         + (f" (switches {'on' if on else 'off'})" if toggles else ""))
            except Exception as e:  # a config that does not compile, launch or agree is reported, not timed
                errors[name] = f"{type(e).__name__}: {str(e)[:160]}"
                continue
            if toggles:
                us = probe.time_variants({v: switched(v == "on", lambda i, cfg=cfg: launch(c.x, c.ws.copies[i],
                                                                                           config=cfg))
                                          for v in ("off", "on")}, c.ws.ncopies)
                times.append((us["on"], {"config": name, "us": us["on"], "us_off": us["off"]}))
            else:
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
        if toggles and times:
            off = min(times, key=lambda t: t[1]["us_off"])[1]
            row["best_off"] = {"config": off["config"], "us": off["us_off"]}
            row["pct_copy_off"] = 100 * nbytes / (off["us_off"] * 1e-6) / (copy_gbps * 1e9)
            row["toggles"] = toggles
        probe.emit(row, f"{c.fmt.value}/{c.act.value} {c.n}x{c.k} M={c.m}: best {row['best']} "
                        f"{row['pct_copy']:.1f} % copy, {row['x_bf16']:.2f}x bf16; {len(errors)} errors")
    for name, value in shipped.items():
        setattr(_gemv, name, value)
    off_hdr = " best off us | % copy off | per-config on/off |" if toggles else ""
    print(f"\n| format/act | N x K | M | best config | us | % copy | x bf16 |{off_hdr}\n"
          f"|---|---|---|---|---|---|---|{'---|---|---|' if toggles else ''}")
    for r in probe.rows:
        b = r["best"] or {"config": "-", "us": float("nan")}
        line = (f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {b['config']} | {b['us']:.2f} | "
                f"{r['pct_copy']:.1f} | {r['x_bf16']:.2f} |")
        if toggles and r["all"]:
            ratios = [a["us"] / a["us_off"] for a in r["all"]]
            geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
            line += f" {r['best_off']['us']:.2f} | {r['pct_copy_off']:.1f} | {geo:.3f} |"
        print(line)


if __name__ == "__main__":
    main()
