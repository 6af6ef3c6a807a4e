"""Launchers of the HIP kernels on ROCm torch tensors: compile (cached), load per device, launch on torch's
current stream. No host synchronization and no branch on tensor values (graph-capture safe).

The pure parts (launch geometry, argument packing, checks) are separate functions so CPU tests can check
them against the compiled kernels' metadata; only `_launch` needs a ROCm device.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np
import torch

from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import ActGranularity, Format, QWeight, act_granularity
from kernels_cuda import _driver
from kernels_cuda._kinds import DTYPE_CODE

from . import compiler
from .configs import MAX_M, ROWS_PER_BLOCK, WmmaConfig, wmma_configs_for
from .kernels import W8A16_KERNELS, W8A16_SOURCE, WMMA_KERNELS, WMMA_SOURCE

SCALE_NAME = {Format.FP8_TENSOR: "tensor", Format.FP8_ROW: "row", Format.FP8_BLOCK: "block", Format.MXFP8: "mx"}
X_NAME = {torch.bfloat16: "bf16", torch.float16: "f16"}
ACT_QUANT_SOURCE = "act_quant.cu"
SINGLE_BLOCK_ACT_QUANT_MAX = 1 << 18  # per-tensor act quant in one launch up to this many elements


# --- Pure: geometry and argument packing ---------------------------------------------------------------
def wmma_geometry(n: int, cfg: WmmaConfig) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block): one block per 16 output columns, `waves` wave32s splitting K."""
    return (math.ceil(n / ROWS_PER_BLOCK), 1, 1), (cfg.threads, 1, 1)


def ptr(t: torch.Tensor | None) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())


def w8a16_args(qdata, scale, x2d, bias, y, m: int, n: int, k: int, bias_dtype, out_dtype) -> tuple:
    """Argument tuple of w8a16_wmma_gfx12_*: (w, wscale, x, bias, y, M, N, K, bias_kind, out_kind)."""
    return (ptr(qdata), ptr(scale), ptr(x2d), ptr(bias), ptr(y), np.int32(m), np.int32(n), np.int32(k),
            np.int32(DTYPE_CODE[bias_dtype] if bias_dtype is not None else 0), np.int32(DTYPE_CODE[out_dtype]))


def w8a8_args(xq, xs, qdata, ws, bias, y, m: int, n: int, k: int, bias_dtype, out_dtype) -> tuple:
    """Argument tuple of w8a8_wmma_gfx12_*: (xq, xs, w, ws, bias, bias_kind, y, out_kind, M, N, K)."""
    return (ptr(xq), ptr(xs), ptr(qdata), ptr(ws), ptr(bias),
            np.int32(DTYPE_CODE[bias_dtype] if bias_dtype is not None else 0), ptr(y),
            np.int32(DTYPE_CODE[out_dtype]), np.int32(m), np.int32(n), np.int32(k))


@functools.lru_cache(maxsize=None)
def device_arch(index: int) -> str:
    return torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]


def check_gemv(x2d: torch.Tensor, qw: QWeight) -> tuple[int, int, int]:
    if x2d.dim() != 2 or not x2d.is_contiguous():
        raise FormatError("the HIP WMMA kernels take a contiguous 2-D x [M, K]")
    m, k = x2d.shape
    n, kw = qw.shape
    if k != kw:
        raise FormatError(f"x has K = {k} but the weight has K = {kw}")
    if not 1 <= m <= MAX_M:
        raise UnsupportedError(f"the HIP WMMA kernels serve 1 <= M <= {MAX_M}, got M = {m}; use a GEMM candidate")
    if k % 16:
        raise UnsupportedError(f"the HIP WMMA kernels need K % 16 == 0 (16-byte loads), got K = {k}")
    if x2d.device != qw.device:
        raise FormatError(f"x is on {x2d.device} but the weight is on {qw.device}")
    return m, n, k


def pick_config(m: int, config: WmmaConfig | None) -> WmmaConfig:
    cfg = config or wmma_configs_for(m)[0]
    if not cfg.fits(m):
        raise UnsupportedError(f"{cfg} covers M <= {16 * cfg.m_tiles}, got M = {m}")
    return cfg


def _out(x2d: torch.Tensor, n: int, bias: torch.Tensor | None, out_dtype: torch.dtype | None) -> torch.Tensor:
    out_dtype = out_dtype or x2d.dtype
    if out_dtype not in DTYPE_CODE:
        raise UnsupportedError(f"output dtype {out_dtype} is not one of bf16, fp16, fp32")
    if bias is not None and (bias.dtype not in DTYPE_CODE or not bias.is_contiguous() or bias.numel() != n):
        raise UnsupportedError(f"bias must be a contiguous bf16/fp16/fp32 [N = {n}] tensor")
    return torch.empty((x2d.shape[0], n), dtype=out_dtype, device=x2d.device)


def _aligned16(t: torch.Tensor) -> torch.Tensor:
    # global_load_b128 needs a 16-byte aligned base; a view at an odd offset gets a fresh allocation.
    return t if t.data_ptr() % 16 == 0 else t.clone()


# --- Device: load and launch -------------------------------------------------------------------------
def _launch(source: str, entry: str, defines: dict[str, Any], device: int, grid: Sequence[int],
            block: Sequence[int], args: tuple) -> None:
    # The launch path (driver API through CuPy's bindings) is the CUDA backend's: kernels_cuda/_driver.py.
    arch = device_arch(device)
    key = (source, arch, tuple(sorted(defines.items())))
    kernel = _driver.load(key, entry, device, lambda: compiler.compile_code_object(
        source, compiler.HipCompileOptions.make(arch, dict(key[2]))))
    _driver.launch(kernel, grid, block, args)


