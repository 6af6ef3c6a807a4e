"""Triton decode kernels (triton.w8a16_gemv, triton.w8a8_gemv) vs dispatch.reference.linear.

CPU part: property tests under the Triton interpreter, in a subprocess (TRITON_INTERPRET must be set
before the kernels are decorated). They run the interpreter-safe path: uint8 codes, software decode and
encode, fp32 `input_precision="ieee"` dots -- a check of indexing, masking, split-K, scale layouts and
the fused activation quantization arithmetic, NOT a GPU validation.
GPU part (@pytest.mark.gpu): every format x act x config of the candidate's autotune space over sampled
shapes (partial tiles included) and M = 1..64, on the target's path and on the sm_80 software path
forced on the same GPU (hw_fp8=False).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from hypothesis import given, strategies as st

import dispatch
from conftest import assert_programmatic_chain_exact, require_triton_interpreter
from dispatch import reference
from dispatch.problem import Problem

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
REPO = pathlib.Path(__file__).resolve().parents[1]
interp_only = pytest.mark.skipif(not INTERP, reason="runs inside the interpreter subprocess (test_interpreter_suite)")

FORMAT_ACTS = [("fp8_tensor", "bf16"), ("fp8_row", "bf16"), ("fp8_block", "bf16"), ("mxfp8", "bf16"),
               ("fp8_tensor", "fp8"), ("fp8_row", "fp8"), ("fp8_block", "fp8")]


def make_weight(n: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Varied row / column / block magnitudes so every scale layout carries information.
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-6, 3, (n, 1), generator=g).float())
    return w * torch.exp2(torch.randint(-3, 3, (1, k), generator=g).float())


def make_x(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-4, 4, (1, k), generator=g).float())
    return x.to(dtype)


def check_close(y: torch.Tensor, x: torch.Tensor, qw, bias, rel: float) -> None:
    """|y - ref| <= rel * (|x| @ |W|^T + |bias|) + tiny: fp32 accumulation in another order than the
    reference (products are exact), so the error is bounded by the magnitudes, not by |ref|."""
    ref = reference.linear(x, qw, bias, out_dtype=torch.float32).cpu()
    xa = reference.activation_values(x, qw).abs().cpu().double()
    bound = xa @ dispatch.dequantize(qw).abs().cpu().double().T
    if bias is not None:
        bound = bound + bias.abs().cpu().double()
    err = (y.float().cpu().double() - ref.double()).abs()
    tol = rel * bound + 1e-30
    bad = err > tol
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} outputs off; worst err/bound {(err / tol).max():.3g}"


# ---------------------------------------------------------------------------------------------------------
# Interpreter (CPU)

INTERP_CONFIGS = [  # (block_m, block_n, block_k, split_k, fuse[, num_stages]): FMA and dot paths, split-K 1..3
    (1, 16, 128, 1, True), (2, 16, 128, 3, True), (4, 32, 256, 2, True), (1, 16, 32, 0, False),
    (1, 4, 128, 0, False), (1, 8, 64, 2, True),  # the 4- and 8-row FMA tiles (session 32)
    (16, 16, 128, 2, True), (16, 32, 64, 1, False), (16, 16, 32, 3, False),
    (16, 32, 128, 2, False, 3),  # pipelined: mxfp8 takes its per-group dots there
]


@interp_only
@given(st.sampled_from(FORMAT_ACTS), st.integers(1, 5), st.integers(1, 70),
       st.sampled_from([1, 16, 31, 32, 33, 100, 128, 129, 200, 300]), st.sampled_from(INTERP_CONFIGS),
       st.booleans(), st.sampled_from([torch.bfloat16, torch.float16]), st.integers(0, 1000))
def test_interp_gemv_matches_reference(fa, m, n, k, cfg_t, with_bias, dtype, seed):
    from kernels_triton._gemv import group_k_of, w8a8_gemv, w8a16_gemv
    from kernels_triton.configs import GemvConfig

    fmt, act = fa
    cfg = GemvConfig(*cfg_t[:4], fuse_act_quant=cfg_t[4], num_stages=cfg_t[5] if len(cfg_t) > 5 else 1)
    qw = dispatch.quantize(make_weight(n, k, seed), fmt, act=act)
    why = cfg.legal_for(group_k_of(qw.format), act == "fp8" and fmt == "fp8_block")
    if why:  # the config space never offers such a config: check that the launcher refuses it loudly
        with pytest.raises(dispatch.UnsupportedError):
            (w8a8_gemv if act == "fp8" else w8a16_gemv)(make_x(m, k, dtype, seed), qw, None, None, cfg, hw_fp8=False)
        return
    x = make_x(m, k, dtype, seed)
    bias = torch.randn(n) if with_bias else None
    f = w8a8_gemv if act == "fp8" else w8a16_gemv
    y = f(x, qw, bias, torch.float32, cfg, hw_fp8=False)
    assert y.shape == (m, n) and y.dtype == torch.float32
    check_close(y, x, qw, bias, 1e-5)


@interp_only
def test_interp_gemv_out_dtype_and_nan():
    from kernels_triton._gemv import w8a8_gemv, w8a16_gemv

    qw = dispatch.quantize(make_weight(20, 130, 1), "fp8_row", act="fp8")
    x = make_x(2, 130, torch.bfloat16, 1)
    y = w8a8_gemv(x, qw, hw_fp8=False)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), reference.linear(x, qw).float(), rtol=1e-2, atol=1e-2)
    x[1, 3] = float("nan")
    y = w8a8_gemv(x, qw, hw_fp8=False)
    assert y[1].isnan().all() and not y[0].isnan().any()
    qb = dispatch.quantize(make_weight(20, 130, 1), "mxfp8")
    y = w8a16_gemv(x, qb, hw_fp8=False)
    assert y[1].isnan().all() and not y[0].isnan().any()


@interp_only
@pytest.mark.parametrize("fa", FORMAT_ACTS, ids=lambda fa: f"{fa[0]}-{fa[1]}")
def test_interp_one_row_group_scales_on_partial_sums(fa):
    """The 1-row FMA path scales each thread's 16-product sum by its K group's scales (block weight and x group
    scales, MX 2^e; session 32), on the 4- and 8-row tiles: partial last groups (K = 300: 2 whole 128-groups and 44,
    9 whole 32-groups and 12), rows past N, split K and none, against the dequantized reference."""
    from kernels_triton._gemv import w8a8_gemv, w8a16_gemv
    from kernels_triton.configs import GemvConfig

    fmt, act = fa
    qw = dispatch.quantize(make_weight(37, 300, 7), fmt, act=act)
    x = make_x(1, 300, torch.bfloat16, 7)
    f = w8a8_gemv if act == "fp8" else w8a16_gemv
    for cfg in (GemvConfig(1, 8, 64, 0, 8, fuse_act_quant=False), GemvConfig(1, 4, 128, 2, 4, fuse_act_quant=False)):
        check_close(f(x, qw, None, torch.float32, cfg, hw_fp8=False), x, qw, None, 1e-5)


# ---------------------------------------------------------------------------------------------------------
# Pure (no kernels): candidates' support answers and config spaces.

@pytest.mark.skipif(INTERP, reason="pure test")
def test_candidates_support_and_configs():
    from dispatch.target import Target
    from kernels_triton.candidates import candidates
    from kernels_triton.configs import GemvConfig

    cands = {c.id: c for c in candidates()}
    a16, a8 = cands["triton.w8a16_gemv"], cands["triton.w8a8_gemv"]
    for arch in ("sm_80", "sm_89", "sm_90", "gfx1201"):
        t = Target.simulated_for(arch)
        for fmt, act in FORMAT_ACTS:
            c = a8 if act == "fp8" else a16
            for m in (1, 3, 16, 64):
                p = Problem(dispatch.Format(fmt), dispatch.Act(act), m, 4096, 4096)
                s = c.supports(p, t)
                assert s.ok, (arch, fmt, act, m, s.reason)
                cfgs = c.configs(p, t)
                assert cfgs and all(isinstance(x, GemvConfig) for x in cfgs)
                assert c.default_config(p, t) == cfgs[0]
        assert "software" in a16.supports(Problem(dispatch.Format.FP8_ROW, dispatch.Act.BF16, 1, 64, 64),
                                          t).reason or t.has_triton_fp8_dtype
    t = Target.simulated_for("sm_90")
    assert not a16.supports(Problem(dispatch.Format.FP8_ROW, dispatch.Act.BF16, 65, 64, 64), t)
    assert not a8.supports(Problem(dispatch.Format.MXFP8, dispatch.Act.FP8, 1, 64, 64), t)
    assert not a16.supports(Problem(dispatch.Format.FP8_ROW, dispatch.Act.BF16, 1, 64, 64), Target.simulated_for("cpu"))
    assert not a16.supports(Problem(dispatch.Format.FP8_ROW, dispatch.Act.BF16, 1, 64, 64),
                            Target.simulated_for("gfx942"))
    with pytest.raises(ValueError):
        GemvConfig(block_m=3)
    GemvConfig(1, 4, 1024)  # the FMA path takes 4- and 8-row tiles ...
    for bad in (dict(block_m=1, block_n=2), dict(block_m=16, block_n=8)):  # ... not fewer; the MMA path 16 rows
        with pytest.raises(ValueError):
            GemvConfig(**bad)


@pytest.mark.skipif(INTERP, reason="launcher of the interpreter subprocess")
def test_interpreter_suite():
    require_triton_interpreter()
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "interp",
                        __file__], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout, r.stdout[-2000:]


# ---------------------------------------------------------------------------------------------------------
# GPU

GPU_NK = [(300, 576), (4096, 4096), (64, 14336), (257, 129)]
GPU_M = [1, 2, 3, 5, 8, 16, 17, 33, 64]


@pytest.mark.gpu
@pytest.mark.skipif(INTERP, reason="GPU test")
@pytest.mark.parametrize("hw_fp8", [None, False], ids=["target_path", "sw_path"])
@pytest.mark.parametrize("fa", FORMAT_ACTS, ids=lambda fa: f"{fa[0]}-{fa[1]}")
@pytest.mark.parametrize("nk", GPU_NK, ids=str)
def test_gpu_gemv_every_config(fa, nk, hw_fp8):
    from dispatch.target import detect
    from kernels_triton._gemv import w8a8_gemv, w8a16_gemv
    from kernels_triton.candidates import candidates

    fmt, act = fa
    n, k = nk
    cand = {c.id: c for c in candidates()}["triton.w8a8_gemv" if act == "fp8" else "triton.w8a16_gemv"]
    qw = dispatch.quantize(make_weight(n, k, n + k).cuda(), fmt, act=act)
    f = w8a8_gemv if act == "fp8" else w8a16_gemv
    for m in GPU_M:
        x = make_x(m, k, torch.bfloat16, m).cuda()
        bias = torch.randn(n, device="cuda") if m % 2 else None
        p = Problem.of(x.shape, qw, x_dtype=x.dtype, out_dtype=torch.float32, has_bias=bias is not None)
        cfgs = cand.configs(p, detect())
        # The whole autotune space at the two decode Ms the perf goals name; the default elsewhere (each
        # block_m is its own compiled variant, and compiles dominate this test's time).
        for cfg in cfgs if m in (1, 16) else cfgs[:1]:
            y = f(x, qw, bias, torch.float32, cfg, hw_fp8=hw_fp8)
            check_close(y, x, qw, bias, 2e-5)


@pytest.mark.gpu
@pytest.mark.skipif(INTERP, reason="GPU test")
@pytest.mark.parametrize("xdtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("fa", FORMAT_ACTS, ids=lambda fa: f"{fa[0]}-{fa[1]}")
def test_gpu_gemv_dtypes_and_candidate_run(fa, xdtype):
    from dispatch.target import detect
    from kernels_triton.candidates import candidates

    fmt, act = fa
    cand = {c.id: c for c in candidates()}["triton.w8a8_gemv" if act == "fp8" else "triton.w8a16_gemv"]
    qw = dispatch.quantize(make_weight(384, 640, 5).cuda(), fmt, act=act)
    for m in (1, 4, 16, 40):
        x = make_x(m, 640, xdtype, m).cuda()
        bias = torch.randn(384, device="cuda").to(xdtype)
        p = Problem.of(x.shape, qw, x_dtype=xdtype, has_bias=True)
        assert cand.supports(p, detect())
        y = cand.run(x, qw, cand.prepare(qw), bias, xdtype, cand.default_config(p, detect()))
        assert y.dtype == xdtype and y.shape == (m, 384)
        ref = reference.linear(x, qw, bias)
        torch.testing.assert_close(y.float(), ref.float(), rtol=2e-2 if xdtype != torch.float32 else 1e-4,
                                   atol=1e-2 * ref.float().abs().max().item())


@pytest.mark.gpu
@pytest.mark.skipif(INTERP, reason="GPU test")
def test_gpu_gemv_cuda_graph_and_determinism():
    """No host sync (captures in a CUDA graph), and split-K gives identical bits run to run."""
    from kernels_triton._gemv import w8a8_gemv
    from kernels_triton.configs import GemvConfig

    qw = dispatch.quantize(make_weight(1024, 4096, 9).cuda(), "fp8_block", act="fp8")
    x = make_x(4, 4096, torch.bfloat16, 9).cuda()
    cfg = GemvConfig(4, 32, 256, 8)
    y0 = w8a8_gemv(x, qw, None, None, cfg)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        w8a8_gemv(x, qw, None, None, cfg)  # warm-up (compile) outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = w8a8_gemv(x, qw, None, None, cfg)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y0)
    assert torch.equal(w8a8_gemv(x, qw, None, None, cfg), y0)


@pytest.mark.skipif(INTERP, reason="AOT compile test")
@pytest.mark.parametrize("a_mode", [1, 2])
def test_sm90_w8a8_dot_path_uses_bf16_mma_not_fp8(a_mode):
    """The W8A8 tensor-core path must not use fp8 wgmma: its reduced-precision accumulation failed the
    2e-5 * |x||W| bound on the H200 (run 4, every W8A8 target_path case), while bf16 MMA on exactly decoded
    codes (the W8A16 and sm_80 paths) passed. AOT PTX check for sm_90, no GPU needed."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels_triton import _gemv_kernels as K

    sig = {"x_ptr": "*fp8e4nv" if a_mode == 1 else "*bf16", "xs_ptr": "*fp32", "w_ptr": "*fp8e4nv",
           "ws_ptr": "*fp32", "bias_ptr": "*bf16", "out_ptr": "*fp32", "part_ptr": "*fp32", "M": "i32", "N": "i32",
           "K": "i32", "SPLIT_K": "i32", "stride_xm": "i32", "stride_xsm": "i32", "stride_wsn": "i32",
           "stride_om": "i32"}
    cx = dict(WSCALE=0, A_MODE=a_mode, HW_FP8=True, HW_CVT=True, USE_DOT=True, IEEE_DOT=False, HAS_BIAS=True,
              DIRECT_OUT=True, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, G=128, NUM_STAGES=3)
    sig.update({k: "constexpr" for k in cx})
    k = triton.compile(ASTSource(K._gemv_kernel, sig, cx), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=4, num_stages=3))
    mmas = set(re.findall(r"(wgmma\.mma_async[\w.]*|mma\.sync[\w.]*)", k.asm["ptx"]))
    assert mmas and all("bf16" in m and "e4m3" not in m for m in mmas), mmas


