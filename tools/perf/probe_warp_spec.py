"""Does Triton's Hopper warp specialization of the W8A8 GEMM's K loop finish, and is it right? (GPU; sm_90.)

Session 16: the 12-warp specialized configs hung on the H200 inside the autotune (no result in the 100+ s before
its time limit), so they were taken out of the spaces. This probe runs each case in a child process with a time
limit (compile included), so a hang is reported as such instead of stopping the run:

    python -m tools.perf.probe_warp_spec [--timeout 30]

Cases: fp8_block and fp8_tensor x PDL off / on, M = N = K = 4096, the 128 x 128 x 128 specialized tile. Prints one
line per case: ok (with the error against the dequantized reference and the mean eager time of 10 launches), wrong,
hang or the exception.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CASES = [(fmt, pdl, m) for fmt in ("fp8_block", "fp8_tensor") for pdl in ("0", "1") for m in (4096,)]


def _child(fmt: str, m: int) -> None:
    import time

    import torch

    import dispatch
    from kernels_triton import _gemm_launch as L
    from kernels_triton._gemm_config import GemmConfig

    g = torch.Generator(device="cuda").manual_seed(0)
    n = k = 4096
    w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    qw = dispatch.quantize(w, fmt, act="fp8")
    xq, xs = dispatch.quantize_activation(x, qw.act_granularity)
    cfg = GemmConfig(128, 128, 128, 8, 4, 4, tma=True, warp_specialize=True)
    y = L.w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        L.w8a8_gemm(xq, xs, qw, None, torch.float32, cfg, hw_fp8=True)
    torch.cuda.synchronize()
    us = (time.perf_counter() - t) / 10 * 1e6
    from dispatch.activation import dequantize_activation
    ref = dequantize_activation(xq, xs, qw.act_granularity) @ dispatch.dequantize(qw).float().T
    err = float((y - ref).norm() / ref.norm())
    print(json.dumps({"rel_err": err, "us": us}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child[0], int(a.child[1]))
        return 0
    for fmt, pdl, m in CASES:
        env = dict(os.environ, FP8DISPATCH_PDL=pdl)
        try:
            r = subprocess.run([sys.executable, "-m", "tools.perf.probe_warp_spec", "--child", fmt, str(m)],
                               env=env, capture_output=True, text=True, timeout=a.timeout)
            last = (r.stdout.strip().splitlines() or [""])[-1]
            if r.returncode == 0 and last.startswith("{"):
                d = json.loads(last)
                verdict = "ok" if d["rel_err"] < 2e-2 else "wrong"
                out = f"{verdict} rel_err={d['rel_err']:.2e} {d['us']:.1f} us (eager, incl. descriptors)"
            else:
                out = "error: " + (r.stderr.strip().splitlines() or ["?"])[-1][:300]
        except subprocess.TimeoutExpired:
            out = f"hang (no result in {a.timeout:.0f} s)"
        print(f"{fmt:10s} pdl={pdl} M={m:5d}: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
