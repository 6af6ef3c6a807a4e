"""dispatch.linear on the CPU against dispatch.reference; force/deny; explain; plans; torch.compile; threads."""

from __future__ import annotations

import importlib
import os
import threading

import pytest
import torch

import dispatch
force_mod = importlib.import_module("dispatch.force")  # dispatch.force is the function
from dispatch import registry
from dispatch.errors import FormatError, NoCandidateError
from dispatch.explain import NOT_RUN_ON_HARDWARE
from dispatch.formats import Act, Format
from dispatch.linear import PLANS_KEY, clear_plans
from dispatch.target import Target
from dispatch_fakes import FakeKernel, fake_backends, run_concurrently

PAIRS = [(f, a) for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)]
N, K = 192, 320  # partial 128-blocks in both dims, K not a multiple of 32*... (320 = 10 * 32)


@pytest.fixture(scope="module")
def weights():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(N, K, generator=g) * torch.logspace(-2, 1, K)  # varied scales per group
    return {(f, a): dispatch.quantize(w, f, act=a) for f, a in PAIRS}


def _close(y, ref):
    assert y.shape == ref.shape and y.dtype == ref.dtype
    # paths: reference (bitwise) or CPU _scaled_mm (fp32 accumulation, bias added after the cast: <= 1 ulp)
    torch.testing.assert_close(y.float(), ref.float(), rtol=2 ** -6, atol=1e-3 * ref.float().abs().max().item())


