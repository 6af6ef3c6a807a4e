"""Programmatic dependent launch (PDL) of the Triton GEMMs and their helper kernels on CUDA sm_90+.

A kernel launched with `launch_pdl=True` may start while the kernel before it in the stream is still running: its
programs are scheduled, set up, and wait in `enter` (`griddepcontrol.wait`) until that kernel has finished and
its writes are visible. So the launch gap between two kernels of a chain (activation quantizer -> GEMM -> split-K
reduction -> the next layer's quantizer ...) shrinks to the wait. Each kernel also tells the hardware when the
next programmatic launch may start (`griddepcontrol.launch_dependents`; that launch begins only once every
program of this grid has triggered or exited, so waiting programs of the next kernel never keep this grid's
programs off the SMs). Where, is the mode (the kernels' `PDL` constexpr):

  OFF   0  a plain launch (every target without griddepcontrol, ROCm, the interpreter, FP8DISPATCH_PDL=0)
  EARLY 1  trigger right after the wait: the next kernel is scheduled while this one runs
  LATE  2  trigger after the main loop (GEMMs) / the last store (quantizers, reduction): during the epilogue
  EXIT  3  no trigger: the implicit one when the programs exit (the launch gap still shrinks: no grid completion
           and flush precede the next launch)

Every kernel of such a chain calls `enter` before it reads anything an earlier kernel wrote and before it writes
anything (the GEMMs, the split-K reduction and the activation quantizers do, first thing), so no contract falls
on callers. Measured on the H200 (docs/perf/h200.md, session 13): an L2 prefetch of the weight before the wait
cost more than it saved, so nothing is read before it.

`FP8DISPATCH_PDL=0` turns it off (the switch kernels_cuda uses too; read at import).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

PDL_ENV = "FP8DISPATCH_PDL"  # the same name as kernels_cuda._launch.PDL_ENV (a test keeps them equal)
OFF, EARLY, LATE, EXIT = 0, 1, 2, 3
ENABLED = os.environ.get(PDL_ENV, "1") != "0"
MODE = EARLY  # tools.perf.ab_pdl changes it for A/B runs


def pdl_mode(device: torch.device) -> int:
    """The mode of this device's Triton GEMM chain: MODE on CUDA compute capability >= 9.0 (griddepcontrol exists
    there) unless FP8DISPATCH_PDL=0; OFF on ROCm, older GPUs and the CPU interpreter."""
    if not ENABLED or device.type != "cuda" or torch.version.hip is not None:
        return OFF
    return MODE if _capability(device.index if device.index is not None else torch.cuda.current_device()) >= (9, 0) \
        else OFF


_CAPABILITY: dict[int, tuple[int, int]] = {}


def _capability(index: int) -> tuple[int, int]:
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return cap


def target_mode(target) -> int:
    """The same decision for a (possibly simulated) dispatch.target.Target, e.g. in the ISA report."""
    digits = "".join(ch for ch in target.arch if ch.isdigit())
    return MODE if ENABLED and target.is_cuda and digits.isdigit() and int(digits) >= 90 else OFF


def launch_options(mode: int) -> dict:
    """Extra keyword arguments of a Triton launch: `launch_pdl` only when on (ROCm's Triton rejects the key)."""
    return {"launch_pdl": True} if mode != OFF else {}


@triton.jit
def enter(PDL: tl.constexpr):
    """First thing of every kernel of a programmatic chain: wait for the previous kernel (and, EARLY, let the next
    one launch). A no-op when OFF."""
    if PDL != 0:
        gdc_wait()
    if PDL == 1:
        gdc_launch_dependents()


@triton.jit
def leave(PDL: tl.constexpr):
    """After the main work (LATE): let the next kernel launch."""
    if PDL == 2:
        gdc_launch_dependents()
