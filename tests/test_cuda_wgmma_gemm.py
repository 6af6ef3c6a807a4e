"""The sm_90 W8A16 wgmma GEMM (kernels_cuda/csrc/gemm_w8a16_wgmma.cu, cuda.w8a16_gemm_wgmma).

CPU (CI): every config compiles for sm_90a through NVRTC without spills and without ptxas serializing its wgmmas (the
C7513 note that a register-operand wgmma kernel gets when a path rewrites the operand registers under a wgmma in
flight), the generated wgmma header is current, the support rules and the config space.
GPU (`pytest -m gpu tests/test_cuda_wgmma_gemm.py`, H200): every config against dispatch.reference on edge tiles, the
three scale layouts, bias, MX scale codes above 2^7, CUDA-graph capture, a misaligned x view.
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch import reference
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.target import Target
from test_cuda_kernels import _weight  # row- and column-varied magnitudes, so scale indexing bugs show

FORMATS = (Format.FP8_ROW, Format.FP8_TENSOR, Format.MXFP8)

SM90 = Target.simulated_for("sm_90")  # the lending rules' target argument


def _all_configs():
    from kernels_cuda.candidates import wgmma_configs

    return wgmma_configs()


# --- CPU ---------------------------------------------------------------------------------------------------------
def test_generated_wgmma_header_is_current():
    from tools.gen import wgmma_header

    assert wgmma_header.OUT.read_text() == wgmma_header.text(), "run `python -m tools.gen.wgmma_header`"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_config_compiles_without_spills_or_serialized_wgmma(fmt):
    from kernels_cuda import _wgmma_gemm, compiler

    reason = compiler.nvrtc_unavailable_reason()
    if reason:
        pytest.skip(reason)
    for cfg in _all_configs():
        name, _, defines = _wgmma_gemm.module(fmt, cfg)
        log = compiler.compile_module(name, "sm_90a", dict(defines)).log
        res = compiler.ptxas_resources(log)
        assert res.get("spill_bytes", 0) == 0, (cfg, res)
        assert res["registers"] <= 65536 // (128 * cfg.wgs), (cfg, res)  # one CTA's threads fit the register file
        assert "C75" not in log, f"{cfg}: ptxas serialized the wgmmas:\n{log}"
        assert cfg.smem <= 227 * 1024, cfg


def test_support_rules_and_config_space():
    from kernels_cuda.candidates import CudaW8A16GemmWgmma

    c = CudaW8A16GemmWgmma()
    sm90, sm89, sm80 = (Target.simulated_for(a) for a in ("sm_90", "sm_89", "sm_80"))
    p = Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 4096)
    assert c.supports(p, sm90)
    for t in (sm89, sm80):
        no = c.supports(p, t)
        assert not no and "wgmma" in no.reason
    no = c.supports(Problem(Format.FP8_ROW, Act.BF16, 32, 4096, 4096), sm90)
    assert not no and "GEMV" in no.reason
    no = c.supports(Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 4104), sm90)
    assert not no and "K % 16" in no.reason
    assert c.supports(Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 4112), sm90)
    no = c.supports(Problem(Format.MXFP8, Act.BF16, 256, 4096, 4112), sm90)
    assert not no and "K % 64" in no.reason
    no = c.supports(Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 4096, torch.float16, torch.float16), sm90)
    assert not no and "bf16" in no.reason
    assert (Format.FP8_BLOCK, Act.BF16) not in c.serves and (Format.FP8_ROW, Act.FP8) not in c.serves
    for m in (33, 64, 256, 1024, 4096):
        space = c.configs(Problem(Format.FP8_ROW, Act.BF16, m, 4096, 4096), sm90)
        assert space[0] == c.default_config(Problem(Format.FP8_ROW, Act.BF16, m, 4096, 4096), sm90)
        assert len(set(space)) == len(space)
        assert all(cfg.bm <= 64 for cfg in space) == (m <= 64)


def _wgmma_cells(session: str = "s29"):
    """{(fmt, n, k, m): {config: us}} of the wgmma GEMM in a session's re-tune (every config, 64 cells; session 29's
    with split K)."""
    import json
    import re

    from conftest import REPO
    from kernels_cuda._wgmma_gemm import WgmmaGemmConfig

    data = json.loads((REPO / f"docs/perf/h200_wgmma_configs_2026-12-01_{session}.json").read_text())["cells"]
    out = {}
    for key, d in data.items():
        fmt, n, k, m = re.fullmatch(r"(\w+)/bf16 (\d+)x(\d+) M=(\d+)", key).groups()
        out[(fmt, int(n), int(k), int(m))] = {WgmmaGemmConfig.from_dict(json.loads(c)): us for c, us in d.items()}
    return out


def test_time_model_picks_the_autotuned_config_and_estimates_within_15_percent():
    """The default config (the time model's pick) against every config of its space measured in session 29's re-tune
    (split K included): within 1 % of the autotuned best on average over the 64 cells, 5 % in 62 of them, 10 % in all (the
    stage count, 4 or 5, is a near-tie the model does not see); the model's estimate of that config within -12 % / +15 %
    of its time (+20 % at M = 64)."""
    from kernels_cuda.candidates import CudaW8A16GemmWgmma

    cells = _wgmma_cells()
    c, t = CudaW8A16GemmWgmma(), Target.simulated_for("sm_90")
    assert len(cells) == 64
    ratios = []
    for (fmt, n, k, m), d in cells.items():
        p = Problem(Format(fmt), Act.BF16, m, n, k)
        cfg = c.default_config(p, t)
        space = c.configs(p, t)  # measured: the M = 64 split configs too, which are not in the space (see candidates)
        ratios.append(d[cfg] / min(us for x, us in d.items() if x in space))
        assert ratios[-1] <= 1.10, ((fmt, n, k, m), cfg, d)
        hi = 1.2 if m <= 64 else 1.15  # M = 64 (the Triton GEMM's cells): up to 1.17x in this run, 1.15 in session 28's
        assert 0.88 <= c.estimate_us(p, t) / d[cfg] <= hi, ((fmt, n, k, m), c.estimate_us(p, t), d[cfg])
    assert sum(ratios) / len(ratios) <= 1.01 and sum(r > 1.05 for r in ratios) <= 2, sorted(ratios)[-4:]


def test_split_configs_bound_their_partials():
    from kernels_cuda.candidates import WGMMA_SPLIT_MAX_BYTES, CudaW8A16GemmWgmma

    c = CudaW8A16GemmWgmma()
    assert any(cfg.split > 1 for cfg in c.configs(Problem(Format.FP8_ROW, Act.BF16, 256, 4096, 14336), SM90))
    for m, n in ((256, 4096), (512, 16384), (512, 128256)):
        for cfg in c.configs(Problem(Format.FP8_ROW, Act.BF16, m, n, 14336), SM90):
            assert cfg.splits(14336) == 1 or cfg.splits(14336) * m * n * 4 <= WGMMA_SPLIT_MAX_BYTES, (m, n, cfg)


def test_split_k_wins_where_the_efficient_tiles_are_too_few():
    """Session 29's measurement behind the split configs: K = 14336 at M = 256 (32 tiles of 256 x 128 without split)."""
    cells = _wgmma_cells()
    from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
    for fmt in ("fp8_row", "mxfp8"):
        d = cells[(fmt, 4096, 14336, 256)]
        best_unsplit = min(us for cfg, us in d.items() if cfg.split == 1)
        assert d[WgmmaGemmConfig(256, 2, 4, 4)] < 0.8 * best_unsplit, d


def test_lending_rule_follows_the_time_model():
    from kernels_cuda.candidates import CudaW8A16GemmWgmma

    c = CudaW8A16GemmWgmma()
    row = lambda m, n, k: Problem(Format.FP8_ROW, Act.BF16, m, n, k)  # noqa: E731
    # N = 2112 leaves 2.1 waves of tiles: measured 1.22x the dequantize route where 4096x4096 won
    why = c.lending_refused(row(4096, 4096, 4096), row(4096, 2112, 7168), SM90)
    assert why and "time model" in why
    # the same modelled rate: measured within 1 % of the autotuned best
    assert c.lending_refused(row(256, 4096, 14336), row(256, 5120, 25600), SM90) is None


def test_config_validation():
    from kernels_cuda._wgmma_gemm import WgmmaGemmConfig

    for bad in ((96, 2, 4), (128, 5, 4), (128, 2, 2), (128, 2, 4, 0), (128, 2, 4, 9)):
        with pytest.raises(ValueError, match="WgmmaGemmConfig"):
            WgmmaGemmConfig(*bad)
    # K slices: cut to the K steps (64 each), every slice non-empty with the kernel's ceil(steps / slices) per slice
    assert WgmmaGemmConfig(256, 2, 4, 4).splits(4096) == 4 and WgmmaGemmConfig(256, 2, 4, 4).splits(64) == 1
    for split in range(1, 9):
        for steps in range(1, 80):
            n = WgmmaGemmConfig(128, 2, 4, split).splits(64 * steps - 8)
            per = -(-steps // n)
            assert n <= split and (n - 1) * per < steps, (split, steps, n)
    assert WgmmaGemmConfig(256, 2, 4).smem == 4 * (256 * 128 + 128 * 64 + 8)
    assert WgmmaGemmConfig(128, 2, 4).grid(300, 1000) == 3 * 8
    c = WgmmaGemmConfig(64, 4, 4)
    assert WgmmaGemmConfig.from_dict(c.to_dict()) == c  # tables store configs as dicts


def test_only_sm90_compiles_it():
    from dispatch.errors import UnsupportedError
    from kernels_cuda._wgmma_gemm import compile_arch

    assert compile_arch("sm_90") == "sm_90a"
    for arch in ("sm_80", "sm_89", "sm_100"):
        with pytest.raises(UnsupportedError, match="sm_90 only"):
            compile_arch(arch)


# --- GPU ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemm():
    from kernels_cuda import _launch, _wgmma_gemm

    reason = _launch.gpu_unavailable_reason()
    if reason:
        pytest.skip(f"kernels_cuda unavailable: {reason}")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma GEMM is sm_90 code")
    return _wgmma_gemm


def _x(m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed + 1000)
    x = torch.randn(m, k, device="cuda", generator=g)
    return (x * torch.exp2(torch.randint(-2, 3, (m, 1), device="cuda", generator=g).float())).to(torch.bfloat16)


def _check_close(y: torch.Tensor, x: torch.Tensor, qw, bias=None, tol: float = 2e-3) -> None:
    """|y - ref| <= tol * (|x| @ |W|^T + |bias|) + one bf16 rounding: accumulation order differs, indexing and layout
    bugs give O(1) errors."""
    ref = reference.linear(x, qw, bias, out_dtype=torch.float64)
    bound = x.double().abs() @ dispatch.dequantize(qw).double().abs().T
    if bias is not None:
        bound = bound + bias.double().abs()
    err = (y.double() - ref).abs()
    bad = err > tol * bound + 2.0**-8 * ref.abs() + 1e-30
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} outputs off; worst at {bad.nonzero()[0].tolist()}: "
                           f"got {y.double()[bad][0].item()}, want {ref[bad][0].item()}")


