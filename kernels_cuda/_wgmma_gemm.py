"""Launcher of the sm_90 W8A16 tensor-core GEMM (csrc/gemm_w8a16_wgmma.cu): bf16 x, e4m3 codes decoded into wgmma's
register operand; per-tensor / per-row weight scales and the bias in the epilogue, MX scales on the decode.

The kernel reads x and the codes through TMA: each launch passes two CUtensorMaps by value (built on the host with
cuTensorMapEncodeTiled, each cached by address and shape). A launch with such parameters goes through
`_launch_with_params` (the GEMV launcher packs 8-byte slots only), which packs them into a per-thread parameter block.
With both, the host time of `w8a16_wgmma_gemm` on the H200 host went from 46.5 to 21.4 us a call
(`tools.perf.probe_host_stages`, session 29: two calls, each on its own host; bf16 F.linear's whole call took 14-21 us
there). A config with `split` > 1 launches a second kernel (csrc/wgmma_splitk_reduce.cu) that sums the K slices'
fp32 partials, a transient [slices, M, N] allocation.

Apart from _launch.py so that only this candidate hashes it (a change here leaves the GEMVs' tuned entries current).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import struct
import threading

import torch

from dispatch import mx_fold
from dispatch.errors import FormatError, UnsupportedError
from dispatch.formats import Format, QWeight
from dispatch.problem import KernelConfig

from . import _driver
from ._driver import ptr
from ._kinds import DTYPE_CODE, SCALE_CODE
from ._launch import _kernel, device_arch, pdl_allowed

SOURCE, ENTRY = "gemm_w8a16_wgmma.cu", "fp8d_w8a16_wgmma"
REDUCE_SOURCE, REDUCE_ENTRY = "wgmma_splitk_reduce.cu", "fp8d_w8a16_wgmma_reduce"  # split K's second kernel
FORMATS = (Format.FP8_ROW, Format.FP8_TENSOR, Format.MXFP8)
K_ALIGN = 16  # the tensor maps' row strides (codes: K bytes) must be multiples of 16 bytes
MX_K_ALIGN = 64  # MX: each K step reads its two scale codes as one 16-bit load
BK = 64  # K per pipeline step (the kernel's kBK)
BAR_BYTES = 8  # one mbarrier per stage after the stages


@dataclasses.dataclass(frozen=True)
class WgmmaGemmConfig(KernelConfig):
    """bm: tokens per CTA (the wgmma N: a multiple of 16 in 64..256); wgs: warpgroups per CTA, 64 weight rows each (1-4);
    stages: depth of the shared-memory ring (copies run stages - 1 - depth K steps ahead); split: K slices (1-8), each a
    CTA per tile writing an fp32 partial that a second kernel sums in slice order (deterministic) with the bias;
    depth: K steps of wgmmas left in flight while the next step's weight is decoded (1 or 2; 2 rotates three register
    sets instead of two); slice_cluster (split > 1): the K slices of a tile are one thread-block cluster and sum their
    accumulators through distributed shared memory in slice order, each slice a part of the tile's tokens, one launch
    and no partials in global memory (the launch needs all `split` slices: splits(K) == split)."""

    bm: int = 128
    wgs: int = 2
    stages: int = 4
    split: int = 1
    depth: int = 1
    slice_cluster: bool = False

    def __post_init__(self) -> None:
        if self.bm % 16 or not 64 <= self.bm <= 256 or not 1 <= self.wgs <= 4 or not 1 <= self.depth <= 2 \
                or not 2 + self.depth <= self.stages <= 8 or not 1 <= self.split <= 8 \
                or (self.slice_cluster and self.split < 2) \
                or (self.slice_cluster and self.cluster_recv_bytes > self.stages * self.stage_bytes):
            raise ValueError(f"WgmmaGemmConfig needs bm a multiple of 16 in 64..256, wgs 1..4, depth 1..2, stages "
                             f"2 + depth..8, split 1..8 (slice_cluster: split >= 2, the accumulator parts a slice "
                             f"receives within the stages); got {self}")

    @property
    def cluster_recv_bytes(self) -> int:
        """slice_cluster: the bytes of the peers' accumulators a slice receives into its shared memory (its part of
        the tile's groups of 8 tokens, at most ceil(groups / split), from each of the split - 1 others; the kernel's
        static_assert says the same)."""
        return (self.split - 1) * -(-(self.bm // 8) // self.split) * 16 * 128 * self.wgs

    @property
    def bn(self) -> int:
        return 64 * self.wgs

    @property
    def stage_bytes(self) -> int:
        return self.bm * BK * 2 + self.bn * BK

    @property
    def smem(self) -> int:
        return self.stages * (self.stage_bytes + BAR_BYTES)

    def grid(self, m: int, n: int) -> int:
        """Output tiles (CTAs per K slice)."""
        return -(-m // self.bm) * -(-n // self.bn)

    def runs_at(self, k: int) -> bool:
        """Whether the config launches at K: a cluster of K slices needs all of them (splits(K) == split)."""
        return not self.slice_cluster or self.splits(k) == self.split

    def splits(self, k: int) -> int:
        """The K slices a launch makes: `split` cut to the K steps, every slice non-empty (the kernel's slice is
        ceil(steps / slices) steps)."""
        steps = max(-(-k // BK), 1)
        per = -(-steps // min(self.split, steps))
        return -(-steps // per)


def compile_arch(arch: str) -> str:
    """wgmma exists only in the arch-specific sm_90a target."""
    if arch != "sm_90":
        raise UnsupportedError(f"the wgmma W8A16 GEMM runs on sm_90 only, not {arch}")
    return "sm_90a"


def module(fmt: Format, cfg: WgmmaGemmConfig, folded: bool = False) -> tuple[str, str, tuple[tuple[str, int], ...]]:
    """(source, entry, defines); folded (MX only): the decode for weights whose scale codes all fold (dispatch.mx_fold),
    without the per-step check for larger codes."""
    d = {"FP8D_CFG_BM": cfg.bm, "FP8D_CFG_WGS": cfg.wgs, "FP8D_CFG_STAGES": cfg.stages,
         "FP8D_CFG_SCALE": SCALE_CODE[fmt]}
    if folded and fmt is Format.MXFP8:
        d["FP8D_MX_FOLD"] = 1
    if cfg.depth != 1:  # depth 1 keeps the defines (and the cached modules) it had before depth existed
        d["FP8D_CFG_DEPTH"] = cfg.depth
    if cfg.slice_cluster:  # likewise the split K through global partials
        d["FP8D_CFG_KCLUSTER"] = cfg.split
    return SOURCE, ENTRY, tuple(sorted(d.items()))


def unsupported_reason(x: torch.Tensor, qw: QWeight, out_dtype: torch.dtype) -> str | None:
    """Why this kernel cannot run (x, qw), or None."""
    if qw.format not in FORMATS:
        return f"the wgmma W8A16 GEMM applies {', '.join(f.value for f in FORMATS)} scales, not {qw.format.value}"
    if x.dtype != torch.bfloat16 or out_dtype != torch.bfloat16:
        return f"the wgmma W8A16 GEMM takes bf16 x and writes bf16, got x {x.dtype}, out {out_dtype}"
    k = qw.shape[1]
    return k_unsupported_reason(qw.format, k) or (
        "the wgmma W8A16 GEMM needs 16-byte aligned codes (the tensor map's base)" if qw.qdata.data_ptr() % 16 else None)


def k_unsupported_reason(fmt: Format, k: int) -> str | None:
    if k % K_ALIGN:
        return f"the wgmma W8A16 GEMM needs K % {K_ALIGN} == 0 (16-byte code rows for TMA), got K = {k}"
    if fmt is Format.MXFP8 and k % MX_K_ALIGN:
        return f"the wgmma W8A16 GEMM reads MX scales two groups a step: K % {MX_K_ALIGN} == 0, got K = {k}"
    return None


# cuda.h enums (CUDA 12 / 13)
_TM_UINT8, _TM_UINT16 = 0, 1
_TM_SWIZZLE_64B, _TM_SWIZZLE_128B = 2, 3
_TM_L2_128B, _TM_L2_256B = 2, 3
_TENSOR_MAP_BYTES = 128


@functools.lru_cache(maxsize=1)
def _encode_fn():
    fn = _driver._libcuda().cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def tensor_map(addr: int, rows: int, cols: int, elem_bytes: int, box_rows: int, swizzle: int, l2: int) -> bytes:
    """A 2-D row-major CUtensorMap: `rows` x `cols` elements of `elem_bytes`, boxes of `box_rows` x 64 elements
    (one K step), out-of-range elements read as zero."""
    buf = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + 64)
    at = (ctypes.addressof(buf) + 63) // 64 * 64  # CUtensorMap is 64-byte aligned
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(cols * elem_bytes)
    box = (ctypes.c_uint32 * 2)(BK, box_rows)
    one = (ctypes.c_uint32 * 2)(1, 1)
    err = _encode_fn()(at, _TM_UINT8 if elem_bytes == 1 else _TM_UINT16, 2, addr, dims, strides, box, one, 0, swizzle,
                       l2, 0)
    if err:
        raise UnsupportedError(f"cuTensorMapEncodeTiled failed with CUresult {err} (rows {rows}, cols {cols}, "
                               f"box {box_rows} x {BK}, address {addr:#x})")
    return ctypes.string_at(at, _TENSOR_MAP_BYTES)


@functools.lru_cache(maxsize=4096)
def _codes_map(addr: int, n: int, k: int, bn: int) -> bytes:
    """The codes' map: depends only on the address and shape, so a cached map stays right for any weight there."""
    return tensor_map(addr, n, k, 1, bn, _TM_SWIZZLE_64B, _TM_L2_256B)


