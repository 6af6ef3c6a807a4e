"""The host side of cuda.dequant_cublas: the weight through the dequant kernel (csrc/dequant.cu), then ONE cuBLAS
GEMM with fp32 accumulation and an fp32 split-K reduction (`full_precision_reduction`).

  fp8_tensor / fp8_row: only the CODES go to bf16/fp16 (exact: every e4m3 value fits), and the per-tensor / per-row
    scale multiplies the GEMM's output, never the weight. Folding the scale into a bf16 weight rounds code x scale
    (relative error up to 2^-8 per weight); the workload's outputs are sums with heavy cancellation (terms of total
    magnitude 1e4 summing to -0.26), so that rounding moved single outputs past the verification bound on the H200
    (8-4912 outputs per cell at M >= 256, 2026-11-29; reproduced on the CPU by
    tests/test_tools_bench.py::test_fp8_row_weight_folded_into_bf16_fails_the_bound_the_exact_route_meets).
      bf16 in and out, no bias: the GEMM writes bf16 and one in-place pass (csrc/scale_cols.cu) multiplies it by
        the fp32 scale (fp32 math, one more rounding). Both roundings are relative to the output itself, so
        cancellation does not amplify them: at most 2^-8 relative each, 2^-7 together, which the GPU test of the
        route allows (one rounding alone failed it: 84.5 for 85.01, H200, session 9). cuBLAS's bf16 output is its
        fp32 output rounded once (no output differed on the H200: tests/test_cuda_kernels.py). Extra traffic per
        output: 4 bytes, against 8 for an fp32 GEMM output scaled and cast in one pass.
      otherwise: the GEMM writes fp32, the scale multiplies it (and the bias adds), then one cast. Extra traffic per
        output: 16 bytes (what session 6 measured at 0.6-0.8x of bf16 for fp8_row at M >= 1024, together with
        torch's own fp8 -> bf16 conversion of the codes, 3-4x slower than the dequant kernel). fp16 activations
        need it: unscaled sums can pass 65504. So does a bias: it can cancel the product, so the product must
        not be rounded before it is added (the H200 GPU test saw 18 % errors on outputs of 0.003, session 9).
  mxfp8: 2^e x code is exact in bf16, so the dequantized weight is exact; the GEMM writes the output dtype directly.
  fp8_block: the 128x128 scales fold into the weight (one bf16 rounding per element; the scale varies along K, so
    it cannot move to the output).
The dequant pass costs 3 bytes of traffic per weight element on top of the GEMM: a route for M >= 64.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Iterator

import torch

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Format, QWeight

from . import _dequant, _driver, _launch
from ._driver import ptr
from .configs import DequantConfig

_CODES_VIEW = "cuda.dequant_cublas.codes"


def linear(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype,
           config: DequantConfig) -> torch.Tensor:
    if qw.format in (Format.FP8_TENSOR, Format.FP8_ROW):
        codes = _dequant.dequantize(_codes_view(qw), x2d.dtype, config)  # exact
        scale = qw.scale  # float32, 0-dim or [N]: broadcast along each output row
        with full_precision_reduction():
            if x2d.dtype == torch.bfloat16 and out_dtype == torch.bfloat16 and bias is None:
                y = torch.mm(x2d, codes.t())
            else:
                y = torch.mm(x2d, codes.t(), out_dtype=torch.float32)
        if y.dtype == torch.bfloat16:
            scale_columns_(y, scale)
            return y
        y.mul_(scale)
        if bias is not None:
            y.add_(bias)
        return y if y.dtype == out_dtype else y.to(out_dtype)
    # dequantize(qw) rounded once to x's dtype (exact for MX in bf16), then the same GEMM as bf16 F.linear.
    w = _dequant.dequantize(qw, x2d.dtype, config)
    with full_precision_reduction():
        if out_dtype == x2d.dtype and (bias is None or bias.dtype == x2d.dtype):
            return torch.nn.functional.linear(x2d, w, bias)
        y = torch.mm(x2d, w.t(), out_dtype=torch.float32)
    if bias is not None:
        y.add_(bias.to(torch.float32))
    return y if y.dtype == out_dtype else y.to(out_dtype)


SCALE_COLS_THREADS = 256


def scale_cols_module(per_tensor: bool) -> tuple[str, str, tuple[tuple[str, int], ...]]:
    """The module key of csrc/scale_cols.cu (tools/perf/precompile_cuda.py and the ISA report compile the same)."""
    return "scale_cols.cu", "fp8d_scale_cols", (("FP8D_CFG_PER_TENSOR", int(per_tensor)),)


def scale_columns_(y: torch.Tensor, scale: torch.Tensor) -> None:
    """y (bf16 [M, N], contiguous) *= scale (float32, 0-dim or [N]) in f32 math, rounded once, in place."""
    if y.dtype != torch.bfloat16 or y.dim() != 2 or not y.is_contiguous() or y.data_ptr() % 16:
        raise UnsupportedError(f"scale_columns_ takes a contiguous, 16-byte aligned bf16 [M, N] tensor, got {y.dtype} "
                               f"{tuple(y.shape)} (contiguous: {y.is_contiguous()}, address % 16 = {y.data_ptr() % 16})")
    m, n = y.shape
    per_tensor = scale.dim() == 0
    if scale.dtype != torch.float32 or not scale.is_contiguous() or (not per_tensor and tuple(scale.shape) != (n,)):
        raise FormatError(f"scale_columns_ needs a float32 scale of shape [] or [{n}], got {scale.dtype} "
                          f"{list(scale.shape)}")
    total = m * n
    vec = n % 8 == 0
    grid = math.ceil(total / 8 / SCALE_COLS_THREADS) if vec else min(math.ceil(total / SCALE_COLS_THREADS), 65535 * 16)
    device = y.device.index or 0
    kernel = _launch._kernel(*scale_cols_module(per_tensor), device, _launch.device_arch(device))
    _driver.launch(kernel, (max(grid, 1), 1, 1), (SCALE_COLS_THREADS, 1, 1), (ptr(y), ptr(scale), m, n))


def _codes_view(qw: QWeight) -> QWeight:
    """qw's codes as an fp8_tensor weight of scale 1.0 (the dequant kernel then writes the codes exactly), built
    once per weight: it shares qw's storage, and only the one-element scale is new."""
    view = qw._cache.get(_CODES_VIEW)
    if view is None:
        one = torch.ones((), dtype=torch.float32, device=qw.device)
        view = QWeight(Format.FP8_TENSOR, qw.act, qw.qdata, one)
        qw._cache[_CODES_VIEW] = view
    return view


