"""Typed tuning configs of the Triton decode (GEMV / split-K) kernels, with defaults and small autotune spaces per
target (chosen from feature predicates, never arch strings). The activation quantizer's launch shape lives in
kernels_triton/act_quant_config.py.

Why these shapes (decode is a weight stream: y[M, N] = x[M, K] W[N, K]^T with M <= 64):
  - Each program reads a [block_n, block_k] tile of the row-major weight per iteration; block_k >= 128
    bytes of fp8 per row and a blocked layout of 16 contiguous bytes per thread gives 128-bit loads.
  - Enough programs to fill every SM several times over (memory-level parallelism comes from many
    resident programs, not from deep pipelines): split-K multiplies the grid when N / block_n is small.
    split_k = 0 means "choose at launch" from (M, N, K) and the device's SM count (no host sync).
  - block_m <= 8: CUDA-core FMA path (exact fp32 products, no padding of M to 16). block_m >= 16:
    tensor-core path (tl.dot with the weight as the wide operand; M padded to block_m).
"""

from __future__ import annotations

import dataclasses
import math

from dispatch.problem import KernelConfig, Problem
from dispatch.target import Target

from .act_quant_config import _pow2

# Largest M the decode kernels serve; above it the prefill GEMMs (kernels_triton/_gemm*.py) take over.
GEMV_MAX_M = 64
FMA_MAX_BLOCK_M = 8  # block_m above this uses tl.dot


@dataclasses.dataclass(frozen=True)
class GemvConfig(KernelConfig):
    """Tile shape and schedule of one decode launch (M, N, K are never part of it)."""

    block_m: int = 1  # activation rows per program (<= 8: FMA path; 16..64: tensor-core path)
    block_n: int = 32  # weight rows (output features) per program
    block_k: int = 256  # reduction depth per loop iteration (bytes of fp8 per weight row)
    split_k: int = 0  # programs along K (deterministic two-pass reduction when > 1); 0 = auto at launch
    num_warps: int = 4
    num_stages: int = 1  # >1: software-pipelined K loop (tl.range num_stages)
    # W8A8 only: quantize x inside the GEMV (one launch). Each program recomputes the scales of the x
    # rows it reads: free for 1x128 groups (local to the K tile), a full-row prologue for per-token /
    # per-tensor (cheap at tiny M, wasteful at M = 64).
    fuse_act_quant: bool = True

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            if not _pow2(getattr(self, name)):
                raise ValueError(f"GemvConfig.{name} must be a power of two, got {getattr(self, name)}")
        if not 1 <= self.block_m <= GEMV_MAX_M:
            raise ValueError(f"GemvConfig.block_m must be in 1..{GEMV_MAX_M}, got {self.block_m}")
        # The FMA path (block_m <= FMA_MAX_BLOCK_M) takes 4- and 8-row tiles: at one program per row tile they make
        # 4x / 2x the programs of 16 rows without splitting K. The tensor-core path needs 16 rows (the MMA's).
        low_n = 4 if self.block_m <= FMA_MAX_BLOCK_M else 16
        if not (low_n <= self.block_n <= 256 and 32 <= self.block_k <= 1024):
            raise ValueError(f"GemvConfig: block_n in {low_n}..256 and block_k in 32..1024, got "
                             f"{self.block_n}x{self.block_k}")
        if self.split_k < 0 or self.num_stages < 1 or self.num_warps > 16:
            raise ValueError(f"GemvConfig: split_k >= 0, num_stages >= 1, num_warps <= 16 (got {self})")

    @property
    def use_dot(self) -> bool:
        return self.block_m > FMA_MAX_BLOCK_M

    def legal_for(self, group_k: int, fused_groups: bool = False) -> str:
        """'' if this config can serve scales grouped `group_k` along K (0: no K groups), else why not.
        `fused_groups`: W8A8 quantizing 1x128 x groups in-kernel (each tile must hold whole groups)."""
        if fused_groups and self.fuse_act_quant:
            if self.use_dot and self.block_k != 128:
                return f"fused 1x128 activation groups on the tensor-core path need block_k == 128 (got {self.block_k})"
            if not self.use_dot and self.block_k % 128:
                return f"fused 1x128 activation groups need block_k a multiple of 128 (got {self.block_k})"
        if self.use_dot and group_k == 128 and 128 % self.block_k:
            return f"block128 scales multiply whole K tiles on the tensor-core path: block_k must divide 128 (got {self.block_k})"
        if group_k and self.block_k < group_k and group_k % self.block_k:
            return f"K tiles must not straddle {group_k}-wide scale groups (block_k {self.block_k})"
        if group_k == 32 and self.block_k < 32:
            return f"mxfp8 tiles cover whole 32-groups: block_k >= 32 (got {self.block_k})"
        return ""


