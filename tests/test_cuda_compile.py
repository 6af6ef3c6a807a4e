"""CPU tests of the CUDA backend (CI): NVRTC compilation for sm_80/89/90 without a GPU, the cache, the
error path, SASS properties, candidate support rules, and numpy models of the kernels' bit tricks and
fragment mapping. The models check the algorithms the CUDA code implements, NOT the CUDA code itself:
tests/test_cuda_kernels.py (GPU) does that.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
import torch

from dispatch import formats
from dispatch.errors import CompileError
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.target import Target


def _nvrtc_or_skip():
    from kernels_cuda import compiler

    reason = compiler.nvrtc_unavailable_reason()
    if reason:
        pytest.skip(reason)
    return compiler

SM90 = Target.simulated_for("sm_90")  # the lending rules' target argument


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("fp8d_cache")
    old = os.environ.get("FP8DISPATCH_CACHE_DIR")
    os.environ["FP8DISPATCH_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("FP8DISPATCH_CACHE_DIR", None)
    else:
        os.environ["FP8DISPATCH_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def rows(cache):
    _nvrtc_or_skip()
    from kernels_cuda import isa

    if isa.cuobjdump() is None:
        pytest.skip("cuobjdump not found (ships in the triton wheel)")
    return isa.isa_rows()


# --- compilation and SASS ---------------------------------------------------------------------------
def test_every_kernel_compiles_for_every_arch(rows):
    from kernels_cuda import isa

    assert {r.target for r in rows} == set(isa.ARCHS)
    assert len(rows) == len(isa.variants()) * len(isa.ARCHS)
    failed = [(r.kernel, r.target, r.error) for r in rows if not r.compiled and not r.kernel.startswith(WGMMA)]
    assert not failed, failed
    assert all(r.supported for r in rows if not r.kernel.startswith(WGMMA))
    # the wgmma GEMM is sm_90a code: built and supported on sm_90 only, refused by its predicate elsewhere
    wg = [r for r in rows if r.kernel.startswith(WGMMA)]
    assert wg and all(r.compiled == r.supported == (r.target == "sm_90") for r in wg), wg


WGMMA = "w8a16_gemm_wgmma"


def test_wgmma_gemm_rows_have_no_register_hazards_nor_serialized_wgmmas(rows):
    wg = [r for r in rows if r.kernel.startswith(WGMMA) and r.compiled]
    assert wg
    for r in wg:
        assert r.mma.startswith("wgmma bf16 (HGMMA") and r.wgmma_hazards == 0 and not r.wgmma_serialized, r


def test_no_spills(rows):
    assert [(r.kernel, r.target, r.spills) for r in rows if r.spills] == []


def test_weight_streams_use_128_bit_loads(rows):
    """The GEMVs read the weight in 16-byte loads; the dequant kernel in 8-byte ones (8 codes a thread: on the H200
    that reached >= 85 % of the copy rate in 21 of 32 cells against 6 at 16 codes, session 17)."""
    for r in rows:
        if r.kernel.startswith(WGMMA):
            continue  # TMA bulk copies (UTMALDG) read its operands; its LDGs are scales and bias
        if r.kernel.startswith(("w8a16", "w8a8")):
            assert r.widest_load_bits == 128, (r.kernel, r.target)
        if r.kernel.startswith("dequant"):
            assert r.widest_load_bits == 64, (r.kernel, r.target)


def test_fp8_conversion_hardware_on_sm89_plus_software_on_sm80(rows):
    for r in rows:
        if not r.compiled:
            continue  # the wgmma GEMM off sm_90 (test_every_kernel_compiles_for_every_arch)
        if r.target == "sm_80":
            assert r.fp8_cvt == "sw", (r.kernel, "sm_80 has no e4m3 conversion instructions")
        elif r.kernel.startswith(("dequant", "act_quant")) or ",f16," in r.kernel:
            assert r.fp8_cvt == "hw", (r.kernel, r.target)
        assert "EXPECTED" not in r.note, r.note


def test_mma_instructions(rows):
    for r in rows:
        if r.kernel.startswith("w8a8"):
            want = {"sm_80": "HMMA.16816.F32.BF16", "sm_89": "QMMA.16832.F32.E4M3.E4M3", "sm_90": "HMMA.16816.F32"}
            assert r.mma == want[r.target], (r.kernel, r.target, r.mma)
        elif r.kernel.startswith(WGMMA):
            assert not r.compiled or r.mma.startswith("wgmma bf16 (HGMMA"), (r.kernel, r.target, r.mma)
        elif r.kernel.startswith("w8a16"):
            assert r.mma.startswith("HMMA.16816.F32"), (r.kernel, r.target, r.mma)


# --- cache and errors ---------------------------------------------------------------------------------
def test_cache_key_changes_with_source_options_arch_and_version():
    from kernels_cuda.compiler import cache_key

    srcs = {"a.cu": "x", "h.cuh": "y"}
    base = cache_key("a.cu", srcs, ["-DX=1"], "sm_90", (13, 0))
    assert base == cache_key("a.cu", dict(srcs), ["-DX=1"], "sm_90", (13, 0))
    assert base != cache_key("a.cu", {"a.cu": "x ", "h.cuh": "y"}, ["-DX=1"], "sm_90", (13, 0))
    assert base != cache_key("a.cu", {"a.cu": "x", "h.cuh": "y2"}, ["-DX=1"], "sm_90", (13, 0))  # a header
    assert base != cache_key("a.cu", srcs, ["-DX=2"], "sm_90", (13, 0))
    assert base != cache_key("a.cu", srcs, ["-DX=1"], "sm_89", (13, 0))
    assert base != cache_key("a.cu", srcs, ["-DX=1"], "sm_90", (13, 1))


def test_compile_uses_cache_and_writes_atomically(cache):
    compiler = _nvrtc_or_skip()
    d = {"FP8D_CFG_SCALE": 1}
    first = compiler.compile_module("dequant.cu", "sm_90", d, use_cache=False)
    again = compiler.compile_module("dequant.cu", "sm_90", d)
    assert again.cached and again.path == first.path and again.key == first.key
    other = compiler.compile_module("dequant.cu", "sm_90", {"FP8D_CFG_SCALE": 2})
    assert other.key != first.key
    assert not list(first.path.parent.glob("*.tmp")), "temporary files left behind"
    data = first.path.read_bytes()
    assert data[:4] == b"\x7fELF"
    # the ELF is complete: its section header table ends inside the file
    e_shoff = int.from_bytes(data[0x28:0x30], "little")
    e_shentsize = int.from_bytes(data[0x3A:0x3C], "little")
    e_shnum = int.from_bytes(data[0x3C:0x3E], "little")
    e_phoff = int.from_bytes(data[0x20:0x28], "little")
    e_phnum = int.from_bytes(data[0x38:0x3A], "little")
    assert e_shoff + e_shentsize * e_shnum <= len(data)
    assert e_phoff + 56 * e_phnum <= len(data)
    ptx = compiler.compile_module("dequant.cu", "compute_80", d)
    assert ptx.is_ptx and b".target sm_80" in ptx.image() and ptx.image().endswith(b"\0")


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    from kernels_cuda import compiler

    target = tmp_path / "x.cubin"
    real_fdopen = os.fdopen

    class FailingFile:
        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:2])  # a partial write, then the disk fills up
            raise OSError("disk full")

    monkeypatch.setattr(compiler.os, "fdopen", FailingFile)
    with pytest.raises(OSError, match="disk full"):
        compiler._atomic_write(target, b"data")
    assert not list(tmp_path.iterdir()), "a failed write left a file behind"
    monkeypatch.undo()
    compiler._atomic_write(target, b"data")
    assert target.read_bytes() == b"data" and [p.name for p in tmp_path.iterdir()] == ["x.cubin"]


def test_compile_error_carries_the_nvrtc_log(cache):
    compiler = _nvrtc_or_skip()
    with pytest.raises(CompileError) as e:
        compiler.compile_module("gemv_w8a16.cu", "sm_90", {}, use_cache=False)  # no FP8D_CFG_*: #error
    msg = str(e.value)
    assert "NVRTC log" in msg and "compile through kernels_cuda._launch" in msg and "gemv_w8a16.cu" in msg
    with pytest.raises(CompileError, match="arch"):
        compiler.compile_module("dequant.cu", "90", {})


def test_format_constants_come_from_dispatch_formats():
    from kernels_cuda.compiler import format_defines

    d = dict(o[2:].split("=", 1) for o in format_defines())
    assert float(d["FP8D_E4M3_MAX"].rstrip("f")) == formats.E4M3_MAX
    assert np.float32(d["FP8D_AMAX_FLOOR"].rstrip("f")) == np.float32(formats.AMAX_FLOOR)
    assert int(d["FP8D_WEIGHT_BLOCK"]) == formats.WEIGHT_BLOCK and int(d["FP8D_MX_GROUP"]) == formats.MX_GROUP
    assert int(d["FP8D_ACT_GROUP"]) == formats.ACT_GROUP and int(d["FP8D_E8M0_BIAS"]) == formats.E8M0_BIAS
    from kernels_cuda.compiler import CSRC

    literal = re.compile(r"(?<![\w.])(448(\.0)?f?|1e-12f?)(?![\w.])")
    for p in CSRC.glob("*.cu*"):
        code = "\n".join(line.split("//")[0] for line in p.read_text().splitlines())
        assert not literal.search(code), f"{p.name} carries a format literal; use the FP8D_* defines"


def test_kind_codes_match_the_header():
    from kernels_cuda import _kinds
    from kernels_cuda.compiler import CSRC

    text = (CSRC / "fp8_common.cuh").read_text()
    defs = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (FP8D_\w+) (\d+)\b", text)}
    for codes, macros in [(_kinds.SCALE_CODE, _kinds.SCALE_MACRO), (_kinds.DTYPE_CODE, _kinds.DTYPE_MACRO),
                          (_kinds.ACTQ_CODE, _kinds.ACTQ_MACRO)]:
        for key, code in codes.items():
            assert defs[macros[key]] == code, macros[key]


# --- candidates ---------------------------------------------------------------------------------------
def test_import_touches_nothing_and_reports_unavailable_without_gpu():
    from kernels_cuda import candidates

    cands = candidates.candidates()
    assert {c.id for c in cands} == {"cuda.w8a16_gemv", "cuda.w8a8_gemv", "cuda.w8a8_gemv_fq", "cuda.w8a8_gemv_inline",
                                     "cuda.w8a16_gemv_tiles", "cuda.w8a8_gemv_tiles", "cuda.dequant_cublas",
                                     "cuda.w8a16_gemm_wgmma"}
    if not torch.cuda.is_available():
        s = cands[0].available()
        assert not s and s.reason


def test_support_rules_with_reasons():
    from kernels_cuda.candidates import CudaDequantCublas, CudaW8A8Gemv, CudaW8A16Gemv

    sm90, sm80, gfx = (Target.simulated_for(a) for a in ("sm_90", "sm_80", "gfx1201"))
    w16, w8, dq = CudaW8A16Gemv(), CudaW8A8Gemv(), CudaDequantCublas()
    p = Problem(Format.FP8_ROW, Act.BF16, 4, 4096, 4096)
    assert w16.supports(p, sm90) and w16.supports(p, sm80)
    assert "software" in w16.supports(p, sm80).reason
    no = w16.supports(Problem(Format.FP8_ROW, Act.BF16, 33, 4096, 4096), sm90)
    assert not no and "M = 33" in no.reason
    no = w16.supports(Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4100), sm90)
    assert not no and "multiple of 16" in no.reason
    assert not w16.supports(p, gfx) and "NVIDIA" in w16.supports(p, gfx).reason
    no = w16.supports(Problem(Format.MXFP8, Act.BF16, 1, 4096, 4096, torch.float16, torch.float16), sm90)
    assert not no and "fp16" in no.reason
    pb = Problem(Format.FP8_BLOCK, Act.FP8, 16, 4096, 4096)
    assert w8.supports(pb, sm90) and "bf16" in w8.supports(pb, sm80).reason
    assert dq.supports(Problem(Format.MXFP8, Act.BF16, 4096, 4096, 4096), sm90)
    assert dq.supports(Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 4096), sm90)
    no = dq.supports(Problem(Format.FP8_ROW, Act.BF16, 16, 4096, 4096), sm90)
    assert not no and "prefill" in no.reason
    assert (Format.MXFP8, Act.FP8) not in w8.serves


def test_config_space():
    from kernels_cuda.configs import (SMEM_RING_STEPS, GemvConfig, deepest_ring, default_gemv_config, gemv_configs,
                                      token_tiles)

    t = Target.simulated_for("sm_90")
    for act, fmt in ((Act.BF16, Format.FP8_ROW), (Act.FP8, Format.FP8_BLOCK)):
        for m in (1, 4, 8, 9, 16, 17, 32):
            for n, k in ((4096, 4096), (28672, 4096), (4096, 14336), (8192, 2560), (256, 576)):
                p = Problem(fmt, act, m, n, k)
                cs = gemv_configs(p, t)
                regs, ring = [c for c in cs if not c.smem_ring], [c for c in cs if c.smem_ring]
                assert 1 < len(regs) <= 12 and len(set(cs)) == len(cs) and cs[:len(regs)] == regs, (m, n, k, cs)
                assert cs[0] == default_gemv_config(p, t)
                assert all(c.fits(m) for c in cs) and all(c.smem_bytes(m) <= 48 * 1024 for c in regs)
                # the shared-memory ring (CUDA only): the four CTA shapes where they fit, up to M = 16
                assert len(ring) == (0 if m > 16 else 4), (m, ring)
                assert all(c.unroll == 1 and c.smem_ring == SMEM_RING_STEPS and c.smem_bytes(m) <= 227 * 1024
                           for c in ring)
                assert not [c for c in gemv_configs(p, Target.simulated_for("gfx1201")) if c.smem_ring]
                steps = math.ceil(math.ceil(k / 128) / cs[0].warps)
                assert cs[0].unroll <= max(1, steps), "default ring deeper than the warp's K steps"
    # the default rule: K split on small N, all of a warp's 4 steps in flight at K = 4096 on 8 warps
    assert default_gemv_config(Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4096), t) == GemvConfig(8, 1, 4)
    big = default_gemv_config(Problem(Format.FP8_ROW, Act.BF16, 16, 28672, 4096), t)
    assert big.warps == 4 and big.mtiles == 2 and big.fits(16)
    assert default_gemv_config(Problem(Format.FP8_BLOCK, Act.FP8, 16, 28672, 4096), t).mtiles == 1
    # long K: 8 warps even past one wave (5120x25600 on the H200), 4 below it at the same N
    assert default_gemv_config(Problem(Format.FP8_ROW, Act.BF16, 1, 5120, 25600), t).warps == 8
    assert default_gemv_config(Problem(Format.FP8_ROW, Act.BF16, 1, 5120, 8192), t).warps == 4
    # ... and where three CTAs per SM make one wave, the ring of 1 that leaves room for the third (not for mxfp8)
    assert default_gemv_config(Problem(Format.FP8_ROW, Act.BF16, 1, 5120, 25600), t) == GemvConfig(8, 1, 1)
    # (mxfp8 keeps 4 steps in flight, then takes the two row tiles below)
    assert default_gemv_config(Problem(Format.MXFP8, Act.BF16, 1, 5120, 25600), t) == GemvConfig(8, 2, 1)
    assert default_gemv_config(Problem(Format.MXFP8, Act.BF16, 1, 5120, 8192), t).mtiles == 1
    # the W8A16 GEMV's default there: two row tiles where one row tile makes a second wave at two CTAs per SM
    # (session 24, measured on 5120x25600: 1.19-1.30x faster), but not where the three-CTA ring of 1 applies, nor at
    # shapes that fit one wave, nor for 4 token tiles (two row tiles do not fit), nor for the W8A8 GEMV (unmeasured)
    pytest.importorskip("cupy")
    from dispatch import registry
    w8a16, w8a8 = registry.get("cuda.w8a16_gemv"), registry.get("cuda.w8a8_gemv")
    assert w8a16.default_config(Problem(Format.FP8_ROW, Act.BF16, 16, 5120, 25600), t) == GemvConfig(8, 2, 1)
    assert w8a16.default_config(Problem(Format.MXFP8, Act.BF16, 1, 5120, 25600), t) == GemvConfig(8, 2, 1)
    assert w8a16.default_config(Problem(Format.FP8_ROW, Act.BF16, 1, 5120, 25600), t) == GemvConfig(8, 1, 1)
    assert w8a16.default_config(Problem(Format.FP8_ROW, Act.BF16, 32, 5120, 25600), t).mtiles == 1
    for p in (Problem(Format.FP8_ROW, Act.BF16, 16, 4096, 14336), Problem(Format.MXFP8, Act.BF16, 1, 28672, 4096),
              Problem(Format.FP8_ROW, Act.BF16, 16, 28672, 4096)):
        assert w8a16.default_config(p, t) == default_gemv_config(p, t)
    p = Problem(Format.FP8_BLOCK, Act.FP8, 16, 5120, 25600)
    assert w8a8.default_config(p, t) == default_gemv_config(p, t)
    p = Problem(Format.FP8_ROW, Act.BF16, 16, 5120, 25600)  # the autotune space starts with the default, no duplicate
    cs = list(w8a16.configs(p, t))
    assert cs[0] == GemvConfig(8, 2, 1) and len(set(cs)) == len(cs) <= 16 and cs == gemv_configs(p, t)
    assert default_gemv_config(p, t) == GemvConfig(8, 2, 1)
    assert [token_tiles(m) for m in (1, 8, 9, 16, 17, 32)] == [1, 1, 2, 2, 4, 4]
    assert deepest_ring(1, 1) == 4 and deepest_ring(32, 2) == 0 and not GemvConfig(8, 2, 1).fits(32)
    assert all(GemvConfig().fits(m) for m in range(1, 33)), "launches without a config use the field defaults"
    for bad in (dict(warps=16), dict(unroll=0), dict(unroll=5), dict(mtiles=3), dict(smem_ring=9),
                dict(smem_ring=3, unroll=2), dict(smem_ring=-1)):
        with pytest.raises(ValueError):
            GemvConfig(**bad)
    assert GemvConfig.from_dict(GemvConfig(4, 2, 1).to_dict()) == GemvConfig(4, 2, 1)
    assert GemvConfig.from_dict({"warps": 4, "mtiles": 2, "unroll": 1}) == GemvConfig(4, 2, 1)  # tables before the field
    assert GemvConfig.from_dict(GemvConfig(8, 1, 1, 3).to_dict()) == GemvConfig(8, 1, 1, 3)
    assert not GemvConfig(8, 1, 1, 3).fits(17) and GemvConfig(8, 2, 1, 3).fits(16)
    # the ring after the reduction's layout, 16-byte aligned: steps x 4 x row tiles x 16 bytes x threads
    base = 4 * (4 * 2 * 1 * 4 * 32 + 2 * 32 + 32)
    assert GemvConfig(4, 2, 1, 3).smem_bytes(1) == (base + 15) // 16 * 16 + 3 * 4 * 2 * 16 * 128
    # neither the one-launch GEMV nor the GEMV on decode tiles takes a ring in shared memory
    from kernels_cuda._w8a8_fused import FqGemvConfig
    from kernels_cuda.configs import fits_on_decode_tiles
    with pytest.raises(ValueError):
        FqGemvConfig(8, 1, 1, 3)
    assert not fits_on_decode_tiles(GemvConfig(8, 1, 1, 3), 1, False)
    fq = registry.get("cuda.w8a8_gemv_fq")
    assert not [c for c in fq.configs(Problem(Format.FP8_ROW, Act.FP8, 1, 4096, 4096), t) if c.smem_ring]
    tiles = registry.get("cuda.w8a8_gemv_tiles")
    assert not [c for c in tiles.configs(Problem(Format.FP8_ROW, Act.FP8, 1, 4096, 4096, decode_tiles=True), t)
                if c.smem_ring]
    # shared memory: partials [warps][slots][32] + row scales + row biases + 32 token scales (Fp8dSmemLayout)
    assert GemvConfig(8, 2, 1).smem_bytes(16) == 4 * (8 * 2 * 2 * 4 * 32 + 2 * 32 + 32)


def test_register_budget_table_is_what_the_kernels_compile_to():
    """Every (token tiles, row tiles) pair of configs._DEEPEST_RING at its deepest ring, for the heaviest
    layouts of both families, compiles for sm_90 and sm_80 without spills (the full sweep over every layout,
    depth and arch was run when the table was written: see the table's comment)."""
    compiler = _nvrtc_or_skip()
    from kernels_cuda import isa
    from kernels_cuda.configs import _DEEPEST_RING

    if isa.cuobjdump() is None:
        pytest.skip("cuobjdump not found (ships in the triton wheel)")
    bad = []
    for (nt, mt), depth in sorted(_DEEPEST_RING.items()):
        for name, d in (("gemv_w8a16.cu", {"FP8D_CFG_SCALE": 2, "FP8D_CFG_XKIND": 0}),
                        ("gemv_w8a8.cu", {"FP8D_CFG_ACTQ": 2})):
            d = {**d, "FP8D_CFG_NT": nt, "FP8D_CFG_MT": mt, "FP8D_CFG_U": depth}
            for arch in ("sm_90", "sm_80"):
                built = compiler.compile_module(name, arch, d)
                spill = compiler.ptxas_resources(built.log).get("spill_bytes", 0)
                local = sum(1 for op in isa.sass_opcodes(built.path) if op.startswith(("LDL", "STL")))
                if spill or local:
                    bad.append((name, arch, d, spill, local))
    assert not bad, bad


def test_shared_memory_ring_modules_compile_without_spills_and_copy_asynchronously():
    """GemvConfig.smem_ring (FP8D_SMEM_RING): every family and scale / activation kind at one and two token tiles and
    one and two row tiles compiles for sm_80, sm_89 and sm_90 under __launch_bounds__(256, 2) without spills, and the
    weight is copied with LDGSTS (cp.async) on sm_90, not loaded into registers with LDG.E.128."""
    compiler = _nvrtc_or_skip()
    from kernels_cuda import _launch, isa
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import SMEM_RING_STEPS, GemvConfig

    kinds = [(False, SCALE_CODE[f], DTYPE_CODE[torch.bfloat16]) for f in Format]
    kinds += [(False, SCALE_CODE[Format.FP8_ROW], DTYPE_CODE[torch.float16])]
    kinds += [(True, code, 0) for code in ACTQ_CODE.values()]
    bad = []
    for w8a8, code, xkind in kinds:
        for m in (1, 16):
            for mt in (1, 2):
                cfg = GemvConfig(8, mt, 1, SMEM_RING_STEPS)
                name, _, d = _launch.gemv_module(w8a8, code, xkind, m, cfg)
                assert dict(d)["FP8D_SMEM_RING"] == SMEM_RING_STEPS
                for arch in ("sm_80", "sm_89", "sm_90"):
                    built = compiler.compile_module(name, arch, dict(d))
                    if compiler.ptxas_resources(built.log).get("spill_bytes", 0):
                        bad.append((w8a8, code, m, mt, arch))
                    if arch == "sm_90" and isa.cuobjdump() is not None:
                        sass = isa.sass_text(built.path)
                        assert "LDGSTS" in sass, (w8a8, code, m, mt)
    assert not bad, bad
    # without the field the module key has no FP8D_SMEM_RING: the register ring's images are unchanged
    assert "FP8D_SMEM_RING" not in dict(_launch.gemv_module(False, 1, 0, 1, GemvConfig(8, 1, 2))[2])


# --- numpy models of the bit tricks and of the fragment mapping -------------------------------------
def _e4m3_values() -> np.ndarray:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return codes.view(torch.float8_e4m3fn).float().numpy()


def test_model_bf16_decode_trick_is_exact():
    """fp8d_decode4_bf16x2 (portability.cuh, the portable decoder): (code << 8 & 0x7f00) >> 4 | sign, read
    as bf16, times 2^120 (exact)."""
    want = _e4m3_values()
    for c in range(256):
        if c & 0x7F == 0x7F:
            continue  # NaN codes: documented to read as +-480 on this path
        t = c << 8
        bits = ((t & 0x7F00) >> 4) | (t & 0x8000)
        v = np.array([bits << 16], dtype=np.uint32).view(np.float32)[0].astype(np.float64) * 2.0**120
        assert v == want[c] or (v == 0 and want[c] == 0), c


def test_model_f16_decode_trick_is_exact():
    want = _e4m3_values()
    for c in range(256):
        if c & 0x7F == 0x7F:
            continue
        t = c << 8
        bits = ((t & 0x7F00) >> 1) | (t & 0x8000)
        v = float(np.array([bits], dtype=np.uint16).view(np.float16)[0]) * 256.0
        assert v == want[c], c


def _prmt(a: np.ndarray, sel: int) -> np.ndarray:
    """PTX `prmt.b32 d, a, 0, sel` (default mode) on uint32 arrays: nibble i of sel picks byte (nibble & 7)
    of {0, a} for result byte i, and nibble & 8 replicates that byte's sign bit instead of copying it."""
    a = a.astype(np.uint64)
    out = np.zeros_like(a)
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        src = (a >> np.uint64(8 * (nib & 7))) & np.uint64(0xFF) if (nib & 7) < 4 else np.zeros_like(a)
        if nib & 8:
            src = np.where(src & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
        out |= src << np.uint64(8 * i)
    return out.astype(np.uint32)


def test_model_sign_extension_decode_is_exact():
    """fp8d_decode4_bf16x2_fast / fp8d_decode4_f16x2_fast (fp8_common.cuh) on whole 32-bit words, every pair
    of non-NaN codes in both halves: prmt 0x9180 / 0xb3a2 sign-extends codes (0, 1) / (2, 3) into 16-bit
    halves, then (w << 4) & 0x87f087f0 read as bf16 times 2^120, or (w << 7) & 0xbf80bf80 read as f16 times
    2^8, is the code's value, -0 included (the bits the low half shifts into the high half are masked)."""
    want = _e4m3_values()
    pairs = np.arange(1 << 16, dtype=np.uint32)
    words = pairs | (((pairs * 40503) & 0xFFFF) << 16)  # an unrelated pair in bytes 2, 3
    nan = np.zeros(words.size, bool)
    for b in range(4):
        nan |= ((words >> (8 * b)) & 0x7F) == 0x7F
    words = words[~nan]
    for sel, code_bytes in ((0x9180, (0, 1)), (0xB3A2, (2, 3))):
        sx = _prmt(words, sel).astype(np.uint64)
        bf = ((sx << 4) & 0x87F087F0).astype(np.uint32)
        f16 = ((sx << 7) & 0xBF80BF80).astype(np.uint32)
        for half, byte in enumerate(code_bytes):
            code = (words >> (8 * byte)) & 0xFF
            vb = (((bf >> (16 * half)) & 0xFFFF) << 16).view(np.float32).astype(np.float64) * 2.0**120
            vh = ((f16 >> (16 * half)) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64) * 256.0
            for v in (vb, vh):
                assert np.array_equal(v, want[code]), (hex(sel), half)
                assert np.array_equal(np.signbit(v), np.signbit(want[code])), (hex(sel), half)


def test_decoders_use_the_sign_extension_selectors():
    """The CUDA source spells the selectors and masks the model above checks."""
    from kernels_cuda.compiler import CSRC

    src = (CSRC / "fp8_common.cuh").read_text()
    for token in ("0x9180u", "0xb3a2u", "(s0 << 4) & 0x87f087f0u", "(s1 << 4) & 0x87f087f0u",
                  "(s0 << 7) & 0xbf80bf80u", "(s1 << 7) & 0xbf80bf80u", "0x7b807b80u", "0x5c005c00u"):
        assert token in src, token


def _model_encode(v: np.ndarray) -> np.ndarray:
    """fp8d_sw_encode1 in numpy (uint32 arithmetic on the f32 bits)."""
    u = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    sub = np.rint(a.astype(np.uint32).view(np.float32).astype(np.float64) * 512.0).astype(np.uint64)  # RNE
    r = a + 0x7FFFF + ((a >> 20) & 1)
    normal = (r >> 20) - (120 << 3)
    code = np.where(a > 0x7F800000, 0x7F, np.where(a < 0x3C800000, sub, normal))
    return (code | sign).astype(np.uint8)


def test_model_software_encode_matches_torch():
    rng = np.random.default_rng(0)
    vals = [rng.uniform(-448, 448, 20000), rng.uniform(-1, 1, 20000) * 2.0 ** rng.integers(-12, 0, 20000)]
    e = _e4m3_values()
    finite = e[np.isfinite(e)]
    mids = (np.sort(np.unique(finite))[1:] + np.sort(np.unique(finite))[:-1]) / 2  # exact ties
    vals += [finite, mids, -mids, np.array([0.0, -0.0, 448.0, -448.0, 2.0**-10, 2.0**-9, 3 * 2.0**-10])]
    v = np.concatenate(vals).astype(np.float32)
    want = torch.from_numpy(v).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    got = _model_encode(v)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(v[i]), int(got[i]), int(want[i])) for i in bad[:5]]