_X_MAPS: dict[tuple[int, int, int, int], bytes] = {}
_X_MAPS_MAX = 4096


def _x_map(addr: int, m: int, k: int, bm: int) -> bytes:
    """x's map, cached by (address, M, K, bm) like the codes' (an engine's activation buffers recur: the caching
    allocator hands the same blocks back), so a repeated call skips cuTensorMapEncodeTiled. Cleared when full."""
    key = (addr, m, k, bm)
    hit = _X_MAPS.get(key)
    if hit is None:
        if len(_X_MAPS) >= _X_MAPS_MAX:
            _X_MAPS.clear()
        hit = _X_MAPS[key] = tensor_map(addr, m, k, 2, bm, _TM_SWIZZLE_128B, _TM_L2_128B)
    return hit


# The kernel's parameters, laid out in one block: the two 128-byte CUtensorMaps (64-byte aligned), then the scale
# and bias pointers, the bias kind, y, the split-K partials, M, N, K at their natural alignment; cuLaunchKernel gets
# one pointer per parameter into it.
_PARAMS = struct.Struct("<128s128sQQi4xQQiii")
_PARAM_OFFSETS = (0, 128, 256, 264, 272, 280, 288, 296, 300, 304)


class _ParamBlock(threading.local):
    """One parameter block per thread, written then launched (cuLaunchKernel copies the parameters), so a launch
    fills a preallocated block instead of building ten ctypes objects."""

    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(_PARAMS.size + 64)
        base = (ctypes.addressof(self.buf) + 63) // 64 * 64
        self.offset = base - ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * len(_PARAM_OFFSETS))(*[base + o for o in _PARAM_OFFSETS])
        self.ptrs_addr = ctypes.addressof(self.ptrs)


