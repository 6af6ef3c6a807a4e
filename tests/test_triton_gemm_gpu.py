"""Triton prefill GEMMs on a GPU (marked gpu; run on the H200 by tools/gpu_suite.sh) against
dispatch.reference.linear: every format, both families, sampled shapes with partial tiles, the config
spaces of every target (sm_80's uint8 / software-decode variant forced on the H200), the candidates'
run() with fused activation quantization, and CUDA-graph capture.

Tolerances (relative to S = |x| @ |W|^T, the sum an indexing error is of the order of):
  exact paths (bf16/fp16 MMA on exactly decoded operands, fp32 accumulation): |y - ref| <= 5e-5 S
  fp8 MMA paths (sm_90 wgmma accumulates fp8 products with reduced internal precision, like cuBLAS
  fast-accum): ||y - ref|| / ||ref|| <= 1e-2 and |y - ref| <= 2e-2 S.
"""

from __future__ import annotations

import random

import pytest
import torch

import dispatch
from conftest import assert_programmatic_chain_exact
from dispatch import reference
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.target import Target, detect

pytestmark = pytest.mark.gpu

W8A16_FORMATS = ["fp8_tensor", "fp8_row", "fp8_block", "mxfp8"]
W8A8_FORMATS = ["fp8_tensor", "fp8_row", "fp8_block"]
ARCHS = ("sm_80", "sm_89", "sm_90", "gfx1201")
# (M, N, K): partial tiles in every dimension, K = 576 (real fp8_block case), one-row and large problems.
SHAPES = [(1, 70, 300), (37, 576, 576), (300, 1000, 2880), (129, 4103, 1037), (1024, 4096, 4096)]


def _weight(n, k, g):
    w = torch.randn(n, k, device="cuda", generator=g)
    w = w * torch.exp2(torch.randint(-6, 7, (n, 1), device="cuda", generator=g).float())
    cols = torch.exp2(torch.randint(-4, 5, (1, (k + 31) // 32), device="cuda", generator=g).float())
    return w * cols.repeat_interleave(32, 1)[:, :k]


def _x(m, k, dtype, g):
    x = torch.randn(m, k, device="cuda", generator=g) * torch.exp2(torch.randint(-3, 4, (m, 1), device="cuda",
                                                                                   generator=g).float())
    return x.to(dtype)


def _check(y, x, qw, bias, fp8_mma: bool, what=""):
    r = reference.linear(x, qw, bias, out_dtype=torch.float64)
    s = reference.activation_values(x, qw).abs().double() @ dispatch.dequantize(qw).abs().double().T
    if bias is not None:
        s = s + bias.double().abs()
    yd = y.double()
    # One rounding of the output when it is not fp32.
    out_round = 2.0 ** -7 * r.abs() if y.dtype != torch.float32 else torch.zeros_like(r)
    err = (yd - r).abs()
    if fp8_mma:
        rel = float(torch.linalg.norm(yd - r) / torch.linalg.norm(r).clamp_min(1e-300))
        assert rel <= 1e-2, f"{what}: relative Frobenius error {rel}"
        bad = ~(err <= 2e-2 * s + out_round + 1e-30)
    else:
        bad = ~(err <= 5e-5 * s + out_round + 1e-30)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())}/{bad.numel()} outside the bound; first at "
                                 f"{[int(i) for i in bad.nonzero()[0]]}: {yd[bad][:3].tolist()} vs {r[bad][:3].tolist()}")


def _launch():
    from kernels_triton import _gemm_launch
    return _gemm_launch


def _configs16(arch, fmt, x_dtype):
    from kernels_triton._gemm_config import w8a16_configs
    from kernels_triton._gemm_layouts import W8A16_LAYOUT
    return w8a16_configs(Target.simulated_for(arch), W8A16_LAYOUT[Format(fmt)], x_dtype == torch.float16)


def _configs8(arch, fmt):
    from kernels_triton._gemm_config import w8a8_configs
    from kernels_triton._gemm_layouts import W8A8_LAYOUT
    return w8a8_configs(Target.simulated_for(arch), W8A8_LAYOUT[Format(fmt)])


