"""Launchers of the Triton prefill GEMMs: tensor checks, the views each kernel variant reads, the grid.

No host synchronization and no branch on tensor values: everything here depends on shapes, dtypes and
the config only (the split-K count on the SM count too), so a launch can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Format, QWeight
from dispatch.mx_fold import fold_ok
from dispatch.target import detect

from . import _fp8
from ._fast_launch import launch
from ._gemm import _w8a8_gemm_kernel, _w8a16_gemm_kernel
from ._gemm_config import GemmConfig
from ._gemm_layouts import W8A8_LAYOUT, W8A16_LAYOUT, A8Scales, WScale
from ._pdl import launch_options, pdl_launch
from ._splitk_reduce import splitk_reduce

X_DTYPES = (torch.bfloat16, torch.float16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# FP8DISPATCH_TRITON_FAST_BF16=0 restores Triton's own fp8 -> bf16 conversion in the W8A16 GEMM (the A/B switch of
# the fast decode, _fp8.e4m3_to_bf16_spread; both are exact); read once.
FAST_BF16_DECODE = os.environ.get("FP8DISPATCH_TRITON_FAST_BF16", "1") != "0"


def fast_bf16_decode(x_dtype: torch.dtype, dot_f32: bool) -> bool:
    """Whether the W8A16 GEMM decodes its codes with _fp8.e4m3_to_bf16_spread / e4m3_to_bf16_scaled (NVIDIA PTX):
    bf16 activations (every scale layout; MX multiplies by 2^e in the same bf16x2 FMAs), never the interpreter,
    never ROCm."""
    return FAST_BF16_DECODE and x_dtype == torch.bfloat16 and not dot_f32 and torch.version.hip is None


def wgmma_drain(device: torch.device, dot_f32: bool) -> bool:
    """Whether the W8A16 GEMM waits for every wgmma at the top of each K step (WGMMA_DRAIN): on wgmma targets,
    where its decoded weight is the instruction's register operand. Not a tuning choice but a correctness
    fix: Triton 3.6's PTX rewrites those registers with the next step's codes while the previous step's wgmmas
    still read them, whatever ptxas assembles it (kernels_triton._wgmma; dispatch.isa.ptx_wgmma_register_hazards;
    measured on the H200 as non-finite outputs at 2 CTAs per SM)."""
    return not dot_f32 and detect(device).has_wgmma


_FP8 = torch.float8_e4m3fn


def codes_view(t: torch.Tensor, hw_fp8: bool) -> torch.Tensor:
    """e4m3 codes as the kernel variant reads them: fp8e4nv with hardware fp8, else uint8 (sm_80)."""
    if t.dtype not in (_FP8, torch.uint8):
        raise FormatError(f"expected e4m3 codes (torch.float8_e4m3fn or uint8), got {t.dtype}")
    want = _FP8 if hw_fp8 else torch.uint8
    return t if t.dtype == want else t.view(want)


MX_ROW_PAD = 16  # groups: covers every block_k / 32 <= 8 and gives the row stride divisibility by 16
_MX_CACHE_KEY = "kernels_triton.gemm.mx_scale_rows"
MX_FOLD_MAX = _fp8.MX_FOLD_MAX.value  # the largest e8m0 code whose 2^(code - 7) is a bf16 number (mx_fold.FOLD_MAX)


def mx_scale_rows(qw: QWeight) -> torch.Tensor:
    """The e8m0 codes of an mxfp8 weight as uint8 [N, G'] with G' = ceil(ceil(K/32) / 16) * 16.

    The padding lets the kernel load whole [BLOCK_N, BLOCK_K / 32] exponent tiles without a mask (a masked
    2-4 byte load cannot be copied asynchronously, so it would stall every K step). Padded entries are
    127 (2^0) and only ever multiply weight codes that the kernel masked to 0. Built once per weight at
    load time (`Candidate.prepare`) and cached on the weight; building it is an allocation and a copy,
    never a host synchronization.
    """
    cached = qw._cache.get(_MX_CACHE_KEY)
    if cached is not None:
        return cached
    codes = qw.scale.view(torch.uint8)
    n, g = codes.shape
    gp = triton.cdiv(g, MX_ROW_PAD) * MX_ROW_PAD
    out = torch.full((n, gp), 127, dtype=torch.uint8, device=codes.device)
    out[:, :g] = codes
    qw._cache[_MX_CACHE_KEY] = out
    return out


def mx_fold_ok(qw: QWeight) -> bool:
    """Whether every e8m0 code of the mxfp8 weight is <= MX_FOLD_MAX, so the W8A16 GEMM folds 2^e into its decode's
    one FMA (MX_FOLD; both decodes give the same bits): `dispatch.mx_fold.fold_ok` (read at preparation without a
    host sync, shared with the CUDA wgmma GEMM)."""
    return fold_ok(qw)


def _weight_scale_args(qw: QWeight) -> tuple[torch.Tensor, int]:
    """(scale tensor as the kernel reads it, its row stride)."""
    s = qw.scale
    if qw.format is Format.MXFP8:
        s = mx_scale_rows(qw)  # e8m0 codes; the kernel builds 2^(code - 127) from bits
    stride = s.stride(0) if s.dim() == 2 else 0
    return s, stride


def _check_common(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype) -> None:
    n, k = qw.shape
    if x.dim() != 2 or x.shape[1] != k or x.shape[0] < 1:
        raise FormatError(f"x must be [M >= 1, K = {k}], got {tuple(x.shape)}")
    if x.stride(1) != 1:
        raise FormatError("x must have a contiguous last dimension (call .contiguous())")
    if x.device != qw.device:
        raise FormatError(f"x is on {x.device} but the weight is on {qw.device}")
    if out_dtype not in OUT_DTYPES:
        raise UnsupportedError(f"out_dtype {out_dtype} is not supported by the Triton GEMM; use one of {OUT_DTYPES}")
    if bias is not None and (bias.shape != (n,) or not bias.is_contiguous() or bias.device != x.device):
        raise FormatError(f"bias must be a contiguous [{n}] tensor on {x.device}, got {tuple(bias.shape)}")


def _tma_ok(t: torch.Tensor) -> bool:
    """TMA needs a 16-byte aligned base and row stride (the last dimension is contiguous here)."""
    return t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0


def _tma_target(device: torch.device) -> bool:
    if device.type == "cpu":  # the interpreter emulates descriptors (tests)
        return True
    return detect(device).has_wgmma  # TMA arrived with sm_90, as wgmma did


_W_DESC_KEY = "kernels_triton.gemm.weight_tma_desc"


def _operands(x: torch.Tensor, qw: QWeight, hw_fp8: bool, cfg: GemmConfig):
    """(x operand, weight operand, use_tma): host TMA descriptors when the config asks for TMA and the
    tensors allow it; plain tensors otherwise. Decided by device, alignment and strides, never values.
    The weight's descriptor depends only on its codes and the tile: kept on the weight, per tile."""
    w = codes_view(qw.qdata, hw_fp8)
    if cfg.tma and _tma_target(x.device) and _tma_ok(x) and _tma_ok(w):
        from triton.tools.tensor_descriptor import TensorDescriptor
        descs = qw._cache.setdefault(_W_DESC_KEY, {})
        wd = descs.get((cfg.block_n, cfg.block_k, w.dtype))
        if wd is None:
            wd = descs[(cfg.block_n, cfg.block_k, w.dtype)] = TensorDescriptor.from_tensor(w, [cfg.block_n,
                                                                                                cfg.block_k])
        return TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k]), wd, True
    return x, w, False


