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

from tools.perf.probe_harness import Probe, parser


def main(argv: list[str] | None = None) -> None:
    import torch

    from kernels_cuda import _driver, _launch
    from kernels_cuda._driver import ptr
    from kernels_cuda._kinds import DTYPE_CODE, SCALE_CODE
    from kernels_cuda._w8a8_fused import resident_ctas

    a = parser(__doc__, formats="fp8_row,fp8_tensor,fp8_block").parse_args(argv)
    probe = Probe(a)
    dev = torch.cuda.current_device()
    arch = _launch.device_arch(dev)
    for c in probe.cells("bf16"):
        n, k, m, x, q = c.n, c.k, c.m, c.x, c.ws.copies
        cfg = probe.gemv_config(c.problem, "cuda.w8a16_gemv")
        name, entry, d = _launch.gemv_module(False, SCALE_CODE[c.fmt], DTYPE_CODE[x.dtype], m, cfg)
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

        variants = {"tiles": lambda i, cfg=cfg, q=q, x=x: _launch.w8a16_gemv(x, q[i], None, None, cfg),
                    "persistent": persistent}
        row = {"fmt": c.fmt.value, "n": n, "k": k, "m": m, "config": cfg.to_dict(), "grid": grid[0], "tiles": tiles,
               "same_bits": bool(torch.equal(variants["tiles"](0), persistent(0))),
               "us": probe.time_variants(variants, c.ws.ncopies)}
        row["us"]["bf16"] = probe.bf16_us(c)
        row["weight_gbps"] = {v: q[0].nbytes / (t * 1e-6) / 1e9 for v, t in row["us"].items()}
        probe.emit(row)
    print("\n| format | shape | M | config | grid/tiles | same bits | tiles us | persistent us | ratio | bf16 us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in probe.rows:
        u = r["us"]
        c = r["config"]
        print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['grid']}/{r['tiles']} | {r['same_bits']} | {u['tiles']:.2f} | {u['persistent']:.2f} | "
              f"{u['persistent'] / u['tiles']:.3f} | {u['bf16']:.2f} |")


if __name__ == "__main__":
    main()