def _device_arch() -> str:
    return detect(torch.device("cuda")).arch


@pytest.mark.parametrize("hw", [True, False], ids=["hw_fp8", "sm80_path"])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("fmt", W8A16_FORMATS)
def test_w8a16_default_config_shapes(fmt, x_dtype, hw):
    if hw and not detect(torch.device("cuda")).has_triton_fp8_dtype:
        pytest.skip("no Triton fp8 type on this GPU")
    arch = _device_arch() if hw else "sm_80"
    cfg = _configs16(arch, fmt, x_dtype)[0]
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in SHAPES:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
        x = _x(m, k, x_dtype, g)
        bias = torch.randn(n, device="cuda", generator=g).to(x_dtype) if m % 2 else None
        y = _launch().w8a16_gemm(x, qw, bias, torch.float32, cfg, hw_fp8=hw)
        _check(y, x, qw, bias, fp8_mma=False, what=f"{fmt} {m}x{n}x{k} {cfg}")


@pytest.mark.parametrize("hw", [True, False], ids=["hw_fp8", "sm80_path"])
@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_w8a8_default_config_shapes(fmt, hw):
    tgt = detect(torch.device("cuda"))
    if hw and not tgt.has_triton_fp8_dtype:
        pytest.skip("no Triton fp8 type on this GPU")
    arch = tgt.arch if hw else "sm_80"
    cfg = _configs8(arch, fmt)[0]
    g = torch.Generator(device="cuda").manual_seed(1)
    for m, n, k in SHAPES:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="fp8")
        x = _x(m, k, torch.bfloat16, g)
        bias = torch.randn(n, device="cuda", generator=g) if m % 2 else None
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        y = _launch().w8a8_gemm(xq, xs, qw, bias, torch.float32, cfg, hw_fp8=hw)
        _check(y, x, qw, bias, fp8_mma=hw, what=f"{fmt} {m}x{n}x{k} {cfg}")


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_configs_of_every_target_run_on_this_gpu(arch):
    """Each target's config space (two sampled configs + the default), with that target's fp8 path:
    sm_80's uint8 + software decode runs on the H200 as well."""
    hw = Target.simulated_for(arch).has_triton_fp8_dtype and detect(torch.device("cuda")).has_triton_fp8_dtype
    rnd = random.Random(arch)
    g = torch.Generator(device="cuda").manual_seed(2)
    m, n, k = 257, 1000, 1200
    for fmt in W8A16_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
        x = _x(m, k, torch.bfloat16, g)
        space = _configs16(arch, fmt, torch.bfloat16)
        for cfg in [space[0]] + rnd.sample(space[1:], min(2, len(space) - 1)):
            y = _launch().w8a16_gemm(x, qw, None, torch.bfloat16, cfg, hw_fp8=hw)
            _check(y, x, qw, None, fp8_mma=False, what=f"{arch} {fmt} {cfg}")
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="fp8")
        x = _x(m, k, torch.bfloat16, g)
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        space = _configs8(arch, fmt)
        for cfg in [space[0]] + rnd.sample(space[1:], min(2, len(space) - 1)):
            y = _launch().w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=hw)
            _check(y, x, qw, None, fp8_mma=hw, what=f"{arch} {fmt} {cfg}")


def test_full_sm90_spaces_at_prefill_size():
    """Every config of this GPU's spaces at M = N = K = 2048 (the configs autotune will time)."""
    tgt = detect(torch.device("cuda"))
    g = torch.Generator(device="cuda").manual_seed(3)
    m = n = k = 2048
    for fmt in W8A16_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
        x = _x(m, k, torch.bfloat16, g)
        for cfg in _configs16(tgt.arch, fmt, torch.bfloat16):
            y = _launch().w8a16_gemm(x, qw, None, torch.float32, cfg, hw_fp8=tgt.has_triton_fp8_dtype)
            _check(y, x, qw, None, fp8_mma=False, what=f"{fmt} {cfg}")
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="fp8")
        x = _x(m, k, torch.bfloat16, g)
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        for cfg in _configs8(tgt.arch, fmt):
            y = _launch().w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=tgt.has_triton_fp8_dtype)
            _check(y, x, qw, None, fp8_mma=tgt.has_fp8_mma and tgt.has_triton_fp8_dtype, what=f"{fmt} {cfg}")


