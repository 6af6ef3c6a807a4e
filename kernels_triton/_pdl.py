"""Programmatic dependent launch (PDL) of the Triton GEMMs and their helper kernels on CUDA sm_90+.

A kernel launched with `launch_pdl=True` may start while the kernel before it in the stream is still running.
`enter(PDL)` then blocks (`griddepcontrol.wait`) until that kernel has finished and its writes are visible, and
right after lets the next programmatic launch start (`griddepcontrol.launch_dependents`): that launch can only
begin once every program of this grid has executed the trigger, i.e. is resident or done, so programs waiting
in `enter` never keep this grid's programs off the SMs.

What a GEMM does before its wait is `prefetch_rows_l2`: it asks L2 for the first bytes of its weight rows. L2 is
the GPU's point of coherence (a prefetch returns nothing to registers or L1), so this is safe even if the kernel
before wrote those bytes: later loads see the written values. So unlike the CUDA GEMVs, which load weight codes
into registers before their wait (kernels_cuda._launch.pdl_allowed), nothing here adds a contract for callers.

Why: at M = 64-256 the GEMMs take 10-60 us, of which a few microseconds are the launch gap and the first
loads' latency; W8A8 also waits for its activation quantizer. With PDL the weight stream starts during the
previous kernel's tail or the quantizer's run.

Every kernel of a chain launched this way must call `enter` before reading what an earlier kernel wrote and
before writing anything (the GEMMs, the split-K reduction, the activation quantizers do, first thing).
`FP8DISPATCH_PDL=0` turns it off (the switch kernels_cuda uses too; read at import); never on ROCm, sm_80/89
(no griddepcontrol) or the interpreter.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

PDL_ENV = "FP8DISPATCH_PDL"  # the same name as kernels_cuda._launch.PDL_ENV (a test keeps them equal)
ENABLED = os.environ.get(PDL_ENV, "1") != "0"
# Bytes of weight the first wave of a GEMM asks L2 for before its wait (a quarter of the H200's 60 MB L2: the
# previous kernel's own stream must not be evicted by it). Tools may change it for A/B runs.
PREFETCH_BUDGET = 16 << 20
PF_LINES: tl.constexpr = tl.constexpr(8)  # 128-byte steps per weight row per prefetch step ([BLOCK_N, 8] pointers)


def pdl_launch(device: torch.device) -> bool:
    """Launch this device's Triton GEMM chain programmatically? CUDA compute capability >= 9.0 (griddepcontrol
    exists there), not ROCm, not the CPU interpreter, and FP8DISPATCH_PDL is not "0"."""
    if not ENABLED or device.type != "cuda" or torch.version.hip is not None:
        return False
    return _capability(device.index if device.index is not None else torch.cuda.current_device()) >= (9, 0)


_CAPABILITY: dict[int, tuple[int, int]] = {}


def _capability(index: int) -> tuple[int, int]:
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return cap


def pdl_target(target) -> bool:
    """The same decision for a (possibly simulated) dispatch.target.Target, e.g. in the ISA report: CUDA sm_90+."""
    digits = "".join(ch for ch in target.arch if ch.isdigit())
    return ENABLED and target.is_cuda and digits.isdigit() and int(digits) >= 90


def launch_options(pdl: bool) -> dict:
    """Extra keyword arguments of a Triton launch: `launch_pdl` only when set (ROCm's Triton rejects the key)."""
    return {"launch_pdl": True} if pdl else {}


def prefetch_bytes(programs: int, sms: int, block_n: int, k_bytes_per_program: int) -> int:
    """Bytes of each weight row a GEMM program prefetches before its wait: its whole K range, capped so that the
    first wave (min(programs, SMs) programs of BLOCK_N rows) asks for at most PREFETCH_BUDGET bytes; a multiple
    of the 128-byte line, 0 when the budget allows less than one line a row."""
    wave = max(1, min(programs, sms))
    cap = PREFETCH_BUDGET // (wave * block_n)
    return max(0, min(k_bytes_per_program, cap)) // 128 * 128


@triton.jit
def enter(PDL: tl.constexpr):
    """First thing of every kernel of a programmatic chain: wait for the previous kernel, then let the next one
    launch (module docstring). A no-op unless PDL."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def prefetch_rows_l2(w_ptr, rows, stride_row, k_lo, k_hi, pf_bytes, first_wave, LINES: tl.constexpr):
    """`prefetch.global.L2` of bytes [k_lo, min(k_lo + pf_bytes, k_hi)) of weight rows `rows` (byte-addressed
    codes), one request per 128-byte step, only in programs with `first_wave` set. Lanes past the range ask for
    the row's first byte again (harmless) instead of being masked: inline asm takes no mask."""
    if first_wave:
        base = w_ptr + rows.to(tl.int64)[:, None] * stride_row
        steps = tl.arange(0, LINES)[None, :] * 128
        end = tl.minimum(k_lo + pf_bytes, k_hi)
        for c0 in range(k_lo, end, LINES * 128):
            off = c0 + steps
            ptrs = base + tl.where(off < end, off, k_lo)
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n mov.b32 $0, 0;", "=r,l", [ptrs],
                                      dtype=tl.int32, is_pure=False, pack=1)