def w8a16_wmma(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, config: WmmaConfig | None = None) -> torch.Tensor:
    """y = x2d @ dequantize(qw).T (+ bias): bf16/fp16 x, any format, 1 <= M <= 32 (gfx12)."""
    compiler.require_runtime()
    m, n, k = check_gemv(x2d, qw)
    if x2d.dtype not in X_NAME:
        raise UnsupportedError(f"W8A16 takes bf16 or fp16 activations, got {x2d.dtype}")
    cfg = pick_config(m, config)
    y = _out(x2d, n, bias, out_dtype)
    x2d = _aligned16(x2d)
    scale = qw.scale.view(torch.uint8) if qw.format is Format.MXFP8 else qw.scale
    grid, block = wmma_geometry(n, cfg)
    args = w8a16_args(qw.qdata, scale, x2d, bias, y, m, n, k, bias.dtype if bias is not None else None, y.dtype)
    _launch(W8A16_SOURCE, W8A16_KERNELS[(SCALE_NAME[qw.format], X_NAME[x2d.dtype])], cfg.defines(),
            x2d.device.index or 0, grid, block, args)
    return y


def act_quant_plan(m: int, k: int, g: ActGranularity) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
    """(entry, grid, block) of each launch of act_quant.cu, the geometry kernels_cuda uses (wave32 = warp)."""
    if g is ActGranularity.PER_TOKEN:
        threads = 1024 if k >= 4096 else (256 if k >= 512 else 128)
        return [("fp8d_act_quant_token", (m, 1, 1), (threads, 1, 1))] if m else []
    if g is ActGranularity.PER_TOKEN_GROUP_128:
        items = m * math.ceil(k / 128)
        return [("fp8d_act_quant_group", (math.ceil(items / 8), 1, 1), (256, 1, 1))] if items else []
    numel = m * k
    if numel <= SINGLE_BLOCK_ACT_QUANT_MAX:
        return [("fp8d_act_quant_tensor_single", (1, 1, 1), (1024, 1, 1))]
    nparts = min(1024, math.ceil(numel / (256 * 16)))
    return [("fp8d_act_amax_partial", (nparts, 1, 1), (256, 1, 1)),
            ("fp8d_act_quant_tensor_apply", (min(4096, math.ceil(numel / 1024)), 1, 1), (256, 1, 1))]


def quantize_activation(x2d: torch.Tensor, granularity: ActGranularity | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused activation quantization (act_quant.cu compiled as HIP): codes uint8 [M, K], fp32 scales with
    dispatch.quantize_activation's layouts. Bit-identity with the reference is what the GPU test checks."""
    compiler.require_runtime()
    g = ActGranularity.parse(granularity)
    if x2d.dim() != 2 or not x2d.is_contiguous() or x2d.dtype not in DTYPE_CODE:
        raise FormatError("fused activation quantization takes a contiguous 2-D bf16/fp16/fp32 x [M, K]")
    m, k = x2d.shape
    dev, idx = x2d.device, x2d.device.index or 0
    codes = torch.empty((m, k), dtype=torch.uint8, device=dev)
    xk = np.int32(DTYPE_CODE[x2d.dtype])
    if g is ActGranularity.PER_TOKEN:
        scales = torch.empty((m, 1), dtype=torch.float32, device=dev)
    elif g is ActGranularity.PER_TOKEN_GROUP_128:
        scales = torch.empty((m, math.ceil(k / 128)), dtype=torch.float32, device=dev)
    else:
        scales = torch.empty((), dtype=torch.float32, device=dev)
    plan = act_quant_plan(m, k, g)
    partial = None
    if len(plan) == 2:
        partial = torch.empty((plan[0][1][0],), dtype=torch.float32, device=dev)
    for entry, grid, block in plan:
        args = {
            "fp8d_act_quant_token": lambda: (ptr(x2d), xk, ptr(codes), ptr(scales), np.int32(k)),
            "fp8d_act_quant_group": lambda: (ptr(x2d), xk, ptr(codes), ptr(scales), np.int32(m), np.int32(k)),
            "fp8d_act_quant_tensor_single": lambda: (ptr(x2d), xk, ptr(codes), ptr(scales), np.int64(m * k)),
            "fp8d_act_amax_partial": lambda: (ptr(x2d), xk, ptr(partial), np.int64(m * k)),
            "fp8d_act_quant_tensor_apply": lambda: (ptr(x2d), xk, ptr(partial), np.int32(plan[0][1][0]), ptr(codes),
                                                    ptr(scales), np.int64(m * k)),
        }[entry]()
        _launch(ACT_QUANT_SOURCE, entry, {}, idx, grid, block, args)
    return codes, scales


def w8a8_wmma(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
              out_dtype: torch.dtype | None = None, config: WmmaConfig | None = None) -> torch.Tensor:
    """W8A8: fused activation quantization, then e4m3 x e4m3 WMMA with the format's scales (gfx12)."""
    compiler.require_runtime()
    m, n, k = check_gemv(x2d, qw)
    g = act_granularity(qw.format, qw.act)
    if g is None:
        raise UnsupportedError(f"{qw.format}/{qw.act} is not a W8A8 weight")
    cfg = pick_config(m, config)
    y = _out(x2d, n, bias, out_dtype)
    xq, xs = quantize_activation(x2d, g)  # fresh allocations: 16-byte aligned
    grid, block = wmma_geometry(n, cfg)
    args = w8a8_args(xq, xs, qw.qdata, qw.scale, bias, y, m, n, k, bias.dtype if bias is not None else None, y.dtype)
    _launch(WMMA_SOURCE, WMMA_KERNELS[SCALE_NAME[qw.format]], cfg.defines(), x2d.device.index or 0, grid, block,
            args)
    return y
