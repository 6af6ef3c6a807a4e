"""The W8A8 decode GEMV that quantizes x inside its K loop: csrc/gemv_w8a8.cu compiled with FP8D_CFG_FQ and
FP8D_CFG_INLINE (entry fp8d_w8a8_gemv_inline).

One launch and no quantized copy of x anywhere: the warp that owns a 128-wide K step loads that step of x (bf16 or
f16) for every token, reduces the 1x128 group's amax across the warp (fp8_block; per tensor and per token the CTA
computes the amax of all of x once, right after the wait for the previous grid), encodes its values and hands each
lane its MMA fragment's codes by shuffles. Codes and scales come from act_quant's device functions in act_quant's
warp-per-group arrangement, so y is bit-identical to the two-launch route (`_launch.w8a8_gemv`; tests/
test_cuda_kernels.py checks it on the GPU).

Against the two-launch route it saves the quantizer's launch, its grid boundary (the GEMV's x-dependent work waits
for the whole quantizer grid to finish and flush) and the codes' round trip; against the one-launch
`_w8a8_fused.w8a8_gemv_fq` it has no quantization prologue between the wait and the weight loop (none at all for
1x128 groups; per tensor / per token one read of x for the amax instead of a read, a barrier, a second read and the
code stores). Every CTA still repeats the M x K divisions, spread over its loop: built for the smallest M, one token
tile (M <= 2; FP8D_CFG_QT, the tokens a step quantizes, is M rounded up to a power of two). The tables decide where
it wins.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import ActGranularity, QWeight

from . import _driver
from ._driver import ptr
from ._kinds import ACTQ_CODE, DTYPE_CODE
from ._launch import _aligned16, _check_gemv, _kernel, _out_and_bias, device_arch, gemv_module, pdl_allowed
from .configs import GemvConfig

# Every CTA quantizes all of x, so the work grows with M. Session 26 on the H200 (tools/perf/probe_inline_quant.py, 24
# weights a token count, its best config against the two-launch route in the same call): M = 1 0.91-1.22x the route's
# time (median 1.005, faster in 11), M = 2 0.89-1.26x (faster in 8), M = 4 1.15-1.90x (slower in all 24); 8 tokens
# with their chains interleaved spilled (16-124 bytes, sm_90).
INLINE_MAX_M = 2
X_DTYPES = (torch.bfloat16, torch.float16)  # 4 values = 8 bytes a lane (fp32 x: the two-launch route)


def quantized_tokens(m: int) -> int:
    """FP8D_CFG_QT: the tokens each step quantizes (registers hold their raw values), M rounded up to 1 or 2."""
    return 1 << max(0, math.ceil(math.log2(m)))


def scale_slots(m: int, g: ActGranularity) -> int:
    """Shared-memory scale slots after the GEMV's layout: the CTA's amax pass writes 1 (tensor) or M (token)."""
    if g is ActGranularity.PER_TENSOR:
        return 1
    return m if g is ActGranularity.PER_TOKEN else 0


def smem_bytes(m: int, g: ActGranularity, cfg: GemvConfig) -> int:
    """The GEMV's layout (with its shared-memory weight ring, if any), then the scale slots (csrc/gemv_w8a8.cu
    fp8d_w8a8_gemv_inline places them at Fp8dSmemLayout::end, the same sum)."""
    return cfg.smem_bytes(m) + 4 * scale_slots(m, g)


def unsupported_reason(m: int, x_dtype: torch.dtype, cfg: GemvConfig) -> str | None:
    """Why (m, x dtype, config) cannot run, or None."""
    if not 1 <= m <= INLINE_MAX_M:
        return (f"M = {m}: the W8A8 GEMV that quantizes x in its loop serves 1 <= M <= {INLINE_MAX_M} (every CTA "
                "quantizes all of x)")
    if x_dtype not in X_DTYPES:
        return f"activations of dtype {x_dtype}: the in-loop quantization reads bf16 or fp16 x"
    # The GEMV's register budget holds the raw x of QT <= 2 tokens too: ptxas (NVRTC 13.0) compiled every config it
    # admits at M <= 2 without spills for sm_80, sm_89 and sm_90 (tests/test_cuda_compile.py); at 4 tokens a register
    # ring of 4 spilled 16-24 bytes.
    if not cfg.fits(m):
        return f"{cfg} does not fit the register budget at M = {m} (with x's raw values)"
    return None


def inline_module(kind_code: int, m: int, x_dtype: torch.dtype, cfg: GemvConfig, emulate_mma: bool = False,
                  force_sw_cvt: bool = False) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    """The module key (source, entry, defines): the two-launch GEMV's defines plus FP8D_CFG_FQ, FP8D_CFG_INLINE,
    FP8D_CFG_QT (tokens per step) and FP8D_CFG_XKIND (x's dtype code)."""
    name, _, d = gemv_module(True, kind_code, 0, m, cfg, emulate_mma, force_sw_cvt)
    extra = (("FP8D_CFG_FQ", 1), ("FP8D_CFG_INLINE", 1), ("FP8D_CFG_QT", quantized_tokens(m)),
             ("FP8D_CFG_XKIND", DTYPE_CODE[x_dtype]))
    return name, "fp8d_w8a8_gemv_inline", tuple(sorted(d + extra))


@functools.lru_cache(maxsize=4096)
def _spec(g: ActGranularity, m: int, n: int, x_dtype: torch.dtype, cfg: GemvConfig, device: int, arch: str | None,
          emulate_mma: bool, force_sw_cvt: bool) -> tuple[_driver.LoadedKernel, tuple, tuple, int, bool]:
    """(kernel, grid, block, smem, pdl), cached per shape (the decode hot path builds nothing in Python)."""
    reason = unsupported_reason(m, x_dtype, cfg)
    if reason:
        raise UnsupportedError(reason + "; the two-launch kernels_cuda._launch.w8a8_gemv serves it")
    arch = arch or device_arch(device)
    kernel = _kernel(*inline_module(ACTQ_CODE[g], m, x_dtype, cfg, emulate_mma, force_sw_cvt), device, arch)
    smem = smem_bytes(m, g, cfg)
    if smem > _driver.DEFAULT_DYNAMIC_SMEM:  # a shared-memory ring: the kernel's limit raised once, here (cached)
        _driver.allow_dynamic_smem(kernel, smem)
    return kernel, (math.ceil(n / cfg.rows_per_cta), 1, 1), (32 * cfg.warps, 1, 1), smem, pdl_allowed(arch)


def w8a8_gemv_inline(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
                     out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *,
                     arch: str | None = None, emulate_mma: bool = False, force_sw_cvt: bool = False) -> torch.Tensor:
    """W8A8 decode in one launch, x quantized in the K loop: y = dequantize(quantize_activation(x2d)) @
    dequantize(qw).T (+ bias), bit-identical to the two-launch route."""
    m, n, k = _check_gemv(x2d, qw)
    g = qw.act_granularity
    if g is None:
        raise FormatError(f"{qw!r} is W8A16 (act='bf16'); use w8a16_gemv")
    cfg = config or GemvConfig()
    kernel, grid, block, smem, pdl = _spec(g, m, n, x2d.dtype, cfg, x2d.device.index or 0, arch, emulate_mma,
                                           force_sw_cvt)
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    x2d = _aligned16(x2d)  # the amax pass reads 16-byte vectors
    args = (ptr(qw.qdata), ptr(qw.scale), ptr(x2d), ptr(bias), ptr(y), m, n, k,
            DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y
