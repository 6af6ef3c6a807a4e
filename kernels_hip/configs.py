"""Typed tuning configs of the HIP kernels (one module per compile-time configuration)."""

from __future__ import annotations

import dataclasses

from dispatch.problem import KernelConfig

from .kernels import WMMA_CONFIGS

ROWS_PER_BLOCK = 16  # output columns per block: one WMMA N tile
MAX_M = 32  # the largest M any WMMA config covers (m_tiles = 2)


@dataclasses.dataclass(frozen=True)
class WmmaConfig(KernelConfig):
    """m_tiles: 16-token tiles per block (M <= 16 * m_tiles); waves: K split inside a block.

    Only the pairs compiled in CI (kernels.WMMA_CONFIGS) are accepted, so autotune can never pick a
    configuration whose ISA nobody has checked."""

    m_tiles: int = 1
    waves: int = 4

    def __post_init__(self) -> None:
        if (self.m_tiles, self.waves) not in WMMA_CONFIGS:
            raise ValueError(f"WmmaConfig(m_tiles={self.m_tiles}, waves={self.waves}) is not one of the "
                             f"compiled configurations {WMMA_CONFIGS}")

    def fits(self, m: int) -> bool:
        return 1 <= m <= 16 * self.m_tiles

    @property
    def threads(self) -> int:
        return 32 * self.waves  # wave32: the only mode gfx12 kernels are built for

    def defines(self) -> dict[str, int]:
        return {"FP8D_WMMA_MT": self.m_tiles, "FP8D_WMMA_WAVES": self.waves}


def wmma_configs_for(m: int) -> list[WmmaConfig]:
    """Every compiled config that covers M, the smallest M tiling first (the default)."""
    cfgs = [WmmaConfig(mt, w) for mt, w in WMMA_CONFIGS]
    return sorted((c for c in cfgs if c.fits(m)), key=lambda c: (c.m_tiles, WMMA_CONFIGS.index((c.m_tiles, c.waves))))
