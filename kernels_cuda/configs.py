"""Typed launch configurations of the CUDA kernels and the small spaces autotune searches.

GEMV geometry (see csrc/skinny_common.cuh): a CTA owns 16 * mtiles rows of W and splits K over `warps`
warps; each warp keeps `unroll` 128-wide K steps of weight loads in flight. The token tile (8, 16 or 32
tokens: one, two or four m16n8 MMA columns) follows from M and is not a tuning knob.
"""

from __future__ import annotations

import dataclasses

from dispatch.problem import KernelConfig, Problem
from dispatch.target import Target

MAX_M = 32  # the GEMV kernels keep every token in registers: 4 MMA column tiles of 8


def token_tiles(m: int) -> int:
    """MMA column tiles of 8 tokens for M tokens (1, 2 or 4)."""
    if not 1 <= m <= MAX_M:
        raise ValueError(f"GEMV token count M = {m} is outside 1..{MAX_M}")
    return 1 if m <= 8 else (2 if m <= 16 else 4)


@dataclasses.dataclass(frozen=True)
class GemvConfig(KernelConfig):
    warps: int = 8  # K-splitting warps per CTA (threads = 32 * warps)
    mtiles: int = 1  # 16-row tiles of W per CTA
    unroll: int = 2  # 128-wide K steps whose weight loads are issued together

    def __post_init__(self) -> None:
        if self.warps not in (2, 4, 8):  # the kernels' __launch_bounds__(256)
            raise ValueError(f"GemvConfig.warps must be 2, 4 or 8, got {self.warps}")
        if self.mtiles not in (1, 2):
            raise ValueError(f"GemvConfig.mtiles must be 1 or 2, got {self.mtiles}")
        if self.unroll not in (1, 2):
            raise ValueError(f"GemvConfig.unroll must be 1 or 2, got {self.unroll}")

    @property
    def rows_per_cta(self) -> int:
        return 16 * self.mtiles

    def fits(self, m: int) -> bool:
        """Register budget: 4 token tiles x 2 row tiles x 2 steps spills (seen in ptxas -v on sm_90)."""
        return not (token_tiles(m) == 4 and self.mtiles == 2)

    def smem_bytes(self, m: int) -> int:
        return self.warps * self.mtiles * token_tiles(m) * 4 * 32 * 4


def default_gemv_config(problem: Problem, target: Target) -> GemvConfig:
    """Enough CTAs to fill the SMs twice with 8-warp CTAs, then as many rows per CTA as keeps that true."""
    sms = max(target.sm_count, 1)
    nt = token_tiles(min(max(problem.m, 1), MAX_M))
    mtiles = 2 if (problem.n // 32 >= 4 * sms and nt < 4) else 1
    return GemvConfig(warps=8, mtiles=mtiles, unroll=2 if nt < 4 else 1)


def gemv_configs(problem: Problem, target: Target) -> list[GemvConfig]:
    """Default first, then a small grid (<= 8) for autotune."""
    first = default_gemv_config(problem, target)
    out = [first]
    for warps in (4, 8):
        for mtiles in (1, 2):
            for unroll in (1, 2):
                c = GemvConfig(warps, mtiles, unroll)
                if c != first and c.fits(problem.m):
                    out.append(c)
    return out


@dataclasses.dataclass(frozen=True)
class DequantConfig(KernelConfig):
    threads: int = 256

    def __post_init__(self) -> None:
        if self.threads not in (128, 256):
            raise ValueError(f"DequantConfig.threads must be 128 or 256 (the kernel's launch bound), got {self.threads}")
