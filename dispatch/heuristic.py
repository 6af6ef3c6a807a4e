"""The last link of the lookup chain: an analytic time estimate from bytes, FLOPs and the target's rates.

    us = max(bytes / (bandwidth * bw_eff), flops / (peak * compute_eff)) + serial_bytes / (bandwidth * bw_eff)
         + fixed_us

bytes = weight codes + scales + activations in + outputs out (+ a candidate's own extra traffic, such as
a dequantized weight copy); serial_bytes are the separate memory-bound passes of a multi-kernel route (the weight
conversion and output rescaling of the dequantize routes), which run before or after its GEMM, not under it;
peak is the target's fp8 or bf16 dense rate (ArchSpec). Each candidate brings
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
    serial_bytes: Callable[[Problem], float] | None = None  # traffic of separate passes (added, not overlapped)
    # Tiled GEMMs: the MMA work of a token tile is done whatever M is, so FLOPs count M rounded up to tile_m.
    tile_m: int = 1
    # Time factor (on the roofline term and fixed_us) when rows of fp8 codes are not 16-byte aligned (K % 16 != 0:
    # no TMA, no 128-bit loads).
    unaligned_k_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.bw_eff <= 1.5 and 0 < self.compute_eff <= 1.0 and self.fixed_us >= 0
                and self.tile_m >= 1 and self.unaligned_k_slowdown >= 1.0):
            raise AssertionError(f"implausible prior {self}")


# The dequantize routes as separate passes around cuBLAS (session 11: modelling them inside the GEMM's max() made
# a 1.6x slower route look like a tie, fp8_row/bf16 3000x1000 M = 4096, docs/perf/h200.md). The GEMM itself reads
# the 16-bit copy (one byte per weight more than the codes the main term counts).
def _gemm_reads_copy(p: Problem) -> float:
    return 1.0 * p.n * p.k


def _dequant_route_passes(p: Problem) -> float:
    # cuda.dequant_cublas, tensor/row scales: the dequant kernel (codes in, bf16 out: 3 bytes per weight) and the
    # in-place output scaling of csrc/scale_cols.cu (read and write bf16: 4 bytes per output)
    return 3.0 * p.n * p.k + 4.0 * p.m * p.n


def _dequant_route_passes_scaled(p: Problem) -> float:
    # cuda.dequant_cublas, MX / block scales: the scales go into the bf16 weight; no output pass
    return 3.0 * p.n * p.k


def _torch_dequant_passes(p: Problem) -> float:
    # torch.dequant_mm, tensor/row: qdata.to(bf16) (3 bytes per weight); cuBLAS writes fp32 (2 bytes per output
    # beyond the bf16 the main term counts), then y.mul_ (8) and y.to(bf16) (6)
    return 3.0 * p.n * p.k + 16.0 * p.m * p.n


def _torch_dequant_passes_scaled(p: Problem) -> float:
    # torch.dequant_mm, MX / block: dequantize_to runs several elementwise torch ops over the weight
    return 9.0 * p.n * p.k + 16.0 * p.m * p.n


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
    "torch.dequant_mm": Prior(0.70, 0.75, False, 10.0, _gemm_reads_copy, _torch_dequant_passes),
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
# The Triton GEMVs at K % 16 != 0 (no 16-byte loads): 1.5-2.5x their aligned estimate on 3000x1000 (session 21's
# measurement, tests/test_heuristic_eval.py's unaligned replay). Session 34's refit lowered their fixed costs, which had
# hidden it; the padded route (dispatch.pad_k) serves those shapes faster.
_GEMV_SHAPE = dict(unaligned_k_slowdown=2.0)
MEASURED_PRIORS: dict[tuple[str, Format], Prior] = {
    # per-tensor `_scaled_mm` at decode (its quantizer included), fit to session 22's measurement of every W8A8
    # candidate at M = 4 (`python -m tools.perf.fit_priors docs/perf/h200_candidates_decode_w8a8_m1_4_2026-11-30_s22.json
    # --m 4`: 8 cells, worst 7 % off; PRIORS' 0.75 came from the baseline file's 54-98 % at decode). Session 24: the
    # re-tune on the L2 hint gave three fp8_tensor keys at M <= 4 to the CUDA GEMV, so without CuPy those shapes lend
    # nothing, and with 0.75 the heuristic picked the Triton W8A8 GEMM at 1.04-1.18x `_scaled_mm`'s time.
    ("torch.scaled_mm_tensorwise", Format.FP8_TENSOR): Prior(0.97, 0.75, True, 6.1),
    **{("cuda.w8a16_gemv", f): Prior(0.95, 0.30, False, 4.5) for f in Format},
    **{("cuda.w8a8_gemv", f): Prior(0.95, 0.30, False, 5.0) for f in Format},
    # The one-launch W8A8 GEMV at 2..8 tokens, fit to its measurement with persistent grids (session 22: `python -m
    # tools.perf.fit_priors docs/perf/h200_candidates_decode_w8a8_m1_4_2026-11-30_s22.json --m 4`, 7 cells each, worst
    # 25-29 % off): each resident CTA quantizes all of x once, a fixed cost that grows with M (1.2-1.9x the two-launch
    # route at M = 4). Session 21's one-CTA-per-tile kernel fit 0.34-0.43 / 4.9-5.2 us (it slowed with every wave).
    ("cuda.w8a8_gemv_fq", Format.FP8_BLOCK): Prior(0.91, 0.30, False, 11.0),
    ("cuda.w8a8_gemv_fq", Format.FP8_ROW): Prior(0.92, 0.30, False, 10.7),
    ("cuda.w8a8_gemv_fq", Format.FP8_TENSOR): Prior(0.91, 0.30, False, 9.3),
    # The W8A8 GEMV that quantizes x in its K loop at M = 2 (it serves M <= 2), scaled from the two-launch GEMV's
    # terms by both candidates' fits to one run as its one-row priors are (session 26: two-launch 0.89-0.91 / 3.6-4.8
    # us, in-loop 0.86-0.90 / 4.1-5.2 us).
    ("cuda.w8a8_gemv_inline", Format.FP8_BLOCK): Prior(0.95, 0.30, False, 5.6),
    ("cuda.w8a8_gemv_inline", Format.FP8_ROW): Prior(0.90, 0.30, False, 5.4),
    ("cuda.w8a8_gemv_inline", Format.FP8_TENSOR): Prior(0.95, 0.30, False, 5.3),
    # The Triton GEMVs, refit in session 11 to their re-measurement (h200_triton_gemv_summary_2026-11-30_s11.json:
    # best config per cell, 8 shapes x M = 1, 4, 16; us = bytes / (4275 GB/s x bw_eff) + fixed_us, least squares per
    # format: `python -m tools.perf.fit_priors` on that file prints these values, mxfp8 0.50 for the 0.48 kept; worst
    # cell 13-23 % off the fit).
    # Before: 0.45 / 8.0 and 0.55 / 9.0 for every format, from session 1's GEMVs, which made a Triton GEMM (untimed
    # below M = 64) look faster at decode wherever no CUDA GEMV is available.
    # Session 34: the W8A16 ones are the fit to its M = 4 cells (see ONE_ROW_PRIORS; 8 cells each, worst 5-9 % off),
    # which serve every bucket but M = 1 and 16; session 11's values in parentheses.
    ("triton.w8a16_gemv", Format.FP8_TENSOR): Prior(0.90, 0.30, False, 5.7, **_GEMV_SHAPE),  # as fp8_row (same main loop)
    ("triton.w8a16_gemv", Format.FP8_ROW): Prior(0.90, 0.30, False, 5.7, **_GEMV_SHAPE),  # (0.95 / 7.5)
    ("triton.w8a16_gemv", Format.MXFP8): Prior(0.63, 0.30, False, 5.1, **_GEMV_SHAPE),  # (0.48 / 7.7)
    ("triton.w8a16_gemv", Format.FP8_BLOCK): Prior(0.70, 0.30, False, 8.0, **_GEMV_SHAPE),  # guess (not measured)
    # The W8A8 GEMVs keep session 11's terms here: their M = 4 fit (fp8_tensor 0.88 / 8.4, fp8_row 0.87 / 7.0, fp8_block
    # 0.69 / 5.8 us) made them the no-CuPy pick at M = 4 on fp8_block 4096x4096 and 6656x2560 and fp8_row/fp8
    # 4096x4096, where the Triton W8A8 GEMM ran 1.15-1.21x faster (tests/test_heuristic_eval.py; measured live on
    # 6656x2560: 12.3 against 10.0 us).
    ("triton.w8a8_gemv", Format.FP8_TENSOR): Prior(0.90, 0.30, False, 10.5, **_GEMV_SHAPE),  # 0.90-0.91, 9.4-11.3 us
    ("triton.w8a8_gemv", Format.FP8_ROW): Prior(0.88, 0.30, False, 9.0, **_GEMV_SHAPE),  # 0.86-0.90, 8.9-9.2 us
    ("triton.w8a8_gemv", Format.FP8_BLOCK): Prior(0.72, 0.30, False, 9.0, **_GEMV_SHAPE),  # 0.70-0.74, 8.2-10.2 us
    # The Triton GEMMs' memory-bound terms, refit in session 12 (`python -m tools.perf.fit_priors`): W8A16 fp8_row to
    # its M = 64 table times (h200_candidates_2026-11-30_s12.json --m 64: 0.77 / 6.8 us, worst cell 10 % off; was
    # 0.60 / 5.0 from session 1), W8A8 to its first timing at M = 1, 4 (h200_candidates_triton_gemm_decode_2026-11-30_s12
    # .json --m 1,4: 0.77-0.79 / 6.5-7.5 us over the three formats, worst 5-11 %; was 0.50 / 6.0). Replays
    # (tests/test_heuristic_eval.py): 270 of 280 with the table (269), the heuristic alone 268 (266), without CuPy 268
    # (253), session 1's and the untabled ones unchanged. The compute terms are session 1's prefill fits.
    **{("triton.w8a16_gemm", f): Prior(0.77, 0.68, False, 6.8, **_GEMM_SHAPE) for f in _W8A16},  # 517-573 TFLOP/s
    # mxfp8: 247-255 TFLOP/s in session 1; session 10's 128-deep tile reached 310-417 at M = 256 (0.39-0.52 of the
    # 797 peak) and took those keys from the dequantize route. Refit from 0.31: every value in 0.36-0.50 makes the
    # table-free choice of session 10's data right on 3 more cells (266 of 280) and the fallback chain no worse.
    ("triton.w8a16_gemm", Format.MXFP8): Prior(0.50, 0.45, False, 5.0, **_GEMM_SHAPE),
    ("triton.w8a16_gemm", Format.FP8_BLOCK): Prior(0.60, 0.55, False, 5.0, **_GEMM_SHAPE),  # guess
    # The dequantize routes: their GEMM is bf16 cuBLAS (compute_eff of the GEMM alone), their conversion and
    # rescaling passes are serial_bytes. Session 11 moved those passes out of the max() and refit compute_eff on
    # every replayed run (tests/test_heuristic_eval.py): cuda.dequant_cublas 0.80 (0.6-0.7 lose 2 of the untabled
    # cells of session 11, 0.9 loses 6 of session 1's), which fixes fp8_row/bf16 3000x1000 M = 4096 (torch.dequant_mm
    # had looked like a tie at 68 against 69 us and measured 113 against 70) and 2 more untabled cells; the other
    # values change no count. Before: tensor/row 0.52 with the copy inside the max (session 1's fp32-output route).
    # Fixed cost: 10 us for tensor / row scales (three launches: dequant, cuBLAS, the output-scale pass), 6 us for MX /
    # block scales (two: the scales go into the bf16 weight). Session 33 refit the second from 10 to the smallest value
    # that ranks session 30's mxfp8/bf16 3000x1000 M = 256 right (the route 9.96 us against the padded route's 12.70;
    # estimated 15.7 with 10 us, 11.7 with 6, the padded route 12.1; fp8_row's route 12.51 us, its output pass ~2.5):
    # +1 cell in each of the three replays that hold it, no count lower anywhere (tests/test_heuristic_eval.py; 7 us
    # changes nothing, 5 the same as 6). A higher bw_eff (0.80, 0.85: the dequant kernel alone reads 72-94 % of the copy
    # rate) gains the same cells but loses 4 of session 1's. Block: the same launches, not measured.
    **{("cuda.dequant_cublas", f): Prior(0.70, 0.80, False, 10.0, _gemm_reads_copy, _dequant_route_passes)
       for f in _W8A16},
    ("cuda.dequant_cublas", Format.MXFP8): Prior(0.70, 0.80, False, 6.0, _gemm_reads_copy,
                                                 _dequant_route_passes_scaled),
    ("cuda.dequant_cublas", Format.FP8_BLOCK): Prior(0.70, 0.70, False, 6.0, _gemm_reads_copy,
                                                     _dequant_route_passes_scaled),  # guess
    **{("torch.dequant_mm", f): Prior(0.70, 0.75, False, 10.0, _gemm_reads_copy, _torch_dequant_passes)
       for f in _W8A16},
    ("torch.dequant_mm", Format.MXFP8): Prior(0.60, 0.75, False, 10.0, _gemm_reads_copy,
                                              _torch_dequant_passes_scaled),
    ("torch.dequant_mm", Format.FP8_BLOCK): Prior(0.60, 0.75, False, 10.0, _gemm_reads_copy,
                                                  _torch_dequant_passes_scaled),  # guess
    **{("triton.w8a8_gemm", f): Prior(0.78, 0.40, True, 6.5, **_GEMM_SHAPE) for f in Format},  # block 573-581 TFLOP/s
    # fp8_block since session 16 (one weight scalar per K tile): 775-887 TFLOP/s at M = 4096 with the activation
    # quantization (h200_s16_2026-11-30.md), 0.54-0.62 of the 1430 peak. Replays unchanged for any value in 0.40-0.60
    # (chain 273, heuristic alone 268, without CuPy 270, untabled 29 / 30, session 1's 118); the estimate follows the
    # measured code.
    ("triton.w8a8_gemm", Format.FP8_BLOCK): Prior(0.78, 0.58, True, 6.5, **_GEMM_SHAPE),
}

# The Triton GEMVs at one token row, refit in session 15 after the 1-row tiles stopped converting layouts through
# shared memory (`python -m tools.perf.fit_priors docs/perf/h200_candidates_triton_gemv_m1_2026-11-30_s15.json`: best of
# the first 16 configs per cell, 8 shapes; worst cell 4-16 % off the fit). Rows 2..16 run the unchanged tiles and keep
# MEASURED_PRIORS. With session 11's values the no-CuPy fallback picked the mxfp8 Triton GEMM at M = 1 where the
# GEMV now runs 1.17-2.05x faster (tests/test_heuristic_eval.py). The CUDA GEMVs' one-row terms are the same fit to
# the H200 table's M = 1 entries (session 7's measurement of the shipped CUDA code; fit_priors on the table's
# cuda.* entries at M = 1): without them the Triton GEMV's refit term looked faster than session 1's 0.95 / 4.5-5 us
# for the CUDA GEMVs, which the table measured faster in every cell both ran.
ONE_ROW_PRIORS: dict[tuple[str, Format], Prior] = {
    # refit in session 24 to the table re-tuned on the L2 prefetch hint (was 0.99 / 2.5 us and 0.91 / 3.1 us)
    ("cuda.w8a16_gemv", Format.FP8_TENSOR): Prior(1.04, 0.30, False, 2.4),  # as fp8_row (same main loop)
    ("cuda.w8a16_gemv", Format.FP8_ROW): Prior(1.04, 0.30, False, 2.4),  # worst cell 5 % off
    ("cuda.w8a16_gemv", Format.MXFP8): Prior(0.97, 0.30, False, 2.9),  # 8 %; session 26's re-tune (was 0.95 / 3.2)
    # the W8A8 ones refit to session 19's table (the CUDA quantizer reads x once): fp8_tensor 4 cells (4 are
    # `_scaled_mm`'s or the Triton GEMM's), was 1.00 / 4.6 us over 6; fp8_row 7 cells, was 1.01 / 5.9 us. Now the
    # fit to session 22's measurement of every candidate at M = 1 (`python -m tools.perf.fit_priors
    # docs/perf/h200_candidates_decode_w8a8_m1_4_2026-11-30_s22.json --m 1`, 8 cells each, worst 9-15 % off), the run
    # the one-launch GEMV's terms below come from, so the two compete on one run's numbers (session 21's fit: 1.02 /
    # 5.6, 1.00 / 4.9, 0.94 / 3.7; tests/test_tools_probes.py checks them against that file).
    ("cuda.w8a8_gemv", Format.FP8_TENSOR): Prior(1.01, 0.30, False, 5.5),
    ("cuda.w8a8_gemv", Format.FP8_ROW): Prior(1.00, 0.30, False, 4.7),
    ("cuda.w8a8_gemv", Format.FP8_BLOCK): Prior(0.94, 0.30, False, 3.7),
    # the one-launch W8A8 GEMV (its best config per cell, persistent grid or not), the same fit (8 cells each, worst
    # 25-27 % off: the fixed cost of quantizing x in every resident CTA does not scale with bytes). Against the
    # two-launch GEMV's terms it wins below ~29 MB of weight for fp8_tensor, never for fp8_row or fp8_block; measured,
    # it won fp8_tensor 4096x4096, 6144x4096 and 8192x2560 and fp8_row 4096x4096 (17-25 MB) by 5-14 % over the best
    # other candidate, which the tables hold, and lost fp8_tensor 6656x2560 by 3 %. Session 21's fit of its
    # one-CTA-per-tile kernel: 0.84 / 4.1-5.0 us.
    ("cuda.w8a8_gemv_fq", Format.FP8_TENSOR): Prior(0.94, 0.30, False, 5.0),
    ("torch.scaled_mm_tensorwise", Format.FP8_TENSOR): Prior(0.98, 0.75, True, 5.0),  # the same run at M = 1, 12 %
    ("cuda.w8a8_gemv_fq", Format.FP8_ROW): Prior(0.94, 0.30, False, 5.4),
    ("cuda.w8a8_gemv_fq", Format.FP8_BLOCK): Prior(0.93, 0.30, False, 6.0),
    # The W8A8 GEMV that quantizes x in its K loop, scaled from the two-launch GEMV's terms above by both candidates'
    # fits to one run (session 26, tools/perf/probe_inline_quant.py, 8 weights a format, each at its best config:
    # two-launch 1.05-1.07 / 3.6-5.2 us, in-loop 0.97-1.03 / 3.6-4.1 us; worst cells 18-23 % off both fits): every CTA
    # quantizes all of x, a cost that grows with the CTAs, so it wins the smaller weights and loses the largest.
    ("cuda.w8a8_gemv_inline", Format.FP8_BLOCK): Prior(0.88, 0.30, False, 3.75),
    ("cuda.w8a8_gemv_inline", Format.FP8_ROW): Prior(0.92, 0.30, False, 4.2),
    ("cuda.w8a8_gemv_inline", Format.FP8_TENSOR): Prior(0.97, 0.30, False, 4.4),
    # The Triton GEMVs, refit in session 34 to one run of the GEMVs alone as they are now (session 32's 4- and 8-row
    # tiles and MX decode, session 34's 3-stage defaults at M = 2..16): `tools.autotune --only triton.w8a16_gemv,
    # triton.w8a8_gemv --max-configs 6` on the 120 decode cells (docs/perf/h200_candidates_triton_gemv_2026-12-01_s34
    # .json), best config per cell, relative least squares, 8 cells each (this table: M = 1; ROWS_16_PRIORS and
    # MEASURED_PRIORS: the W8A16 GEMVs at M = 16 and 4). Session 15's terms overestimated them by 20-50 % (mxfp8 4096x4096 M = 1: 12.1 us
    # estimated, 8.2 measured), and without CuPy the heuristic took the fp8_block/fp8 Triton W8A8 GEMM at M = 1 where
    # the GEMV ran 1.05-1.24x faster (session 34, call 1 and 4).
    ("triton.w8a16_gemv", Format.FP8_TENSOR): Prior(0.97, 0.30, False, 3.3, **_GEMV_SHAPE),  # as fp8_row (same main loop)
    ("triton.w8a16_gemv", Format.FP8_ROW): Prior(0.97, 0.30, False, 3.3, **_GEMV_SHAPE),  # worst cell 4 % off (was 0.99 / 4.8)
    ("triton.w8a16_gemv", Format.MXFP8): Prior(0.84, 0.30, False, 3.2, **_GEMV_SHAPE),  # 6 % (was 0.80 / 7.0)
    ("triton.w8a8_gemv", Format.FP8_TENSOR): Prior(0.96, 0.30, False, 5.9, **_GEMV_SHAPE),  # 12 % (was 1.01 / 8.4)
    ("triton.w8a8_gemv", Format.FP8_ROW): Prior(0.97, 0.30, False, 5.8, **_GEMV_SHAPE),  # 9 % (was 1.00 / 8.1)
    ("triton.w8a8_gemv", Format.FP8_BLOCK): Prior(0.91, 0.30, False, 4.8, **_GEMV_SHAPE),  # 4 % (was 0.84 / 9.4)
}

# The Triton W8A8 GEMM in the M = 16 bucket (9-16 token rows), fit to session 16's re-tune (`python -m
# tools.perf.fit_priors docs/perf/h200_candidates_2026-11-30_s16.json --m 16`: fp8_block 0.97 / 6.9 us, fp8_row 0.97 /
# 7.1 us, worst cell 9 % off), after the fp8_block change made it the fastest kernel in 5 of those 16 cells. Its
# MEASURED_PRIORS term (0.78, fit at M = 1, 4 in session 12) stays for M <= 8. Replays (tests/test_heuristic_eval.py):
# fallback chain 273 -> 275 of 280, the heuristic alone 268 -> 270, without CuPy 270 -> 271, untabled unchanged (30);
# session 1's data (older kernels) 118 -> 116.
# fp8_tensor, fit to session 19's re-tune after the activation quantizer became a programmatic launch (`... fit_priors
# docs/perf/h200_candidates_2026-11-30_s19.json --m 16`: 0.99 / 7.5 us, worst cell 8 % off; the first measurement of
# current code in those cells). Replays on session 19's data: fallback chain 275 -> 276, the heuristic alone 267 ->
# 268, without CuPy 272 -> 274, untabled unchanged (30 / 30), session 1's 116 -> 115; with the session's later decode
# re-tune (the CUDA quantizer's single-read paths) overlaid: 277, 270 and 274. (`_scaled_mm`'s fit there, 0.99 /
# 6.4 us, changes no count; that re-tune's fits for the CUDA GEMV at M = 16, from its first 3 configs only, would
# raise the heuristic alone to 272-279 but drop session 1's to 96-111: neither taken.)
# The CUDA W8A8 GEMV (its quantizer included), fit to session 20's re-tune of every W8A8 decode key (`... fit_priors
# docs/perf/h200_candidates_decode_w8a8_2026-11-30_s20.json --m 16`, 8 cells each, worst 12-16 % off). Its
# MEASURED_PRIORS term (0.95 / 5.0 us, session 7's best configs at M = 1, 4) made it look faster than `_scaled_mm` and
# the Triton GEMM at M = 16 in 10 cells, where they ran 1.15-1.37x faster. Replays on session 20's data: the heuristic
# alone 269 -> 279 of 280, fallback chain 276 -> 279, without CuPy 274 (unchanged); out of sample, the 4 untabled
# shapes at M = 16 (measured after the fit): chain 9 -> 11 of 12, heuristic alone 8 -> 10. Session 1's data 115 -> 99:
# its 16 lost cells are W8A8 at M = 16 where session 1's Triton W8A8 GEMM (since rewritten) ran 1.3-4.9x slower.
ROWS_16_PRIORS: dict[tuple[str, Format], Prior] = {
    ("cuda.w8a8_gemv", Format.FP8_BLOCK): Prior(0.74, 0.30, False, 5.5),
    ("cuda.w8a8_gemv", Format.FP8_ROW): Prior(0.81, 0.30, False, 5.9),
    ("cuda.w8a8_gemv", Format.FP8_TENSOR): Prior(0.81, 0.30, False, 8.8),
    ("triton.w8a8_gemm", Format.FP8_BLOCK): Prior(0.97, 0.58, True, 6.9, **_GEMM_SHAPE),
    ("triton.w8a8_gemm", Format.FP8_ROW): Prior(0.97, 0.40, True, 7.1, **_GEMM_SHAPE),
    ("triton.w8a8_gemm", Format.FP8_TENSOR): Prior(0.99, 0.40, True, 7.5, **_GEMM_SHAPE),
    # The Triton W8A16 GEMVs at M = 16, the same session-34 fit as their ONE_ROW_PRIORS (its M = 16 cells; the 3-stage
    # default of kernels_triton/configs.py was the fastest of the 6 configs timed in all 40; worst cells 6-9 % off).
    # MEASURED_PRIORS' terms of before (session 11's GEMV, mxfp8 0.48 / 7.7 us) made the mxfp8 Triton W8A16 GEMM look
    # faster without CuPy, where it ran 0.66-0.96x bf16 (1.3-1.6x the GEMV's time; session 34's no-CuPy bench). The W8A8
    # GEMVs' M = 16 fit (fp8_block 0.69 / 6.6, fp8_row 0.82 / 5.7, fp8_tensor 0.84 / 7.5 us) is not used: it put the
    # Triton W8A8 GEMV within 3 % of the CUDA W8A8 GEMV and the Triton W8A8 GEMM on fp8_row/fp8 2112x7168, 6656x2560 and
    # 8192x2560, where those ran 1.16-1.25x faster (tests/test_heuristic_eval.py); MEASURED_PRIORS' terms serve
    # M = 16 as before.
    ("triton.w8a16_gemv", Format.FP8_TENSOR): Prior(0.86, 0.30, False, 4.5, **_GEMV_SHAPE),  # as fp8_row (same main loop)
    ("triton.w8a16_gemv", Format.FP8_ROW): Prior(0.86, 0.30, False, 4.5, **_GEMV_SHAPE),
    ("triton.w8a16_gemv", Format.MXFP8): Prior(0.65, 0.30, False, 5.5, **_GEMV_SHAPE),
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
    measured = (ONE_ROW_PRIORS.get((candidate.id, problem.fmt)) if problem.m == 1 else None) \
        or (ROWS_16_PRIORS.get((candidate.id, problem.fmt)) if problem.bucket == 16 else None) \
        or MEASURED_PRIORS.get((candidate.id, problem.fmt))
    if measured is not None:
        return measured
    own = getattr(candidate, "prior", None)
    if callable(own):
        p = own(problem, target)
        if p is not None:
            return p
    return PRIORS.get(candidate.id) or BACKEND_DEFAULTS.get(candidate.backend, _FALLBACK)


def call_bytes(problem: Problem) -> int:
    """The memory term's bytes common to every candidate: weight codes + scales, x in, y out
    (tools/perf/fit_priors.py fits priors to the same count)."""
    return (problem.weight_bytes + problem.m * problem.k * problem.x_dtype.itemsize
            + problem.m * problem.n * problem.out_dtype.itemsize)


def estimate_us(candidate: Candidate, problem: Problem, target: Target) -> float:
    """Estimated microseconds of one call of `candidate` on `problem`, `target`. A candidate with its own
    `estimate_us(problem, target)` (a route over other candidates: dispatch.pad_k) answers itself."""
    own = getattr(candidate, "estimate_us", None)
    if callable(own):
        return own(problem, target)
    spec = target.spec
    pr = prior_of(candidate, problem, target)
    nbytes = call_bytes(problem)
    if pr.extra_bytes is not None:
        nbytes += pr.extra_bytes(problem)
    mem_us = nbytes / (spec.mem_gbps * 1e3 * pr.bw_eff)
    serial_us = pr.serial_bytes(problem) / (spec.mem_gbps * 1e3 * pr.bw_eff) if pr.serial_bytes else 0.0
    peak = spec.fp8_tflops if pr.fp8_mma and spec.fp8_tflops > 0 else spec.bf16_tflops
    flops = problem.flops * max(1, pr.tile_m / problem.m)
    compute_us = flops / (max(peak, 1e-3) * 1e6 * pr.compute_eff)
    # Unaligned K slows the whole kernel, its fixed cost included: the Triton GEMMs took 15-78 us at 3000x1000, M = 1-16,
    # where their roofline term is ~1 us (session 3's untabled run).
    slow = pr.unaligned_k_slowdown if problem.k % 16 else 1.0
    return (max(mem_us, compute_us) + pr.fixed_us) * slow + serial_us
