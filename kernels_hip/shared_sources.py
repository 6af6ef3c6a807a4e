"""kernels_cuda's sources compiled as HIP: which of them the HIP backend launches and which only appear in
the ISA report.

- act_quant.cu and dequant.cu are vendor-neutral streams (hardware fp8 encode/decode through gfx12_fp8.h):
  the HIP backend launches act_quant.cu (activation quantization for W8A8); dequant.cu is compiled for the
  report only, as no HIP candidate has a dequantize route yet (docs/hip.md).
- gemv_w8a16.cu / gemv_w8a8.cu are written around mma.sync fragments, which gfx12 lacks; portability.cuh
  emulates them with lane shuffles, which compiles (the report shows it) but spills and is slow, so on
  gfx12 the backend uses its own WMMA kernels (w8a16_wmma_gfx12.hip, w8a8_wmma_gfx12.hip) instead.
The FP8D_CFG_* macro names are those the .cu files require (their `#error` lines name them).
"""

from __future__ import annotations

from .kernels import GFX12, GFX942, Expect, HipBuild, _defs

SCALE_CODES = {"tensor": 0, "row": 1, "block": 2, "mx": 3}  # FP8D_SCALE_* in fp8_common.cuh

ACT_QUANT_KERNELS = ("fp8d_act_quant_token", "fp8d_act_quant_group", "fp8d_act_quant_tensor_single",
                     "fp8d_act_amax_partial", "fp8d_act_quant_tensor_apply")


def act_quant_build() -> HipBuild:
    return HipBuild("act_quant", "act_quant.cu", (), (GFX12, GFX942), (GFX12,),
                    Expect(hw_encode=True), ACT_QUANT_KERNELS,
                    expect_overrides=(("fp8d_act_amax_partial", Expect()),))  # amax only: encodes nothing


def dequant_build(scale: str) -> HipBuild:
    # 8 codes a thread: one 64-bit load and one 128-bit store (the geometry measured fastest on the H200, session 17;
    # unmeasured on gfx12)
    return HipBuild(f"dequant[{scale}]", "dequant.cu", _defs({"FP8D_CFG_SCALE": SCALE_CODES[scale]}),
                    (GFX12, GFX942), (GFX12,), Expect(hw_decode=True, load_bits=64), ("fp8d_dequant",))


def report_only_builds() -> list[HipBuild]:
    """One representative instantiation of each mma.sync-shaped GEMV, to show what gfx12 makes of it."""
    return [
        HipBuild("shared_gemv_w8a16[block,bf16,emulated-mma]", "gemv_w8a16.cu",
                 _defs({"FP8D_CFG_SCALE": 2, "FP8D_CFG_XKIND": 0, "FP8D_CFG_NT": 1, "FP8D_CFG_MT": 1, "FP8D_CFG_U": 2}),
                 (GFX12,), (), Expect(load_bits=128), ("fp8d_w8a16_gemv",)),
        HipBuild("shared_gemv_w8a8[group,emulated-mma]", "gemv_w8a8.cu",
                 _defs({"FP8D_CFG_ACTQ": 2, "FP8D_CFG_NT": 1, "FP8D_CFG_MT": 1, "FP8D_CFG_U": 2}),
                 (GFX12,), (), Expect(load_bits=128), ("fp8d_w8a8_gemv",)),
    ]


def builds() -> list[HipBuild]:
    return [act_quant_build(), *[dequant_build(s) for s in SCALE_CODES], *report_only_builds()]
