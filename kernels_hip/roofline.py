"""Memory roofline of the HIP decode kernels on the Radeon AI PRO R9700 (gfx1201): bytes each launch must
move and the time that takes at the card's bandwidth. docs/hip.md's table is printed by
`python -m kernels_hip.roofline`; tools/bench numbers measured on the card are checked against it.
"""

from __future__ import annotations

import dataclasses
import math

from dispatch.formats import MX_GROUP, WEIGHT_BLOCK, Act, Format

R9700_SPEC_GBPS = 640.0  # 256-bit GDDR6 at 20 Gbps
R9700_MEASURED_GBPS = 612.0  # copy bandwidth reported by others on the card (not measured by us)
R9700_INFINITY_CACHE_MB = 64  # a benchmark must rotate > 3 x this much weight to measure DRAM, not the cache


def _scale_bytes(fmt: Format, n: int, k: int) -> int:
    return {Format.FP8_BLOCK: 4 * math.ceil(n / WEIGHT_BLOCK) * math.ceil(k / WEIGHT_BLOCK), Format.FP8_TENSOR: 4,
            Format.FP8_ROW: 4 * n, Format.MXFP8: n * math.ceil(k / MX_GROUP)}[fmt]


@dataclasses.dataclass(frozen=True)
class DecodeTraffic:
    """DRAM bytes of one linear call, per launch (x in bf16, y in bf16)."""

    fmt: Format
    act: Act
    m: int
    n: int
    k: int

    @property
    def weight_bytes(self) -> int:
        return self.n * self.k + _scale_bytes(self.fmt, self.n, self.k)

    @property
    def act_quant_bytes(self) -> int:
        """W8A8 only: x read (bf16) + codes and scales written by the fused quantization launch."""
        if self.act is Act.BF16:
            return 0
        return 2 * self.m * self.k + self.m * self.k + 4 * self.m * math.ceil(self.k / 128)

    @property
    def gemv_bytes(self) -> int:
        x = (2 if self.act is Act.BF16 else 1) * self.m * self.k  # bf16 x, or e4m3 codes
        return self.weight_bytes + x + 2 * self.m * self.n

    @property
    def total_bytes(self) -> int:
        return self.gemv_bytes + self.act_quant_bytes

    def us(self, gbps: float = R9700_MEASURED_GBPS) -> float:
        return self.total_bytes / (gbps * 1e3)


DECODE_SHAPES = ((28672, 4096), (4096, 14336), (128256, 4096), (8192, 8192), (4096, 4096))
CASES = ((Format.FP8_ROW, Act.BF16), (Format.MXFP8, Act.BF16), (Format.FP8_BLOCK, Act.BF16),
         (Format.FP8_BLOCK, Act.FP8), (Format.FP8_TENSOR, Act.FP8), (Format.FP8_ROW, Act.FP8))


def table() -> str:
    lines = ["| N x K | format / act | M | weight MB | total MB moved | us @ 612 GB/s | us @ 640 GB/s |",
             "|---|---|---|---|---|---|---|"]
    for n, k in DECODE_SHAPES:
        for fmt, act in CASES:
            for m in (1, 16):
                t = DecodeTraffic(fmt, act, m, n, k)
                lines.append(f"| {n} x {k} | {fmt}/{act} | {m} | {t.weight_bytes / 1e6:.2f} | {t.total_bytes / 1e6:.2f} "
                             f"| {t.us():.1f} | {t.us(R9700_SPEC_GBPS):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
