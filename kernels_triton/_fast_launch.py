"""Triton launches without the JIT's per-call bookkeeping, once a kernel is compiled for the call's specialization.

Triton 3.6's `kernel[grid](...)` does on every call: bind the arguments and specialize them, build a cache key that
includes `str(options)`, compare the globals the kernel read with their values, ask the driver for the device and
stream, build launch metadata for the launch hooks and call the (empty) hook chains. On the H200 host that is 35-65 us
of host time per launch (`tools.perf.probe_triton_launch`: the compiled kernel's own launcher takes 6-18 us of it),
several times what the kernels take on the GPU at M <= 256, and an eager W8A8 call makes three launches.

`launch(fn, grid, *args, **kwargs)` launches exactly what `fn[grid](*args, **kwargs)` would:
- the key is Triton's own specialization (the kernel's binder: dtypes, 16-byte alignment, integers equal to 1 or
  divisible by 16, constexpr values) plus the launch options, so a call reuses a compiled kernel only where the JIT
  would have reused the same one;
- the first call of each key goes through the JIT (it compiles, launches, and returns the kernel kept here);
- the JIT path also serves every call while a launch hook is installed (profilers such as proton read them), under
  the CPU interpreter, and with a Triton other than 3.6 (the internals used here are 3.6's: `device_caches`, the
  binder's result, `CompiledKernel.run`'s arguments); FP8DISPATCH_TRITON_FAST_LAUNCH=0 turns it off.
What the fast path does not repeat: the JIT's check that the kernel's globals kept their values (ours are module
constants) and its re-reading of TRITON_DEBUG / instrumentation knobs (changing them mid-process affects kernels
compiled afterwards only).
"""

from __future__ import annotations

import os
from typing import Any

import triton

FAST_LAUNCH_ENV = "FP8DISPATCH_TRITON_FAST_LAUNCH"
ENABLED = os.environ.get(FAST_LAUNCH_ENV, "1") != "0" and triton.__version__.startswith("3.6.") \
    and os.environ.get("TRITON_INTERPRET") != "1"

_kernels: dict[tuple, Any] = {}  # (JIT function, device, specialization, options) -> CompiledKernel


def _driver_and_knobs():
    from triton import knobs
    from triton.runtime.driver import driver
    return driver, knobs


if ENABLED:
    _driver, _knobs = _driver_and_knobs()


def launch(fn: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
    """`fn[grid](*args, **kwargs)`, with the JIT's bookkeeping done once per specialization (see the module doc)."""
    if not ENABLED or _knobs.runtime.launch_enter_hook.calls or _knobs.runtime.launch_exit_hook.calls:
        fn[grid](*args, **kwargs)
        return
    device = _driver.active.get_current_device()
    binder = fn.device_caches[device][4]
    bound, specialization, options = binder(*args, **kwargs)
    key = (fn, device, tuple(specialization), tuple(options.items()))
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = fn.run(*args, grid=grid, warmup=False, **kwargs)
        if getattr(kernel, "function", None) is not None:  # compiled and loaded (not an asynchronous compile's future)
            _kernels[key] = kernel
        return
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    kernel.run(grid[0], g1, g2, _driver.active.get_current_stream(device), kernel.function, kernel.packed_metadata,
               None, None, None, *bound.values())


def cached_kernels() -> int:
    """How many compiled kernels the fast path holds (tests)."""
    return len(_kernels)
