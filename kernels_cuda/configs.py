"""Typed launch configurations of the CUDA kernels and the small spaces autotune searches.

GEMV geometry (see csrc/skinny_common.cuh): a CTA owns 16 * mtiles rows of W and splits K over `warps`
warps; each warp keeps `unroll` 128-wide K steps of weight loads in flight (a register ring, refilled as it
is consumed). The token tile (8, 16 or 32 tokens: one, two or four m16n8 MMA columns) follows from M and is
not a tuning knob.
"""

from __future__ import annotations

import dataclasses
import math

from dispatch.formats import Act, Format
from dispatch.problem import KernelConfig, Problem
from dispatch.target import Target

MAX_M = 32  # the GEMV kernels keep every token in registers: 4 MMA column tiles of 8
K_STEP = 128  # K per step of a warp (csrc/fp8_common.cuh FP8D_KSTEP)
MAX_UNROLL = 4
MAX_SMEM_RING = 8
# The shared-memory ring's depth in the autotune space (gemv_configs). Session 25 on the H200
# (tools/perf/probe_smem_ring.py, 120 decode cells, rings of 3 and 6 at 4 CTA shapes each, bit-identical to the
# register ring at the same warps): 3 beat 6 in nearly every cell (deeper is slower); the best ring config was
# 0.80-0.94x the shipped config's time in W8A8 cells (fp8_block/fp8 6656x2560 M = 1 0.868, M = 16 8192x2560 0.803,
# fp8_tensor/fp8 28672x4096 M = 1 0.878) and mostly slower in W8A16 ones (M = 16 1.03-1.24x): a tuning choice, not a
# default. docs/perf/h200_s25_2026-12-01.md.
SMEM_RING_STEPS = 3
LONG_K = 16384  # default_gemv_config: K from which 8 warps split K regardless of N

# (token tiles, row tiles) -> the deepest weight ring (GemvConfig.unroll) that compiles without spills for
# every scale layout of both kernel families under __launch_bounds__(256, 2), i.e. 128 registers a thread
# (ptxas -v via NVRTC 13.0 on sm_80, sm_89 and sm_90; tests/test_cuda_compile.py compiles each bound). Missing
# pairs do not fit at any depth.
_DEEPEST_RING = {(1, 1): 4, (1, 2): 1, (2, 1): 3, (2, 2): 1, (4, 1): 1}


# (activation, format) pairs whose GEMV with one token tile, one row tile and a ring of 1 fits 80 registers a thread
# (ptxas via NVRTC 13.0: 70-76 on sm_90, <= 78 on sm_80 / sm_89; tests/test_cuda_compile.py checks both ways), i.e.
# three 8-warp CTAs per SM instead of the two that deeper rings leave room for. mxfp8 (92) and W8A8 fp8_block
# (84 on sm_90) do not fit.
THREE_CTAS_AT_RING_1 = frozenset({(Act.BF16, Format.FP8_TENSOR), (Act.BF16, Format.FP8_ROW),
                                  (Act.BF16, Format.FP8_BLOCK), (Act.FP8, Format.FP8_TENSOR), (Act.FP8, Format.FP8_ROW)})


def token_tiles(m: int) -> int:
    """MMA column tiles of 8 tokens for M tokens (1, 2 or 4)."""
    if not 1 <= m <= MAX_M:
        raise ValueError(f"GEMV token count M = {m} is outside 1..{MAX_M}")
    return 1 if m <= 8 else (2 if m <= 16 else 4)


def deepest_ring(m: int, mtiles: int) -> int:
    """The largest `unroll` that fits the register budget at M tokens and `mtiles` row tiles (0: none)."""
    return _DEEPEST_RING.get((token_tiles(m), mtiles), 0)


