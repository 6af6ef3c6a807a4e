"""Typed tuning configs of the Triton prefill (tensor-core) GEMMs, and their defaults per target.

One frozen dataclass (`GemmConfig`) for both families; which tile shapes are legal depends on the scale
layout (`legal_for`), and the defaults come from feature predicates (`has_wgmma`, `has_fp8_mma`), never
from arch numbers.

Why these shapes (H200 / sm_90, wgmma):
  - fp8 x fp8: 128x256x128 tiles, 8 warps (two consumer warpgroups of 64 rows each), 3-4 stages: one
    stage holds 128*128 + 256*128 bytes = 48 KiB, so 4 stages fit the 227 KiB of shared memory. K = 128
    per stage is one 128-byte cache line per row, the width wgmma's 128B swizzle wants for fp8.
  - W8A16 (weight decoded to bf16 in registers): the weight is the wgmma A operand (SWAP_AB, A may come
    from registers on sm_90; B must be in shared memory), so the decoded tile never round-trips through
    shared memory. Tiles of 128 (weight rows) x 128/256 (tokens) x 64, 8 warps.
  - block128 scales multiply the partial product of each K tile, so block_k must divide 128.
  - M <= 256 (`m` given): small token tiles (64) and auto split-K come first. Large tiles at M = 64-256
    leave most SMs idle (H200, session 2: 256x128 W8A16 tiles ran 4096x4096 at M = 256 as 32 programs,
    3.5x slower than bf16 cuBLAS); these spaces trade MMA efficiency per tile for programs in flight.
"""

from __future__ import annotations

import dataclasses

from dispatch.problem import KernelConfig
from dispatch.target import Target

from ._gemm_layouts import A8Scales, WScale


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