def _sm_count(device: torch.device) -> int:
    if device.type == "cpu":  # interpreter: a small pretend GPU, so auto split-K is exercised
        return 8
    from ._gemv import _sm_count as count
    return count(device.index if device.index is not None else torch.cuda.current_device())


def _outputs(m: int, n: int, split: int, out_dtype: torch.dtype, device: torch.device):
    """(y, the split-K workspace or y itself when there is no split)."""
    y = torch.empty((m, n), dtype=out_dtype, device=device)
    part = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=device)
    return y, part


def _reduce_splits(part: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, split: int, pdl: bool) -> None:
    """y = sum of the split-K partials in split order (+ bias), cast: the GEMV's deterministic reduction."""
    if split == 1:
        return
    m, n = y.shape
    rb = 256
    launch(splitk_reduce, (triton.cdiv(n, rb), m), part, bias if bias is not None else y, y, m, n, split,
           y.stride(0), HAS_BIAS=bias is not None, BLOCK=rb, PDL=pdl, num_warps=4, **launch_options(pdl))


@functools.lru_cache(maxsize=1024)
def _legal_w8a16(config: GemmConfig, wscale: WScale, fp16_x: bool) -> str:
    return config.legal_for_w8a16(wscale, fp16_x)


@functools.lru_cache(maxsize=1024)
def _legal_w8a8(config: GemmConfig, scales: A8Scales) -> str:
    return config.legal_for_w8a8(scales)


