"""Ahead-of-time ISA rows of the Triton backend (`isa_rows()`), for `tools/isa_report.py`.

Every kernel variant the Triton candidates can launch (decode GEMV, activation quantization, and the
prefill GEMMs listed by `_gemm_isa`) is compiled with `triton.compile(ASTSource(...), target=GPUTarget(...))`
for cuda sm_80 / sm_89 / sm_90 and hip gfx1201 -- no GPU needed -- and the generated code is inspected:
matrix instruction family, fp8 conversions in hardware or software, widest global load, spills.

Compiles run in worker processes (one per core by default): each is single-threaded and ~1-3 s.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import subprocess
import tempfile
from typing import Any, Callable, NamedTuple, Sequence

from dispatch.isa import IsaRow, gcn_main_loop_barriers, main_loop_barriers, wgmma_register_hazards
from dispatch.target import Target

ISA_TARGETS = ("sm_80", "sm_89", "sm_90", "gfx1201")


@dataclasses.dataclass(frozen=True)
class IsaVariant:
    kernel: str
    target: str
    fn: Callable[..., Any]
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    supported: bool
    attrs: dict = dataclasses.field(default_factory=dict)
    note: str = ""

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget
        if self.target.startswith("sm_"):
            return GPUTarget("cuda", int(self.target[3:]), 32)
        return GPUTarget("hip", self.target, 32)


def divisibility_attrs(fn, signature: dict[str, str], ints: Sequence[str]) -> dict:
    """tt.divisibility=16 on pointers and the listed ints: what the JIT infers for K % 16 == 0 problems
    (the common case, and the one whose vector widths the report should show)."""
    names = list(fn.arg_names)
    return {(names.index(k),): [["tt.divisibility", 16]] for k, v in signature.items()
            if v != "constexpr" and (v.startswith("*") or k in ints)}


def variant(kernel: str, target: Target, fn, signature: dict[str, str], constexprs: dict[str, Any], num_warps: int,
            num_stages: int, ints: Sequence[str]) -> IsaVariant:
    """The variant of `fn` for `target`: `constexprs` are appended to the signature, `supported` is what the
    candidates' target predicate says, and pointers plus `ints` carry the divisibility hints."""
    from .candidates import target_support  # the predicate every Triton candidate starts from

    sig = dict(signature, **{k: "constexpr" for k in constexprs})
    return IsaVariant(kernel, target.arch, fn, sig, constexprs, num_warps, num_stages, bool(target_support(target)),
                      divisibility_attrs(fn, sig, ints))


def _fp8_path(arch: str) -> tuple[Target, bool, bool]:
    """(target, fp8 travels as fp8e4nv, the hardware e4m3 cast is exact) for `arch`."""
    from .act_quant_config import exact_hw_e4m3_cast

    t = Target.simulated_for(arch)
    hw = t.has_triton_fp8_dtype
    return t, hw, hw and exact_hw_e4m3_cast(t)


def gemv_variant(name: str, arch: str, wscale, a_mode: int, cfg, x: str = "bf16", direct: bool = True) -> IsaVariant:
    """The decode kernel (_gemv_kernels._gemv_kernel) for `arch` with the launcher's constexprs for a weight scale
    layout, activation mode (0 bf16/fp16 x, 1 fp8 codes, 2 fused quantization) and GemvConfig."""
    from . import _gemv_kernels as K
    from ._gemm_layouts import WScale
    from ._gemv import fast_bf16_decode, gemv_constexprs

    t, hw, cvt = _fp8_path(arch)
    codes = "*fp8e4nv" if hw else "*u8"
    sig = {"x_ptr": codes if a_mode == 1 else f"*{x}", "xs_ptr": "*fp32", "w_ptr": codes,
           "ws_ptr": "*u8" if wscale is WScale.MX32 else "*fp32", "bias_ptr": "*bf16", "out_ptr": "*bf16",
           "part_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "SPLIT_K": "i32", "stride_xm": "i32",
           "stride_xsm": "i32", "stride_wsn": "i32", "stride_om": "i32"}
    from ._pdl import pdl_target
    cx = gemv_constexprs(wscale, a_mode, cfg, hw=hw, cvt=cvt, ieee=False, has_bias=True, direct=direct,
                         wgmma=t.has_wgmma, pdl=pdl_target(t),
                         fast_bf16=fast_bf16_decode(wscale, a_mode, x == "bf16", False, t.is_cuda))
    return variant(name, t, K._gemv_kernel, sig, cx, cfg.num_warps, cfg.num_stages, ("N", "K", "stride_xm", "stride_om"))


