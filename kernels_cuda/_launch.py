"""Launchers: compile (cached), load per device, and launch the kernels on torch's current stream.

Every launch passes torch tensors' data_ptr() and the current stream's handle; nothing synchronizes the
host or reads a tensor value, so the calls can be captured in a CUDA graph. Allocation goes through
torch's caching allocator (graph-safe).

`arch=None` compiles for the tensor's device ("sm_90" on an H200). Tests pass arch="compute_80" to run
the sm_80 code (software fp8 decode, bf16 MMA for W8A8) as PTX JIT-compiled on newer GPUs, and
emulate_mma=True to run the portable MMA emulation the HIP build falls back to.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import torch

from dispatch.errors import BackendUnavailable, FormatError, UnsupportedError
from dispatch.formats import ActGranularity, Format, QWeight

from . import _driver, compiler
from ._driver import ptr
from ._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
from .configs import MAX_M, GemvConfig, token_tiles

# Per-tensor activation quantization runs in ONE launch up to this many elements: a few CTAs that each read
# all of x (16-byte loads from L2) to compute the same amax, then quantize a share each. Above it the
# redundant reads would cost more than the second launch of the two-pass path.
PER_TENSOR_ONE_LAUNCH_MAX = 1 << 16
# Elements each CTA of the one-launch path quantizes (at most): 64K elements -> 8 CTAs.
PER_TENSOR_ELEMS_PER_CTA = 8192


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """None when CuPy + a CUDA GPU are usable in this process, else the reason."""
    reason = compiler.nvrtc_unavailable_reason()
    if reason:
        return reason
    if torch.version.hip is not None:
        return "this torch is a ROCm build; the CUDA backend needs CUDA (see kernels_hip for AMD GPUs)"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    try:
        import cupy  # noqa: F401, PLC0415

        from cupy.cuda import function  # noqa: F401, PLC0415
    except Exception as e:
        return f"CuPy cannot load kernels ({type(e).__name__}: {e})"
    return None


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason:
        raise BackendUnavailable(f"kernels_cuda cannot run here: {reason}")


@functools.lru_cache(maxsize=None)
def device_arch(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


PDL_ENV = "FP8DISPATCH_PDL"


@functools.lru_cache(maxsize=None)
def pdl_allowed(arch: str) -> bool:
    """Launch the GEMVs, the activation quantizers and the wgmma W8A16 GEMM (with its split-K reduction) as
    programmatic dependent launches (PDL)?

    Yes when the code runs on sm_90 or newer (compiled for `arch`: the griddepcontrol waits exist only there,
    so a compute_80 build on an H200 must launch plainly) and FP8DISPATCH_PDL is not "0" (read once per arch).
    Then a GEMV streams its weights while the kernel before it (the act quantizer, the previous layer's
    GEMV) finishes, and lets the next one start during its own last wave: at decode sizes the launch gap
    and the tail are a tenth of the kernel (docs/perf/h200.md). The contract this needs, in every kernel
    that is launched this way: nothing the previous kernel writes is read before fp8d_wait_prior_grid().
    The GEMVs and the wgmma GEMM read only the weight codes before it, so a weight must not be written by the
    kernel launched right before its linear on the same stream, nor (W8A8: the activation quantizer lets its
    GEMV launch at once) by the one before that (load-time quantization followed by two other launches, a synchronization or
    another stream is fine). The dequant kernel writes before any wait: never PDL. Only launches captured
    into a CUDA graph use the attribute (kernels_cuda._driver.launch): eager ones launch plainly."""
    if os.environ.get(PDL_ENV, "1") == "0" or torch.version.hip is not None:
        return False
    digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
    return arch.startswith(("sm_", "compute_")) and digits.isdigit() and int(digits) >= 90


def _kernel(name: str, entry: str, defines: tuple[tuple[str, Any], ...], device: int, arch: str) -> _driver.LoadedKernel:
    return _driver.load((name, arch, defines), entry, device,
                        lambda: compiler.compile_module(name, arch, dict(defines)).image())


# Module keys: (source, entry, defines) of each kernel the launchers load. They are the whole compile key besides the
# arch (compiler.compile_module), so tools/perf/precompile_cuda.py compiles exactly these to fill the cache.
def gemv_module(w8a8: bool, kind_code: int, xkind: int, m: int, cfg: GemvConfig, emulate_mma: bool = False,
                force_sw_cvt: bool = False, tiled: bool = False) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    """The GEMV module for a family (w8a8), its scale layout / activation granularity code, x dtype code (W8A16
    only), M tokens and config; `tiled`: reading a weight's decode tiles (kernels_cuda/_tiles.py, FP8D_CFG_TILED)."""
    if w8a8:
        name, entry, d = "gemv_w8a8.cu", "fp8d_w8a8_gemv", {"FP8D_CFG_ACTQ": kind_code}
    else:
        name, entry, d = "gemv_w8a16.cu", "fp8d_w8a16_gemv", {"FP8D_CFG_SCALE": kind_code, "FP8D_CFG_XKIND": xkind}
    d.update({"FP8D_CFG_NT": token_tiles(m), "FP8D_CFG_MT": cfg.mtiles, "FP8D_CFG_U": cfg.unroll,
              **_extra_defines(emulate_mma, force_sw_cvt)})
    if tiled:
        if cfg.smem_ring:
            raise ValueError(f"{cfg}: the GEMV on decode tiles keeps its weight ring in registers (smem_ring = 0)")
        d["FP8D_CFG_TILED"] = 1
    if cfg.smem_ring:  # the weight ring in shared memory (csrc/skinny_common.cuh); absent otherwise: the same images
        d["FP8D_SMEM_RING"] = cfg.smem_ring
    return name, entry, tuple(sorted(d.items()))