@functools.lru_cache(maxsize=8192)
def _w8a16_launch(wscale: WScale, x_dtype: torch.dtype, m: int, n: int, k: int, config: GemmConfig,
                  device: torch.device, hw_fp8: bool, dot_f32: bool, use_tma: bool, has_bias: bool,
                  mx_fold: bool, pdl: bool, fast_bf16: bool, drain: bool) -> tuple[int, tuple[int, int], dict]:
    """What a W8A16 launch derives from shapes, dtypes, the config, the device and the switches (PDL, the fast
    decode, the wgmma drain: arguments, so flipping one at run time is seen): (split, grid, the constexpr and launch
    keywords). Cached: an eager call pays a dict lookup, not the derivation."""
    fp16_x = x_dtype == torch.float16
    split = 1 if config.split_k == 1 else config.split_for(m, n, k, _sm_count(device))
    mx_prescale = wscale is WScale.MX32 and not fp16_x
    meta = dict(
        WSCALE=int(wscale), MX_PRESCALE=mx_prescale, HAS_BIAS=has_bias,
        HW_FP8=hw_fp8, DOT_F32=dot_f32, SWAP_AB=config.swap_ab, USE_TMA=use_tma, SPLIT=split > 1,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        FAST_BF16=fast_bf16, WGMMA_DRAIN=drain, PDL=pdl,
        MX_FOLD=mx_prescale and fast_bf16 and mx_fold,
        num_warps=config.num_warps, num_stages=config.num_stages, **launch_options(pdl),
    )
    return split, _grid(m, n, config, split), meta


@functools.lru_cache(maxsize=8192)
def _w8a8_launch(scales: A8Scales, m: int, n: int, k: int, config: GemmConfig, device: torch.device, hw_fp8: bool,
                 dot_f32: bool, use_tma: bool, has_bias: bool, pdl: bool) -> tuple[int, tuple[int, int], dict]:
    """The W8A8 twin of _w8a16_launch."""
    split = 1 if config.split_k == 1 else config.split_for(m, n, k, _sm_count(device))
    meta = dict(
        SCALES=int(scales), HAS_BIAS=has_bias, HW_FP8=hw_fp8, DOT_F32=dot_f32, USE_TMA=use_tma,
        SPLIT=split > 1,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m, PDL=pdl,
        WARP_SPEC=config.warp_specialize and use_tma and hw_fp8 and not dot_f32,
        num_warps=config.num_warps, num_stages=config.num_stages, **launch_options(pdl),
    )
    return split, _grid(m, n, config, split), meta


def _grid(m: int, n: int, cfg: GemmConfig, split: int) -> tuple[int, int]:
    return (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n), split)


def w8a16_gemm(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype,
               config: GemmConfig, *, hw_fp8: bool, dot_f32: bool | None = None) -> torch.Tensor:
    """y[M, N] = x @ dequantize(qw)^T (+ bias), x bf16/fp16 [M, K]; any weight format.

    hw_fp8=False runs the sm_80 variant (uint8 codes, software decode) on any GPU. dot_f32 (default: x on
    the CPU, i.e. TRITON_INTERPRET=1) is the interpreter path (fp32 IEEE dots); it is not a GPU validation.
    """
    _check_common(x, qw, bias, out_dtype)
    if x.dtype not in X_DTYPES:
        raise UnsupportedError(f"W8A16 GEMM takes bf16/fp16 activations, got {x.dtype}")
    wscale = W8A16_LAYOUT[qw.format]
    why = _legal_w8a16(config, wscale, x.dtype == torch.float16)
    if why:
        raise UnsupportedError(f"GemmConfig {config} cannot run W8A16 {qw.format}: {why}")
    m, k = x.shape
    n = qw.out_features
    dot_f32 = x.device.type == "cpu" if dot_f32 is None else dot_f32
    xa, wa, use_tma = _operands(x, qw, hw_fp8, config)
    fast_bf16 = fast_bf16_decode(x.dtype, dot_f32)
    # read only where the fold could apply (a direct call with nothing cached reads it from the device once)
    mx_fold = wscale is WScale.MX32 and x.dtype != torch.float16 and fast_bf16 and mx_fold_ok(qw)
    pdl = pdl_launch(x.device)
    split, grid, meta = _w8a16_launch(wscale, x.dtype, m, n, k, config, x.device, hw_fp8, dot_f32, use_tma,
                                      bias is not None, mx_fold, pdl, fast_bf16, wgmma_drain(x.device, dot_f32))
    y, part = _outputs(m, n, split, out_dtype, x.device)
    ws, stride_ws = _weight_scale_args(qw)
    launch(_w8a16_gemm_kernel, grid,
           xa, wa, ws, bias if bias is not None else y, y, part,
           m, n, k, split,
           x.stride(0), qw.qdata.stride(0), y.stride(0), stride_ws, **meta)
    _reduce_splits(part, bias, y, split, pdl)
    return y


