"""HIP backend on CPU (CI): every kernel compiles for gfx1201 with clang-19, its ISA shows what it is meant
to (hardware fp8 conversion, WMMA, 128-bit loads, no scratch), the format table matches dispatch.formats,
and the host glue (flags, cache key, geometry, argument packing, support predicates) agrees with the
compiled kernels' own metadata. Nothing here runs a kernel: see tests/test_hip_gpu.py and docs/hip.md.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from dispatch import formats
from dispatch.formats import Act, ActGranularity, Format
from dispatch.problem import Problem
from dispatch.target import Target
from kernels_hip import _launch, compiler, format_table, isa, kernels
from kernels_hip.candidates import HARDWARE_VALIDATED, NOT_RUN, HipW8A8Wmma, HipW8A16Wmma, candidates
from kernels_hip.configs import MAX_M, WmmaConfig, wmma_configs_for

needs_clang = pytest.mark.skipif(compiler.toolchain_missing() is not None,
                                 reason=f"offline HIP toolchain missing: {compiler.toolchain_missing()}")


# --- The one format table -------------------------------------------------------------------------------
def test_format_table_header_is_current():
    assert format_table.check() is None, format_table.check()


def test_format_table_agrees_with_dispatch_formats():
    gfx12, mi300 = format_table.HW_FP8["gfx12"], format_table.HW_FP8["gfx942"]
    assert gfx12.e4m3_max == formats.E4M3_MAX and not gfx12.fnuz and gfx12.decode_scale == 1.0
    # e4m3fnuz: bias 8, so an e4m3fn code read by MI300 hardware is worth half: decode scale 2, max 240
    assert mi300.fnuz and mi300.e4m3_max == 240.0 and mi300.decode_scale == 2.0
    assert mi300.e4m3_max * mi300.decode_scale == 480.0  # e4m3fn max code 0x7e reads 224 there, 448 after x2
    assert format_table.hw_fp8("gfx1201") is gfx12 and format_table.hw_fp8("gfx90a") is None


def _predefined(arch: str) -> dict[str, str]:
    out = subprocess.run([compiler.CLANG, "-x", "hip", f"--offload-arch={arch}", "-nogpuinc", "-nogpulib",
                          "--cuda-device-only", "-E", "-dM", "-include", str(compiler.CSRC / "fp8_format_table.h"),
                          "-"], input="", capture_output=True, text=True, check=True).stdout
    macros = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1].startswith("FP8D_HW_"):
            macros[parts[1]] = parts[2]
    return macros


@needs_clang
@pytest.mark.parametrize("arch,family", [("gfx1201", "gfx12"), ("gfx942", "gfx942")])
def test_format_table_selected_per_arch_by_the_compiler(arch, family):
    hw = format_table.HW_FP8[family]
    m = _predefined(arch)
    assert float(m["FP8D_HW_E4M3_MAX"].rstrip("f")) == hw.e4m3_max
    assert float(m["FP8D_HW_DECODE_SCALE"].rstrip("f")) == hw.decode_scale
    assert int(m["FP8D_HW_FNUZ"]) == int(hw.fnuz) and int(m["FP8D_HW_WAVE_SIZE"]) == hw.wave_size


def test_no_fp8_literals_in_hip_kernels():
    # format numbers come from the table / -D flags, never written into a kernel
    for p in compiler.CSRC.glob("*.hip"):
        text = p.read_text()
        for lit in ("448.0", "240.0", "1e-12"):
            assert lit not in text, f"{p.name} hard-codes {lit}"


# --- Compile flags and cache key ------------------------------------------------------------------------
def test_runtime_and_offline_compiles_get_the_same_defines():
    opts = compiler.HipCompileOptions.make("gfx1201", {"FP8D_WMMA_MT": 2})
    d_rtc = {f for f in opts.hiprtc_flags() if f.startswith("-D")}
    d_off = {f for f in opts.clang_flags() if f.startswith("-D")}
    assert d_rtc == d_off
    assert "-DFP8D_WMMA_MT=2" in d_rtc and any(f.startswith("-DFP8D_E4M3_MAX=") for f in d_rtc)
    assert "--offload-arch=gfx1201" in opts.hiprtc_flags()
    assert "-fhip-fp32-correctly-rounded-divide-sqrt" in opts.hiprtc_flags()  # v / s must be IEEE


def test_compile_options_validate():
    with pytest.raises(ValueError):
        compiler.HipCompileOptions("sm_90")
    with pytest.raises(ValueError):
        compiler.HipCompileOptions.make("gfx1201", {"1BAD": 1})
    a = compiler.HipCompileOptions.make("gfx1201", {"B": 1, "A": 2})
    b = compiler.HipCompileOptions.make("gfx1201", {"A": 2, "B": 1})
    assert a == b  # define order does not change the key


def test_cache_key_tracks_every_input():
    src, hdrs = "kernel", {"a.h": "x", "b.cuh": "y"}
    o = compiler.HipCompileOptions.make("gfx1201", {"FP8D_WMMA_WAVES": 4})
    base = compiler.cache_key("k.hip", src, hdrs, o, (6, 4))
    assert base == compiler.cache_key("k.hip", src, dict(reversed(list(hdrs.items()))), o, (6, 4))
    variants = [
        compiler.cache_key("k.hip", src + " ", hdrs, o, (6, 4)),
        compiler.cache_key("k.hip", src, {**hdrs, "a.h": "x2"}, o, (6, 4)),
        compiler.cache_key("k.hip", src, hdrs, compiler.HipCompileOptions.make("gfx1201", {"FP8D_WMMA_WAVES": 8}), (6, 4)),
        compiler.cache_key("k.hip", src, hdrs, compiler.HipCompileOptions.make("gfx1200", {"FP8D_WMMA_WAVES": 4}), (6, 4)),
        compiler.cache_key("k.hip", src, hdrs, o, (6, 5)),
    ]
    assert len({base, *variants}) == 6


def test_runtime_headers_resolve_portability_include():
    hdrs = compiler.runtime_headers()
    port = hdrs["portability.cuh"]
    assert f'#include "{compiler.PORTABILITY_INCLUDE}"' in port  # the literal name hipRTC will look up
    assert hdrs[compiler.PORTABILITY_INCLUDE] == hdrs["gfx12_fp8.h"]
    assert "fp8_format_table.h" in hdrs and "hip_shim.h" not in hdrs  # the shim is offline-only


def test_cache_path_is_content_addressed(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8DISPATCH_CACHE_DIR", str(tmp_path))
    p = compiler.cache_path("w8a8_wmma_gfx12.hip", "abc123", "gfx1201")
    assert p.parent == tmp_path / "hip" and p.name == "w8a8_wmma_gfx12-gfx1201-abc123.hsaco"


# --- Runtime availability (no ROCm here) ----------------------------------------------------------------
def test_backend_unavailable_with_reason_without_rocm():
    if torch.version.hip is not None:
        pytest.skip("ROCm torch: the backend may be available")
    reason = compiler.runtime_unavailable_reason()
    assert reason and "ROCm" in reason
    for c in candidates():
        assert not c.available() and c.available().reason == reason
    x = torch.zeros(1, 16, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="HIP backend unavailable"):
        _launch.quantize_activation(x, "per_token")


def test_import_touches_no_cupy_and_no_device():
    code = ("import sys, kernels_hip, kernels_hip.candidates, kernels_hip.isa, kernels_hip._launch, "
            "kernels_hip.compiler; assert 'cupy' not in sys.modules, 'cupy imported'; "
            "import torch; assert not torch.cuda.is_initialized()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=compiler.CSRC.parents[1])


# --- Candidates: support predicates, configs ------------------------------------------------------------
def test_candidates_declare_not_run_on_hardware():
    assert HARDWARE_VALIDATED is False
    for c in candidates():
        assert c.hardware_validated is False and c.backend == "hip" and c.id.startswith("hip.")


@pytest.mark.parametrize("cand", [HipW8A16Wmma(), HipW8A8Wmma()], ids=lambda c: c.id)
def test_support_predicates(cand):
    fmt, act = sorted(cand.serves)[0]
    x = cand.x_dtypes[0]
    gfx12 = Target.simulated_for("gfx1201")
    ok = cand.supports(Problem(fmt, act, 1, 4096, 4096, x, x), gfx12)
    assert ok and NOT_RUN in ok.reason
    for target, why in [(Target.simulated_for("sm_90"), "ROCm"), (Target.simulated_for("gfx942"), "v_wmma"),
                        (Target("amd", "gfx90a", "MI210", 104, "2.13", None, "6.4"), "HW_FP8")]:
        s = cand.supports(Problem(fmt, act, 1, 4096, 4096, x, x), target)
        assert not s and why in s.reason
    assert not cand.supports(Problem(fmt, act, MAX_M + 1, 4096, 4096, x, x), gfx12)
    assert cand.supports(Problem(fmt, act, MAX_M, 4096, 4096, x, x), gfx12)
    assert not cand.supports(Problem(fmt, act, 1, 4096, 4104, x, x), gfx12)  # K % 16 != 0
    assert cand.supports(Problem(fmt, act, 1, 4096, 576, x, x), gfx12)  # the real K = 576 case
    other_act = Act.FP8 if act is Act.BF16 else Act.BF16
    assert not cand.supports(Problem(fmt, other_act, 1, 4096, 4096, x, x), gfx12)


def test_w8a16_serves_all_formats_w8a8_the_three_with_act_scales():
    assert {f for f, _ in HipW8A16Wmma.serves} == set(Format)
    assert {f for f, _ in HipW8A8Wmma.serves} == {Format.FP8_BLOCK, Format.FP8_TENSOR, Format.FP8_ROW}


def test_configs_cover_every_decode_m():
    for m in range(1, MAX_M + 1):
        cfgs = wmma_configs_for(m)
        assert cfgs and all(c.fits(m) for c in cfgs)
        assert cfgs[0].m_tiles == (1 if m <= 16 else 2)  # default: the smallest tiling that fits
    assert wmma_configs_for(MAX_M + 1) == []
    with pytest.raises(ValueError):
        WmmaConfig(m_tiles=3, waves=4)  # never compiled in CI -> refused
    assert {(c.m_tiles, c.waves) for c in map(lambda t: WmmaConfig(*t), kernels.WMMA_CONFIGS)} == set(kernels.WMMA_CONFIGS)


# --- Launch geometry ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 15, 16, 17, 4096, 14336, 28672, 128256])
def test_wmma_grid_covers_n_exactly(n):
    cfg = WmmaConfig()
    grid, block = _launch.wmma_geometry(n, cfg)
    assert grid[0] * 16 >= n > (grid[0] - 1) * 16 and grid[1:] == (1, 1)
    assert block == (32 * cfg.waves, 1, 1)


@pytest.mark.parametrize("m,k", [(1, 4096), (16, 576), (3, 129), (32, 14336), (4096, 4096)])
@pytest.mark.parametrize("g", list(ActGranularity))
def test_act_quant_plan_covers_all_work(m, k, g):
    plan = _launch.act_quant_plan(m, k, g)
    if g is ActGranularity.PER_TOKEN:
        assert plan[0][1][0] == m  # one block per token
    elif g is ActGranularity.PER_TOKEN_GROUP_128:
        items = m * math.ceil(k / 128)
        assert plan[0][1][0] * (plan[0][2][0] // 32) >= items  # one wave32 per (token, group)
    else:
        assert len(plan) in (1, 2)
    for _, grid, block in plan:
        assert block[0] % 32 == 0 and grid[0] >= 1


def test_pick_config_refuses_m_beyond_its_tiles():
    from dispatch.errors import UnsupportedError

    with pytest.raises(UnsupportedError):
        _launch.pick_config(17, WmmaConfig(1, 4))
    assert _launch.pick_config(17, None).m_tiles == 2


# --- Everything compiles; the ISA shows what each kernel is for ------------------------------------------
@needs_clang
def test_every_supported_build_compiles_with_all_kernels():
    results = isa.compile_all()
    assert results
    for r in results:
        if r.arch not in r.build.runtime_archs:
            continue
        assert r.ok, f"{r.build.label} for {r.arch} failed:\n{r.log}"
        assert set(r.build.kernels) <= set(r.kernels), f"{r.build.label}: missing {set(r.build.kernels) - set(r.kernels)}"


@needs_clang
def test_report_only_builds_of_the_shared_sources_compile():
    """Builds no support predicate runs (the mma.sync-shaped CUDA GEMVs on gfx12, gfx942 variants) are compiled for the
    ISA report: the evidence that kernels_cuda's sources stay portable. A vendor function missing from gfx12_fp8.h
    (session 5: fp8d_cta_any) must fail here, not only as an ERROR row of the report."""
    results = [r for r in isa.compile_all() if r.arch not in r.build.runtime_archs]
    assert any(r.build.source == "gemv_w8a16.cu" for r in results)
    bad = [(r.build.label, r.arch, r.log[-600:]) for r in results if not r.ok]
    assert not bad, bad


@needs_clang
def test_isa_expectations_hold_for_every_supported_kernel():
    rows = isa.isa_rows()
    supported = [r for r in rows if r.supported]
    assert supported and all(r.target == "gfx1201" for r in supported)
    bad = [(r.kernel, r.note) for r in supported if not r.compiled or "EXPECT FAIL" in r.note]
    assert not bad, bad
    by_kernel = {r.kernel: r for r in supported}
    assert by_kernel["w8a8_wmma_gfx12_block[mt=1,waves=4]"].mma == "v_wmma fp8"
    assert by_kernel["w8a16_wmma_gfx12_mx_bf16[mt=1,waves=4]"].fp8_cvt == "hw"
    assert all(r.spills == 0 for r in supported)


@needs_clang
def test_wmma_kernels_use_wave32_and_launch_bounds_match_configs():
    for r in isa.compile_all():
        if r.build.source not in (kernels.WMMA_SOURCE, kernels.W8A16_SOURCE):
            continue
        waves = int(dict(r.build.defines)["FP8D_WMMA_WAVES"])
        for k in r.build.kernels:
            assert r.kernels[k].wavefront_size == 32
            assert r.kernels[k].lds_bytes == (waves - 1) * 8 * 32 * 4 * int(dict(r.build.defines)["FP8D_WMMA_MT"]) \
                or waves == 1




@needs_clang
def test_launch_arguments_match_compiled_signatures():
    """The tuple _launch packs must have the kernel's argument count, sizes and order (by metadata)."""
    t8 = torch.zeros(16, dtype=torch.uint8)
    f32 = torch.zeros(4, dtype=torch.float32)
    y = torch.zeros(4, dtype=torch.bfloat16)
    packed = {
        kernels.W8A16_SOURCE: _launch.w8a16_args(t8, f32, y, None, y, 1, 2, 16, None, torch.bfloat16),
        kernels.WMMA_SOURCE: _launch.w8a8_args(t8, f32, t8, f32, y, y, 1, 2, 16, torch.bfloat16, torch.float32),
    }
    for r in isa.compile_all():
        if r.build.source not in packed:
            continue
        args = packed[r.build.source]
        for k in r.build.kernels:
            meta = r.kernels[k].args
            assert len(meta) == len(args), (k, meta)
            for (off, size, kind), a in zip(meta, args):
                assert np.asarray(a).itemsize == size, (k, off, kind, type(a))
                assert (kind == "global_buffer") == isinstance(a, np.uint64), (k, off, kind)


