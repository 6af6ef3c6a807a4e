"""ISA rows of the HIP backend for tools/isa_report: every build of kernels.builds() compiled offline with
clang-19 for each of its archs, then read back with llvm-objdump-19 / llvm-readelf-19.

Per kernel symbol it records the matrix instructions seen (v_wmma fp8 / bf16 / f16), whether fp8 conversion
is the hardware's (v_cvt_pk_f32_fp8, v_cvt_f32_fp8, v_cvt_pk_fp8_f32), the widest global load, and scratch
use (private segment bytes, VGPR/SGPR spill counts from the code object metadata). What a build must show
is in its `Expect`; a miss is written into the row's note as "EXPECT FAIL: ..." and fails
tests/test_hip_compile.py.

Without clang-19 the rows still appear, marked "unsupported-by-toolchain" (supported=False), so the report
on a machine without the toolchain says why instead of failing; CI installs it (compiler.TOOLCHAIN_HINT).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter

import yaml

from dispatch.isa import IsaRow

from . import compiler
from .kernels import HipBuild, builds

_FUNC_RE = re.compile(r"^[0-9a-f]+ <([^>]+)>:\s*$")
_INSN_RE = re.compile(r"^\s+([a-z][a-z0-9_]*)\b")
_LOAD_BITS = {"b128": 128, "b96": 96, "b64": 64, "b32": 32, "u16": 16, "i16": 16, "d16": 16, "u8": 8, "i8": 8,
              # gfx9 (gfx942) spellings
              "dwordx4": 128, "dwordx3": 96, "dwordx2": 64, "dword": 32, "ushort": 16, "sshort": 16,
              "ubyte": 8, "sbyte": 8}

HW_DECODE = ("v_cvt_pk_f32_fp8", "v_cvt_f32_fp8")
HW_ENCODE = ("v_cvt_pk_fp8_f32", "v_cvt_sr_fp8_f32")
WMMA_FP8 = "v_wmma_f32_16x16x16_fp8_fp8"
WMMA_16BIT = ("v_wmma_f32_16x16x16_bf16", "v_wmma_f32_16x16x16_f16")


@dataclasses.dataclass(frozen=True)
class KernelIsa:
    """What one kernel symbol's code and metadata show."""

    name: str
    insns: Counter
    vgpr_count: int
    vgpr_spill_count: int
    sgpr_spill_count: int
    private_segment_bytes: int
    lds_bytes: int
    wavefront_size: int
    args: tuple[tuple[int, int, str], ...]  # (offset, size, value_kind) of each explicit kernel argument

    def has(self, *prefixes: str) -> bool:
        return any(op.startswith(p) for op in self.insns for p in prefixes)

    @property
    def widest_global_load_bits(self) -> int:
        best = 0
        for op in self.insns:
            if op.startswith(("global_load_", "buffer_load_")):
                best = max(best, _LOAD_BITS.get(op.rsplit("_", 1)[-1], 0))
        return best

    @property
    def spill_bytes(self) -> int:
        # private_segment_fixed_size is the per-lane scratch the kernel reserves (spills and stack); the
        # spill counts are registers, 4 bytes each; either nonzero means scratch traffic.
        return max(self.private_segment_bytes, 4 * (self.vgpr_spill_count + self.sgpr_spill_count))

    @property
    def mma(self) -> str:
        kinds = []
        if self.has(WMMA_FP8):
            kinds.append("v_wmma fp8")
        if self.has("v_wmma_f32_16x16x16_bf16"):
            kinds.append("v_wmma bf16")
        if self.has("v_wmma_f32_16x16x16_f16"):
            kinds.append("v_wmma f16")
        return ", ".join(kinds) or "none"

    @property
    def fp8_cvt(self) -> str:
        return "hw" if self.has(*HW_DECODE, *HW_ENCODE) else "sw"


def parse_disassembly(text: str) -> dict[str, Counter]:
    """llvm-objdump -d text -> {function symbol: Counter of mnemonics}."""
    out: dict[str, Counter] = {}
    cur: Counter | None = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            cur = out.setdefault(m.group(1), Counter())
            continue
        if cur is not None:
            mi = _INSN_RE.match(line)
            if mi:
                cur[mi.group(1)] += 1
    return out


def parse_metadata(notes_text: str) -> list[dict]:
    """llvm-readelf --notes text -> the amdhsa.kernels list of the AMDGPU metadata (YAML)."""
    start = notes_text.find("---")
    end = notes_text.find("...", start)
    if start < 0:
        raise ValueError("no AMDGPU metadata in the code object notes")
    doc = yaml.safe_load(notes_text[start:end if end > 0 else None])
    return list(doc.get("amdhsa.kernels", []))


