"""Launchers of the decode (small-M) kernels: `w8a16_gemv` and `w8a8_gemv`.

Both launch on the current stream, never synchronize the host and never read tensor values; lengths are
runtime kernel arguments (M and the split count are not even specialized on, so a new M never recompiles).
Launches go through `_fast_launch` with the derivation cached per key (`_spec`): an eager call's host time is
mostly the allocations and the two launches (the JIT path cost 1.6-1.8x as much, session 34).

`hw_fp8=None` picks the target's fp8 path (Target.has_triton_fp8_dtype); `hw_fp8=False` forces the
sm_80 path (uint8 codes + software e4m3 decode, bf16 MMA for W8A8), which is how the GPU tests exercise
it on an H200. CPU tensors run under the Triton interpreter (TRITON_INTERPRET=1) through the
interpreter-safe path: software decode/encode, fp32 `input_precision="ieee"` dots. That is a check of
the indexing and the arithmetic, NOT a GPU validation.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import torch

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Act, Format, QWeight
from dispatch.target import detect

from . import _act_quant
from ._fast_launch import launch
from ._gemm_layouts import W8A16_LAYOUT, WScale
from ._pdl import launch_options, pdl_launch
from .configs import GEMV_MAX_M, GemvConfig, auto_split_k

_GROUP_K = {WScale.TENSOR: 0, WScale.ROW: 0, WScale.BLOCK128: 128, WScale.MX32: 32}
_A8_GRANULARITY = {Format.FP8_TENSOR: "per_tensor", Format.FP8_ROW: "per_token", Format.FP8_BLOCK: "per_token_group_128"}


def group_k_of(fmt: Format) -> int:
    """Scale group along K of a weight format (0: none)."""
    return _GROUP_K[W8A16_LAYOUT[fmt]]


@functools.lru_cache(maxsize=None)
def _kernels():
    from . import _gemv_kernels  # imports triton: only when a launcher runs
    return _gemv_kernels


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _check(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None) -> tuple[int, int, int]:
    if x2d.dim() != 2 or not x2d.is_contiguous():
        raise FormatError(f"the GEMV launchers take a contiguous 2-D x [M, K], got shape {tuple(x2d.shape)}")
    m, k = x2d.shape
    n, kw = qw.shape
    if k != kw:
        raise FormatError(f"x has K = {k} but the weight is [{n}, {kw}]")
    if m > GEMV_MAX_M:
        raise UnsupportedError(f"the decode GEMV serves M <= {GEMV_MAX_M} (got M = {m}); use the prefill GEMM")
    if x2d.device != qw.device:
        raise FormatError(f"x is on {x2d.device}, the weight on {qw.device}")
    if bias is not None and (bias.shape != (n,) or bias.device != x2d.device):
        raise FormatError(f"bias must be [{n}] on {x2d.device}, got {tuple(bias.shape)} on {bias.device}")
    return m, n, k


def kernel_group(cfg: GemvConfig, wscale: WScale) -> int:
    """The kernel's G: the innermost K width of the FMA path's [BLOCK_N, BLOCK_K // G, G] tiles, i.e. the
    weight scale group along K (so group scales broadcast without reshapes); BLOCK_K without groups and
    on the tensor-core path (whole K tiles)."""
    if cfg.use_dot:
        return cfg.block_k
    if wscale is WScale.MX32:
        return 32
    if wscale is WScale.BLOCK128:
        return min(cfg.block_k, 128)
    return cfg.block_k


# FP8DISPATCH_TRITON_FAST_BF16=0 also restores Triton's own fp8 -> bf16 conversion here (as in the W8A16 GEMM,
# _gemm_launch.FAST_BF16_DECODE: the A/B switch).
FAST_BF16_DECODE = os.environ.get("FP8DISPATCH_TRITON_FAST_BF16", "1") != "0"


def fast_bf16_decode(wscale: WScale, a_mode: int, x_is_bf16: bool, ieee: bool, nvidia: bool) -> bool:
    """Whether the tensor-core path decodes an mxfp8 weight with _fp8.e4m3_to_bf16_scaled (NVIDIA PTX, the W8A16
    GEMM's FAST_BF16): bf16 activations, never the interpreter, never ROCm. MX only: on the H200 (session 32, M = 16)
    it made mxfp8 1.19-1.44x faster, and the plain decode (_fp8.e4m3_to_bf16_spread) made fp8_row 1.00-1.06x slower
    per config."""
    return FAST_BF16_DECODE and wscale is WScale.MX32 and a_mode == 0 and x_is_bf16 and not ieee and nvidia


def gemv_constexprs(wscale: WScale, a_mode: int, cfg: GemvConfig, *, hw: bool, cvt: bool, ieee: bool,
                    has_bias: bool, direct: bool, wgmma: bool, pdl: bool = False,
                    fast_bf16: bool = False) -> dict[str, Any]:
    """The constexpr arguments of `_gemv_kernel` for one launch (the ISA report compiles the same ones). `wgmma`:
    the target's tensor-core path is wgmma (sm_90), whose register operands the kernel must guard (_wgmma). `pdl`:
    launched programmatically (kernels_triton._pdl). `fast_bf16`: fast_bf16_decode (tensor-core path only)."""
    return dict(WSCALE=int(wscale), A_MODE=a_mode, HW_FP8=hw, HW_CVT=cvt, USE_DOT=cfg.use_dot, IEEE_DOT=ieee,
                HAS_BIAS=has_bias, DIRECT_OUT=direct, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                BLOCK_K=cfg.block_k, G=kernel_group(cfg, wscale), NUM_STAGES=cfg.num_stages,
                WGMMA_DRAIN=wgmma and cfg.use_dot and not ieee, PDL=pdl, FAST_BF16=fast_bf16 and cfg.use_dot)


def _weight_args(qw: QWeight, hw: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    w = qw.qdata if hw else qw.qdata.view(torch.uint8)
    if qw.format is Format.MXFP8:
        ws = qw.scale.view(torch.uint8)
        return w, ws, ws.stride(0)
    if qw.format is Format.FP8_BLOCK:
        return w, qw.scale, qw.scale.stride(0)
    return w, qw.scale, 0


class _Spec(NamedTuple):
    """What one GEMV launch derives from shapes, dtypes, the config, the device and the switches (_spec)."""

    split: int  # K splits (1: the GEMV writes y itself)
    grid: tuple[int, int, int]
    meta: dict  # the constexpr and launch keywords of _gemv_kernel
    reduce_grid: tuple[int, int]  # the split-K reduction's (split > 1)
    reduce_meta: dict


_REDUCE_BLOCK = 256  # outputs per program of the split-K reduction


@functools.lru_cache(maxsize=4096)
def _spec(fmt: Format, a_mode: int, hw: bool, cvt: bool, cfg: GemvConfig, m: int, n: int, k: int,
          device: torch.device, x_dtype: torch.dtype, has_bias: bool, pdl: bool, fast_switch: bool) -> _Spec:
    """The launch derivation, cached per key: an eager call pays one dict lookup instead of re-deriving the split,
    the grid and ~20 constexprs (the same derivation as before the cache, session 34; kernels_cuda._gemv_spec is the
    CUDA twin). The switches are arguments (pdl: _pdl.ENABLED, fast_switch: FAST_BF16_DECODE, both read per call), so
    flipping one at run time (tools.perf.probe_triton_gemv --toggle) is seen; a new module switch that this derivation
    reads must become an argument too, or the cache would keep its first value. Raises for an illegal config (an
    exception is not cached)."""
    interpret = device.type == "cpu"
    wscale = W8A16_LAYOUT[fmt]
    why = cfg.legal_for(_GROUP_K[wscale], fused_groups=(a_mode == 2 and wscale is WScale.BLOCK128))
    if why:
        raise UnsupportedError(f"GemvConfig {cfg} cannot run {fmt}: {why}")
    sms = 8 if interpret else _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    split = auto_split_k(m, n, k, cfg, sms)
    ieee = interpret or x_dtype == torch.float32
    fast = fast_switch and fast_bf16_decode(wscale, a_mode, x_dtype == torch.bfloat16, ieee,
                                            torch.version.hip is None)
    meta = dict(gemv_constexprs(wscale, a_mode, cfg, hw=hw, cvt=cvt, ieee=ieee, has_bias=has_bias, direct=split == 1,
                                wgmma=not interpret and detect(device).has_wgmma, pdl=pdl, fast_bf16=fast),
                num_warps=cfg.num_warps, **launch_options(pdl))
    reduce_meta = dict(HAS_BIAS=has_bias, BLOCK=_REDUCE_BLOCK, PDL=pdl, num_warps=4, **launch_options(pdl))
    return _Spec(split, (triton_cdiv(n, cfg.block_n), split, triton_cdiv(m, cfg.block_m)), meta,
                 (triton_cdiv(n, _REDUCE_BLOCK), m), reduce_meta)


def _launch(x_arg, xs_arg, stride_xsm, a_mode, qw, hw, cvt, bias, out_dtype, cfg: GemvConfig, m, n, k):
    kern = _kernels()
    dev = x_arg.device
    # pdl_launch: False on the CPU interpreter, ROCm, sm_80/89 and with FP8DISPATCH_PDL=0
    spec = _spec(qw.format, a_mode, hw, cvt, cfg, m, n, k, dev, x_arg.dtype, bias is not None,
                 pdl_launch(dev), FAST_BF16_DECODE)
    w, ws, stride_wsn = _weight_args(qw, hw)
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    split = spec.split
    part = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=dev)
    bias_arg = bias if bias is not None else out
    # _fast_launch: the JIT's per-call bookkeeping once per specialization (the JIT itself under the interpreter)
    launch(kern._gemv_kernel, spec.grid, x_arg, xs_arg, w, ws, bias_arg, out, part,
           m, n, k, split, x_arg.stride(0), stride_xsm, stride_wsn, out.stride(0), **spec.meta)
    if split > 1:
        launch(_reduce_kernel(), spec.reduce_grid, part, bias_arg, out, m, n, split, out.stride(0),
               **spec.reduce_meta)
    return out


@functools.lru_cache(maxsize=None)
def _reduce_kernel():
    from ._splitk_reduce import splitk_reduce
    return splitk_reduce


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def default_config(m: int) -> GemvConfig:
    """A safe config from M alone (the candidate's default_config uses the full problem and target)."""
    if m <= 8:
        return GemvConfig(block_m=1 if m == 1 else (2 if m == 2 else (4 if m <= 4 else 8)))
    return GemvConfig(block_m=16 if m <= 16 else (32 if m <= 32 else 64), block_n=64, block_k=128)


def w8a16_gemv(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *,
               hw_fp8: bool | None = None) -> torch.Tensor:
    """y = x2d.float() @ dequantize(qw).T (+ bias), cast to out_dtype (default x2d.dtype). M <= 64."""
    qw.require(qw.format)
    m, n, k = _check(x2d, qw, bias)
    hw, cvt = _act_quant.resolve_fp8_path(x2d, hw_fp8)
    cfg = config or default_config(m)
    return _launch(x2d, x2d, 0, 0, qw, hw, cvt, bias, out_dtype or x2d.dtype, cfg, m, n, k)


def w8a8_gemv(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
              out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *,
              hw_fp8: bool | None = None) -> torch.Tensor:
    """W8A8 decode: x quantized dynamically (inside the GEMV when config.fuse_act_quant, else by the
    fused act-quant kernel first), fp8 x fp8 products, fp32 accumulation. Formats: fp8_tensor,
    fp8_row (act=fp8), fp8_block."""
    if qw.act is not Act.FP8 or qw.format not in _A8_GRANULARITY:
        raise UnsupportedError(f"w8a8_gemv serves fp8_tensor / fp8_row / fp8_block with act='fp8', got {qw!r}")
    m, n, k = _check(x2d, qw, bias)
    hw, cvt = _act_quant.resolve_fp8_path(x2d, hw_fp8)
    cfg = config or default_config(m)
    if cfg.fuse_act_quant:
        return _launch(x2d, x2d, 0, 2, qw, hw, cvt, bias, out_dtype or x2d.dtype, cfg, m, n, k)
    xq, xs = _act_quant.quantize_activation(x2d, _A8_GRANULARITY[qw.format], hw_fp8=hw)
    x_arg = xq if hw else xq.view(torch.uint8)
    xs2 = xs.reshape(m, -1) if xs.dim() else xs
    stride_xsm = xs2.stride(0) if xs2.dim() else 0
    return _launch(x_arg, xs2, stride_xsm, 1, qw, hw, cvt, bias, out_dtype or x2d.dtype, cfg, m, n, k)
