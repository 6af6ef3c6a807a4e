"""Host cost of one `FP8Linear` forward and one `dispatch.linear` call with the chosen kernel replaced by a stub
(so only Python and dispatcher work is timed; runs on CPU), next to the host reference of dispatch.overhead when
the checkout has it. Works on older checkouts too (session 20 timed the FP8Linear change with it on both sides):

    python -m tools.perf.fp8linear_host_cost
"""

from __future__ import annotations

import statistics
import timeit

import torch

import dispatch
from dispatch.linear import PLANS_KEY


def main() -> None:
    qw = dispatch.quantize(torch.randn(256, 512), "fp8_row", act="bf16")
    module = dispatch.FP8Linear(qw)
    x = torch.randn(1, 512, dtype=torch.bfloat16)
    with torch.no_grad():
        module(x)
        plans = qw._cache[PLANS_KEY]
        for key in list(plans):
            plans[key] = plans[key]._replace(run=lambda x2d, *_: x2d)
        n = 50000
        fwd = statistics.median(timeit.repeat(lambda: module(x), number=n, repeat=7)) / n * 1e6
        lin = statistics.median(timeit.repeat(lambda: dispatch.linear(x, qw), number=n, repeat=7)) / n * 1e6
    try:
        from dispatch.overhead import host_reference_ns
        ref = f"{host_reference_ns():.1f} ns"
    except ImportError:
        ref = "n/a (older checkout)"
    print(f"FP8Linear call {fwd:.3f} us, dispatch.linear {lin:.3f} us (stub kernel, median of 7 x {n}); "
          f"host reference {ref}")


if __name__ == "__main__":
    main()
