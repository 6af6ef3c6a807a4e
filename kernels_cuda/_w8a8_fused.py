"""The one-launch W8A8 decode GEMV: csrc/gemv_w8a8.cu compiled with FP8D_CFG_FQ (entry fp8d_w8a8_gemv_fq).

Every CTA quantizes all of x into its own shared memory right after the wait for the previous grid (its first weight
loads already in flight), then runs the W8A8 GEMV's loop on those codes. Against the two-launch route
(`_launch.w8a8_gemv`: the fused quantizer, then the GEMV) it saves the quantizer's launch, the codes' round trip
through global memory and the grid boundary between the two; it pays M x K divisions in every CTA, so it is built for
the smallest M: one token tile (M <= 8), with the codes in at most 48 KB of dynamic shared memory (no opt-in). A
persistent config (FqGemvConfig.persistent; the candidate tries it first) launches only the CTAs the device keeps
resident, each walking several row tiles, so x is quantized once per CTA rather than once per row tile. The tuning
tables decide where it wins. Codes and scales are the quantizer's bit for bit (the same device functions), so y
equals the two-launch route's exactly (tests/test_cuda_kernels.py checks it on the GPU)."""

from __future__ import annotations

import dataclasses
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

FQ_MAX_M = 8  # one 8-token MMA column tile: larger M repeats more divisions per CTA than a second launch costs
SMEM_LIMIT = 48 * 1024  # dynamic shared memory a launch gets without cuFuncSetAttribute


@dataclasses.dataclass(frozen=True)
class FqGemvConfig(GemvConfig):
    """The GEMV's config, plus `persistent`: the grid holds only the CTAs the device keeps resident at once (the
    driver's occupancy query for this kernel, block and shared memory), and each CTA walks row tiles blockIdx.x,
    + gridDim.x, ... after one wait and one quantization of x, issuing the next tile's first weight loads before the
    current tile's reduction. Without it, one CTA per row tile, each quantizing x (on the H200 in session 21 that lost
    1.03-1.36x to the two-launch route wherever the grid ran more than one wave). The default is that session's kernel:
    a table entry written before the field existed measured it. The candidate offers both, persistent first."""

    persistent: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.smem_ring:
            raise ValueError("FqGemvConfig: the one-launch GEMV keeps its weight ring in registers (smem_ring = 0); its "
                             "shared memory holds the quantized x")


def code_pitch(m: int, k: int) -> int:
    """Row pitch of the codes in shared memory: K for one row; else K rounded up to 128 plus 64, so the two tokens
    one 8-lane phase of a 16-byte load reads (64 bytes each) fall in disjoint banks."""
    return k if m == 1 else 128 * math.ceil(k / 128) + 64


def scale_slots(m: int, k: int, g: ActGranularity) -> int:
    if g is ActGranularity.PER_TENSOR:
        return 1
    return m if g is ActGranularity.PER_TOKEN else m * math.ceil(k / 128)


def smem_bytes(m: int, k: int, g: ActGranularity, cfg: GemvConfig) -> int:
    """The GEMV's own layout, then the scales (a multiple of 4 slots: 16-byte aligned codes), then the codes."""
    return cfg.smem_bytes(m) + 4 * (4 * math.ceil(scale_slots(m, k, g) / 4)) + m * code_pitch(m, k)


def unsupported_reason(m: int, k: int, g: ActGranularity, cfg: GemvConfig) -> str | None:
    """Why (m, k, granularity, config) cannot run one-launch, or None."""
    if not 1 <= m <= FQ_MAX_M:
        return f"M = {m}: the one-launch W8A8 GEMV serves 1 <= M <= {FQ_MAX_M} (each CTA quantizes all of x)"
    if not cfg.fits(m):
        return f"{cfg} does not fit the register budget at M = {m}"
    need = smem_bytes(m, k, g, cfg)
    if need > SMEM_LIMIT:
        return f"x's codes need {need} bytes of shared memory at M = {m}, K = {k} (> {SMEM_LIMIT})"
    return None