@pytest.mark.skipif(INTERP, reason="pure test")
def test_cached_launch_spec_follows_the_switches_and_the_target(monkeypatch):
    """The GEMV launcher's cached derivation (_gemv._spec) is keyed by the run-time switches, so flipping one (the
    probe's --toggle, FP8DISPATCH_PDL) changes the launch: the fast mxfp8 decode only with its switch on, PDL's
    constexpr and launch option only with PDL, the K split from the device's SM count; an illegal config raises on
    every call (exceptions are not cached)."""
    import types

    from dispatch.errors import UnsupportedError
    from dispatch.formats import Format
    from kernels_triton import _gemv
    from kernels_triton.configs import GemvConfig

    monkeypatch.setattr(_gemv, "_sm_count", lambda index: 132)
    monkeypatch.setattr(_gemv, "detect", lambda device: types.SimpleNamespace(has_wgmma=True))
    _gemv._spec.cache_clear()
    cuda = torch.device("cuda", 0)
    dot = GemvConfig(16, 64, 128, 0, 4, 3, fuse_act_quant=False)

    def spec(fmt=Format.MXFP8, cfg=dot, m=16, pdl=False, fast=True):
        return _gemv._spec(fmt, 0, True, True, cfg, m, 4096, 4096, cuda, torch.bfloat16, False, pdl, fast)

    try:
        assert spec().meta["FAST_BF16"] and not spec(fast=False).meta["FAST_BF16"]
        assert not spec(Format.FP8_ROW).meta["FAST_BF16"]  # MX only
        on, off = spec(pdl=True), spec()
        assert on.meta["PDL"] and on.meta.get("launch_pdl") and on.reduce_meta["PDL"]
        assert not off.meta["PDL"] and "launch_pdl" not in off.meta
        s = spec()
        assert s.split == _gemv.auto_split_k(16, 4096, 4096, dot, 132) and s.grid == (4096 // 64, s.split, 1)
        assert s.meta["DIRECT_OUT"] == (s.split == 1) and s.meta["num_warps"] == 4
        bad = GemvConfig(16, 64, 256, 0, 4, 3, fuse_act_quant=False)  # 256-deep tensor-core tiles: 2 block scales
        assert bad.use_dot and bad.legal_for(128)
        for _ in range(2):
            with pytest.raises(UnsupportedError, match="block_k must divide 128"):
                spec(Format.FP8_BLOCK, cfg=bad)
    finally:
        _gemv._spec.cache_clear()


def test_default_tile_at_m16_fills_the_sms():
    """3000x1000 at M = 16 on 132 SMs: 47 programs of 64 rows and no split (K too short) leave SMs idle, the
    32-row tile is the default; 4096x4096 splits K and keeps 64 rows."""
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_triton.configs import gemv_configs

    h200 = Target.simulated_for("sm_90", torch_version="2.11.0")
    assert h200.sm_count == 132

    def first(n, k):
        p = Problem(m=16, n=n, k=k, fmt=Format.FP8_ROW, act=Act.BF16)
        return gemv_configs(p, h200, 0)[0]

    assert first(3000, 1000).block_n == 32
    assert first(4096, 4096).block_n == 64
    assert first(5120, 25600).block_n == 64


@pytest.mark.gpu
@pytest.mark.skipif(INTERP, reason="GPU test")
@pytest.mark.parametrize("fmt", ["fp8_row", "mxfp8"])
def test_gpu_gemv_pipelined_wgmma_config_is_stable(fmt):
    """The 3-stage tensor-core config of the M = 32..64 buckets, which had 110-145 register hazards in its sm_90
    SASS before WGMMA_DRAIN (tests/test_wgmma_hazards.py), on a weight that gives many CTAs per SM: every run
    finite, bit-identical (split-K reduces in a fixed order) and within the bound. Written in session 8 after its
    last device call; first ran, and passed, on the H200 in session 9."""
    from dispatch.target import detect
    from kernels_triton._gemv import w8a16_gemv
    from kernels_triton.configs import GemvConfig

    if not detect(torch.device("cuda")).has_wgmma:
        pytest.skip("the hazard was an sm_90 wgmma one")
    cfg = GemvConfig(block_m=64, block_n=64, block_k=128, num_stages=3)
    qw = dispatch.quantize(make_weight(28672, 4096, 9).cuda(), fmt, act="bf16")
    x = make_x(64, 4096, torch.bfloat16, 9).cuda()
    runs = [w8a16_gemv(x, qw, None, torch.float32, cfg) for _ in range(6)]
    for i, y in enumerate(runs):
        assert bool(torch.isfinite(y).all()), f"run {i}: {int((~torch.isfinite(y)).sum())} non-finite"
        assert torch.equal(y, runs[0]), f"run {i} differs from run 0"
    check_close(runs[0], x, qw, None, 2e-5)


def test_w8a8_decode_space_offers_the_unfused_tensor_core_tile():
    """Session 11 on the H200: at M = 4 the W8A8 GEMV's space had the tensor-core tile only with the activation
    quantization fused, which quantizes x in every program and K step (0.29-0.57x of bf16); unfused it ran 1.4-4.2x
    faster and won every W8A8 cell at M = 1 and 4. On wgmma targets it is the default there; elsewhere (not
    measured) the FMA tile stays the default and the unfused tensor-core configs are offered to the autotune."""
    import dataclasses

    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_triton.configs import GemvConfig, gemv_configs

    for fmt, group_k in ((Format.FP8_ROW, 0), (Format.FP8_TENSOR, 0), (Format.FP8_BLOCK, 128)):
        for m in (1, 4):
            p = Problem(fmt, Act.FP8, m=m, n=4096, k=4096)
            h200 = gemv_configs(p, Target.simulated_for("sm_90"), group_k)
            # at M = 1 the 1-row FMA tile, unfused, leads since session 15 (see configs.gemv_configs)
            want = GemvConfig(1, 32, 256, 0, 4, fuse_act_quant=False) if m == 1 else \
                GemvConfig(16, 64, 128, 0, 4, 3, fuse_act_quant=False)
            assert h200[0] == want, (fmt, m, h200[0])
            assert GemvConfig(16, 64, 128, 0, 4, 3, fuse_act_quant=False) in h200
            a100 = gemv_configs(p, Target.simulated_for("sm_80"), group_k)
            assert not a100[0].use_dot, (fmt, m, a100[0])
            for space in (h200, a100):
                fused_dot = [c for c in space if c.use_dot and c.fuse_act_quant]
                assert fused_dot and all(dataclasses.replace(c, fuse_act_quant=False) in space for c in fused_dot)
    # W8A16 at M = 1: an FMA default (on sm_90 the measured pick per layout: 32 x 256 without 32-groups (session 15),
    # 8 x 512 with 8 warps for mxfp8 (session 32); 32 x 256 where unmeasured); the tensor-core tile and, on sm_90, the
    # 8- and 4-row tiles are offered
    p = Problem(Format.FP8_ROW, Act.BF16, m=1, n=4096, k=4096)
    space = gemv_configs(p, Target.simulated_for("sm_90"), 0)
    assert (space[0].block_m, space[0].block_n, space[0].block_k) == (1, 32, 256) and any(c.use_dot for c in space)
    assert GemvConfig(1, 8, 512, 0, 8) in space and GemvConfig(1, 4, 1024, 0, 8) in space
    mx = gemv_configs(Problem(Format.MXFP8, Act.BF16, m=1, n=4096, k=4096), Target.simulated_for("sm_90"), 32)
    assert mx[0] == GemvConfig(1, 8, 512, 0, 8) and GemvConfig(1, 16, 512, 0, 4) in mx
    assert all(c.block_n >= 16 for c in gemv_configs(p, Target.simulated_for("sm_80"), 0))
    assert gemv_configs(p, Target.simulated_for("sm_80"), 0)[0] == GemvConfig(1, 32, 256, 0, 4)


@pytest.mark.skipif(INTERP, reason="AOT compile test")
def test_default_fma_configs_compile_without_spills_on_every_target():
    """The default decode config at M <= 8 (the FMA path) of every format/act compiles without register spills for
    sm_80, sm_89, sm_90 and gfx1201 (AOT, no GPU). On gfx1201 the 32-row FMA tile spilled 28-808 bytes a lane at 4
    and 8 token rows (session 12); on sm_80 / sm_89 84-1696 bytes a thread at 8 rows (session 14, once the report
    read ptxas -v: those spills go to the stack frame, which cuobjdump's LOCAL count missed). The 16-row tile, the
    default there now, spills nowhere."""
    from dispatch.formats import Act, Format
    from dispatch.target import Target
    from kernels_triton._gemm_layouts import W8A16_LAYOUT
    from kernels_triton.candidates import TritonW8A8Gemv, TritonW8A16Gemv
    from kernels_triton.isa import compile_and_inspect, gemv_variant

    seen, bad = set(), []
    for arch in ("sm_80", "sm_89", "sm_90", "gfx1201"):
        t = Target.simulated_for(arch)
        for fmt, act in FORMAT_ACTS:
            cand = TritonW8A16Gemv() if act == "bf16" else TritonW8A8Gemv()
            for m in (1, 2, 4, 8):
                p = Problem(Format(fmt), Act(act), m, 4096, 4096, torch.bfloat16, torch.bfloat16)
                cfg = cand.configs(p, t)[0]
                a_mode = 0 if act == "bf16" else (2 if cfg.fuse_act_quant else 1)
                key = (arch, W8A16_LAYOUT[Format(fmt)], a_mode, cfg)
                if key in seen:
                    continue
                seen.add(key)
                row = compile_and_inspect(gemv_variant("default", arch, key[1], a_mode, cfg))
                if not row.compiled or row.spills:
                    bad.append((arch, fmt, act, m, cfg, row.spills, row.error[:80]))
    assert not bad, bad


@pytest.mark.skipif(INTERP, reason="AOT compile test")
def test_decode_main_loops_convert_no_layouts_through_shared_memory_on_sm90():
    """sm_90 SASS of the decode kernel's CUDA-core path (x read in bf16 or as fp8 codes, 1 token row, no software
    pipeline): no CTA barrier in the K loop (dispatch.isa.main_loop_barriers). Before session 14 a layout
    conversion moved the weight tile through shared memory there, 4-8 barriers per K step. mxfp8 keeps 2 (its scale
    vector's conversion, small) with 4 warps, none with 8. At 2-8 rows the kernel keeps main's code (the broadcast x
    spilled on sm_80 / sm_89 at 4 and 8). The 3-stage mxfp8 tensor-core path: 3 since session 32's bf16x2 decode (its
    pipeline's 2 and the exponent vector's conversion; 11 before session 14)."""
    from kernels_triton._gemm_layouts import WScale
    from kernels_triton.configs import GemvConfig
    from kernels_triton.isa import compile_and_inspect, gemv_variant

    got = {}
    for ws in WScale:
        for a_mode in (0, 1):
            if a_mode == 1 and ws is WScale.MX32:
                continue  # mxfp8 is W8A16 only
            for cfg in (GemvConfig(1, 16, 512), GemvConfig(1, 32, 256), GemvConfig(1, 64, 128),
                        GemvConfig(1, 8, 512, 0, 8), GemvConfig(1, 4, 1024, 0, 8)):
                row = compile_and_inspect(gemv_variant("t", "sm_90", ws, a_mode, cfg, direct=ws is not WScale.TENSOR))
                assert row.compiled, row.error
                got[(ws.name, a_mode, cfg.block_m, cfg.block_n)] = row.loop_barriers
    # 4 warps: mxfp8's scale vector crosses warps; 8 warps (the 8- and 4-row tiles, mxfp8's sm_90 default) keep it in
    # each warp
    want = {k: (2 if k[0] == "MX32" and k[3] >= 16 else 0) for k in got}
    assert got == want
    mma3 = compile_and_inspect(gemv_variant("t", "sm_90", WScale.MX32, 0, GemvConfig(16, 64, 128, 0, 4, 3)))
    assert mma3.compiled and mma3.loop_barriers <= 3 and "bf16x2 fma" in mma3.fp8_cvt, mma3


@pytest.mark.skipif(INTERP, reason="AOT compile test")
def test_aot_gemv_programmatic_launch_only_on_sm90():
    """The decode GEMV and its split-K reduction as programmatic dependent launches (kernels_triton._pdl, session 16):
    on sm_90 one griddepcontrol.wait before the first global access (the fused quantizer's reads of x included), no
    early trigger; nothing of it on sm_89 / sm_80."""
    pytest.importorskip("triton")
    import re

    from kernels_triton import _pdl
    from kernels_triton import isa as I
    from kernels_triton._gemm_layouts import WScale
    from kernels_triton.configs import GemvConfig

    if not _pdl.pdl_target(dispatch.Target.simulated_for("sm_90")):
        pytest.skip("FP8DISPATCH_PDL=0")
    for ws, a_mode, cfg in ((WScale.ROW, 0, GemvConfig(1, 32, 256, 0, 4)), (WScale.BLOCK128, 2, GemvConfig(4, 32, 256)),
                            (WScale.MX32, 0, GemvConfig(16, 64, 128, 0, 4, 3))):
        ck = I.compile_variant(I.gemv_variant("gemv", "sm_90", ws, a_mode, cfg))
        ptx = ck.asm["ptx"]
        assert ptx.count("griddepcontrol.wait") == 1 and "launch_dependents" not in ptx, (ws, a_mode)
        first = min(i for i in (ptx.find("cp.async"), ptx.find("ld.global")) if i >= 0)
        assert ptx.index("griddepcontrol.wait") < first, (ws, a_mode)
        sass = [ln for ln in I.sass_of(ck.asm["cubin"]).splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
        wait = [i for i, ln in enumerate(sass) if "ACQBULK" in ln]
        mem = [i for i, ln in enumerate(sass) if re.search(r"\b(LDG|STG|LDGSTS)\b", ln)]
        assert len(wait) == 1 and mem and wait[0] < mem[0], (ws, a_mode)
    for arch in ("sm_89", "sm_80"):
        ck = I.compile_variant(I.gemv_variant("gemv", arch, WScale.ROW, 0, GemvConfig(1, 32, 256, 0, 4)))
        assert "griddepcontrol" not in ck.asm["ptx"], arch


@pytest.mark.gpu
@pytest.mark.skipif(INTERP, reason="GPU test")
def test_gpu_gemv_programmatic_launch_chain_is_exact(monkeypatch):
    """A decode chain where each GEMV reads the previous one's output (split-K reductions and the W8A8 quantizer in
    between): with programmatic launches (sm_90+) bit-identical to plain launches, eager and in graph replays."""
    from kernels_triton._gemv import w8a8_gemv, w8a16_gemv
    from kernels_triton.configs import GemvConfig

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90+")
    n = k = 2048

    def unit(fmt, act, seed):
        w = make_weight(n, k, seed)
        return dispatch.quantize((w / w.norm(dim=1, keepdim=True)).cuda(), fmt, act=act)

    layers = [(w8a16_gemv, unit("fp8_row", "bf16", 1), GemvConfig(1, 32, 256, 0, 4)),
              (w8a8_gemv, unit("fp8_block", "fp8", 2), GemvConfig(4, 32, 256, 8)),
              (w8a16_gemv, unit("mxfp8", "bf16", 3), GemvConfig(16, 64, 128, 4, 4, 3)),
              (w8a8_gemv, unit("fp8_tensor", "fp8", 4), GemvConfig(1, 32, 256, 0, 4, 1, False)),  # + quantizer launch
              (w8a16_gemv, unit("fp8_block", "bf16", 5), GemvConfig(4, 32, 256, 2))]

    def chain(x):
        outs = []
        for _ in range(2):
            x = x * 1.0001  # a torch kernel writes the next input right before the first GEMV reads it
            for fn, qw, cfg in layers:
                x = fn(x, qw, None, None, cfg)
                outs.append(x)
        return outs

    for m in (1, 4, 16):
        assert_programmatic_chain_exact(chain, make_x(m, k, torch.bfloat16, m).cuda(), monkeypatch, f"M={m}")
