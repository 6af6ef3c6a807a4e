"""Triton activation quantization (kernels_triton._act_quant) and the fp8 helpers vs dispatch.quantize_activation.

CPU, Triton interpreter (a subprocess: TRITON_INTERPRET must be set before triton kernels are decorated, and must
not leak into modules that compile for real): the kernels' indexing, masking, launch plans and arithmetic -- the
exact software encoder, IEEE division, and the reciprocal division with an exactly emulated FMA -- on ties,
saturation, NaN/Inf, -0.0, subnormals, the AMAX_FLOOR, at M = 1, 16 and small shapes launched like [4096, 4096]
(several programs per pass, several tiles per amax program). NOT a GPU validation.
CPU, no interpreter: the launch rule, and the sm_90 SASS of every launched kernel (compiled ahead of time):
instructions per element, 128-bit loads, the hardware e4m3 cast, no per-element division, no spills.
GPU (@pytest.mark.gpu): bit identity of codes and scales with the reference on the device at real sizes
([4096, 4096], [4096, 14336], [16, 4096], [1, 4096]) for bf16/fp16/fp32, on every finite bf16/fp16 value, through
every config variant, inside a CUDA graph; the target's own path and the sm_80 software path on the same GPU.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from hypothesis import given, strategies as st

import dispatch
from conftest import require_triton_interpreter
from dispatch.formats import ActGranularity
from dispatch.target import Target

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
REPO = pathlib.Path(__file__).resolve().parents[1]
if INTERP:  # kernels decorated after TRITON_INTERPRET=1 is set (this process is the interpreter subprocess)
    from kernels_triton import _fp8  # noqa: F401  (global of the helper kernels below)
interp_only = pytest.mark.skipif(not INTERP, reason="runs inside the interpreter subprocess (test_interpreter_suite)")
not_interp = pytest.mark.skipif(INTERP, reason="compiles for real / needs the GPU")

GRANS = ["per_tensor", "per_token", "per_token_group_128"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def same_codes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit equality of e4m3 codes, any NaN code equal to any NaN code (the NaN's sign comes from the
    division's NaN, which differs between CPU and GPU)."""
    ua, ub = a.view(torch.uint8).cpu(), b.view(torch.uint8).cpu()
    nan_a, nan_b = (ua & 0x7F) == 0x7F, (ub & 0x7F) == 0x7F
    return bool(torch.equal(nan_a, nan_b) and torch.equal(ua[~nan_a], ub[~nan_b]))