# partial tiles in M and N, a K tail inside a 64-step (1040, fp8_row / fp8_tensor), one K step (64), N % 8 != 0
SHAPES = [(33, 1000, 1040), (100, 4104, 2560), (256, 200, 64), (300, 129, 1024), (1, 256, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_config_matches_reference(gemm, fmt):
    for i, (m, n, k) in enumerate(SHAPES):
        if fmt is Format.MXFP8 and k % 64:
            continue
        qw = dispatch.quantize(_weight(n, k, i), fmt, act="bf16")
        x = _x(m, k, i)
        for bias in (None, torch.randn(n, device="cuda").to(torch.bfloat16)):
            for cfg in _all_configs():
                _check_close(gemm.w8a16_wgmma_gemm(x, qw, bias, torch.bfloat16, cfg), x, qw, bias)


@pytest.mark.gpu
def test_mx_scale_codes_above_the_fold(gemm):
    """Scale codes above 134 (2^7) take the second multiply; 127 + [-20, 20] around them."""
    n, k = 256, 512
    qw = dispatch.quantize(_weight(n, k, 5), Format.MXFP8, act="bf16")
    codes = qw.scale.view(torch.uint8)
    g = torch.Generator(device="cuda").manual_seed(3)
    codes.copy_(torch.randint(107, 148, codes.shape, device="cuda", generator=g).to(torch.uint8))
    x = _x(128, k, 5)
    for cfg in _all_configs()[:4]:
        _check_close(gemm.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg), x, qw)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 4])
