"""The wgmma register-hazard checks (dispatch.isa.wgmma_register_hazards on the SASS, ptx_wgmma_register_hazards on
the PTX) and the Triton W8A16 GEMM under them.

An sm_90 HGMMA reads its register A fragment and accumulators asynchronously, until a WARPGROUP.DEPBAR
retires it. On the H200 (session 8) the W8A16 GEMM gave non-finite outputs, nondeterministically, at 2 CTAs per
SM: the next K step's decode wrote the A fragments of wgmmas still in flight. The race is already in the PTX
Triton 3.6 emits (it decodes a whole K tile before the tile's k16 wgmmas and leaves three of them in flight across
the back edge), so no ptxas can remove it (ptxas 13.4, which has the fix of triton-lang/triton PR 11781, keeps
it: session 18). The kernel's fix is WGMMA_DRAIN. These tests pin both checkers and the fix for every config the
autotuner may choose, on the CPU: AOT compile for sm_90, check the PTX, disassemble, check the SASS.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import subprocess

import pytest

from dispatch.isa import ptx_wgmma_register_hazards, wgmma_register_hazards

triton = pytest.importorskip("triton")


def _sass(lines: list[str]) -> str:
    """cuobjdump-style text for instruction strings, 16 bytes apart from 0x0000."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {ins} ;  /* 0x0 */" for i, ins in enumerate(lines))


def test_write_to_the_a_fragment_of_an_unretired_hgmma_is_a_hazard():
    sass = _sass(["WARPGROUP.ARRIVE", "HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR8], R24, gsb0",
                  "LDS.U16 R90, [R16+UR11+0x10000]",  # R88..R91 is the A fragment
                  "WARPGROUP.DEPBAR.LE gsb0, 0x0", "LDS.U16 R91, [R16+UR11+0x10000]"])
    hz = wgmma_register_hazards(sass)
    assert [(h.at, h.registers, h.hgmma_at) for h in hz] == [(0x20, (90,), 0x10)]


def test_accumulators_are_guarded_too_but_chaining_is_not_a_write():
    sass = _sass(["HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR8], R24, gsb0",
                  "HGMMA.64x64x16.F32.BF16 R24, R92, gdesc[UR8], R24, gsb0",  # chains the same accumulators
                  "FADD R30, R30, 1",  # R24..R55 are the 64x64 fp32 accumulators
                  "WARPGROUP.DEPBAR.LE gsb0, 0x1",  # the newer group is still in flight
                  "MOV R89, RZ",  # A fragment of the retired (older) group: safe
                  "MOV R93, RZ"])  # A fragment of the newer one: not yet
    got = [(h.at, h.registers, h.hgmma_at) for h in wgmma_register_hazards(sass)]
    assert got == [(0x20, (30,), 0x00), (0x20, (30,), 0x10), (0x50, (93,), 0x10)]