@dataclasses.dataclass(frozen=True)
class GemvConfig(KernelConfig):
    """The field defaults fit every M (a launch without a config uses them); default_gemv_config() is the
    per-problem choice."""

    warps: int = 8  # K-splitting warps per CTA (threads = 32 * warps)
    mtiles: int = 1  # 16-row tiles of W per CTA
    unroll: int = 1  # 128-wide K steps of weight loads each warp keeps in flight (-D FP8D_CFG_U)
    # > 0: the weight ring lives in shared memory instead, this many K steps deep, filled by cp.async (CUDA sm_80+,
    # -D FP8D_SMEM_RING; unroll is then 1). See SMEM_RING_STEPS.
    smem_ring: int = 0

    def __post_init__(self) -> None:
        if self.warps not in (2, 4, 8):  # the kernels' __launch_bounds__(256)
            raise ValueError(f"GemvConfig.warps must be 2, 4 or 8, got {self.warps}")
        if self.mtiles not in (1, 2):
            raise ValueError(f"GemvConfig.mtiles must be 1 or 2, got {self.mtiles}")
        if not 1 <= self.unroll <= MAX_UNROLL:
            raise ValueError(f"GemvConfig.unroll must be 1..{MAX_UNROLL}, got {self.unroll}")
        if not 0 <= self.smem_ring <= MAX_SMEM_RING or (self.smem_ring and self.unroll != 1):
            raise ValueError(f"GemvConfig.smem_ring must be 0 (the ring in registers) or 1..{MAX_SMEM_RING} with "
                             f"unroll = 1, got smem_ring={self.smem_ring}, unroll={self.unroll}")

    @property
    def rows_per_cta(self) -> int:
        return 16 * self.mtiles

    def fits(self, m: int) -> bool:
        """Register budget: the weight ring, the token tiles' operands and accumulators in 128 registers. A ring in
        shared memory holds one step in registers; it was compiled for one and two token tiles only (M <= 16)."""
        if self.smem_ring:
            return token_tiles(m) <= 2 and deepest_ring(m, self.mtiles) > 0
        return self.unroll <= deepest_ring(m, self.mtiles)

    def smem_bytes(self, m: int) -> int:
        """Dynamic shared memory (csrc/skinny_common.cuh Fp8dSmemLayout): the per-warp partial sums, then
        the tile's row scales and biases and 32 token scales, all fp32; then (smem_ring) the weight ring, 16-byte
        aligned: steps x 4 x mtiles 16-byte chunks per thread."""
        partials = self.warps * self.mtiles * token_tiles(m) * 4 * 32
        base = 4 * (partials + 2 * self.rows_per_cta + 32)
        if not self.smem_ring:
            return base
        return (base + 15) // 16 * 16 + self.smem_ring * 4 * self.mtiles * 16 * 32 * self.warps


def _steps_per_warp(k: int, warps: int) -> int:
    return max(1, math.ceil(math.ceil(k / K_STEP) / warps))


def default_gemv_config(problem: Problem, target: Target) -> GemvConfig:
    """The rule from the H200 autotune of the previous kernel (docs/perf/h200_session2_2026-11-29.md, run of
    f50e894) and the residency the register budget gives (128 registers a thread: two 8-warp or four 4-warp CTAs per SM):
    - warps: 8 while all 16-row tiles fit in one wave of 8-warp CTAs (N <= 2 x 16 x SMs: 4096 at 132 SMs,
      where the 8-way K split puts a warp's 4 steps of K = 4096 in flight at once and 8 warps won), else 4
      (6656 or 8192 rows fit one wave of 4-warp CTAs instead of 1.6-1.9 waves of 8-warp ones; at 28672
      rows W8A8 picked 4 warps at M = 1 and 16) -- except on long K (>= LONG_K): there a 4-warp CTA walks
      K / 512 steps per warp in series, and 8 warps won despite a second partial wave (5120x25600 on the
      H200: W8A8 M = 1 46 us against 61 us with 4 warps, session 4; fp8_row/bf16 M = 1 39.0 against 49.5 us
      and M = 16 1.25x, session 5's untabled run);
    - mtiles = 2 only for bf16/fp16 activations at M > 8 on large N (each CTA re-reads all of x: two row tiles
      halve that traffic; the W8A16 M = 16 winner at 28672x4096), 1 otherwise;
    - unroll: the deepest ring that fits, but no deeper than the warp's share of K steps (all of them in
      flight at once when they fit: 4 of 4 at K = 4096 with 8 warps) -- except where 8-warp CTAs overflow one wave
      at two per SM but fit one at three (2 x SMs < N / 16 <= 3 x SMs) and a ring of 1 leaves room for the third
      (THREE_CTAS_AT_RING_1): there one wave beats the deeper ring (5120x25600 fp8_row/bf16 M = 1 on the H200:
      37.5 us with a ring of 1, 47.4 us with 4; mxfp8, whose ring of 1 still takes 92 registers, keeps 4)."""
    sms = max(target.sm_count, 1)
    m = min(max(problem.m, 1), MAX_M)
    tiles16 = math.ceil(problem.n / 16)
    warps = 8 if tiles16 <= 2 * sms or problem.k >= LONG_K else 4
    mtiles = 1
    if problem.act is Act.BF16 and token_tiles(m) >= 2 and tiles16 >= 8 * sms and deepest_ring(m, 2) > 0:
        mtiles = 2
    unroll = max(1, min(deepest_ring(m, mtiles), _steps_per_warp(problem.k, warps)))
    three_ctas = (warps == 8 and mtiles == 1 and token_tiles(m) == 1 and 2 * sms < tiles16 <= 3 * sms
                  and (problem.act, problem.fmt) in THREE_CTAS_AT_RING_1)
    if three_ctas:
        unroll = 1
    elif problem.act is not Act.FP8 and _one_wave_at_two_row_tiles(warps, mtiles, m, tiles16, sms):
        mtiles, unroll = 2, deepest_ring(m, 2)
    return GemvConfig(warps=warps, mtiles=mtiles, unroll=unroll)


