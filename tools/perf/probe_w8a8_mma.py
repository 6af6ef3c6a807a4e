"""The CUDA W8A8 decode GEMV on sm_90: which MMA path is faster there, timed on the GPU.

sm_90 has no mma.sync for e4m3: ptxas lowers the kernel's m16n8k32 e4m3 MMA (FP8D_HAS_FP8_MMA) to F2FP conversions of
both operands to f16 plus f16 HMMAs, per MMA. The sm_80 path (FP8D_FORCE_SW_CVT, compiled for the same sm_90) decodes
both operands to bf16 with the integer trick of the W8A16 GEMV (fp8d_decode4_bf16x2_fast) and runs bf16 HMMAs. On the
same chip, at the same config, per cell (format x shape x M), this times:
  native / sw      : the two-launch route (quantizer + GEMV), MMA path native / sm_80
  fq_native / fq_sw: the one-launch GEMV (kernels_cuda/_w8a8_fused.py) the same two ways, where it serves (M <= 8)
  bf16             : F.linear on the bf16 weight
with the shipped table's config for cuda.w8a8_gemv where it holds the key, else the GEMV's default. Both paths are
bit-identical in their codes and exact in their products (bf16 and f16 hold every e4m3 value); the sums may differ in
the last bits (different MMA instructions), so each variant is also checked against the first.
The bench's timing: graph replay over weight copies rotating through > 3.3x L2, median. A JSON line per cell.

    python -m tools.perf.probe_w8a8_mma [--shapes 4096x4096,...] [--m 1,4,16] [--out probe.jsonl]
"""

from __future__ import annotations

from tools.perf.probe_harness import Probe, parser


def main(argv: list[str] | None = None) -> None:
    from dispatch.formats import act_granularity
    from kernels_cuda import _launch, _w8a8_fused

    a = parser(__doc__, formats="fp8_block,fp8_tensor,fp8_row").parse_args(argv)
    probe = Probe(a)
    for c in probe.cells("fp8"):
        cfg = probe.gemv_config(c.problem, "cuda.w8a8_gemv")
        x, q = c.x, c.ws.copies
        variants = {"native": lambda i, cfg=cfg, q=q, x=x: _launch.w8a8_gemv(x, q[i], None, None, cfg),
                    "sw": lambda i, cfg=cfg, q=q, x=x: _launch.w8a8_gemv(x, q[i], None, None, cfg, force_sw_cvt=True)}
        if _w8a8_fused.unsupported_reason(c.m, c.k, act_granularity(c.fmt, c.act), cfg) is None:
            variants["fq_native"] = lambda i, cfg=cfg, q=q, x=x: _w8a8_fused.w8a8_gemv_fq(x, q[i], None, None, cfg)
            variants["fq_sw"] = lambda i, cfg=cfg, q=q, x=x: _w8a8_fused.w8a8_gemv_fq(x, q[i], None, None, cfg,
                                                                                   force_sw_cvt=True)
        first = variants["native"](0).float()
        row = {"fmt": c.fmt.value, "n": c.n, "k": c.k, "m": c.m, "config": cfg.to_dict(), "max_rel_diff": {}}
        for name, call in variants.items():
            y = call(0).float()
            row["max_rel_diff"][name] = float(((y - first).abs().max() / first.abs().max()).item())
        row["us"] = probe.time_variants(variants, c.ws.ncopies)
        row["us"]["bf16"] = probe.bf16_us(c)
        probe.emit(row, f"{c.fmt.value}/fp8 {c.n}x{c.k} M={c.m} {cfg.to_dict()}: " + " | ".join(
            f"{v} {t:.2f}" for v, t in row["us"].items()) + f" | sw/native {row['us']['sw'] / row['us']['native']:.3f}")


if __name__ == "__main__":
    main()