def test_the_next_iteration_of_a_loop_counts_against_the_last_hgmmas():
    # The shape ptxas produced for the W8A16 GEMM: codes loaded at the loop top into the registers of an
    # HGMMA that the previous iteration left in flight (DEPBAR.LE 1 keeps the newest group unretired).
    body = ["LDS.U16 R92, [R16+UR11+0x10000]",
            "HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR8], R24, gsb0",
            "HGMMA.64x128x16.F32.BF16 R24, R92, gdesc[UR8], R24, gsb0",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1"]
    racy = _sass(["MOV R1, RZ"] + body + ["@P0 BRA 0x10", "EXIT"])  # the loop top is 0x10
    assert [(h.at, h.registers, h.hgmma_at) for h in wgmma_register_hazards(racy)] == [(0x10, (92,), 0x30)]
    drained = _sass(["MOV R1, RZ", "WARPGROUP.DEPBAR.LE gsb0, 0x0"] + body + ["@P0 BRA 0x10", "EXIT"])
    assert wgmma_register_hazards(drained) == []


def test_the_walk_follows_branches_not_the_layout():
    # An if / else with a loop of HGMMAs in each arm, as the W8A16 GEMM's two mxfp8 K loops are laid out: the
    # first arm jumps over the second (unconditional BRA), which is reached only from the branch before both.
    # Code of the second arm that writes registers of the first arm's HGMMAs is not a hazard; the join is
    # reached from both arms, so a write there before the wait is one.
    lines = ["@P0 BRA 0x50",                                                # 0x00: to the second arm
             "HGMMA.64x64x16.F32.BF16 R24, R88, gdesc[UR8], R24, gsb0",     # 0x10: first arm
             "@P1 BRA 0x10",                                                # 0x20: its loop
             "BRA 0x80",                                                    # 0x30: to the join
             "NOP",                                                         # 0x40
             "MOV R88, RZ",                                                 # 0x50: second arm writes R88
             "HGMMA.64x64x16.F32.BF16 R24, R92, gdesc[UR8], R24, gsb0",     # 0x60
             "@P1 BRA 0x60",                                                # 0x70: its loop, then falls to the join
             "MOV R93, RZ",                                                 # 0x80: join, before the wait
             "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MOV R89, RZ", "EXIT"]
    got = sorted({(h.at, h.hgmma_at) for h in wgmma_register_hazards(_sass(lines))})
    assert got == [(0x80, 0x60)]  # R93 of the second arm's HGMMA; the MOV R88 at 0x50 is no hazard
    # Where the first arm falls through instead (a predicated jump), the second arm's write is one.
    lines[3] = "@P2 BRA 0x80"
    got = sorted({(h.at, h.hgmma_at) for h in wgmma_register_hazards(_sass(lines))})
    assert got == [(0x50, 0x10), (0x80, 0x60)]


def test_shared_memory_operands_and_stores_are_not_register_writes():
    sass = _sass(["HGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, gsb0",  # A from shared memory
                  "STS [R88], R90", "ISETP.GE.AND P0, PT, R88, R2, PT", "LDS.U16 R88, [R2]",
                  "WARPGROUP.DEPBAR.LE gsb0, 0x0"])
    assert wgmma_register_hazards(sass) == []


def _ptx(lines: list[str]) -> str:
    """A PTX function body around `lines` (each a statement without its ';', a label, or a directive)."""
    body = "\n".join(ln if ln.endswith(":") or ln.lstrip().startswith(".loc") else f"\t{ln};" for ln in lines)
    return f".visible .entry k(\n\t.param .u64 p\n)\n{{\n\t.reg .b32 %r<600>;\n{body}\n}}\n"


_WGMMA = ("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%r100,%r101,%r102,%r103}, {%r%A,%r%B,%r%C,%r%D}, "
          "%rd1, p, 1, 1, 0")


def _wgmma(a: int) -> str:
    return _WGMMA.replace("%A", str(a)).replace("%B", str(a + 1)).replace("%C", str(a + 2)).replace("%D", str(a + 3))


def test_ptx_the_next_iteration_rewrites_the_a_fragment_of_a_wgmma_left_in_flight():
    # Triton 3.6's W8A16 shape: the whole tile decoded at the loop top, then its wgmmas, wait_group 1 after each.
    body = ["fma.rn.bf16x2 %r10, %r1, %r2, %r3", "fma.rn.bf16x2 %r14, %r1, %r2, %r3",
            "wgmma.fence.sync.aligned", _wgmma(10), "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
            _wgmma(14), "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1"]
    racy = _ptx(["mov.b32 %r1, 0", "$L__BB0_1:"] + body + ["@%p1 bra $L__BB0_1", "ret"])
    got = [(h.statement.split()[1], h.registers) for h in ptx_wgmma_register_hazards(racy)]
    assert got == [("%r14,", ("%r14",))]  # the second wgmma of the last iteration is still in flight at the top
    # The drain as the kernel emits it: inline asm after a .loc line that has no ';' (it must not hide the wait).
    drained = _ptx(["mov.b32 %r1, 0", "$L__BB0_1:", ".loc 4 22 92", "{", "wgmma.wait_group.sync.aligned 0",
                    "mov.b32 %r5, %r6", "}"] + body + ["@%p1 bra $L__BB0_1", "ret"])
    assert ptx_wgmma_register_hazards(drained) == []


def test_ptx_accumulator_chaining_and_shared_operands_are_not_writes():
    ptx = _ptx(["wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%r100,%r101,%r102,%r103}, %rd1, %rd2, p, 1, 1",
                _wgmma(10), "wgmma.commit_group.sync.aligned", "st.shared.b32 [%r10], %r11",
                "setp.lt.s32 %p2, %r10, 4", "add.f32 %r101, %r101, 1.0", "wgmma.wait_group.sync.aligned 0",
                "mov.b32 %r10, 0", "ret"])
    got = [(h.registers, h.wgmma_at) for h in ptx_wgmma_register_hazards(ptx)]
    assert got == [(("%r101",), 0)]  # only the add to an accumulator before the wait


def _wait_block() -> list[str]:
    """An mbarrier wait as Triton's inline asm spells it: a block of its own with a local `waitLoop` label."""
    return ["{", "waitLoop:", "mbarrier.try_wait.parity.shared::cta.b64 complete, [%r50], %r51",
            "@!complete bra.uni waitLoop", "}"]


def test_ptx_labels_are_scoped_to_their_block():
    # Two K tiles per loop iteration (session 24's paired-K experiment): each tile's mbarrier wait is a block with its
    # own `waitLoop:`, the first tile's wgmmas are retired (wait_group 0) before the second tile is decoded, and the
    # second's are left in flight across the back edge. Resolved by name alone, the first block's branch went to the
    # second block's label, skipped the wait_group and reported the second decode as a hazard.
    def loop(retire_first: bool) -> list[str]:
        return (["$L__BB0_1:"] + _wait_block() + ["fma.rn.bf16x2 %r10, %r1, %r2, %r3", "wgmma.fence.sync.aligned",
                _wgmma(10), "wgmma.commit_group.sync.aligned"]
                + (["wgmma.wait_group.sync.aligned 0"] if retire_first else []) + _wait_block()
                + ["fma.rn.bf16x2 %r14, %r1, %r2, %r3", _wgmma(14), "wgmma.commit_group.sync.aligned",
                   "@%p1 bra $L__BB0_1", "wgmma.wait_group.sync.aligned 0", "ret"])

    assert ptx_wgmma_register_hazards(_ptx(loop(retire_first=True))) == []
    # without that wait_group nothing retires inside the loop: each decode rewrites the fragment of the previous
    # iteration's wgmma of the same tile
    got = sorted({h.registers for h in ptx_wgmma_register_hazards(_ptx(loop(retire_first=False)))})
    assert got == [("%r10",), ("%r14",)]


# --- the Triton W8A16 GEMM on sm_90 -------------------------------------------------------------------

def _tool(name: str) -> str:
    from kernels_triton.isa import _tool as tool
    return tool(name)


def _hazards_of(job) -> tuple[str, int, int]:
    """(variant name, SASS hazards, PTX hazards) of one kernel config compiled for sm_90 (a worker process). job: ("w8a16",
    wscale, x, GemmConfig fields, WGMMA_DRAIN override or None[, MX_FOLD]) | ("w8a8", scales, GemmConfig fields) |
    ("gemv", wscale, a_mode, GemvConfig fields[, WGMMA_DRAIN override])."""
    from dispatch.target import Target
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton._gemm_isa import _w8a8_variant, _w8a16_variant, compile_variant
    from kernels_triton._gemm_layouts import A8Scales, WScale
    from kernels_triton.configs import GemvConfig
    from kernels_triton.isa import gemv_variant
    t = Target.simulated_for("sm_90")
    kind = job[0]
    if kind == "w8a16":
        _, ws, x, fields, drain, *fold = job
        v = _w8a16_variant(t, WScale[ws], x, GemmConfig(**fields), mx_fold=fold[0] if fold else True)
        if drain is not None:
            v = dataclasses.replace(v, constexprs=dict(v.constexprs, WGMMA_DRAIN=drain))
    elif kind == "w8a8":
        _, sc, fields = job
        v = _w8a8_variant(t, A8Scales[sc], GemmConfig(**fields))
    else:
        _, ws, a_mode, fields, *drain = job
        v = gemv_variant("gemv", "sm_90", WScale[ws], a_mode, GemvConfig(**fields))
        if drain:
            v = dataclasses.replace(v, constexprs=dict(v.constexprs, WGMMA_DRAIN=drain[0]))
    from kernels_triton.isa import sass_of
    ck = compile_variant(v)
    sass = sass_of(ck.asm["cubin"])
    return (f"{job[:3]} {job[3:][1:]} {v.num_warps}w", len(wgmma_register_hazards(sass)) if "HGMMA" in sass else 0,
            len(ptx_wgmma_register_hazards(ck.asm["ptx"])))


# The config that gave non-finite outputs on the H200 (fp8_row at N = 28672 and 128256, 2 CTAs per SM).
_RACY = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4, swap_ab=True, tma=False,
             split_k=0)


