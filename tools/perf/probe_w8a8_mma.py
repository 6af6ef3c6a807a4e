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

import argparse
import json

SHAPES = "6144x4096,4096x4096,28672x4096,4096x14336,128256x4096,8192x8192,6656x2560,8192x2560"


def main(argv: list[str] | None = None) -> None:
    import torch

    import tuning_db
    from dispatch import tables
    from dispatch.formats import Act, Format, act_granularity
    from dispatch.problem import Problem
    from dispatch.target import detect
    from dispatch.weight_quant import quantize
    from kernels_cuda import _launch, _w8a8_fused
    from kernels_cuda.configs import GemvConfig, default_gemv_config
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, warm_gpu
    from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--m", default="1,4,16")
    ap.add_argument("--formats", default="fp8_block,fp8_tensor,fp8_row")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    timer, rot, l2, target = CudaTimer(), RotationPolicy(), l2_bytes(), detect("cuda")
    policy = TimingPolicy(target_graph_us=2000.0, min_calls=20, max_calls=300, replays=5, eager_iters=5)
    table = tables.load_table(str(next(iter(tuning_db.table_paths()))))
    entries = {(e.format, e.act, e.n, e.k, e.m_bucket): e for e in table.entries}
    out = open(a.out, "a") if a.out else None
    warm_gpu(1.0)
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = make_weight(n, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        for fname in a.formats.split(","):
            fmt = Format(fname)
            ws = build_weight_set(w, fmt, Act.FP8, l2_bytes=l2, rotation=rot, quantize=quantize)
            for m in (int(v) for v in a.m.split(",")):
                p = Problem(fmt, Act.FP8, m, n, k)
                e = entries.get((fmt, Act.FP8, n, k, p.bucket))
                cfg = GemvConfig.from_dict(dict(e.config)) if e is not None and e.impl == "cuda.w8a8_gemv" \
                    else default_gemv_config(p, target)
                x = make_activation(m, k, "cuda")
                q = ws.copies
                variants = {"native": lambda i, c=cfg, q=q, x=x: _launch.w8a8_gemv(x, q[i], None, None, c),
                            "sw": lambda i, c=cfg, q=q, x=x: _launch.w8a8_gemv(x, q[i], None, None, c,
                                                                              force_sw_cvt=True)}
                if _w8a8_fused.unsupported_reason(m, k, act_granularity(fmt, Act.FP8), cfg) is None:
                    variants["fq_native"] = lambda i, c=cfg, q=q, x=x: _w8a8_fused.w8a8_gemv_fq(x, q[i], None, None, c)
                    variants["fq_sw"] = lambda i, c=cfg, q=q, x=x: _w8a8_fused.w8a8_gemv_fq(x, q[i], None, None, c,
                                                                                         force_sw_cvt=True)
                first = variants["native"](0).float()
                row = {"fmt": fmt.value, "n": n, "k": k, "m": m, "config": cfg.to_dict(), "us": {}, "max_rel_diff": {}}
                for name, call in variants.items():
                    y = call(0).float()
                    row["max_rel_diff"][name] = float(((y - first).abs().max() / first.abs().max()).item())
                for rnd in range(2):  # alternate the variants, reversed the second round
                    for name in (list(variants) if rnd == 0 else list(variants)[::-1]):
                        t = timer.time(variants[name], ws.ncopies, policy).best_us
                        row["us"][name] = min(row["us"].get(name, t), t)
                tb = timer.time(lambda i, x=x: torch.nn.functional.linear(x, bw[i]), len(bw), policy).best_us
                row["us"]["bf16"] = tb
                print(f"{fmt.value}/fp8 {n}x{k} M={m} {cfg.to_dict()}: " + " | ".join(
                    f"{v} {t:.2f}" for v, t in row["us"].items()) + f" | sw/native {row['us']['sw'] / row['us']['native']:.3f}",
                    flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            del ws, q, variants
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