def test_model_gemv_fragment_mapping():
    """One 128-wide K step of gemv_w8a16 for a 16-row x 8-token tile, with PTX's m16n8k16 fragment
    semantics: lane (g, t) feeds the words of its 16-code chunks [64 q + 16 t, + 16) as described in
    csrc/skinny_common.cuh (fp8d_chunk_k), and fp8d_frag_coords maps the C fragment back. The result must
    be W_tile @ X_tile^T, and the four lanes of a quad must read 64 contiguous codes per chunk index q."""
    rng = np.random.default_rng(1)
    W = rng.standard_normal((16, 128))
    X = rng.standard_normal((8, 128))
    C = np.zeros((32, 4))
    for q in range(2):
        for wd in range(4):
            # per-lane fragments (element pairs, in K order as the packed words hold them)
            A = {}
            B = {}
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                k0 = q * 64 + t * 16 + wd * 4
                A[lane] = [W[g, k0:k0 + 2], W[g + 8, k0:k0 + 2], W[g, k0 + 2:k0 + 4], W[g + 8, k0 + 2:k0 + 4]]
                B[lane] = [X[g, k0:k0 + 2], X[g, k0 + 2:k0 + 4]]
            # PTX m16n8k16: A[r][2t'+i] = a0/a1 of lane (r%8, t'), A[r][2t'+8+i] = a2/a3; B likewise by column
            Am = np.zeros((16, 16))
            Bm = np.zeros((16, 8))
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i in range(2):
                    Am[g, 2 * t + i], Am[g + 8, 2 * t + i] = A[lane][0][i], A[lane][1][i]
                    Am[g, 2 * t + 8 + i], Am[g + 8, 2 * t + 8 + i] = A[lane][2][i], A[lane][3][i]
                    Bm[2 * t + i, g], Bm[2 * t + 8 + i, g] = B[lane][0][i], B[lane][1][i]
            D = Am @ Bm
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                C[lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]
    Y = np.zeros((16, 8))
    for lane in range(32):
        for c in range(4):  # fp8d_frag_coords with NT = 1, mt = nt = 0
            g, t = lane >> 2, lane & 3
            row, tok = g + 8 * (c >> 1), 2 * t + (c & 1)
            Y[row, tok] = C[lane, c]
    np.testing.assert_allclose(Y, W @ X.T, rtol=1e-12, atol=1e-12)
    for q in range(2):
        assert sorted(q * 64 + t * 16 + i for t in range(4) for i in range(16)) == list(range(q * 64, q * 64 + 64))
    from kernels_cuda.compiler import CSRC

    assert "return q * 64 + t * 16;" in (CSRC / "skinny_common.cuh").read_text()