@pytest.mark.parametrize("m,n,k", [(200, 1000, 4096), (33, 300, 1200)])
def test_small_m_spaces_with_split_k(m, n, k):
    """Configs of this GPU's M <= 256 spaces (small tiles, split-K chosen at launch: the first three and two
    sampled) on partial tiles where the auto split is > 1, with a bias (added once, in the reduction). Every
    config of these spaces is also verified against the reference on the 8 baseline shapes by each autotune
    before it is timed (docs/perf/h200.md); a test of all of them here took > 7 minutes of compiles."""
    tgt = detect(torch.device("cuda"))
    from kernels_triton._gemm_config import w8a8_configs, w8a16_configs
    from kernels_triton._gemm_layouts import W8A8_LAYOUT, W8A16_LAYOUT
    g = torch.Generator(device="cuda").manual_seed(m)
    bucket = 1 << (m - 1).bit_length()
    splits = set()
    rnd = random.Random(m)

    def some(space):
        return space[:3] + rnd.sample(space[3:], min(2, len(space[3:])))

    for fmt in W8A16_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
        x = _x(m, k, torch.bfloat16, g)
        bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
        for cfg in some(w8a16_configs(tgt, W8A16_LAYOUT[Format(fmt)], False, k, bucket)):
            splits.add(cfg.split_for(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count))
            y = _launch().w8a16_gemm(x, qw, bias, torch.float32, cfg, hw_fp8=tgt.has_triton_fp8_dtype)
            _check(y, x, qw, bias, fp8_mma=False, what=f"{fmt} {m}x{n}x{k} {cfg}")
    for fmt in W8A8_FORMATS:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act="fp8")
        x = _x(m, k, torch.bfloat16, g)
        bias = torch.randn(n, device="cuda", generator=g)
        xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
        for cfg in some(w8a8_configs(tgt, W8A8_LAYOUT[Format(fmt)], k, bucket)):
            y = _launch().w8a8_gemm(xq, xs, qw, bias, torch.float32, cfg, hw_fp8=tgt.has_triton_fp8_dtype)
            _check(y, x, qw, bias, fp8_mma=tgt.has_fp8_mma and tgt.has_triton_fp8_dtype,
                   what=f"{fmt} {m}x{n}x{k} {cfg}")
    assert max(splits) > 1, splits  # the split-K path really ran


def _cands():
    from kernels_triton.candidates import candidates
    by_id = {c.id: c for c in candidates()}
    return by_id["triton.w8a16_gemm"], by_id["triton.w8a8_gemm"]


@pytest.mark.parametrize("fmt,act", [(f, "bf16") for f in W8A16_FORMATS] + [(f, "fp8") for f in W8A8_FORMATS])
def test_candidate_run_with_fused_act_quant(fmt, act):
    """Candidate.run: prepare() + default config + (for W8A8) the Triton act-quant kernels, at M = 4096."""
    a16, a8 = _cands()
    cand = a16 if act == "bf16" else a8
    tgt = detect(torch.device("cuda"))
    g = torch.Generator(device="cuda").manual_seed(4)
    m, n, k = 4096, 4096, 4096
    qw = dispatch.quantize(_weight(n, k, g), fmt, act=act)
    x = _x(m, k, torch.bfloat16, g)
    prob = Problem.of(x.shape, qw, x_dtype=x.dtype)
    assert cand.supports(prob, tgt)
    y = cand.run(x, qw, cand.prepare(qw), None, torch.bfloat16, cand.default_config(prob, tgt))
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    _check(y, x, qw, None, fp8_mma=(act == "fp8" and tgt.has_fp8_mma), what=f"{cand.id} {fmt}")


