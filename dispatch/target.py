"""One `Target` value per device, computed once, with feature predicates instead of arch comparisons.

Simulated targets (`Target.simulated("sm_80")`) make selection testable on a CPU-only machine.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .errors import FormatError


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    """Per-architecture facts, in one place (bandwidth and rates are for the analytic heuristic)."""

    arch: str
    vendor: str  # "nvidia" | "amd" | "cpu"
    fp8_mma: bool  # tensor/matrix cores take e4m3 x e4m3 (sm_89+, gfx12)
    hw_fp8_cvt: bool  # hardware e4m3 <-> f32/f16 conversion instructions
    triton_fp8_dtype: bool  # Triton accepts fp8e4nv as a pointer/tensor dtype (sm_80 rejects it)
    wgmma: bool
    wave_size: int
    # Defaults for the analytic heuristic when the device itself is not measured: read bandwidth in
    # GB/s and dense bf16 / fp8 TFLOP/s of the reference part of this arch.
    mem_gbps: float
    bf16_tflops: float
    fp8_tflops: float
    reference_part: str


ARCHS: dict[str, ArchSpec] = {
    a.arch: a
    for a in [
        ArchSpec("sm_80", "nvidia", False, False, False, False, 32, 1935, 312, 0, "A100-80GB SXM"),
        ArchSpec("sm_86", "nvidia", False, False, False, False, 32, 936, 71, 0, "RTX 3090"),
        ArchSpec("sm_89", "nvidia", True, True, True, False, 32, 864, 181, 362, "L40S"),
        ArchSpec("sm_90", "nvidia", True, True, True, True, 32, 4275, 797, 1430, "H200 (measured)"),
        ArchSpec("gfx942", "amd", True, True, True, False, 64, 5300, 1307, 2615, "MI300X"),
        ArchSpec("gfx1201", "amd", True, True, True, False, 32, 612, 191, 383, "Radeon AI PRO R9700"),
        ArchSpec("cpu", "cpu", False, False, False, False, 1, 50, 1, 0, "CPU"),
    ]
}


@dataclasses.dataclass(frozen=True)
class Target:
    """Vendor, arch, device name and the software versions that tuned tables are keyed by."""

    vendor: str
    arch: str
    device_name: str
    sm_count: int
    torch_version: str
    triton_version: str | None
    runtime_version: str | None  # CUDA or ROCm version torch was built with
    device_index: int | None = None
    simulated: bool = False

    # --- Feature predicates -------------------------------------------------------------------
    @property
    def spec(self) -> ArchSpec:
        if self.arch in ARCHS:
            return ARCHS[self.arch]
        # An unknown arch gets its vendor's most conservative features, never an fp8 guess.
        base = {"nvidia": "sm_80", "amd": "gfx1201", "cpu": "cpu"}.get(self.vendor, "cpu")
        return dataclasses.replace(ARCHS[base], arch=self.arch, fp8_mma=False, hw_fp8_cvt=False,
                                   triton_fp8_dtype=False, wgmma=False)

    @property
    def is_cpu(self) -> bool:
        return self.vendor == "cpu"

    @property
    def is_cuda(self) -> bool:
        return self.vendor == "nvidia"

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"

    @property
    def has_fp8_mma(self) -> bool:
        return self.spec.fp8_mma

    @property
    def has_hw_fp8_cvt(self) -> bool:
        return self.spec.hw_fp8_cvt

    @property
    def has_triton_fp8_dtype(self) -> bool:
        return self.spec.triton_fp8_dtype

    @property
    def has_wgmma(self) -> bool:
        return self.spec.wgmma

    @property
    def torch_version_tuple(self) -> tuple[int, int]:
        return _version_tuple(self.torch_version)

    # --- Construction -----------------------------------------------------------------------------
    @classmethod
    def simulated_for(cls, arch: str, *, torch_version: str | None = None, device_name: str | None = None,
                      sm_count: int | None = None) -> "Target":
        """A target for planning and tests on any machine (no device is touched)."""
        if arch not in ARCHS:
            known = ", ".join(sorted(ARCHS))
            raise FormatError(f"unknown arch {arch!r} for a simulated target; known: {known}")
        spec = ARCHS[arch]
        default_name = {"sm_90": "NVIDIA H200", "sm_89": "NVIDIA L40S", "sm_80": "NVIDIA A100-SXM4-80GB",
                        "sm_86": "NVIDIA GeForce RTX 3090", "gfx1201": "AMD Radeon AI PRO R9700",
                        "gfx942": "AMD Instinct MI300X", "cpu": "cpu"}[arch]
        default_sms = {"sm_90": 132, "sm_89": 142, "sm_80": 108, "sm_86": 82, "gfx1201": 64, "gfx942": 304,
                       "cpu": 1}[arch]
        runtime = {"nvidia": "13.0", "amd": "6.4", "cpu": None}[spec.vendor]
        return cls(spec.vendor, arch, device_name or default_name, sm_count or default_sms,
                   torch_version or _short_version(torch.__version__), _triton_version(), runtime,
                   None, True)


def _version_tuple(v: str) -> tuple[int, int]:
    parts = v.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return (0, 0)


def _short_version(v: str) -> str:
    return v.split("+")[0]


@functools.lru_cache(maxsize=None)
def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # triton is optional off Linux; absence is reported by the Triton backend
        return None
    return triton.__version__


@functools.lru_cache(maxsize=None)
def _detect(device_type: str, index: int | None) -> Target:
    tv = _short_version(torch.__version__)
    if device_type == "cpu":
        return Target("cpu", "cpu", "cpu", 1, tv, _triton_version(), None, None, False)
    if device_type != "cuda":
        raise FormatError(f"device type {device_type!r} is not supported; use a CUDA/ROCm GPU or the CPU")
    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    if torch.version.hip is not None:
        arch = props.gcnArchName.split(":")[0]
        return Target("amd", arch, props.name, props.multi_processor_count, tv, _triton_version(),
                      torch.version.hip, idx, False)
    arch = f"sm_{props.major}{props.minor}"
    return Target("nvidia", arch, props.name, props.multi_processor_count, tv, _triton_version(),
                  torch.version.cuda, idx, False)


def detect(device: "torch.device | str | None" = None) -> Target:
    """The Target of a device (default: the current CUDA device if any, else CPU). Cached per device."""
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    return _detect(device.type, device.index)