def _ptxas_version() -> tuple[int, int]:
    out = subprocess.run([_tool("ptxas"), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# A pipelined tensor-core config of the decode GEMV (M = 32..64 buckets) with the same hazard without the drain.
_RACY_GEMV = dict(block_m=64, block_n=64, block_k=128, split_k=0, num_warps=4, num_stages=3, fuse_act_quant=True)


@pytest.mark.parametrize("kind", ["gemm", "gemv"])
def test_the_racy_configs_have_hazards_without_the_drain_and_none_with_it(kind):
    """Without WGMMA_DRAIN the PTX itself writes the A fragments of wgmmas in flight (whatever assembles it) and the
    SASS checker finds the same in what ptxas made of it; with the drain both are clean."""
    job = (lambda d: ("w8a16", "ROW", "bf16", _RACY, d)) if kind == "gemm" else \
        (lambda d: ("gemv", "ROW", 0, _RACY_GEMV, d))
    assert _hazards_of(job(True))[1:] == (0, 0)
    _, racy_sass, racy_ptx = _hazards_of(job(False))
    assert racy_ptx > 0
    if _ptxas_version() < (13, 3):  # Triton's bundled 12.8; 13.4 gave the same (session 18), newer ones unchecked
        assert racy_sass > 0


def _gemv_jobs() -> list[tuple]:
    """Every (scale layout, activation mode, tensor-core GemvConfig) the sm_90 decode space holds over M buckets
    1..64 and a few shapes (the FMA configs issue no wgmma)."""
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_triton._gemm_layouts import W8A16_LAYOUT
    from kernels_triton._gemv import group_k_of
    from kernels_triton.configs import gemv_configs
    t = Target.simulated_for("sm_90")
    jobs = set()
    for fmt in Format:
        for act in (Act.BF16, Act.FP8) if fmt is not Format.MXFP8 else (Act.BF16,):
            for m in (1, 2, 4, 8, 16, 32, 64):
                for n, k in ((4096, 4096), (1000, 3000), (28672, 4096)):
                    for c in gemv_configs(Problem(fmt, act, n, k, m), t, group_k_of(fmt)):
                        if c.use_dot:
                            a_mode = 0 if act is Act.BF16 else (2 if c.fuse_act_quant else 1)
                            jobs.add(("gemv", W8A16_LAYOUT[fmt].name, a_mode, tuple(sorted(dataclasses.asdict(c).items()))))
    return [(kind, ws, a, dict(fields)) for kind, ws, a, fields in sorted(jobs)]


@pytest.mark.slow
def test_every_sm90_wgmma_config_is_free_of_wgmma_register_hazards():
    """Each config of the sm_90 autotune spaces that issues wgmma (what a table may name), as the launchers run
    it: the W8A16 GEMM (TENSOR and ROW scales share their main loop: ROW stands for both; MX32 with bf16 x in both
    its decodes, folded and not), the W8A8 GEMM, and the
    tensor-core configs of the decode GEMV."""
    from dispatch.target import Target
    from kernels_triton._gemm_config import w8a8_configs, w8a16_configs
    from kernels_triton._gemm_layouts import A8Scales, WScale
    t = Target.simulated_for("sm_90")
    jobs: list[tuple] = []
    for ws in (WScale.ROW, WScale.BLOCK128, WScale.MX32):
        for x in ("bf16", "fp16"):
            jobs += [("w8a16", ws.name, x, dataclasses.asdict(c), None) for c in w8a16_configs(t, ws, x == "fp16")]
            if ws is WScale.MX32 and x == "bf16":  # the unfolded decode runs too (scale codes > 134, flag not yet read)
                jobs += [("w8a16", ws.name, x, dataclasses.asdict(c), None, False) for c in w8a16_configs(t, ws, False)]
    for sc in A8Scales:
        jobs += [("w8a8", sc.name, dataclasses.asdict(c)) for c in w8a8_configs(t, sc)]
    jobs += _gemv_jobs()
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(_hazards_of, jobs))
    bad = [f"{name}: {n} SASS / {p} PTX hazards" for name, n, p in results if n or p]
    assert not bad, "\n".join(bad)
    assert len(results) == len(jobs) > 100


# --- the run-time check (kernels_triton._sass_guard) ----------------------------------------------------------

class _FakeJit:
    """What _sass_guard reads of a triton.JITFunction: its per-device caches (kernel cache first)."""

    def __init__(self, kernels: dict):
        self.device_caches = {0: (kernels, None, None, None, None)}


def _compiled(drain: bool):
    from dispatch.target import Target
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton._gemm_isa import _w8a16_variant, compile_variant
    from kernels_triton._gemm_layouts import WScale
    v = _w8a16_variant(Target.simulated_for("sm_90"), WScale.ROW, "bf16", GemmConfig(**_RACY))
    return compile_variant(dataclasses.replace(v, constexprs=dict(v.constexprs, WGMMA_DRAIN=drain)))


def test_run_time_check_refuses_a_racy_kernel_and_checks_each_kernel_once(monkeypatch):
    from dispatch.errors import CompileError
    from kernels_triton import _sass_guard
    if _ptxas_version() >= (13, 3):
        pytest.skip("this ptxas has NVIDIA's fix: no racy kernel to build")
    calls = []
    real = _sass_guard.sass_of
    monkeypatch.setattr(_sass_guard, "sass_of", lambda cubin: calls.append(1) or real(cubin))
    good = _FakeJit({"drained": _compiled(True)})
    _sass_guard.check_new_kernels(good, "triton.w8a16_gemm")
    _sass_guard.check_new_kernels(good, "triton.w8a16_gemm")  # nothing new: no second disassembly
    assert len(calls) == 1

    class Compiling:  # an asynchronous compile's future: no hash yet, checked once it has one
        pass
    cache = {"drained": good.device_caches[0][0]["drained"], "pending": Compiling()}
    mixed = _FakeJit(cache)
    _sass_guard.check_new_kernels(mixed, "triton.w8a16_gemm")  # the drained kernel's count is cached
    assert len(calls) == 1
    cache["pending"] = _compiled(False)
    with pytest.raises(CompileError, match="writes to registers that an unfinished wgmma"):
        _sass_guard.check_new_kernels(mixed, "triton.w8a16_gemm")
    with pytest.raises(CompileError):  # and on every later call
        _sass_guard.check_new_kernels(mixed, "triton.w8a16_gemm")
    assert len(calls) == 2


def test_run_time_check_is_off_without_device_caches(monkeypatch):
    """The interpreter's functions have no device caches: nothing to check, and the check stays on for the rest of
    the process (outside the interpreter the same object switches it off, with a warning)."""
    from kernels_triton import _sass_guard
    monkeypatch.setattr(_sass_guard, "_disabled", False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _sass_guard.check_new_kernels(object(), "triton.w8a16_gemm")
    assert not _sass_guard._disabled
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.warns(RuntimeWarning, match="no device_caches"):
        _sass_guard.check_new_kernels(object(), "triton.w8a16_gemm")
    assert _sass_guard._disabled


def test_an_unknown_cache_layout_switches_the_check_off_with_one_warning(monkeypatch):
    from kernels_triton import _sass_guard
    monkeypatch.setattr(_sass_guard, "_disabled", False)

    class Odd:
        device_caches = {0: 42}
    with pytest.warns(RuntimeWarning, match="not laid out as in Triton 3.6"):
        _sass_guard.check_new_kernels(Odd(), "triton.w8a16_gemm")
    assert _sass_guard._disabled
    _sass_guard.check_new_kernels(Odd(), "triton.w8a16_gemm")  # off: no second warning, no error


def test_the_gemm_candidates_check_their_real_jit_function(monkeypatch):
    """The wiring the candidates use (kernels_triton.candidates.check_compiled) on the real triton.JITFunction: a
    compiled kernel placed in its per-device cache (under a device key no launch uses) is found and checked."""
    from dispatch.errors import CompileError
    from kernels_triton import _gemm
    from kernels_triton.candidates import check_compiled
    if _ptxas_version() >= (13, 3):
        pytest.skip("this ptxas has NVIDIA's fix: no racy kernel to build")
    fn = _gemm._w8a16_gemm_kernel
    monkeypatch.setitem(fn.device_caches, "test-device", ({"racy": _compiled(False)}, None, None, None, None))
    with pytest.raises(CompileError, match="triton.w8a16_gemm: Triton compiled"):
        check_compiled("_gemm", "_w8a16_gemm_kernel", "triton.w8a16_gemm")
