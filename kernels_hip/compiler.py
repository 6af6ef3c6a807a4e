"""Compiling HIP kernel sources: at run time through hipRTC (CuPy's ROCm build), offline through clang-19.

Runtime path (`compile_module`): the source and its headers go to hipRTC in memory (no include paths, so
the result does not depend on where the package is installed), the code object lands in the same
content-addressed disk cache kernels_cuda uses (its cache code is imported, not copied), and the module
is loaded with CuPy. Launches go on torch's current stream, never synchronize the host.

Offline path (`compile_offline`): `clang-19 -x hip --offload-arch=<arch> -nogpuinc -nogpulib
--cuda-device-only --no-gpu-bundle-output -O3` with `csrc/hip_shim.h` force-included in place of the ROCm
headers. CI and the ISA report use it; it needs no GPU and no ROCm.

Nothing here imports CuPy or touches a device or the filesystem at import time.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Any, Mapping, Sequence

from dispatch.errors import BackendUnavailable, CompileError

CSRC = pathlib.Path(__file__).resolve().parent / "csrc"
CUDA_CSRC = pathlib.Path(__file__).resolve().parents[1] / "kernels_cuda" / "csrc"
SHIM = CSRC / "hip_shim.h"
# Headers a HIP compile may include by name: ours first, then the shared CUDA/HIP sources.
HEADER_DIRS = (CSRC, CUDA_CSRC)
HEADER_SUFFIXES = (".h", ".cuh")

# Offline toolchain (Debian: `apt-get install -y clang-19 lld-19 llvm-19`); overridable for other distros.
CLANG = os.environ.get("FP8D_HIP_CLANG", "clang-19")
OBJDUMP = os.environ.get("FP8D_HIP_OBJDUMP", "llvm-objdump-19")
READELF = os.environ.get("FP8D_HIP_READELF", "llvm-readelf-19")
TOOLCHAIN_HINT = "apt-get install -y clang-19 lld-19 llvm-19 (Debian 12 main) or set FP8D_HIP_CLANG/_OBJDUMP/_READELF"


# --- What is compiled -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class HipCompileOptions:
    """Everything besides the source text that changes the code object (and therefore the cache key).

    `defines` carries the kernel's tuning constants (e.g. FP8D_WMMA_WAVES): compile-time, never lengths.
    """

    arch: str  # "gfx1201"
    defines: tuple[tuple[str, str], ...] = ()
    opt_level: int = 3
    std: str = "c++17"

    def __post_init__(self) -> None:
        if not self.arch.startswith("gfx"):
            raise ValueError(f"HIP arch must look like 'gfx1201', got {self.arch!r}")
        for name, _ in self.defines:
            if not name.isidentifier():
                raise ValueError(f"bad macro name {name!r}")
        object.__setattr__(self, "defines", tuple(sorted((str(k), str(v)) for k, v in self.defines)))

    @classmethod
    def make(cls, arch: str, defines: Mapping[str, Any] | None = None, **kw: Any) -> "HipCompileOptions":
        return cls(arch, tuple((k, str(v)) for k, v in (defines or {}).items()), **kw)

    def define_flags(self) -> list[str]:
        # The format constants of dispatch.formats, spelled exactly as the CUDA build passes them.
        from kernels_cuda.compiler import format_defines

        return [*format_defines(), *(f"-D{k}={v}" for k, v in self.defines)]

    def hiprtc_flags(self) -> list[str]:
        # hipRTC takes clang's spelling of the target. Correctly rounded fp32 division/sqrt is HIP's
        # default; it is stated anyway because activation quantization must divide exactly (v / s).
        return [f"--offload-arch={self.arch}", f"-O{self.opt_level}", f"-std={self.std}",
                "-fhip-fp32-correctly-rounded-divide-sqrt", *self.define_flags()]

    def clang_flags(self) -> list[str]:
        return ["-x", "hip", f"--offload-arch={self.arch}", "-nogpuinc", "-nogpulib", "--cuda-device-only",
                "--no-gpu-bundle-output", f"-O{self.opt_level}", f"-std={self.std}",
                "-fhip-fp32-correctly-rounded-divide-sqrt", "-include", str(SHIM),
                *[f"-I{d}" for d in HEADER_DIRS], *self.define_flags()]


def read_source(name: str) -> str:
    """A kernel source by file name, from kernels_hip/csrc or kernels_cuda/csrc (HIP reuses those)."""
    for d in HEADER_DIRS:
        p = d / name
        if p.is_file():
            return p.read_text()
    raise FileNotFoundError(f"HIP kernel source {name!r} not found in {', '.join(map(str, HEADER_DIRS))}")


def source_path(name: str) -> pathlib.Path:
    for d in HEADER_DIRS:
        p = d / name
        if p.is_file():
            return p
    raise FileNotFoundError(f"HIP kernel source {name!r} not found in {', '.join(map(str, HEADER_DIRS))}")


def headers() -> dict[str, str]:
    """Every header a HIP source may include by name -> its text (first directory wins on a clash)."""
    out: dict[str, str] = {}
    for d in HEADER_DIRS:
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.suffix in HEADER_SUFFIXES and p.name not in out and p.name != SHIM.name:
                out[p.name] = p.read_text()
    return out


def cache_key(source_name: str, source: str, hdrs: Mapping[str, str], options: HipCompileOptions,
              compiler_version: tuple[int, ...]) -> str:
    """Content address of a code object: kernels_cuda's key function (source and every header, options,
    arch, compiler version) over the HIP inputs; the "hip:" arch prefix keeps it apart from CUDA keys."""
    from kernels_cuda.compiler import cache_key as shared_key

    return shared_key(source_name, {source_name: source, **hdrs}, options.hiprtc_flags(), f"hip:{options.arch}",
                      compiler_version)


def cache_path(source_name: str, key: str, arch: str) -> pathlib.Path:
    """<kernels_cuda cache root>/../hip/<stem>-<arch>-<key>.hsaco (the shared cache root, its own folder)."""
    from kernels_cuda.compiler import cache_dir

    return cache_dir().parent / "hip" / f"{pathlib.Path(source_name).stem}-{arch}-{key}.hsaco"


# --- Runtime: hipRTC through CuPy's ROCm build ------------------------------------------------------------
def runtime_unavailable_reason() -> str | None:
    """None when kernels can be compiled and launched here, else why not (import-only; no device work
    beyond asking torch whether a ROCm device exists)."""
    try:
        import torch
    except Exception as e:  # pragma: no cover - torch is a hard dependency
        return f"torch import failed: {e}"
    if getattr(torch.version, "hip", None) is None:
        return "torch is not a ROCm build (torch.version.hip is None); the HIP backend runs on ROCm only"
    if not torch.cuda.is_available():
        return "no ROCm GPU visible to torch (torch.cuda.is_available() is False)"
    try:
        from cupy_backends.cuda.api import runtime as cupy_runtime
    except Exception as e:
        return (f"CuPy is not importable ({type(e).__name__}: {e}); install CuPy's ROCm build "
                "(pip install 'fp8dispatch[rocm]')")
    if not getattr(cupy_runtime, "is_hip", False):
        return "CuPy is its CUDA build; the HIP backend needs CuPy's ROCm build (pip install 'fp8dispatch[rocm]')"
    return None


def require_runtime() -> None:
    reason = runtime_unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"HIP backend unavailable: {reason}")


@functools.lru_cache(maxsize=None)
def hiprtc_version() -> tuple[int, int]:
    from cupy_backends.cuda.libs import nvrtc  # the ROCm build of CuPy binds hiprtc* behind these names

    return tuple(nvrtc.getVersion())


def _hiprtc_compile(source: str, name: str, hdrs: Mapping[str, str], options: HipCompileOptions) -> bytes:
    from cupy_backends.cuda.libs import nvrtc

    names = sorted(hdrs)
    prog = nvrtc.createProgram(source, name, [hdrs[n].encode() for n in names], [n.encode() for n in names])
    try:
        try:
            nvrtc.compileProgram(prog, options.hiprtc_flags())
        except nvrtc.NVRTCError as e:
            log = nvrtc.getProgramLog(prog)
            raise CompileError(f"hipRTC failed to compile {name} for {options.arch} "
                               f"(flags {options.hiprtc_flags()}): {e}\n{log}") from None
        # On ROCm, CuPy maps nvrtcGetPTX to hiprtcGetCode: the result is the code object (ELF).
        code = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return code if isinstance(code, bytes) else code.encode("latin-1")


def compile_code_object(source_name: str, options: HipCompileOptions, *, use_cache: bool = True) -> bytes:
    """The code object of `source_name` for `options`: from the disk cache, else hipRTC (then cached with
    kernels_cuda's atomic write, so concurrent processes never read a partial file)."""
    require_runtime()
    from kernels_cuda.compiler import _atomic_write  # shared cache code (see /work/notes/hip_requests.md)

    source, hdrs = read_source(source_name), runtime_headers()
    key = cache_key(source_name, source, hdrs, options, hiprtc_version())
    path = cache_path(source_name, key, options.arch)
    if use_cache and path.is_file():
        return path.read_bytes()
    code = _hiprtc_compile(source, source_name, hdrs, options)
    _atomic_write(path, code)
    return code


def runtime_headers() -> dict[str, str]:
    """headers(), plus the spelling portability.cuh uses to include gfx12_fp8.h (hipRTC matches in-memory
    headers by the literal include name, not by path)."""
    hdrs = headers()
    hdrs[PORTABILITY_INCLUDE] = hdrs["gfx12_fp8.h"]
    return hdrs


PORTABILITY_INCLUDE = "../../kernels_hip/csrc/gfx12_fp8.h"


# --- Offline: clang-19, no ROCm, no GPU -----------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def toolchain_missing() -> str | None:
    """None when clang-19 and the LLVM 19 tools are on PATH, else what is missing and how to install it."""
    missing = [t for t in (CLANG, OBJDUMP, READELF) if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found; {TOOLCHAIN_HINT}"
    return None


@dataclasses.dataclass(frozen=True)
class OfflineResult:
    ok: bool
    code_object: bytes  # the device ELF (empty when not ok)
    log: str  # clang's output (warnings, or the error)
    command: tuple[str, ...]


def offline_command(source: pathlib.Path, options: HipCompileOptions, out: pathlib.Path) -> list[str]:
    return [CLANG, *options.clang_flags(), str(source), "-o", str(out)]


def compile_offline(source_name: str, options: HipCompileOptions, *, timeout_s: float = 300) -> OfflineResult:
    """Compile a source for `options.arch` with clang-19 and the shim header; never raises for a compile
    error (the result carries the log), raises BackendUnavailable only when the toolchain is missing."""
    missing = toolchain_missing()
    if missing:
        raise BackendUnavailable(f"offline HIP compile impossible: {missing}")
    src = source_path(source_name)
    with tempfile.TemporaryDirectory(prefix="fp8d_hip_") as tmp:
        out = pathlib.Path(tmp) / (src.stem + f".{options.arch}.o")
        cmd = offline_command(src, options, out)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not out.is_file():
            return OfflineResult(False, b"", log, tuple(cmd))
        return OfflineResult(True, out.read_bytes(), log, tuple(cmd))


def disassemble(code_object: bytes, arch: str) -> tuple[str, str]:
    """(`llvm-objdump -d --mcpu=arch` text, `llvm-readelf --notes` text) of a code object."""
    with tempfile.TemporaryDirectory(prefix="fp8d_hip_") as tmp:
        p = pathlib.Path(tmp) / "k.o"
        p.write_bytes(code_object)
        dis = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(p)], capture_output=True, text=True, check=True)
        notes = subprocess.run([READELF, "--notes", str(p)], capture_output=True, text=True, check=True)
    return dis.stdout, notes.stdout


def run_many(jobs: Sequence[tuple[str, HipCompileOptions]], workers: int | None = None) -> list[OfflineResult]:
    """compile_offline over many (source, options) in parallel threads (each waits on a clang process)."""
    from concurrent.futures import ThreadPoolExecutor

    workers = workers or max(1, min(len(jobs), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda j: compile_offline(*j), jobs))
