"""Candidates of the Triton backend (imported lazily by dispatch.registry): data, not an if/else chain.

Decode (M <= 64): `triton.w8a16_gemv`, `triton.w8a8_gemv` (kernels_triton/_gemv*.py).
Prefill: appended below by the GEMM module owner (kernels_triton/_gemm*.py).

Importing this module does not import triton or touch a device; `available()` says whether Triton can run.
"""

from __future__ import annotations

import abc
import functools
import importlib
from typing import Any, Callable, ClassVar, Sequence

import torch

from dispatch.formats import Act, Format, QWeight
from dispatch.problem import Candidate, KernelConfig, Problem, Support
from dispatch.target import Target

from .configs import GEMV_MAX_M, GemvConfig, gemv_configs

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MODE = {Act.BF16: "W8A16", Act.FP8: "W8A8"}
_GROUP_K = {Format.FP8_TENSOR: 0, Format.FP8_ROW: 0, Format.FP8_BLOCK: 128, Format.MXFP8: 32}


@functools.lru_cache(maxsize=None)
def triton_available() -> Support:
    try:
        import triton  # noqa: F401
    except Exception as e:  # any import failure (missing wheel, broken install) makes the backend unavailable
        return Support.no(f"triton is not importable ({type(e).__name__}: {e}); pip install triton")
    return Support.yes()


def target_support(target: Target) -> Support:
    """Whether the Triton decode kernels can run on `target` at all, and by which fp8 path."""
    if target.is_cpu:
        return Support.no("Triton kernels need a CUDA or ROCm GPU (the CPU interpreter is for tests only)")
    if target.is_rocm and not target.arch.startswith("gfx12"):
        # CDNA3 (gfx942) hardware fp8 is e4m3fnuz (max 240, other NaN/zero codes), not this library's
        # e4m3fn; its software path is unvalidated there, so it is not offered.
        return Support.no(f"{target.arch}: only RDNA4 (gfx12) is supported on ROCm by the Triton backend "
                          "(CDNA3 fp8 is e4m3fnuz)")
    if not target.has_triton_fp8_dtype:
        return Support.yes(f"{target.arch}: no Triton fp8 type, uint8 codes with software e4m3 decode")
    return Support.yes()


class TritonCandidate(Candidate):
    """What every Triton candidate shares: availability, the support answer (in this order: activation
    mode, format, target, problem size, dtypes) and the default config (the first of the space)."""

    backend = "triton"
    act: ClassVar[Act]  # the activation mode served; the other one is `sibling`'s
    sibling: ClassVar[str]
    x_dtypes: ClassVar[tuple[torch.dtype, ...]]
    x_dtypes_note: ClassVar[str]  # appended to the "activations of dtype ... are not supported" reason

    def available(self) -> Support:
        return triton_available()

    def format_reason(self, problem: Problem) -> str:
        """Why this candidate cannot serve problem.fmt ('' if it can)."""
        return ""

    def size_reason(self, problem: Problem) -> str:
        """Why this candidate does not serve the problem's size ('' if it does)."""
        return ""

    def supports(self, problem: Problem, target: Target) -> Support:
        if problem.act is not self.act:
            return Support.no(f"serves {_MODE[self.act]} (act='{self.act.value}') only; "
                              f"{_MODE[problem.act]} is {self.sibling}")
        why = self.format_reason(problem)
        if why:
            return Support.no(why)
        t = target_support(target)
        if not t:
            return t
        why = self.size_reason(problem)
        if why:
            return Support.no(why)
        if problem.x_dtype not in self.x_dtypes:
            return Support.no(f"activations of dtype {problem.x_dtype} are not supported{self.x_dtypes_note}")
        if problem.out_dtype not in _OUT_DTYPES:
            return Support.no(f"output dtype {problem.out_dtype} is not supported (bf16, fp16, fp32)")
        return t

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        return self.configs(problem, target)[0]


# Read by dispatch.registry: the archs whose hardware ran these kernels (the H200 GPU suite of 2026-11-29: every
# GPU test of the GEMMs, GEMVs and activation quantizers passed in session 3; the GEMM and GEMV tests again on
# session 8's kernels, 127 of 127, session 9's, and the GEMM tests on session 10's). sm_80, sm_89 and gfx1201 are
# compile-checked only (tools/isa_report): explain() says "not yet run on hardware" there.
HARDWARE_VALIDATED = frozenset({"sm_90"})

