"""NVRTC compilation of the kernel sources into a content-addressed on-disk cache.

Why a cache keyed by content: runtime compilation costs ~0.3-1 s per module, and a server must not pay
it twice, nor ever load a binary built from other sources, options or compiler. The key hashes the
source, every header, the options (format constants included), the arch and the NVRTC version; entries
are written to a temporary file and renamed into place (atomic on POSIX), so concurrent processes never
read a partial binary.

Works without a GPU: only the raw `cupy.cuda.nvrtc` bindings are used (`cupy.RawModule.compile()`
queries the current device). `arch` is "sm_XY" (a cubin for that GPU) or "compute_XY" (PTX, which the
driver JIT-compiles for the GPU it runs on: how the GPU tests run the sm_80 code on an H200).
Nothing here runs at import time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
from typing import Mapping, Sequence

from dispatch import formats
from dispatch._atomic import atomic_write  # public here too: kernels_hip caches its code objects with it
from dispatch.errors import BackendUnavailable, CompileError

CSRC = pathlib.Path(__file__).resolve().parent / "csrc"
CACHE_ENV = "FP8DISPATCH_CACHE_DIR"
_ARCH_RE = re.compile(r"^(sm|compute)_(\d{2,3})[a-z]?$")


def cache_dir() -> pathlib.Path:
    """$FP8DISPATCH_CACHE_DIR/cuda, default ~/.cache/fp8dispatch/cuda."""
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "fp8dispatch")
    return pathlib.Path(root) / "cuda"


def format_defines() -> tuple[str, ...]:
    """The format constants of dispatch.formats (the one table) as -D options. Floats keep full precision."""
    def f(v: float) -> str:
        r = repr(float(v))
        return (r if ("e" in r or "." in r) else r + ".0") + "f"

    return (
        f"-DFP8D_E4M3_MAX={f(formats.E4M3_MAX)}",
        f"-DFP8D_AMAX_FLOOR={f(formats.AMAX_FLOOR)}",
        f"-DFP8D_WEIGHT_BLOCK={int(formats.WEIGHT_BLOCK)}",
        f"-DFP8D_ACT_GROUP={int(formats.ACT_GROUP)}",
        f"-DFP8D_MX_GROUP={int(formats.MX_GROUP)}",
        f"-DFP8D_E8M0_BIAS={int(formats.E8M0_BIAS)}",
    )


@functools.lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cupy.cuda import nvrtc  # noqa: PLC0415 (optional toolkit, imported on first use)

        version = tuple(nvrtc.getVersion())
    except Exception as e:  # ImportError, or libnvrtc missing: the backend is unavailable, nothing breaks
        raise BackendUnavailable(
            f"NVRTC is not usable ({type(e).__name__}: {e}); install the CUDA extra: "
            "pip install cupy-cuda13x 'nvidia-cuda-nvrtc==13.0.*'"
        ) from None
    return nvrtc, version


def nvrtc_version() -> tuple[int, int]:
    return _nvrtc()[1]


def nvrtc_unavailable_reason() -> str | None:
    """None when NVRTC can compile here, else why not."""
    try:
        _nvrtc()
    except BackendUnavailable as e:
        return str(e)
    return None


def sources() -> dict[str, str]:
    """Every .cu/.cuh under csrc (name -> text): all headers enter every key (cheap, and never stale)."""
    return {p.name: p.read_text() for p in sorted(CSRC.glob("*.cu*"))}


@dataclasses.dataclass(frozen=True)
class Compiled:
    """One compiled module on disk."""

    path: pathlib.Path  # .cubin or .ptx
    arch: str
    key: str
    log: str  # NVRTC log (ptxas -v resource usage for cubins)
    cached: bool  # True when it came from the cache

    @property
    def is_ptx(self) -> bool:
        return self.path.suffix == ".ptx"

    def image(self) -> bytes:
        data = self.path.read_bytes()
        return data + b"\0" if self.is_ptx else data  # the driver wants NUL-terminated PTX


def check_arch(arch: str) -> None:
    if not _ARCH_RE.match(arch):
        raise CompileError(f"arch {arch!r} is not 'sm_XY' (cubin) or 'compute_XY' (PTX), e.g. 'sm_90'")


def options_for(arch: str, defines: Mapping[str, int | str] = (), extra: Sequence[str] = ()) -> list[str]:
    check_arch(arch)
    opts = [f"--gpu-architecture={arch}", "-std=c++17", *format_defines()]
    opts += [f"-D{k}={v}" for k, v in sorted(dict(defines).items())]
    if arch.startswith("sm_"):
        opts.append("--ptxas-options=-v")  # resource usage (registers, spills) into the log
    opts += list(extra)
    return opts


def cache_key(name: str, srcs: Mapping[str, str], options: Sequence[str], arch: str,
              version: tuple[int, ...]) -> str:
    h = hashlib.sha256()
    h.update(b"fp8dispatch-nvrtc-v1\0")
    h.update(name.encode() + b"\0")
    for fname in sorted(srcs):
        h.update(fname.encode() + b"\0" + srcs[fname].encode() + b"\0")
    for o in options:
        h.update(o.encode() + b"\0")
    h.update(arch.encode() + b"\0" + ".".join(map(str, version)).encode())
    return h.hexdigest()[:32]


_atomic_write = atomic_write  # the cache's writer (tests exercise it under this name)


def compile_module(name: str, arch: str, defines: Mapping[str, int | str] = (), extra: Sequence[str] = (),
                   *, use_cache: bool = True) -> Compiled:
    """Compile csrc/`name` for `arch` with -D `defines`; returns the cached module path.

    Raises CompileError carrying NVRTC's full log, BackendUnavailable without NVRTC.
    """
    nvrtc, version = _nvrtc()
    srcs = sources()
    if name not in srcs:
        raise CompileError(f"no kernel source {name!r} in {CSRC}; known: {sorted(k for k in srcs if k.endswith('.cu'))}")
    opts = options_for(arch, defines, extra)
    key = cache_key(name, srcs, opts, arch, version)
    ext = ".ptx" if arch.startswith("compute_") else ".cubin"
    stem = f"{pathlib.Path(name).stem}-{arch}-{key}"
    path = cache_dir() / (stem + ext)
    meta_path = cache_dir() / (stem + ".json")
    if use_cache and path.is_file() and meta_path.is_file():
        try:
            log = json.loads(meta_path.read_text()).get("log", "")
            return Compiled(path, arch, key, log, True)
        except (OSError, ValueError):
            pass  # a damaged sidecar: recompile and overwrite
    headers = {k: v for k, v in srcs.items() if k.endswith(".cuh")}
    prog = nvrtc.createProgram(srcs[name], name, [v.encode() for v in headers.values()],
                               [k.encode() for k in headers])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            raise CompileError(
                f"NVRTC {'.'.join(map(str, version))} failed to compile {name} for {arch} ({e}).\n"
                f"options: {' '.join(opts)}\n--- NVRTC log ---\n{log}"
            ) from None
        log = nvrtc.getProgramLog(prog)
        if ext == ".ptx":
            data = nvrtc.getPTX(prog)
            data = data.encode() if isinstance(data, str) else bytes(data)
            data = data.rstrip(b"\0")
        else:
            data = bytes(nvrtc.getCUBIN(prog))
            # CuPy's binding drops the last byte of the image (it treats it as a C string terminator);
            # ELF images end with section data, so restore the byte the driver and cuobjdump expect.
            data = data + b"\0"
    finally:
        nvrtc.destroyProgram(prog)
    _atomic_write(path, data)
    _atomic_write(meta_path, json.dumps({"name": name, "arch": arch, "options": opts, "log": log,
                                         "nvrtc": list(version)}).encode())
    return Compiled(path, arch, key, log, False)


_SPILL_RE = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REG_RE = re.compile(r"Used (\d+) registers")


def ptxas_resources(log: str) -> dict[str, int]:
    """Registers and spill bytes from the ptxas -v part of an NVRTC log (empty for PTX builds)."""
    out: dict[str, int] = {}
    m = _REG_RE.search(log)
    if m:
        out["registers"] = int(m.group(1))
    m = _SPILL_RE.search(log)
    if m:
        out["spill_bytes"] = int(m.group(1)) + int(m.group(2))
    return out
