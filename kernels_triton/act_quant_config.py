"""Typed launch shape of the Triton dynamic activation quantizer (`kernels_triton._act_quant`), its per-target
default, and whether a target's hardware fp32 -> e4m3 cast is exact.

Its own module, apart from the decode GEMV's configs (kernels_triton/configs.py): the `_scaled_mm` candidates and the
Triton W8A8 GEMM hash what the quantizer they launch imports, and an edit of the GEMV's space must not stale their
tuned entries (session 32).
"""

from __future__ import annotations

import dataclasses

from dispatch.problem import KernelConfig
from dispatch.target import Target


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


@dataclasses.dataclass(frozen=True)
class ActQuantConfig(KernelConfig):
    """Launch shape of the dynamic activation quantizer (`kernels_triton._act_quant.plan` turns it into tiles).

    block / (32 * num_warps) values per thread: 32 keeps four 128-bit loads of bf16 in flight per thread at ~40-60
    registers, so 4+ programs of 8 warps stay resident per SM (memory-level parallelism from many programs)."""

    block: int = 8192  # elements per program: a per-tensor tile, ~a per-token tile (whole rows), a 1x128-group tile
    num_warps: int = 8  # warps per `block` elements (per-token rows scale the warps with the row length)
    # per-tensor: up to this many elements ONE program computes the amax and casts (one launch, decode sizes;
    # a single program streams slowly, so only for about one tile). Larger: an amax pass and a cast pass.
    single_program_max: int = 8192
    # per-tensor amax pass: programs per SM (each loops over tiles and writes one partial max). All must be
    # resident at once (a second wave would double the pass); every cast program reduces the partials.
    amax_programs_per_sm: int = 4
    # per-token: rows up to this many elements stay in registers (warps scaled to keep values per thread);
    # longer rows loop twice over the row (the second read mostly from L1/L2).
    row_max: int = 16384
    # bf16/fp16 inputs on a GPU: division by a per-group reciprocal + Markstein correction (bit-identical to
    # IEEE division, see weight_quant._div_by_scale); False: div.rn per element (the reference path, slower).
    recip_div: bool = True

    def __post_init__(self) -> None:
        if not _pow2(self.block) or not 128 <= self.block <= 16384 or not _pow2(self.num_warps):
            raise ValueError(f"ActQuantConfig: block a power of two in 128..16384, num_warps a power of two (got {self})")
        if self.num_warps > 32 or self.amax_programs_per_sm < 1 or not _pow2(self.row_max) or self.row_max < 128:
            raise ValueError(f"ActQuantConfig: num_warps <= 32, amax_programs_per_sm >= 1, row_max a power of two "
                             f">= 128 (got {self})")


def default_act_quant_config(target: Target) -> ActQuantConfig:
    """The quantizer is memory bound on every target (a few instructions per element, see _act_quant), so one
    shape serves all: 32 values per thread, 8 warps. Chosen from the sm_90 SASS; timed on the H200 in session 18
    (tools/perf/probe_act_quant.py: within 0-3.5 % of the best of 27 per-tensor and 9 per-token / per-group shapes,
    alone and inside the _scaled_mm routes; docs/perf/h200_probe_act_quant_2026-11-30_s18.json)."""
    del target  # the per-target hook the launcher calls; no target needs other tiles so far
    return ActQuantConfig()


def exact_hw_e4m3_cast(target: Target) -> bool:
    """Whether Triton's fp32 -> fp8e4nv cast is one correctly rounded instruction on `target` (checked in
    the AOT PTX/ISA, see tools/isa_report): sm_90 emits cvt.rn.satfinite.e4m3x2.f32. sm_89 goes through
    f16 (double rounding) and gfx1201 through a software sequence, so they use our exact encoder."""
    return target.is_cuda and target.has_wgmma
