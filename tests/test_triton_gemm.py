"""Triton prefill GEMMs on the CPU: candidates, support answers, config spaces, the interpreter tests (in a
subprocess with TRITON_INTERPRET=1) and ahead-of-time compiles that pin the code structure the
performance depends on (wgmma with a register A operand, asynchronous e8m0 loads, fp8 MMA families).

None of this is a GPU validation; tests/test_triton_gemm_gpu.py is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, require_triton_interpreter
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.target import Target

ARCHS = ("sm_80", "sm_89", "sm_90", "gfx1201")


def test_interpreter_suite():
    """Runs tests/test_triton_gemm_interp.py under TRITON_INTERPRET=1 (must be set before triton imports)."""
    pytest.importorskip("triton")
    require_triton_interpreter()
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        str(REPO / "tests" / "test_triton_gemm_interp.py")],
                       cwd=str(REPO), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert re.search(r"\d+ passed", r.stdout) and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-2000:]


def _cands():
    from kernels_triton.candidates import candidates
    by_id = {c.id: c for c in candidates()}
    return by_id["triton.w8a16_gemm"], by_id["triton.w8a8_gemm"]


def test_candidates_registered_and_serve_every_pair():
    a16, a8 = _cands()
    assert a16.serves == frozenset((f, Act.BF16) for f in Format)
    assert a8.serves == frozenset({(Format.FP8_TENSOR, Act.FP8), (Format.FP8_ROW, Act.FP8), (Format.FP8_BLOCK, Act.FP8)})
    assert a16.config_type is a8.config_type


@pytest.mark.parametrize("arch", ARCHS)
def test_supported_on_every_target_with_legal_configs(arch):
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton._gemm_layouts import W8A8_LAYOUT, W8A16_LAYOUT
    a16, a8 = _cands()
    t = Target.simulated_for(arch)
    for fmt in Format:
        for xd in (torch.bfloat16, torch.float16):
            p = Problem(fmt, Act.BF16, 4096, 4096, 4096, xd, xd)
            assert a16.supports(p, t), (arch, fmt, a16.supports(p, t).reason)
            cfgs = list(a16.configs(p, t))
            assert cfgs and cfgs[0] == a16.default_config(p, t)
            for c in cfgs:
                assert isinstance(c, GemmConfig)
                assert c.legal_for_w8a16(W8A16_LAYOUT[fmt], xd == torch.float16) == ""
                assert not c.swap_ab or t.has_wgmma  # register-A operands are a wgmma feature
        if fmt in W8A8_LAYOUT:
            p = Problem(fmt, Act.FP8, 4096, 4096, 4096)
            assert a8.supports(p, t), (arch, fmt)
            for c in a8.configs(p, t):
                assert c.legal_for_w8a8(W8A8_LAYOUT[fmt]) == ""


def test_support_says_no_with_reasons():
    a16, a8 = _cands()
    sm90 = Target.simulated_for("sm_90")
    checks = [
        (a16, Problem(Format.FP8_ROW, Act.FP8, 64, 64, 64), sm90, "W8A16"),
        (a16, Problem(Format.FP8_ROW, Act.BF16, 64, 64, 64, torch.float32, torch.float32), sm90, "TF32"),
        (a8, Problem(Format.FP8_ROW, Act.BF16, 64, 64, 64), sm90, "W8A8"),
        (a16, Problem(Format.FP8_ROW, Act.BF16, 64, 64, 64), Target.simulated_for("cpu"), "GPU"),
        (a16, Problem(Format.FP8_ROW, Act.BF16, 64, 64, 64), Target.simulated_for("gfx942"), "e4m3fnuz"),
    ]
    for cand, prob, tgt, word in checks:
        s = cand.supports(prob, tgt)
        assert not s and word in s.reason, (cand.id, s)


def test_config_validation():
    from kernels_triton._gemm_config import GemmConfig
    with pytest.raises(ValueError, match="power of two"):
        GemmConfig(block_m=96)
    with pytest.raises(ValueError, match="16..256"):
        GemmConfig(block_k=512)
    assert GemmConfig.from_dict(GemmConfig(64, 64, 32).to_dict()) == GemmConfig(64, 64, 32)
    with pytest.raises(ValueError, match="warp_specialize needs tma=True and num_warps=4"):
        GemmConfig(128, 128, 128, 8, 8, 4, tma=True, warp_specialize=True)
    with pytest.raises(ValueError, match="warp_specialize needs tma=True"):
        GemmConfig(128, 128, 128, 8, 4, 4, warp_specialize=True)
    assert "W8A8 option" in GemmConfig(128, 128, 128, 8, 4, 4, tma=True, warp_specialize=True).legal_for_w8a16(
        __import__("kernels_triton._gemm_layouts", fromlist=["WScale"]).WScale.ROW, False)
    # Entries tuned before the field existed still load (it defaults to off).
    d = GemmConfig(64, 64, 32).to_dict()
    del d["warp_specialize"]
    assert GemmConfig.from_dict(d) == GemmConfig(64, 64, 32)


def test_warp_specialized_w8a8_configs_are_in_no_space():
    """They hung on the H200 (session 16; tools/perf/probe_warp_spec.py): autotune must not time them."""
    from kernels_triton._gemm_config import w8a8_configs
    from kernels_triton._gemm_layouts import A8Scales
    for arch in ARCHS:
        for sc in A8Scales:
            for m in (None, 64):
                assert not any(c.warp_specialize for c in w8a8_configs(Target.simulated_for(arch), sc, m=m))


@pytest.mark.parametrize("scales", ["tensor_tensor", "group_block"])
def test_aot_sm90_warp_specialized_w8a8(scales):
    """warp_specialize really specializes ahead of time (Triton ignores the flag silently where it cannot): 12 warps (a TMA
    producer and two consumer warpgroups, registers moved with setmaxnreg), no spills, one wgmma wait per K tile
    in the consumers' loop (the explicit promotion for tensor scales), and the [BLOCK_N] weight-scale gather of
    fp8_block reduced to one scalar load."""
    from dispatch.isa import main_loop_instructions
    from kernels_triton import isa as I
    ck = _compile("sm_90", f"w8a8_gemm[{scales},tma,ws]")
    assert ck.metadata.num_warps == 12
    sass = I.sass_of(ck.asm["cubin"])
    assert "USETMAXREG" in sass
    assert I.ptxas_verbose(ck.asm["ptx"], "sm_90").spill_bytes == 0
    loop = main_loop_instructions(sass)
    assert sum("QGMMA" in i for i in loop) == 4 and sum("WARPGROUP.DEPBAR" in i for i in loop) <= 1, loop
    assert sum(i.startswith("LDG") for i in loop) <= 3, loop


def test_isa_variants_cover_every_layout_and_target():
    from kernels_triton._gemm_isa import gemm_isa_variants
    vs = gemm_isa_variants()
    names = {(v.target, v.kernel.split("[")[0] + "[" + v.kernel.split("[")[1].split(",")[0].rstrip("]")) for v in vs}
    for arch in ARCHS:
        for ws in ("tensor", "row", "block128", "mx32"):
            assert (arch, f"w8a16_gemm[{ws}") in names
        for sc in ("tensor_tensor", "token_row", "group_block"):
            assert (arch, f"w8a8_gemm[{sc}") in names
    assert all(v.supported for v in vs)


def _compile(arch: str, kernel: str):
    pytest.importorskip("triton")
    from kernels_triton._gemm_isa import compile_variant, gemm_isa_variants
    (v,) = [v for v in gemm_isa_variants((arch,)) if v.kernel == kernel]
    return compile_variant(v)


def _loop(ttgir: str) -> str:
    return ttgir[ttgir.index("scf.for"):]


def test_aot_sm90_w8a16_weight_is_register_a_operand():
    """swap_ab on sm_90: the decoded weight feeds wgmma from registers (no shared-memory round trip)."""
    ck = _compile("sm_90", "w8a16_gemm[row,bf16,swap_ab]")
    dots = re.findall(r"ttng\.warp_group_dot %\S+, %\S+, %\S+(?:, %\S+)? \{[^}]*\} : (\S+)", ck.asm["ttgir"])
    assert dots and all(d.startswith("tensor<") for d in dots), dots[:2]
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ck.asm["ptx"]


def test_aot_sm90_mx_exponents_load_asynchronously():
    ck = _compile("sm_90", "w8a16_gemm[mx32,bf16,swap_ab]")
    copies = re.findall(r"async_copy_global_to_local [^\n]*", _loop(ck.asm["ttgir"]))
    assert any("xi8" in c for c in copies), copies
    assert not re.search(r"= tt\.load ", _loop(ck.asm["ttgir"]))


def test_aot_sm90_mx_scale_folds_into_the_decode_fma():
    """With MX_FOLD (every scale code of the weight <= 134) the sm_90 mxfp8 W8A16 GEMM decodes with one bf16x2 FMA per
    pair, as the tensor / row decode does (2^e rides on it); without it, two."""
    import collections

    from dispatch.isa import main_loop_instructions
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton._gemm_isa import _w8a16_variant, compile_variant
    from kernels_triton._gemm_layouts import WScale
    from kernels_triton.isa import sass_of

    cfg = GemmConfig(block_m=64, block_n=128, block_k=128, num_warps=4, num_stages=4, swap_ab=True, tma=True,
                     split_k=0)  # a table config of mxfp8 and fp8_row at M = 64, 256

    def hmul2(wscale, fold=True):
        v = _w8a16_variant(Target.simulated_for("sm_90"), wscale, "bf16", cfg, mx_fold=fold)
        loop = main_loop_instructions(sass_of(compile_variant(v).asm["cubin"]))
        return collections.Counter(t.split()[0] for t in loop)["HMUL2.BF16_V2"]

    row = hmul2(WScale.ROW)
    assert row > 0 and hmul2(WScale.MX32) == row and hmul2(WScale.MX32, fold=False) == 2 * row


def test_mx_fold_ok_marks_weights_whose_scales_fold():
    pytest.importorskip("triton")
    import dispatch
    from kernels_triton._gemm_launch import MX_FOLD_MAX, mx_fold_ok

    w = torch.randn(64, 128)
    qw = dispatch.quantize(w, "mxfp8", act="bf16")
    assert mx_fold_ok(qw) is True
    for code, folds in ((MX_FOLD_MAX, True), (MX_FOLD_MAX + 1, False), (255, False)):
        s = qw.scale.view(torch.uint8).clone()
        s[3, 1] = code
        assert mx_fold_ok(dispatch.QWeight(qw.format, qw.act, qw.qdata, s.view(torch.float8_e8m0fnu))) is folds, code
    # from a bf16 weight: a group amax above 448 x 2^7 needs scale code 135
    w[5, :32] = 448.0 * 2**7 * 1.5
    assert mx_fold_ok(dispatch.quantize(w, "mxfp8", act="bf16")) is False


def test_aot_fp8_mma_families():
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3" in _compile("sm_90", "w8a8_gemm[token_row]").asm["ptx"]
    sm80 = _compile("sm_80", "w8a8_gemm[group_block]").asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16" in sm80 and "e4m3" not in sm80
    gcn = _compile("gfx1201", "w8a8_gemm[group_block]").asm["amdgcn"]
    assert "v_wmma_f32_16x16x16_fp8_fp8" in gcn
    assert int(re.search(r"ScratchSize:\s*(\d+)", gcn).group(1)) == 0


@pytest.mark.parametrize("kernel", ["w8a8_gemm[tensor_tensor]", "w8a8_gemm[token_row,tma]"])
def test_aot_sm90_fp8_dot_promotes_to_fp32_per_k_tile(kernel):
    """fp8 wgmma accumulates in reduced precision; without promotion (Triton's sm_90 default) the H200
    results were wrong at K = 14336. With max_num_imprecise_acc = BLOCK_K every accumulator element gets
    one fp32 add per K tile: 128x256 tile, 8 warps -> 128 accumulator registers per thread."""
    ck = _compile("sm_90", kernel)
    assert ck.metadata.num_warps == 8
    adds = re.findall(r"\badd(?:\.rn)?\.f32\b", ck.asm["ptx"])
    assert len(adds) >= 128, len(adds)


def test_aot_programmatic_launch_only_on_sm90():
    """kernels_triton._pdl: on sm_90 the GEMMs wait for the previous grid once, before their first load, and never
    trigger the next launch early (measured slower); sm_89 / sm_80 have no griddepcontrol and compile none of it."""
    from kernels_triton import _pdl
    if not _pdl.pdl_target(Target.simulated_for("sm_90")):
        pytest.skip("FP8DISPATCH_PDL=0")
    from kernels_triton.isa import sass_of
    for kernel in ("w8a16_gemm[row,bf16,swap_ab,tma]", "w8a8_gemm[group_block]", "w8a16_gemm[mx32,bf16,swap_ab]",
                   "w8a8_gemm[token_row]"):
        ck = _compile("sm_90", kernel)
        ptx = ck.asm["ptx"]
        assert ptx.count("griddepcontrol.wait") == 1 and "launch_dependents" not in ptx, kernel
        first_load = min(i for i in (ptx.find("cp.async"), ptx.find("ld.global")) if i >= 0)
        assert ptx.index("griddepcontrol.wait") < first_load, kernel
        # ptxas keeps the order: the wait (ACQBULK) before every global / async-copy / TMA access, and no load
        # through the non-coherent constant path (data of the previous kernel must not come from it)
        sass = [ln for ln in sass_of(ck.asm["cubin"]).splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
        wait = [i for i, ln in enumerate(sass) if "ACQBULK" in ln]
        mem = [i for i, ln in enumerate(sass) if re.search(r"\b(LDG|STG|LDGSTS|UTMALDG)\b", ln)]
        assert len(wait) == 1 and mem and wait[0] < mem[0], kernel
        assert not any("CONSTANT" in ln for ln in sass), kernel
    for arch in ("sm_89", "sm_80"):
        assert "griddepcontrol" not in _compile(arch, "w8a8_gemm[group_block]").asm["ptx"], arch


def test_pdl_only_on_cuda_sm90_with_one_switch():
    """Programmatic launches only on CUDA sm_90+ and only with Triton's launch_pdl key (ROCm's Triton rejects it);
    one FP8DISPATCH_PDL switch for both backends."""
    from kernels_triton import _pdl
    assert _pdl.launch_options(False) == {} and _pdl.launch_options(True) == {"launch_pdl": True}
    assert not _pdl.pdl_launch(torch.device("cpu"))
    for arch in ("sm_80", "sm_89", "gfx1201"):
        assert not _pdl.pdl_target(Target.simulated_for(arch)), arch
    assert _pdl.pdl_target(Target.simulated_for("sm_90")) is _pdl.ENABLED
    launch = pytest.importorskip("kernels_cuda._launch")
    assert launch.PDL_ENV == _pdl.PDL_ENV


def test_swap_ab_rejected_with_per_tile_scales():
    from kernels_triton._gemm_config import GemmConfig, w8a16_configs
    from kernels_triton._gemm_layouts import WScale
    cfg = GemmConfig(256, 128, 64, 8, 8, 4, swap_ab=True)  # the config that was wrong on the H200 (M = 257)
    assert "swap_ab" in cfg.legal_for_w8a16(WScale.BLOCK128, False)
    assert "swap_ab" in GemmConfig(128, 128, 32, swap_ab=True).legal_for_w8a16(WScale.MX32, True)
    assert cfg.legal_for_w8a16(WScale.ROW, False) == ""
    for arch in ARCHS:
        t = Target.simulated_for(arch)
        for ws, fp16 in ((WScale.BLOCK128, False), (WScale.BLOCK128, True), (WScale.MX32, True)):
            space = w8a16_configs(t, ws, fp16, 4096)
            assert space and not any(c.swap_ab for c in space), (arch, ws, fp16)


def test_w8a16_small_m_space_offers_fixed_split_k_in_the_tuned_prefix():
    """At M <= 64 on wgmma targets the W8A16 space offers 3-stage 64-token tiles with fixed split-K counts within
    the first 8 configs (what tools/perf/retune_triton_gemm.sh times): session 12's probe found them 12-17 %
    faster than the auto split on fp8_row 6144x4096 and mxfp8 28672x4096 at M = 64. Not at M = 256 (session 10's
    probe: fixed splits lost every cell there), nor where swap_ab is illegal."""
    from kernels_triton._gemm_config import w8a16_configs
    from kernels_triton._gemm_layouts import WScale
    t = Target.simulated_for("sm_90")
    for ws in (WScale.ROW, WScale.TENSOR, WScale.MX32):
        for m in (16, 64):
            head = w8a16_configs(t, ws, False, 4096, m)[:8]
            fixed = [(c.block_m, c.block_n, c.num_stages, c.split_k) for c in head if c.split_k > 1]
            assert fixed == [(64, 64, 3, 4), (64, 128, 3, 4), (64, 128, 3, 2)], (ws, m, fixed)
            assert all(c.swap_ab and c.legal_for_w8a16(ws, False) == "" for c in head if c.split_k > 1)
        assert not any(c.split_k > 1 for c in w8a16_configs(t, ws, False, 4096, 256)), ws
    assert not any(c.split_k > 1 for c in w8a16_configs(t, WScale.BLOCK128, False, 4096, 64))
    for arch in ("sm_80", "sm_89", "gfx1201"):
        assert not any(c.split_k > 1 for c in w8a16_configs(Target.simulated_for(arch), WScale.ROW, False, 4096, 64))


def test_split_for_never_leaves_a_split_without_a_k_tile():
    """The GEMM kernels run at least one K tile per program (_gemm._k_tile_range: a loop that may run zero times makes
    ptxas serialize every wgmma), so the launcher's split count must give each split a tile: ceil(k_tiles / split)
    tiles per split, fixed or automatic, never more splits than requested."""
    from kernels_triton._gemm_config import GemmConfig

    for split_k in (0, 2, 3, 4, 5, 8):
        cfg = GemmConfig(block_m=64, block_n=64, block_k=128, split_k=split_k)
        for k_tiles in range(1, 300):
            for m, n in ((16, 4096), (64, 1024), (256, 28672)):
                split = cfg.split_for(m, n, k_tiles * 128, 132)
                per = -(-k_tiles // split)
                assert 1 <= split <= (split_k or split) and (split - 1) * per < k_tiles, (split_k, k_tiles, m, n, split)