def test_mx_fold_is_learned_without_a_host_sync_and_changes_no_bit():
    """The dispatcher's path (triton.w8a16_gemm prepare / run): whether an mxfp8 weight's scales fold into the decode
    is read asynchronously (no host sync while preparing or running), the unfolded decode runs until the read has
    landed, the folded one after it, and both give the same bits."""
    from dispatch import mx_fold

    cand, _ = _cands()
    qw = dispatch.quantize(torch.randn(512, 1024, device="cuda"), "mxfp8", act="bf16")
    x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
    cfg = cand.default_config(Problem(Format.MXFP8, Act.BF16, 256, 512, 1024), detect(torch.device("cuda")))
    for fold in (False, True):  # both decodes compiled first: nothing in the window below waits for a compile
        warm = dispatch.quantize(torch.randn(512, 1024, device="cuda"), "mxfp8", act="bf16")
        warm._cache[mx_fold.KEY] = fold
        cand.run(x, warm, cand.prepare(warm), None, torch.bfloat16, cfg)
    # One read run to the end first: the pinned flag slab and torch's kernels of the read exist, so neither a pinned
    # allocation nor a first kernel load (lazy module loading) can drain the busy stream below.
    mx_fold.start_read(dispatch.quantize(torch.randn(512, 1024, device="cuda"), "mxfp8", act="bf16"))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(torch.cuda.Stream()):  # a busy stream: the flag's copy queues behind this work
            torch.cuda._sleep(400_000_000)  # ~0.2 s on the H200 against ~1 ms of host work below
            prepared = cand.prepare(qw)
            assert qw._cache[mx_fold.KEY] is False and mx_fold.PENDING in qw._cache
            y_unfolded = cand.run(x, qw, prepared, None, torch.bfloat16, cfg)
            assert qw._cache[mx_fold.KEY] is False  # the copy has not landed yet: the unfolded decode ran
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    y_folded = cand.run(x, qw, prepared, None, torch.bfloat16, cfg)
    assert qw._cache[mx_fold.KEY] is True and mx_fold.PENDING not in qw._cache
    assert torch.equal(y_unfolded, y_folded)



@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_mx_fold_read_of_a_weight_on_another_gpu_waits_for_that_gpu():
    """The fold flag of a weight on cuda:1, prepared while cuda:0 is current: its copy and event go on cuda:1's
    stream, so the flag is not read before cuda:1 has run the copy (an event on cuda:0 would complete at once and
    settle on the pinned buffer's initial 0: unfolded for good)."""
    from dispatch import mx_fold

    qw = dispatch.quantize(torch.randn(512, 1024, device="cuda:1"), "mxfp8", act="bf16")
    # One read run to the end first (the pinned slab and torch's kernels of the read on cuda:1 exist: see above).
    mx_fold.start_read(dispatch.quantize(torch.randn(512, 1024, device="cuda:1"), "mxfp8", act="bf16"))
    torch.cuda.synchronize(1)
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        torch.cuda._sleep(400_000_000)  # cuda:1's current stream busy for ~0.2 s
    mx_fold.start_read(qw)
    mx_fold.settle(qw)
    assert qw._cache[mx_fold.KEY] is False and mx_fold.PENDING in qw._cache
    torch.cuda.synchronize(1)
    mx_fold.settle(qw)
    assert qw._cache[mx_fold.KEY] is True and mx_fold.PENDING not in qw._cache


def test_cuda_graph_capture_and_replay():
    """No host sync or value-dependent branch: capture run() (act quant + GEMM) and replay on new inputs."""
    a16, a8 = _cands()
    tgt = detect(torch.device("cuda"))
    g = torch.Generator(device="cuda").manual_seed(5)
    m, n, k = 512, 1536, 1024
    for cand, fmt, act in [(a16, "mxfp8", "bf16"), (a16, "fp8_block", "bf16"), (a8, "fp8_block", "fp8"),
                           (a8, "fp8_tensor", "fp8")]:
        qw = dispatch.quantize(_weight(n, k, g), fmt, act=act)
        x = _x(m, k, torch.bfloat16, g)
        prob = Problem.of(x.shape, qw, x_dtype=x.dtype)
        cfg = cand.default_config(prob, tgt)
        prep = cand.prepare(qw)
        cand.run(x, qw, prep, None, torch.bfloat16, cfg)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = cand.run(x, qw, prep, None, torch.bfloat16, cfg)
        x.copy_(_x(m, k, torch.bfloat16, g))
        graph.replay()
        torch.cuda.synchronize()
        eager = cand.run(x, qw, prep, None, torch.bfloat16, cfg)
        assert torch.equal(y, eager), f"{cand.id} {fmt}: graph replay differs from eager"


