"""Ahead-of-time variants of the prefill GEMMs for the ISA report (`kernels_triton.isa`).

`gemm_isa_variants()` lists, per target, every kernel variant the prefill candidates can launch there
with its default config: the Triton signature, constexprs and launch options that `triton.compile`
needs without a GPU. `compile_variant()` compiles one (used by the ISA report and by the tests).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from dispatch.target import Target

from ._gemm_config import GemmConfig, w8a8_configs, w8a16_configs
from ._gemm_layouts import A8Scales, WScale

ISA_TARGETS = ("sm_80", "sm_89", "sm_90", "gfx1201")


@dataclasses.dataclass(frozen=True)
class GemmIsaVariant:
    kernel: str  # report name, e.g. "w8a16_gemm[mx32,bf16,swap_ab]"
    target: str  # "sm_90", "gfx1201", ...
    fn: Callable[..., Any]  # the @triton.jit kernel
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    supported: bool  # what the candidates' support predicates declare for this target
    attrs: dict = dataclasses.field(default_factory=dict)  # tt.divisibility hints as the JIT would infer

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget
        if self.target.startswith("sm_"):
            return GPUTarget("cuda", int(self.target[3:]), 32)
        return GPUTarget("hip", self.target, 32)


_TL_DTYPE = {"bf16": "*bf16", "fp16": "*fp16"}


def _divisible(names: list[str], signature: dict[str, str]) -> dict:
    """tt.divisibility=16 on every pointer and on the listed ints: what the JIT infers for aligned,
    K % 16 == 0 problems (the common case, and the one whose vector widths the report should show)."""
    keys = list(signature)
    return {(keys.index(k),): [["tt.divisibility", 16]] for k in keys
            if signature[k].startswith("*") or k in names}


def _supported(target: Target) -> bool:
    from .candidates import target_support  # the predicate both prefill candidates start from
    return bool(target_support(target))


def _w8a16_variant(target: Target, wscale: WScale, x: str, cfg: GemmConfig) -> GemmIsaVariant:
    from ._gemm import _w8a16_gemm_kernel
    hw = target.has_triton_fp8_dtype
    code = "fp8e4nv" if hw else "u8"
    if cfg.tma:
        xsig = f"tensordesc<{x}[{cfg.block_m}, {cfg.block_k}]>"
        wsig = f"tensordesc<{code}[{cfg.block_n}, {cfg.block_k}]>"
    else:
        xsig, wsig = _TL_DTYPE[x], "*" + code
    sig = {"x_ptr": xsig, "w_ptr": wsig,
           "ws_ptr": "*u8" if wscale is WScale.MX32 else "*fp32", "bias_ptr": _TL_DTYPE[x], "y_ptr": _TL_DTYPE[x],
           "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_ym": "i32",
           "stride_ws": "i32"}
    cx = {"WSCALE": int(wscale), "MX_PRESCALE": wscale is WScale.MX32 and x == "bf16", "HAS_BIAS": False,
          "HW_FP8": hw, "DOT_F32": False, "SWAP_AB": cfg.swap_ab, "USE_TMA": cfg.tma, "BLOCK_M": cfg.block_m,
          "BLOCK_N": cfg.block_n,
          "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m}
    for k in cx:
        sig[k] = "constexpr"
    name = f"w8a16_gemm[{wscale.name.lower()},{x}{',swap_ab' if cfg.swap_ab else ''}{',tma' if cfg.tma else ''}]"
    # The mx scale rows are padded to 16 groups by the launcher: stride_ws % 16 == 0 always.
    ints = ["K", "stride_xm", "stride_wn", "stride_ym"] + (["stride_ws"] if wscale is WScale.MX32 else [])
    return GemmIsaVariant(name, target.arch, _w8a16_gemm_kernel, sig, cx, cfg.num_warps, cfg.num_stages,
                          supported=_supported(target), attrs=_divisible(ints, sig))


def _w8a8_variant(target: Target, scales: A8Scales, cfg: GemmConfig) -> GemmIsaVariant:
    from ._gemm import _w8a8_gemm_kernel
    hw = target.has_triton_fp8_dtype
    code = "fp8e4nv" if hw else "u8"
    if cfg.tma:
        xsig = f"tensordesc<{code}[{cfg.block_m}, {cfg.block_k}]>"
        wsig = f"tensordesc<{code}[{cfg.block_n}, {cfg.block_k}]>"
    else:
        xsig = wsig = "*" + code
    sig = {"xq_ptr": xsig, "xs_ptr": "*fp32", "w_ptr": wsig, "ws_ptr": "*fp32", "bias_ptr": "*bf16",
           "y_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32",
           "stride_ym": "i32", "stride_xs": "i32", "stride_ws": "i32"}
    cx = {"SCALES": int(scales), "HAS_BIAS": False, "HW_FP8": hw, "DOT_F32": False, "USE_TMA": cfg.tma,
          "BLOCK_M": cfg.block_m,
          "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m}
    for k in cx:
        sig[k] = "constexpr"
    name = f"w8a8_gemm[{scales.name.lower()}{',tma' if cfg.tma else ''}]"
    return GemmIsaVariant(name, target.arch, _w8a8_gemm_kernel, sig, cx, cfg.num_warps, cfg.num_stages,
                          supported=_supported(target), attrs=_divisible(["K", "stride_xm", "stride_wn", "stride_ym"], sig))


def gemm_isa_variants(targets: tuple[str, ...] = ISA_TARGETS) -> list[GemmIsaVariant]:
    """Every prefill variant x target, each with the target's default config (first of its space);
    on wgmma targets the W8A16 family also lists its non-swapped variant (both are in the space)."""
    out: list[GemmIsaVariant] = []
    for arch in targets:
        t = Target.simulated_for(arch)
        for ws in WScale:
            for x in ("bf16", "fp16") if ws is WScale.MX32 else ("bf16",):
                space = w8a16_configs(t, ws, x == "fp16")
                picks = ([space[0]] + [c for c in space[1:] if c.swap_ab != space[0].swap_ab][:1]
                         + [c for c in space[1:] if c.tma][:1])
                out.extend(_w8a16_variant(t, ws, x, c) for c in picks)
        for sc in A8Scales:
            space = w8a8_configs(t, sc)
            picks = [space[0]] + [c for c in space[1:] if c.tma != space[0].tma][:1]
            out.extend(_w8a8_variant(t, sc, c) for c in picks)
    return out


def compile_variant(v: GemmIsaVariant):
    """triton.compile the variant for its target (no GPU needed). Returns the CompiledKernel."""
    import triton
    from triton.compiler import ASTSource
    src = ASTSource(fn=v.fn, signature=v.signature, constexprs=v.constexprs, attrs=v.attrs)
    return triton.compile(src, target=v.gpu_target(), options={"num_warps": v.num_warps, "num_stages": v.num_stages})