def test_cuda_graph_capture_determinism_and_misaligned_x(gemm, split):
    from kernels_cuda._wgmma_gemm import WgmmaGemmConfig

    cfg = WgmmaGemmConfig(128, 2, 4, split)  # split 4: two kernels (the K slices' partials, their ordered sum)
    qw = dispatch.quantize(_weight(1024, 2048, 9), Format.FP8_ROW, act="bf16")
    x = _x(300, 2048, 9)
    eager = gemm.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg)
    assert torch.equal(eager, gemm.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg)), "not deterministic"
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            out = gemm.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg)
    torch.cuda.current_stream().wait_stream(s)
    x.copy_(_x(300, 2048, 10))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, gemm.w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, cfg))
    buf = _x(1, 300 * 2048 + 8, 11)
    xv = buf.view(-1)[1:1 + 300 * 2048].view(300, 2048)  # 2 bytes past an aligned base
    assert xv.data_ptr() % 16
    _check_close(gemm.w8a16_wgmma_gemm(xv, qw, None, torch.bfloat16, cfg), xv, qw)


@pytest.mark.gpu
def test_dispatch_runs_the_candidate_when_forced(gemm):
    qw = dispatch.quantize(_weight(4096, 4096, 12), Format.FP8_ROW, act="bf16")
    x = _x(256, 4096, 12)
    with dispatch.force("cuda.w8a16_gemm_wgmma"):
        assert dispatch.explain(x, qw).candidate_id == "cuda.w8a16_gemm_wgmma"
        y = dispatch.linear(x, qw)
    _check_close(y, x, qw)
