"""kernels_triton._fast_launch: Triton launches that skip the JIT's per-call bookkeeping once a specialization is
compiled, and the eager host-cost work around it (cached launch derivations, the wgmma GEMM's parameter block).

CPU: the cache logic with a fake JIT function (keys, misses through the JIT, hits through the compiled kernel's
launcher, the fallbacks). GPU (marked): the fast path launches the kernel the JIT compiled, bit-identical outputs
with it on and off for every Triton GEMM / decode GEMV / quantizer path of an eager call, a new specialization (a misaligned x)
compiles anew, CUDA-graph capture and replay.
"""

from __future__ import annotations

import types

import pytest
import torch

import dispatch
from kernels_triton import _fast_launch


class _Chain:
    def __init__(self):
        self.calls = []


class _FakeKernel:
    def __init__(self, log):
        self.function, self.packed_metadata, self.log = 1234, ("meta",), log

    def run(self, *a):
        self.log.append(("hit", a))


class _FakeJit:
    """A JITFunction as _fast_launch uses it: device_caches[device][4] is the binder; run() compiles and launches."""

    def __init__(self):
        self.log = []
        self.compiled = []
        self.device_caches = {0: (None, None, None, None, self._binder)}

    @staticmethod
    def _binder(*args, **kwargs):
        params = dict(zip("abc", args))
        params.update({k: v for k, v in kwargs.items() if k.isupper()})
        spec = [("i32", "D" if a % 16 == 0 else "") for a in args] + [("constexpr", v) for k, v in kwargs.items()
                                                                      if k.isupper()]
        options = {k: v for k, v in kwargs.items() if not k.isupper()}
        return params, spec, options

    def run(self, *args, grid, warmup, **kwargs):
        self.log.append(("jit", args, grid))
        k = _FakeKernel(self.log)
        self.compiled.append(k)
        return k

    def __getitem__(self, grid):
        return lambda *a, **kw: self.log.append(("getitem", a, grid))


@pytest.fixture
def fast(monkeypatch):
    hooks = types.SimpleNamespace(launch_enter_hook=_Chain(), launch_exit_hook=_Chain())
    monkeypatch.setattr(_fast_launch, "ENABLED", True)
    monkeypatch.setattr(_fast_launch, "_knobs", types.SimpleNamespace(runtime=hooks), raising=False)
    drv = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda d: 77)
    monkeypatch.setattr(_fast_launch, "_driver", types.SimpleNamespace(active=drv), raising=False)
    monkeypatch.setattr(_fast_launch, "_kernels", {})
    return hooks


def test_first_call_compiles_through_the_jit_then_launches_the_compiled_kernel(fast):
    fn = _FakeJit()
    _fast_launch.launch(fn, (3, 2), 32, 64, 48, BLOCK=16, num_warps=4)
    assert [e[0] for e in fn.log] == ["jit"] and _fast_launch.cached_kernels() == 1
    _fast_launch.launch(fn, (5,), 16, 96, 32, BLOCK=16, num_warps=4)  # same specialization (all % 16 == 0)
    kind, a = fn.log[-1]
    assert kind == "hit"
    # grid padded to 3-D, the stream from the driver, the kernel's handle and metadata, no launch metadata or hooks,
    # then every bound argument (constexprs included) in order
    assert a == (5, 1, 1, 77, 1234, ("meta",), None, None, None, 16, 96, 32, 16)
    assert len(fn.compiled) == 1


def test_another_specialization_or_option_is_another_key(fast):
    fn = _FakeJit()
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16, num_warps=4)
    _fast_launch.launch(fn, (1,), 33, 64, 48, BLOCK=16, num_warps=4)  # 33 % 16 != 0: Triton would specialize anew
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=32, num_warps=4)  # another constexpr
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16, num_warps=8)  # another launch option
    assert [e[0] for e in fn.log] == ["jit"] * 4 and _fast_launch.cached_kernels() == 4


def test_launch_hooks_and_the_switch_take_the_jit_path(fast, monkeypatch):
    fn = _FakeJit()
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16)
    fast.launch_enter_hook.calls.append(print)  # a profiler's hook: it must see every launch
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16)
    fast.launch_enter_hook.calls.clear()
    monkeypatch.setattr(_fast_launch, "ENABLED", False)
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16)
    assert [e[0] for e in fn.log] == ["jit", "getitem", "getitem"]


def test_an_uncompiled_result_is_not_kept(fast):
    fn = _FakeJit()
    fn.run = lambda *a, grid, warmup, **kw: types.SimpleNamespace(result=lambda: None)  # an async compile's future
    _fast_launch.launch(fn, (1,), 32, 64, 48, BLOCK=16)
    assert _fast_launch.cached_kernels() == 0


