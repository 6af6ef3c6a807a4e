"""Load compiled modules and launch their kernels through the driver API, for the CUDA and the HIP backend.

Why not CuPy's `Function.__call__`: on the H200 its per-call argument conversion, the `ExternalStream` object
and the `Device` context manager cost 30-130 us of CPU per launch (`tools.bench --what overhead`, first
session), several times the kernels' own run time at decode sizes, so eager decode was launch-bound. Here a
launch is one call of CuPy's Cython binding of `cuLaunchKernel` (`hipModuleLaunchKernel` in a ROCm CuPy)
with the arguments packed into one ctypes buffer: a few microseconds.

Arguments are plain Python ints (`ptr(t)` for tensors). Each takes an 8-byte little-endian slot; the driver
reads as many bytes as the kernel's parameter has (4 for `int`, 8 for pointers and `long long`), so one
packing serves every signature of ours (all parameters are pointers, 32- or 64-bit integers).

Nothing synchronizes the host or reads a tensor: launches go to torch's current stream and can be captured
in a CUDA graph. Thread-safe: the only shared state is the load cache, filled under a lock.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
from typing import Any, Callable, Sequence

import torch

_U64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class LoadedKernel:
    """One kernel of a module loaded on one device (the module object keeps the code alive)."""

    entry: str
    device: int
    fn_ptr: int  # CUfunction / hipFunction_t
    ctx: int  # the context the module was loaded in (the device's primary context)
    module: Any


def ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


_LOADED: dict[tuple[Any, str, int], LoadedKernel] = {}
_LOAD_LOCK = threading.Lock()


def load(image_key: Any, entry: str, device: int, image: Callable[[], bytes]) -> LoadedKernel:
    """`entry` of the module `image()` loaded on `device`, once per (image_key, entry, device): `image_key`
    must identify the code (the compile cache's key does)."""
    key = (image_key, entry, device)
    hit = _LOADED.get(key)
    if hit is not None:
        return hit
    with _LOAD_LOCK:
        hit = _LOADED.get(key)
        if hit is None:
            hit = _LOADED[key] = _load(entry, device, image())
    return hit


def _load(entry: str, device: int, image: bytes) -> LoadedKernel:
    from cupy.cuda import Device, function  # noqa: PLC0415 (optional dependency)
    from cupy_backends.cuda.api import driver  # noqa: PLC0415

    with Device(device):
        mod = function.Module()
        mod.load(image)
        fn = mod.get_function(entry)
        ctx = driver.ctxGetCurrent()
    return LoadedKernel(entry, device, int(fn.ptr), int(ctx), mod)


@functools.lru_cache(maxsize=1)
def _api():
    from cupy_backends.cuda.api import driver  # noqa: PLC0415 (optional dependency; cached: an import per launch costs ~1 us)

    return driver


def _current_stream_getter() -> Callable[[int], int]:
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA and ROCm builds of torch have it
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


current_stream = _current_stream_getter()


def launch(kernel: LoadedKernel, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
           smem: int = 0) -> None:
    """Launch `kernel` on torch's current stream of its device."""
    driver = _api()
    n = len(args)
    slots = (ctypes.c_uint64 * max(n, 1))(*[int(a) & _U64 for a in args])
    base = ctypes.addressof(slots)
    params = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
    stream = current_stream(kernel.device)
    # The module's context must be current on this thread: a thread that never touched the device, or one
    # whose current device is another GPU, gets it for the launch only (torch's notion of the current device
    # follows the current context, so it is restored).
    current = driver.ctxGetCurrent()
    if current == kernel.ctx:
        driver.launchKernel(kernel.fn_ptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream,
                            ctypes.addressof(params), 0)
        return
    driver.ctxSetCurrent(kernel.ctx)
    try:
        driver.launchKernel(kernel.fn_ptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream,
                            ctypes.addressof(params), 0)
    finally:
        if current:
            driver.ctxSetCurrent(current)