def analyze(code_object: bytes, arch: str) -> dict[str, KernelIsa]:
    dis, notes = compiler.disassemble(code_object, arch)
    insns = parse_disassembly(dis)
    out: dict[str, KernelIsa] = {}
    for k in parse_metadata(notes):
        name = k[".name"]
        args = tuple((int(a[".offset"]), int(a[".size"]), str(a[".value_kind"])) for a in k.get(".args", [])
                     if not str(a[".value_kind"]).startswith("hidden_"))
        out[name] = KernelIsa(name, insns.get(name, Counter()), int(k.get(".vgpr_count", 0)),
                              int(k.get(".vgpr_spill_count", 0)), int(k.get(".sgpr_spill_count", 0)),
                              int(k.get(".private_segment_fixed_size", 0)), int(k.get(".group_segment_fixed_size", 0)),
                              int(k.get(".wavefront_size", 0)), args)
    return out


def expectation_failures(build: HipBuild, k: KernelIsa) -> list[str]:
    e, fails = build.expect_for(k.name), []
    if e.wmma_fp8 and not k.has(WMMA_FP8):
        fails.append(f"no {WMMA_FP8}")
    if e.wmma_16bit and not k.has(*WMMA_16BIT):
        fails.append("no v_wmma_f32_16x16x16_bf16/f16")
    if e.hw_decode and not k.has(*HW_DECODE):
        fails.append("no hardware fp8 decode (v_cvt_pk_f32_fp8 / v_cvt_f32_fp8)")
    if e.hw_encode and not k.has(*HW_ENCODE):
        fails.append("no hardware fp8 encode (v_cvt_pk_fp8_f32)")
    if e.load_bits and k.widest_global_load_bits < e.load_bits:
        fails.append(f"widest global load {k.widest_global_load_bits} bits < {e.load_bits}")
    if k.spill_bytes:
        fails.append(f"scratch use {k.spill_bytes} bytes (vgpr spills {k.vgpr_spill_count})")
    return fails


@dataclasses.dataclass(frozen=True)
class BuildResult:
    build: HipBuild
    arch: str
    ok: bool
    log: str
    kernels: dict[str, KernelIsa]


@functools.lru_cache(maxsize=1)
def compile_all() -> tuple[BuildResult, ...]:
    """Every (build, arch) compiled once per process (the report and the tests share it)."""
    jobs = [(b, a) for b in builds() for a in b.archs]
    results = compiler.run_many([(b.source, b.options(a)) for b, a in jobs])
    out = []
    for (b, a), r in zip(jobs, results):
        kernels = analyze(r.code_object, a) if r.ok else {}
        out.append(BuildResult(b, a, r.ok, r.log, kernels))
    return tuple(out)


def _row_name(build: HipBuild, kernel: str) -> str:
    params = build.label[build.label.index("["):] if "[" in build.label else ""
    return f"{kernel}{params}"


def isa_rows() -> list[IsaRow]:
    missing = compiler.toolchain_missing()
    if missing:
        return [IsaRow("hip", _row_name(b, k), a, False, False, error=missing,
                       note="unsupported-by-toolchain (CI installs clang-19)")
                for b in builds() for a in b.archs for k in b.kernels]
    rows: list[IsaRow] = []
    for r in compile_all():
        supported = r.arch in r.build.runtime_archs
        base_note = "" if supported else "report only (not launched on this arch)"
        if not r.ok:
            err = "\n".join(r.log.splitlines()[:12])
            rows += [IsaRow("hip", _row_name(r.build, k), r.arch, supported, False, error=err, note=base_note)
                     for k in r.build.kernels]
            continue
        for k in r.build.kernels:
            ki = r.kernels.get(k)
            if ki is None:
                rows.append(IsaRow("hip", _row_name(r.build, k), r.arch, supported, False,
                                   error=f"kernel symbol {k} missing from the code object", note=base_note))
                continue
            fails = expectation_failures(r.build, ki) if supported else []
            notes = [base_note] if base_note else []
            notes.append(f"vgpr {ki.vgpr_count}, lds {ki.lds_bytes} B")
            if fails:
                notes.append("EXPECT FAIL: " + "; ".join(fails))
            rows.append(IsaRow("hip", _row_name(r.build, k), r.arch, supported, True, mma=ki.mma, fp8_cvt=ki.fp8_cvt,
                               widest_load_bits=ki.widest_global_load_bits, spills=ki.spill_bytes,
                               note="; ".join(notes)))
    return rows