def test_disabled_under_the_interpreter_and_other_tritons():
    """ENABLED is decided at import: each environment in a fresh interpreter (the interpreter, the opt-out, neither)."""
    import os
    import subprocess
    import sys

    import triton

    from conftest import REPO

    def enabled(**env: str) -> bool:
        clean = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", _fast_launch.FAST_LAUNCH_ENV)}
        out = subprocess.run([sys.executable, "-c", "from kernels_triton import _fast_launch; print(_fast_launch.ENABLED)"],
                             cwd=REPO, env={**clean, **env}, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip() == "True"

    assert not enabled(TRITON_INTERPRET="1")
    assert not enabled(**{_fast_launch.FAST_LAUNCH_ENV: "0"})
    assert enabled() == triton.__version__.startswith("3.6.")


# --- GPU ---------------------------------------------------------------------------------------------------------

def _cases():
    """(format, act, M, forced candidate, config or None): an eager call of each Triton launch path."""
    from kernels_triton._gemm_config import GemmConfig
    split = GemmConfig(block_m=64, block_n=64, block_k=128, group_m=8, num_warps=4, num_stages=3, swap_ab=True,
                       tma=True, split_k=4)
    return [
        ("fp8_row", "bf16", 64, "triton.w8a16_gemm", split),  # TMA descriptors + the split-K reduction
        ("mxfp8", "bf16", 256, "triton.w8a16_gemm", None),
        ("fp8_block", "fp8", 256, "triton.w8a8_gemm", None),  # per-group quantizer + GEMM
        ("fp8_row", "fp8", 96, "triton.w8a8_gemm", None),  # per-token quantizer
        ("fp8_tensor", "fp8", 300, "torch.scaled_mm_tensorwise", None),  # per-tensor quantizer: amax + cast
        ("fp8_tensor", "fp8", 4, "torch.scaled_mm_tensorwise", None),  # the single-program per-tensor kernel
        ("mxfp8", "bf16", 16, "triton.w8a16_gemv", None),  # the decode GEMV (its split-K reduction where it splits)
        ("fp8_block", "fp8", 1, "triton.w8a8_gemv", None),  # per-group quantizer + the decode GEMV
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(8))
def test_gpu_fast_launch_is_the_jit_launch(case, monkeypatch):
    if not _fast_launch.ENABLED:
        pytest.skip("the fast path is off here (another Triton, or FP8DISPATCH_TRITON_FAST_LAUNCH=0)")
    fmt, act, m, cand_id, cfg = _cases()[case]
    from dispatch import registry
    g = torch.Generator(device="cuda").manual_seed(case)
    n, k = 1008, 1536  # N, K multiples of 16 (_scaled_mm's rule)
    qw = dispatch.quantize(torch.randn(n, k, device="cuda", generator=g), fmt, act=act)
    cand = registry.get(cand_id)
    prob_cfg = cfg
    if prob_cfg is None:
        with dispatch.force(cand_id):
            prob_cfg = dispatch.explain(m, qw).decision.config
    prepared = cand.prepare(qw)
    xs = [torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3)]
    # A misaligned view (another pointer specialization: not 16-byte aligned) of the same values as xs[0].
    buf = torch.empty(m * k + 1, device="cuda", dtype=torch.bfloat16)
    odd = buf[1:].view(m, k)
    odd.copy_(xs[0])

    def run(x):
        return cand.run(x, qw, prepared, None, torch.bfloat16, prob_cfg)

    monkeypatch.setattr(_fast_launch, "ENABLED", False)
    ref = [run(x) for x in xs] + [run(odd)]
    monkeypatch.setattr(_fast_launch, "ENABLED", True)
    for _ in range(2):  # the first round compiles through the JIT, the second launches from the fast path's cache
        got = [run(x) for x in xs] + [run(odd)]
        for i, (a, b) in enumerate(zip(ref, got)):
            assert torch.equal(a, b), f"{cand_id} {fmt}/{act} M={m}: output {i} differs on the fast path"
    # every kernel the fast path launches is one the JIT compiled (its own cache holds the same object)
    jit_kernels = {id(kern) for fn in _jit_functions() for e in fn.device_caches.values() for kern in e[0].values()}
    assert _fast_launch.cached_kernels() > 0
    assert all(id(kern) in jit_kernels for kern in _fast_launch._kernels.values())
    # CUDA-graph capture of the fast path, replayed on new input
    static = xs[0].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run(static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(static)
    for x, want in zip(xs, ref):
        static.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want), f"{cand_id} {fmt}/{act} M={m}: graph replay differs"


def _jit_functions():
    from kernels_triton import _act_quant, _gemm, _gemv_kernels, _splitk_reduce
    return [_gemm._w8a16_gemm_kernel, _gemm._w8a8_gemm_kernel, _splitk_reduce.splitk_reduce, _gemv_kernels._gemv_kernel,
            _act_quant._per_token_kernel, _act_quant._per_group_kernel, _act_quant._per_tensor_single_kernel,
            _act_quant._tensor_amax_kernel, _act_quant._tensor_cast_kernel]


@pytest.mark.gpu
def test_gpu_wgmma_parameter_block_and_map_cache_match_fresh_maps():
    """The wgmma GEMM's cached x map and parameter block give the output of a launch with freshly encoded maps,
    for two x buffers alternating (the cache's keys) and after the map cache is cleared."""
    from dispatch.target import detect
    from kernels_cuda import _wgmma_gemm as wg
    if detect(torch.device("cuda")).arch != "sm_90":
        pytest.skip("the wgmma GEMM runs on sm_90")
    g = torch.Generator(device="cuda").manual_seed(9)
    qw = dispatch.quantize(torch.randn(512, 1024, device="cuda", generator=g), "fp8_row", act="bf16")
    cfg = wg.WgmmaGemmConfig(bm=128, wgs=2, stages=4)
    xs = [torch.randn(200, 1024, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2)]
    first = [wg.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg) for x in xs]
    assert all(((x.data_ptr(), 200, 1024, 128) in wg._X_MAPS) for x in xs)
    again = [wg.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg) for x in reversed(xs)][::-1]
    wg._X_MAPS.clear()
    fresh = [wg.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg) for x in xs]
    for a, b, c in zip(first, again, fresh):
        assert torch.equal(a, b) and torch.equal(a, c)
    ref = dispatch.reference.linear(xs[0], qw, None, out_dtype=torch.float32)
    assert float((first[0].float() - ref).norm() / ref.norm()) < 1e-2