@functools.lru_cache(maxsize=None)
def _bound_check(module: str, kernel: str) -> Callable[[str], None]:
    """_sass_guard.check_new_kernels bound to one JIT kernel, once: its imports stay off the per-call path."""
    from . import _sass_guard
    return functools.partial(_sass_guard.check_new_kernels,
                             getattr(importlib.import_module(f"{__package__}.{module}"), kernel))


def check_compiled(module: str, kernel: str, what: str) -> None:
    """The run-time wgmma register check (_sass_guard) of what `module.kernel` compiled so far, after each launch of
    a Triton candidate (`what`: its id, for the error); raises CompileError on a racy kernel."""
    _bound_check(module, kernel)(what)


class _GemvCandidate(TritonCandidate):
    config_type = GemvConfig
    source_files = ("kernels_triton/_gemv_kernels.py", "kernels_triton/_gemv.py", "kernels_triton/_fp8.py",
                    "kernels_triton/_act_quant.py", "kernels_triton/weight_quant.py", "kernels_triton/configs.py",
                    "kernels_triton/act_quant_config.py",
                    "kernels_triton/_wgmma.py", "kernels_triton/_splitk_reduce.py",
                    "kernels_triton/_pdl.py", "kernels_triton/_fast_launch.py", "kernels_triton/_gemm_layouts.py")
    x_dtypes = _X_DTYPES
    x_dtypes_note = " (bf16, fp16, fp32)"

    @staticmethod
    @abc.abstractmethod
    def _launcher() -> Callable[..., torch.Tensor]:
        """The kernels_triton._gemv launcher (imported on first use: it imports triton)."""

    def size_reason(self, problem: Problem) -> str:
        if problem.m > GEMV_MAX_M:
            return f"M = {problem.m} is above the decode range (M <= {GEMV_MAX_M}); the prefill GEMM serves it"
        return ""

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return gemv_configs(problem, target, _GROUP_K[problem.fmt])

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        assert isinstance(config, GemvConfig)
        y = self._launcher()(x2d, qw, bias, out_dtype, config)
        check_compiled("_gemv_kernels", "_gemv_kernel", self.id)
        return y


class TritonW8A16Gemv(_GemvCandidate):
    """Decode W8A16: fp8 weight codes decoded in-kernel (hardware cvt or software), x in bf16/fp16/fp32,
    fp32 accumulation, split-K with a deterministic reduction. Every weight scale layout."""

    id = "triton.w8a16_gemv"
    serves = frozenset((f, Act.BF16) for f in Format)
    act = Act.BF16
    sibling = "triton.w8a8_gemv"

    @staticmethod
    def _launcher() -> Callable[..., torch.Tensor]:
        from ._gemv import w8a16_gemv  # imports triton: only when a launch runs
        return w8a16_gemv


class TritonW8A8Gemv(_GemvCandidate):
    """Decode W8A8: dynamic activation quantization fused into the GEMV (or the fused act-quant kernel
    first), fp8 x fp8 products (fp8 MMA for block_m >= 16; bf16 MMA on exact decoded codes without fp8
    hardware), per-tensor, per-token x per-row, and 1x128 x 128x128 block scales."""

    id = "triton.w8a8_gemv"
    serves = frozenset({(Format.FP8_TENSOR, Act.FP8), (Format.FP8_ROW, Act.FP8), (Format.FP8_BLOCK, Act.FP8)})
    act = Act.FP8
    sibling = "triton.w8a16_gemv"

    @staticmethod
    def _launcher() -> Callable[..., torch.Tensor]:
        from ._gemv import w8a8_gemv  # imports triton: only when a launch runs
        return w8a8_gemv

    def format_reason(self, problem: Problem) -> str:
        if problem.fmt is Format.MXFP8:
            return "mxfp8 has no W8A8 mode (e8m0 groups along K have no matching activation scheme)"
        return ""


def candidates() -> list[Candidate]:
    out: list[Candidate] = [TritonW8A16Gemv(), TritonW8A8Gemv()]
    out.extend(_prefill_candidates())
    return out


# ==== Prefill candidates (owned by the triton-gemm helper: append imports/entries inside this function) ====
def _prefill_candidates() -> list[Candidate]:
    extra: list[Candidate] = []
    # --- triton-gemm: append below this line ---
    from ._gemm_candidates import gemm_candidates
    extra.extend(gemm_candidates())
    return extra
# ==== end of prefill section ====
