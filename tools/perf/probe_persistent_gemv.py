"""A persistent grid for the CUDA W8A16 decode GEMV: worth building into the launcher? Timed on the GPU.

The GEMV's launcher starts one CTA per row tile (kernels_cuda/_launch.py). Compiled with FP8D_CFG_PERSIST
(csrc/skinny_common.cuh kPersistent), the same kernel walks row tiles blockIdx.x, + gridDim.x, ... and issues the next
tile's first weight loads before the current tile's reduction; launched with only the CTAs the device keeps resident
(the driver's occupancy query), it trades the hardware's CTA launches for that overlap. This probe times, per cell
(format x shape x M) at the shipped table's config for cuda.w8a16_gemv where it holds the key (else the default):
  tiles      : the shipped launcher (one CTA per row tile)
  persistent : the persistent module on the resident grid, the same config
  bf16       : F.linear on the bf16 weight
and checks that both GEMVs give the same bits (the same sums in the same order). mxfp8 is left out: its per-CTA Rare
policy does not combine with a persistent CTA (a static_assert). The bench's timing: graph replay over weight copies
rotating through > 3.3x L2, median. A JSON line per cell; a table last.

    python -m tools.perf.probe_persistent_gemv [--shapes 4096x4096,...] [--m 1,4,16] [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import json

SHAPES = "6144x4096,4096x4096,28672x4096,4096x14336,128256x4096,8192x8192,6656x2560,8192x2560"


def main(argv: list[str] | None = None) -> None:
    import torch

    import tuning_db
    from dispatch import tables
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import detect
    from dispatch.weight_quant import quantize
    from kernels_cuda import _driver, _launch
    from kernels_cuda._driver import ptr
    from kernels_cuda._kinds import DTYPE_CODE, SCALE_CODE
    from kernels_cuda._w8a8_fused import resident_ctas
    from kernels_cuda.configs import GemvConfig, default_gemv_config
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, warm_gpu
    from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--m", default="1,4,16")
    ap.add_argument("--formats", default="fp8_row,fp8_tensor,fp8_block")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    timer, rot, l2, target = CudaTimer(), RotationPolicy(), l2_bytes(), detect("cuda")
    policy = TimingPolicy(target_graph_us=2000.0, min_calls=20, max_calls=300, replays=5, eager_iters=5)
    table = tables.load_table(str(next(iter(tuning_db.table_paths()))))
    entries = {(e.format, e.act, e.n, e.k, e.m_bucket): e for e in table.entries}
    out = open(a.out, "a") if a.out else None
    dev = torch.cuda.current_device()
    arch = _launch.device_arch(dev)
    rows = []
    warm_gpu(1.0)
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = make_weight(n, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        for fname in a.formats.split(","):
            fmt = Format(fname)
            ws = build_weight_set(w, fmt, Act.BF16, l2_bytes=l2, rotation=rot, quantize=quantize)
            q = ws.copies
            for m in (int(v) for v in a.m.split(",")):
                p = Problem(fmt, Act.BF16, m, n, k)
                e = entries.get((fmt, Act.BF16, n, k, p.bucket))
                cfg = GemvConfig.from_dict(dict(e.config)) if e is not None and e.impl == "cuda.w8a16_gemv" \
                    else default_gemv_config(p, target)
                x = make_activation(m, k, "cuda")
                name, entry, d = _launch.gemv_module(False, SCALE_CODE[fmt], DTYPE_CODE[x.dtype], m, cfg)
                kernel = _launch._kernel(name, entry, tuple(sorted(d + (("FP8D_CFG_PERSIST", 1),))), dev, arch)
                threads, smem = 32 * cfg.warps, cfg.smem_bytes(m)
                tiles = -(-n // cfg.rows_per_cta)
                grid = (min(tiles, resident_ctas(kernel, threads, smem)), 1, 1)
                pdl = _launch.pdl_allowed(arch)

                def persistent(i, x=x, q=q, kernel=kernel, grid=grid, threads=threads, smem=smem, pdl=pdl):
                    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
                    args = (ptr(q[i].qdata), ptr(q[i].scale), ptr(x), 0, ptr(y), x.shape[0], n, k, 0, DTYPE_CODE[y.dtype])
                    _driver.launch(kernel, grid, (threads, 1, 1), args, smem, pdl=pdl)
                    return y

                variants = {"tiles": lambda i, c=cfg, q=q, x=x: _launch.w8a16_gemv(x, q[i], None, None, c),
                            "persistent": persistent}
                same = bool(torch.equal(variants["tiles"](0), persistent(0)))
                row = {"fmt": fmt.value, "n": n, "k": k, "m": m, "config": cfg.to_dict(), "grid": grid[0],
                       "tiles": tiles, "same_bits": same, "us": {}}
                for rnd in range(2):  # alternate the variants, reversed the second round
                    for vname in (list(variants) if rnd == 0 else list(variants)[::-1]):
                        t = timer.time(variants[vname], ws.ncopies, policy).best_us
                        row["us"][vname] = min(row["us"].get(vname, t), t)
                row["us"]["bf16"] = timer.time(lambda i, x=x: torch.nn.functional.linear(x, bw[i]), len(bw),
                                               policy).best_us
                row["weight_gbps"] = {v: q[0].nbytes / (t * 1e-6) / 1e9 for v, t in row["us"].items()}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            del ws, q, variants
            torch.cuda.empty_cache()
    print("\n| format | shape | M | config | grid/tiles | same bits | tiles us | persistent us | ratio | bf16 us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        u = r["us"]
        c = r["config"]
        print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['grid']}/{r['tiles']} | {r['same_bits']} | {u['tiles']:.2f} | {u['persistent']:.2f} | "
              f"{u['persistent'] / u['tiles']:.3f} | {u['bf16']:.2f} |")


if __name__ == "__main__":
    main()