def _act_scale_args(scales: A8Scales, xs: torch.Tensor, m: int, k: int) -> tuple[torch.Tensor, int]:
    """Validate the activation scale layout of `scales` and return (tensor, row stride)."""
    if scales is A8Scales.TENSOR_TENSOR:
        if xs.numel() != 1:
            raise FormatError(f"per-tensor activation scale must have one element, got shape {tuple(xs.shape)}")
        return xs, 0
    if scales is A8Scales.TOKEN_ROW:
        if xs.numel() != m:
            raise FormatError(f"per-token activation scales must be [M, 1] = [{m}, 1], got {tuple(xs.shape)}")
        if xs.dim() != 2 or xs.shape[1] != 1:  # [M, 1] (the quantizer's layout) is read as is: same row stride
            xs = xs.reshape(m)
        return xs, xs.stride(0)
    groups = triton.cdiv(k, 128)
    if xs.numel() != m * groups:
        raise FormatError(f"1x128 activation scales must be [M, ceil(K/128)] = [{m}, {groups}], "
                          f"got {tuple(xs.shape)}")
    if xs.dim() != 2 or xs.shape[0] != m:
        xs = xs.reshape(m, groups)
    if xs.stride(1) != 1:
        xs = xs.contiguous()
    return xs, xs.stride(0)


def w8a8_gemm(xq: torch.Tensor, xs: torch.Tensor, qw: QWeight, bias: torch.Tensor | None,
              out_dtype: torch.dtype, config: GemmConfig, *, hw_fp8: bool,
              dot_f32: bool | None = None) -> torch.Tensor:
    """y[M, N] = (xq * xs) @ dequantize(qw)^T (+ bias) from already-quantized activations.

    (xq, xs) are what `dispatch.quantize_activation(x, qw.act_granularity)` (or the fused Triton
    act-quant kernels) return: xq e4m3 [M, K] (float8_e4m3fn or uint8 codes), xs fp32 in the layout of
    the weight format's activation granularity.
    """
    if qw.format not in W8A8_LAYOUT:
        raise UnsupportedError(f"format {qw.format} has no W8A8 GEMM (use the W8A16 GEMM)")
    _check_common(xq, qw, bias, out_dtype)
    if xs.dtype != torch.float32 or xs.device != xq.device:
        raise FormatError(f"activation scales must be float32 on {xq.device}, got {xs.dtype} on {xs.device}")
    scales = W8A8_LAYOUT[qw.format]
    why = _legal_w8a8(config, scales)
    if why:
        raise UnsupportedError(f"GemmConfig {config} cannot run W8A8 {qw.format}: {why}")
    m, k = xq.shape
    n = qw.out_features
    dot_f32 = xq.device.type == "cpu" if dot_f32 is None else dot_f32
    xs_t, stride_xs = _act_scale_args(scales, xs, m, k)
    ws, stride_ws = _weight_scale_args(qw)
    xa, wa, use_tma = _operands(codes_view(xq, hw_fp8), qw, hw_fp8, config)
    pdl = pdl_launch(xq.device)
    split, grid, meta = _w8a8_launch(scales, m, n, k, config, xq.device, hw_fp8, dot_f32, use_tma, bias is not None,
                                     pdl)
    y, part = _outputs(m, n, split, out_dtype, xq.device)
    launch(_w8a8_gemm_kernel, grid,
           xa, xs_t, wa, ws, bias if bias is not None else y, y, part,
           m, n, k, split,
           xq.stride(0), qw.qdata.stride(0), y.stride(0), stride_xs, stride_ws, **meta)
    _reduce_splits(part, bias, y, split, pdl)
    return y