def _gemv_variants(arch: str) -> list[IsaVariant]:
    from ._gemm_layouts import WScale
    from ._pdl import pdl_target
    from ._splitk_reduce import splitk_reduce
    from .configs import GemvConfig

    t = Target.simulated_for(arch)
    out: list[IsaVariant] = []

    def add(name: str, wscale: WScale, a_mode: int, cfg: GemvConfig, x: str = "bf16", direct: bool = True):
        out.append(gemv_variant(name, arch, wscale, a_mode, cfg, x, direct))

    fma = GemvConfig(1, 32, 256)
    dot = GemvConfig(16, 64, 128)
    for ws in WScale:
        n = ws.name.lower()
        add(f"w8a16_gemv_fma[{n}]", ws, 0, fma, direct=ws is not WScale.TENSOR)
        add(f"w8a16_gemv_mma[{n}]", ws, 0, dot)
    add("w8a16_gemv_mma[mx32,fp16]", WScale.MX32, 0, dot, x="fp16")
    # the 8-row tile with 8 warps: mxfp8's sm_90 default at M = 1 (session 32)
    add("w8a16_gemv_fma_8rows[mx32]", WScale.MX32, 0, GemvConfig(1, 8, 512, 0, 8))
    for ws in (WScale.TENSOR, WScale.ROW, WScale.BLOCK128):
        n = {WScale.TENSOR: "tensor", WScale.ROW: "token_row", WScale.BLOCK128: "group_block"}[ws]
        # fused 1x128 groups take block_m >= 4; 16 rows on gfx1201, whose default it is there (32 rows spill)
        fused_groups = GemvConfig(4, 16 if t.is_rocm else 32, 256)
        add(f"w8a8_gemv_fma_fusedq[{n}]", ws, 2, fused_groups if ws is WScale.BLOCK128 else fma)
        add(f"w8a8_gemv_mma_fusedq[{n}]", ws, 2, dot)
        add(f"w8a8_gemv_mma[{n}]", ws, 1, dot)
    sig = {"part_ptr": "*fp32", "bias_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32", "SPLIT_K": "i32",
           "stride_om": "i32"}
    out.append(variant("gemv_splitk_reduce", t, splitk_reduce, sig,
                       {"HAS_BIAS": True, "BLOCK": 256, "PDL": pdl_target(t)}, 4, 1, ("N", "stride_om")))
    return out


def _act_quant_variants(arch: str) -> list[IsaVariant]:
    from . import _act_quant as A
    from ._pdl import pdl_target

    t, hw, cvt = _fp8_path(arch)
    # the launcher's own plans for a bf16 [4096, 4096] input (plus the long-row loop and the one-program kernel)
    return [variant(name, t, fn, sig, cx, warps, 1, ints)
            for name, fn, sig, cx, warps, ints in A.isa_kernel_specs(hw, cvt, pdl=A.PDL and pdl_target(t))]


def _gemm_variants(targets: tuple[str, ...]) -> list[IsaVariant]:
    try:
        from ._gemm_isa import gemm_isa_variants
    except ImportError:  # the prefill module is optional for this report
        return []
    return list(gemm_isa_variants(targets))


def all_variants(targets: tuple[str, ...] = ISA_TARGETS, include_gemm: bool = True) -> list[IsaVariant]:
    out: list[IsaVariant] = []
    for arch in targets:
        out += _gemv_variants(arch)
        out += _act_quant_variants(arch)
    if include_gemm:
        out += _gemm_variants(targets)
    return out