_params = _ParamBlock()


def _launch_with_params(kern: _driver.LoadedKernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                        args: tuple, smem: int, pdl: bool) -> None:
    """cuLaunchKernel with the parameters `args` packed into this thread's parameter block; `pdl`: as a programmatic
    dependent launch while a CUDA graph is captured (as kernels_cuda._driver.launch does)."""
    blk = _params
    _PARAMS.pack_into(blk.buf, blk.offset, *args)
    driver = _driver._api()
    stream = _driver.current_stream(kern.device)
    current = driver.ctxGetCurrent()
    if current != kern.ctx:
        driver.ctxSetCurrent(kern.ctx)
    try:
        if pdl and _driver.is_capturing():
            _driver._launch_programmatic(kern.fn_ptr, grid, block, smem, stream, blk.ptrs_addr)
        else:
            driver.launchKernel(kern.fn_ptr, *grid, *block, smem, stream, blk.ptrs_addr, 0)
    finally:
        if current != kern.ctx and current:
            driver.ctxSetCurrent(current)


@functools.lru_cache(maxsize=1024)
def _spec(fmt: Format, cfg: WgmmaGemmConfig, device: int, folded: bool) -> _driver.LoadedKernel:
    name, entry, defines = module(fmt, cfg, folded)
    kern = _kernel(name, entry, defines, device, compile_arch(device_arch(device)))
    _driver.allow_dynamic_smem(kern, cfg.smem)
    return kern


