"""Candidates of the CUDA backend (NVRTC-compiled C++ in kernels_cuda/csrc), imported lazily by
dispatch.registry. Importing this module touches no device, no compiler and no file; `available()` says
whether CuPy + NVRTC + a CUDA GPU are usable, with the reason when not.

  cuda.w8a16_gemv     decode W8A16, every weight scale layout, 1 <= M <= 32
  cuda.w8a8_gemv      decode W8A8 (fused activation quantization + fp8 GEMV), 1 <= M <= 32
  cuda.w8a8_gemv_fq   decode W8A8 in ONE launch (each CTA quantizes x into shared memory), 1 <= M <= 8
  cuda.w8a8_gemv_inline
                      decode W8A8 in ONE launch, x quantized step by step inside the K loop, 1 <= M <= 2
  cuda.w8a16_gemv_tiles, cuda.w8a8_gemv_tiles
                      the two GEMVs reading a weight's decode tiles (dispatch.add_decode_tiles; kernels_cuda/_tiles.py)
  cuda.dequant_cublas weight dequantization (fp8 -> bf16/fp16) then one cuBLAS GEMM, W8A16, M >= 256
  cuda.w8a16_gemm_wgmma
                      sm_90 W8A16 tensor-core GEMM (TMA, wgmma with the decoded weight as its register operand), fp8_row
                      / fp8_tensor / mxfp8 with bf16 x, M > 32
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from dispatch import mx_fold
from dispatch.formats import Act, ActGranularity, Format, QWeight, act_granularity
from dispatch.problem import Candidate, KernelConfig, Problem, Support
from dispatch.target import Target

from . import _dequant_route, _launch, _tiles, _w8a8_fused, _w8a8_inline, _wgmma_gemm
from ._w8a8_fused import FqGemvConfig
from ._wgmma_gemm import WgmmaGemmConfig
from .configs import MAX_M, DequantConfig, GemvConfig, default_gemv_config, fits_on_decode_tiles, gemv_configs

# Read by dispatch.registry: the archs whose hardware ran these kernels. tests/test_cuda_kernels.py passed on an
# H200 (sm_90 native and the compute_80 / emulated-MMA paths run there; session 7: 98 of 98 at commit c8674c7;
# session 9: with test_cuda_driver.py and test_dispatch_gpu.py 151 passed, 1 skipped, a dispatcher test, at 5e87a00;
# session 10: the same files, 152 passed, 1 skipped, at 2581884; torch 2.11.0+cu130, cupy 14.2.0, 2026-11-29/30).
# sm_80 and sm_89 silicon has not run them: explain() says so there.
HARDWARE_VALIDATED = frozenset({"sm_90"})

_HALF = (torch.bfloat16, torch.float16)
_OUT = (torch.bfloat16, torch.float16, torch.float32)
SOURCES = ("kernels_cuda/csrc/portability.cuh", "kernels_cuda/csrc/fp8_common.cuh",
           "kernels_cuda/csrc/skinny_common.cuh", "kernels_cuda/_launch.py", "kernels_cuda/_driver.py",
           "kernels_cuda/compiler.py", "kernels_cuda/configs.py", "kernels_cuda/_kinds.py")


def backend_available() -> Support:
    reason = _launch.gpu_unavailable_reason()
    return Support.no(reason) if reason else Support.yes()


def target_support(target: Target) -> Support:
    """Which code path a target gets (feature predicates, never arch numbers)."""
    if not target.is_cuda:
        return Support.no(f"{target.arch}: the CUDA backend runs on NVIDIA GPUs only (kernels_hip serves AMD)")
    if not target.has_hw_fp8_cvt:
        return Support.yes(f"{target.arch}: software e4m3 decode, bf16 tensor-core MMA")
    return Support.yes()


def _gemv_support(problem: Problem, target: Target) -> Support:
    t = target_support(target)
    if not t:
        return t
    if problem.m > MAX_M:
        return Support.no(f"M = {problem.m} > {MAX_M}: the GEMV keeps all tokens in MMA registers; a GEMM serves it")
    if problem.k % 16:
        return Support.no(f"K = {problem.k} is not a multiple of 16 (16-byte weight loads per lane)")
    if problem.out_dtype not in _OUT:
        return Support.no(f"output dtype {problem.out_dtype} is not bf16, fp16 or fp32")
    return t


class _CudaCandidate(Candidate):
    backend = "cuda"

    def available(self) -> Support:
        return backend_available()


class _CudaGemvCandidate(_CudaCandidate):
    config_type = GemvConfig
    # On shapes in no table, default_gemv_config's rule (CTA width from N and the SM count, ring depth from the
    # register budget) was the autotuned config in 12 of the 14 cells the CUDA GEMVs won in the H200 untabled
    # bench (session 3), where configs borrowed from the nearest tabled shape cost up to 1.26x (5120x25600
    # borrowing the config tuned for K = 14336).
    borrows_configs = False

    def supports(self, problem: Problem, target: Target) -> Support:
        s = _gemv_support(problem, target)
        return self._family_support(problem, target, s) if s else s

    def _family_support(self, problem: Problem, target: Target, shared: Support) -> Support:
        """What the family adds to the shared GEMV checks (`shared` is their positive answer)."""
        raise NotImplementedError

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return gemv_configs(problem, target)

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        return default_gemv_config(problem, target)


class CudaW8A16Gemv(_CudaGemvCandidate):
    """fp8 weights decoded in registers to bf16 (f16 for f16 activations) and multiplied on the tensor
    cores (m16n8k16, tokens as the 8-wide side), fp32 accumulation, in-CTA split-K reduced in warp order."""

    id = "cuda.w8a16_gemv"
    serves = frozenset((f, Act.BF16) for f in Format)
    source_files = SOURCES + ("kernels_cuda/csrc/gemv_w8a16.cu",)
    decode_tiles_variant = "cuda.w8a16_gemv_tiles"

    def _family_support(self, problem: Problem, target: Target, s: Support) -> Support:
        if problem.x_dtype not in _HALF:
            return Support.no(f"activations of dtype {problem.x_dtype}: the tensor-core path takes bf16 or fp16")
        if problem.fmt is Format.MXFP8 and problem.x_dtype == torch.float16:
            return Support.no("mxfp8 with fp16 activations: 2^e scales leave fp16's range in the MMA operand")
        return s

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.BF16)
        return _launch.w8a16_gemv(x2d, qw, bias, out_dtype, config)


class CudaW8A8Gemv(_CudaGemvCandidate):
    """Fused activation quantization (one launch at decode sizes) then an fp8 x fp8 GEMV: m16n8k32 e4m3
    MMA where the target has fp8 MMA, exact bf16 decode + bf16 MMA otherwise."""

    id = "cuda.w8a8_gemv"
    serves = frozenset({(Format.FP8_TENSOR, Act.FP8), (Format.FP8_ROW, Act.FP8), (Format.FP8_BLOCK, Act.FP8)})
    source_files = SOURCES + ("kernels_cuda/csrc/gemv_w8a8.cu", "kernels_cuda/csrc/act_quant.cu",
                              "kernels_cuda/csrc/act_quant_common.cuh")
    decode_tiles_variant = "cuda.w8a8_gemv_tiles"

    def _family_support(self, problem: Problem, target: Target, s: Support) -> Support:
        if problem.x_dtype not in _OUT:
            return Support.no(f"activations of dtype {problem.x_dtype} are not bf16, fp16 or fp32")
        if not target.has_fp8_mma:
            return Support.yes(f"{target.arch}: no fp8 MMA, codes decoded to bf16 for the bf16 MMA")
        return s

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.FP8)
        return _launch.w8a8_gemv(x2d, qw, bias, out_dtype, config)


class CudaW8A8GemvFused(CudaW8A8Gemv):
    """The same GEMV in ONE launch: each CTA quantizes all of x into its shared memory after the wait for the
    previous grid, then multiplies from there (kernels_cuda/_w8a8_fused.py). No quantizer launch and no grid boundary;
    M x K divisions in every CTA instead, so only one token tile (M <= 8) whose codes fit 48 KB of shared memory."""

    id = "cuda.w8a8_gemv_fq"
    config_type = FqGemvConfig
    # Session 21 on the H200: 0.89-0.94x the two-launch route's time on 4096x4096 at M = 1 (256 CTAs: one wave), 1.15-
    # 1.36x on the larger grids and on K = 14336 of the same N (every CTA pays the quantization), 1.3-2.8x at M = 4.
    # Session 22's persistent grids (one quantization per resident CTA): up to 2.55x faster than that on multi-wave
    # grids, still 0.89-1.29x the two-launch route at M = 1 (faster in 6 of 24 cells) and 1.07-1.85x at M = 4.
    # A neighbour's win says nothing of a shape: the fallback chain does not lend its entries.
    lent_to_nearby_shapes = False
    source_files = SOURCES + ("kernels_cuda/csrc/gemv_w8a8.cu", "kernels_cuda/csrc/act_quant_common.cuh",
                              "kernels_cuda/_w8a8_fused.py")
    decode_tiles_variant = None  # its x lives in shared memory: no tiled variant (not measured)

    def _family_support(self, problem: Problem, target: Target, s: Support) -> Support:
        s = super()._family_support(problem, target, s)
        if not s:
            return s
        g = act_granularity(problem.fmt, problem.act)
        # the smallest config (4 warps, one row tile) bounds the shared memory every config needs
        reason = _w8a8_fused.unsupported_reason(problem.m, problem.k, g, GemvConfig(warps=4, mtiles=1, unroll=1))
        return Support.no(reason) if reason else s

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        # Persistent first (x quantized once per resident CTA), then the default config one CTA per row tile (the
        # session-21 kernel: the comparison in the same tuning run), then the other persistent configs, two-row-tile
        # ones first (the GEMV's own order puts them after every one-tile config, past a 4-config tuning budget),
        # then the rest one CTA per row tile.
        g = act_granularity(problem.fmt, problem.act)
        ok = [c for c in gemv_configs(problem, target)
              if not c.smem_ring and _w8a8_fused.unsupported_reason(problem.m, problem.k, g, c) is None]
        ordered = ok[:1] + sorted(ok[1:], key=lambda c: -c.mtiles)
        fq = [FqGemvConfig(c.warps, c.mtiles, c.unroll, persistent=persistent) for persistent in (True, False)
              for c in ordered]
        n = len(ordered)
        return fq[:1] + fq[n:n + 1] + fq[1:n] + fq[n + 1:]

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        g = default_gemv_config(problem, target)
        first = FqGemvConfig(g.warps, g.mtiles, g.unroll, persistent=True)
        ok = self.configs(problem, target)
        return first if first in ok or not ok else ok[0]

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.FP8)
        return _w8a8_fused.w8a8_gemv_fq(x2d, qw, bias, out_dtype, config)


class CudaW8A8GemvInline(CudaW8A8Gemv):
    """The same GEMV in ONE launch with x quantized inside its K loop (kernels_cuda/_w8a8_inline.py): the warp that owns
    a 128-wide step quantizes that step of x in registers right before its MMAs, so nothing waits for a quantizer grid
    or for a prologue over all of x (per tensor / per token: one amax pass over x first). Every CTA repeats the
    divisions, so M <= 2 tokens of bf16 / fp16 x; its configs are the GEMV's that fit its registers."""

    id = "cuda.w8a8_gemv_inline"
    source_files = SOURCES + ("kernels_cuda/csrc/gemv_w8a8.cu", "kernels_cuda/csrc/act_quant_common.cuh",
                              "kernels_cuda/_w8a8_inline.py")
    decode_tiles_variant = None  # not built on decode tiles (not measured)

    def _family_support(self, problem: Problem, target: Target, s: Support) -> Support:
        s = super()._family_support(problem, target, s)
        if not s:
            return s
        reason = _w8a8_inline.unsupported_reason(problem.m, problem.x_dtype, GemvConfig())
        return Support.no(reason) if reason else s

    def lending_refused(self, tuned_at: Problem, problem: Problem, target: Target) -> str | None:
        # Per tensor and per token every CTA first reads all of x for the amax, in rounds of loads that each wait for
        # the memory system the weight stream saturates (~1 us each on the H200, session 27's timeline probe): a longer
        # K adds rounds that the tuned time did not pay. Session 27, W8A8 M = 1 on shapes in no table: where the chain
        # lent these entries to a longer K, the two-launch GEMV was 1.06-1.17x faster (3 of 3 cells).
        amax_pass = act_granularity(problem.fmt, problem.act) is not ActGranularity.PER_TOKEN_GROUP_128
        if amax_pass and problem.k > tuned_at.k:
            return (f"the in-loop GEMV's amax pass reads all of x per CTA: K = {problem.k} takes more rounds of loads "
                    f"than the tuned K = {tuned_at.k}")
        return None

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return [c for c in gemv_configs(problem, target) if c.fits(problem.m)]  # supports() bounds M

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        ok = self.configs(problem, target)
        first = default_gemv_config(problem, target)
        return first if first in ok or not ok else ok[0]

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.FP8)
        return _w8a8_inline.w8a8_gemv_inline(x2d, qw, bias, out_dtype, config)