@pytest.mark.parametrize("fa", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_matches_reference(weights, fa, dtype):
    qw = weights[fa]
    g = torch.Generator().manual_seed(1)
    bias = torch.randn(N, generator=g).to(dtype)
    for shape in [(1, K), (5, K), (2, 3, K), (2, 1, 4, K)]:
        x = torch.randn(*shape, generator=g).to(dtype)
        for b in (None, bias):
            _close(dispatch.linear(x, qw, b), dispatch.reference.linear(x, qw, b))


@pytest.mark.parametrize("fa", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_linear_edge_inputs(weights, fa):
    qw = weights[fa]
    g = torch.Generator().manual_seed(2)
    # M = 0, with and without leading dims
    for shape in [(0, K), (3, 0, K)]:
        y = dispatch.linear(torch.empty(*shape, dtype=torch.bfloat16), qw)
        assert y.shape == (*shape[:-1], N) and y.dtype == torch.bfloat16
    # non-contiguous x (a transposed view and a strided slice)
    xt = torch.randn(K, 6, generator=g).to(torch.bfloat16).t()
    assert not xt.is_contiguous()
    _close(dispatch.linear(xt, qw), dispatch.reference.linear(xt.contiguous(), qw))
    xs = torch.randn(4, 2 * K, generator=g).to(torch.bfloat16)[:, ::2]
    _close(dispatch.linear(xs, qw), dispatch.reference.linear(xs.contiguous(), qw))
    x3 = torch.randn(3, 4, K, generator=g).to(torch.bfloat16).transpose(0, 1)
    _close(dispatch.linear(x3, qw), dispatch.reference.linear(x3.contiguous(), qw))
    # out_dtype and fp32 activations (documented: handed to candidates as fp32, reference math on CPU)
    x = torch.randn(3, K, generator=g)
    _close(dispatch.linear(x, qw), dispatch.reference.linear(x, qw))
    _close(dispatch.linear(x.bfloat16(), qw, out_dtype=torch.float32),
           dispatch.reference.linear(x.bfloat16(), qw, out_dtype=torch.float32))


def test_bad_arguments(weights):
    qw = weights[(Format.FP8_ROW, Act.BF16)]
    with pytest.raises(FormatError, match="K = 320"):
        dispatch.linear(torch.randn(2, K + 1), qw)
    with pytest.raises(FormatError, match="bias"):
        dispatch.linear(torch.randn(2, K), qw, torch.randn(N + 1))
    with pytest.raises(FormatError):
        dispatch.linear(torch.randn(2, K, dtype=torch.float64), qw)


def test_nan_propagates(weights):
    # same NaN pattern as the reference: per-token formats keep other rows finite, per-tensor poisons all
    for fa in PAIRS:
        x = torch.randn(2, K, dtype=torch.bfloat16)
        x[0, 3] = float("nan")
        y, ref = dispatch.linear(x, weights[fa]), dispatch.reference.linear(x, weights[fa])
        assert torch.isnan(y[0]).any()
        assert torch.equal(torch.isnan(y), torch.isnan(ref)), fa


def test_plan_cache_is_per_bucket_and_reused(weights):
    qw = weights[(Format.FP8_TENSOR, Act.FP8)]
    clear_plans(qw)
    for m in (1, 3, 4, 3, 4, 1):
        dispatch.linear(torch.randn(m, K, dtype=torch.bfloat16), qw)
    keys = list(qw._cache[PLANS_KEY])
    assert sorted(k[0] for k in keys) == [1, 4]  # M=3 and M=4 share bucket 4


def test_force_context_manager_is_scoped_and_restores(weights):
    qw = weights[(Format.FP8_TENSOR, Act.FP8)]
    x = torch.randn(2, K, dtype=torch.bfloat16)
    base = dispatch.explain(x, qw).candidate_id
    assert base == "torch.scaled_mm_tensorwise"  # CPU _scaled_mm matches per-tensor semantics
    with dispatch.force("torch.reference"):
        assert dispatch.explain(x, qw).candidate_id == "torch.reference"
        ref_y = dispatch.linear(x, qw)
        with dispatch.force(deny=["torch.reference"]):
            with pytest.raises(NoCandidateError, match="not forced"):
                dispatch.linear(x, qw)
        assert dispatch.explain(x, qw).candidate_id == "torch.reference"
    assert dispatch.explain(x, qw).candidate_id == base
    with pytest.raises(RuntimeError):
        with dispatch.force(deny=["torch.scaled_mm_tensorwise"]):
            assert dispatch.explain(x, qw).candidate_id == "torch.reference"
            raise RuntimeError("boom")
    assert dispatch.explain(x, qw).candidate_id == base
    torch.testing.assert_close(ref_y, dispatch.linear(x, qw), rtol=2 ** -7, atol=1e-2)


def test_force_is_thread_local(weights):
    qw = weights[(Format.FP8_TENSOR, Act.FP8)]
    x = torch.randn(2, K, dtype=torch.bfloat16)
    inside, seen = threading.Event(), {}
    done = threading.Event()

    def forced():
        with dispatch.force("torch.reference"):
            seen["forced"] = dispatch.explain(x, qw).candidate_id
            inside.set()
            done.wait(5)

    t = threading.Thread(target=forced)
    t.start()
    inside.wait(5)
    seen["other"] = dispatch.explain(x, qw).candidate_id
    done.set()
    t.join()
    assert seen == {"forced": "torch.reference", "other": "torch.scaled_mm_tensorwise"}


def test_env_force_and_deny(weights, monkeypatch):
    qw = weights[(Format.FP8_TENSOR, Act.FP8)]
    x = torch.randn(2, K, dtype=torch.bfloat16)
    try:
        monkeypatch.setenv("FP8DISPATCH_DENY", "torch.scaled_mm_tensorwise")
        force_mod.reload_env()
        d = dispatch.explain(x, qw)
        assert d.candidate_id == "torch.reference"
        assert "FP8DISPATCH_DENY" in str(d)
        monkeypatch.delenv("FP8DISPATCH_DENY")
        monkeypatch.setenv("FP8DISPATCH_FORCE", "torch")
        force_mod.reload_env()
        assert dispatch.explain(x, qw).decision.backend == "torch"
        with dispatch.force("torch.reference"):  # the context manager overrides the env force list
            assert dispatch.explain(x, qw).candidate_id == "torch.reference"
    finally:
        monkeypatch.delenv("FP8DISPATCH_FORCE", raising=False)
        monkeypatch.delenv("FP8DISPATCH_DENY", raising=False)
        force_mod.reload_env()


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "gfx1201", "cpu"])
def test_explain_simulated_targets(weights, arch):
    t = Target.simulated_for(arch)
    for (f, a), qw in weights.items():
        e = dispatch.explain((4, K), qw, target=t)
        s = str(e)
        assert f"chosen:  {e.candidate_id}" in s and f"{arch}" in s and "from:" in s
        for cid, why in e.decision.rejected:
            assert f"  - {cid}: {why}" in s
        if arch == "sm_80":
            assert "scaled_mm" not in e.candidate_id