def _compiled_pdl_flags(fn) -> set:
    """launch_pdl of every kernel of `fn` compiled in this process (Triton 3.6's JITFunction.device_caches)."""
    return {bool(getattr(k.metadata, "launch_pdl", False)) for e in fn.device_caches.values() for k in e[0].values()}


def test_programmatic_launch_chain_is_exact(monkeypatch):
    """Each GEMM consumes the previous one's output (W8A16 GEMM with split-K -> act quant -> W8A8 GEMM -> ...),
    the pattern where a missing griddepcontrol.wait reads stale data or a write races the previous kernel. With
    programmatic dependent launch (kernels_triton._pdl; sm_90+) the outputs must be bit-identical to plain
    launches, eager and in graph replays (every kernel of the chain is deterministic), and the GEMMs must really
    have been launched programmatically."""
    from kernels_triton import _gemm
    from kernels_triton._gemm_config import GemmConfig

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90+")
    a16, a8 = _cands()
    g = torch.Generator(device="cuda").manual_seed(13)

    def unit_rows(n, k):  # rows of norm 1: activations keep their magnitude through the chain
        w = _weight(n, k, g)
        return w / w.norm(dim=1, keepdim=True)

    split4 = GemmConfig(64, 64, 128, 8, 4, 3, swap_ab=True, tma=True, split_k=4)
    split2 = GemmConfig(64, 128, 128, 8, 4, 3, swap_ab=False, tma=False, split_k=2)
    plain = GemmConfig(64, 128, 128, 8, 4, 3, tma=True)
    plan = [(a16, "fp8_row", "bf16", 4096, 4096, split4), (a16, "mxfp8", "bf16", 2048, 4096, split2),
            (a8, "fp8_block", "fp8", 4096, 2048, plain), (a8, "fp8_tensor", "fp8", 4096, 4096, split2),
            (a8, "fp8_row", "fp8", 4096, 4096, plain), (a16, "fp8_block", "bf16", 4096, 4096, plain)]
    layers = []
    for cand, fmt, act, n, k, cfg in plan:
        qw = dispatch.quantize(unit_rows(n, k), fmt, act=act)
        layers.append((cand, qw, cand.prepare(qw), cfg))

    def chain(x):
        outs = []
        for _ in range(2):
            x = x * 1.0001  # a torch kernel writes the next input right before the first GEMM reads it
            for cand, qw, prep, cfg in layers:
                x = cand.run(x, qw, prep, None, torch.bfloat16, cfg)
                outs.append(x)
        return outs

    for m in (64, 200):
        assert_programmatic_chain_exact(chain, _x(m, 4096, torch.bfloat16, g), monkeypatch, f"M={m}")
    assert _compiled_pdl_flags(_gemm._w8a16_gemm_kernel) == {False, True}
    assert _compiled_pdl_flags(_gemm._w8a8_gemm_kernel) == {False, True}


def test_nan_activation_propagates():
    a16, a8 = _cands()
    tgt = detect(torch.device("cuda"))
    g = torch.Generator(device="cuda").manual_seed(6)
    for cand, fmt, act in [(a16, "fp8_row", "bf16"), (a16, "mxfp8", "bf16"), (a8, "fp8_block", "fp8")]:
        qw = dispatch.quantize(_weight(300, 512, g), fmt, act=act)
        x = _x(200, 512, torch.bfloat16, g)
        x[7, 100] = float("nan")
        prob = Problem.of(x.shape, qw, x_dtype=x.dtype)
        y = cand.run(x, qw, cand.prepare(qw), None, torch.float32, cand.default_config(prob, tgt))
        r = reference.linear(x, qw, None, out_dtype=torch.float32)
        assert torch.equal(torch.isnan(y), torch.isnan(r)), f"{cand.id} {fmt}"
        assert bool(torch.isnan(y[7]).all())