class _OnDecodeTiles:
    """Mixin: the same GEMV reading the weight's decode tiles (kernels_cuda/_tiles.py): the same sums in the same order,
    512 contiguous bytes per warp load. Only for weights given tiles (dispatch.add_decode_tiles: an opt-in copy of the
    codes). Session 22 on the H200, the same config: 0.79-0.99x the row-major time in 157 of 168 decode cells. Its
    configs are the row-major GEMV's that `configs.fits_on_decode_tiles`."""

    reads_decode_tiles = True
    decode_tiles_variant = None

    def supports(self, problem: Problem, target: Target) -> Support:
        if not problem.decode_tiles:
            return Support.no("reads a weight's decode tiles and this weight has none (dispatch.add_decode_tiles makes "
                              "them, at load time)")
        return super().supports(problem, target)

    def _fits(self, config: KernelConfig, m: int) -> bool:
        return isinstance(config, GemvConfig) and fits_on_decode_tiles(config, m, self.act is Act.FP8)

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return [c for c in super().configs(problem, target) if self._fits(c, problem.m)]

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        c = super().default_config(problem, target)
        while not self._fits(c, problem.m) and c.unroll > 1:  # the row-major default's ring, as deep as fits here
            c = GemvConfig(c.warps, c.mtiles, c.unroll - 1)
        return c

    def tiles_help(self, config: KernelConfig, problem: Problem) -> bool:
        """A row-major pick is handed over at its config only where the tiled module holds that config."""
        return self._fits(config, problem.m) and _tiles.helps(config, problem.act, problem.fmt)

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, self.act)
        return getattr(_launch, self.launcher)(x2d, qw, bias, out_dtype, config, tiles=_tiles.tiles_of(qw))


