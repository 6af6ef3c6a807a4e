"""Which HIP code objects exist: every (source, compile-time variant) the backend builds, and what its ISA
must show on each arch. The ISA report, the CI compile test and the runtime launcher all read this list.

A `HipBuild` is one compile of one source (which may hold several kernels); `Expect` is what its
kernels' disassembly must contain (tests/test_hip_compile.py turns a miss into a failure).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from .compiler import HipCompileOptions

GFX12 = "gfx1201"
GFX942 = "gfx942"  # MI300 (e4m3fnuz, wave64): compiled for the report only, never a runtime target here


@dataclasses.dataclass(frozen=True)
class Expect:
    """ISA properties a build's kernels must show (checked per kernel symbol)."""

    wmma_fp8: bool = False  # v_wmma_f32_16x16x16_fp8_fp8
    wmma_16bit: bool = False  # v_wmma_f32_16x16x16_bf16 / _f16
    hw_decode: bool = False  # v_cvt_pk_f32_fp8 / v_cvt_f32_fp8
    hw_encode: bool = False  # v_cvt_pk_fp8_f32
    load_bits: int = 0  # the widest global load must be at least this wide (128: global_load_b128)


@dataclasses.dataclass(frozen=True)
class HipBuild:
    label: str  # how the ISA report names it, e.g. "w8a8_wmma_gfx12[mt=1,waves=4]"
    source: str  # file name under kernels_hip/csrc or kernels_cuda/csrc
    defines: tuple[tuple[str, str], ...]
    archs: tuple[str, ...]  # archs it is built for
    runtime_archs: tuple[str, ...]  # archs whose support predicates declare it supported
    expect: Expect
    kernels: tuple[str, ...]  # extern "C" kernel symbols the code object must contain
    # Kernels of the build whose expectations differ from `expect` (e.g. an amax pass encodes nothing).
    expect_overrides: tuple[tuple[str, Expect], ...] = ()

    def expect_for(self, kernel: str) -> Expect:
        return dict(self.expect_overrides).get(kernel, self.expect)

    def options(self, arch: str) -> HipCompileOptions:
        return HipCompileOptions.make(arch, dict(self.defines))


def _defs(d: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in d.items())


WMMA_SOURCE = "w8a8_wmma_gfx12.hip"
WMMA_KERNELS = {"tensor": "w8a8_wmma_gfx12_tensor", "row": "w8a8_wmma_gfx12_row", "block": "w8a8_wmma_gfx12_block"}


def wmma_build(m_tiles: int, waves: int) -> HipBuild:
    return HipBuild(
        label=f"w8a8_wmma_gfx12[mt={m_tiles},waves={waves}]",
        source=WMMA_SOURCE,
        defines=_defs({"FP8D_WMMA_MT": m_tiles, "FP8D_WMMA_WAVES": waves}),
        archs=(GFX12,),
        runtime_archs=(GFX12,),
        expect=Expect(wmma_fp8=True, load_bits=128),
        kernels=tuple(WMMA_KERNELS.values()),
    )


W8A16_SOURCE = "w8a16_wmma_gfx12.hip"
W8A16_KERNELS = {(scale, x): f"w8a16_wmma_gfx12_{scale}_{x}" for scale in ("tensor", "row", "block", "mx")
                 for x in ("bf16", "f16")}


def w8a16_build(m_tiles: int, waves: int) -> HipBuild:
    return HipBuild(
        label=f"w8a16_wmma_gfx12[mt={m_tiles},waves={waves}]",
        source=W8A16_SOURCE,
        defines=_defs({"FP8D_WMMA_MT": m_tiles, "FP8D_WMMA_WAVES": waves}),
        archs=(GFX12,),
        runtime_archs=(GFX12,),
        expect=Expect(wmma_16bit=True, hw_decode=True, load_bits=128),
        kernels=tuple(W8A16_KERNELS.values()),
    )


# The config space the WMMA candidates offer, (m_tiles, waves); every entry is compiled in CI.
WMMA_CONFIGS: tuple[tuple[int, int], ...] = ((1, 4), (1, 8), (1, 2), (2, 4))


def builds() -> list[HipBuild]:
    """Every build the HIP backend can launch, plus the shared CUDA sources compiled as HIP."""
    out = [wmma_build(mt, w) for mt, w in WMMA_CONFIGS]
    out += [w8a16_build(mt, w) for mt, w in WMMA_CONFIGS]
    out += shared_builds()
    return out


def shared_builds() -> list[HipBuild]:
    """kernels_cuda's sources compiled as HIP (filled from kernels_cuda's own variant list)."""
    from . import shared_sources

    return shared_sources.builds()