def auto_split_k(m: int, n: int, k: int, cfg: GemvConfig, sm_count: int) -> int:
    """Split-K that gives ~4 resident programs per SM without leaving a split with no K tile."""
    if cfg.split_k:
        return max(1, min(cfg.split_k, math.ceil(k / cfg.block_k)))
    tiles_mn = math.ceil(n / cfg.block_n) * math.ceil(m / cfg.block_m)
    k_tiles = math.ceil(k / cfg.block_k)
    want = 4 * sm_count
    split = 1
    # Each extra split writes and re-reads an fp32 [M, N] partial: keep that under 1/8 of the weight stream.
    while (split * 2 <= k_tiles and tiles_mn * split < want
           and 2 * (split * 2) * m * n * 4 <= n * k // 8):
        split *= 2
    return split


def _first(default: GemvConfig, space: list[GemvConfig]) -> list[GemvConfig]:
    """`space` with `default` moved (or added) to the front."""
    return [default] + [c for c in space if c != default]


def gemv_configs(problem: Problem, target: Target, group_k: int) -> list[GemvConfig]:
    """Autotune space of the decode kernel (first entry is the default). `group_k`: scale group along K
    (128 block, 32 mx, 0 none)."""
    m = problem.m
    wide = target.is_cuda and target.has_wgmma  # H100/H200-class bandwidth: bigger tiles in flight
    space: list[GemvConfig]
    # The tensor-core tile (16 token rows, rows past M masked) also serves M < 16: the weight stream is the same, and
    # on the H200 it was the fastest offered config in all 40 cells at M = 4, and its M = 16 time was below the best
    # M = 1 time in 18 of 40 (tools/perf/measure_triton_gemv.sh, session 11).
    tc = [GemvConfig(16, 64, 128, 0, 4), GemvConfig(16, 128, 128, 0, 4)]
    if m <= 2:
        bm = 1 if m == 1 else 2
        space = [GemvConfig(bm, 32, 256, 0, 4), GemvConfig(bm, 64, 256, 0, 4), GemvConfig(bm, 32, 512, 0, 4),
                 GemvConfig(bm, 16, 512, 0, 4), GemvConfig(bm, 64, 128, 0, 4), GemvConfig(bm, 128, 128, 0, 8), tc[0]]
    elif m <= 8:
        bm = 4 if m <= 4 else 8
        space = [GemvConfig(bm, 32, 256, 0, 4), GemvConfig(bm, 64, 128, 0, 4), tc[0], GemvConfig(bm, 16, 256, 0, 4),
                 tc[1]]
        if wide:  # measured there (above); the FMA tile stays the default elsewhere
            # in its 3-stage form since session 34 (M = 4, 8 shapes x 5 format/acts, the current GEMV: median 1.00x of
            # each cell's best for fp8_row/bf16 and mxfp8, against 1.16x / 1.02x for the 1-stage tile; the W8A8 formats
            # below were already there)
            space = _first(dataclasses.replace(tc[0], num_stages=3), space)
        elif target.is_rocm or bm == 8:
            # gfx1201 (AOT, ScratchSize): the 32-row FMA tile spills at 4 and 8 token rows (28-808 bytes a lane, by
            # format); sm_80 / sm_89 (AOT, ptxas -v: stack-frame spills, which cuobjdump's LOCAL count misses) at 8
            # token rows, 84-1696 bytes a thread. The 16-row tile never does (tests/test_triton_gemv.py checks every
            # default).
            space = _first(GemvConfig(bm, 16, 256, 0, 4), space)
    else:
        bm = 16 if m <= 16 else (32 if m <= 32 else 64)
        space = [GemvConfig(bm, 64, 128, 0, 4), GemvConfig(bm, 128, 128, 0, 4), GemvConfig(bm, 32, 128, 0, 4),
                 GemvConfig(bm, 64, 128, 0, 4, 3), GemvConfig(bm, 128, 64, 0, 4)]
        # Fewer 64-row programs than SMs even after the automatic split (small N and K, where the split's fp32
        # partials would cost more than the weight stream): 32-row tiles double the programs. H200, 3000x1000
        # at M = 16: 32 rows ran 1.15-2.0x faster than 64 for all four formats (bench --what untabled, session 4).
        # Measured at M = 16 only, so M = 32..64 keep 64 rows.
        sms = target.sm_count
        if sms and m <= 16 and math.ceil(problem.n / 64) * auto_split_k(m, problem.n, problem.k, space[0], sms) < sms:
            space.insert(0, space.pop(2))
        elif wide and m <= 16:
            # H200, sessions 32 and 34 (tools/perf/probe_triton_gemv.py, 30 cells at M = 16 over the five format/acts):
            # the 3-stage form of the 64-row tile was the fastest config in 26 and within 1.06x in the rest (median
            # 1.00x; fp8_block 1.055x behind its 128-row twin), where the 1-stage default of before took a median
            # 1.11-1.33x the cell's best (docs/perf/h200_s34_2026-12-01.md).
            space = _first(GemvConfig(bm, 64, 128, 0, 4, 3), space)
    if wide:
        space = space + [dataclasses.replace(c, num_stages=3) for c in space[:2] + tc[:1] if c.num_stages == 1]
        if m <= 2 and problem.act.value != "fp8" and (m == 2 or group_k == 32):  # W8A8: its own default below
            # H200, session 11 (quick pass, every config on 16 W8A16 cells at M = 1): 16 rows x 512 deep took a median
            # 1.03x (at most 1.24x) the cell's best, against 1.26x (1.48x) for the 32 x 256 tile that led before
            # (tools/perf/config_ranks.py on docs/perf/h200_triton_gemv_journal_m1_4_2026-11-30_s11.jsonl.gz).
            # Session 15, after the 1-row tiles stopped converting layouts through shared memory: at M = 1 the
            # 32 x 256 tile is back in front for the layouts without 32-groups (fp8_row: median 1.00x, worst 1.02x of
            # the cell's best, against 1.04x / 1.19x for 16 x 512), while mxfp8 keeps 16 x 512 (1.00x / 1.02x, against
            # 1.02x / 1.14x); docs/perf/h200_triton_gemv_journal_m1_2026-11-30_s15.jsonl.gz. M = 2 was not re-measured.
            space = _first(GemvConfig(bm, 16, 512, 0, 4), space)
        if m == 1 and problem.act.value != "fp8":
            # Session 32 (tools/perf/probe_triton_gemv.py, 52 configs on 6 shapes at M = 1): 8- and 4-row tiles,
            # 4x / 8x the programs of 32 rows with no K split, 8 warps. mxfp8: 8 x 512 within 1.04x of each cell's best
            # on average (1.12x at worst), 0.99-1.30x faster than the 16 x 512 default before (at 8 rows and 8 warps
            # its scale vector's conversion costs no barrier); fp8_row: 8 x 512 1.03x (32 x 256, kept first, 1.04x).
            small = [GemvConfig(1, 8, 512, 0, 8), GemvConfig(1, 4, 1024, 0, 8)]
            space = (_first(small[0], space) if group_k == 32 else space) + small
    if problem.act.value == "fp8":
        # Row-wise fusion (per-token / per-tensor) rereads whole x rows in every program: fine for M <= 4.
        if group_k != 128 and m > 4:
            space = [dataclasses.replace(c, fuse_act_quant=False) for c in space]
        else:
            # Fused quantization on the tensor-core tile quantizes the 16-row x tile in every program and K step
            # (IEEE division per value): at M = 4 on the H200 it took 1.1-4.3x (median 2.3x) the time of the same
            # tile at M = 16 with the quantizer as its own launch (session 11). Every tensor-core config also comes
            # unfused, and a tensor-core default is the unfused one.
            dots = [c for c in space if c.use_dot]
            unfused = [dataclasses.replace(c, fuse_act_quant=False) for c in space[:1] + dots]
            space = unfused[:1] + space + unfused[1:] if space[0].use_dot else space + unfused
        if wide and m <= 4:
            # H200, session 11: the unfused tensor-core tile won all 48 W8A8 cells at M = 1 and 4 (8 shapes x 3
            # formats), 27 in this 3-stage form (quick pass: median 1.00x of each cell's best, at most 1.16x); at
            # M = 1 1.02-1.32x faster than the FMA configs of before
            space = _first(dataclasses.replace(tc[0], num_stages=3, fuse_act_quant=False), space)
        if wide and m == 1:
            # Session 15: with the 1-row FMA tile free of layout conversions, its unfused form won 20 of 24 W8A8
            # cells at M = 1 (median 1.00x, worst 1.03x of the cell's best; the 3-stage tensor-core tile above
            # 1.11x / 1.24x); docs/perf/h200_triton_gemv_journal_m1_2026-11-30_s15.jsonl.gz
            space = _first(GemvConfig(1, 32, 256, 0, 4, fuse_act_quant=False), space)
            # Session 32 (tools/perf/probe_triton_gemv.py, unfused, 18 cells at M = 1): the 4- and 8-row tiles were
            # the fastest in 11 (fp8_row/fp8 4096x14336 58 -> 73 % of the copy rate against session 15's best)
            space += [GemvConfig(1, 8, 512, 0, 8, fuse_act_quant=False), GemvConfig(1, 4, 1024, 0, 8, fuse_act_quant=False),
                      GemvConfig(1, 8, 1024, 0, 4, fuse_act_quant=False)]
    seen: list[GemvConfig] = []
    for c in space:
        if c not in seen and not c.legal_for(group_k, problem.act.value == "fp8" and group_k == 128):
            seen.append(c)
    return seen