class CudaW8A16GemvTiles(_OnDecodeTiles, CudaW8A16Gemv):
    id = "cuda.w8a16_gemv_tiles"
    source_files = CudaW8A16Gemv.source_files + ("kernels_cuda/_tiles.py",)
    act, launcher = Act.BF16, "w8a16_gemv"


class CudaW8A8GemvTiles(_OnDecodeTiles, CudaW8A8Gemv):
    id = "cuda.w8a8_gemv_tiles"
    source_files = CudaW8A8Gemv.source_files + ("kernels_cuda/_tiles.py",)
    act, launcher = Act.FP8, "w8a8_gemv"


# The dequantize-then-cuBLAS route is for prefill: at decode M its two launches and 3 extra bytes of weight
# traffic per element lose to the GEMVs (25 us at M = 1..16 on the H200, run 3).
DEQUANT_CUBLAS_MIN_M = MAX_M + 1  # 33: every M the GEMVs do not serve (bucket 64 starts at 33)


# The dequant kernel's tuning space, default first.
DEQUANT_CONFIGS = (DequantConfig(256), DequantConfig(128))


class CudaDequantCublas(_CudaCandidate):
    """Weight dequantization (csrc/dequant.cu) then ONE cuBLAS GEMM with fp32 accumulation and reduction; the
    scale of fp8_tensor / fp8_row goes to the output, never into a bf16 weight. _dequant_route says how and why.
    Costs 3 bytes of traffic per weight element on top of the GEMM: for M >= 64, where the GEMM dominates."""

    id = "cuda.dequant_cublas"
    serves = frozenset((f, Act.BF16) for f in Format)
    config_type = DequantConfig
    source_files = SOURCES + ("kernels_cuda/csrc/dequant.cu", "kernels_cuda/csrc/scale_cols.cu",
                             "kernels_cuda/_dequant_route.py", "kernels_cuda/_dequant.py")

    def supports(self, problem: Problem, target: Target) -> Support:
        t = target_support(target)
        if not t:
            return t
        if problem.m < DEQUANT_CUBLAS_MIN_M:
            return Support.no(f"M = {problem.m} < {DEQUANT_CUBLAS_MIN_M}: dequantize-then-cuBLAS is a prefill "
                              "route; the GEMV candidates serve decode")
        if problem.x_dtype not in _HALF:
            return Support.no(f"activations of dtype {problem.x_dtype}: cuBLAS half GEMM takes bf16 or fp16")
        if problem.out_dtype not in _OUT:
            return Support.no(f"output dtype {problem.out_dtype} is not bf16, fp16 or fp32")
        if problem.fmt is Format.MXFP8 and problem.x_dtype == torch.float16:
            return Support.no("mxfp8 with fp16 activations: 2^e-scaled weights leave fp16's range")
        return Support.yes("dequantize per call (one pass over W), then one cuBLAS GEMM")

    def prepare(self, qw: QWeight) -> Any:
        # tensor/row: the codes view (the weight as fp8_tensor with a scale of 1.0) is built here, at load time.
        # Built by the first run() instead, inside CUDA-graph capture, its scale tensor would be written only when
        # the graph replays: an eager call before any replay would read garbage. The dispatcher never runs
        # prepare() inside capture (it asks for an eager warm-up call instead).
        if qw.format in (Format.FP8_TENSOR, Format.FP8_ROW) and qw.device.type == "cuda":
            _dequant_route._codes_view(qw)
        return None

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        return list(DEQUANT_CONFIGS)

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        return DequantConfig()

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.BF16)
        return _dequant_route.linear(x2d, qw, bias, out_dtype, config)