_REDUCTION_LOCK = threading.Lock()


def _reduction_flag(kind: str):
    """torch's cuBLAS reduced-precision-reduction setting for `kind` ("bf16" / "fp16"), in the form its setter
    takes back: a bool on older torch, (allow_reduced_precision, allow_splitk) on newer ones."""
    return getattr(torch._C, f"_get_cublas_allow_{kind}_reduced_precision_reduction")()


def _set_reduction_flag(kind: str, value) -> None:
    setter = getattr(torch._C, f"_set_cublas_allow_{kind}_reduced_precision_reduction")
    setter(*value) if isinstance(value, tuple) else setter(value)


@contextlib.contextmanager
def full_precision_reduction() -> Iterator[None]:
    """cuBLAS half GEMMs with fp32 accumulation inside each split-K slice, and across slices.

    torch allows cuBLAS to add split-K partial sums in bf16/fp16 by default
    (`torch.backends.cuda.matmul.allow_{bf16,fp16}_reduced_precision_reduction`); on the H200 that gave errors
    of 5-25 % on single outputs at M = 16 (run 3, both dequantize-then-cuBLAS routes failed verification the
    same way). The flags are global: they are set for this call only, under a lock, and restored exactly
    (the split-K part of newer torch's setting included). Another thread's GEMM that overlaps the window gets
    the more precise reduction, never a less precise one; another thread that CHANGES the flags inside the
    window has its change overwritten by the restore.
    """
    with _REDUCTION_LOCK:
        saved = {kind: _reduction_flag(kind) for kind in ("bf16", "fp16")}
        try:
            for kind, v in saved.items():
                _set_reduction_flag(kind, (False, v[1]) if isinstance(v, tuple) else False)
            yield
        finally:
            for kind, v in saved.items():
                _set_reduction_flag(kind, v)
