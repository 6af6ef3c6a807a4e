"""A tiled weight layout for the CUDA decode GEMVs: does reading 512 contiguous bytes per load close the gap to a pure
read? Timed on the GPU.

Session 22's read ceiling (tools/perf/probe_read_roofline.py) read 58.7-117 MB in 92.6-100.5 % of the copy rate's time,
where the shipped W8A16 GEMV reached 80-91 %. The GEMVs' warps each read eight 64-byte pieces of eight rows per load
instruction (row-major weight, csrc/skinny_common.cuh); compiled with FP8D_CFG_TILED it reads a copy of the weight laid
out tile by tile instead (each 16-row x 128-wide block as [h][q][lane][16 bytes]: 512 contiguous bytes per instruction,
no predicates). Per cell (format/act x shape x M), at the shipped table's config for cuda.w8a16_gemv / cuda.w8a8_gemv
where it holds the key (else the default), this times:
  row_major : the shipped launcher (W8A8: the CUDA activation quantizer, then the GEMV)
  tiled     : the FP8D_CFG_TILED module on the tiled copy, the same config and grid (W8A8: the same quantizer first)
and checks both give the same bits. With --all-configs also, per cell:
  tiled_best: the tiled module over every config of the GEMV's space (kernels_cuda.configs.gemv_configs)
  dispatched: dispatch.linear on the shipped table (what tools.bench reports)
so that the decode targets can be counted with the tiled GEMV as one more candidate. The tiles and the tiled launches are
the product's (kernels_cuda/_tiles.py tile_codes; the GEMV launchers' `tiles=` argument; session 22's calls 5-8 ran an
earlier copy of that code inside this probe, the same layout, modules and geometry), made for each rotating weight
copy. The bench's timing: graph replay over weight copies rotating through > 3.3x L2, median. A JSON line per cell; a
table last.

    python -m tools.perf.probe_tiled_gemv [--shapes 4096x14336,...] [--m 1,16] [--formats fp8_row,fp8_tensor:fp8]
        [--all-configs] [--out probe.jsonl]
"""

from __future__ import annotations

from tools.perf.probe_harness import Probe, parser

SHAPES = "4096x14336,8192x8192,28672x4096,128256x4096,4096x4096,6144x4096,6656x2560,8192x2560"


def _compile(item: tuple) -> str:
    from kernels_cuda import compiler

    name, defines, arch = item
    compiler.compile_module(name, arch, dict(defines))
    return name


def main(argv: list[str] | None = None) -> None:
    import concurrent.futures
    import os

    import torch

    import dispatch
    from dispatch.formats import Act, Format, act_granularity
    from dispatch.problem import Problem
    from kernels_cuda import _launch
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import gemv_configs
    from tools.perf.timing import measure_ceilings

    ap = parser(__doc__, m="1,16", formats="fp8_row,mxfp8,fp8_block", shapes=SHAPES)
    ap.add_argument("--all-configs", action="store_true", help="also the tiled GEMV's best config and dispatch.linear")
    a = ap.parse_args(argv)
    probe = Probe(a, eager_iters=3)
    arch = _launch.device_arch(torch.cuda.current_device())
    if a.all_configs:  # every tiled module the cells will load, compiled up front on all cores
        todo = set()
        for shape in a.shapes.split(","):
            n, k = (int(v) for v in shape.split("x"))
            for spec in a.formats.split(","):
                fname, _, aname = spec.partition(":")
                fmt, act = Format(fname), Act(aname or "bf16")
                w8a8 = act is Act.FP8
                code, xkind = ((ACTQ_CODE[act_granularity(fmt, act)], 0) if w8a8 else
                               (SCALE_CODE[fmt], DTYPE_CODE[torch.bfloat16]))
                for m in (int(v) for v in a.m.split(",")):
                    for c in gemv_configs(Problem(fmt, act, m, n, k), probe.target):
                        name, _, d = _launch.gemv_module(w8a8, code, xkind, m, c, tiled=True)
                        todo.add((name, d, arch))
        with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
            list(pool.map(_compile, sorted(todo)))
        print(f"compiled {len(todo)} tiled modules", flush=True)
    for c in probe.cells("bf16"):
        q, x = c.ws.copies, c.x
        tiled, launcher, cfg = probe.gemv_cell(c)

        def make_tiled(cfg, x=x, q=q, tw=tiled, f=launcher):
            return lambda i: f(x, q[i], None, None, cfg, tiles=tw[i])

        variants = {"row_major": lambda i, cfg=cfg, q=q, x=x, f=launcher: f(x, q[i], None, None, cfg),
                    "tiled": make_tiled(cfg)}
        row = {"fmt": c.fmt.value, "act": c.act.value, "n": c.n, "k": c.k, "m": c.m, "config": cfg.to_dict(),
               "same_bits": bool(torch.equal(variants["row_major"](0), variants["tiled"](0))),
               "us": probe.time_variants(variants, c.ws.ncopies)}
        if a.all_configs:
            best = (float("inf"), None)
            for gc in gemv_configs(c.problem, probe.target):
                t = probe.timer.time(make_tiled(gc), c.ws.ncopies, probe.policy).best_us
                best = min(best, (t, gc.to_dict()), key=lambda b: b[0])
            row["us"]["tiled_best"], row["tiled_best_config"] = best
            row["us"]["dispatched"] = probe.timer.time(lambda i, q=q, x=x: dispatch.linear(x, q[i]), c.ws.ncopies,
                                                       probe.policy).best_us
        row["us"]["bf16"] = probe.bf16_us(c)
        row["bytes"] = q[0].nbytes
        row["weight_gbps"] = {v: q[0].nbytes / (t * 1e-6) / 1e9 for v, t in row["us"].items()}
        probe.emit(row)
    rows = probe.rows
    print("\n| format/act | shape | M | config | same bits | row-major us | tiled us | tiled / row-major | GB/s tiled | bf16 us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        u, c = r["us"], r["config"]
        print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['same_bits']} | {u['row_major']:.2f} | {u['tiled']:.2f} | {u['tiled'] / u['row_major']:.3f} | "
              f"{r['weight_gbps']['tiled']:.0f} | {u['bf16']:.2f} |")
    if a.all_configs:
        copy = measure_ceilings(probe.timer).copy_gbps
        print(f"\ncopy ceiling (this run, after the cells): {copy:.0f} GB/s")
        print("| format/act | shape | M | dispatched us | tiled best us | tiled best config | best / dispatched | "
              "% copy dispatched | % copy with tiled | bf16 / dispatched | bf16 / with tiled |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            u = r["us"]
            both = min(u["dispatched"], u["tiled_best"])
            gb = r["weight_gbps"]
            c = r["tiled_best_config"]
            print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {u['dispatched']:.2f} | {u['tiled_best']:.2f} | "
                  f"{c['warps']}w/{c['mtiles']}t/u{c['unroll']} | {u['tiled_best'] / u['dispatched']:.3f} | "
                  f"{100 * gb['dispatched'] / copy:.1f} | {100 * r['bytes'] / (both * 1e-6) / 1e9 / copy:.1f} | "
                  f"{u['bf16'] / u['dispatched']:.2f} | {u['bf16'] / both:.2f} |")


if __name__ == "__main__":
    main()
