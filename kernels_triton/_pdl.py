"""Programmatic dependent launch (PDL) of the Triton GEMMs, the decode GEMV and their split-K reduction on CUDA sm_90+.

A kernel launched with `launch_pdl=True` may be scheduled while the kernel before it in the stream is still
finishing: its programs start, compute their tile indices, and block in `enter` (`griddepcontrol.wait`) until
that kernel has completed and its writes are visible. So the launch gap between two kernels of a chain (activation
quantizer -> GEMM -> split-K reduction -> the next layer) shrinks to the wait. Nothing is read or written before
the wait, so no contract falls on callers: any kernel may precede.

No kernel here triggers its dependents early (`griddepcontrol.launch_dependents`): the next launch follows the
implicit trigger when this grid's programs exit. Measured on the H200 (docs/perf/h200.md, session 13; 70 cells
of M = 64, 256 on the baseline shapes): waiting only, 0.835-1.001x the time of plain launches (geomean 0.941; the
decode GEMV in session 16, 24 cells at M = 1, 16: 0.881-1.000, geomean 0.953);
triggering right after the wait, 0.870-1.168x (0.971): the next kernel's programs then take SM slots early and
unbalance the grid; triggering after the main loop, up to 1.41x; an L2 prefetch of the weight before the wait,
0.897-1.261x (1.012).

Where it runs: CUDA compute capability >= 9.0 (griddepcontrol exists there); never ROCm, sm_80/89 or the CPU
interpreter. `FP8DISPATCH_PDL=0` turns it off (the switch kernels_cuda uses too; read at import).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

PDL_ENV = "FP8DISPATCH_PDL"  # the same name as kernels_cuda._launch.PDL_ENV (a test keeps them equal)
ENABLED = os.environ.get(PDL_ENV, "1") != "0"  # tools.perf.ab_pdl flips it for A/B runs

_CAPABILITY: dict[int, tuple[int, int]] = {}


def pdl_launch(device: torch.device) -> bool:
    """Launch this device's Triton GEMM chain programmatically? CUDA compute capability >= 9.0, not ROCm, not the
    CPU interpreter, and FP8DISPATCH_PDL is not "0"."""
    if not ENABLED or device.type != "cuda" or torch.version.hip is not None:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return cap >= (9, 0)


def pdl_target(target) -> bool:
    """The same decision for a (possibly simulated) dispatch.target.Target, e.g. in the ISA report."""
    digits = "".join(ch for ch in target.arch if ch.isdigit())
    return ENABLED and target.is_cuda and digits.isdigit() and int(digits) >= 90


def launch_options(pdl: bool) -> dict:
    """Extra keyword arguments of a Triton launch: `launch_pdl` only when set (ROCm's Triton rejects the key)."""
    return {"launch_pdl": True} if pdl else {}


@triton.jit
def enter(PDL: tl.constexpr):
    """Before a kernel of a programmatic chain touches memory: wait until the previous kernel has completed and its
    writes are visible. A no-op unless PDL."""
    if PDL:
        gdc_wait()
