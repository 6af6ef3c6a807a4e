"""The CUDA decode GEMVs' weight ring in shared memory (cp.async) against the shipped ring in registers.

Why: the GEMVs are latency-bound (session 4's and 5's Nsight profiles: 58-63 % of scheduler cycles with no eligible
warp, stalls on the weight loads), and at M = 16 the 128-register budget holds a ring of only 1-3 K steps, so fewer
bytes are in flight than at M = 1 (M = 16 runs 1.1-1.2x the M = 1 time on the same weight). With FP8D_SMEM_RING = S
(csrc/skinny_common.cuh; GemvConfig.smem_ring since session 25, first run as a probe's define) each thread copies
its weight chunks with cp.async into its own slots of an S-step ring in shared memory and reads them back after
`cp.async.wait_group`: the depth costs shared memory (S x 4 x mtiles x 16 bytes a thread), not registers.

Per cell (format/act x shape x M) this times, in alternating order:
  base          the shipped launcher at the shipped table's config (W8A8: the CUDA activation quantizer, then the GEMV)
  tiled         the same on the weight's decode tiles (the opt-in layout; the row-major GEMV's best known rival)
  r<S>:<w>w<t>t the launcher at GemvConfig(w, t, 1, smem_ring=S): warps w, row tiles t, a ring of S steps in
                shared memory
and checks that every variant gives the base's bits (the same products summed in the same order). Timing as the bench:
graph replay over weight copies rotating through > 3.3x L2, median. A JSON line per cell; a table last, with the best
ring variant per cell.

    python -m tools.perf.probe_smem_ring [--rings 3,6] [--configs 8x1,8x2,4x1,4x2] [--m 1,4,16] [--out probe.jsonl]
"""

from __future__ import annotations

from tools.perf.probe_harness import Probe, parser

SMEM_PER_SM = 227 * 1024  # sm_90's shared memory a block may use


def ring_bytes(stages: int, warps: int, mtiles: int) -> int:
    """The shared-memory ring of one CTA: S steps x (4 x mtiles) 16-byte chunks x threads (skinny_common.cuh)."""
    return stages * 4 * mtiles * 16 * 32 * warps


def main(argv: list[str] | None = None) -> None:
    import torch

    from kernels_cuda.configs import GemvConfig

    ap = parser(__doc__, m="1,4,16", formats="fp8_row,mxfp8,fp8_block:fp8,fp8_tensor:fp8,fp8_row:fp8")
    ap.add_argument("--rings", default="3,6", help="ring depths S (1..8) to time")
    ap.add_argument("--configs", default="8x1,8x2,4x1,4x2", help="warps x row tiles of the ring variants")
    a = ap.parse_args(argv)
    rings = [int(v) for v in a.rings.split(",") if v]
    configs = [tuple(int(v) for v in c.split("x")) for c in a.configs.split(",") if c]
    probe = Probe(a, eager_iters=3)
    for c in probe.cells("bf16"):
        q, x = c.ws.copies, c.x
        tiles, launcher, cfg = probe.gemv_cell(c)

        def plain(tiled, q=q, x=x, f=launcher, cfg=cfg, tw=tiles):
            return lambda i: f(x, q[i], None, None, cfg, tiles=tw[i] if tiled else None)

        def ringed(rcfg, q=q, x=x, f=launcher):
            return lambda i: f(x, q[i], None, None, rcfg)

        variants = {"base": plain(False), "tiled": plain(True)}
        for s in rings:
            for w, t in configs:
                if ring_bytes(s, w, t) + 8192 > SMEM_PER_SM:
                    continue
                variants[f"r{s}:{w}w{t}t"] = ringed(GemvConfig(warps=w, mtiles=t, unroll=1, smem_ring=s))
        # A ring variant sums the same products in the same order as the register-ring GEMV at its own warps (the K
        # split over warps sets the order; row tiles and ring depth do not): that is its reference.
        refs = {w: launcher(x, q[0], None, None, GemvConfig(warps=w, mtiles=1, unroll=1)) for w in {w for w, _ in configs}}
        ref = variants["base"](0)
        same = {n: bool(torch.equal(refs[int(n.split(":")[1].split("w")[0])] if n.startswith("r") else ref, v(0)))
                for n, v in variants.items()}
        probe.emit_cell(c, cfg, variants, same)
    print("\n| format/act | shape | M | config | same bits | base us | tiled / base | best ring | best ring / base | "
          "ring / tiled | bf16 / base |")
    print("|---" * 11 + "|")
    ratios, vs_tiled = [], []
    for r in probe.rows:
        u, c = r["us"], r["config"]
        rn = min((k for k in u if k.startswith("r")), key=u.get, default=None)
        if rn is None:
            continue
        ratios.append(u[rn] / u["base"])
        vs_tiled.append(u[rn] / u["tiled"])
        print(f"| {r['fmt']}/{r['act']} | {r['n']}x{r['k']} | {r['m']} | {c['warps']}w/{c['mtiles']}t/u{c['unroll']} | "
              f"{r['same_bits']} | {u['base']:.2f} | {u['tiled'] / u['base']:.3f} | {rn} | {u[rn] / u['base']:.3f} | "
              f"{u[rn] / u['tiled']:.3f} | {u['bf16'] / u['base']:.2f} |")
    for name, v in (("best ring / base", ratios), ("best ring / tiled", vs_tiled)):
        v = sorted(v)
        if v:
            print(f"{name}: median {v[len(v) // 2]:.3f}, range {v[0]:.3f}-{v[-1]:.3f}, "
                  f"< 0.99x in {sum(x < 0.99 for x in v)} of {len(v)}")
    names = sorted({k for r in probe.rows for k in r["us"] if k.startswith("r")})
    for n in names:
        v = sorted(r["us"][n] / r["us"]["base"] for r in probe.rows if n in r["us"])
        print(f"{n}: median {v[len(v) // 2]:.3f} of base over {len(v)} cells, best in "
              f"{sum(1 for r in probe.rows if min((k for k in r['us'] if k.startswith('r')), key=r['us'].get) == n)}")


if __name__ == "__main__":
    main()
