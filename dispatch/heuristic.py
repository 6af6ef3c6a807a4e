"""The last link of the lookup chain: an analytic time estimate from bytes, FLOPs and the target's rates.

    us = max(bytes / (bandwidth * bw_eff), flops / (peak * compute_eff)) + fixed_us

bytes = weight codes + scales + activations in + outputs out (+ a candidate's own extra traffic, such as
a dequantized weight copy); peak is the target's fp8 or bf16 dense rate (ArchSpec). Each candidate brings
an efficiency prior: either its own `prior(problem, target) -> Prior` method, or an entry of PRIORS below,
or the backend default. The priors for the torch routes come from the H200 measurements in
shared/perf/h200_baseline.md (ratios to copy bandwidth / peak); they are estimates, and only decide among
candidates when no tuned entry covers a shape.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .formats import Format
from .problem import Candidate, Problem
from .target import Target


@dataclasses.dataclass(frozen=True)
class Prior:
    bw_eff: float  # fraction of the arch's memory bandwidth reached when memory-bound
    compute_eff: float  # fraction of the peak rate reached when compute-bound
    fp8_mma: bool  # which peak applies: fp8 (True) or bf16 (False)
    fixed_us: float  # launch and side kernels (activation quantization, ...) per call
    extra_bytes: Callable[[Problem], float] | None = None  # traffic beyond weight + x + y
    # Tiled GEMMs: the MMA work of a token tile is done whatever M is, so FLOPs count M rounded up to tile_m.
    tile_m: int = 1
    # Time factor when rows of fp8 codes are not 16-byte aligned (K % 16 != 0: no TMA, no 128-bit loads).
    unaligned_k_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.bw_eff <= 1.5 and 0 < self.compute_eff <= 1.0 and self.fixed_us >= 0
                and self.tile_m >= 1 and self.unaligned_k_slowdown >= 1.0):
            raise AssertionError(f"implausible prior {self}")


def _dequant_copy(p: Problem) -> float:
    # dequantize-then-cuBLAS writes and re-reads a 16-bit weight copy
    return 4.0 * p.n * p.k


def _ref_copy(p: Problem) -> float:
    # the reference materializes an fp32 weight and an fp32 activation copy
    return 8.0 * p.n * p.k + 8.0 * p.m * p.k


# Torch routes, from the H200 baseline: per-tensor _scaled_mm 54-98% of copy BW at decode and
# ~1.2k of 1.43k TFLOP/s at prefill; rowwise 28-64% at decode; blockwise ~60-70%; activation quant
# as torch ops costs ~15-25 us per call, as a Triton kernel ~2 us.
PRIORS: dict[str, Prior] = {
    "torch.scaled_mm_tensorwise": Prior(0.75, 0.75, True, 6.0),  # H200 2026-11-29: 1000-1139 TFLOP/s at M=4096
    "torch.scaled_mm_rowwise": Prior(0.45, 0.77, True, 6.0),  # ~1100 TFLOP/s
    "torch.scaled_mm_blockwise": Prior(0.65, 0.74, True, 6.0),  # 1040-1100 TFLOP/s
    "torch.dequant_mm": Prior(0.70, 0.85, False, 10.0, _dequant_copy),
    "torch.reference": Prior(0.10, 0.05, False, 50.0, _ref_copy),
}

# Per (candidate, format) efficiencies fitted to the H200 run of 2026-11-29 (docs/perf/h200_session1_2026-11-29.md: decode M=1 on
# 4096x4096 .. 128256x4096 gives bandwidth fraction and fixed cost; prefill M=4096 gives the compute fraction
# against ArchSpec's 797 bf16 / 1430 fp8 TFLOP/s). They rank candidates where no tuned entry applies (a new
# shape, or a table entry gone stale after a kernel changed). "guess" marks cells that run did not measure.
_W8A16 = (Format.FP8_TENSOR, Format.FP8_ROW)
# The Triton GEMMs' shape effects, measured on the H200 by `tools.bench --what untabled` (docs/perf/h200.md,
# session 3): the smallest token tile of their spaces is 64 (wgmma's M), and on 3000x1000 (K % 16 != 0) they
# ran 2-7x slower than at aligned K (fp8_row/bf16 M = 4096: 841 us against 113 us for dequantize-then-cuBLAS;
# M = 1: 15-78 us against 9-11 us for the Triton GEMV).
_GEMM_SHAPE = dict(tile_m=64, unaligned_k_slowdown=5.0)
MEASURED_PRIORS: dict[tuple[str, Format], Prior] = {
    **{("cuda.w8a16_gemv", f): Prior(0.95, 0.30, False, 4.5) for f in Format},
    **{("cuda.w8a8_gemv", f): Prior(0.95, 0.30, False, 5.0) for f in Format},
    **{("triton.w8a16_gemv", f): Prior(0.45, 0.30, False, 8.0) for f in Format},
    **{("triton.w8a8_gemv", f): Prior(0.55, 0.30, False, 9.0) for f in Format},
    **{("triton.w8a16_gemm", f): Prior(0.60, 0.68, False, 5.0, **_GEMM_SHAPE) for f in _W8A16},  # 517-573 TFLOP/s
    # mxfp8: 247-255 TFLOP/s in session 1; session 10's 128-deep tile reached 310-417 at M = 256 (0.39-0.52 of the
    # 797 peak) and took those keys from the dequantize route. Refit from 0.31: every value in 0.36-0.50 makes the
    # table-free choice of session 10's data right on 3 more cells (266 of 280) and the fallback chain no worse.
    ("triton.w8a16_gemm", Format.MXFP8): Prior(0.50, 0.45, False, 5.0, **_GEMM_SHAPE),
    ("triton.w8a16_gemm", Format.FP8_BLOCK): Prior(0.60, 0.55, False, 5.0, **_GEMM_SHAPE),  # guess
    # tensor/row: 403-426 TFLOP/s on session 1's fp32-output route. Session 9's route (bf16 output scaled in place)
    # reached 564-676 at M = 4096, but refitting to 0.74 gains nothing: on its journal (every candidate, fp8_row and
    # mxfp8 at M = 64..4096) 0.52 and 0.74 both pick within 15 % of the fastest in 62 of 64 cells, and 0.74 loses 2
    # cells of the older runs the tests replay (tools.heuristic_eval; docs/perf/h200_dequant_route_2026-11-29_s9.md).
    **{("cuda.dequant_cublas", f): Prior(0.70, 0.52, False, 10.0, _dequant_copy) for f in _W8A16},
    ("cuda.dequant_cublas", Format.MXFP8): Prior(0.70, 0.80, False, 10.0, _dequant_copy),  # 560-724
    ("cuda.dequant_cublas", Format.FP8_BLOCK): Prior(0.70, 0.60, False, 10.0, _dequant_copy),  # guess
    **{("torch.dequant_mm", f): Prior(0.70, 0.53, False, 10.0, _dequant_copy) for f in _W8A16},  # 422-430
    ("torch.dequant_mm", Format.MXFP8): Prior(0.60, 0.60, False, 10.0, _dequant_copy),  # guess
    ("torch.dequant_mm", Format.FP8_BLOCK): Prior(0.60, 0.55, False, 10.0, _dequant_copy),  # guess
    **{("triton.w8a8_gemm", f): Prior(0.50, 0.40, True, 6.0, **_GEMM_SHAPE) for f in Format},  # block 573-581 TFLOP/s
}

# A candidate without its own prior: a generic hand-written kernel of its backend.
BACKEND_DEFAULTS: dict[str, Prior] = {
    "triton": Prior(0.70, 0.55, True, 4.0),
    "cuda": Prior(0.80, 0.60, True, 3.0),
    "hip": Prior(0.70, 0.50, True, 3.0),
    "torch": Prior(0.50, 0.50, False, 10.0),
}
_FALLBACK = Prior(0.30, 0.30, False, 10.0)

# Activation quantization outside a fused kernel: torch ops vs the Triton kernel (H200 measurements).
ACT_QUANT_TORCH_US = 15.0
ACT_QUANT_TRITON_US = 2.0


def prior_of(candidate: Candidate, problem: Problem, target: Target) -> Prior:
    measured = MEASURED_PRIORS.get((candidate.id, problem.fmt))
    if measured is not None:
        return measured
    own = getattr(candidate, "prior", None)
    if callable(own):
        p = own(problem, target)
        if p is not None:
            return p
    return PRIORS.get(candidate.id) or BACKEND_DEFAULTS.get(candidate.backend, _FALLBACK)


def estimate_us(candidate: Candidate, problem: Problem, target: Target) -> float:
    """Estimated microseconds of one call of `candidate` on `problem`, `target`."""
    spec = target.spec
    pr = prior_of(candidate, problem, target)
    xb = problem.x_dtype.itemsize
    ob = problem.out_dtype.itemsize
    nbytes = problem.weight_bytes + problem.m * problem.k * xb + problem.m * problem.n * ob
    if pr.extra_bytes is not None:
        nbytes += pr.extra_bytes(problem)
    mem_us = nbytes / (spec.mem_gbps * 1e3 * pr.bw_eff)
    peak = spec.fp8_tflops if pr.fp8_mma and spec.fp8_tflops > 0 else spec.bf16_tflops
    flops = problem.flops * max(1, pr.tile_m / problem.m)
    compute_us = flops / (max(peak, 1e-3) * 1e6 * pr.compute_eff)
    us = max(mem_us, compute_us) * (pr.unaligned_k_slowdown if problem.k % 16 else 1.0)
    return us + pr.fixed_us