# The wgmma GEMM's space per M (session 28, tools/perf/probe_wgmma_gemm.py and the re-tune of the W8A16 keys on the
# H200: the configs that won a cell, and their neighbours; session 29 added split K where the efficient tiles are too
# few for the SMs: 4096 rows make 32 tiles of 128 rows, 4 K slices make 128 CTAs). At M = 64 split K was measured too
# (64-token tiles, 2 and 4 slices: up to 2.2x faster than unsplit at K = 14336) and still lost every cell to the
# Triton GEMM's split-K by 1.1-1.4x, so that space stays unsplit (the time model would overrate it: the heuristic
# then took it over the Triton GEMM in 2 of the 16 mxfp8/fp8_row cells, 1.18-1.19x slower).
_WGMMA_CONFIGS_M64 = (WgmmaGemmConfig(64, 1, 6), WgmmaGemmConfig(64, 2, 6), WgmmaGemmConfig(64, 4, 4),
                      WgmmaGemmConfig(64, 1, 6, depth=2), WgmmaGemmConfig(64, 2, 6, depth=2))
_WGMMA_CONFIGS_M256 = (WgmmaGemmConfig(128, 1, 4), WgmmaGemmConfig(128, 2, 4), WgmmaGemmConfig(256, 2, 4),
                       WgmmaGemmConfig(64, 2, 6), WgmmaGemmConfig(128, 4, 4), WgmmaGemmConfig(256, 2, 4, 2),
                       WgmmaGemmConfig(256, 2, 4, 3), WgmmaGemmConfig(256, 2, 4, 4), WgmmaGemmConfig(128, 2, 4, 2),
                       WgmmaGemmConfig(128, 4, 4, 2), WgmmaGemmConfig(128, 2, 6, depth=2),
                       WgmmaGemmConfig(128, 1, 6, depth=2), WgmmaGemmConfig(256, 2, 5, depth=2),
                       WgmmaGemmConfig(256, 2, 5, 2, depth=2), WgmmaGemmConfig(256, 2, 5, 4, depth=2),
                       WgmmaGemmConfig(128, 2, 6, 2, depth=2),
                       # K slices summed in a cluster's shared memory (session 35; after their twins above: the time
                       # model gives a twin the same cost, so only a table entry picks one)
                       WgmmaGemmConfig(128, 2, 6, 2, depth=2, slice_cluster=True),
                       WgmmaGemmConfig(128, 2, 6, 2, slice_cluster=True),
                       WgmmaGemmConfig(256, 2, 4, 2, slice_cluster=True),
                       WgmmaGemmConfig(256, 2, 5, 2, depth=2, slice_cluster=True))
