"""How the tools time one linear call, and the ceilings they compare with.

Method (the one of shared/perf/h200_baseline.md, so numbers compare):
- Warm the GPU first (clocks ramp up under load; a cold GPU reads 10-30% slow for the first ~100 ms).
- Rotate over `ncopies` copies of the weight so the bytes read between two uses of one copy exceed
  `factor` (3.3) x the L2 size: every call streams its weight from HBM, as in a real model where the next
  layer's weight is elsewhere. `ncopies` is derived from the problem's weight bytes, capped in memory.
- Primary number: capture `calls` calls (a multiple of ncopies) in one CUDA graph, replay it `replays`
  times, median of replay time / calls. Graph replay removes CPU launch gaps, which at decode sizes are
  larger than the kernels.
- Secondary number: eager median, CUDA events around each of back-to-back plain calls (launch gaps included).
- A callable that cannot be captured (host sync, unsupported API) is timed eagerly only; `method` says so.

Timers are objects with one method, so the tuning logic is testable on CPU: `WallTimer` times with any
clock (tests inject a fake clock that candidates advance), `CudaTimer` uses graphs and events.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Protocol

Call = Callable[[int], Any]  # call(i) runs the operation on weight copy i and returns its output

L2_FALLBACK_BYTES = 60 << 20  # the H200's 60 MB, when the device does not report its L2 size


class DeviceLost(RuntimeError):
    """The CUDA context is unusable (sticky error such as an illegal address): this process must restart."""


@dataclasses.dataclass(frozen=True)
class RotationPolicy:
    """How many weight copies to rotate through so that each call reads its weight from HBM."""

    factor: float = 3.3  # bytes read per rotation > factor x L2
    max_bytes: int = 6 << 30  # never allocate more than this for copies
    max_copies: int = 256

    def copies(self, bytes_per_copy: int, l2_bytes: int) -> int:
        if bytes_per_copy <= 0:
            return 1
        need = math.floor(self.factor * l2_bytes / bytes_per_copy) + 1
        cap = max(1, self.max_bytes // bytes_per_copy)
        return max(1, min(need, cap, self.max_copies))


@dataclasses.dataclass(frozen=True)
class TimingPolicy:
    """How long to time: graph size from an eager estimate, replays, eager iterations."""

    target_graph_us: float = 2000.0  # aim for graphs of about this duration...
    min_calls: int = 20  # ...but at least this many calls (and at least one full rotation)
    max_calls: int = 400
    replays: int = 5
    eager_iters: int = 10
    # Untimed passes over all copies before anything is timed, the device drained after each. Two: a weight's first
    # call starts load-time work whose answer a later call picks up without waiting (dispatch.mx_fold: whether the
    # mxfp8 decode folds), and graph capture never waits for it; with one pass, only the copies the eager timing
    # reached after the drain had it, the others ran the slower decode in the graph (session 37).
    warmup_rounds: int = 2

    def calls_for(self, ncopies: int, est_us: float | None) -> int:
        est = est_us if est_us and est_us > 0 else 10.0
        r = min(max(math.ceil(self.target_graph_us / est), self.min_calls), self.max_calls)
        r = max(r, ncopies)
        return ncopies * math.ceil(r / ncopies)  # whole rotations: every reuse distance is ncopies calls


QUICK = TimingPolicy(target_graph_us=300.0, min_calls=20, max_calls=60, replays=3, eager_iters=3)
FINAL = TimingPolicy(target_graph_us=3000.0, min_calls=30, max_calls=400, replays=7, eager_iters=10)


def one_rotation(replays: int) -> TimingPolicy:
    """A graph of exactly one pass over the weight copies, replayed `replays` times: the measure of the
    backends' developer benchmarks (kernels_cuda.perf, kernels_triton._gemm_bench)."""
    return TimingPolicy(min_calls=1, max_calls=1, replays=replays, eager_iters=3)