@functools.lru_cache(maxsize=16)
def _reduce_spec(device: int) -> _driver.LoadedKernel:
    """The split-K reduction (one module for every config and format)."""
    return _kernel(REDUCE_SOURCE, REDUCE_ENTRY, (), device, compile_arch(device_arch(device)))


REDUCE_THREADS = 256
PDL_MAX_M = 512  # programmatic launches only up to here (and for one wave of CTAs): see w8a16_wgmma_gemm


@functools.lru_cache(maxsize=16)
def _sm_count(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def w8a16_wgmma_gemm(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype,
                     cfg: WgmmaGemmConfig) -> torch.Tensor:
    """y = x @ (q * s)^T (+ bias) for 2-D contiguous bf16 x [M, K] and an fp8_row / fp8_tensor weight [N, K]."""
    qw.require(qw.format)
    if x.device.type != "cuda" or x.dim() != 2 or not x.is_contiguous():
        raise FormatError("the wgmma W8A16 GEMM takes a contiguous 2-D CUDA x")
    why = unsupported_reason(x, qw, out_dtype)
    if why:
        raise UnsupportedError(why)
    x = x if x.data_ptr() % 16 == 0 else x.clone()  # a view at an odd offset: the tensor map needs a 16-byte base
    m, k = x.shape
    n = qw.shape[0]
    y = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if m == 0:
        return y
    dev = x.device.index or 0
    kern = _spec(qw.format, cfg, dev, mx_fold.fold_ok(qw))
    bias_kind = -1 if bias is None else DTYPE_CODE[bias.dtype]
    splits = cfg.splits(k)
    if not cfg.runs_at(k):
        raise UnsupportedError(f"{cfg}: K = {k} makes {splits} K slices, and the slices' cluster needs {cfg.split}")
    part = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) \
        if splits > 1 and not cfg.slice_cluster else None
    # Both kernels wait for the kernel before them before reading anything it may write (the GEMM reads its first
    # stages' weight codes before that wait), so in a graph on sm_90 they may launch programmatically (pdl_allowed).
    # Only where that was measured to pay (session 36's A/B at the tables' configs, docs/perf/h200_s36_2026-12-01.md):
    # grids of one wave at M <= PDL_MAX_M ran at 0.93-0.98x the time of plain launches (12 of 12 cells at M = 256);
    # grids of more waves at 0.96-1.09x (11 of 16 slower), one-wave grids at M = 1024 at 0.99-1.06x.
    pdl = m <= PDL_MAX_M and cfg.grid(m, n) * splits <= _sm_count(dev) and pdl_allowed(compile_arch(device_arch(dev)))
    _launch_with_params(kern, (cfg.grid(m, n), splits, 1), (128 * cfg.wgs, 1, 1),
                        (_x_map(x.data_ptr(), m, k, cfg.bm), _codes_map(qw.qdata.data_ptr(), n, k, cfg.bn),
                         qw.scale.data_ptr(), ptr(bias), bias_kind, y.data_ptr(), ptr(part), m, n, k),
                        cfg.smem, pdl)
    if part is not None:
        _driver.launch(_reduce_spec(dev), (-(-(m * n) // (4 * REDUCE_THREADS)), 1, 1),
                       (REDUCE_THREADS, 1, 1), (part.data_ptr(), splits, m, n, ptr(bias), bias_kind, y.data_ptr()),
                       pdl=pdl)
    return y
