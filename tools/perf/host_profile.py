"""Where the host time of an eager `dispatch.linear` call goes, per dispatched kernel (GPU; the eager path only).

    python -m tools.perf.host_profile [--cases fp8_row:4096x4096:64,...] [--force cand=...] [--top 18]

For each case (format[:act]:NxK:M) it builds a weight, lets the dispatcher plan, then measures:
  host_us   host time of one call: perf_counter around each call (launches are asynchronous; a sync every 50 calls
            keeps the launch queue short), median of 400;
  eager_us  wall time per call of 400 back-to-back calls between two syncs (host-bound when host_us > GPU time);
  profile   cProfile's functions by own time over 300 calls (profiling inflates Python time about 2x; the ranking is
            what it is for).
`--force` pins a candidate (a `dispatch.force` name) for the cases after it: `--force cuda.w8a16_gemm_wgmma`.
bf16 `F.linear` on the same shape is the reference row. Prints a short table last.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import time

import torch

DEFAULT_CASES = ("fp8_row:4096x4096:64,fp8_row:4096x4096:256,fp8_row:6144x4096:256,fp8_row:4096x4096:1024,"
                 "mxfp8:4096x4096:256,fp8_row:4096x4096:1,fp8_tensor:4096x4096:256,fp8_block:4096x4096:256")


def forced_case(case: str, device: torch.device):
    """"fmt[:act]:NxK:M=candidate" -> (the candidate id, bf16 weight, its quantized QWeight, bf16 x [M, K])."""
    import dispatch

    spec, name = case.split("=")
    fmt, act, n, k, m = _parse(spec)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16) / k ** 0.5
    qw = dispatch.quantize(w, fmt, **({"act": act} if act else {}))
    return name, w, qw, torch.randn(m, k, device=device, dtype=torch.bfloat16)


def _parse(case: str) -> tuple[str, str | None, int, int, int]:
    parts = case.split(":")
    if len(parts) == 4:
        fmt, act, nk, m = parts
    elif len(parts) == 3:
        (fmt, nk, m), act = parts, None
    else:
        raise SystemExit(f"case {case!r}: expected format[:act]:NxK:M")
    n, k = (int(v) for v in nk.lower().split("x"))
    return fmt, act, n, k, int(m)


def host_us(fn, calls: int = 400, sync_every: int = 50) -> float:
    """Median host time of one call of `fn` (perf_counter around it; a sync every `sync_every` calls keeps the launch
    queue short, so a full queue does not block a launch)."""
    times = []
    for i in range(calls):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def _eager_us(fn, calls: int = 400) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def _profile(fn, top: int, calls: int = 300) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def main(argv: list[str] | None = None) -> None:
    import dispatch
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--force", action="append", default=[], help="CASE=NAME: pin that case's candidate")
    ap.add_argument("--top", type=int, default=18)
    args = ap.parse_args(argv)
    forced = dict(f.split("=", 1) for f in args.force)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = []
    for case in args.cases.split(","):
        fmt, act, n, k, m = _parse(case)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k ** 0.5
        qw = dispatch.quantize(w, fmt, **({"act": act} if act else {}))
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        name = forced.get(case)

        def call(x=x, qw=qw):
            return dispatch.linear(x, qw)

        with dispatch.force(name) if name else contextlib.nullcontext():
            call()
            torch.cuda.synchronize()
            d = dispatch.explain(x, qw).decision
            choice = f"{d.candidate_id} {d.config}"
            host = host_us(call)
            eager = _eager_us(call)
            prof = _profile(call, args.top)
        ref = lambda x=x, w=w: torch.nn.functional.linear(x, w)  # noqa: E731
        ref()
        rows.append((case, host, eager, host_us(ref), _eager_us(ref), choice))
        print(f"=== {case}  {choice}\n{prof}", flush=True)
        del w, qw, x
    print(f"{'case':<28} {'host us':>8} {'eager us':>9} {'bf16 host':>10} {'bf16 eager':>11}  candidate")
    for case, host, eager, bh, be, choice in rows:
        print(f"{case:<28} {host:8.1f} {eager:9.1f} {bh:10.1f} {be:11.1f}  {choice}")


if __name__ == "__main__":
    main()