@dataclasses.dataclass(frozen=True)
class Timing:
    us: float | None  # graph replay: median per call (None when the call could not be captured)
    eager_us: float | None
    replays_us: tuple[float, ...]
    method: str  # "graph" | "eager" | "wall"
    ncopies: int
    calls: int
    note: str = ""

    @property
    def best_us(self) -> float:
        """The number to rank by: graph time, or eager time when the graph could not be captured."""
        v = self.us if self.us is not None else self.eager_us
        if v is None:
            raise ValueError("timing has neither a graph nor an eager time")
        return v


class Timer(Protocol):
    def time(self, call: Call, ncopies: int, policy: TimingPolicy) -> Timing: ...


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


class WallTimer:
    """Host-clock timer (CPU runs and tests). `clock` returns seconds; `sync` is called before each reading."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, sync: Callable[[], None] | None = None):
        self.clock = clock
        self.sync = sync or (lambda: None)

    def time(self, call: Call, ncopies: int, policy: TimingPolicy) -> Timing:
        for _ in range(policy.warmup_rounds):
            for i in range(ncopies):
                call(i)
            self.sync()
        eager = []
        for j in range(max(policy.eager_iters, 1)):
            self.sync()
            t0 = self.clock()
            call(j % ncopies)
            self.sync()
            eager.append((self.clock() - t0) * 1e6)
        eager_us = _median(eager)
        calls = policy.calls_for(ncopies, eager_us)
        reps = []
        for _ in range(max(policy.replays, 1)):
            self.sync()
            t0 = self.clock()
            for j in range(calls):
                call(j % ncopies)
            self.sync()
            reps.append((self.clock() - t0) * 1e6 / calls)
        return Timing(_median(reps), eager_us, tuple(reps), "wall", ncopies, calls)


def check_device(torch_mod: Any) -> str | None:
    """None if the CUDA context still works, else the error (a sticky fault poisons every later call)."""
    try:
        torch_mod.cuda.synchronize()
        t = torch_mod.ones(1, device="cuda")
        if float((t + 1).item()) != 2.0:
            return "device arithmetic check returned a wrong value"
    except Exception as e:  # any failure here means the context is gone
        return f"{type(e).__name__}: {e}"
    return None


class CudaTimer:
    """CUDA-graph replay (primary) and CUDA-event eager timing on the current device and stream."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self._side = None

    def _eager(self, call: Call, ncopies: int, iters: int) -> float:
        torch = self.torch
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        evs[0].record()
        for j in range(iters):
            call(j % ncopies)
            evs[j + 1].record()
        evs[-1].synchronize()
        return _median([evs[j].elapsed_time(evs[j + 1]) * 1e3 for j in range(iters)])

    def time(self, call: Call, ncopies: int, policy: TimingPolicy) -> Timing:
        torch = self.torch
        torch.cuda.synchronize()
        for _ in range(policy.warmup_rounds):  # compiles, allocator growth, library handles, load-time reads
            for i in range(ncopies):
                call(i)
            torch.cuda.synchronize()
        eager_us = self._eager(call, ncopies, max(policy.eager_iters, 1))
        calls = policy.calls_for(ncopies, eager_us)

        # Warm on the capture stream first: cuBLAS and friends create per-stream state (handles,
        # workspaces) that must not be created during capture (PyTorch's documented recipe). One stream
        # for the timer's life: a new stream per timing would leave a cuBLAS workspace behind each time.
        if self._side is None:
            self._side = torch.cuda.Stream()
        side = self._side
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(min(ncopies, 2)):
                call(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # capture_begin/end directly instead of `torch.cuda.graph(...)`, whose enter runs gc.collect() and
        # empty_cache() on every capture (tens of ms each, hundreds of captures per tuning run).
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):
                graph.capture_begin()
                try:
                    for j in range(calls):
                        call(j % ncopies)
                finally:
                    graph.capture_end()
        except Exception as e:
            del graph
            why = check_device(torch)
            if why:
                raise DeviceLost(f"device lost during graph capture ({type(e).__name__}: {e}); check: {why}") from e
            return Timing(None, eager_us, (), "eager", ncopies, calls,
                          f"graph capture failed, eager time only: {type(e).__name__}: {str(e)[:200]}")
        torch.cuda.current_stream().wait_stream(side)
        try:
            graph.replay()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            reps = []
            for _ in range(max(policy.replays, 1)):
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                reps.append(start.elapsed_time(end) * 1e3 / calls)
        finally:
            del graph
        return Timing(_median(reps), eager_us, tuple(reps), "graph", ncopies, calls)