def same_scales(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.cpu(), b.cpu()
    return a.shape == b.shape and bool(((a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())).all())


def first_code_diff(q: torch.Tensor, rq: torch.Tensor) -> str:
    ua, ub = q.view(torch.uint8).cpu().reshape(-1), rq.view(torch.uint8).cpu().reshape(-1)
    bad = ((ua != ub) & ~(((ua & 0x7F) == 0x7F) & ((ub & 0x7F) == 0x7F))).nonzero().flatten()
    return f"{bad.numel()} codes differ, first at flat {bad[:4].tolist()}: {ua[bad[:4]].tolist()} vs {ub[bad[:4]].tolist()}"


def make_x(m: int, k: int, dtype: torch.dtype, seed: int, kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Varied magnitudes per column and per row: plain randn gives nearly uniform scales.
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-8, 8, (1, k), generator=g).float())
    x = x * torch.exp2(torch.randint(-4, 4, (m, 1), generator=g).float())
    if kind == "zero_row" and m > 1:
        x[0] = 0
    elif kind == "tiny":
        x = x * 1e-30
    elif kind == "outlier":
        x[m // 2, k // 2] = 3e4
    return x.to(dtype)


def _ties_row(k: int, dtype: torch.dtype) -> torch.Tensor:
    """448 at the start of every 1x128 group (so every scale is exactly 1 and v / s == v), then e4m3 rounding ties,
    their neighbours one ulp of `dtype` away, e4m3 grid values and saturating values, both signs."""
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    pos = grid[(grid > 0) & ~grid.isnan()].sort().values
    ties = ((pos[1:] + pos[:-1]) / 2).to(dtype)  # 5 significant bits: exact in bf16/fp16 where in range
    bits = ties.view(torch.int16) if dtype != torch.float32 else ties.view(torch.int32)
    up, down = (bits + 1).view(dtype), (bits - 1).view(dtype)
    vals = torch.cat([ties, up, down, pos.to(dtype), torch.tensor([448.0, 447.0, 440.0, 2.0 ** -9, 2.0 ** -10,
                                                                   3 * 2.0 ** -11, 2.0 ** -11]).to(dtype)])
    vals = torch.cat([vals, -vals])
    row = vals[torch.arange(k) % vals.numel()].clone()
    row[::128] = 448.0
    return row


def crafted_x(m: int, k: int, dtype: torch.dtype, seed: int, kind: str = "mixed", device="cpu") -> torch.Tensor:
    """Activations whose codes exercise every branch of the encoders and the division.

    mixed: rows (and 1x128 groups) of varied magnitudes; row r % 6 planted as 0: ties at scale 1 (see _ties_row),
           1: zeros and -0.0 (floor scale: codes +0/-0), 2: the dtype's subnormals next to normal values,
           3: all below AMAX_FLOOR (bf16/fp32; the floor scale with nonzero codes), 4: a huge outlier (others
           underflow to +-0), 5: random amax (the max element's quotient exceeds 448 by up to an ulp: saturation).
    ties:  every row a ties row (per-tensor scale 1 too).
    nan / inf: mixed with one NaN / +-Inf in row m // 2 (per-token and group: that row / group only)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-6, 6, (m, 1), generator=g).float())
    ng = -(-k // 128)
    x *= torch.exp2(torch.randint(-4, 5, (1, ng), generator=g).float()).repeat_interleave(128, 1)[:, :k]
    x = x.to(dtype)
    tiny = torch.finfo(dtype).tiny
    if kind == "ties":
        return _ties_row(k, dtype).expand(m, k).contiguous().to(device)
    # Whole row classes at once (strided slices): a Python loop over rows took minutes at 4096 x 14336 with
    # a dozen test processes sharing the CPU (session 15: four GPU tests hit their 140 s limit in here).
    x[0::6] = _ties_row(k, dtype)
    x[1::6] = 0.0
    x[1::6, 1::2] = -0.0
    sub = torch.tensor([tiny / 2, -tiny / 4, tiny / 1024, tiny * 3 / 8, tiny], dtype=torch.float32)
    x[2::6, ::3] = sub[torch.arange(len(range(0, k, 3))) % sub.numel()].to(dtype)
    if dtype != torch.float16:
        x[3::6] = (torch.rand(len(range(3, m, 6)), k, generator=g) * 9e-13).to(dtype)
    x[4::6, k // 2] = 6e4 if dtype == torch.float16 else 3e30
    if kind in ("nan", "inf"):
        r, c = m // 2, (k * 2) // 3
        x[r, c] = float("nan") if kind == "nan" else float("inf")
        if kind == "inf" and k > 1:
            x[r, 0] = float("-inf")
    return x.to(device)


# ---------------------------------------------------------------------------------------------------------
# Interpreter (CPU) tests: collected in the subprocess only.

# Small configs that launch like [4096, 4096] on the GPU: several tiles per program and per amax program, rows
# spanning several tiles (the per-token loop), multi-row group tiles, partial last tiles.
INTERP_CONFIGS = {
    "default": dict(),
    "scaled": dict(block=256, num_warps=1, single_program_max=0, row_max=128, amax_programs_per_sm=3),
    "rows": dict(block=512, num_warps=1, single_program_max=0, amax_programs_per_sm=2),
}


@contextlib.contextmanager
def interp_recip_division():
    """Run the reciprocal (Markstein) division under the interpreter: its fma rounds twice, so tl.fma is replaced by
    an exact single-rounding fp32 FMA (tests/test_weight_quant_kernel.py), and the launcher's choice (GPU only) is
    forced for bf16/fp16. Restores both. Yields the list of fma calls (non-empty once tl.fma ran)."""
    from triton.runtime import interpreter

    from kernels_triton import _act_quant
    from test_weight_quant_kernel import _exact_fma32

    calls = []

    def exact_fma(self, x, y, z):
        calls.append(x.data.size)
        return interpreter.TensorHandle(_exact_fma32(x.data, y.data, z.data).astype(z.data.dtype), z.dtype.scalar)

    saved = (interpreter.InterpreterBuilder.create_fma, _act_quant.use_recip_div)
    interpreter.InterpreterBuilder.create_fma = exact_fma
    _act_quant.use_recip_div = lambda dtype, target, cfg: cfg.recip_div and dtype in (torch.bfloat16, torch.float16)
    try:
        yield calls
    finally:
        interpreter.InterpreterBuilder.create_fma, _act_quant.use_recip_div = saved


@pytest.fixture(autouse=True)
def fast_interp_max():
    """The interpreter reduces with a custom combine function one element at a time in Python; the kernels'
    NaN-propagating max is numpy's max (NaN-propagating too). Speed only; restored after each test."""
    if not INTERP:
        yield
        return
    from test_weight_quant_kernel import fast_nan_max_reduce

    with fast_nan_max_reduce():
        yield


def _check_against_reference(x, gran, cfg, tag=""):
    from kernels_triton._act_quant import quantize_activation

    q, s = quantize_activation(x, gran, cfg, hw_fp8=False)
    rq, rs = dispatch.quantize_activation(x, gran)
    assert q.dtype == torch.float8_e4m3fn and q.shape == rq.shape, tag
    assert same_scales(s, rs), f"{tag}: scales differ {s.reshape(-1)[:4]} vs {rs.reshape(-1)[:4]}"
    assert same_codes(q, rq), f"{tag}: {first_code_diff(q, rq)}"


@interp_only
def test_interp_fp8_helpers_exact():
    import triton
    import triton.language as tl

    @triton.jit
    def dec(c_ptr, o_ptr, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.store(o_ptr + o, _fp8.e4m3_to_f32(tl.load(c_ptr + o, mask=o < n)), mask=o < n)

    @triton.jit
    def enc(v_ptr, o_ptr, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.store(o_ptr + o, _fp8.f32_to_e4m3(tl.load(v_ptr + o, mask=o < n)), mask=o < n)

    @triton.jit
    def e8(c_ptr, o_ptr, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.store(o_ptr + o, _fp8.e8m0_to_f32(tl.load(c_ptr + o, mask=o < n)), mask=o < n)

    codes = torch.arange(256, dtype=torch.uint8)
    out = torch.empty(256)
    dec[(1,)](codes, out, 256, BLOCK=256)
    ref = codes.view(torch.float8_e4m3fn).float()
    assert same_scales(out, ref)  # bitwise incl. -0.0 and NaN positions

    grid = ref[~ref.isnan()]
    pos = grid[grid > 0].sort().values
    ties = (pos[1:] + pos[:-1]) / 2
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 448.0, 449.0, 463.9, 464.0, 465.0,
                            1e30, -1e30, 1e-30, 2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -6, 2.0 ** -7 * 1.5])
    nxt = torch.nextafter(ties, torch.full_like(ties, 1e9))
    prv = torch.nextafter(ties, torch.zeros_like(ties))
    rnd = torch.randn(20000, generator=torch.Generator().manual_seed(1)) * torch.exp2(
        torch.randint(-16, 10, (20000,), generator=torch.Generator().manual_seed(2)).float())
    v = torch.cat([grid, ties, -ties, nxt, prv, special, rnd]).contiguous()
    o = torch.empty(v.numel(), dtype=torch.uint8)
    enc[(1,)](v, o, v.numel(), BLOCK=triton.next_power_of_2(v.numel()))
    assert same_codes(o, v.clamp(-448, 448).to(torch.float8_e4m3fn))

    e = torch.empty(256)
    e8[(1,)](codes, e, 256, BLOCK=256)
    assert same_scales(e, codes.view(torch.float8_e8m0fnu).float())
    assert e[0].item() == 2.0 ** -127


@interp_only
@given(st.sampled_from(GRANS), st.sampled_from([1, 2, 5, 16]), st.sampled_from([1, 31, 127, 128, 129, 300, 576]),
       st.sampled_from(DTYPES), st.integers(0, 2 ** 16), st.sampled_from(["plain", "zero_row", "tiny", "outlier"]),
       st.sampled_from(sorted(INTERP_CONFIGS)), st.booleans())
def test_interp_act_quant_matches_reference(gran, m, k, dtype, seed, kind, cfg_name, recip):
    from kernels_triton.act_quant_config import ActQuantConfig

    x = make_x(m, k, dtype, seed, kind)
    cfg = ActQuantConfig(**INTERP_CONFIGS[cfg_name])
    with interp_recip_division() if recip else contextlib.nullcontext():
        _check_against_reference(x, gran, cfg, f"{gran} {dtype} [{m}, {k}] {kind} {cfg_name} recip={recip}")


@interp_only
@pytest.mark.parametrize("shape", [(1, 300), (16, 257), (48, 640)], ids=str)  # (48, 640): launched like 4096x4096
@pytest.mark.parametrize("kind", ["mixed", "ties", "nan", "inf"])
def test_interp_crafted_values(shape, kind):
    """Ties, saturation, -0.0, subnormals, the AMAX_FLOOR, NaN and Inf through every granularity, dtype, division
    (IEEE and reciprocal with an exact FMA) and launch shape."""
    from kernels_triton.act_quant_config import ActQuantConfig

    fmas = 0
    for dtype in DTYPES:
        x = crafted_x(*shape, dtype, seed=sum(shape), kind=kind)
        for cfg_name in ("default", "scaled"):
            cfg = ActQuantConfig(**INTERP_CONFIGS[cfg_name])
            for recip in ([False, True] if dtype != torch.float32 else [False]):
                with interp_recip_division() if recip else contextlib.nullcontext() as calls:
                    for gran in GRANS:
                        _check_against_reference(x, gran, cfg, f"{gran} {dtype} {shape} {kind} {cfg_name} r={recip}")
                    fmas += len(calls) if recip else 0
    assert fmas > 0  # the reciprocal variant reached tl.fma (so the emulation was exercised)


@interp_only
def test_interp_inf_group_codes_are_signed_zeros():
    """A group holding an Inf has scale +Inf: every finite value's code is +-0 (v / Inf) and the Inf's is NaN, also
    through the reciprocal division, whose correction term would otherwise be Inf * 0 = NaN."""
    from kernels_triton._act_quant import quantize_activation

    x = torch.tensor([[1.0, -2.0, 0.0, -0.0, float("inf"), 3.0] + [0.5] * 122 + [7.0, -7.0]], dtype=torch.bfloat16)
    for recip in (False, True):
        with interp_recip_division() if recip else contextlib.nullcontext():
            for gran in GRANS:
                q, s = quantize_activation(x, gran, hw_fp8=False)
                codes = q.view(torch.uint8)[0]
                assert torch.isinf(s.reshape(-1)[0]), (gran, recip)
                assert codes[4] & 0x7F == 0x7F, (gran, recip)
                want = torch.tensor([0x00, 0x80, 0x00, 0x80], dtype=torch.uint8)
                assert torch.equal(codes[:4], want), (gran, recip, codes[:4])
                _check_against_reference(x, gran, None, f"{gran} recip={recip}")


@interp_only
def test_interp_act_quant_leading_dims():
    from kernels_triton._act_quant import quantize_activation

    x = make_x(6, 200, torch.bfloat16, 3, "plain").reshape(2, 3, 200)
    for g in GRANS:
        q, s = quantize_activation(x, g, hw_fp8=False)
        rq, rs = dispatch.quantize_activation(x, g)
        assert q.shape == rq.shape and same_scales(s, rs) and same_codes(q, rq)


@interp_only
def test_interp_strided_rows():
    """Rows with a stride (a column slice of a wider tensor): per-token and group kernels take the row stride."""
    from kernels_triton._act_quant import quantize_activation

    x = crafted_x(16, 400, torch.bfloat16, 5)[:, 50:350]
    assert not x.is_contiguous()
    for g in GRANS:
        q, s = quantize_activation(x, g, hw_fp8=False)
        rq, rs = dispatch.quantize_activation(x, g)
        assert same_scales(s, rs) and same_codes(q, rq), g


# ---------------------------------------------------------------------------------------------------------
# Runs the interpreter tests above in a fresh process (CI, CPU).

@pytest.mark.skipif(INTERP, reason="this is the launcher of the interpreter subprocess")
def test_interpreter_suite():
    require_triton_interpreter()
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "interp",
                        __file__], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout, r.stdout[-2000:]


# ---------------------------------------------------------------------------------------------------------
# CPU: the launch rule, and the sm_90 code (ahead of time, no GPU).

def test_programmatic_launch_only_where_pdl_allows():
    """The ISA report compiles the quantizer as each target launches it: programmatic on CUDA sm_90 (unless
    FP8DISPATCH_PDL=0), plain on sm_80 / sm_89 (no griddepcontrol) and ROCm; the CPU interpreter never asks."""
    from kernels_triton import _act_quant as A, _pdl
    from kernels_triton.isa import _act_quant_variants

    assert A.PDL and not _pdl.pdl_launch(torch.device("cpu"))
    for arch, want in (("sm_80", False), ("sm_89", False), ("gfx1201", False), ("sm_90", _pdl.ENABLED)):
        variants = _act_quant_variants(arch)
        assert len(variants) == 6 and all(v.constexprs["PDL"] is want for v in variants), arch


def test_launch_plan_rule():
    from kernels_triton._act_quant import plan
    from kernels_triton.act_quant_config import ActQuantConfig, default_act_quant_config

    cfg = default_act_quant_config(Target.simulated_for("sm_90"))
    tensor, token, group = (ActGranularity(g) for g in GRANS)
    p = plan(tensor, 4096, 4096, cfg, 132)  # 2048 tiles; amax pass 4 programs per SM, all resident
    assert (p.kernel, p.block_k, p.grid, p.amax_programs) == ("tensor_two_pass", 8192, 2048, 528)
    assert plan(tensor, 1, 4096, cfg, 132).kernel == "tensor_single"
    assert plan(tensor, 16, 4096, cfg, 132).amax_programs == 8  # never more amax programs than tiles
    # per-token: one whole row per program in registers (32 values per thread), short rows several per program;
    # rows past row_max loop
    p = plan(token, 4096, 4096, cfg, 132)
    assert (p.block_r, p.block_k, p.num_warps, p.grid, p.loop) == (1, 4096, 4, 4096, False)
    p = plan(token, 4096, 14336, cfg, 132)
    assert (p.block_r, p.block_k, p.num_warps, p.loop) == (1, 16384, 16, False)
    p = plan(token, 4096, 576, cfg, 132)
    assert (p.block_r, p.block_k, p.num_warps, p.grid) == (4, 1024, 4, 1024)
    assert plan(token, 4, 3 * cfg.row_max, cfg, 132).loop
    assert plan(token, 1, 100, cfg, 132).block_r == 1  # no padded rows for a single token
    # groups: least padding of the row's groups, whole groups per program
    p = plan(group, 4096, 4096, cfg, 132)
    assert (p.block_r, p.block_k, p.grid) == (2, 4096, 2048)
    assert plan(group, 4096, 14336, cfg, 132).block_k == 16 * 128  # 112 groups = 7 tiles of 16
    assert plan(group, 4096, 7168, cfg, 132).block_k == 8 * 128  # 56 groups = 7 tiles of 8
    assert ActQuantConfig().recip_div
    with pytest.raises(ValueError, match="power of two"):
        ActQuantConfig(block=3000)


def _sass_tools():
    import triton

    bindir = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    return bindir / "nvdisasm", bindir / "cuobjdump"


def _fast_path(sass: str) -> tuple[list[str], list[list[str]]]:
    """Instructions of the common path, entry to the first unconditional EXIT, without the blocks that only call a
    slow path (a predicated branch over a CALL: div.rn's out-of-range operands), and the loop bodies."""
    items: list[tuple[str, str]] = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            items.append(("I", m.group(1)))
            if m.group(1).split()[0] == "EXIT":
                break
        elif re.match(r"^\.L_x_\d+:", line.strip()):
            items.append(("L", line.strip()[:-1]))
    path: list[str] = []
    i = 0
    while i < len(items):
        kind, v = items[i]
        br = re.match(r"@!?U?P\d BRA `\((\.L_x_\d+)\)", v) if kind == "I" else None
        if br:
            end = next((j for j in range(i + 1, len(items)) if items[j] == ("L", br.group(1))), None)
            if end is not None and any("CALL" in items[t][1] for t in range(i + 1, end)):
                path.append(v)
                i = end + 1
                continue
        path.append(v if kind == "I" else ":" + v)
        i += 1
    loops = []
    for idx, v in enumerate(path):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", v)
        if m and ":" + m.group(1) in path[:idx]:
            loops.append([x for x in path[path.index(":" + m.group(1)) + 1: idx + 1] if not x.startswith(":")])
    return [x for x in path if not x.startswith(":")], loops


# Upper bounds on issued SASS instructions per element on the common path (measured at this commit: see the
# module docstring of kernels_triton/_act_quant.py; before: per_token 31, group 24.4, tensor amax 5.3, cast 17.9).
# The H200 budget at full copy bandwidth is ~23 per element; these leave room for Triton/ptxas drift.
SASS_BUDGET = {"act_quant_per_token": 12, "act_quant_per_token_loop": 11, "act_quant_group128": 12.5,
               "act_quant_tensor_single": 11, "act_quant_tensor_amax": 4.5, "act_quant_tensor_cast": 10}


@not_interp
def test_sm90_sass_instructions_per_element():
    """Every kernel the launcher uses for bf16 [4096, 4096] (plus the long-row loop and the single-program kernel),
    compiled for sm_90 without a GPU: the common path's instructions per element stay within SASS_BUDGET, the
    division is not per element (div.rn's FCHK appears once per scale, not per value), the e4m3 cast is the
    hardware F2FP.SATFINITE (no clamp: it saturates and keeps NaN), loads are 128-bit, and nothing spills.
    Compiled as launched there, programmatically (kernels_triton._pdl): one wait for the previous grid before any
    global access (PTX and SASS), no early trigger of the next launch, no load through the non-coherent constant
    path (the previous kernel's writes must not come from it)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels_triton import _act_quant as A
    from kernels_triton._pdl import pdl_target
    from kernels_triton.isa import divisibility_attrs

    nvdisasm, cuobjdump = _sass_tools()
    if not nvdisasm.exists():
        pytest.skip(f"no nvdisasm at {nvdisasm}")
    pdl = A.PDL and pdl_target(Target.simulated_for("sm_90"))  # False with FP8DISPATCH_PDL=0
    report = []
    for name, fn, sig, cx, warps, ints in A.isa_kernel_specs(True, True, "bf16", pdl=pdl):
        full_sig = dict(sig, **{k: "constexpr" for k in cx})
        ck = triton.compile(ASTSource(fn, full_sig, cx, divisibility_attrs(fn, full_sig, ints)),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": 1})
        cubin = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"fp8d_actq_{os.getpid()}_{name}.cubin"
        cubin.write_bytes(ck.asm["cubin"])
        try:
            sass = subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
            res = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True,
                                 text=True).stdout
        finally:
            cubin.unlink()
        ptx = ck.asm["ptx"]
        assert ptx.count("griddepcontrol.wait") == int(pdl) and "launch_dependents" not in ptx, name
        if pdl:
            first_access = min(i for i in (ptx.find("ld.global"), ptx.find("st.global")) if i >= 0)
            assert ptx.index("griddepcontrol.wait") < first_access, name
            lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
            wait = [i for i, ln in enumerate(lines) if "ACQBULK" in ln]
            mem = [i for i, ln in enumerate(lines) if re.search(r"\b(LDG|STG|RED|ATOMG)\b", ln)]
            assert len(wait) == 1 and mem and wait[0] < mem[0], name
            assert not any("CONSTANT" in ln for ln in lines), name
        path, loops = _fast_path(sass)
        values = cx.get("BLOCK", cx.get("BLOCK_R", 1) * cx.get("BLOCK_K", cx.get("GROUPS", 0) * 128)) // (32 * warps)
        per_elem = sum(map(len, loops)) / values if loops else len(path) / values
        report.append(f"{name}: {per_elem:.2f}/element ({len(path)} on the path, {values} values per thread)")
        assert per_elem <= SASS_BUDGET[name], report[-1]
        assert "LOCAL:0" in res.replace(" ", ""), f"{name} spills: {res}"
        assert len(re.findall(r"\bLDG\.E(?:\.EF)?\.128\b", sass)) >= 2, f"{name}: no 128-bit loads of x"
        if "HW_CVT" in cx:
            assert "F2FP.SATFINITE.E4M3.F32" in sass, name
            assert len(re.findall(r"\bFCHK\b", sass)) <= 4, f"{name}: a division per element"
            assert "FMNMX.NAN.XORSIGN" not in sass and "min.xorsign" not in ck.asm["ptx"], name
    print("\n".join(report))


@not_interp
def test_sm90_amax_propagates_nan_in_ptx():
    """Every max feeding an amax is the NaN-propagating form (max.NaN.f32): a plain max returns the non-NaN
    operand, which would turn a NaN activation into a finite scale. AOT PTX check; the GPU tests validate."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels_triton import _act_quant as A

    for name, fn, sig, cx, warps, _ in A.isa_kernel_specs(True, True, "bf16"):
        ptx = triton.compile(ASTSource(fn, dict(sig, **{k: "constexpr" for k in cx}), cx),
                             target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["ptx"]
        maxes = set(re.findall(r"\bmax\.[\w.]*f32", ptx))
        assert maxes and all(".NaN" in mx for mx in maxes), (name, maxes)


# ---------------------------------------------------------------------------------------------------------
# GPU: bit identity on the device.

REAL_SHAPES = [(4096, 4096), (4096, 14336), (16, 4096), (1, 4096)]
ODD_SHAPES = [(3, 129), (5, 1), (257, 576), (64, 40000), (33, 7168)]


def _gpu_check(x: torch.Tensor, gran: str, tag: str, **kw) -> None:
    from kernels_triton._act_quant import quantize_activation

    q, s = quantize_activation(x, gran, **kw)
    rq, rs = dispatch.quantize_activation(x, gran)
    assert q.shape == rq.shape and q.dtype == torch.float8_e4m3fn, tag
    assert same_scales(s, rs), f"{tag}: scales differ"
    assert same_codes(q, rq), f"{tag}: {first_code_diff(q, rq)}"


@pytest.mark.gpu
@not_interp
@pytest.mark.parametrize("gran", GRANS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_real_sizes_bit_identical(dtype, gran):
    """The prefill/decode sizes the W8A8 routes quantize, crafted values (ties, saturation, -0, subnormals, floor),
    the target's path; bf16 also through the sm_80 software encoder (hw_fp8=False) on this GPU."""
    for i, shape in enumerate(REAL_SHAPES + ODD_SHAPES):
        x = crafted_x(*shape, dtype, seed=i, device="cuda")
        _gpu_check(x, gran, f"{gran} {dtype} {shape}")
        if dtype == torch.bfloat16 and shape in REAL_SHAPES:
            _gpu_check(x, gran, f"{gran} {dtype} {shape} sw", hw_fp8=False)
        del x
    torch.cuda.empty_cache()


@pytest.mark.gpu
@not_interp
@pytest.mark.parametrize("kind", ["ties", "nan", "inf"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_crafted_kinds_bit_identical(dtype, kind):
    for shape in [(1, 4096), (16, 4096), (4096, 4096), (3, 129)]:
        x = crafted_x(*shape, dtype, seed=7, kind=kind, device="cuda")
        for gran in GRANS:
            _gpu_check(x, gran, f"{gran} {dtype} {shape} {kind}")
            _gpu_check(x, gran, f"{gran} {dtype} {shape} {kind} sw", hw_fp8=False)


@pytest.mark.gpu
@not_interp
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gpu_every_finite_16bit_value(dtype):
    """Every finite bf16/fp16 value under many scales (shuffles and planted row maxima): the reciprocal division
    and the hardware cast on the whole input domain, per granularity."""
    from test_weight_quant_kernel import all_finite_values

    for seed in range(3):
        for rows in (256, 512):
            x = all_finite_values(dtype, rows, seed, device="cuda")
            for gran in GRANS:
                _gpu_check(x, gran, f"{gran} {dtype} seed {seed} rows {rows}")
            # small planted maxima too (otherwise most groups hold a huge value and quantize to zero)
            _gpu_check(x.clamp(-1, 1), "per_token_group_128", f"clamped {dtype} seed {seed} rows {rows}")


@pytest.mark.gpu
@not_interp
def test_gpu_config_variants_agree():
    """Other tiles, warps, the per-token loop, single-program per-tensor, and IEEE division give the same bits
    (the launch rule is about speed only). bf16 only: each variant is a fresh compile."""
    from kernels_triton.act_quant_config import ActQuantConfig

    variants = [ActQuantConfig(block=1024, num_warps=4), ActQuantConfig(block=16384, num_warps=16),
                ActQuantConfig(row_max=1024, amax_programs_per_sm=1), ActQuantConfig(single_program_max=1 << 22),
                ActQuantConfig(recip_div=False), ActQuantConfig(block=128, num_warps=1, amax_programs_per_sm=16)]
    x = crafted_x(1000, 3000, torch.bfloat16, seed=3, device="cuda")
    for gran in GRANS:
        for cfg in variants:
            _gpu_check(x, gran, f"{gran} {cfg}", config=cfg)


@pytest.mark.gpu
@not_interp
def test_gpu_misaligned_and_strided_x():
    """x one element into its storage (no 128-bit loads possible) and rows with a stride."""
    for dtype in DTYPES:
        buf = crafted_x(1, 16 * 4096 + 1, dtype, seed=2, device="cuda").flatten()
        x = buf[1:].view(16, 4096)
        assert x.data_ptr() % 16
        wide = crafted_x(64, 5000, dtype, seed=4, device="cuda")[:, 100:4196]
        for gran in GRANS:
            _gpu_check(x, gran, f"misaligned {gran} {dtype}")
            _gpu_check(wide, gran, f"strided {gran} {dtype}")


@pytest.mark.gpu
@not_interp
def test_gpu_cuda_graph_replay():
    """No host synchronization and no value-dependent launch: captured once in a CUDA graph, replayed on new values
    (a NaN among them), the codes and scales follow the values."""
    from kernels_triton._act_quant import quantize_activation

    for gran in GRANS:
        for shape in [(4096, 4096), (16, 4096)]:
            x = crafted_x(*shape, torch.bfloat16, seed=1, device="cuda")
            quantize_activation(x, gran)  # compile outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                q, s = quantize_activation(x, gran)
            for seed, kind in [(5, "mixed"), (6, "nan"), (7, "ties")]:
                x.copy_(crafted_x(*shape, torch.bfloat16, seed=seed, kind=kind, device="cuda"))
                graph.replay()
                rq, rs = dispatch.quantize_activation(x, gran)
                assert same_scales(s, rs) and same_codes(q, rq), (gran, shape, kind)


@pytest.mark.gpu
@not_interp
def test_gpu_ties_exact():
    """Values at and next to e4m3 rounding ties (where an f16 intermediate would double-round)."""
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    pos = grid[(grid > 0) & ~grid.isnan()].sort().values
    ties = (pos[1:] + pos[:-1]) / 2
    v = torch.cat([ties, torch.nextafter(ties, ties * 2), torch.nextafter(ties, ties * 0), pos, -ties])
    # One row per value with a planted amax of exactly 448: the scale is 1 and v / s == v.
    x = torch.zeros(v.numel(), 128)
    x[:, 0] = v
    x[:, 1] = 448.0
    for g in ("per_token", "per_token_group_128"):
        _gpu_check(x.cuda(), g, g)


@pytest.mark.gpu
@not_interp
def test_gpu_programmatic_chain_reads_what_the_previous_kernel_wrote():
    """As launched on sm_90 (programmatic, kernels_triton._pdl): each quantizer reads an x that the kernel right
    before it wrote (a multiply, another quantizer's pass), eagerly and over graph replays with new values, and its
    codes and scales are bit-identical to the reference and to plain launches."""
    from kernels_triton import _act_quant as A
    from kernels_triton._pdl import pdl_launch

    if not (A.PDL and pdl_launch(torch.device("cuda"))):
        pytest.skip("no programmatic launches on this GPU (sm_90+ and FP8DISPATCH_PDL != 0)")

    def chain(src):
        outs = []
        for gran in GRANS:  # per-tensor two-pass at 4096 rows, one program at 1 row
            x = src * 2.0  # written by the kernel right before the quantizer
            outs.append((x, gran, *A.quantize_activation(x, gran)))
        return outs

    for shape in [(4096, 4096), (64, 4096), (1, 4096)]:
        src = crafted_x(*shape, torch.bfloat16, seed=11, device="cuda")
        chain(src)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = chain(src)
        for seed, kind in [(12, "mixed"), (13, "nan"), (14, "ties")]:
            src.copy_(crafted_x(*shape, torch.bfloat16, seed=seed, kind=kind, device="cuda") / 2)
            eager = chain(src)
            graph.replay()
            A.PDL = False
            try:
                plain = chain(src)
            finally:
                A.PDL = True
            for outs, how in ((eager, "eager"), (captured, "graph"), (plain, "plain")):
                for x, gran, q, s in outs:
                    rq, rs = dispatch.quantize_activation(x, gran)
                    assert same_scales(s, rs) and same_codes(q, rq), (how, gran, shape, kind)


def test_the_default_launch_shape_is_the_measured_one():
    """The quantizer's default launch shape, pinned to the one the `_scaled_mm` and Triton W8A8 table entries ran with
    (timed in session 18: tools/perf/probe_act_quant.py). Those candidates hash kernels_triton/act_quant_config.py,
    where it lives, so a changed default stales them; changing it needs their re-tune, then this line."""
    from kernels_triton.act_quant_config import ActQuantConfig, default_act_quant_config

    want = ActQuantConfig(block=8192, num_warps=8, single_program_max=8192, amax_programs_per_sm=4, row_max=16384,
                          recip_div=True)
    for arch in ("sm_80", "sm_89", "sm_90", "gfx1201"):
        assert default_act_quant_config(Target.simulated_for(arch)) == want, arch
