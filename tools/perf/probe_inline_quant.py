"""The W8A8 decode GEMV that quantizes x inside its K loop (cuda.w8a8_gemv_inline) against the two-launch route.

Why: at M = 1 the W8A8 GEMVs run 0.6-2.8 us behind the W8A16 GEMV on the same weight (session 25's bench: fp8_block
4096x14336 18.9 us against fp8_row/bf16's 16.2): the GEMV's x-dependent work waits for the whole quantizer grid, and
only the weight steps issued before that wait are in flight meanwhile. The in-loop variant has no quantizer and (1x128
groups) nothing between the wait and the loop; per tensor / per token one amax pass over x.

Per cell (W8A8 format x shape x M) this times, in alternating order:
  base        the two-launch route (CUDA quantizer, then the GEMV) at the shipped table's config for the CUDA GEMV
  fq          the one-launch GEMV that quantizes all of x into shared memory first, at its default config (M <= 8)
  il:<cfg>    the in-loop variant at each config the candidate offers (w warps, t row tiles, u register ring, r ring
              in shared memory)
and checks that every variant gives the base's bits at the same K split (the same products summed in the same order).
Timing as the bench: graph replay over weight copies rotating through > 3.3x L2, median. A JSON line per cell; a table
last, with the best in-loop config per cell and its ratio to the base and to the table's recorded pick.

    python -m tools.perf.probe_inline_quant [--m 1,4] [--formats fp8_block,fp8_tensor,fp8_row] [--out probe.jsonl]
"""

from __future__ import annotations

from tools.perf.probe_harness import Probe, parser


def tag(cfg) -> str:
    return f"{cfg.warps}w{cfg.mtiles}t" + (f"r{cfg.smem_ring}" if cfg.smem_ring else f"u{cfg.unroll}")