def _model_skinny_loop(nsteps: int, nwarps: int, depth: int, prefetch: bool) -> dict[int, list[int]]:
    """numpy-free model of fp8d_skinny_gemv's main loop (csrc/skinny_common.cuh), index for index: which ring
    slot and operand buffer each step of each warp reads, and what was loaded there. Returns warp -> steps
    computed, asserting every read finds the step it computes."""
    nb = 2 if prefetch else 1
    r_unroll = depth if depth % nb == 0 else nb * depth
    done: dict[int, list[int]] = {}
    for warp in range(nwarps):
        ring: list[int | None] = [None] * depth
        half: list[int | None] = [None] * nb
        for d in range(depth):  # prologue
            if warp + d * nwarps < nsteps:
                ring[d] = warp + d * nwarps
        if prefetch and warp < nsteps:
            half[0] = warp
        done[warp] = []
        s0 = warp
        while s0 < nsteps:
            for r in range(r_unroll):
                s = s0 + r * nwarps
                if s >= nsteps:
                    break
                if prefetch:
                    if s + nwarps < nsteps:
                        half[(r + 1) % nb] = s + nwarps
                    assert half[r % nb] == s, (warp, s, half)
                assert ring[r % depth] == s, (warp, s, ring)
                done[warp].append(s)
                if s + depth * nwarps < nsteps:
                    ring[r % depth] = s + depth * nwarps
            s0 += r_unroll * nwarps
    return done


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("prefetch", [False, True])
def test_model_skinny_loop_reads_every_step_once_from_the_right_slot(depth, prefetch):
    for nwarps in (2, 4, 8):
        for nsteps in (1, 2, 3, 5, 8, 20, 21, 32, 33, 112):
            done = _model_skinny_loop(nsteps, nwarps, depth, prefetch)
            got = sorted(s for steps in done.values() for s in steps)
            assert got == list(range(nsteps)), (nsteps, nwarps, depth, prefetch)
            assert all(all(s % nwarps == w for s in steps) for w, steps in done.items())
    from kernels_cuda.compiler import CSRC

    src = (CSRC / "skinny_common.cuh").read_text()
    for token in ("constexpr int R = (D % NB == 0) ? D : NB * D;", "for (int s0 = warp; s0 < nsteps; s0 += R * nwarps)",
                  "const int s = s0 + r * nwarps;",
                  "if (s + nwarps < nsteps) fp8d_load_step_operands<P, NB>(p, half, scales, (r + 1) % NB, n0, L, "
                  "s + nwarps);",
                  "fp8d_skinny_step<P, kPrefetch>(p, acc, ring[r % D], half[r % NB], scales[r % NB], n0, L, s);",
                  "if (s + D * nwarps < nsteps)\n        fp8d_load_weight_step<MT, kTiled>(ring[r % D], w, n0, L, N, K, "
                  "s + D * nwarps);"):
        assert token in src, token