def eager_median_us(run: Callable[[], Any], iters: int) -> float:
    """Median CUDA-event time in us of `iters` plain calls of `run`, each synchronized before the next: each launch
    stands alone, as a profiler replays it (tools/perf/profile_gemv.py, profile_gemm.py)."""
    import torch

    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return _median(times)


def l2_bytes(device: Any = None) -> int:
    import torch

    if device is None or torch.device(device).type != "cuda":
        return L2_FALLBACK_BYTES
    props = torch.cuda.get_device_properties(torch.device(device))
    return int(getattr(props, "L2_cache_size", 0) or L2_FALLBACK_BYTES)


def warm_gpu(seconds: float = 1.0, device: Any = "cuda") -> None:
    """Run dense matmuls for `seconds` so clocks and power state are at their loaded level."""
    import torch

    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """Rooflines measured in the same run as the numbers compared with them."""

    copy_gbps: float | None = None  # device-to-device copy, bytes read + written per second
    bf16_tflops: float | None = None  # torch.mm bf16 8192^3
    fp8_tflops: float | None = None  # torch._scaled_mm per-tensor e4m3 8192^3, bf16 out
    fp8_rowwise_fastacc_tflops: float | None = None
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def measure_ceilings(timer: Timer, device: Any = "cuda", *, copy_bytes: int = 1 << 30, mm: int = 8192) -> Ceilings:
    """Copy bandwidth and dense matmul rates, each failure recorded instead of raised."""
    import torch

    pol = TimingPolicy(target_graph_us=20000.0, min_calls=5, max_calls=50, replays=5, eager_iters=3)
    vals: dict[str, float] = {}
    errors: list[str] = []

    def attempt(name: str, make: Callable[[], Call], work: float) -> None:
        try:
            t = timer.time(make(), 1, pol)
            vals[name] = work / (t.best_us * 1e-6)
        except DeviceLost:
            raise
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def copy_call() -> Call:
        # An SM copy kernel (elementwise negation of fp32), not dst.copy_(src): a same-dtype copy_ is a
        # cudaMemcpy, which a CUDA graph turns into a copy-engine node that measured only ~2.76 TB/s on the
        # H200 (2026-11-29), against ~4.3 TB/s for kernels; the decode kernels compete with the kernel rate.
        src = torch.zeros(copy_bytes // 4, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        return lambda i: torch.neg(src, out=dst)

    def mm_call() -> Call:
        a = torch.randn(mm, mm, device=device, dtype=torch.bfloat16)
        b = torch.randn(mm, mm, device=device, dtype=torch.bfloat16)
        return lambda i: torch.mm(a, b)

    def fp8_call(rowwise: bool) -> Callable[[], Call]:
        def make() -> Call:
            a = torch.randn(mm, mm, device=device).to(torch.float8_e4m3fn)
            b = torch.randn(mm, mm, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
            if rowwise:
                sa = torch.ones(mm, 1, device=device)
                sb = torch.ones(1, mm, device=device)
            else:
                sa = sb = torch.ones((), device=device)
            return lambda i: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                              use_fast_accum=rowwise)
        return make

    flops = 2.0 * mm ** 3
    attempt("copy_gbps", copy_call, 2.0 * copy_bytes / 1e9)
    attempt("bf16_tflops", mm_call, flops / 1e12)
    attempt("fp8_tflops", fp8_call(False), flops / 1e12)
    attempt("fp8_rowwise_fastacc_tflops", fp8_call(True), flops / 1e12)
    return Ceilings(vals.get("copy_gbps"), vals.get("bf16_tflops"), vals.get("fp8_tflops"),
                    vals.get("fp8_rowwise_fastacc_tflops"), tuple(errors))