def _one_wave_at_two_row_tiles(warps: int, mtiles: int, m: int, tiles16: int, sms: int) -> bool:
    """The W8A16 GEMV takes two row tiles where 8-warp CTAs of one row tile (8 warps on long K whatever N is) make a
    second, partial wave at two CTAs per SM but CTAs of two row tiles fit one (not where the three-CTA ring of 1
    applies). Measured on the H200 (session 24, 5120x25600, every config): fp8_row/bf16 M = 16 46.1 us against 60.1
    with one row tile (320 CTAs for 264 slots); mxfp8/bf16 M = 1 47.8 against 56.7, M = 16 56.9 against 69.2;
    fp8_row/bf16 M = 1 keeps its three-CTA ring of 1 (38.3 us; two row tiles 43.6). The W8A8 GEMV was not measured."""
    return warps == 8 and mtiles == 1 and 2 * sms < tiles16 <= 4 * sms and deepest_ring(m, 2) > 0


def fits_on_decode_tiles(cfg: GemvConfig, m: int, w8a8: bool) -> bool:
    """Whether the GEMV on decode tiles (kernels_cuda/_tiles.py) compiles at `cfg` and M within the register budget
    without spilling. Its addressing needs more registers than the row-major module's: the W8A8 GEMV at two token tiles
    (M = 9..16) and one row tile keeps a ring of 2, not 3 (NVRTC 13.0, session 24: 16 bytes spilled at a ring of 3 on
    sm_80 and sm_90, per-tensor and 1x128 activation scales; none of the other 417 GEMV modules did; NVRTC 13.5
    spilled none; pyproject pins 13.0). Its ring is in registers only."""
    return (cfg.fits(m) and not cfg.smem_ring
            and not (w8a8 and token_tiles(m) == 2 and cfg.mtiles == 1 and cfg.unroll >= 3))


def gemv_configs(problem: Problem, target: Target) -> list[GemvConfig]:
    """Default first, then a small grid (<= 12): warps 8 / 4, row tiles 1 / 2, ring depth 1 / 2 / 4 and the
    deepest that fits, minus what does not fit and the rings deeper than the warp's share of K steps (they
    run like that share); then on CUDA (cp.async) the same four CTA shapes with the ring in shared memory
    (SMEM_RING_STEPS deep) where they fit."""
    m = min(max(problem.m, 1), MAX_M)
    first = default_gemv_config(problem, target)
    out = [first]
    seen = {(first.warps, first.mtiles, min(first.unroll, _steps_per_warp(problem.k, first.warps)))}
    for warps in (8, 4):
        for mtiles in (1, 2):
            for unroll in sorted({1, 2, 4, max(1, deepest_ring(m, mtiles))}):
                c = GemvConfig(warps, mtiles, unroll)
                key = (warps, mtiles, min(unroll, _steps_per_warp(problem.k, warps)))
                if c.fits(m) and key not in seen:
                    seen.add(key)
                    out.append(c)
    out = out[:12]
    if target.is_cuda:
        out += [c for c in (GemvConfig(w, t, 1, SMEM_RING_STEPS) for w in (8, 4) for t in (1, 2)) if c.fits(m)]
    return out


@dataclasses.dataclass(frozen=True)
class DequantConfig(KernelConfig):
    """csrc/dequant.cu: at most `threads` per CTA, each thread one 8-code chunk (K % 8 == 0; _dequant.dequant_geometry).
    Session 17 (tools/perf/probe_dequant.py on the H200): 8 codes a thread with streaming stores 78-93 % of the copy
    rate (16 codes: 69-87 %; 4 codes: 47-72 %); session 7: several 16-code chunks a thread, all loaded before any is
    decoded, 55-76 % (docs/perf/h200_dequant_ab_2026-11-29_s7.md)."""

    threads: int = 256

    def __post_init__(self) -> None:
        if self.threads not in (128, 256):
            raise ValueError(f"DequantConfig.threads must be 128 or 256 (the kernel's launch bound), got {self.threads}")
