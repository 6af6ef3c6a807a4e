"""The run-time check of the wgmma kernels that Triton compiles here.

`tests/test_wgmma_hazards.py` and the ISA report check the SASS of every sm_90 config with the ptxas that CI installs
(`dispatch.isa.wgmma_register_hazards`). The ptxas that compiles on a user's machine can be another one: another
Triton, or TRITON_PTXAS_PATH. The bug that `_wgmma.wait_all` works around (registers of an unfinished wgmma re-used
early, fixed in CUDA 13.3) gives wrong results with no error. So the Triton candidates check each kernel Triton
compiles for them once, on the first call that ran it:

- A kernel with such a write raises `CompileError`. The call's output is discarded with it.
- Every later call of that candidate in the process raises too, whatever its config: the toolchain is unsafe for
  it. The error names the fix.
- The check costs one `cuobjdump` per compiled kernel; then two `len()`s per call.

It reads Triton's per-device kernel caches (`JITFunction.device_caches`, Triton 3.6). If those are laid out
otherwise, or cuobjdump fails, it warns once and checks nothing more in this process.
"""

from __future__ import annotations

import os
import subprocess
import threading
import warnings
from typing import Any

from dispatch.errors import CompileError
from dispatch.isa import wgmma_register_hazards

from .isa import sass_of

_lock = threading.Lock()
_hazards: dict[str, int] = {}  # compiled kernel hash -> hazard count
_seen: dict[tuple[int, Any], set] = {}  # (id of the JIT function, device) -> cache keys already checked
_checked_total: dict[int, int] = {}  # id of the JIT function -> kernels checked over all its device caches
_disabled = False


def hazard_count(kernel: Any) -> int:
    """Writes to registers an unfinished wgmma reads, in a compiled Triton kernel (0 without wgmma). Cached."""
    key = kernel.hash
    if key not in _hazards:
        n = 0
        if "wgmma.mma_async" in kernel.asm.get("ptx", ""):
            n = len(wgmma_register_hazards(sass_of(kernel.asm["cubin"])))
        with _lock:
            _hazards[key] = n
    return _hazards[key]


def _off(why: str) -> None:
    """Switch the check off for this process, with one warning (never an error: a missing tool or an unknown
    Triton layout must not fail an inference that may well be right)."""
    global _disabled
    if not _disabled:
        _disabled = True
        warnings.warn(f"kernels_triton: the run-time wgmma register check is off: {why} (the CI check of every "
                      "config still holds for the ptxas that CI installs)", RuntimeWarning, stacklevel=3)


def check_new_kernels(jit_fn: Any, what: str) -> None:
    """Check every kernel `jit_fn` compiled since the last call; raise CompileError on the first with a hazard.
    A kernel still compiling (an asynchronous compile's future) is checked on a later call."""
    if _disabled:
        return
    caches = getattr(jit_fn, "device_caches", None)
    if caches is None:  # the interpreter's function, or a Triton without per-device caches
        if os.environ.get("TRITON_INTERPRET") != "1":
            _off("this Triton's JITFunction has no device_caches")
        return
    try:
        _check(jit_fn, caches, what)
    except (OSError, subprocess.SubprocessError) as e:
        _off(f"cuobjdump failed ({type(e).__name__}: {e})")
    except (AttributeError, TypeError, IndexError, KeyError, ValueError) as e:
        _off(f"this Triton's kernel caches are not laid out as in Triton 3.6 ({type(e).__name__}: {e})")


def _check(jit_fn: Any, caches: Any, what: str) -> None:
    total = 0
    for entry in caches.values():
        total += len(entry[0])
    if _checked_total.get(id(jit_fn)) == total:  # the per-call path: nothing new since the last check
        return
    checked = 0
    for device, entry in list(caches.items()):
        cache = entry[0]
        seen = _seen.setdefault((id(jit_fn), device), set())
        for key, kernel in list(cache.items()):
            if key in seen:
                checked += 1
                continue
            if not hasattr(kernel, "hash"):  # still compiling: checked on a later call
                continue
            n = hazard_count(kernel)
            if n:
                raise CompileError(
                    f"{what}: Triton compiled {kernel.name} with {n} writes to registers that an unfinished wgmma "
                    "still reads (dispatch.isa.wgmma_register_hazards), so its results would be wrong at random. "
                    "The ptxas in use re-uses wgmma's register operands early (NVIDIA fixed it in CUDA 13.3; "
                    "triton-lang/triton PR 11781), past the kernel's own guard (kernels_triton._wgmma). Fix: a ptxas "
                    "from CUDA >= 13.3 (TRITON_PTXAS_PATH), or another candidate for this problem (dispatch.force).")
            with _lock:
                seen.add(key)
            checked += 1
    with _lock:
        _checked_total[id(jit_fn)] = checked
