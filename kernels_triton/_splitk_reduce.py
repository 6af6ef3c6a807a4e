"""The split-K reduction shared by the decode GEMV and the prefill GEMMs: fp32 partials [SPLIT_K, M, N] summed
in split order (deterministic: no atomics on the output), plus the bias, cast to the output dtype."""

from __future__ import annotations

import triton
import triton.language as tl

from ._pdl import enter


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def splitk_reduce(part_ptr, bias_ptr, out_ptr, M, N, SPLIT_K, stride_om,
                  HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """out[m, n] = sum_s part[s, m, n] (+ bias[n]), summed in split order: deterministic. PDL: launched
    programmatically after the GEMM that wrote the partials (kernels_triton._pdl)."""
    enter(PDL)
    pid_m = tl.program_id(1)
    offs_n = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs_n < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, SPLIT_K):
        acc += tl.load(part_ptr + (s * M + pid_m) * N + offs_n, mask=ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid_m * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=ok)
