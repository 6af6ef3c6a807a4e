"""Prefill (tensor-core GEMM) candidates of the Triton backend: `triton.w8a16_gemm`, `triton.w8a8_gemm`.

Registered by `kernels_triton.candidates` (prefill section). Importing this module imports neither triton
nor torch.cuda; the kernels load on the first `run`.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from dispatch import mx_fold
from dispatch.formats import Act, Format, QWeight
from dispatch.problem import Candidate, KernelConfig, Problem
from dispatch.target import Target, detect

from ._gemm_config import GemmConfig, w8a8_configs, w8a16_configs
from ._gemm_layouts import W8A8_LAYOUT, W8A16_LAYOUT
from .candidates import TritonCandidate, check_compiled


class _GemmCandidate(TritonCandidate):
    config_type = GemmConfig

    def grid_fill(self, problem: Problem, config: KernelConfig, target: Target) -> float | None:
        """Tiles x the launch's split-K count (GemmConfig.split_for) over whole waves of the target's SMs."""
        if not isinstance(config, GemmConfig) or target.sm_count <= 0:
            return None
        m, n, k, sms = problem.m, problem.n, problem.k, target.sm_count
        programs = -(-m // config.block_m) * -(-n // config.block_n) * config.split_for(m, n, k, sms)
        return programs / (-(-programs // sms) * sms)


class TritonW8A16Gemm(_GemmCandidate):
    """Prefill W8A16: bf16/fp16 activations, e4m3 weight codes decoded in registers (hardware cvt, or
    software from uint8 on sm_80), bf16/fp16 tensor-core MMA (wgmma with the weight as the register A
    operand on sm_90), fp32 accumulation. Every weight scale layout: tensor/row in the epilogue,
    128x128 blocks per K tile, mx e8m0 folded into the decoded weight (bf16) or per 32-deep K tile (fp16)."""

    id = "triton.w8a16_gemm"
    serves = frozenset((f, Act.BF16) for f in Format)
    source_files = ("kernels_triton/_gemm.py", "kernels_triton/_gemm_launch.py", "kernels_triton/_gemm_config.py",
                    "kernels_triton/_fp8.py", "kernels_triton/_wgmma.py", "kernels_triton/_splitk_reduce.py",
                    "kernels_triton/_pdl.py", "kernels_triton/_fast_launch.py", "kernels_triton/_gemm_layouts.py",
                    "dispatch/mx_fold.py")
    act = Act.BF16
    sibling = "triton.w8a8_gemm"
    x_dtypes = (torch.bfloat16, torch.float16)
    x_dtypes_note = ": bf16/fp16 only (an fp32 tensor-core dot would run as TF32)"

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return w8a16_configs(target, W8A16_LAYOUT[problem.fmt], problem.x_dtype == torch.float16, problem.k,
                             problem.m)

    def prepare(self, qw: QWeight) -> Any:
        if qw.format is Format.MXFP8:
            from ._gemm_launch import mx_scale_rows
            mx_fold.start_read(qw)  # whether the decode folds, read without a host sync (_gemm_launch.mx_fold_ok)
            return mx_scale_rows(qw)  # padded e8m0 rows, cached on the weight (see its docstring)
        return None

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        from ._gemm_launch import w8a16_gemm
        assert isinstance(config, GemmConfig)
        qw.require(qw.format, Act.BF16)
        hw = detect(x2d.device).has_triton_fp8_dtype
        y = w8a16_gemm(x2d, qw, bias, out_dtype, config, hw_fp8=hw)
        check_compiled("_gemm", "_w8a16_gemm_kernel", self.id)
        return y


class TritonW8A8Gemm(_GemmCandidate):
    """Prefill W8A8: dynamic activation quantization (the fused Triton act-quant kernels, bit-identical
    to dispatch.quantize_activation), then e4m3 x e4m3 tensor-core dots (wgmma fp8 on sm_90, mma.sync fp8
    on sm_89, WMMA fp8 on gfx12; exactly decoded bf16 MMA on sm_80), fp32 accumulation. Per-tensor,
    per-token x per-row, and 1x128 x 128x128 block scales applied per K group (DeepSeek-V3)."""

    id = "triton.w8a8_gemm"
    serves = frozenset((f, Act.FP8) for f in W8A8_LAYOUT)
    source_files = ("kernels_triton/_gemm.py", "kernels_triton/_gemm_launch.py", "kernels_triton/_gemm_config.py",
                    "kernels_triton/_fp8.py", "kernels_triton/_act_quant.py", "kernels_triton/weight_quant.py",
                    "kernels_triton/_wgmma.py", "kernels_triton/_splitk_reduce.py",
                    "kernels_triton/_pdl.py", "kernels_triton/_fast_launch.py", "kernels_triton/_gemm_layouts.py",
                    "kernels_triton/act_quant_config.py", "dispatch/mx_fold.py")
    act = Act.FP8
    sibling = "triton.w8a16_gemm"
    x_dtypes = (torch.bfloat16, torch.float16, torch.float32)  # quantized before the GEMM: any float works
    x_dtypes_note = ": bf16/fp16/fp32"

    def format_reason(self, problem: Problem) -> str:
        if problem.fmt not in W8A8_LAYOUT:
            return f"{problem.fmt} has no W8A8 mode (e8m0 groups along K have no activation scheme)"
        return ""

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return w8a8_configs(target, W8A8_LAYOUT[problem.fmt], problem.k, problem.m)

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        """The space's first config, except at 64 < M <= 256 with N <= 4096 on wgmma targets: there the 64x64
        tile (twice the programs of 64x128) was the faster one on the H200 (session 3: 2112x7168 23.1 vs
        30.9 us, 3000x1000 87 vs 185 us, 4096xK 1-16 % faster), while 64x128 wins at larger N. Used where no
        tuned entry applies (the heuristic's pick)."""
        space = self.configs(problem, target)
        if target.has_wgmma and 64 < problem.m <= 256 and problem.n <= 4096:
            for c in space:
                if isinstance(c, GemmConfig) and (c.block_m, c.block_n, c.split_k) == (64, 64, 0):
                    return c
        return space[0]

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        from ._act_quant import quantize_activation
        from ._gemm_launch import w8a8_gemm
        assert isinstance(config, GemmConfig)
        qw.require(qw.format, Act.FP8)
        hw = detect(x2d.device).has_triton_fp8_dtype
        xq, xs = quantize_activation(x2d, qw.act_granularity, hw_fp8=hw)
        y = w8a8_gemm(xq, xs, qw, bias, out_dtype, config, hw_fp8=hw)
        check_compiled("_gemm", "_w8a8_gemm_kernel", self.id)
        return y


def gemm_candidates() -> list[Candidate]:
    return [TritonW8A16Gemm(), TritonW8A8Gemm()]


__all__ = ["TritonW8A16Gemm", "TritonW8A8Gemm", "gemm_candidates"]