# --- inspection ---------------------------------------------------------------------------------------

_PTX_LD = re.compile(r"\bld\.global(?:\.[\w:]+)*?(?:\.v(\d))?\.(?:b|u|s|f)(\d+)")  # incl. .L1::evict_first
_GCN_LD = re.compile(r"\b(?:global|buffer)_load_(?:dwordx(\d)|dword\b|b(\d+)|[ui](\d+)|short|ubyte|sbyte)")


def _tool(name: str) -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


# (report name, pattern whose group 1 is the A operand type) per matrix instruction family, first match wins.
_PTX_MMA = (("wgmma", r"wgmma\.mma_async[.a-z0-9_]*?\.f32\.(\w+)\.(\w+)"),
            ("mma.sync", r"mma\.sync\.aligned\.[a-z0-9.]*?\.f32\.(\w+)\.(\w+)"))
_GCN_MMA = (("v_wmma", r"v_wmma_f32_\w+?_(fp8_fp8|bf16|f16)\b"),)


class PtxasInfo(NamedTuple):
    serialized: str  # ptxas's reason for serializing the kernel's wgmmas (info C7515), or ""
    spill_bytes: int  # spill stores + loads
    registers: int  # per thread (0 if ptxas did not say)


def ptxas_verbose(ptx: str, arch: str) -> PtxasInfo:
    """ptxas -v on `ptx` for `arch` ("sm_90" compiles as sm_90a, as Triton does). Triton compiles without -v, so
    neither finding shows otherwise: a serialized kernel makes each wgmma wait for the one before (info C7515; SASS:
    WARPGROUP.DEPBAR.LE gsb0, 0x0 after every HGMMA), and spills go to the stack frame, which cuobjdump's LOCAL count
    does not include."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([_tool("ptxas"), f"-arch={arch}{'a' if arch == 'sm_90' else ''}", "-v", src, "-o",
                            os.path.join(d, "k.cubin")], capture_output=True, text=True, timeout=300)
    from kernels_cuda.compiler import ptxas_resources  # the CUDA backend's parser of the same ptxas -v lines

    log = r.stdout + r.stderr
    m = re.search(r"\(C7515\) Potential Performance Loss: (.*?)(?: in the function|$)", log, re.M)
    res = ptxas_resources(log)
    return PtxasInfo(m.group(1).strip() if m else "", res.get("spill_bytes", 0), res.get("registers", 0))


def sass_of(cubin: bytes) -> str:
    """`cuobjdump -sass` of a cubin, as text (addresses kept: wgmma_register_hazards follows branch targets)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True, timeout=120,
                              check=True).stdout


def _mma_family(asm: str, families: tuple[tuple[str, str], ...]) -> str:
    """'<family> <A type>' of the first matrix instruction found ('fp8' for any e4m3 flavour), or 'none'."""
    for family, pattern in families:
        m = re.search(pattern, asm)
        if m:
            a = m.group(1)
            return f"{family} {'fp8' if 'e4m3' in a or a == 'fp8_fp8' else a}"
    return "none"


def _inspect_cuda(ck) -> dict[str, Any]:
    ptx = ck.asm["ptx"]
    mma = _mma_family(ptx, _PTX_MMA)
    dec = bool(re.search(r"cvt\.rn\.f16x2\.e4m3x2", ptx))
    enc = bool(re.search(r"cvt\.rn\.satfinite\.e4m3x2\.f32", ptx))
    enc16 = bool(re.search(r"cvt\.rn\.satfinite\.e4m3x2\.f16x2", ptx))
    widest = 0
    for v, b in _PTX_LD.findall(ptx):
        widest = max(widest, int(v or 1) * int(b))
    spills, hazards, barriers, serialized = 0, 0, -1, ""
    try:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(ck.asm["cubin"])
            f.flush()
            res = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                                 text=True, timeout=60)
        mm = re.search(r"LOCAL:(\d+)", res.stdout)
        serialized, spilled, _ = ptxas_verbose(ptx, f"sm_{ck.metadata.target.arch}")
        spills = (int(mm.group(1)) if mm else 0) + spilled  # local arrays + stack-frame spills
        sass = sass_of(ck.asm["cubin"])
        barriers = main_loop_barriers(sass)
        if mma.startswith("wgmma"):
            hazards = len(wgmma_register_hazards(sass))
    except (OSError, subprocess.SubprocessError):
        spills = -1
        hazards = -1 if mma.startswith("wgmma") else 0
    parts = (["hw-dec"] if dec else []) + (["hw-enc"] if enc else []) + (["hw-enc-via-f16"] if enc16 else [])
    return {"mma": mma, "fp8_cvt": "+".join(parts) or "sw", "widest_load_bits": widest, "spills": spills,
            "wgmma_hazards": hazards, "loop_barriers": barriers, "wgmma_serialized": serialized}


