"""Host-overhead micro-benchmark: what `dispatch.linear` adds on top of the chosen kernel's own launch.

    from dispatch.overhead import host_overhead
    r = host_overhead(qw, m=1)   # {'linear_us': ..., 'direct_us': ..., 'overhead_us': ..., 'candidate': ...}

Both loops run the same plan; `direct` calls the candidate's `run` with the prepared weight (what a
hand-wired kernel call costs), `linear` goes through the dispatcher. CPU wall time per call, median of
`rounds` interleaved rounds. On a GPU the device work is tiny per call (M = 1) and the queue is drained
between rounds, so CPU time is launch time. The target is overhead_us <= 2.

`overhead_us` is the difference of two ~20 us launch-bound loops, so launch jitter of a few us shows up in
it; `dispatch_only_us` (see `dispatch_only`) measures the dispatcher's work alone, with a stub kernel.

Every number here is host CPU time, so a slower or busier host scales them all (session 19 and 20 saw the direct
run take 33 us in one call and 58-67 us in another, same code). `host_ref_ns` (a fixed pure-Python workload, see
`host_reference_ns`) and `loadavg_1m` come with each result so that two runs can be compared on equal terms.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from .force import current as current_policy
from .formats import QWeight
from .linear import PLANS_KEY, _linear, fast_bucket, linear


def host_overhead(qw: QWeight, m: int = 1, *, dtype: torch.dtype = torch.bfloat16, iters: int = 200,
                  rounds: int = 15, bias: bool = False) -> dict[str, float | str]:
    dev = qw.device
    x = torch.randn(m, qw.in_features, device=dev, dtype=dtype)
    b = torch.randn(qw.out_features, device=dev, dtype=dtype) if bias else None
    _linear(x, qw, b, None)  # build the plan
    key = (fast_bucket(m), dtype, dtype, b is not None, current_policy())
    plan = next(p for k, p in qw._cache[PLANS_KEY].items() if k[:5] == key)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def direct() -> None:
        for _ in range(iters):
            plan.run(x, qw, plan.prepared, b, dtype, plan.config)

    def via() -> None:
        for _ in range(iters):
            linear(x, qw, b, None)

    lin, dir_ = [], []
    for _ in range(3):
        direct()
        via()
    sync()
    for _ in range(rounds):
        for fn, out in ((direct, dir_), (via, lin)):
            sync()
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) / iters * 1e6)
    sync()
    lu, du = statistics.median(lin), statistics.median(dir_)
    return {"linear_us": lu, "direct_us": du, "overhead_us": lu - du, "candidate": plan.decision.candidate_id,
            "m": m, "device": str(dev), **dispatch_only(qw, x, b, iters=iters * 10, rounds=rounds),
            "host_ref_ns": host_reference_ns(), "loadavg_1m": os.getloadavg()[0]}


def host_reference_ns(iters: int = 20000, rounds: int = 9) -> float:
    """The host's speed on a fixed dispatcher-like workload (a call, a tuple key, a dict hit, an isinstance
    check), in ns per iteration, median of `rounds`: the yardstick for host times measured on different machines
    or in different calls. It touches no GPU and nothing of this package."""
    table = {(i, "bf16", False): i for i in range(64)}

    def step(i: int) -> int:
        v = table.get((i & 63, "bf16", False))
        return v if isinstance(v, int) else 0

    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for i in range(iters):
            step(i)
        times.append((time.perf_counter() - t) / iters * 1e9)
    return statistics.median(times)


def _stub_run(x2d, qw, prepared, bias, out_dtype, config):
    return x2d


def dispatch_only(qw: QWeight, x: torch.Tensor, bias: torch.Tensor | None = None, *, iters: int = 2000,
                  rounds: int = 15) -> dict[str, float]:
    """The dispatcher's own host cost, isolated: `linear` with the plan's kernel replaced by a stub that
    returns at once, minus the same stub called directly. No kernel is launched, so the GPU queue and the
    launch-time jitter (each a few us, larger than what is measured) do not enter; what remains is exactly
    the work `linear` adds on top of a kernel launch. The weight's plan for x's key is restored after.
    `fp8linear_only_us`: the same for a call of an `FP8Linear` holding the weight (what a model's layer pays,
    nn.Module.__call__ included)."""
    from .nn import FP8Linear

    _linear(x, qw, bias, None)
    module = FP8Linear(qw, bias)
    plans = qw._cache[PLANS_KEY]
    bucket = fast_bucket(x.numel() // qw.in_features)
    keys = [k for k in plans if k[:4] == (bucket, x.dtype, x.dtype, bias is not None)]
    saved = {k: plans[k] for k in keys}
    stub, dt, mod = [], [], []
    try:
        for k in keys:
            plans[k] = plans[k]._replace(run=_stub_run)
        plan = plans[keys[0]]

        def direct() -> None:
            for _ in range(iters):
                plan.run(x, qw, plan.prepared, bias, x.dtype, plan.config)

        def via() -> None:
            for _ in range(iters):
                linear(x, qw, bias, None)

        def via_module() -> None:
            for _ in range(iters):
                module(x)

        direct()
        via()
        via_module()
        for _ in range(rounds):
            for fn, out in ((direct, dt), (via, stub), (via_module, mod)):
                t = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t) / iters * 1e6)
    finally:
        plans.update(saved)
    su, du = statistics.median(stub), statistics.median(dt)
    return {"dispatch_only_us": su - du, "dispatch_only_iqr_us": _iqr(stub),
            "fp8linear_only_us": statistics.median(mod) - du}


def _iqr(v: list[float]) -> float:
    q = statistics.quantiles(v, n=4)
    return q[2] - q[0]
