"""Timing of the Triton prefill GEMMs on a GPU, for the lead and tools/bench (a benchmark, not a test).

Method (as in ../shared/perf/h200_baseline.md, timed by tools/perf/timing.py, the project's one timing
implementation; so this runs from a repository checkout): CUDA-graph replay of one call per weight copy,
weight copies rotating over > 3.3x the L2 size (so weights come from HBM as in a real model), median over
replays; W8A8 times include the dynamic activation quantization unless `act_quant=False`. A config that
fails to compile, run or be captured in a graph is reported as failed with its error, never as a slow time.

    python -m kernels_triton._gemm_bench --m 4096 --shapes 4096x4096,28672x4096 --all-configs
"""

from __future__ import annotations

import argparse
import dataclasses
import functools

import torch

import dispatch
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.target import detect

from ._gemm_candidates import TritonW8A8Gemm, TritonW8A16Gemm
from ._gemm_config import GemmConfig


@dataclasses.dataclass(frozen=True)
class GemmTiming:
    fmt: str
    act: str
    m: int
    n: int
    k: int
    config: GemmConfig
    us: float | None  # median microseconds per call; None when failed
    tflops: float | None
    error: str = ""


@functools.lru_cache(maxsize=None)
def _timer():
    from tools.perf.timing import CudaTimer
    return CudaTimer()  # one per process: it keeps one capture stream for its life


def time_prefill(fmt: str, act: str, m: int, n: int, k: int, config: GemmConfig | None = None, *,
                 act_quant: bool = True, replays: int = 20, x_dtype: torch.dtype = torch.bfloat16) -> GemmTiming:
    from tools.perf.timing import RotationPolicy, l2_bytes, one_rotation

    tgt = detect(torch.device("cuda"))
    cand = TritonW8A16Gemm() if Act(act) is Act.BF16 else TritonW8A8Gemm()
    g = torch.Generator(device="cuda").manual_seed(0)
    base = dispatch.quantize(torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16), fmt, act=act)
    copies = RotationPolicy().copies(base.nbytes, l2_bytes(torch.device("cuda", torch.cuda.current_device())))
    qws = [base] + [dispatch.QWeight(base.format, base.act, base.qdata.clone(), base.scale.clone())
                    for _ in range(copies - 1)]
    x = torch.randn(m, k, device="cuda", generator=g).to(x_dtype)
    prob = Problem(Format(fmt), Act(act), m, n, k, x_dtype, torch.bfloat16)
    cfg = config or cand.default_config(prob, tgt)
    preps = [cand.prepare(q) for q in qws]

    if Act(act) is Act.FP8 and not act_quant:
        from ._gemm_launch import w8a8_gemm
        xq, xs = dispatch.quantize_activation(x, base.act_granularity)

        def call(i: int) -> torch.Tensor:
            return w8a8_gemm(xq, xs, qws[i], None, torch.bfloat16, cfg, hw_fp8=tgt.has_triton_fp8_dtype)
    else:
        def call(i: int) -> torch.Tensor:
            return cand.run(x, qws[i], preps[i], None, torch.bfloat16, cfg)

    try:
        t = _timer().time(call, copies, one_rotation(replays))
    except Exception as e:  # a failed config is a result (recorded with its error), not a slow time
        return GemmTiming(fmt, act, m, n, k, cfg, None, None, f"{type(e).__name__}: {str(e)[:300]}")
    if t.us is None:  # graph capture failed: a failure here, not an eager stand-in (this number is graph replay)
        return GemmTiming(fmt, act, m, n, k, cfg, None, None, t.note)
    return GemmTiming(fmt, act, m, n, k, cfg, t.us, 2 * m * n * k / (t.us * 1e-6) / 1e12)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--shapes", default="4096x4096,28672x4096,4096x14336,8192x8192", help="NxK,...")
    ap.add_argument("--formats", default="fp8_tensor/fp8,fp8_block/fp8,fp8_row/fp8,fp8_row/bf16,mxfp8/bf16,"
                                         "fp8_block/bf16,fp8_tensor/bf16")
    ap.add_argument("--all-configs", action="store_true", help="time every config of the candidate's space")
    ap.add_argument("--no-act-quant", action="store_true", help="W8A8: time the GEMM alone")
    a = ap.parse_args(argv)
    tgt = detect(torch.device("cuda"))
    print(f"# {tgt.device_name} ({tgt.arch}), torch {tgt.torch_version}, triton {tgt.triton_version}; "
          f"M = {a.m}; CUDA-graph replay, weights rotating over > 3x L2, median of 20")
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for fa in a.formats.split(","):
            fmt, act = fa.split("/")
            cand = TritonW8A16Gemm() if act == "bf16" else TritonW8A8Gemm()
            prob = Problem(Format(fmt), Act(act), a.m, n, k)
            cfgs = list(cand.configs(prob, tgt)) if a.all_configs else [cand.default_config(prob, tgt)]
            res = [time_prefill(fmt, act, a.m, n, k, c, act_quant=not a.no_act_quant) for c in cfgs]
            for r in res:
                tag = f"{r.us:9.1f} us {r.tflops:7.1f} TFLOP/s" if r.us is not None else f"FAILED {r.error}"
                print(f"{fmt:10s} {act:4s} {a.m}x{n}x{k}  {tag}  {r.config}")
            ok = [r for r in res if r.us is not None]
            if len(res) > 1 and ok:
                best = min(ok, key=lambda r: r.us)
                print(f"  best {fmt}/{act} {n}x{k}: {best.tflops:.1f} TFLOP/s with {best.config}")


if __name__ == "__main__":
    main()
