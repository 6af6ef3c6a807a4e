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
the product's (kernels_cuda/_tiles.py: tile_codes, w8a16_gemv_tiled, w8a8_gemv_tiled; session 22's calls 5-8 ran an
earlier copy of that code inside this probe, the same layout, modules and geometry), made for each rotating weight
copy. The bench's timing: graph replay over weight copies rotating through > 3.3x L2, median. A JSON line per cell; a
table last.

    python -m tools.perf.probe_tiled_gemv [--shapes 4096x14336,...] [--m 1,16] [--formats fp8_row,fp8_tensor:fp8]
        [--all-configs] [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import json

SHAPES = "4096x14336,8192x8192,28672x4096,128256x4096,4096x4096,6144x4096,6656x2560,8192x2560"


def _compile(item: tuple) -> str:
    from kernels_cuda import compiler

    name, defines, arch = item
    compiler.compile_module(name, arch, dict(defines))
    return name


def main(argv: list[str] | None = None) -> None:
    import torch

    import tuning_db
    from dispatch import tables
    from dispatch.formats import Act, Format, act_granularity
    from dispatch.problem import Problem
    from dispatch.target import detect
    from dispatch.weight_quant import quantize
    from kernels_cuda import _launch, _tiles
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import GemvConfig, default_gemv_config
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, measure_ceilings, warm_gpu
    from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--formats", default="fp8_row,mxfp8,fp8_block", help="format[:act] list, act bf16 (default) or fp8")
    ap.add_argument("--all-configs", action="store_true", help="also the tiled GEMV's best config and dispatch.linear")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    import concurrent.futures
    import os

    import dispatch
    from kernels_cuda.configs import gemv_configs
    timer, rot, l2, target = CudaTimer(), RotationPolicy(), l2_bytes(), detect("cuda")
    policy = TimingPolicy(target_graph_us=2000.0, min_calls=20, max_calls=300, replays=5, eager_iters=3)
    table = tables.load_table(str(next(iter(tuning_db.table_paths()))))
    entries = {(e.format, e.act, e.n, e.k, e.m_bucket): e for e in table.entries}
    out = open(a.out, "a") if a.out else None
    arch = _launch.device_arch(torch.cuda.current_device())
    rows = []
    cells = [(tuple(int(v) for v in shape.split("x")), spec, m) for shape in a.shapes.split(",")
             for spec in a.formats.split(",") for m in (int(v) for v in a.m.split(","))]

    def parse(spec: str) -> tuple[Format, Act]:
        fname, _, aname = spec.partition(":")
        return Format(fname), Act(aname or "bf16")

    def tiled_module(fmt: Format, act: Act, m: int, cfg: GemvConfig) -> tuple[str, str, tuple]:
        if act is Act.FP8:
            return _tiles._tiled_module(True, ACTQ_CODE[act_granularity(fmt, act)], 0, m, cfg, False, False)
        return _tiles._tiled_module(False, SCALE_CODE[fmt], DTYPE_CODE[torch.bfloat16], m, cfg, False, False)

    if a.all_configs:  # every tiled module the cells will load, compiled up front on all cores
        todo = set()
        for (n, k), spec, m in cells:
            fmt, act = parse(spec)
            for c in gemv_configs(Problem(fmt, act, m, n, k), target):
                name, _, d = tiled_module(fmt, act, m, c)
                todo.add((name, d, arch))
        with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
            list(pool.map(_compile, sorted(todo)))
        print(f"compiled {len(todo)} tiled modules", flush=True)
    warm_gpu(1.0)
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = make_weight(n, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        for spec in a.formats.split(","):
            fmt, act = parse(spec)
            w8a8 = act is Act.FP8
            ws = build_weight_set(w, fmt, act, l2_bytes=l2, rotation=rot, quantize=quantize)
            q = ws.copies
            tiled = [_tiles.tile_codes(c.qdata) for c in q]
            impl = "cuda.w8a8_gemv" if w8a8 else "cuda.w8a16_gemv"
            launcher = _launch.w8a8_gemv if w8a8 else _launch.w8a16_gemv
            tiled_launcher = _tiles.w8a8_gemv_tiled if w8a8 else _tiles.w8a16_gemv_tiled
            for m in (int(v) for v in a.m.split(",")):
                p = Problem(fmt, act, m, n, k)
                e = entries.get((fmt, act, n, k, p.bucket))
                cfg = GemvConfig.from_dict(dict(e.config)) if e is not None and e.impl == impl \
                    else default_gemv_config(p, target)
                x = make_activation(m, k, "cuda")

                def make_tiled(cfg, x=x, q=q, tw=tiled, f=tiled_launcher):
                    return lambda i: f(x, q[i], None, None, cfg, tiles=tw[i])

                tiled_call = make_tiled(cfg)
                variants = {"row_major": lambda i, c=cfg, q=q, x=x, f=launcher: f(x, q[i], None, None, c),
                            "tiled": tiled_call}
                same = bool(torch.equal(variants["row_major"](0), tiled_call(0)))
                row = {"fmt": fmt.value, "act": act.value, "n": n, "k": k, "m": m, "config": cfg.to_dict(),
                       "same_bits": same, "us": {}}
                for rnd in range(2):  # alternate the variants, reversed the second round
                    for vname in (list(variants) if rnd == 0 else list(variants)[::-1]):
                        t = timer.time(variants[vname], ws.ncopies, policy).best_us
                        row["us"][vname] = min(row["us"].get(vname, t), t)
                if a.all_configs:
                    best = (float("inf"), None)
                    for c in gemv_configs(p, target):
                        t = timer.time(make_tiled(c), ws.ncopies, policy).best_us
                        best = min(best, (t, c.to_dict()), key=lambda b: b[0])
                    row["us"]["tiled_best"], row["tiled_best_config"] = best
                    row["us"]["dispatched"] = timer.time(lambda i, q=q, x=x: dispatch.linear(x, q[i]), ws.ncopies,
                                                         policy).best_us
                row["us"]["bf16"] = timer.time(lambda i, x=x: torch.nn.functional.linear(x, bw[i]), len(bw),
                                               policy).best_us
                row["bytes"] = q[0].nbytes
                row["weight_gbps"] = {v: q[0].nbytes / (t * 1e-6) / 1e9 for v, t in row["us"].items()}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            del ws, q, tiled
            torch.cuda.empty_cache()
    print("\n| format/act | shape | M | config | same bits | row-major us | tiled us | tiled / row-major | GB/s tiled | bf16 us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        u, c = r["us"], r["config"]
        print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['same_bits']} | {u['row_major']:.2f} | {u['tiled']:.2f} | {u['tiled'] / u['row_major']:.3f} | "
              f"{r['weight_gbps']['tiled']:.0f} | {u['bf16']:.2f} |")
    if a.all_configs:
        copy = measure_ceilings(timer).copy_gbps
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
