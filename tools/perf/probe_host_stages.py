"""Inclusive host time of the functions an eager `dispatch.linear` call goes through (GPU).

    python -m tools.perf.probe_host_stages [--cases fp8_row:4096x4096:64=triton.w8a16_gemm,...]

Wraps a fixed list of functions (the dispatcher's entry, the candidates' run, the Triton and CUDA launchers and their
helpers, Triton's JIT launch, the activation quantizer) with perf_counter accumulators (about 0.2 us each), runs 1000
calls per case and prints each function's inclusive host time per call. Less distorting than cProfile, which
inflates Python time about 2x; still an upper bound for small functions.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import time

import torch

from tools.perf.host_profile import forced_case

DEFAULT = ("fp8_row:4096x4096:64=triton.w8a16_gemm,fp8_row:4096x4096:256=cuda.w8a16_gemm_wgmma,"
           "fp8_block:4096x4096:256=triton.w8a8_gemm,fp8_tensor:4096x4096:256=torch.scaled_mm_tensorwise,"
           "fp8_block:4096x4096:1024=torch.scaled_mm_blockwise")

WRAP = (
    ("dispatch.linear", "linear"),
    ("dispatch.linear", "_linear"),
    ("kernels_triton._gemm_candidates", "TritonW8A16Gemm.run"),
    ("kernels_triton._gemm_candidates", "TritonW8A8Gemm.run"),
    ("kernels_triton._gemm_candidates", "check_compiled"),
    ("kernels_triton._gemm_launch", "w8a16_gemm"),
    ("kernels_triton._gemm_launch", "w8a8_gemm"),
    ("kernels_triton._gemm_launch", "_check_common"),
    ("kernels_triton._gemm_launch", "_split"),
    ("kernels_triton._gemm_launch", "_outputs"),
    ("kernels_triton._gemm_launch", "_weight_scale_args"),
    ("kernels_triton._gemm_launch", "_operands"),
    ("kernels_triton._gemm_launch", "_reduce_splits"),
    ("kernels_triton._gemm_launch", "_act_scale_args"),
    ("kernels_triton._gemm_launch", "pdl_launch"),
    ("kernels_triton._gemm_launch", "wgmma_drain"),
    ("kernels_triton._act_quant", "quantize_activation"),
    ("kernels_triton._act_quant", "plan"),
    ("kernels_triton._act_quant", "resolve_fp8_path"),
    ("kernels_triton._act_quant", "use_recip_div"),
    ("kernels_triton._act_quant", "default_act_quant_config"),
    ("dispatch.torch_candidates", "ScaledMMTensorwise.run"),
    ("dispatch.torch_candidates", "quantize_act"),
    ("kernels_triton", "quantize_activation"),
    ("dispatch.torch_candidates", "ScaledMMBlockwise.run"),
    ("kernels_cuda._wgmma_gemm", "w8a16_wgmma_gemm"),
    ("kernels_cuda._wgmma_gemm", "_x_map"),
    ("kernels_cuda._wgmma_gemm", "_launch_with_params"),
    ("triton.runtime.jit", "JITFunction.run"),
)

_acc: dict[str, float] = collections.defaultdict(float)
_n: dict[str, int] = collections.defaultdict(int)


def _wrap(label: str, fn):
    @functools.wraps(fn)
    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            _acc[label] += time.perf_counter() - t0
            _n[label] += 1
    return timed


def _install() -> list[str]:
    done = []
    for mod_name, qual in WRAP:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        owner, attr = mod, qual
        if "." in qual:
            cls, attr = qual.split(".")
            owner = getattr(mod, cls, None)
            if owner is None:
                continue
        fn = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if fn is None:
            continue
        setattr(owner, attr, _wrap(f"{mod_name.split('.')[-1]}.{qual}", fn))
        done.append(qual)
    # modules that imported a wrapped function by name keep the original: rebind those names too
    for mod_name in ("dispatch", "kernels_triton._gemm_candidates", "dispatch.torch_candidates",
                     "kernels_cuda.candidates", "kernels_triton"):
        mod = importlib.import_module(mod_name)
        for m2, qual in WRAP:
            if "." in qual:
                continue
            src = importlib.import_module(m2)
            if hasattr(mod, qual) and mod is not src and getattr(mod, qual) is getattr(src, qual).__wrapped__:
                setattr(mod, qual, getattr(src, qual))
    return done


def main(argv: list[str] | None = None) -> None:
    import dispatch
    import kernels_cuda.candidates  # noqa: F401  (so _install can rebind their imports)
    import kernels_triton._gemm_candidates  # noqa: F401

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--calls", type=int, default=1000)
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    cases = []
    for case in args.cases.split(","):
        name, _, qw, x = forced_case(case, dev)
        with dispatch.force(name):
            dispatch.linear(x, qw)
        cases.append((case, name, x, qw))
    torch.cuda.synchronize()
    wrapped = _install()
    print("wrapped:", ", ".join(wrapped))
    for case, name, x, qw in cases:
        with dispatch.force(name):
            for _ in range(50):
                dispatch.linear(x, qw)
            torch.cuda.synchronize()
            _acc.clear()
            _n.clear()
            wall = 0.0
            for i in range(args.calls):
                if i % 100 == 0:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                dispatch.linear(x, qw)
                wall += time.perf_counter() - t0
            torch.cuda.synchronize()
        print(f"\n=== {case}: {wall / args.calls * 1e6:.1f} us per call (host, wrapped)")
        for label, t in sorted(_acc.items(), key=lambda kv: -kv[1]):
            print(f"  {label:<48} {t / args.calls * 1e6:8.2f} us/call  ({_n[label] / args.calls:g} per call)")


if __name__ == "__main__":
    main()
