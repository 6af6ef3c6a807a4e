"""Ahead-of-time ISA rows of the CUDA kernels (tools/isa_report aggregates them): every kernel family is
compiled by NVRTC for sm_80, sm_89 and sm_90 without a GPU, and its SASS (cuobjdump from the triton
wheel) is inspected for what the design promises:

  - 128-bit weight loads (LDG.E.128 / LDG.E.NA.128),
  - hardware e4m3 conversion (F2FP ... E4M3) on sm_89+ where the kernel converts, none of it on sm_80,
  - the MMA instructions used (HMMA bf16/f16, QMMA e4m3 on sm_89; sm_90 has no mma.sync fp8 in
    hardware, so ptxas lowers it to F2FP to f16 + HMMA),
  - no local-memory spills (ptxas -v spill bytes and LDL/STL in the SASS).

The W8A16 bf16 kernels decode fp8 in software on every arch by design: a sign-extending byte permute, a
shift, one AND and one HMUL2.BF16 per pair of codes (csrc/fp8_common.cuh fp8d_decode4_bf16x2_fast) is
no dearer than F2FP (which yields f16) plus an f16 -> bf16 step and keeps the bf16 MMA.

The GEMV variants are the default ring depth at M = 1 and the deepest ring configs.py allows for each token
x row tile pair (the register-budget boundary), so the no-spill check covers what autotune may pick.

The W8A16 wgmma GEMM (csrc/gemm_w8a16_wgmma.cu) is sm_90a code: its sm_90 rows compile for sm_90a and read HGMMA,
TMA loads (UTMALDG: no LDG on the operand path, so "widest load" shows the scale and bias loads), register hazards of
its register operand (dispatch.isa.wgmma_register_hazards) and whether ptxas serialized its wgmmas (info C7513 /
C7515); its sm_80 / sm_89 rows say the support predicate refuses them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import re
import subprocess
from typing import Any

from dispatch.errors import CompileError
from dispatch.isa import IsaRow, main_loop_barriers, wgmma_register_hazards
from dispatch.problem import Problem
from dispatch.target import Target
from dispatch.formats import Act, Format

from . import compiler

ARCHS = ("sm_80", "sm_89", "sm_90")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One compiled instantiation shown in the report."""

    kernel: str  # report name
    source: str
    defines: tuple[tuple[str, Any], ...]
    problem: Problem | None  # what the support predicate is asked (None: helper kernel, always supported)
    candidate: str  # candidate id whose support predicate decides `supported`
    expect_hw_cvt: bool  # the kernel converts fp8 with F2FP on sm_89+ by design
    sm90a_only: bool = False  # wgmma code: compiled for sm_90a on sm_90, not at all on older archs


def _gemv16(scale: str, fmt: Format, xk: int, nt: int, m: int, mt: int = 1, u: int | None = None) -> Variant:
    import torch  # noqa: PLC0415

    from .configs import deepest_ring  # noqa: PLC0415

    u = deepest_ring(m, mt) if u is None else u
    dt = {0: torch.bfloat16, 1: torch.float16}[xk]
    name = f"w8a16_gemv[{scale},{'bf16' if xk == 0 else 'f16'},M<={8 * nt},mt={mt},u={u}]"
    d = {"FP8D_CFG_SCALE": {"tensor": 0, "row": 1, "block": 2, "mx": 3}[scale], "FP8D_CFG_XKIND": xk,
         "FP8D_CFG_NT": nt, "FP8D_CFG_MT": mt, "FP8D_CFG_U": u}
    return Variant(name, "gemv_w8a16.cu", tuple(sorted(d.items())), Problem(fmt, Act.BF16, m, 4096, 4096, dt, dt),
                   "cuda.w8a16_gemv", xk == 1)


def _gemv8(scheme: str, fmt: Format, nt: int, m: int, mt: int = 1, u: int | None = None) -> Variant:
    from .configs import deepest_ring  # noqa: PLC0415

    u = deepest_ring(m, mt) if u is None else u
    d = {"FP8D_CFG_ACTQ": {"tensor": 0, "token": 1, "group": 2}[scheme], "FP8D_CFG_NT": nt, "FP8D_CFG_MT": mt,
         "FP8D_CFG_U": u}
    return Variant(f"w8a8_gemv[{scheme},M<={8 * nt},mt={mt},u={u}]", "gemv_w8a8.cu", tuple(sorted(d.items())),
                   Problem(fmt, Act.FP8, m, 4096, 4096), "cuda.w8a8_gemv", False)


