"""Whether an mxfp8 weight's scales fold into a bf16 decode's one multiply, known on the host without a host sync.

A W8A16 kernel that decodes e4m3 codes to bf16 by placing their bits (value x 2^-120) can apply the MX scale
2^(c - 127) in the same multiply, by 2^(c - 7), when that is a bf16 number: e8m0 code c <= FOLD_MAX (scale <= 2^7,
a group amax <= 448 x 128; every real checkpoint). Larger codes (the NaN code 255 among them) need a second multiply.
Both decodes give the same bits; the folded one is cheaper, and a kernel built for it alone has no per-step check for
large codes (the sm_90 wgmma GEMM: 0.93-0.99x the time of an mxfp8 call in 14 of 16 cells, session 37).

The answer is reduced on the device at the weight's load-time preparation and copied into pinned memory behind an
event (`start_read`), never read synchronously on the dispatcher's path (preparation does not synchronize the host).
Until `settle` finds the copy done (a query, not a wait; none while a CUDA graph is being captured), `fold_ok` says
False: the unfolded decode, exact for every code. A direct kernel call with nothing cached reads the answer once,
synchronously, except during capture. The answer is cached on the weight like its other prepared state: its scales must not
change after its first call (a code raised above FOLD_MAX afterwards would be decoded as if folded).

Both sm_90 W8A16 GEMMs ask it: the CUDA wgmma GEMM (kernels_cuda._wgmma_gemm) and the Triton GEMM
(kernels_triton._gemm_launch.mx_fold_ok); either candidate's `prepare` starts the read, and its answer serves both.
The cache keys keep the names they had when the mechanism lived in kernels_triton (session 18; moved here in 38).
"""

from __future__ import annotations

import threading

import torch

from .formats import Format, QWeight

FOLD_MAX = 134  # the largest e8m0 code whose 2^(code - 7) is a bf16 number (kernels: FP8D_MX_FOLD_MAX, MX_FOLD_MAX)
KEY = "kernels_triton.gemm.mx_fold_ok"  # bool, the answer (False while a read is pending)
PENDING = "kernels_triton.gemm.mx_fold_pending"  # (pinned uint8 flag, cuda.Event) of a read in flight

_SLAB_BYTES = 4096
_slab: list = [None, _SLAB_BYTES]  # [pinned uint8 slab, next free byte]
_lock = threading.Lock()


def _pinned_flag() -> torch.Tensor:
    """One byte of pinned host memory set to 0, carved from a 4 KB slab (allocating pinned memory can wait for the whole
    device, so one allocation serves 4096 weights), outside inference mode (the slab outlives the call)."""
    with _lock, torch.inference_mode(False):
        if _slab[1] >= _SLAB_BYTES:
            _slab[0], _slab[1] = torch.zeros(_SLAB_BYTES, dtype=torch.uint8, pin_memory=True), 0
        i = _slab[1]
        _slab[1] = i + 1
        return _slab[0][i:i + 1]


def start_read(qw: QWeight) -> None:
    """Load time (a candidate's `prepare`): start the asynchronous read of the answer for an mxfp8 CUDA weight."""
    if qw.format is not Format.MXFP8 or qw._cache.get(KEY) is not None or qw.device.type != "cuda":
        return
    with torch.cuda.device(qw.device):  # the event goes on the stream the copy runs on: the weight's device's
        flag = _pinned_flag()
        flag.copy_((qw.scale.view(torch.uint8).amax() <= FOLD_MAX).to(torch.uint8).reshape(1), non_blocking=True)
        done = torch.cuda.Event()
        done.record()
    qw._cache[PENDING] = (flag, done)
    qw._cache[KEY] = False


def settle(qw: QWeight) -> None:
    """Per call while a read is pending: once its event has completed, the cached answer becomes the weight's."""
    pending = qw._cache.get(PENDING)
    if pending is None or torch.cuda.is_current_stream_capturing() or not pending[1].query():
        return
    qw._cache[KEY] = bool(pending[0][0])
    qw._cache.pop(PENDING, None)  # (two threads may settle it at once: same answer)


def fold_ok(qw: QWeight) -> bool:
    """Whether every e8m0 code of the mxfp8 weight is <= FOLD_MAX, as far as the host knows without waiting (see the
    module docstring); False for other formats."""
    if qw.format is not Format.MXFP8:
        return False
    if PENDING in qw._cache:
        settle(qw)
    ok = qw._cache.get(KEY)
    if ok is None:
        if qw.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return False
        ok = bool((qw.scale.view(torch.uint8).amax() <= FOLD_MAX).item())
        qw._cache[KEY] = ok
    return ok