@needs_clang
def test_act_quant_arguments_match_compiled_signatures():
    r = next(r for r in isa.compile_all() if r.build.source == "act_quant.cu" and r.arch == "gfx1201")
    expect_sizes = {
        "fp8d_act_quant_token": [8, 4, 8, 8, 4],
        "fp8d_act_quant_group": [8, 4, 8, 8, 4, 4],
        "fp8d_act_quant_tensor_single": [8, 4, 8, 8, 8],
        "fp8d_act_amax_partial": [8, 4, 8, 8],
        "fp8d_act_quant_tensor_apply": [8, 4, 8, 4, 8, 8, 8],
    }  # what quantize_activation passes: pointers uint64, ints int32, numel int64
    for k, sizes in expect_sizes.items():
        assert [s for _, s, _ in r.kernels[k].args] == sizes, k


@needs_clang
def test_gfx942_rows_compile_with_the_fnuz_table():
    rows = [r for r in isa.isa_rows() if r.target == "gfx942"]
    assert rows and all(not r.supported for r in rows)  # report only: never a runtime target here
    assert all(r.compiled for r in rows), [(r.kernel, r.error) for r in rows if not r.compiled]


def test_missing_toolchain_marks_rows_unsupported(monkeypatch):
    monkeypatch.setattr(compiler, "CLANG", "clang-does-not-exist-19")
    compiler.toolchain_missing.cache_clear()
    try:
        rows = isa.isa_rows()
        assert rows and all(not r.supported and not r.compiled and "unsupported-by-toolchain" in r.note for r in rows)
        assert all("apt-get install -y clang-19" in r.error for r in rows)
    finally:
        compiler.toolchain_missing.cache_clear()


def test_parse_disassembly_and_metadata():
    dis = ("Disassembly of section .text:\n\n0000000000001000 <k1>:\n\tglobal_load_b128 v[0:3], v[4:5], off\n"
           "\tv_wmma_f32_16x16x16_fp8_fp8 v[0:7], v[8:9], v[10:11], 0\n\n0000000000001100 <k2>:\n"
           "\tglobal_load_dwordx4 v[0:3], v[4:5], off\n\ts_endpgm\n")
    ins = isa.parse_disassembly(dis)
    assert ins["k1"]["global_load_b128"] == 1 and ins["k1"]["v_wmma_f32_16x16x16_fp8_fp8"] == 1
    assert ins["k2"]["s_endpgm"] == 1
    notes = "AMDGPU Metadata:\n---\namdhsa.kernels:\n  - .name: k1\n    .vgpr_count: 10\n    .args: []\n...\n"
    assert isa.parse_metadata(notes)[0][".name"] == "k1"
    ki = isa.KernelIsa("k2", ins["k2"], 1, 0, 0, 0, 0, 64, ())
    assert ki.widest_global_load_bits == 128  # gfx9 spelling (dwordx4) counts too
