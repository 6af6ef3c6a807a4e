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

`launch(..., pdl=True)` is a programmatic dependent launch (CUDA sm_90+): `cuLaunchKernelEx` with the
programmatic-stream-serialization attribute, so the kernel may start while the previous kernel of the stream
is still running and must `griddepcontrol.wait` before it touches that kernel's results (csrc/fp8_common.cuh).
CuPy binds no `cuLaunchKernelEx`, so it is called through ctypes from the libcuda torch has already loaded.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import struct
import threading
from typing import Any, Callable, Sequence

import torch



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


DEFAULT_DYNAMIC_SMEM = 48 * 1024  # dynamic shared memory a launch gets without raising the kernel's limit
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute


_SMEM_RAISED: dict[int, int] = {}  # function handle -> the dynamic-shared-memory limit set on it


def allow_dynamic_smem(kernel: LoadedKernel, nbytes: int) -> None:
    """Raise the kernel's dynamic-shared-memory limit to at least `nbytes` (cuFuncSetAttribute), never lower it: configs
    of different sizes share one module (its key has no warps), and the launchers cache each config's launch spec, so a
    later, smaller config must not undo an earlier, larger one's limit (the H200 re-tune of session 25 failed 8-warp
    launches that way). Above the device's limit the driver refuses with its error."""
    with _LOAD_LOCK:
        if _SMEM_RAISED.get(kernel.fn_ptr, 0) >= nbytes:
            return
        _api().funcSetAttribute(kernel.fn_ptr, _MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
        _SMEM_RAISED[kernel.fn_ptr] = nbytes


def _current_stream_getter() -> Callable[[int], int]:
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA and ROCm builds of torch have it
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


current_stream = _current_stream_getter()


# Is torch's current stream capturing a CUDA graph? (the C binding: ~0.1 us, the hot path's budget)
is_capturing: Callable[[], bool] = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or (
    lambda: torch.cuda.is_current_stream_capturing())


def launch(kernel: LoadedKernel, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
           smem: int = 0, *, pdl: bool = False) -> None:
    """Launch `kernel` on torch's current stream of its device. `pdl`: the kernel may run as a programmatic
    dependent launch (the caller checks that it waits for its prior grid, kernels_cuda._launch.pdl_allowed);
    it does while a CUDA graph is being captured. Eagerly it launches plainly: on the H200 host a
    cuLaunchKernelEx through ctypes cost 6.7 us more host time per launch than CuPy's cuLaunchKernel binding
    (tools.bench --what overhead, FP8DISPATCH_PDL=0 / 1: 23.1 / 29.8 us per eager W8A16 GEMV call), more
    than the overlap saves on the GPU while eager decode is bound by host time. A replayed graph pays no
    host time per kernel, so there the overlap is free (docs/perf/h200.md)."""
    driver = _api()
    n = max(len(args), 1)
    # Packed with struct (signed 64-bit: pointers are below 2^63, ints may be negative): a quarter of the host
    # time of building the ctypes arrays element by element, which matters when eager decode is launch-bound.
    slots = ctypes.create_string_buffer(struct.pack(f"<{len(args)}q", *args), 8 * n)
    base = ctypes.addressof(slots)
    params = ctypes.create_string_buffer(struct.pack(f"<{n}Q", *range(base, base + 8 * n, 8)), 8 * n)
    stream = current_stream(kernel.device)
    # The module's context must be current on this thread: a thread that never touched the device, or one
    # whose current device is another GPU, gets it for the launch only (torch's notion of the current device
    # follows the current context, so it is restored).
    current = driver.ctxGetCurrent()
    if current != kernel.ctx:
        driver.ctxSetCurrent(kernel.ctx)
    try:
        if pdl and is_capturing():
            _launch_programmatic(kernel.fn_ptr, grid, block, smem, stream, ctypes.addressof(params))
        else:
            driver.launchKernel(kernel.fn_ptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream,
                                ctypes.addressof(params), 0)
    finally:
        if current != kernel.ctx and current:
            driver.ctxSetCurrent(current)


# ---- Programmatic dependent launch: cuLaunchKernelEx through ctypes (layouts of cuda.h, CUDA 12/13) ------
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class CuLaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a 64-byte value union (the int flag at offset 0).
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("value_pad", ctypes.c_char * 60)]


class CuLaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(CuLaunchAttribute)), ("num_attrs", ctypes.c_uint)]


assert ctypes.sizeof(CuLaunchAttribute) == 72 and CuLaunchConfig.stream.offset == 32  # noqa: S101 (layout pin)


@functools.lru_cache(maxsize=1)
def _libcuda() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(CuLaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    return lib


def cu_launch_kernel_ex(config: CuLaunchConfig, fn: int, params: int) -> int:
    """cuLaunchKernelEx(&config, fn, params, NULL): the CUresult (tests replace this function)."""
    return _libcuda().cuLaunchKernelEx(ctypes.byref(config), fn, params, None)


# One attribute for every programmatic launch (read-only after creation, so threads can share it).
_PDL_ATTR = CuLaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)


@functools.lru_cache(maxsize=4096)
def _pdl_config_bytes(grid: tuple[int, ...], block: tuple[int, ...], smem: int) -> bytes:
    """The launch config of one geometry, stream 0, as bytes: a launch copies it and sets its stream (a
    copy costs less host time than building the structure and its arrays on every decode step)."""
    cfg = CuLaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem, 0,
                         ctypes.pointer(_PDL_ATTR), 1)
    return bytes(cfg)


def _launch_programmatic(fn: int, grid: Sequence[int], block: Sequence[int], smem: int, stream: int,
                         params: int) -> None:
    cfg = CuLaunchConfig.from_buffer_copy(_pdl_config_bytes(tuple(grid), tuple(block), smem))
    cfg.stream = stream
    err = cu_launch_kernel_ex(cfg, fn, params)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent launch) failed with CUresult {err}; "
                           "set FP8DISPATCH_PDL=0 to launch without it")