def act_quant_module(force_sw_cvt: bool = False) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The activation-quantizer module (one module holds every granularity's entry)."""
    return "act_quant.cu", tuple(sorted(_extra_defines(False, force_sw_cvt).items()))


def dequant_module(fmt: Format, force_sw_cvt: bool = False) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    """The dequant module for a weight format's scale layout (csrc/dequant.cu); `force_sw_cvt`: the software e4m3
    decode that sm_80 gets, on any arch."""
    d = {"FP8D_CFG_SCALE": SCALE_CODE[fmt], **_extra_defines(False, force_sw_cvt)}
    return "dequant.cu", "fp8d_dequant", tuple(sorted(d.items()))


@functools.lru_cache(maxsize=4096)
def _gemv_spec(w8a8: bool, kind_code: int, xkind: int, m: int, n: int, cfg: GemvConfig, device: int, arch: str | None,
               emulate_mma: bool, force_sw_cvt: bool,
               tiled: bool = False) -> tuple[_driver.LoadedKernel, tuple, tuple, int, bool]:
    """(kernel, grid, block, smem, pdl) of one GEMV launch, cached: a decode step must not rebuild the defines, the
    module key and the geometry in Python on every call (the host cost is the decode latency when the
    caller does not use CUDA graphs)."""
    arch = arch or device_arch(device)
    kernel = _kernel(*gemv_module(w8a8, kind_code, xkind, m, cfg, emulate_mma, force_sw_cvt, tiled), device, arch)
    smem = cfg.smem_bytes(m)
    if smem > _driver.DEFAULT_DYNAMIC_SMEM:  # a shared-memory ring: the kernel's limit raised once, here (cached)
        _driver.allow_dynamic_smem(kernel, smem)
    return kernel, (math.ceil(n / cfg.rows_per_cta), 1, 1), (32 * cfg.warps, 1, 1), smem, pdl_allowed(arch)


def _extra_defines(emulate_mma: bool, force_sw_cvt: bool) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if emulate_mma:
        d["FP8D_FORCE_MMA_EMULATION"] = 1
    if force_sw_cvt:
        d["FP8D_FORCE_SW_CVT"] = 1
    return d


def _aligned16(t: torch.Tensor) -> torch.Tensor:
    # 16-byte vector loads need a 16-byte aligned base; a view at an odd offset gets a fresh allocation.
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _check_gemv(x2d: torch.Tensor, qw: QWeight) -> tuple[int, int, int]:
    if x2d.dim() != 2 or not x2d.is_contiguous():
        raise FormatError("the CUDA GEMV takes a contiguous 2-D x [M, K]")
    m, k = x2d.shape
    n, kw = qw.shape
    if k != kw:
        raise FormatError(f"x has K = {k} but the weight has K = {kw}")
    if not 1 <= m <= MAX_M:
        raise UnsupportedError(f"the CUDA GEMV serves 1 <= M <= {MAX_M}, got M = {m}; use a GEMM candidate")
    if k % 16:
        raise UnsupportedError(f"the CUDA GEMV needs K % 16 == 0 (16-byte weight loads), got K = {k}")
    if x2d.device != qw.device or x2d.device.type != "cuda":
        raise FormatError("x and the weight must be on the same CUDA device")
    return m, n, k


def _out_and_bias(x2d, n, bias, out_dtype):
    out_dtype = out_dtype or x2d.dtype
    if out_dtype not in DTYPE_CODE:
        raise UnsupportedError(f"output dtype {out_dtype} is not one of bf16, fp16, fp32")
    if bias is not None and (bias.dtype not in DTYPE_CODE or not bias.is_contiguous()):
        raise UnsupportedError(f"bias must be a contiguous bf16/fp16/fp32 tensor, got {bias.dtype}")
    y = torch.empty((x2d.shape[0], n), dtype=out_dtype, device=x2d.device)
    return y, out_dtype


# Decode tiles (kernels_cuda/_tiles.py builds them): rows padded to two 16-row tiles (a CTA of two row tiles reads a
# pair), K to whole 128-wide steps.
TILE_ROWS, TILE_K = 32, 128


def tiles_nbytes(n: int, k: int) -> int:
    return math.ceil(n / TILE_ROWS) * TILE_ROWS * math.ceil(k / TILE_K) * TILE_K


def _check_tiles(tiles: torch.Tensor, qw: QWeight) -> torch.Tensor:
    n, k = qw.shape
    if tiles.dtype != torch.uint8 or tiles.numel() != tiles_nbytes(n, k) or tiles.device != qw.device:
        raise FormatError(f"decode tiles of {tiles.numel()} {tiles.dtype} bytes on {tiles.device} are not the tiled "
                          f"layout of a [{n}, {k}] weight on {qw.device} ({tiles_nbytes(n, k)} uint8); make them with "
                          "dispatch.add_decode_tiles")
    return tiles


def w8a16_gemv(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
               config: GemvConfig | None = None, *, tiles: torch.Tensor | None = None, arch: str | None = None,
               emulate_mma: bool = False, force_sw_cvt: bool = False) -> torch.Tensor:
    """y = x2d @ dequantize(qw).T (+ bias) for bf16/fp16 x, any of the four formats, 1 <= M <= 32. `tiles`: the
    weight's decode tiles (kernels_cuda/_tiles.py) to read instead of its codes: the same sums, the same bits."""
    m, n, k = _check_gemv(x2d, qw)
    w = qw.qdata if tiles is None else _check_tiles(tiles, qw)
    if x2d.dtype not in (torch.bfloat16, torch.float16):
        raise UnsupportedError(f"W8A16 GEMV takes bf16 or fp16 activations, got {x2d.dtype}")
    if qw.format is Format.MXFP8 and x2d.dtype == torch.float16:
        raise UnsupportedError("mxfp8 with fp16 activations: 2^e scales exceed fp16's range in the MMA operand; "
                               "use bf16 activations")
    cfg = config or GemvConfig()
    if not cfg.fits(m):
        raise UnsupportedError(f"{cfg} does not fit the register budget at M = {m}")
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    x2d = _aligned16(x2d)
    kernel, grid, block, smem, pdl = _gemv_spec(False, SCALE_CODE[qw.format], DTYPE_CODE[x2d.dtype], m, n, cfg,
                                           x2d.device.index or 0, arch, emulate_mma, force_sw_cvt, tiles is not None)
    # mxfp8: each CTA first scans its rows' scale codes with 16-byte loads (gemv_w8a16.cu cta_needs_rare)
    scale = _aligned16(qw.scale) if qw.format is Format.MXFP8 else qw.scale
    args = (ptr(w), ptr(scale), ptr(x2d), ptr(bias), ptr(y), m, n, k,
            DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y


def act_quant_plan(m: int, k: int, granularity: ActGranularity | str) -> list[tuple[str, tuple[int, int, int],
                                                                                  tuple[int, int, int]]]:
    """Launch geometry of the fused activation quantization of an [m, k] x: [(entry, grid, block)] in launch
    order. Pure (no device): kernels_hip mirrors it, tests/test_cuda_compile.py models its index coverage."""
    g = ActGranularity.parse(granularity)
    if g is ActGranularity.PER_TOKEN:
        if not m:
            return []
        threads = 1024 if k >= 4096 else (256 if k >= 512 else 128)
        return [("fp8d_act_quant_token", (m, 1, 1), (threads, 1, 1))]
    if g is ActGranularity.PER_TOKEN_GROUP_128:
        items = m * math.ceil(k / 128)
        return [("fp8d_act_quant_group", (math.ceil(items / 8), 1, 1), (256, 1, 1))] if items else []
    numel = m * k
    if numel <= PER_TENSOR_ONE_LAUNCH_MAX:
        ctas = max(1, math.ceil(numel / PER_TENSOR_ELEMS_PER_CTA))
        return [("fp8d_act_quant_tensor_redundant", (ctas, 1, 1), (1024, 1, 1))]
    nparts = min(1024, math.ceil(numel / (256 * 16)))
    return [("fp8d_act_amax_partial", (nparts, 1, 1), (256, 1, 1)),
            ("fp8d_act_quant_tensor_apply", (min(4096, math.ceil(numel / 1024)), 1, 1), (256, 1, 1))]


def quantize_activation(x2d: torch.Tensor, granularity: ActGranularity | str, *, arch: str | None = None,
                        force_sw_cvt: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused dynamic activation quantization of a contiguous [M, K] x: (codes e4m3 [M, K], fp32 scales) with
    dispatch.quantize_activation's layouts ([], [M, 1], [M, ceil(K/128)]) and bits."""
    g = ActGranularity.parse(granularity)
    if x2d.dim() != 2 or not x2d.is_contiguous() or x2d.dtype not in DTYPE_CODE:
        raise FormatError("fused activation quantization takes a contiguous 2-D bf16/fp16/fp32 x [M, K]")
    m, k = x2d.shape
    dev = x2d.device
    codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=dev)
    xk = DTYPE_CODE[x2d.dtype]
    if g is ActGranularity.PER_TOKEN:
        scales = torch.empty((m, 1), dtype=torch.float32, device=dev)
    elif g is ActGranularity.PER_TOKEN_GROUP_128:
        scales = torch.empty((m, -(-k // 128)), dtype=torch.float32, device=dev)
    else:
        scales = torch.empty((), dtype=torch.float32, device=dev)
    launches = _act_quant_launches(m, k, g, dev.index or 0, arch, force_sw_cvt)
    partial = None
    if len(launches) == 2:
        partial = torch.empty((launches[0][2][0],), dtype=torch.float32, device=dev)
    for entry, kernel, grid, block, pdl in launches:
        if entry == "fp8d_act_quant_token":
            args = (ptr(x2d), xk, ptr(codes), ptr(scales), k)
        elif entry == "fp8d_act_quant_group":
            args = (ptr(x2d), xk, ptr(codes), ptr(scales), m, k)
        elif entry in ("fp8d_act_quant_tensor_single", "fp8d_act_quant_tensor_redundant"):
            args = (ptr(x2d), xk, ptr(codes), ptr(scales), m * k)
        elif entry == "fp8d_act_amax_partial":
            args = (ptr(x2d), xk, ptr(partial), m * k)
        else:  # fp8d_act_quant_tensor_apply
            args = (ptr(x2d), xk, ptr(partial), partial.numel(), ptr(codes), ptr(scales), m * k)
        _driver.launch(kernel, grid, block, args, pdl=pdl)
    return codes, scales


@functools.lru_cache(maxsize=4096)
def _act_quant_launches(m: int, k: int, g: ActGranularity, device: int, arch: str | None, force_sw_cvt: bool):
    """((entry, kernel, grid, block, pdl), ...) of act_quant_plan, kernels loaded: cached per shape (see
    _gemv_spec). Every act-quant kernel waits for its prior grid before reading x (act_quant.cu)."""
    name, defines = act_quant_module(force_sw_cvt)
    arch = arch or device_arch(device)
    return tuple((entry, _kernel(name, entry, defines, device, arch), grid, block, pdl_allowed(arch))
                 for entry, grid, block in act_quant_plan(m, k, g))


def w8a8_gemv(x2d: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
              config: GemvConfig | None = None, *, tiles: torch.Tensor | None = None, arch: str | None = None,
              emulate_mma: bool = False, force_sw_cvt: bool = False) -> torch.Tensor:
    """W8A8 decode: fused activation quantization (the granularity the format implies), then the fp8 GEMV (`tiles`:
    reading the weight's decode tiles, as w8a16_gemv)."""
    m, n, k = _check_gemv(x2d, qw)
    w = qw.qdata if tiles is None else _check_tiles(tiles, qw)
    g = qw.act_granularity
    if g is None:
        raise FormatError(f"{qw!r} is W8A16 (act='bf16'); use w8a16_gemv")
    cfg = config or GemvConfig()
    if not cfg.fits(m):
        raise UnsupportedError(f"{cfg} does not fit the register budget at M = {m}")
    y, out_dtype = _out_and_bias(x2d, n, bias, out_dtype)
    xq, xs = quantize_activation(x2d, g, arch=arch, force_sw_cvt=force_sw_cvt)
    kernel, grid, block, smem, pdl = _gemv_spec(True, ACTQ_CODE[g], 0, m, n, cfg, x2d.device.index or 0, arch,
                                           emulate_mma, force_sw_cvt, tiles is not None)
    args = (ptr(w), ptr(qw.scale), ptr(xq), ptr(xs), ptr(bias), ptr(y), m, n, k,
            DTYPE_CODE[bias.dtype] if bias is not None else 0, DTYPE_CODE[out_dtype])
    _driver.launch(kernel, grid, block, args, smem, pdl=pdl)
    return y