def test_explain_marks_unvalidated_backends(weights):
    qw = weights[(Format.FP8_ROW, Act.BF16)]
    with registry.use_candidates(fake_backends(), unvalidated_backends=["hip"]):
        e = dispatch.explain((1, K), qw, target=Target.simulated_for("gfx1201"))
        s = str(e)
        assert e.candidate_id == "triton.gemv"  # the heuristic ranks unvalidated kernels last
        assert f"[{NOT_RUN_ON_HARDWARE}]" in s and "hip.w8a16_gemv" in s
        assert "triton.gemv [" not in s
        with dispatch.force("hip"):
            e = dispatch.explain((1, K), qw, target=Target.simulated_for("gfx1201"))
            assert f"chosen:  hip.w8a16_gemv [{NOT_RUN_ON_HARDWARE}]" in str(e)


def test_explain_from_tensor_and_shape_agree(weights):
    qw = weights[(Format.FP8_BLOCK, Act.FP8)]
    x = torch.randn(2, 3, K, dtype=torch.bfloat16)
    a, b = dispatch.explain(x, qw), dispatch.explain((2, 3, K), qw)
    assert a.candidate_id == b.candidate_id and a.m == b.m == 6 and a.problem.bucket == 8


def test_linear_uses_registered_candidates_and_bias(weights):
    # a fake CPU-capable kernel: linear routes to it and passes bias/out_dtype/config through
    class CpuFake(FakeKernel):
        def supports(self, problem, target):
            return dispatch.problem.Support.yes()

    fake = CpuFake("triton.cpu_fake")
    qw = weights[(Format.FP8_ROW, Act.BF16)]
    clear_plans(qw)
    with registry.use_candidates([fake]):
        x, b = torch.randn(3, K, dtype=torch.bfloat16), torch.randn(N, dtype=torch.bfloat16)
        _close(dispatch.linear(x, qw, b), dispatch.reference.linear(x, qw, b))
        assert fake.calls == 1
    # leaving use_candidates bumps the generation: the next call re-plans with the real registry
    dispatch.linear(torch.randn(3, K, dtype=torch.bfloat16), qw)
    assert fake.calls == 1


def test_concurrent_calls_identical(weights):
    qw = dispatch.quantize(torch.randn(N, K), "fp8_tensor")  # fresh: plans are built under contention
    xs = [torch.randn(m, K, dtype=torch.bfloat16) for m in (1, 2, 5, 9, 17, 33, 64, 3)]
    expected = [dispatch.reference.linear(x, qw) for x in xs]

    def worker(i):
        for _ in range(5):
            for x, e in zip(xs, expected):
                _close(dispatch.linear(x, qw), e)

    run_concurrently(worker)


@pytest.mark.skipif(os.environ.get("FP8DISPATCH_SKIP_COMPILE") == "1", reason="compile disabled")
def test_torch_compile_fullgraph_cpu(weights):
    # aot_eager: proves no graph break (fullgraph=True) and that the fake implementation's shapes are right;
    # the inductor backend is exercised on the GPU (tests/test_dispatch_gpu.py): on this CPU it takes ~40 s.
    torch._dynamo.reset()
    qw = weights[(Format.FP8_BLOCK, Act.FP8)]
    b = torch.randn(N, dtype=torch.bfloat16)

    def f(x):
        return torch.relu(dispatch.linear(x, qw, b)) * 2

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    for shape in [(2, 3, K), (5, K)]:
        x = torch.randn(*shape, dtype=torch.bfloat16)
        torch.testing.assert_close(cf(x), f(x))