# --- activation-quantization launch geometry: every code and scale written exactly once ----------------
VECS = 2  # FP8D_ACTQ_VECS of act_quant.cu


def _act_quant_coverage(m: int, k: int, g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy model of the index arithmetic of act_quant.cu under _launch.act_quant_plan: how often each code
    and each scale is written, and how often each x element enters the amax that its scale comes from. For bf16 x,
    16-byte aligned (torch's allocations): the single-read register paths where their conditions hold, the
    two-read loops otherwise (those also run for misaligned x)."""
    from kernels_cuda._launch import act_quant_plan

    numel = m * k
    codes = np.zeros(numel, np.int64)
    groups = -(-k // 128)
    nscales = {"per_tensor": 1, "per_token": m, "per_token_group_128": m * groups}[g.value]
    scales = np.zeros(nscales, np.int64)
    amax_reads = np.zeros(numel, np.int64)
    for entry, grid, block in act_quant_plan(m, k, g):
        nb, nt = grid[0], block[0]
        tid = np.arange(nt)
        if entry == "fp8d_act_quant_token" and k % 8 == 0 and k // 8 <= VECS * nt:
            nvec = k // 8  # one row per CTA held in registers: vector i by thread i % nt, register i // nt
            for b in range(nb):
                scales[b] += 1
                for r in range(VECS):
                    i = tid + r * nt
                    i = i[i < nvec]
                    for j in range(8):
                        np.add.at(amax_reads, b * k + 8 * i + j, 1)
                        np.add.at(codes, b * k + 8 * i + j, 1)
        elif entry == "fp8d_act_quant_token":
            for b in range(nb):
                for kk in range(0, k, nt):  # amax loop: k = tid; k < K; k += blockDim
                    idx = kk + tid
                    np.add.at(amax_reads, b * k + idx[idx < k], 1)
                scales[b] += 1
                for kk in range(0, k, 4 * nt):  # store loop: k = 4 tid; k < K; k += 4 blockDim
                    for j in range(4):
                        idx = kk + 4 * tid + j
                        np.add.at(codes, b * k + idx[idx < k], 1)
        elif entry == "fp8d_act_quant_group":
            for b in range(nb):
                item = b * (nt // 32) + tid // 32
                lane = tid % 32
                ok = item < m * groups
                item, lane = item[ok], lane[ok]
                row, grp = item // groups, item % groups
                np.add.at(scales, item[lane == 0], 1)
                for j in range(4):
                    col = grp * 128 + 4 * lane + j
                    sel = col < k
                    np.add.at(codes, row[sel] * k + col[sel], 1)
                    np.add.at(amax_reads, row[sel] * k + col[sel], 1)
        elif entry == "fp8d_act_quant_tensor_single":
            for i0 in range(0, numel, nt):
                idx = i0 + tid
                np.add.at(amax_reads, idx[idx < numel], 1)
            scales[0] += 1
            for i0 in range(0, numel, 4 * nt):
                for j in range(4):
                    idx = i0 + 4 * tid + j
                    np.add.at(codes, idx[idx < numel], 1)
        elif entry == "fp8d_act_quant_tensor_redundant" and -(-(-(-(numel // 8) // nt)) // nb) <= VECS:
            nvec = numel // 8
            passes = -(-nvec // nt)
            share = -(-passes // nb)
            for j in range(passes):  # the amax loop of every CTA (the same in each: modelled once)
                v = j * nt + tid
                v = v[v < nvec]
                for e in range(8):
                    np.add.at(amax_reads, 8 * v + e, 1)
            np.add.at(amax_reads, np.arange(8 * nvec, numel), 1)
            scales[0] += 1
            for b in range(nb):  # CTA b stores the vectors of its passes [b * share, b * share + share)
                for r in range(share):
                    v = (b * share + r) * nt + tid
                    v = v[v < nvec]
                    for e in range(8):
                        np.add.at(codes, 8 * v + e, 1)
            np.add.at(codes, np.arange(8 * nvec, numel), 1)  # the tail, by the last CTA
        elif entry == "fp8d_act_quant_tensor_redundant":
            # Every CTA runs the same amax loop over ALL of x (indices independent of blockIdx): model it
            # once (it is the same in every CTA) with the 16-byte path for bf16 x (8 elements a load) plus the scalar tail.
            nvec = numel // 8
            for i0 in range(0, nvec, nt):
                v = i0 + tid
                v = v[v < nvec]
                for j in range(8):
                    np.add.at(amax_reads, 8 * v + j, 1)
            for i0 in range(8 * nvec, numel, nt):
                idx = i0 + tid
                np.add.at(amax_reads, idx[idx < numel], 1)
            scales[0] += 1  # block 0 writes it
            for i0 in range(0, numel, 4 * nb * nt):
                for j in range(4):
                    idx = i0 + 4 * np.arange(nb * nt) + j
                    np.add.at(codes, idx[idx < numel], 1)
        elif entry == "fp8d_act_amax_partial":
            for i0 in range(0, numel, nb * nt):
                idx = i0 + np.arange(nb * nt)
                np.add.at(amax_reads, idx[idx < numel], 1)
        else:  # fp8d_act_quant_tensor_apply: block 0 writes the scale
            assert entry == "fp8d_act_quant_tensor_apply", entry
            scales[0] += 1
            for i0 in range(0, numel, 4 * nb * nt):
                for j in range(4):
                    idx = i0 + 4 * np.arange(nb * nt) + j
                    np.add.at(codes, idx[idx < numel], 1)
    return codes, scales, amax_reads


@pytest.mark.parametrize("m,k", [(1, 16), (2, 1040), (9, 1040), (32, 1040), (17, 4096), (31, 4096), (32, 4096),
                                 (16, 4096), (6, 129), (1, 7), (32, 16384), (64, 8192), (1, 4096), (2, 4096),
                                 (1, 8200), (3, 2730), (1, 14336), (2, 20000), (3, 4100), (8, 8192)])
def test_act_quant_plan_writes_every_code_once(m, k):
    from dispatch.formats import ActGranularity
    from kernels_cuda import compiler

    assert f"#define FP8D_ACTQ_VECS {VECS}" in (compiler.CSRC / "act_quant.cu").read_text()

    for g in ActGranularity:
        codes, scales, amax_reads = _act_quant_coverage(m, k, g)
        assert (codes == 1).all(), (g, m, k, "codes written", np.unique(codes))
        assert (scales == 1).all(), (g, m, k, "scales written", np.unique(scales))
        assert (amax_reads == 1).all(), (g, m, k, "amax reads", np.unique(amax_reads))


def test_w8a8_gemv_mma_chains_stay_within_one_k_step():
    """Every W8A8 MMA accumulates into the per-step `part` fragment (the policy's kPartial routes half_mma to
    it in the shared driver), which is folded into the fp32 accumulator once per 128-wide step (scaled for
    fp8_block, plain for tensor/token): no MMA accumulator chain spans steps, like the fp8_block path that
    passed on the H200."""
    from kernels_cuda import compiler

    src = (compiler.CSRC / "gemv_w8a8.cu").read_text()
    calls = re.findall(r"fp8d_mma_\w+\(([^,]+),", src)
    assert calls and all(c.strip() == "d[mt][nt]" for c in calls), calls
    assert "static constexpr bool kPartial = true;" in src
    assert "acc[mt][nt][c] += part[mt][nt][c]" in src
    driver = (compiler.CSRC / "skinny_common.cuh").read_text()
    assert "float(&dst)[MT][NT][4] = P::kPartial ? part : acc;" in driver
    assert "if constexpr (P::kPartial) fp8d_zero<MT * NT * 4>(&part[0][0][0]);" in driver


def test_gemv_sources_share_one_driver():
    """The two GEMV families are policies of skinny_common.cuh's fp8d_skinny_gemv: neither carries its own
    main loop, reduction or epilogue."""
    from kernels_cuda import compiler

    for name in ("gemv_w8a16.cu", "gemv_w8a8.cu"):
        src = (compiler.CSRC / name).read_text()
        # the one-launch W8A8 variant (FP8D_CFG_FQ): its prologue quantizes x with barriers, then the same driver runs
        src, _, fq = src.partition('#else\n#include "act_quant_common.cuh"')
        assert "fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);" in src
        assert "__syncthreads" not in src and "fp8d_red" not in src and "fp8d_load128(" not in src
        if fq:
            assert "fp8d_skinny_gemv(p, w, bias, y, M, N, K, bias_kind, out_kind);" in fq
            assert "fp8d_red[(" not in fq and "fp8d_load128(" not in fq and "for (int s0" not in fq


def test_precompile_fills_the_cache_the_launchers_read(tmp_path, monkeypatch):
    """tools/perf/precompile_cuda.py compiles the modules the launchers name (`_launch.gemv_module` and friends), so
    what it caches is what a launch looks up: after it ran, the launcher's own request (through `_gemv_spec` and
    `_act_quant_launches`, with only the GPU load replaced) is a cache hit, and a request it did not cover is not."""
    _nvrtc_or_skip()
    monkeypatch.setenv("FP8DISPATCH_CACHE_DIR", str(tmp_path))
    from dispatch.formats import ActGranularity
    from kernels_cuda import _launch, compiler
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import GemvConfig
    from tools.perf import precompile_cuda as pc

    items = pc.variants("sm_90", ("native",))
    assert {i[0] for i in items} == {"gemv", "act_quant", "dequant", "scale_cols", "wgmma_gemm"} and len(items) > 100
    assert all(i[3] == ("sm_90a" if i[0] == "wgmma_gemm" else "sm_90") for i in items)
    # the wgmma GEMM's launcher compiles module(fmt, cfg) for compile_arch("sm_90"): every config of its spaces is listed
    from kernels_cuda import _wgmma_gemm
    from kernels_cuda.candidates import wgmma_configs

    wg = {(i[1], i[2]) for i in items if i[0] == "wgmma_gemm"}
    assert all(_wgmma_gemm.module(f, c)[::2] in wg for f in _wgmma_gemm.FORMATS for c in wgmma_configs())
    assert not [i for i in pc.variants("sm_89", ("native",)) if i[0] == "wgmma_gemm"]
    items = [i for i in items if i[0] != "wgmma_gemm"]
    cfg = GemvConfig(8, 1, 2)
    w16 = _launch.gemv_module(False, SCALE_CODE[Format.FP8_ROW], DTYPE_CODE[torch.bfloat16], 1, cfg)
    w8 = _launch.gemv_module(True, ACTQ_CODE[ActGranularity.PER_TOKEN], 0, 1, cfg)
    picked = [i for i in items if (i[1], i[2]) in {(w16[0], w16[2]), (w8[0], w8[2])} or i[0] == "act_quant"]
    assert len(picked) == 3
    for it in picked:
        assert pc._run_safe(it) == ""
    assert len(list((tmp_path / "cuda").glob("*.cubin"))) == 3
    seen = []
    real = compiler.compile_module

    def spy(*a, **k):
        c = real(*a, **k)
        seen.append(c.cached)
        return c

    monkeypatch.setattr(compiler, "compile_module", spy)
    monkeypatch.setattr(_launch._driver, "load", lambda key, entry, device, build: build())  # no GPU: compile only
    _launch._gemv_spec.__wrapped__(False, SCALE_CODE[Format.FP8_ROW], DTYPE_CODE[torch.bfloat16], 1, 4096, cfg, 0,
                                   "sm_90", False, False)
    _launch._gemv_spec.__wrapped__(True, ACTQ_CODE[ActGranularity.PER_TOKEN], 0, 1, 4096, cfg, 0, "sm_90", False,
                                   False)
    _launch._act_quant_launches.__wrapped__(1, 4096, ActGranularity.PER_TOKEN, 0, "sm_90", False)
    assert seen == [True, True, True]
    _launch._gemv_spec.__wrapped__(False, SCALE_CODE[Format.FP8_ROW], DTYPE_CODE[torch.bfloat16], 9, 4096, cfg, 0,
                                   "sm_90", False, False)  # a module not precompiled: compiled now
    assert seen[-1] is False


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_three_ctas_at_ring_1_matches_ptxas(arch):
    """configs.THREE_CTAS_AT_RING_1 (what default_gemv_config's one-wave rule relies on) is what ptxas does: the
    listed pairs fit 80 registers a thread at one token tile, one row tile and a ring of 1 (three 8-warp CTAs per
    SM) on every target; the unlisted ones do not on sm_90."""
    _nvrtc_or_skip()
    from dispatch.formats import ActGranularity
    from kernels_cuda import _launch, compiler
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE, SCALE_CODE
    from kernels_cuda.configs import THREE_CTAS_AT_RING_1, GemvConfig

    actq = {Format.FP8_TENSOR: ActGranularity.PER_TENSOR, Format.FP8_ROW: ActGranularity.PER_TOKEN,
            Format.FP8_BLOCK: ActGranularity.PER_TOKEN_GROUP_128}
    pairs = [(Act.BF16, f) for f in Format] + [(Act.FP8, f) for f in actq]
    for act, fmt in pairs:
        if act is Act.BF16:
            key = _launch.gemv_module(False, SCALE_CODE[fmt], DTYPE_CODE[torch.bfloat16], 1, GemvConfig(8, 1, 1))
        else:
            key = _launch.gemv_module(True, ACTQ_CODE[actq[fmt]], 0, 1, GemvConfig(8, 1, 1))
        regs = compiler.ptxas_resources(compiler.compile_module(key[0], arch, dict(key[2])).log)["registers"]
        if (act, fmt) in THREE_CTAS_AT_RING_1:
            assert regs <= 80, (arch, act, fmt, regs)
        elif arch == "sm_90":
            assert regs > 80, (arch, act, fmt, regs)


def test_inline_quant_w8a8_support_rules_and_shared_memory():
    """cuda.w8a8_gemv_inline serves M <= 2 tokens of bf16 / fp16 x for the three W8A8 formats; its configs are the
    GEMV's (the shared-memory ring included) that fit; the size it asks for is the GEMV's layout plus the amax pass's
    scale slots (1 per tensor, M per token, none for 1x128 groups), which the kernel places after the ring."""
    from dispatch.formats import ActGranularity
    from kernels_cuda import _w8a8_inline as iq
    from kernels_cuda.candidates import CudaW8A8GemvInline
    from kernels_cuda.configs import GemvConfig

    t, c = Target.simulated_for("sm_90"), CudaW8A8GemvInline()
    for fmt in (Format.FP8_BLOCK, Format.FP8_ROW, Format.FP8_TENSOR):
        assert c.supports(Problem(fmt, Act.FP8, 2, 4096, 14336), t)
    assert "1 <= M <= 2" in c.supports(Problem(Format.FP8_ROW, Act.FP8, 3, 4096, 4096), t).reason
    assert "bf16 or fp16" in c.supports(Problem(Format.FP8_ROW, Act.FP8, 1, 4096, 4096,
                                                x_dtype=torch.float32), t).reason
    assert "multiple of 16" in c.supports(Problem(Format.FP8_TENSOR, Act.FP8, 1, 4096, 1000), t).reason
    assert (Format.MXFP8, Act.BF16) not in c.serves
    for m in (1, 2):
        p = Problem(Format.FP8_BLOCK, Act.FP8, m, 4096, 4096)
        cfgs = c.configs(p, t)
        assert cfgs and any(g.smem_ring for g in cfgs) and c.default_config(p, t) in cfgs
        assert all(iq.unsupported_reason(m, torch.bfloat16, g) is None for g in cfgs)
    assert [iq.quantized_tokens(m) for m in (1, 2)] == [1, 2]
    ring = GemvConfig(8, 2, 1, 3)
    for g, slots in [(ActGranularity.PER_TENSOR, 1), (ActGranularity.PER_TOKEN, 2),
                     (ActGranularity.PER_TOKEN_GROUP_128, 0)]:
        assert iq.smem_bytes(2, g, ring) == ring.smem_bytes(2) + 4 * slots
    from kernels_cuda import compiler

    src, driver = (compiler.CSRC / "gemv_w8a8.cu").read_text(), (compiler.CSRC / "skinny_common.cuh").read_text()
    # the one-launch kernels place their own shared memory where the driver's layout ends (with its ring, if any): one
    # formula, the one the driver's ring starts from (GemvConfig.smem_bytes mirrors it; the GPU tests check the bits)
    assert src.count("Fp8dSmemLayout<FP8D_CFG_MT, FP8D_CFG_NT>::end(fp8d_red, blockDim.x >> 5, ") == 2
    assert "uint4* smem_ring = Smem::ring(fp8d_red, nwarps);" in driver


def test_inline_quant_w8a8_entries_are_not_lent_to_a_longer_k():
    """The fallback chain lends a tuned in-loop GEMV entry to a nearby untabled shape only where its amax pass (per
    tensor / per token: all of x per CTA) is no longer than at the tuned K; 1x128 groups have no amax pass."""
    from kernels_cuda.candidates import CudaW8A8GemvInline

    c = CudaW8A8GemvInline()
    for fmt in (Format.FP8_TENSOR, Format.FP8_ROW):
        tuned = Problem(fmt, Act.FP8, 1, 4096, 14336)
        assert "amax pass" in c.lending_refused(tuned, Problem(fmt, Act.FP8, 1, 5120, 25600), SM90)
        assert c.lending_refused(tuned, Problem(fmt, Act.FP8, 1, 5120, 14336), SM90) is None
        assert c.lending_refused(tuned, Problem(fmt, Act.FP8, 1, 2112, 7168), SM90) is None
    tuned = Problem(Format.FP8_BLOCK, Act.FP8, 1, 4096, 14336)
    assert c.lending_refused(tuned, Problem(Format.FP8_BLOCK, Act.FP8, 1, 5120, 25600), SM90) is None


def test_inline_quant_w8a8_modules_compile_without_spills():
    """Every module cuda.w8a8_gemv_inline can ask for on the H200 (each format, M = 1 and 2, every config it offers,
    bf16 x) compiles for sm_90, sm_89 and sm_80 without local-memory spills, and the sm_90 module quantizes with the
    hardware e4m3 encode (F2FP) and exchanges codes by shuffles (SHFL)."""
    compiler = _nvrtc_or_skip()
    from dispatch.formats import ActGranularity
    from kernels_cuda import isa
    from kernels_cuda._kinds import ACTQ_CODE
    from kernels_cuda._w8a8_inline import inline_module
    from kernels_cuda.candidates import CudaW8A8GemvInline

    t, c = Target.simulated_for("sm_90"), CudaW8A8GemvInline()
    keys = set()
    for g, fmt in ((ActGranularity.PER_TENSOR, Format.FP8_TENSOR), (ActGranularity.PER_TOKEN, Format.FP8_ROW),
                   (ActGranularity.PER_TOKEN_GROUP_128, Format.FP8_BLOCK)):
        for m in (1, 2):
            for cfg in c.configs(Problem(fmt, Act.FP8, m, 4096, 4096), t):
                keys.add(inline_module(ACTQ_CODE[g], m, torch.bfloat16, cfg))
    assert len(keys) >= 30
    bad = []
    for name, _, d in sorted(keys):
        for arch in ("sm_90", "sm_89", "sm_80"):
            res = compiler.ptxas_resources(compiler.compile_module(name, arch, dict(d)).log)
            if res.get("spill_bytes", 0):
                bad.append((arch, d, res))
    assert not bad, bad
    if isa.cuobjdump() is not None:
        name, _, d = sorted(keys)[0]
        ops = isa.sass_opcodes(compiler.compile_module(name, "sm_90", dict(d)).path)
        assert any(o.startswith("F2FP") for o in ops) and any(o.startswith("SHFL") for o in ops)


def test_one_launch_w8a8_support_rules_and_shared_memory():
    """cuda.w8a8_gemv_fq serves one token tile whose codes fit 48 KB of shared memory; its configs are the GEMV's that
    fit; the size it asks for is the driver's layout + the scale slots (16-byte aligned) + M rows of codes, with a row
    pitch = 64 mod 128 when two tokens share a load phase (conflict-free 16-byte reads)."""
    from dispatch.formats import ActGranularity
    from kernels_cuda import _w8a8_fused as fq
    from kernels_cuda.candidates import CudaW8A8GemvFused
    from kernels_cuda.configs import GemvConfig

    t, c = Target.simulated_for("sm_90"), CudaW8A8GemvFused()
    assert c.supports(Problem(Format.FP8_BLOCK, Act.FP8, 1, 4096, 14336), t)
    assert c.supports(Problem(Format.FP8_ROW, Act.FP8, 8, 4096, 4096), t)
    assert "1 <= M <= 8" in c.supports(Problem(Format.FP8_ROW, Act.FP8, 9, 4096, 4096), t).reason
    assert "shared memory" in c.supports(Problem(Format.FP8_TENSOR, Act.FP8, 4, 4096, 14336), t).reason
    assert "multiple of 16" in c.supports(Problem(Format.FP8_TENSOR, Act.FP8, 1, 4096, 1000), t).reason
    assert (Format.FP8_ROW, Act.BF16) not in c.serves
    for m, k in [(1, 4096), (4, 4096), (8, 2560), (3, 1040)]:
        p = Problem(Format.FP8_BLOCK, Act.FP8, m, 4096, k)
        cfgs = c.configs(p, t)
        assert cfgs and all(fq.unsupported_reason(m, k, ActGranularity.PER_TOKEN_GROUP_128, g) is None for g in cfgs)
        assert c.default_config(p, t) in cfgs
        pitch = fq.code_pitch(m, k)
        assert pitch % 16 == 0 and pitch >= k and (m == 1 or pitch % 128 == 64)
    cfg = GemvConfig(8, 1, 4)
    for g, slots in [(ActGranularity.PER_TENSOR, 1), (ActGranularity.PER_TOKEN, 3),
                     (ActGranularity.PER_TOKEN_GROUP_128, 3 * 9)]:
        assert fq.scale_slots(3, 1040, g) == slots
        assert fq.smem_bytes(3, 1040, g, cfg) == cfg.smem_bytes(3) + 4 * (-(-slots // 4) * 4) + 3 * fq.code_pitch(3, 1040)


def test_quant_timeline_probe_kernels_compile(monkeypatch):
    """tools/perf/probe_quant_timeline.py compiles its traced kernels (tools/perf/csrc/trace_w8a8.cu, the product's
    act_quant.cu and gemv_w8a8.cu included) beside the product's sources: the module must build for sm_90 at the
    route's M = 1 and 16 configs, hold the traced entries, and leave compiler.sources as it was outside the probe."""
    compiler = _nvrtc_or_skip()
    from kernels_cuda._launch import gemv_module
    from kernels_cuda.configs import GemvConfig
    from tools.perf import probe_quant_timeline as probe

    real = compiler.sources
    monkeypatch.setattr(compiler, "sources", probe.trace_sources(real))
    for actq in (0, 1, 2):
        for m, cfg in ((1, GemvConfig(8, 1, 4)), (16, GemvConfig(4, 1, 1, 3))):
            _, _, d = gemv_module(True, actq, 0, m, cfg)
            log = compiler.compile_module(probe.SOURCE, "sm_90", dict(d)).log
            assert compiler.ptxas_resources(log).get("spill_bytes", 0) == 0
            for entry in ("trace_w8a8_gemv", "trace_act_quant_tensor", "trace_act_quant_tensor_t1",
                          "trace_act_quant_tensor_t2", "trace_act_quant_tensor_1rt", "fp8d_act_quant_group",
                          "fp8d_w8a8_gemv"):
                assert f"'{entry}'" in log, entry
            # the one-read quantizer with 1 or 2 slots fits its 1024-thread CTA beside a resident GEMV CTA (256 threads
            # x 128 registers): at most 32 registers a thread, as the shipped per-tensor kernel
            for slots in (1, 2):
                entry = f"trace_act_quant_tensor_1rt_s{slots}"
                regs = re.search(rf"entry function '{entry}'.*?Used (\d+) registers", log, re.S)
                assert regs and int(regs.group(1)) <= 32, (entry, regs and regs.group(1))
    monkeypatch.undo()
    assert compiler.sources is real and probe.SOURCE not in compiler.sources()