def variants() -> list[Variant]:
    v = [_gemv16(s, f, 0, 1, 1) for s, f in (("tensor", Format.FP8_TENSOR), ("row", Format.FP8_ROW),
                                              ("block", Format.FP8_BLOCK), ("mx", Format.MXFP8))]
    v += [_gemv16("row", Format.FP8_ROW, 1, 1, 1), _gemv16("block", Format.FP8_BLOCK, 0, 4, 32),
          _gemv16("mx", Format.MXFP8, 0, 4, 32)]
    # the register-budget boundary: the deepest ring of each remaining token x row tile pair
    v += [_gemv16("block", Format.FP8_BLOCK, 0, 1, 1, mt=2), _gemv16("mx", Format.MXFP8, 0, 2, 16),
          _gemv16("block", Format.FP8_BLOCK, 1, 2, 16, mt=2)]
    v += [_gemv8(s, f, 1, 1) for s, f in (("tensor", Format.FP8_TENSOR), ("token", Format.FP8_ROW),
                                          ("group", Format.FP8_BLOCK))]
    v += [_gemv8("group", Format.FP8_BLOCK, 4, 32), _gemv8("token", Format.FP8_ROW, 4, 32),
          _gemv8("group", Format.FP8_BLOCK, 1, 1, mt=2), _gemv8("group", Format.FP8_BLOCK, 2, 16),
          _gemv8("tensor", Format.FP8_TENSOR, 2, 16, mt=2)]
    # the one-launch W8A8 GEMV (one token tile): its prologue quantizes x (F2FP encode on sm_89+) with the ring live
    v += [_gemv8_fq(s, f, 1) for s, f in (("tensor", Format.FP8_TENSOR), ("token", Format.FP8_ROW),
                                          ("group", Format.FP8_BLOCK))]
    v += [_gemv8_fq("group", Format.FP8_BLOCK, 2)]
    # the persistent one-launch GEMV (a loop over row tiles around the same body), and the GEMVs on decode tiles
    # (kernels_cuda/_tiles.py: predicate-free 16-byte loads at computed block offsets)
    v += [_gemv8_fq("group", Format.FP8_BLOCK, 1, persistent=True)]
    # the W8A8 GEMV that quantizes x in its K loop (M <= 2: shuffles, F2FP encode on sm_89+), at 2 tokens with the
    # deepest ring that fits and with the shared-memory ring
    v += [_gemv8_inline(s, f, 2, 1, 4) for s, f in (("tensor", Format.FP8_TENSOR), ("token", Format.FP8_ROW),
                                                     ("group", Format.FP8_BLOCK))]
    v += [_gemv8_inline("group", Format.FP8_BLOCK, 2, 2, 1), _gemv8_inline("token", Format.FP8_ROW, 1, 2, 1, ring=3)]
    # (mx at M = 16, one row tile, ring 3: the tiles table's pick for 4096x14336; clamping its scale group spilled there)
    v += [_tiled(x) for x in (_gemv16("row", Format.FP8_ROW, 0, 1, 1), _gemv16("mx", Format.MXFP8, 0, 1, 1),
                              _gemv16("mx", Format.MXFP8, 0, 2, 16), _gemv8("group", Format.FP8_BLOCK, 1, 1),
                              _gemv8("token", Format.FP8_ROW, 2, 16, mt=2))]
    v += [Variant("act_quant[tensor,token,group128]", "act_quant.cu", (), None, "", True)]
    for s, f in (("tensor", Format.FP8_TENSOR), ("row", Format.FP8_ROW), ("block", Format.FP8_BLOCK),
                 ("mx", Format.MXFP8)):
        v.append(Variant(f"dequant[{s}]", "dequant.cu", (("FP8D_CFG_SCALE", {"tensor": 0, "row": 1, "block": 2,
                                                                          "mx": 3}[s]),),
                         Problem(f, Act.BF16, 4096, 4096, 4096), "cuda.dequant_cublas", True))
    from ._dequant_route import scale_cols_module  # noqa: PLC0415
    from ._wgmma_gemm import WgmmaGemmConfig, module  # noqa: PLC0415

    # the W8A16 wgmma GEMM: every scale layout at its default tile, the largest-register tiles (256 x 128, mx, at depth
    # 1 and 2), a fitted tile height (208 tokens) and K slices summed in a cluster (the largest: 256 x 128, mx, depth 2)
    for s, f, cfg in (("row", Format.FP8_ROW, WgmmaGemmConfig(128, 2, 4)), ("tensor", Format.FP8_TENSOR,
                      WgmmaGemmConfig(128, 2, 4)), ("mx", Format.MXFP8, WgmmaGemmConfig(128, 2, 4)),
                      ("mx", Format.MXFP8, WgmmaGemmConfig(256, 2, 4)), ("row", Format.FP8_ROW, WgmmaGemmConfig(64, 4, 4)),
                      ("mx", Format.MXFP8, WgmmaGemmConfig(256, 2, 5, depth=2)),
                      ("row", Format.FP8_ROW, WgmmaGemmConfig(208, 2, 4)),
                      ("mx", Format.MXFP8, WgmmaGemmConfig(256, 2, 5, 2, depth=2, slice_cluster=True))):
        name, _, d = module(f, cfg)
        depth = f",d{cfg.depth}" if cfg.depth != 1 else ""
        depth += f",k{cfg.split}c" if cfg.slice_cluster else ""
        v.append(Variant(f"w8a16_gemm_wgmma[{s},{cfg.bm}x{cfg.bn},s{cfg.stages}{depth}]", name, d,
                         Problem(f, Act.BF16, 4096, 4096, 4096), "cuda.w8a16_gemm_wgmma", False, sm90a_only=True))

    for s, f in (("tensor", Format.FP8_TENSOR), ("row", Format.FP8_ROW)):
        name, _, d = scale_cols_module(f is Format.FP8_TENSOR)
        v.append(Variant(f"scale_cols[{s}]", name, d, Problem(f, Act.BF16, 4096, 4096, 4096), "cuda.dequant_cublas",
                         False))
    return v