def test_problem_act_and_fmt_tags_are_checked():
    a16, a8 = _cands()
    tgt = detect(torch.device("cuda"))
    qw = dispatch.quantize(torch.randn(256, 256, device="cuda"), "fp8_row", act="bf16")
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    prob = Problem(Format.FP8_ROW, Act.FP8, 64, 256, 256)
    with pytest.raises(dispatch.FormatError):
        a8.run(x, qw, None, None, torch.bfloat16, a8.default_config(prob, tgt))


@pytest.mark.parametrize("hw", [True, False], ids=["hw_fp8", "sm80_path"])
@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_row", "fp8_block", "mxfp8", "mxfp8_large_scales"])
def test_w8a16_bf16_decode_is_exact_for_every_code(fmt, hw):
    """The W8A16 GEMM's bf16 decode (_fp8.e4m3_to_bf16_spread unless FP8DISPATCH_TRITON_FAST_BF16=0) is exact for
    every finite e4m3 code (mxfp8: under e8m0 codes 0..134, so the decode's one FMA carries 2^e (MX_FOLD);
    mxfp8_large_scales: codes 0..246, the second FMA): with one-hot activations each
    output is one decoded weight times its scale, rounded once, so y must equal dequantize(qw) rounded to bf16
    exactly (subnormals included; -0 sums with the +0 products to +0, so zeros compare by value). The first 8
    configs of the target's space (swap_ab and TMA variants among them)."""
    from kernels_triton._gemm_launch import fast_bf16_decode, mx_fold_ok

    if hw and not detect(torch.device("cuda")).has_triton_fp8_dtype:
        pytest.skip("no Triton fp8 type on this GPU")
    assert fast_bf16_decode(torch.bfloat16, False) == (torch.version.hip is None and _launch().FAST_BF16_DECODE)
    codes = torch.arange(256, device="cuda", dtype=torch.int32)
    codes = codes[(codes & 0x7F) != 0x7F].to(torch.uint8)  # the 254 finite codes
    n, k = 256, 256
    q = codes.repeat((n * k + codes.numel() - 1) // codes.numel())[: n * k].view(n, k)
    q = q[torch.randperm(n, device="cuda")]  # each 128-block sees many codes
    g = torch.Generator(device="cuda").manual_seed(7)
    if fmt == "fp8_tensor":
        scale = torch.tensor(0.75, device="cuda")
    elif fmt == "fp8_row":
        scale = torch.exp2(torch.randint(-8, 8, (n,), device="cuda", generator=g).float()) * 1.25
    elif fmt == "fp8_block":
        scale = torch.exp2(torch.randint(-8, 8, (n // 128, k // 128), device="cuda", generator=g).float()) * 1.25
    else:  # every e8m0 code that cannot overflow (448 x 2^119 < 2^128), 0 (2^-127: subnormal products) included;
        # mxfp8: every code the folded decode takes (scale <= 2^7)
        e = torch.arange(n * (k // 32), device="cuda") % (247 if fmt == "mxfp8_large_scales" else 135)
        scale = e[torch.randperm(e.numel(), device="cuda")].view(n, k // 32).to(torch.uint8).view(torch.float8_e8m0fnu)
        fmt = "mxfp8"
    qw = dispatch.QWeight(Format(fmt), Act.BF16, q.view(torch.float8_e4m3fn), scale)
    if fmt == "mxfp8":  # which decode the launcher picks
        assert mx_fold_ok(qw) == (int(scale.view(torch.uint8).max()) <= 134)
    want = dispatch.dequantize(qw).to(torch.bfloat16).t()  # y[m, n] = w[n, m] for x = I
    x = torch.eye(k, device="cuda", dtype=torch.bfloat16)
    arch = _device_arch() if hw else "sm_80"
    for cfg in _configs16(arch, fmt, torch.bfloat16)[:8]:
        y = _launch().w8a16_gemm(x, qw, None, torch.bfloat16, cfg, hw_fp8=hw)
        assert torch.equal(y.float(), want.float()), f"{fmt} {cfg}"


@pytest.mark.parametrize("fmt", ["fp8_row", "mxfp8"])
def test_w8a16_register_wgmma_race_is_fixed_at_two_ctas_per_sm(fmt):
    """The H200 regression of session 8: the 128x128x64 / 8-warp / 4-stage swap_ab config gave non-finite
    outputs (4 to 22757 per run, nondeterministic) on 28672x4096 at M = 64 and 256, where 2 CTAs share an SM:
    ptxas re-used the registers of in-flight wgmmas (dispatch.isa.wgmma_register_hazards). With WGMMA_DRAIN
    every run is finite, within the bound, and bit-identical to the others (no split-K: deterministic)."""
    from kernels_triton._gemm_config import GemmConfig

    if not detect(torch.device("cuda")).has_wgmma:
        pytest.skip("the race is an sm_90 wgmma one")
    cfg = GemmConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4, swap_ab=True,
                     tma=False, split_k=0)
    g = torch.Generator(device="cuda").manual_seed(3)
    n, k = 28672, 4096
    qw = dispatch.quantize(_weight(n, k, g), fmt, act="bf16")
    for m in (64, 256):
        x = _x(m, k, torch.bfloat16, g)
        runs = [_launch().w8a16_gemm(x, qw, None, torch.float32, cfg, hw_fp8=True) for _ in range(6)]
        for i, y in enumerate(runs):
            assert bool(torch.isfinite(y).all()), f"{fmt} M={m} run {i}: {int((~torch.isfinite(y)).sum())} non-finite"
            assert torch.equal(y, runs[0]), f"{fmt} M={m} run {i} differs from run 0"
        _check(runs[0], x, qw, None, fp8_mma=False, what=f"{fmt} M={m}")


def test_run_time_wgmma_check_passes_the_shipped_kernels_and_refuses_an_undrained_one(monkeypatch):
    """kernels_triton._sass_guard on real launches (written in session 8; first ran, and passed, on the H200 in
    session 9). The candidates' kernels are checked without a warning; with the drain patched off, the
    racy config's kernel (register hazards in its SASS with the bundled ptxas) raises CompileError."""
    import warnings

    from dispatch.errors import CompileError
    from kernels_triton import _gemm, _gemm_launch, _sass_guard
    from kernels_triton._gemm_candidates import TritonW8A16Gemm
    from kernels_triton._gemm_config import GemmConfig

    if not detect(torch.device("cuda")).has_wgmma:
        pytest.skip("the check concerns sm_90 wgmma")
    cand = TritonW8A16Gemm()
    cfg = GemmConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4, swap_ab=True,
                     tma=False, split_k=0)
    g = torch.Generator(device="cuda").manual_seed(5)
    qw = dispatch.quantize(_weight(1024, 1024, g), "fp8_row", act="bf16")
    x = _x(256, 1024, torch.bfloat16, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cand.run(x, qw, cand.prepare(qw), None, torch.bfloat16, cfg)
    assert _sass_guard._checked_total.get(id(_gemm._w8a16_gemm_kernel), 0) >= 1
    assert not _sass_guard._disabled
    # Once a racy kernel is in a candidate's cache, every later call of that candidate in the process raises (the
    # toolchain is unsafe for it): remove the one this test compiles, so later tests in this worker are unaffected.
    fn = _gemm._w8a16_gemm_kernel
    before = {d: set(e[0]) for d, e in fn.device_caches.items()}
    monkeypatch.setattr(_gemm_launch, "wgmma_drain", lambda device, dot_f32: False)
    try:
        with pytest.raises(CompileError, match="unfinished wgmma"):
            cand.run(x, qw, cand.prepare(qw), None, torch.bfloat16, cfg)
    finally:
        for d, e in fn.device_caches.items():
            for key in set(e[0]) - before.get(d, set()):
                del e[0][key]