def _inspect_hip(ck) -> dict[str, Any]:
    gcn = ck.asm["amdgcn"]
    mma = _mma_family(gcn, _GCN_MMA)
    cv = set(re.findall(r"v_cvt_(?:pk_)?(?:f32_fp8|fp8_f32)", gcn))
    widest = 0
    for dx, b, u in _GCN_LD.findall(gcn):
        widest = max(widest, 32 * int(dx) if dx else int(b or u or 32))
    mm = re.search(r"ScratchSize:\s*(\d+)", gcn)
    return {"mma": mma, "fp8_cvt": "hw" if cv else "sw", "widest_load_bits": widest,
            "spills": int(mm.group(1)) if mm else 0, "loop_barriers": gcn_main_loop_barriers(gcn)}


def compile_variant(v: IsaVariant):
    """triton.compile the variant for its target (no GPU needed). Returns the CompiledKernel."""
    import triton
    from triton.compiler import ASTSource
    src = ASTSource(fn=v.fn, signature=v.signature, constexprs=v.constexprs, attrs=v.attrs)
    return triton.compile(src, target=v.gpu_target(), options={"num_warps": v.num_warps, "num_stages": v.num_stages})


def compile_and_inspect(v: IsaVariant) -> IsaRow:
    """Compile one variant for its target and describe the code; a compile failure is a row, not a raise."""
    try:
        ck = compile_variant(v)
    except Exception as e:  # any compiler error is the report's content
        msg = " ".join(str(e).strip().splitlines()[-3:])[:300]
        return IsaRow("triton", v.kernel, v.target, v.supported, False, error=f"{type(e).__name__}: {msg}")
    info = _inspect_cuda(ck) if v.target.startswith("sm_") else _inspect_hip(ck)
    hw = v.constexprs.get("HW_FP8")
    if v.constexprs.get("FAST_BF16"):
        info["fp8_cvt"] = "sw (prmt+and, bf16x2 fma)"  # _fp8.e4m3_to_bf16_spread, by choice (faster than F2F)
    elif hw is False:
        info["fp8_cvt"] = "sw (uint8 codes)"
    elif info["fp8_cvt"] == "sw":
        # fp8 typed, yet no conversion instruction: consumed directly by an fp8 MMA, or (gfx1201) Triton
        # lowers the conversions to integer sequences.
        info["fp8_cvt"] = "none" if v.target.startswith("sm_") else "sw (triton lowering)"
    return IsaRow("triton", v.kernel, v.target, v.supported, True, **info, note=v.note)


def _compile_index(args: tuple[tuple[str, ...], bool, int]) -> IsaRow:
    targets, include_gemm, i = args
    return compile_and_inspect(all_variants(targets, include_gemm)[i])


def isa_rows(targets: tuple[str, ...] = ISA_TARGETS, jobs: int | None = None, include_gemm: bool = True) -> list[IsaRow]:
    """Compile every Triton variant for every target (no GPU). `jobs` worker processes (default: cores)."""
    n = len(all_variants(targets, include_gemm))
    jobs = jobs or os.cpu_count() or 1
    if jobs <= 1:
        return [_compile_index((targets, include_gemm, i)) for i in range(n)]
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(_compile_index, [(targets, include_gemm, i) for i in range(n)]))