_WGMMA_CONFIGS_LARGE = (WgmmaGemmConfig(256, 2, 4), WgmmaGemmConfig(256, 2, 5), WgmmaGemmConfig(128, 2, 4),
                        WgmmaGemmConfig(128, 4, 4), WgmmaGemmConfig(128, 3, 5), WgmmaGemmConfig(256, 2, 5, depth=2),
                        WgmmaGemmConfig(128, 2, 6, depth=2), WgmmaGemmConfig(128, 3, 6, depth=2))


# Tile heights fitted to M (session 30): at M > 512 the space also holds two-warpgroup tiles of the heights within
# these bounds that cut M into a few more tiles than 256-token tiles do, each the smallest height for its tile count
# (M = 1024: 5-7 tiles of 208, 176, 160 tokens; M = 4096: 18-26 tiles of 240 down to 160); which one wins is the wave
# count of the shape (N = 6656 at M = 1024: 5 tiles of 208 tokens make 260 CTAs, 1.97 waves of 132, where tiles of
# 256 make 208, 1.58 waves: two waves either way, each tile 19 % smaller).
_WGMMA_FIT_BM = (160, 240)


def _fitted_bms(m: int) -> list[int]:
    """The tile heights (multiples of 16 within _WGMMA_FIT_BM) that split M into one more to a few more tiles than
    256-token tiles do, each the smallest height for its tile count."""
    out: list[int] = []
    for tiles in range(-(-m // 256) + 1, -(-m // _WGMMA_FIT_BM[0]) + 1):
        bm = 16 * -(-m // (16 * tiles))
        if _WGMMA_FIT_BM[0] <= bm <= _WGMMA_FIT_BM[1] and bm not in out:
            out.append(bm)
    return out


def _fitted_configs(m: int) -> tuple[WgmmaGemmConfig, ...]:
    return tuple(WgmmaGemmConfig(bm, 2, 4) for bm in _fitted_bms(m))


def wgmma_configs() -> list[WgmmaGemmConfig]:
    """Every config of the wgmma GEMM's spaces (what tools/perf/precompile_cuda.py compiles and the tests check): the
    fixed spaces and every fitted tile height (_WGMMA_FIT_BM; any M above 512 picks among them)."""
    out: list[WgmmaGemmConfig] = []
    fitted = tuple(WgmmaGemmConfig(bm, 2, 4) for bm in range(_WGMMA_FIT_BM[0], _WGMMA_FIT_BM[1] + 1, 16))
    for space in (_WGMMA_CONFIGS_M64, _WGMMA_CONFIGS_M256, _WGMMA_CONFIGS_LARGE, fitted):
        out += [c for c in space if c not in out]
    return out


# The wgmma GEMM's time model (its estimate_us and default config; session 28's re-tune journal, the 64 W8A16 cells at
# M = 64..4096, every config): each CTA walks all of K in 64-deep steps, so a call takes waves x steps x the time of
# one step, a step of a (bm, wgs) tile running at _WGMMA_TILE_EFF of the arch's bf16 rate per SM (about the median of
# the many-wave cells; they spread +-10 %). Big tiles are the efficient ones (256 x 128: 0.85, 128 x 128: 0.72, 128 x 64:
# 0.60); at M = 64 one warpgroup's four dependent k16 wgmmas take ~0.3 us a step whatever the tile (0.30), which is
# why the Triton GEMM's split-K wins there. The default config is the model's fastest: wave quantization then picks
# the tile (6144x4096 M = 1024: 256 x 128 tiles make 192 CTAs, 2 waves of 132 with the second half empty; 128 x 128
# make 384, 3 waves, and measured 1.13x faster).
_WGMMA_TILE_EFF = {(256, 2): 0.85, (128, 2): 0.72, (128, 3): 0.68, (128, 4): 0.70, (128, 1): 0.60, (64, 4): 0.50,
                   (64, 2): 0.50, (64, 1): 0.30,
                   # the fitted heights (session 30's re-tune, 16-32 cells each: 0-5 % below the line from 128 to 256)
                   (160, 2): 0.72, (176, 2): 0.75, (192, 2): 0.74, (208, 2): 0.80, (224, 2): 0.78, (240, 2): 0.80}
# A grid of few waves runs its tiles faster than these many-wave medians (a CTA alone on its SM, less L2 traffic per
# SM): tiles of 128 rows and more by up to ~20 % at one wave (5120x25600 M = 256, 80 tiles of 128 x 128: 0.87 of the
# per-SM rate against 0.72 at 8-60 waves); one warpgroup alone on an SM does not (128 x 64 tiles: 0.57 at one wave), nor
# do the 64-row tiles of M = 64 (their latency floor).
_WGMMA_FEW_WAVES_GAIN = 0.2
WGMMA_FIXED_US = 3.0
# Split K's cost: the second launch, and the fp32 partials written by the slices and read back by the reduction at
# WGMMA_SPLIT_BYTES_PER_US (mostly from L2). Fitted on session 29's re-tune (the 64 W8A16 cells, every config, split K
# included: tests/test_cuda_wgmma_gemm.py): the default config within 1 % of the autotuned best on average, 10 % at
# worst (mxfp8 8192x8192 M = 256: two slices of 256 x 128 tiles measured 60.4 us against the model's pick's 66.2).
WGMMA_SPLIT_US = 3.0
WGMMA_SPLIT_BYTES_PER_US = 3.0e6
# The partials are a transient allocation of slices x M x N fp32 per call: split configs that would need more are left
# out of the space (16 MB at M = 256 for the shipped picks; 4 slices of M = 512 x N = 16384 would take 128 MB).
WGMMA_SPLIT_MAX_BYTES = 32 << 20


# The nearest-shape lending rule's threshold (CudaW8A16GemmWgmma.lending_refused). Replayed on session 28's untabled
# W8A16 cells: 15 of 16 for any value in 0.75-0.9, 14 at 0.6-0.7, 13 at 0.5; the baseline's 280 cells left out one
# shape at a time: 275 for every value in 0.5-0.9.
WGMMA_LEND_MIN_RATE_RATIO = 0.8


# Depth 2 (two K steps of wgmmas in flight; session 30, two re-tunes of the 64 W8A16 keys): faster where one warpgroup
# leaves the tensor pipe waiting on each step's latency (4096x4096 M = 256, 128 x 64 tiles: 0.89x and 0.90x the best
# depth-1 config), a wash or slower on the big tiles (256 x 128: 0.98-1.12x at M = 4096, fewer copies in flight); the
# 64-token tiles of M = 64 read 0.82-1.20x over the cells of the two runs (no factor: the model keeps depth 1 there).
_WGMMA_DEPTH2_GAIN_SMALL = 1.08
_WGMMA_DEPTH2_GAIN_LARGE = 0.97


def _wgmma_tile_eff(cfg: WgmmaGemmConfig) -> float:
    """_WGMMA_TILE_EFF (linear in the tile height between the measured heights of the same warpgroup count), times the
    depth-2 factor."""
    eff = _wgmma_tile_eff_depth1(cfg)
    if cfg.depth == 2:
        eff *= 1.0 if cfg.bm == 64 else _WGMMA_DEPTH2_GAIN_SMALL if cfg.wgs == 1 else _WGMMA_DEPTH2_GAIN_LARGE
    return eff


def _wgmma_tile_eff_depth1(cfg: WgmmaGemmConfig) -> float:
    eff = _WGMMA_TILE_EFF.get((cfg.bm, cfg.wgs))
    if eff is not None:
        return eff
    known = sorted(bm for bm, wgs in _WGMMA_TILE_EFF if wgs == cfg.wgs)
    lo = max((bm for bm in known if bm < cfg.bm), default=None)
    hi = min((bm for bm in known if bm > cfg.bm), default=None)
    if lo is None or hi is None:
        return 0.5
    e_lo, e_hi = _WGMMA_TILE_EFF[(lo, cfg.wgs)], _WGMMA_TILE_EFF[(hi, cfg.wgs)]
    return e_lo + (e_hi - e_lo) * (cfg.bm - lo) / (hi - lo)


def _wgmma_mx_factor(m: int) -> float:
    """mxfp8's steps are slower (the scale multiply, a scale load a step): its best time over fp8_row's in the same
    run was 1.01-1.55x at M = 64 (median ~1.2), ~1.1x at 256, ~1.07x at 1024, ~1.06x at 4096."""
    return 1.06 + 0.2 * 64 / max(m, 64)


def _wgmma_us(cfg: WgmmaGemmConfig, problem: Problem, target: Target) -> float:
    sms = max(target.sm_count, 1)
    splits = cfg.splits(problem.k)
    waves = -(-cfg.grid(problem.m, problem.n) * splits // sms)
    steps = -(-(-(-problem.k // _wgmma_gemm.BK)) // splits)  # the K steps of one slice
    gain = _WGMMA_FEW_WAVES_GAIN / waves if cfg.bm >= 128 and cfg.wgs >= 2 else 0.0
    eff = _wgmma_tile_eff(cfg) * (1.0 + gain)
    rate = target.spec.bf16_tflops * 1e6 / sms * eff  # FLOP per us per SM
    mx = _wgmma_mx_factor(problem.m) if problem.fmt is Format.MXFP8 else 1.0
    us = waves * steps * 2.0 * cfg.bm * cfg.bn * _wgmma_gemm.BK / rate * mx + WGMMA_FIXED_US
    if splits > 1:
        us += WGMMA_SPLIT_US + 2.0 * splits * problem.m * problem.n * 4 / WGMMA_SPLIT_BYTES_PER_US
    return us


class CudaW8A16GemmWgmma(_CudaCandidate):
    """The sm_90 W8A16 tensor-core GEMM (csrc/gemm_w8a16_wgmma.cu): TMA fills a ring of x and code tiles, each
    warpgroup decodes 64 weight rows into wgmma's register operand (two or three register sets, so one K step decodes
    while the previous steps' wgmmas run: what the Triton W8A16 GEMM cannot do), x is the shared-memory operand. Row / tensor
    scales and the bias in the epilogue, MX scales on the decode; bf16 in, bf16 out."""

    id = "cuda.w8a16_gemm_wgmma"
    serves = frozenset({(Format.FP8_ROW, Act.BF16), (Format.FP8_TENSOR, Act.BF16), (Format.MXFP8, Act.BF16)})
    config_type = WgmmaGemmConfig
    # Its default config is the time model's pick for the shape (within 0.4 % of the autotuned config in all 64 cells
    # of session 28's re-tune): a shape in no table gets that, not the nearest shape's config. No grid_fill either
    # (the nearest step's fill check is about borrowed configs): the model counts the waves itself.
    borrows_configs = False
    source_files = ("kernels_cuda/csrc/portability.cuh", "kernels_cuda/csrc/fp8_common.cuh",
                    "kernels_cuda/csrc/wgmma_sm90.cuh", "kernels_cuda/csrc/gemm_w8a16_wgmma.cu",
                    "kernels_cuda/csrc/wgmma_splitk_reduce.cu",
                    "kernels_cuda/_wgmma_gemm.py", "kernels_cuda/_launch.py", "kernels_cuda/_driver.py",
                    "kernels_cuda/compiler.py", "kernels_cuda/_kinds.py", "kernels_cuda/configs.py",
                    "dispatch/mx_fold.py")

    def supports(self, problem: Problem, target: Target) -> Support:
        t = target_support(target)
        if not t:
            return t
        if not target.has_wgmma:
            return Support.no(f"{target.arch} has no wgmma (the kernel is sm_90a code)")
        if problem.m <= MAX_M:
            return Support.no(f"M = {problem.m} <= {MAX_M}: decode sizes are the GEMVs'")
        if problem.x_dtype != torch.bfloat16 or problem.out_dtype != torch.bfloat16:
            return Support.no(f"x {problem.x_dtype} -> {problem.out_dtype}: the wgmma GEMM takes bf16 and writes bf16")
        why = _wgmma_gemm.k_unsupported_reason(problem.fmt, problem.k)
        return Support.no(why) if why else Support.yes()

    def configs(self, problem: Problem, target: Target) -> Sequence[KernelConfig]:
        """The space for M, fastest first by the time model (an autotune cut to N configs keeps the likely ones);
        split configs only where their fp32 partials stay within WGMMA_SPLIT_MAX_BYTES of transient memory (slices
        summed in a cluster have none, but run only where K makes all their slices)."""
        if problem.m <= 64:
            space = _WGMMA_CONFIGS_M64
        else:
            space = _WGMMA_CONFIGS_M256 if problem.m <= 512 else _WGMMA_CONFIGS_LARGE + _fitted_configs(problem.m)
        fits = [c for c in space if c.runs_at(problem.k) and (c.splits(problem.k) == 1 or c.slice_cluster
                or c.splits(problem.k) * problem.m * problem.n * 4 <= WGMMA_SPLIT_MAX_BYTES)]
        return sorted(fits, key=lambda c: _wgmma_us(c, problem, target))

    def default_config(self, problem: Problem, target: Target) -> KernelConfig:
        """The config of the space the time model (_WGMMA_TILE_EFF) says is fastest."""
        return self.configs(problem, target)[0]

    def estimate_us(self, problem: Problem, target: Target) -> float:
        """The heuristic's estimate (dispatch.heuristic.estimate_us asks the candidate): the model's time of the
        default config."""
        return _wgmma_us(self.default_config(problem, target), problem, target)

    def lending_refused(self, tuned_at: Problem, problem: Problem, target: Target) -> str | None:
        """Not lent where the time model says the kernel runs at much less of its rate than at the tuned shape: its win
        there came with that rate. Session 28's untabled run: 2112x7168 at M = 4096 borrowed it from 4096x4096 and ran
        1.22x the dequantize route (N = 2112 makes 2.1 waves of 256 x 128 tiles, 2.7 of 128 x 192); 5120x25600 at
        M = 256 borrowed it from 4096x14336 at the same modelled rate and ran within 1 % of the autotuned best."""
        here = problem.flops / self.estimate_us(problem, target)
        was = tuned_at.flops / self.estimate_us(tuned_at, target)
        if here < WGMMA_LEND_MIN_RATE_RATIO * was:
            return (f"the wgmma GEMM's time model gives this shape {here / 1e6:.0f} TFLOP/s against {was / 1e6:.0f} at the "
                    f"tuned shape (waves, tile efficiency): below {WGMMA_LEND_MIN_RATE_RATIO:.0%}")
        return None

    def prepare(self, qw: QWeight) -> Any:
        # MX: whether the weight's scale codes all fold (the kernel's FP8D_MX_FOLD decode), read on the device without a
        # host sync; until the answer lands the launcher runs the unfolded decode (the same bits).
        mx_fold.start_read(qw)
        return None

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: KernelConfig) -> torch.Tensor:
        qw.require(qw.format, Act.BF16)
        return _wgmma_gemm.w8a16_wgmma_gemm(x2d, qw, bias, out_dtype, config)


def candidates() -> list[Candidate]:
    return [CudaW8A16Gemv(), CudaW8A8Gemv(), CudaW8A8GemvFused(), CudaW8A8GemvInline(), CudaW8A16GemvTiles(),
            CudaW8A8GemvTiles(), CudaDequantCublas(), CudaW8A16GemmWgmma()]
