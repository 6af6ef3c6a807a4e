"""Ahead-of-time variants of the prefill GEMMs for the ISA report (`kernels_triton.isa`).

`gemm_isa_variants()` lists, per target, every kernel variant the prefill candidates can launch there
with its default config: the Triton signature, constexprs and launch options that `triton.compile`
needs without a GPU, as `kernels_triton.isa.IsaVariant`s. `compile_variant()` (re-exported from there)
compiles one (used by the ISA report and by the tests).
"""

from __future__ import annotations

from dispatch.target import Target

from ._gemm_config import GemmConfig, w8a8_configs, w8a16_configs
from ._gemm_layouts import A8Scales, WScale
from ._pdl import pdl_target
from .isa import ISA_TARGETS, IsaVariant, compile_variant, variant

__all__ = ["compile_variant", "gemm_isa_variants"]

# The ints besides pointers that are multiples of 16 in aligned (K % 16 == 0) problems.
_ALIGNED_INTS = ("K", "stride_xm", "stride_wn", "stride_ym")


def _code_type(target: Target) -> str:
    """Triton type of the fp8 codes on `target`: fp8e4nv, or uint8 where Triton has no fp8 type (sm_80)."""
    return "fp8e4nv" if target.has_triton_fp8_dtype else "u8"


def _operand_types(cfg: GemmConfig, x_type: str, code_type: str) -> tuple[str, str]:
    """Signature types of the x and weight-code operands: host TMA descriptors of the config's blocks, or
    plain pointers."""
    if cfg.tma:
        return (f"tensordesc<{x_type}[{cfg.block_m}, {cfg.block_k}]>",
                f"tensordesc<{code_type}[{cfg.block_n}, {cfg.block_k}]>")
    return "*" + x_type, "*" + code_type


def _w8a16_variant(target: Target, wscale: WScale, x: str, cfg: GemmConfig, mx_fold: bool = True) -> IsaVariant:
    from ._gemm import _w8a16_gemm_kernel
    code = _code_type(target)
    xsig, wsig = _operand_types(cfg, x, code)
    sig = {"x_ptr": xsig, "w_ptr": wsig, "ws_ptr": "*u8" if wscale is WScale.MX32 else "*fp32", "bias_ptr": "*" + x,
           "y_ptr": "*" + x, "part_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "SPLIT_K": "i32",
           "stride_xm": "i32", "stride_wn": "i32", "stride_ym": "i32", "stride_ws": "i32"}
    cx = {"WSCALE": int(wscale), "MX_PRESCALE": wscale is WScale.MX32 and x == "bf16", "HAS_BIAS": False,
          "HW_FP8": code == "fp8e4nv", "DOT_F32": False, "SWAP_AB": cfg.swap_ab, "USE_TMA": cfg.tma,
          "SPLIT": cfg.split_k != 1,
          "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m,
          # as the launcher decides (_gemm_launch.fast_bf16_decode): NVIDIA targets, bf16 x, codes decoded alone
          "FAST_BF16": target.arch.startswith("sm_") and x == "bf16",
          "WGMMA_DRAIN": target.has_wgmma, "PDL": pdl_target(target),
          # the launcher's choice for real weights (every MX scale code <= 134); mx_fold=False: the other decode
          "MX_FOLD": mx_fold and wscale is WScale.MX32 and x == "bf16" and target.arch.startswith("sm_")}
    name = (f"w8a16_gemm[{wscale.name.lower()},{x}{',swap_ab' if cfg.swap_ab else ''}{',tma' if cfg.tma else ''}"
            f"{',splitk' if cfg.split_k != 1 else ''}]")
    # The mx scale rows are padded to 16 groups by the launcher: stride_ws % 16 == 0 always.
    ints = _ALIGNED_INTS + (("stride_ws",) if wscale is WScale.MX32 else ())
    return variant(name, target, _w8a16_gemm_kernel, sig, cx, cfg.num_warps, cfg.num_stages, ints)


def _w8a8_variant(target: Target, scales: A8Scales, cfg: GemmConfig) -> IsaVariant:
    from ._gemm import _w8a8_gemm_kernel
    code = _code_type(target)
    xsig, wsig = _operand_types(cfg, code, code)
    sig = {"xq_ptr": xsig, "xs_ptr": "*fp32", "w_ptr": wsig, "ws_ptr": "*fp32", "bias_ptr": "*bf16",
           "y_ptr": "*bf16", "part_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "SPLIT_K": "i32",
           "stride_xm": "i32", "stride_wn": "i32", "stride_ym": "i32", "stride_xs": "i32", "stride_ws": "i32"}
    cx = {"SCALES": int(scales), "HAS_BIAS": False, "HW_FP8": code == "fp8e4nv", "DOT_F32": False,
          "USE_TMA": cfg.tma, "SPLIT": cfg.split_k != 1, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k,
          "GROUP_M": cfg.group_m, "PDL": pdl_target(target), "WARP_SPEC": cfg.warp_specialize}
    name = (f"w8a8_gemm[{scales.name.lower()}{',tma' if cfg.tma else ''}{',ws' if cfg.warp_specialize else ''}"
            f"{',splitk' if cfg.split_k != 1 else ''}]")
    return variant(name, target, _w8a8_gemm_kernel, sig, cx, cfg.num_warps, cfg.num_stages, _ALIGNED_INTS)


def gemm_isa_variants(targets: tuple[str, ...] = ISA_TARGETS) -> list[IsaVariant]:
    """Every prefill variant x target, each with the target's default config (first of its space);
    on wgmma targets the W8A16 family also lists its non-swapped variant (both are in the space), and
    both families their first split-K variant (the default of the M <= 256 spaces)."""
    out: list[IsaVariant] = []
    for arch in targets:
        t = Target.simulated_for(arch)
        for ws in WScale:
            for x in ("bf16", "fp16") if ws is WScale.MX32 else ("bf16",):
                space = w8a16_configs(t, ws, x == "fp16")
                picks = ([space[0]] + [c for c in space[1:] if c.swap_ab != space[0].swap_ab][:1]
                         + [c for c in space[1:] if c.tma][:1])
                picks += [c for c in w8a16_configs(t, ws, x == "fp16", m=64) if c.split_k != 1][:1]
                out.extend(_w8a16_variant(t, ws, x, c) for c in picks)
        for sc in A8Scales:
            space = w8a8_configs(t, sc)
            picks = [space[0]] + [c for c in space[1:] if c.tma != space[0].tma][:1]
            picks += [c for c in w8a8_configs(t, sc, m=64) if c.split_k != 1][:1]
            if t.has_wgmma:  # in no space (it hung on the H200: tools/perf/probe_warp_spec.py); compiled for the record
                picks.append(GemmConfig(128, 128, 128, 8, 4, 4, tma=True, warp_specialize=True))
            out.extend(_w8a8_variant(t, sc, c) for c in picks)
    return out