@dataclasses.dataclass(frozen=True)
class GemmConfig(KernelConfig):
    """Tile shape and schedule of one prefill GEMM launch (M, N, K are never part of it)."""

    block_m: int = 128  # tokens per tile
    block_n: int = 128  # output features per tile
    block_k: int = 64  # reduction depth per pipeline stage
    group_m: int = 8  # tiles along M that share weight tiles in L2 (grouped program order)
    num_warps: int = 8
    num_stages: int = 3
    # W8A16 only: compute y^T = W x^T so the decoded weight is the MMA's A operand (registers on sm_90).
    swap_ab: bool = False
    # Load the x and weight-code tiles with TMA bulk copies (host tensor descriptors; sm_90). Used where
    # the tensors allow it (16-byte aligned bases and row strides: K % 16 == 0 for fp8 codes); otherwise
    # the launcher runs the pointer path with the same tile (same results).
    tma: bool = False
    # Split-K: 1 = none; n > 1 = K tiles split n ways (fp32 partials + a deterministic reduction); 0 = chosen
    # at launch from (M, N, K) and the SM count (`split_for`), so one config serves a whole M bucket.
    split_k: int = 1
    # W8A8 with TMA on sm_90: Triton's Hopper warp specialization of the K loop (a producer warpgroup for the
    # copies, num_warps = 4 split into two consumer warpgroups: 12 warps in all; kernels_triton._gemm). Without
    # TMA (unaligned rows, the interpreter) or hardware fp8 the launcher runs the same tile unspecialized.
    warp_specialize: bool = False

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            if not _pow2(getattr(self, name)):
                raise ValueError(f"GemmConfig.{name} must be a power of two, got {getattr(self, name)}")
        if not (16 <= self.block_m <= 256 and 16 <= self.block_n <= 256 and 16 <= self.block_k <= 256):
            raise ValueError(f"GemmConfig tiles must be within 16..256, got {self.block_m}x{self.block_n}x{self.block_k}")
        if self.warp_specialize and not (self.tma and self.num_warps == 4):
            raise ValueError(f"GemmConfig.warp_specialize needs tma=True and num_warps=4 (two consumer warpgroups of "
                             f"4 warps and a producer are made from it), got {self}")
        if self.group_m < 1 or self.num_stages < 1 or self.num_warps > 16 or not 0 <= self.split_k <= 16:
            raise ValueError(f"GemmConfig: group_m >= 1, num_stages >= 1, num_warps <= 16, split_k in 0..16 "
                             f"(got {self})")

    def split_for(self, m: int, n: int, k: int, sm_count: int) -> int:
        """The split count a launch uses: the fixed split_k (at most one split per K tile), or for split_k = 0
        the largest power of two that keeps the tiles within one wave of `sm_count` programs, every split
        >= 4 K tiles deep (enough for the pipeline), and the fp32 partials no larger than the fp8 weight.
        Then lowered to the splits that hold a tile: ceil(k_tiles / split) tiles per split leave the last
        ones empty when it does not divide evenly (9 tiles, 4 splits: 3 + 3 + 3 + 0), and the kernels run at
        least one tile per program (_gemm._k_tile_range). Same tiles per split, same sums."""
        k_tiles = -(-k // self.block_k)
        if self.split_k:
            split = max(1, min(self.split_k, k_tiles))
        else:
            tiles = -(-m // self.block_m) * -(-n // self.block_n)
            split = 1
            while (tiles * split * 2 <= sm_count and k_tiles >= 4 * split * 2
                   and split * 2 * m * n * 4 <= n * k):
                split *= 2
        per_split = -(-k_tiles // split)
        return -(-k_tiles // per_split)

    def legal_for_w8a16(self, wscale: WScale, fp16_x: bool) -> str:
        """'' if this config can run a W8A16 GEMM with `wscale`, else why not."""
        if self.warp_specialize:
            return "warp_specialize is a W8A8 option (the W8A16 kernel does not specialize its K loop)"
        if wscale is WScale.BLOCK128 and 128 % self.block_k:
            return f"block128 scales multiply whole K tiles: block_k must divide 128 (got {self.block_k})"
        per_tile_scale = wscale is WScale.BLOCK128 or (wscale is WScale.MX32 and fp16_x)
        if self.swap_ab and per_tile_scale:
            # H200 (triton 3.6): BLOCK128 with swap_ab (256x128x64, pointer loads) returned a result with
            # relative error 0.99 at M = 257 while the same tile without a per-tile scale (ROW) was right.
            # The scaled fresh partial product of a register-A wgmma is the suspect; until a GPU test
            # pins it down, every config of that shape is rejected rather than risked.
            return ("swap_ab with a per-K-tile scaled partial product (block128, or mxfp8 with fp16 x) "
                    "gave wrong results on sm_90 (triton 3.6); use swap_ab=False")
        if wscale is WScale.MX32:
            if fp16_x and self.block_k != 32:
                return ("mxfp8 with fp16 activations applies 2^e to 32-deep partial products "
                        f"(w * 2^e overflows fp16): block_k must be 32 (got {self.block_k})")
            if self.block_k < 32:
                return f"mxfp8 tiles cover whole 32-groups along K: block_k >= 32 (got {self.block_k})"
        return ""

    def legal_for_w8a8(self, scales: A8Scales) -> str:
        if self.swap_ab:
            return "swap_ab is a W8A16 option (both W8A8 operands already come from shared memory)"
        if scales is A8Scales.GROUP_BLOCK and 128 % self.block_k:
            return f"1x128 x 128x128 scales multiply whole K tiles: block_k must divide 128 (got {self.block_k})"
        if self.block_k < 32:
            return f"fp8 MMA instructions take K >= 32 per step: block_k >= 32 (got {self.block_k})"
        return ""


# --- Defaults and autotune spaces per target ------------------------------------------------------------

def _tiles(*tiles: tuple[int, int, int, int, int], swap_ab: bool = False) -> list[GemmConfig]:
    """Configs from (block_m, block_n, block_k, num_warps, num_stages) rows, in order; group_m is 8 in
    every space."""
    return [GemmConfig(bm, bn, bk, 8, warps, stages, swap_ab=swap_ab) for bm, bn, bk, warps, stages in tiles]


# bf16/fp16 mma.sync without fp8 MMA (sm_80 W8A8 on exactly decoded codes; W8A16 on every mma.sync target).
_MMA_SYNC_BF16 = ((128, 128, 64, 8, 3), (128, 128, 32, 4, 4), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3),
                  (64, 64, 64, 4, 3))


def _legal_unique(space: list[GemmConfig], why_not) -> list[GemmConfig]:
    out: list[GemmConfig] = []
    for c in space:
        if c not in out and not why_not(c):
            out.append(c)
    return out


_SMALL_M = 256  # M buckets up to this get the small-tile, split-K spaces first (see module docstring)


def _small_m_first(space: list[GemmConfig], small: list[GemmConfig], m: int | None) -> list[GemmConfig]:
    return small + space if m is not None and m <= _SMALL_M else space + small


def _splitk(*tiles: tuple[int, int, int, int, int], swap_ab: bool = False, tma: bool = False) -> list[GemmConfig]:
    """Like _tiles, with split_k = 0 (chosen at launch)."""
    return [dataclasses.replace(c, split_k=0, tma=tma) for c in _tiles(*tiles, swap_ab=swap_ab)]


# W8A16 at M <= 64 (wgmma): 3-stage 64-token tiles with fixed split-K counts. The auto rule (`split_for`) keeps
# tiles x splits within one wave of one CTA per SM, but a 3-stage 64-token tile takes 72-96 KiB of shared memory,
# so two or three CTAs share an SM. Session 12's probe at M = 64 (H200, `python -m tools.perf.probe_w8a16_gemm m64`,
# docs/perf/h200_m64_split_2026-11-30_s12.md): fp8_row 6144x4096 14.5 us with 64x64x128 / 3 stages / split 4
# against 17.0 us for the table's auto-split config; mxfp8 28672x4096 61.0 us (64x128x128, split 2) against 69.2.
_FIXED_SPLIT_MAX_M = 64


def _fixed_split_w8a16(tma: bool) -> list[GemmConfig]:
    return [dataclasses.replace(c, split_k=s, tma=tma)
            for c, s in ((GemmConfig(64, 64, 128, 8, 4, 3, swap_ab=True), 4),
                         (GemmConfig(64, 128, 128, 8, 4, 3, swap_ab=True), 4),
                         (GemmConfig(64, 128, 128, 8, 4, 3, swap_ab=True), 2))]


def w8a8_configs(target: Target, scales: A8Scales, k: int | None = None, m: int | None = None) -> list[GemmConfig]:
    """Autotune space for the W8A8 GEMM on `target`; the first entry is the default. On TMA targets
    (sm_90, `has_wgmma`) with 16-byte aligned rows (k % 16 == 0, or k unknown) the TMA variants of the
    first tiles come first. `m` (the M bucket, if known): small-M spaces first."""
    aligned = target.has_wgmma and (k is None or k % 16 == 0)
    small: list[GemmConfig] = []
    if target.has_wgmma:
        # one warpgroup per 64-token tile; 64- or 128-wide weight tiles; K split to fill the SMs
        small = _splitk((64, 128, 128, 4, 4), (64, 64, 128, 4, 5), (128, 128, 128, 8, 4), tma=aligned)
        small += _splitk((64, 128, 128, 4, 4), (64, 64, 128, 4, 5))
    if target.has_wgmma and scales is A8Scales.GROUP_BLOCK:
        # Each K tile's product is waited for and scaled in registers next to the fp32 accumulator, so a
        # thread holds two accumulators: 64x128 per warpgroup (64 + 64 registers) leaves headroom, while
        # 128x256 tiles hit the 255-register limit (AOT: reg=255). Tiles of <= 128 columns scale with one
        # weight scalar per K tile (kernels_triton._gemm), and lead: on the H200 at M = 4096 (session 16)
        # 128 x 128 / 8 warps and 64 x 128 / 4 warps ran 6144 x 4096 in 249-251 us, 128 x 64 in 338 and the
        # 256-wide tiles in 317-578. 64 x 128 with 3 stages (72 KiB, 153 registers): three CTAs share an SM, so
        # one's promotion overlaps the others' wgmmas.
        space = _tiles((128, 128, 128, 8, 4), (64, 128, 128, 4, 4), (64, 128, 128, 4, 3), (128, 128, 128, 4, 4),
                       (128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (128, 64, 128, 4, 4))
    elif target.has_wgmma:
        space = _tiles((128, 256, 128, 8, 3), (128, 256, 128, 8, 4), (256, 128, 128, 8, 3), (128, 128, 128, 4, 4),
                       (128, 128, 128, 8, 4), (64, 256, 128, 4, 4), (128, 64, 128, 4, 4), (64, 128, 128, 4, 4))
    elif target.is_rocm:
        # gfx12 WMMA (wave32): 128x128x64 with 8 waves is the largest tile without VGPR spills (AOT-checked:
        # ScratchSize 0); the AMD stream pipeliner wants 2 stages.
        space = _tiles((128, 128, 64, 8, 2), (64, 128, 64, 8, 2), (128, 64, 64, 8, 2), (128, 128, 32, 8, 2),
                       (64, 64, 64, 4, 2))
    elif target.has_fp8_mma:  # mma.sync fp8 (sm_89): ~100 KiB of shared memory, no wgmma
        space = _tiles((128, 128, 128, 8, 3), (128, 128, 64, 4, 4), (64, 128, 128, 4, 3), (128, 64, 128, 4, 3),
                       (64, 64, 128, 4, 3))
    else:  # sm_80: uint8 codes decoded to bf16, bf16 mma.sync
        space = _tiles(*_MMA_SYNC_BF16)
    if aligned:
        space = [dataclasses.replace(c, tma=True) for c in space[:4]] + space
    # Warp-specialized tiles (GemmConfig.warp_specialize) are in no space: on the H200 (session 16) they hung.
    # tools/perf/probe_warp_spec.py runs them case by case under a time limit.
    return _legal_unique(_small_m_first(space, small, m), lambda c: c.legal_for_w8a8(scales))


def w8a16_configs(target: Target, wscale: WScale, fp16_x: bool, k: int | None = None,
                  m: int | None = None) -> list[GemmConfig]:
    """Autotune space for the W8A16 GEMM on `target`; the first entry is the default. On TMA targets
    with 16-byte aligned rows (k % 16 == 0 or unknown) TMA twins of the first tiles are added after
    the pointer default (the pointer path is the one whose structure the AOT tests pin). `m` (the M
    bucket, if known): small-M spaces first."""
    aligned = target.has_wgmma and (k is None or k % 16 == 0)
    small: list[GemmConfig] = []
    if target.has_wgmma:
        # swap_ab: 64 weight rows per warpgroup (wgmma M) x 64/128 tokens (wgmma N); K split to fill the SMs.
        # Layouts with a per-K-tile scale cannot swap (legal_for_w8a16): their twins without swap_ab follow.
        tiles = ((64, 64, 128, 4, 5), (64, 128, 128, 4, 4), (128, 64, 128, 4, 4), (128, 128, 64, 8, 4))
        small = _splitk(*tiles[:2], swap_ab=True, tma=aligned)
        if m is not None and m <= _FIXED_SPLIT_MAX_M:
            small += _fixed_split_w8a16(aligned)
        if wscale is WScale.MX32 and not fp16_x:
            # 128-deep K tiles (the 4 exponent bytes of a row in one async copy), 8 warps: at M = 256 on the H200
            # 8192x8192 ran 83 us against 101 us for the dequantize route (session 10's probe).
            small += _splitk((128, 128, 128, 8, 3), swap_ab=True, tma=aligned)
        small += _splitk(*tiles, swap_ab=True)
        small += _splitk((64, 64, 128, 4, 5), (64, 128, 128, 4, 4), tma=aligned) + _splitk((64, 128, 64, 4, 4))
        if fp16_x and wscale is WScale.MX32:
            small = _splitk((64, 64, 32, 4, 6), (64, 128, 32, 4, 6), swap_ab=True) + _splitk((64, 128, 32, 4, 6))
    if fp16_x and wscale is WScale.MX32:
        # 2^e is applied to 32-deep partial products (see legal_for_w8a16).
        space = _tiles((64, 64, 32, 4, 2)) if target.is_rocm else []
        space += _tiles((128, 128, 32, 4, 6), (256, 128, 32, 8, 5), swap_ab=target.has_wgmma)
        space += _tiles((128, 128, 32, 4, 4), (64, 128, 32, 4, 4))
    elif target.has_wgmma and wscale is WScale.MX32:
        # block_k = 128: the [block_n, 4] e8m0 exponents of a tile are 4 contiguous bytes per row, which
        # the pipeliner can copy asynchronously; at block_k = 64 (2 bytes) they are a synchronous load.
        space = _tiles((128, 128, 128, 4, 4), (256, 128, 128, 8, 2), (128, 256, 128, 8, 3), (256, 128, 64, 8, 4),
                       (128, 128, 64, 4, 4), swap_ab=True) + _tiles((128, 256, 64, 8, 3))
    elif target.has_wgmma:
        # swap_ab: the weight is wgmma's A operand, straight from registers after the decode, and the
        # token tile is the instruction's N (m64n256k16 with block_m = 256).
        space = _tiles((256, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (256, 128, 128, 8, 2),
                       (128, 128, 128, 4, 4), swap_ab=True) + _tiles((128, 128, 64, 8, 4), (128, 256, 64, 8, 3))
    elif target.is_rocm:
        # The in-register decode costs VGPRs: 128x128x32 with 8 waves was spill-free for every layout (AOT-checked);
        # 64-deep K tiles spill on 128x128. Since session 15's K loop (every program runs >= 1 tile) the block128
        # tile spills 72 bytes a lane (ISA report); not re-chosen yet (unmeasured on gfx1201 either way).
        space = _tiles((128, 128, 32, 8, 2), (64, 128, 64, 8, 2), (128, 64, 64, 8, 2), (64, 64, 64, 4, 2),
                       (64, 128, 32, 4, 2))
    else:
        space = _tiles(*_MMA_SYNC_BF16)
    if aligned:
        space = space[:1] + [dataclasses.replace(c, tma=True) for c in space[:3]] + space[1:]
    return _legal_unique(_small_m_first(space, small, m), lambda c: c.legal_for_w8a16(wscale, fp16_x))
