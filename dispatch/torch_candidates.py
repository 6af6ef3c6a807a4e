"""Candidates built from PyTorch itself: `torch._scaled_mm` wherever its semantics equal ours,
dequantize-then-cuBLAS for W8A16, and the reference (the CPU path, and the last resort everywhere).

Semantic equivalence with dispatch.reference:
- per-tensor x per-tensor: _scaled_mm(xq, wq.T, s_x, s_w) = (xq * s_x) @ (wq * s_w).T, fp32 accumulation.
- per-token x per-row:     scale_a [M, 1], scale_b [1, N] fp32 (outer-product scaling).
- 1x128 group x 128x128 block (DeepSeek-V3): scale_a [M, ceil(K/128)] column-major, scale_b the block
  scales [ceil(K/128), ceil(N/128)] as the transpose of our row-major [ceil(N/128), ceil(K/128)] tensor.
Activation quantization is `kernels_triton.quantize_activation` on GPUs where the Triton backend imports
(bit-identical to dispatch.quantize_activation by contract), else dispatch.quantize_activation (torch ops).
Bias is added after the matmul, in the output dtype (one more rounding than the reference: <= 1 ulp).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch

from .activation import quantize_activation as _torch_act_quant
from .formats import ACT_GROUP, E8M0_BIAS, MX_GROUP, WEIGHT_BLOCK, Act, ActGranularity, Format, QWeight
from .heuristic import ACT_QUANT_TORCH_US, ACT_QUANT_TRITON_US, PRIORS, Prior
from .problem import Candidate, Problem, Support
from .target import Target

_SRC = ("dispatch/torch_candidates.py",)
# Arches whose fp8 hardware is the "fnuz" variant (max 240, no -0): OCP e4m3fn codes are not native there.
_FNUZ_ARCHES = frozenset({"gfx940", "gfx941", "gfx942"})


def _vt(v: str | None) -> tuple[int, int]:
    if not v:
        return (0, 0)
    p = v.split("+")[0].split(".")
    try:
        return (int(p[0]), int(p[1]) if len(p) > 1 else 0)
    except ValueError:
        return (0, 0)


@functools.lru_cache(maxsize=None)
def _triton_act_quant_available() -> bool:
    try:
        import kernels_triton._act_quant  # noqa: F401  (the kernel module; import checks it exists)
    except Exception:
        return False
    return True


def quantize_act(x2d: torch.Tensor, g: ActGranularity) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic activation quantization for the torch routes (see the module docstring)."""
    if x2d.device.type == "cuda" and _triton_act_quant_available():
        import kernels_triton

        return kernels_triton.quantize_activation(x2d, g)
    return _torch_act_quant(x2d, g)


def _scaled_mm_platform(target: Target, *, min_torch_cuda: tuple[int, int], min_torch_rocm: tuple[int, int],
                        what: str) -> Support:
    """Where torch._scaled_mm exists for OCP e4m3fn operands (CPU, CUDA sm_89+, ROCm with OCP fp8)."""
    tv = target.torch_version_tuple
    if target.is_cpu:
        # CPU _scaled_mm (tensorwise and rowwise) is in torch >= 2.7
        return Support.yes() if tv >= (2, 7) else Support.no(f"CPU {what} _scaled_mm needs torch >= 2.7, have {target.torch_version}")
    if target.is_cuda:
        if not target.has_fp8_mma:
            return Support.no(f"{target.arch} has no fp8 tensor cores (torch._scaled_mm needs sm_89+)")
        if tv < min_torch_cuda:
            return Support.no(f"{what} _scaled_mm on {target.arch} needs torch >= "
                              f"{min_torch_cuda[0]}.{min_torch_cuda[1]}, have {target.torch_version}")
        return Support.yes()
    if target.is_rocm:
        if not target.has_fp8_mma or target.arch in _FNUZ_ARCHES:
            return Support.no(f"{target.arch} has no native OCP e4m3fn matrix instructions (fnuz or none)")
        if _vt(target.runtime_version) < (6, 5):
            return Support.no(f"torch._scaled_mm with float8_e4m3fn on ROCm needs ROCm >= 6.5, have {target.runtime_version}")
        if tv < min_torch_rocm:
            return Support.no(f"{what} _scaled_mm on ROCm needs torch >= {min_torch_rocm[0]}.{min_torch_rocm[1]}")
        return Support.yes()
    return Support.no(f"unknown vendor {target.vendor!r}")


