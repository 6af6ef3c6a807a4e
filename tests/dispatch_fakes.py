"""Fake candidates for dispatcher tests: they declare support like real kernels do (by feature predicates)
and compute with the reference, so selection and plumbing are testable before the real backends exist.
Also `run_concurrently`, the thread harness of the CPU and GPU concurrency tests."""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable, ClassVar

from dispatch import reference
from dispatch.formats import Act, Format
from dispatch.problem import Candidate, KernelConfig, Problem, Support
from dispatch.target import Target

ALL_PAIRS = frozenset({(f, a) for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)})


@dataclasses.dataclass(frozen=True)
class FakeConfig(KernelConfig):
    block_n: int = 64
    split_k: int = 1


class FakeKernel(Candidate):
    """A generic kernel: runs where `needs_fp8_mma` allows; records its calls."""

    config_type: ClassVar[type[KernelConfig]] = FakeConfig
    source_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cid: str, *, needs_fp8_mma: bool = False, vendor: str | None = None,
                 serves=ALL_PAIRS, max_m: int | None = None, uses_fp8_mma: bool | None = None):
        self.id = cid
        self.backend = cid.split(".", 1)[0]
        self.serves = frozenset(serves)
        self.needs_fp8_mma = needs_fp8_mma
        self.uses_fp8_mma = needs_fp8_mma if uses_fp8_mma is None else uses_fp8_mma
        self.vendor = vendor
        self.max_m = max_m
        self.calls = 0

    def supports(self, problem: Problem, target: Target) -> Support:
        if target.is_cpu:
            return Support.no("GPU kernel")
        if self.vendor and target.vendor != self.vendor:
            return Support.no(f"{self.vendor} only")
        if self.needs_fp8_mma and not target.has_fp8_mma:
            return Support.no("needs fp8 MMA")
        if self.max_m is not None and problem.m > self.max_m:
            return Support.no(f"M > {self.max_m}")
        return Support.yes()

    def configs(self, problem, target):
        return [FakeConfig(), FakeConfig(128, 1), FakeConfig(64, 4), FakeConfig(128, 4)]

    def default_config(self, problem, target):
        return FakeConfig()

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        self.calls += 1
        return reference.linear(x2d, qw, bias, out_dtype)


def fake_backends() -> list[Candidate]:
    """A plausible multi-backend set: Triton everywhere on GPUs, CUDA fp8 MMA on sm_89+, HIP on AMD."""
    return [
        FakeKernel("cuda.w8a8_mma", needs_fp8_mma=True, vendor="nvidia"),
        FakeKernel("hip.w8a16_gemv", vendor="amd", max_m=16),
        FakeKernel("triton.gemv", max_m=16),
        FakeKernel("triton.gemm"),
    ]


def run_concurrently(work: Callable[[int], None], threads: int = 16) -> None:
    """Run work(0..threads-1) on that many threads released together by a barrier (so plans are built under
    contention); the first exception of any thread is re-raised here."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # surfaced in the calling thread
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