@pytest.mark.parametrize("fmt", list(Format))
def test_dequant_mm_route_math_on_cpu(fmt, monkeypatch):
    """The GPU-only dequantize-then-GEMM route's math, run directly on CPU tensors (small chunks force the
    chunk loop through partial 128-row blocks)."""
    import dispatch.torch_candidates as tc

    monkeypatch.setattr(tc, "_DEQUANT_CHUNK_ELEMS", 128 * K)
    w = torch.randn(3 * 128 + 17, K) * torch.logspace(-3, 1, K)
    qw = dispatch.quantize(w, fmt, act="bf16")
    exact = dispatch.dequantize(qw)
    assert torch.equal(tc.dequantize_to(qw, torch.float32), exact)
    assert torch.equal(tc.dequantize_to(qw, torch.bfloat16), exact.bfloat16())
    x = torch.randn(5, K, dtype=torch.bfloat16)
    b = torch.randn(qw.out_features, dtype=torch.bfloat16)
    y = tc.DequantMM().run(x, qw, None, b, torch.bfloat16, None)
    ref = dispatch.reference.linear(x, qw, b).float()
    # the weight is rounded to bf16 before the GEMM: ~2^-9 relative per element, not bitwise
    assert y.dtype == torch.bfloat16 and ((y.float() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.skipif(os.environ.get("FP8DISPATCH_SKIP_COMPILE") == "1", reason="compile disabled")
def test_torch_compile_fullgraph_inductor_cpu_every_format():
    """Inductor (not only aot_eager) over all seven (format, act) pairs, e8m0 scales included: one graph, no
    break, and the same numbers as eager (~20 s on this CPU)."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    qws = [dispatch.quantize(torch.randn(384, 640, generator=g) * torch.logspace(-2, 0.5, 640), f, act=a)
           for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)]
    b = torch.randn(384, generator=g).to(torch.bfloat16)

    def f(x):
        return sum(torch.nn.functional.silu(dispatch.linear(x, qw, b).float()) for qw in qws)

    cf = torch.compile(f, fullgraph=True)
    for m in (1, 16, 100):
        x = torch.randn(m, 640, generator=g).to(torch.bfloat16)
        torch.testing.assert_close(cf(x), f(x), rtol=1e-5, atol=1e-5)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("fa", PAIRS, ids=lambda p: f"{p[0].value}-{p[1].value}")
def test_gradients_reach_x_and_the_bias(weights, fa):
    """x (and the bias) requiring grad under grad mode: the kernels' outputs carry no grad_fn, so the call goes
    through the custom op's autograd formula. The forward is the same call's; dx = dy @ dequantize(W) (straight
    through the W8A8 activation quantization), dbias = dy summed over tokens; the weight is frozen."""
    qw = weights[fa]
    x = torch.randn(2, 3, K, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(N, dtype=torch.bfloat16, requires_grad=True)
    y = dispatch.linear(x, qw, b)
    assert y.requires_grad and y.grad_fn is not None
    assert torch.equal(y.detach(), dispatch.linear(x.detach(), qw, b.detach()))
    g = torch.randn(y.shape)
    (y.float() * g).sum().backward()
    dy = g.to(torch.bfloat16).float().reshape(-1, N)  # what reaches the op: y's gradient in y's dtype
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    assert _rel(x.grad, (dy @ dispatch.dequantize(qw).float()).reshape(x.shape)) < 1e-2
    assert _rel(b.grad, dy.sum(0)) < 1e-2


def test_no_gradient_bookkeeping_under_no_grad_or_inference_mode(weights, monkeypatch):
    """An engine's calls (no_grad / inference_mode) take the plain path even for an x that requires grad: the
    custom op (and its autograd context) is not entered."""
    lin = importlib.import_module("dispatch.linear")  # dispatch.linear is the function
    qw = weights[(Format.FP8_ROW, Act.BF16)]
    x = torch.randn(4, K, dtype=torch.bfloat16, requires_grad=True)
    monkeypatch.setattr(lin, "linear_op", lambda *a: (_ for _ in ()).throw(AssertionError("op entered")))
    with torch.no_grad():
        assert not dispatch.linear(x, qw).requires_grad
    with torch.inference_mode():
        assert not dispatch.linear(x.detach(), qw).requires_grad
    assert not dispatch.linear(x.detach(), qw).requires_grad


def test_fp8linear_passes_gradients_to_the_layers_before_it(weights):
    """A frozen FP8Linear between trainable layers (adapter training over an fp8 base): the layer before it gets
    the gradient it would get through nn.Linear with the dequantized weight."""
    torch.manual_seed(1)
    qw = weights[(Format.FP8_BLOCK, Act.FP8)]
    before = torch.nn.Linear(K, K, dtype=torch.bfloat16)
    fp8 = dispatch.FP8Linear(qw)
    x = torch.randn(5, K, dtype=torch.bfloat16)
    fp8(before(x)).float().square().sum().backward()
    got = before.weight.grad.clone()
    before.weight.grad = None
    dense = dispatch.dequantize(qw).to(torch.bfloat16)
    h = before(x)
    y = fp8(h.detach())  # the same forward values, then the dense layer's backward
    h.backward(((2 * y.float()).to(torch.bfloat16) @ dense))
    assert _rel(got, before.weight.grad) < 1e-2


@pytest.mark.skipif(os.environ.get("FP8DISPATCH_SKIP_COMPILE") == "1", reason="compile disabled")
def test_torch_compile_fullgraph_backward_cpu(weights):
    """The autograd formula traces: a compiled (aot_eager, fullgraph) function's x.grad equals the eager one's."""
    torch._dynamo.reset()
    qw = weights[(Format.MXFP8, Act.BF16)]

    def f(x):
        return dispatch.linear(x, qw).float().square().sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    x1 = torch.randn(3, K, dtype=torch.bfloat16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    f(x1).backward()
    cf(x2).backward()
    torch.testing.assert_close(x2.grad, x1.grad)


def test_explain_notes_a_k_that_is_not_a_multiple_of_16():
    """On a GPU target, a K that no aligned kernel serves is named with what to do about it (measured slow on the
    H200); a CPU target or an aligned K gets no note. The padding it proposes is exact: zero columns change no
    group's amax, so the codes and scales of the real columns, and the output, are the same."""
    from dispatch.target import Target

    w = torch.randn(64, 1000)
    qw = dispatch.quantize(w, "fp8_block")
    text = str(dispatch.explain(4, qw, target=Target.simulated_for("sm_90")))
    assert "K = 1000 is not a multiple of 16" in text and "K = 1008" in text
    assert "note:" not in str(dispatch.explain(4, qw, target=Target.simulated_for("cpu")))
    assert "note:" not in str(dispatch.explain(4, dispatch.quantize(torch.randn(64, 1008), "fp8_block"),
                                               target=Target.simulated_for("sm_90")))
    for fmt in ("fp8_block", "fp8_tensor", "fp8_row", "mxfp8"):
        qp = dispatch.quantize(torch.nn.functional.pad(w, (0, 8)), fmt)
        qw = dispatch.quantize(w, fmt)
        x = torch.randn(3, 1000, dtype=torch.bfloat16)
        torch.testing.assert_close(dispatch.reference.linear(torch.nn.functional.pad(x, (0, 8)), qp),
                                   dispatch.reference.linear(x, qw), rtol=0, atol=0)


def test_pad_k16_route_is_exact_and_only_for_unaligned_k_on_gpus():
    """pad.k16 (dispatch/pad_k.py): the padded weight dequantizes to the original plus zero columns, its scale tensor
    is the original one, and the route's output (run here on CPU tensors, the padded problem going to the reference)
    equals the unpadded reference exactly. Offered on GPU targets for K % 16 != 0 only, and the heuristic counts the
    padded problem's best estimate plus the pad."""
    from dispatch import heuristic
    from dispatch.pad_k import PadK16, pad_weight
    from dispatch.problem import Problem
    from dispatch.target import Target

    cand = PadK16()
    gpu, cpu = Target.simulated_for("sm_90"), Target.simulated_for("cpu")
    p = Problem(Format.FP8_ROW, Act.BF16, 16, 3000, 1000)
    assert cand.supports(p, gpu) and not cand.supports(p, cpu)
    assert not cand.supports(Problem(Format.FP8_ROW, Act.BF16, 16, 3000, 1008), gpu)
    est = heuristic.estimate_us(cand, p, gpu)
    padded = Problem(Format.FP8_ROW, Act.BF16, 16, 3000, 1008)
    assert est > min(heuristic.estimate_us(c, padded, gpu) for c in registry.candidates()
                     if (p.fmt, p.act) in c.serves and c is not cand and c.supports(padded, gpu))
    w = torch.randn(64, 1000)
    for fmt, act in [("fp8_block", "fp8"), ("fp8_tensor", "fp8"), ("fp8_row", "fp8"), ("fp8_row", "bf16"),
                     ("mxfp8", "bf16"), ("fp8_block", "bf16")]:
        qw = dispatch.quantize(w, fmt, act=act)
        qp = pad_weight(qw)
        assert qp.shape == (64, 1008) and qp.scale is qw.scale
        dq = dispatch.dequantize(qp)
        assert torch.equal(dq[:, :1000], dispatch.dequantize(qw)) and not dq[:, 1000:].any()
        x = torch.randn(5, 1000, dtype=torch.bfloat16)
        y = cand.run(x, qw, qp, None, torch.float32, None)
        # exactly the dispatcher's answer to the padded problem, which is the unpadded problem's (the reference of
        # the padded weight equals the unpadded one bit for bit: test above)
        assert torch.equal(y, dispatch.linear(torch.nn.functional.pad(x, (0, 8)), qp, out_dtype=torch.float32))
        torch.testing.assert_close(y, dispatch.reference.linear(x, qw, out_dtype=torch.float32), rtol=1e-4, atol=1e-4)
    assert pad_weight(dispatch.quantize(torch.randn(8, 32), "fp8_row")).shape == (8, 32)  # aligned: as is