def _gemv_only(x, xq, xs, qw, cfg):
    """The two-launch route's second launch alone (kernels_cuda._launch.w8a8_gemv without its quantizer)."""
    import torch

    from kernels_cuda import _driver, _launch
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE

    m, n, k = x.shape[0], qw.shape[0], qw.shape[1]
    kernel, grid, block, smem, pdl = _launch._gemv_spec(True, ACTQ_CODE[qw.act_granularity], 0, m, n, cfg,
                                                        x.device.index or 0, None, False, False)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    args = (_driver.ptr(qw.qdata), _driver.ptr(qw.scale), _driver.ptr(xq), _driver.ptr(xs), 0, _driver.ptr(y), m, n,
            k, 0, DTYPE_CODE[x.dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y


# The one-launch quantizers of decode sizes, whose CTA size _route_with_quant_block varies (per tensor above 64K elements
# takes two passes: not varied).
DECODE_QUANTIZERS = {"fp8d_act_quant_group", "fp8d_act_quant_token", "fp8d_act_quant_tensor_redundant"}


def _route_with_quant_block(x, qw, cfg, threads: int):
    """The two-launch route with the activation quantizer's CTAs of `threads` threads instead of act_quant_plan's
    (1024 for per token at K >= 4096 and per tensor, 256 for groups): the same kernels and grids, so the same codes;
    what changes is how much of an SM one quantizer CTA needs to start beside the resident GEMV CTAs."""
    import torch

    from kernels_cuda import _driver, _launch
    from kernels_cuda._kinds import DTYPE_CODE

    m, k = x.shape
    g = qw.act_granularity
    codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    shape = {"per_tensor": (), "per_token": (m, 1), "per_token_group_128": (m, -(-k // 128))}[g.value]
    scales = torch.empty(shape, dtype=torch.float32, device=x.device)
    name, defines = _launch.act_quant_module()
    arch = _launch.device_arch(x.device.index or 0)
    xk = DTYPE_CODE[x.dtype]
    for entry, grid, block in _launch.act_quant_plan(m, k, g):
        kern = _launch._kernel(name, entry, defines, x.device.index or 0, arch)
        if entry == "fp8d_act_quant_group":  # one warp per (token, group): the grid grows as the CTAs shrink
            grid = (-(-m * -(-k // 128) // (threads // 32)), 1, 1)
            args = (_driver.ptr(x), xk, _driver.ptr(codes), _driver.ptr(scales), m, k)
        elif entry == "fp8d_act_quant_token":
            args = (_driver.ptr(x), xk, _driver.ptr(codes), _driver.ptr(scales), k)
        elif entry == "fp8d_act_quant_tensor_redundant":
            args = (_driver.ptr(x), xk, _driver.ptr(codes), _driver.ptr(scales), m * k)
        else:
            raise ValueError(f"{entry}: not one of DECODE_QUANTIZERS")
        _driver.launch(kern, grid, (threads, 1, 1), args, pdl=_launch.pdl_allowed(arch))
    return _gemv_only(x, codes, scales, qw, cfg)


def main(argv: list[str] | None = None) -> None:
    import torch

    from dispatch.formats import Act
    from kernels_cuda import _launch, _w8a8_fused, _w8a8_inline
    from kernels_cuda.candidates import CudaW8A8GemvInline
    from kernels_cuda.configs import GemvConfig

    ap = parser(__doc__, m="1,4", formats="fp8_block,fp8_tensor,fp8_row")
    ap.add_argument("--max-configs", type=int, default=10, help="in-loop configs per cell (the candidate's order)")
    ap.add_argument("--inline-configs", default="", help="only these in-loop configs: warps x row tiles x unroll x "
                    "smem ring, comma-separated (e.g. 8x2x1x0,8x2x1x3)")
    ap.add_argument("--quant-blocks", default="", help="also the route with the quantizer's CTAs of these sizes "
                    "(threads, comma-separated, e.g. 128,256)")
    ap.add_argument("--gemv-only", action="store_true", help="also time the GEMV alone on pre-quantized codes")
    a = ap.parse_args(argv)
    probe = Probe(a, eager_iters=3)
    cand = CudaW8A8GemvInline()
    for c in probe.cells("fp8"):
        assert c.act is Act.FP8, "W8A8 formats only"
        q, x = c.ws.copies, c.x
        cfg = probe.gemv_config(c.problem, "cuda.w8a8_gemv")
        variants = {"base": lambda i, cfg=cfg: _launch.w8a8_gemv(x, q[i], None, None, cfg)}
        plan = [e for e, _, _ in _launch.act_quant_plan(c.m, c.k, q[0].act_granularity)]
        for qb in (int(v) for v in a.quant_blocks.split(",") if v and set(plan) <= DECODE_QUANTIZERS):
            variants[f"route_qb{qb}"] = lambda i, cfg=cfg, qb=qb: _route_with_quant_block(x, q[i], cfg, qb)
        if a.gemv_only:  # the GEMV alone on codes quantized once, outside the timing: what the quantizer costs
            xq, xs = _launch.quantize_activation(x, q[0].act_granularity)
            variants["gemv_only"] = lambda i, cfg=cfg, xq=xq, xs=xs: _gemv_only(x, xq, xs, q[i], cfg)
        fq_cfg = _w8a8_fused.as_fq_config(cfg)
        if _w8a8_fused.unsupported_reason(c.m, c.k, q[0].act_granularity, fq_cfg) is None and not cfg.smem_ring:
            variants["fq"] = lambda i, f=fq_cfg: _w8a8_fused.w8a8_gemv_fq(x, q[i], None, None, f)
        configs = list(cand.configs(c.problem, probe.target)) if c.m <= 4 else []
        if a.inline_configs:
            want = {tuple(int(v) for v in t.split("x")) for t in a.inline_configs.split(",")}
            configs = [ic for ic in configs if (ic.warps, ic.mtiles, ic.unroll, ic.smem_ring) in want]
        configs = configs[: a.max_configs]
        for ic in configs:
            variants["il:" + tag(ic)] = lambda i, ic=ic: _w8a8_inline.w8a8_gemv_inline(x, q[i], None, None, ic)
        # the reference of a variant: the two-launch GEMV at the same warps (the K split sets the summation order)
        refs = {w: _launch.w8a8_gemv(x, q[0], None, None, GemvConfig(warps=w)) for w in (2, 4, 8)}
        same = {}
        for name, fn in variants.items():
            warps = cfg.warps if not name.startswith("il:") else int(name.split(":")[1].split("w")[0])
            same[name] = bool(torch.equal(refs[warps], fn(0)))
        e = probe.entries.get((c.fmt, c.act, c.n, c.k, c.problem.bucket))
        probe.emit_cell(c, cfg, variants, same, table={"impl": e.impl, "us": e.us} if e is not None else None)
    print("\n| format | shape | M | same bits | base us | fq / base | best in-loop | in-loop / base | table pick (us) | "
          "in-loop / table | bf16 / in-loop |")
    print("|---" * 11 + "|")
    ratios = []
    for r in probe.rows:
        u = r["us"]
        best = min((k for k in u if k.startswith("il:")), key=u.get, default=None)
        if best is None:
            continue
        ratios.append(u[best] / u["base"])
        t = r["table"]
        fq = f"{u['fq'] / u['base']:.3f}" if "fq" in u else "-"
        if "gemv_only" in u:
            fq += f" (gemv alone {u['gemv_only'] / u['base']:.3f})"
        tt = f"{t['impl']} ({t['us']:.2f})" if t else "-"
        vt = f"{u[best] / t['us']:.3f}" if t else "-"
        print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {r['same_bits']} | {u['base']:.2f} | {fq} | {best} | "
              f"{u[best] / u['base']:.3f} | {tt} | {vt} | {u['bf16'] / u[best]:.2f} |")
    alone = [r for r in probe.rows if "gemv_only" in r["us"]]
    if alone:
        qbs = sorted({k for r in alone for k in r["us"] if k.startswith("route_qb")})
        print("\n| format | shape | M | route us | GEMV alone us | the quantizer's share us |"
              + "".join(f" {q} / route |" for q in qbs) + "\n|---|---|---|---|---|---|" + "---|" * len(qbs))
        for r in alone:
            u = r["us"]
            print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {u['base']:.2f} | {u['gemv_only']:.2f} | "
                  f"{u['base'] - u['gemv_only']:.2f} |" + "".join(f" {u[q] / u['base']:.3f} |" for q in qbs))
        for q in qbs:
            v = sorted(r["us"][q] / r["us"]["base"] for r in alone)
            print(f"{q} / route: median {v[len(v) // 2]:.3f}, range {v[0]:.3f}-{v[-1]:.3f}, < 0.99x in "
                  f"{sum(x < 0.99 for x in v)} of {len(v)}")
    v = sorted(ratios)
    if v:
        print(f"best in-loop / base: median {v[len(v) // 2]:.3f}, range {v[0]:.3f}-{v[-1]:.3f}, "
              f"< 0.99x in {sum(x < 0.99 for x in v)} of {len(v)}")


if __name__ == "__main__":
    main()