def _gemv8_fq(scheme: str, fmt: Format, mt: int, persistent: bool = False) -> Variant:
    from ._w8a8_fused import FqGemvConfig, fused_module  # noqa: PLC0415
    from .configs import deepest_ring  # noqa: PLC0415

    u = deepest_ring(1, mt)
    g = {"tensor": 0, "token": 1, "group": 2}[scheme]
    name, _, d = fused_module(g, 1, FqGemvConfig(8, mt, u, persistent=persistent))
    tag = ",persistent" if persistent else ""
    return Variant(f"w8a8_gemv_fq[{scheme},M<=8,mt={mt},u={u}{tag}]", name, d, Problem(fmt, Act.FP8, 1, 4096, 4096),
                   "cuda.w8a8_gemv_fq", True)


def _gemv8_inline(scheme: str, fmt: Format, m: int, mt: int, u: int, ring: int = 0) -> Variant:
    import torch  # noqa: PLC0415

    from ._w8a8_inline import inline_module  # noqa: PLC0415
    from .configs import GemvConfig  # noqa: PLC0415

    g = {"tensor": 0, "token": 1, "group": 2}[scheme]
    name, _, d = inline_module(g, m, torch.bfloat16, GemvConfig(8, mt, u, ring))
    return Variant(f"w8a8_gemv_inline[{scheme},M={m},mt={mt},{f'r={ring}' if ring else f'u={u}'}]", name, d,
                   Problem(fmt, Act.FP8, m, 4096, 4096), "cuda.w8a8_gemv_inline", True)


def _tiled(v: Variant) -> Variant:
    """The same GEMV reading decode tiles (-DFP8D_CFG_TILED)."""
    return dataclasses.replace(v, kernel=v.kernel.replace("gemv[", "gemv_tiled[", 1),
                               defines=tuple(sorted(v.defines + (("FP8D_CFG_TILED", 1),))))


@functools.lru_cache(maxsize=1)
def cuobjdump() -> pathlib.Path | None:
    env = os.environ.get("FP8DISPATCH_CUOBJDUMP")
    if env:
        return pathlib.Path(env)
    try:
        import triton  # noqa: PLC0415
    except Exception:
        return None
    p = pathlib.Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return p if p.is_file() else None


_OPCODE_RE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


def sass_text(cubin: pathlib.Path) -> str:
    """`cuobjdump -sass` of a cubin (addresses kept)."""
    tool = cuobjdump()
    if tool is None:
        raise CompileError("cuobjdump not found (it ships in the triton wheel: triton/backends/nvidia/bin); "
                           "set FP8DISPATCH_CUOBJDUMP")
    out = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, errors="replace")
    if out.returncode != 0:
        raise CompileError(f"cuobjdump failed on {cubin}:\n{out.stderr}")
    return out.stdout