def _dims16(problem: Problem, target: Target) -> Support:
    # cuBLASLt fp8: K and N multiples of 16 (torch checks mat1.size(1) % 16 and mat2 sizes % 16)
    if not target.is_cpu and (problem.k % 16 or problem.n % 16):
        return Support.no(f"_scaled_mm needs N and K multiples of 16 (N={problem.n}, K={problem.k})")
    return Support.yes()


def _out_ok(problem: Problem) -> Support:
    if problem.out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return Support.no(f"out_dtype {problem.out_dtype} is not bf16/fp16/fp32")
    return Support.yes()


def _finish(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if bias is not None:
        y.add_(bias.to(y.dtype))
    return y


class _ScaledMM(Candidate):
    backend: ClassVar[str] = "torch"
    # The fused activation quantization it launches is part of its time (W8A8 timings include it).
    source_files: ClassVar[tuple[str, ...]] = _SRC + ("kernels_triton/_act_quant.py", "kernels_triton/weight_quant.py",
                                                   "kernels_triton/_fast_launch.py", "kernels_triton/_fp8.py",
                                                   "kernels_triton/_pdl.py", "kernels_triton/act_quant_config.py")

    def prior(self, problem: Problem, target: Target) -> Prior:
        base = PRIORS[self.id]
        fused = not target.is_cpu and _triton_act_quant_available()
        q = ACT_QUANT_TRITON_US if fused else ACT_QUANT_TORCH_US
        return Prior(base.bw_eff, base.compute_eff, base.fp8_mma, base.fixed_us + q)


class ScaledMMTensorwise(_ScaledMM):
    """fp8_tensor W8A8: per-tensor activation scale x per-tensor weight scale (cuBLASLt)."""

    id: ClassVar[str] = "torch.scaled_mm_tensorwise"
    serves: ClassVar[frozenset] = frozenset({(Format.FP8_TENSOR, Act.FP8)})

    def supports(self, problem: Problem, target: Target) -> Support:
        for s in (_scaled_mm_platform(target, min_torch_cuda=(2, 1), min_torch_rocm=(2, 7), what="tensorwise"),
                  _dims16(problem, target), _out_ok(problem)):
            if not s:
                return s
        return Support.yes()

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        qw.require(Format.FP8_TENSOR, Act.FP8)
        xq, xs = quantize_act(x2d, ActGranularity.PER_TENSOR)
        y = torch._scaled_mm(xq, qw.qdata.t(), scale_a=xs, scale_b=qw.scale, out_dtype=out_dtype)
        return _finish(y, bias)


class ScaledMMRowwise(_ScaledMM):
    """fp8_row W8A8: per-token activation scales [M, 1] x per-row weight scales [1, N]."""

    id: ClassVar[str] = "torch.scaled_mm_rowwise"
    serves: ClassVar[frozenset] = frozenset({(Format.FP8_ROW, Act.FP8)})

    def supports(self, problem: Problem, target: Target) -> Support:
        # CUTLASS rowwise kernel: sm_90 since torch 2.5, sm_89 since torch 2.7 (pytorch#144348).
        min_cuda = (2, 5) if target.has_wgmma else (2, 7)
        for s in (_scaled_mm_platform(target, min_torch_cuda=min_cuda, min_torch_rocm=(2, 7), what="rowwise"),
                  _dims16(problem, target), _out_ok(problem)):
            if not s:
                return s
        if not target.is_cpu and problem.out_dtype != torch.bfloat16:
            return Support.no("rowwise _scaled_mm on GPUs writes bf16 only (out_dtype is "
                              f"{str(problem.out_dtype).replace('torch.', '')})")
        return Support.yes()

    def prepare(self, qw: QWeight) -> Any:
        qw.require(Format.FP8_ROW, Act.FP8)
        return qw.scale.view(1, -1)  # [1, N] view, no copy

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        xq, xs = quantize_act(x2d, ActGranularity.PER_TOKEN)
        y = torch._scaled_mm(xq, qw.qdata.t(), scale_a=xs, scale_b=prepared, out_dtype=out_dtype)
        return _finish(y, bias)


class ScaledMMBlockwise(_ScaledMM):
    """fp8_block W8A8: 1x128 activation groups x 128x128 weight blocks (cuBLASLt VEC128 / BLK128x128, Hopper)."""

    id: ClassVar[str] = "torch.scaled_mm_blockwise"
    serves: ClassVar[frozenset] = frozenset({(Format.FP8_BLOCK, Act.FP8)})

    def supports(self, problem: Problem, target: Target) -> Support:
        if not target.is_cuda:
            return Support.no("blockwise _scaled_mm is a cuBLASLt (CUDA) feature")
        # cuBLASLt's VEC128_32F / BLK128x128_32F scale modes exist on Hopper only (cuBLAS docs); Hopper is
        # the arch family with wgmma here.
        if not target.has_wgmma:
            return Support.no(f"cuBLASLt 1x128 x 128x128 block scaling is Hopper-only; {target.arch} lacks it")
        if target.torch_version_tuple < (2, 9):
            return Support.no(f"blockwise _scaled_mm needs torch >= 2.9 (pytorch#158037), have {target.torch_version}")
        if _vt(target.runtime_version) < (12, 9):
            return Support.no(f"cuBLASLt block scaling needs CUDA >= 12.9, torch was built with {target.runtime_version}")
        if problem.m < 4:
            # Measured on the H200 (torch 2.11, CUDA 13.0): CUBLAS_STATUS_NOT_SUPPORTED at M = 1 (baseline)
            # and within the M-bucket 4 (M = 3); M = 4..4096 ran in the baseline.
            return Support.no(f"cuBLAS refuses blockwise scaling at small M (M={problem.m} < 4)")
        if problem.k % ACT_GROUP:
            return Support.no(f"K={problem.k} is not a multiple of 128 (partial K blocks unverified with cuBLAS)")
        if problem.n % WEIGHT_BLOCK:
            # The H200 tests failed (CUBLAS_STATUS_NOT_SUPPORTED) on a shape set whose only N off the 128 grid
            # was 2112; partial N blocks are left to this project's kernels.
            return Support.no(f"N={problem.n} is not a multiple of 128 (partial N blocks unverified with cuBLAS)")
        if -(-problem.k // WEIGHT_BLOCK) % 4:
            # torch versions differ on the 128x128 scale's row stride when ceil(K/128) % 4 != 0 (some pad it
            # to 4); rather than guess, leave those shapes to the kernels of this project.
            return Support.no(f"ceil(K/128)={-(-problem.k // 128)} is not a multiple of 4 (scale-stride rule "
                              "differs across torch versions)")
        if problem.out_dtype != torch.bfloat16:
            return Support.no("blockwise _scaled_mm output is validated for bf16 only")
        return _dims16(problem, target)

    def prepare(self, qw: QWeight) -> Any:
        qw.require(Format.FP8_BLOCK, Act.FP8)
        # torch checks scale_b.t() against the [N/128, K/128] row-major layout: our scale, transposed view.
        return qw.scale.t()

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        m = x2d.shape[0]
        pad = -m % 4
        if pad:
            # Every M the H200 ran blockwise at was a multiple of 4 (4..4096); M=1 and the bucket of M=3 failed
            # in cuBLAS. The column-major [M, K/128] fp32 activation scales then have a 16-byte aligned column
            # stride. Padding zero rows (codes 0, floor scale) keeps that layout for any M; they are sliced off.
            x2d = torch.nn.functional.pad(x2d, (0, 0, 0, pad))
        xq, xs = quantize_act(x2d, ActGranularity.PER_TOKEN_GROUP_128)
        xq = xq.contiguous()
        xs_cm = xs.t().contiguous().t()  # [M, K/128] column-major, as cuBLASLt's VEC128 mode reads it
        y = torch._scaled_mm(xq, qw.qdata.t(), scale_a=xs_cm, scale_b=prepared, out_dtype=out_dtype)
        return _finish(y[:m] if pad else y, bias)


# Rows per dequantization chunk: bounds the fp32 temporary to ~32 MB whatever the weight's size.
_DEQUANT_CHUNK_ELEMS = 8 * 1024 * 1024


def _pow2(codes_u8: torch.Tensor) -> torch.Tensor:
    from .weight_quant import _pow2 as pow2  # exact 2^e including the fp32 subnormal 2^-127

    return pow2(codes_u8.to(torch.int32) - E8M0_BIAS)


def dequantize_to(qw: QWeight, dtype: torch.dtype) -> torch.Tensor:
    """[N, K] weight in `dtype`: code * scale computed in fp32 and rounded once, chunked along N."""
    n, k = qw.shape
    out = torch.empty((n, k), dtype=dtype, device=qw.device)
    rows = max(WEIGHT_BLOCK, (_DEQUANT_CHUNK_ELEMS // k) // WEIGHT_BLOCK * WEIGHT_BLOCK)
    fmt, s = qw.format, qw.scale
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        q = qw.qdata[r0:r1].float()
        if fmt is Format.FP8_TENSOR:
            q.mul_(s)
        elif fmt is Format.FP8_ROW:
            q.mul_(s[r0:r1, None])
        elif fmt is Format.FP8_BLOCK:
            sb = s[r0 // WEIGHT_BLOCK:-(-r1 // WEIGHT_BLOCK)]
            q.mul_(sb.repeat_interleave(WEIGHT_BLOCK, 0)[: r1 - r0].repeat_interleave(WEIGHT_BLOCK, 1)[:, :k])
        else:
            q.mul_(_pow2(s[r0:r1].view(torch.uint8)).repeat_interleave(MX_GROUP, 1)[:, :k])
        out[r0:r1].copy_(q)
    return out


class DequantMM(Candidate):
    """W8A16 at large M: dequantize the weight to the activation dtype (chunked), then one cuBLAS/hipBLAS GEMM
    with fp32 output (fp32 accumulation: cuBLAS's bf16-output split-K reduces in reduced precision, which the
    H200 autotune recorded as wrong at M=16 on 28672x4096).

    fp8_tensor / fp8_row: only the codes are converted (exact in bf16/fp16) and the fp32 scale is applied to
    the fp32 output, so the weights are exact. mxfp8: code * 2^e is exact in bf16 (barring underflow below
    2^-133). fp8_block: the block scales vary along K and are folded into the weight (one bf16 rounding).
    The weight copy costs ~5 bytes per weight element per call, so this is a prefill route (M >= 64).
    """

    id: ClassVar[str] = "torch.dequant_mm"
    backend: ClassVar[str] = "torch"
    source_files: ClassVar[tuple[str, ...]] = _SRC
    serves: ClassVar[frozenset] = frozenset({(f, Act.BF16) for f in Format})

    def supports(self, problem: Problem, target: Target) -> Support:
        if target.is_cpu:
            return Support.no("on the CPU the reference path is the W8A16 route (fp32 math)")
        if problem.x_dtype not in (torch.bfloat16, torch.float16):
            return Support.no(f"x dtype {problem.x_dtype} is not bf16/fp16")
        if problem.m < 64:
            return Support.no(f"a prefill route: it converts the whole weight every call (M={problem.m} < 64)")
        if not target.is_cuda:
            return Support.no("needs torch.mm(..., out_dtype=float32), a CUDA (cuBLAS) feature of torch")
        return _out_ok(problem)

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        fmt = qw.format
        if fmt in (Format.FP8_TENSOR, Format.FP8_ROW):
            w = qw.qdata.to(x2d.dtype)  # exact: e4m3 values fit bf16 and fp16
        else:
            w = dequantize_to(qw, x2d.dtype)
        if x2d.is_cuda:
            y = torch.mm(x2d, w.t(), out_dtype=torch.float32)
        else:  # CPU tensors only in tests of this route's math (aten::mm.dtype is CUDA-only)
            y = x2d.float() @ w.float().t()
        if fmt is Format.FP8_TENSOR:
            y.mul_(qw.scale)
        elif fmt is Format.FP8_ROW:
            y.mul_(qw.scale[None, :])
        if bias is not None:
            y.add_(bias.float())
        return y.to(out_dtype)


class Reference(Candidate):
    """dispatch.reference.linear: exact semantics, every format, any device; the CPU path and the last resort."""

    id: ClassVar[str] = "torch.reference"
    last_resort: ClassVar[bool] = True  # ranked after every kernel by the heuristic (dispatch.select)
    backend: ClassVar[str] = "torch"
    source_files: ClassVar[tuple[str, ...]] = ("dispatch/reference.py",)
    serves: ClassVar[frozenset] = frozenset({(f, a) for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)})

    def supports(self, problem: Problem, target: Target) -> Support:
        return Support.yes("exact reference (fp32 on CPU, fp64 accumulation on GPUs): slow on GPUs")

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        from . import reference

        return reference.linear(x2d, qw, bias, out_dtype)


def candidates() -> list[Candidate]:
    return [ScaledMMTensorwise(), ScaledMMRowwise(), ScaledMMBlockwise(), DequantMM(), Reference()]
