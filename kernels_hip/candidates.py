"""Candidates of the HIP backend (ROCm, RDNA4 gfx12): W8A16 and W8A8 decode on the WMMA matrix cores.

NOT YET RUN ON HARDWARE: every kernel here is compiled for gfx1201 and ISA-checked in CI (clang-19), and
the host glue is unit-tested on CPU, but no AMD GPU has executed them. `HARDWARE_VALIDATED = False` makes
dispatch.explain() say so next to every candidate id; docs/hip.md lists what a run on the card must prove.

Import-safe: nothing here imports CuPy or touches a device.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch

from dispatch.formats import Act, Format, QWeight
from dispatch.problem import Candidate, KernelConfig, Problem, Support
from dispatch.target import Target

from . import compiler
from .configs import MAX_M, WmmaConfig, wmma_configs_for
from .format_table import hw_fp8

HARDWARE_VALIDATED = False  # read by dispatch.registry: flips to True only after the GPU suite ran on a gfx12 card
NOT_RUN = "not yet run on hardware (compiled and ISA-checked for gfx1201 only)"

_SOURCES = ("kernels_hip/csrc/gfx12_fp8.h", "kernels_hip/csrc/fp8_format_table.h",
            "kernels_cuda/csrc/portability.cuh", "kernels_cuda/csrc/fp8_common.cuh")


def _gfx12_wmma(target: Target) -> Support:
    """Feature check: the target must be an AMD arch whose table entry has gfx12's WMMA fragments."""
    if not target.is_rocm:
        return Support.no(f"HIP kernels run on ROCm (AMD) devices; this target is {target.vendor} {target.arch}")
    hw = hw_fp8(target.arch)
    if hw is None:
        return Support.no(f"AMD arch {target.arch} is not in kernels_hip/format_table.py (HW_FP8): its fp8 "
                          "encoding and matrix instructions are unknown")
    if not hw.has_fp8_wmma:
        return Support.no(f"{target.arch} lacks RDNA4's v_wmma_f32_16x16x16_* fragments these kernels are written for")
    return Support.yes()


class _HipWmmaCandidate(Candidate):
    backend: ClassVar[str] = "hip"
    config_type: ClassVar[type[KernelConfig]] = WmmaConfig
    hardware_validated: ClassVar[bool] = False
    x_dtypes: ClassVar[tuple[torch.dtype, ...]] = ()

    def available(self) -> Support:
        reason = compiler.runtime_unavailable_reason()
        return Support.no(reason) if reason else Support.yes(NOT_RUN)

    def supports(self, problem: Problem, target: Target) -> Support:
        hw = _gfx12_wmma(target)
        if not hw:
            return hw
        if (problem.fmt, problem.act) not in self.serves:
            return Support.no(f"{self.id} does not serve {problem.fmt}/{problem.act}")
        if not 1 <= problem.m <= MAX_M:
            return Support.no(f"decode kernel: M <= {MAX_M} (16-token WMMA tiles, at most 2), got M = {problem.m}")
        if problem.k % 16:
            return Support.no(f"K % 16 == 0 needed (each lane loads 16 codes with one global_load_b128), K = {problem.k}")
        if problem.x_dtype not in self.x_dtypes:
            return Support.no(f"activation dtype {problem.x_dtype} not in {list(self.x_dtypes)}")
        if problem.out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            return Support.no(f"output dtype {problem.out_dtype} is not bf16, fp16 or fp32")
        return Support.yes(NOT_RUN)

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return wmma_configs_for(problem.m) or [WmmaConfig()]

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        return self.configs(problem, target)[0]


class HipW8A16Wmma(_HipWmmaCandidate):
    """bf16/fp16 x, fp8 weights decoded by v_cvt_pk_f32_fp8, v_wmma_f32_16x16x16_bf16/f16, all four formats."""

    id: ClassVar[str] = "hip.w8a16_wmma"
    serves: ClassVar[frozenset] = frozenset((f, Act.BF16) for f in Format)
    x_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16, torch.float16)
    source_files: ClassVar[tuple[str, ...]] = ("kernels_hip/csrc/w8a16_wmma_gfx12.hip", *_SOURCES)

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        from ._launch import w8a16_wmma

        return w8a16_wmma(x2d, qw, bias, out_dtype, config)  # type: ignore[arg-type]


class HipW8A8Wmma(_HipWmmaCandidate):
    """Fused activation quantization (act_quant.cu as HIP), then e4m3 x e4m3 v_wmma_f32_16x16x16_fp8_fp8."""

    id: ClassVar[str] = "hip.w8a8_wmma"
    serves: ClassVar[frozenset] = frozenset({(Format.FP8_BLOCK, Act.FP8), (Format.FP8_TENSOR, Act.FP8),
                                             (Format.FP8_ROW, Act.FP8)})
    x_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.bfloat16, torch.float16, torch.float32)
    source_files: ClassVar[tuple[str, ...]] = ("kernels_hip/csrc/w8a8_wmma_gfx12.hip", "kernels_cuda/csrc/act_quant.cu",
                                               *_SOURCES)

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        from ._launch import w8a8_wmma

        return w8a8_wmma(x2d, qw, bias, out_dtype, config)  # type: ignore[arg-type]


def candidates() -> list[Candidate]:
    return [HipW8A16Wmma(), HipW8A8Wmma()]