def sass_opcodes(cubin: pathlib.Path) -> list[str]:
    return _OPCODE_RE.findall(sass_text(cubin))


@dataclasses.dataclass(frozen=True)
class SassFacts:
    widest_load_bits: int
    hw_e4m3_cvt: bool
    mma: str
    local_mem_ops: int

    @classmethod
    def of(cls, ops: list[str]) -> "SassFacts":
        widest = 0
        for op in ops:
            if op.startswith("LDG"):
                bits = 32
                for b in (128, 64, 16, 8):
                    if f".{b}" in op or (b in (16, 8) and (f".U{b}" in op or f".S{b}" in op)):
                        bits = b
                        break
                widest = max(widest, bits)
        mmas = sorted({op for op in ops if op.startswith(("HMMA", "QMMA", "IMMA", "HGMMA", "QGMMA"))})
        hw = any(op.startswith("F2FP") and "E4M3" in op for op in ops)
        local = sum(1 for op in ops if op.startswith(("LDL", "STL")))
        return cls(widest, hw, ", ".join(mmas) or "none", local)


def _supported(v: Variant, arch: str) -> bool:
    from .candidates import candidates  # noqa: PLC0415

    if v.problem is None:
        return True
    target = Target.simulated_for(arch)
    cand = {c.id: c for c in candidates()}[v.candidate]
    return bool(cand.supports(v.problem, target))


def row_for(v: Variant, arch: str) -> IsaRow:
    supported = _supported(v, arch)
    if v.sm90a_only and arch != "sm_90":
        return IsaRow("cuda", v.kernel, arch, supported, False, error="sm_90a code (wgmma): not built for " + arch)
    try:
        built = compiler.compile_module(v.source, "sm_90a" if v.sm90a_only else arch, dict(v.defines))
        sass = sass_text(built.path)
        facts = SassFacts.of(_OPCODE_RE.findall(sass))
    except Exception as e:  # a failed compile is a row, never an exception out of the report
        first = "\n".join(str(e).splitlines()[:6])
        return IsaRow("cuda", v.kernel, arch, supported, False, error=first)
    res = compiler.ptxas_resources(built.log)
    spills = res.get("spill_bytes", 0) + 4 * facts.local_mem_ops
    note = f"{res.get('registers', '?')} regs"
    if not facts.hw_e4m3_cvt and v.expect_hw_cvt and Target.simulated_for(arch).has_hw_fp8_cvt:
        note += "; EXPECTED hw F2FP e4m3 conversion is missing"
    if v.kernel.startswith("scale_cols"):
        note += "; no fp8 in this kernel (the bf16 output epilogue)"
    if v.kernel.startswith("w8a16_gemv") and "bf16" in v.kernel:
        note += "; bf16 decode in software by design (cheaper than F2FP + f16->bf16)"
    if "QMMA" not in facts.mma and v.kernel.startswith("w8a8") and arch == "sm_90":
        note += "; sm_90 has no native mma.sync e4m3: ptxas lowers it to F2FP->f16 + HMMA"
    hazards, serialized = 0, ""
    if v.sm90a_only:
        hazards = len(wgmma_register_hazards(sass))
        m = re.search(r"\((C751\d)\) Potential Performance Loss: (.*?)(?: in the function|$)", built.log, re.M)
        serialized = f"{m.group(1)}: {m.group(2)}" if m else ""
        note += "; TMA operand loads (UTMALDG); bf16 decode in software into wgmma's register operand"
    mma = f"wgmma bf16 ({facts.mma})" if v.sm90a_only else facts.mma  # the report's wgmma columns key on "wgmma"
    return IsaRow("cuda", v.kernel, arch, supported, True, mma=mma,
                  fp8_cvt="hw" if facts.hw_e4m3_cvt else "sw", widest_load_bits=facts.widest_load_bits,
                  spills=spills, note=note, loop_barriers=main_loop_barriers(sass), wgmma_hazards=hazards,
                  wgmma_serialized=serialized)


def isa_rows() -> list[IsaRow]:
    """One row per (variant, arch). Without NVRTC every row says why it did not compile."""
    reason = compiler.nvrtc_unavailable_reason()
    rows = []
    for v in variants():
        for arch in ARCHS:
            if reason:
                rows.append(IsaRow("cuda", v.kernel, arch, _supported(v, arch), False, error=reason))
            else:
                rows.append(row_for(v, arch))
    return rows