def as_fq_config(cfg: GemvConfig) -> FqGemvConfig:
    """A plain GemvConfig runs one CTA per row tile, as FqGemvConfig's default."""
    return cfg if isinstance(cfg, FqGemvConfig) else FqGemvConfig(cfg.warps, cfg.mtiles, cfg.unroll)


def fused_module(kind_code: int, m: int, cfg: GemvConfig, emulate_mma: bool = False,
                 force_sw_cvt: bool = False) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    """The module key (source, entry, defines) of the one-launch GEMV: the two-launch GEMV's defines plus FP8D_CFG_FQ
    (and FP8D_CFG_PERSIST for a persistent config)."""
    name, _, d = gemv_module(True, kind_code, 0, m, cfg, emulate_mma, force_sw_cvt)
    extra = (("FP8D_CFG_FQ", 1),) + ((("FP8D_CFG_PERSIST", 1),) if as_fq_config(cfg).persistent else ())
    return name, "fp8d_w8a8_gemv_fq", tuple(sorted(d + extra))


def resident_ctas(kernel: _driver.LoadedKernel, threads: int, smem: int) -> int:
    """How many CTAs of `kernel` the whole device keeps resident at once (driver occupancy x SMs), at least 1."""
    from cupy.cuda import Device  # noqa: PLC0415 (optional dependency; not on the hot path: _spec is cached)

    with Device(kernel.device):
        per_sm = _driver._api().occupancyMaxActiveBlocksPerMultiprocessor(kernel.fn_ptr, threads, smem)
    return max(1, per_sm) * torch.cuda.get_device_properties(kernel.device).multi_processor_count


@functools.lru_cache(maxsize=4096)
def _spec(g: ActGranularity, m: int, n: int, k: int, cfg: FqGemvConfig, device: int, arch: str | None,
          emulate_mma: bool, force_sw_cvt: bool) -> tuple[_driver.LoadedKernel, tuple, tuple, int, bool]:
    """(kernel, grid, block, smem, pdl), cached per shape: the decode hot path builds nothing in Python and checks
    nothing twice (the support check runs here, once per shape and config)."""
    reason = unsupported_reason(m, k, g, cfg)
    if reason:
        raise UnsupportedError(reason + "; the two-launch kernels_cuda._launch.w8a8_gemv serves it")
    arch = arch or device_arch(device)
    kernel = _kernel(*fused_module(ACTQ_CODE[g], m, cfg, emulate_mma, force_sw_cvt), device, arch)
    threads, smem, tiles = 32 * cfg.warps, smem_bytes(m, k, g, cfg), math.ceil(n / cfg.rows_per_cta)
    grid = min(tiles, resident_ctas(kernel, threads, smem)) if cfg.persistent else tiles
    return kernel, (grid, 1, 1), (threads, 1, 1), smem, pdl_allowed(arch)


def w8a8_gemv_fq(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None, config: GemvConfig | None = None, *, arch: str | None = None,
                 emulate_mma: bool = False, force_sw_cvt: bool = False) -> torch.Tensor:
    """W8A8 decode in one launch: y = dequantize(quantize_activation(x2d)) @ dequantize(qw).T (+ bias). `config`: an
    FqGemvConfig, or a GemvConfig (one CTA per row tile)."""
    m, n, k = _check_gemv(x2d, qw)
    g = qw.act_granularity
    if g is None:
        raise FormatError(f"{qw!r} is W8A16 (act='bf16'); use w8a16_gemv")
    if x2d.dtype not in DTYPE_CODE:
        raise UnsupportedError(f"activations of dtype {x2d.dtype} are not bf16, fp16 or fp32")
    cfg = as_fq_config(config or GemvConfig())
    kernel, grid, block, smem, pdl = _spec(g, m, n, k, cfg, x2d.device.index or 0, arch, emulate_mma, force_sw_cvt)
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    x2d = _aligned16(x2d)
    args = (ptr(qw.qdata), ptr(qw.scale), ptr(x2d), DTYPE_CODE[x2d.dtype], ptr(bias), ptr(y), m, n, k,
            code_pitch(m, k), DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y
