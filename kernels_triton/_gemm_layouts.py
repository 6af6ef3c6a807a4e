"""Scale layouts of the prefill GEMM families, as the constexpr the kernels branch on.

The kernels receive `int(layout)` (a Triton constexpr); everything above the launcher passes these enums,
so no bare integer mode leaves this file. The mapping from a weight `Format` lives here too, in one table.
"""

from __future__ import annotations

import enum

from dispatch.formats import Format


class WScale(enum.IntEnum):
    """W8A16 weight scale layout."""

    TENSOR = 0  # one fp32 scale: applied in the epilogue
    ROW = 1  # fp32 [N]: applied in the epilogue, per column of the output tile
    BLOCK128 = 2  # fp32 [ceil(N/128), ceil(K/128)]: multiplies each K tile's partial product
    MX32 = 3  # e8m0 [N, ceil(K/32)]: folded into the decoded weight (bf16) or 32-deep partial products (fp16)


class A8Scales(enum.IntEnum):
    """W8A8 (activation scale, weight scale) pairing."""

    TENSOR_TENSOR = 0  # xs [] x ws []: epilogue
    TOKEN_ROW = 1  # xs [M] x ws [N]: epilogue (outer product)
    GROUP_BLOCK = 2  # xs [M, ceil(K/128)] x ws [ceil(N/128), ceil(K/128)]: per K group (DeepSeek-V3)


W8A16_LAYOUT = {Format.FP8_TENSOR: WScale.TENSOR, Format.FP8_ROW: WScale.ROW,
                Format.FP8_BLOCK: WScale.BLOCK128, Format.MXFP8: WScale.MX32}
W8A8_LAYOUT = {Format.FP8_TENSOR: A8Scales.TENSOR_TENSOR, Format.FP8_ROW: A8Scales.TOKEN_ROW,
               Format.FP8_BLOCK: A8Scales.GROUP_BLOCK}
