"""The route for a K that is not a multiple of 16 on a GPU: zero columns up to the next multiple of 16, then the
dispatcher again, on the padded problem.

Rows of fp8 codes K bytes long are 16-byte aligned only when 16 divides K: without that, the CUDA and HIP GEMVs,
`torch._scaled_mm` and the Triton TMA paths cannot run, and the Triton kernels that can run do so without 16-byte
loads (on the H200, 3000x1000 at decode: every fp8 path 1.3-3.6x slower than bf16, docs/perf/h200_s20_2026-11-30.md).

Zero columns change nothing, for every format: a zero weight column times a zero activation column adds exact zeros;
the zeros do not raise any amax, so the activation scales (per tensor, per token, per 1x128 group) and codes are the
same; K rounded up to 16 stays within the last 128-block and the last 32-group, so the block and MX scale tensors
keep their shapes and values (tests/test_dispatch_linear.py checks the padded reference bit for bit). So this route
has the unpadded problem's exact semantics.

It costs a zero-padded copy of the weight (prepared once per weight: N x 16 * ceil(K / 16) bytes more), one launch
padding x per call, and whatever the padded problem's plan costs. The tuning tables decide where that beats the
unaligned kernels (candidate `pad.k16`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .force import current, policy
from .formats import ACT_GRANULARITY, Act, Format, QWeight
from .linear import _linear
from .problem import Candidate, Problem, Support
from .target import Target

ALIGN = 16  # bytes of fp8 codes per 16-byte load
# The pad launch as the heuristic counts it: a fixed cost plus x's bytes (read and written) at a fraction of the
# memory bandwidth. On the H200 (session 21, tools/perf/pad_k.sh, graph replay) F.pad of a bf16 [M, 1000] took 2.1,
# 3.5, 3.7 and 14.6 us at M = 1, 16, 256, 4096: about 2 us plus 16.5 MB at 1.1-1.3 TB/s, 0.3 of the copy rate.
PAD_US = 2.0
PAD_BW_EFF = 0.3

# every (format, act) pair there is: W8A16 for the four formats, W8A8 where the format has an activation scheme
SERVES = frozenset({(f, Act.BF16) for f in Format} | {(f, Act.FP8) for f in ACT_GRANULARITY})


def padded_k(k: int) -> int:
    return -(-k // ALIGN) * ALIGN


def pad_weight(qw: QWeight) -> QWeight:
    """`qw` with zero code columns up to K = padded_k(K); the scale tensor is reused (its shape does not change)."""
    n, k = qw.shape
    kp = padded_k(k)
    if kp == k:
        return qw
    codes = torch.zeros((n, kp), dtype=qw.qdata.dtype, device=qw.device)
    codes[:, :k] = qw.qdata
    return QWeight(qw.format, qw.act, codes, qw.scale)


class PadK16(Candidate):
    """K % 16 != 0 on a GPU: x and the weight zero-padded along K to a multiple of 16, then dispatched as that
    problem (its own plan, tuned entry or heuristic), which the aligned kernels serve."""

    id = "pad.k16"
    backend = "pad"
    serves = SERVES
    source_files = ("dispatch/pad_k.py",)

    def supports(self, problem: Problem, target: Target) -> Support:
        if target.is_cpu:
            return Support.no("the CPU path has no alignment constraint: nothing to pad")
        if problem.k % ALIGN == 0:
            return Support.no(f"K = {problem.k} is a multiple of {ALIGN}: nothing to pad")
        return Support.yes(f"pads K = {problem.k} to {padded_k(problem.k)} with zeros (exact) and dispatches that")

    def prepare(self, qw: QWeight) -> Any:
        return pad_weight(qw)

    def estimate_us(self, problem: Problem, target: Target) -> float:
        """For the heuristic: the best estimate of the padded problem's candidates, plus the pad launch and its
        traffic (x read and written once more)."""
        from . import heuristic, registry

        padded = dataclasses.replace(problem, k=padded_k(problem.k))
        inner = [heuristic.estimate_us(c, padded, target) for c in registry.candidates()
                 if c is not self and (problem.fmt, problem.act) in c.serves and c.supports(padded, target)]
        x_bytes = 2.0 * problem.m * padded.k * problem.x_dtype.itemsize
        return min(inner, default=float("inf")) + PAD_US + x_bytes / (target.spec.mem_gbps * 1e3 * PAD_BW_EFF)

    def run(self, x2d: torch.Tensor, qw: QWeight, prepared: Any, bias: torch.Tensor | None,
            out_dtype: torch.dtype, config: Any) -> torch.Tensor:
        # (every call: module-level imports, no checks that prepare() already guarantees)
        xp = torch.nn.functional.pad(x2d, (0, prepared.shape[1] - x2d.shape[1]))
        pol = current()
        if pol.force and all(pol.matches(f, self.id, self.backend) for f in pol.force):
            pol = policy((), pol.deny, pol.origin)  # forcing this route leaves the padded problem's choice free
        return _linear(xp, prepared, bias, out_dtype, pol)


def candidates() -> list[Candidate]:
    return [PadK16()]
