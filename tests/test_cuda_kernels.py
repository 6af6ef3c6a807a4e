"""GPU tests of the CUDA kernels (kernels_cuda) against dispatch.reference / dispatch.quantize_activation.

Run on the H200: `pytest -m gpu tests/test_cuda_kernels.py`. Paths covered on one sm_90 device:
  native  : arch of the device (sm_90: hardware F2FP, bf16/f16 HMMA, mma e4m3 lowered by ptxas)
  sm80    : arch="compute_80" PTX JIT-compiled by the driver (software fp8 decode/encode, bf16 MMA for W8A8)
  emulated: -DFP8D_FORCE_MMA_EMULATION, the portable MMA fallback the HIP build uses
Weights get row/column-varied magnitudes so block, row and MX scales differ (uniform scales hide indexing bugs).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import dispatch
from dispatch import reference
from dispatch.formats import Act, ActGranularity, Format, QWeight

pytestmark = pytest.mark.gpu

PATHS = {"native": {}, "sm80": {"arch": "compute_80"}, "emulated": {"emulate_mma": True}}
W8A8_FORMATS = (Format.FP8_TENSOR, Format.FP8_ROW, Format.FP8_BLOCK)


@pytest.fixture(scope="module")
def launch():
    from kernels_cuda import _launch

    reason = _launch.gpu_unavailable_reason()
    if reason:
        pytest.skip(f"kernels_cuda unavailable: {reason}")
    return _launch


def _dequant():
    from kernels_cuda import _dequant

    return _dequant


def _weight(n: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g)
    rows = torch.exp2(torch.randint(-6, 7, (n, 1), device="cuda", generator=g).float())
    cols = torch.exp2(torch.randint(-3, 4, (1, k), device="cuda", generator=g).float())
    return (w * rows * cols * 0.02).contiguous()


def _x(m: int, k: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed + 1000)
    x = torch.randn(m, k, device="cuda", generator=g)
    x = x * torch.exp2(torch.randint(-2, 3, (m, 1), device="cuda", generator=g).float())
    return x.to(dtype).contiguous()


def _check_close(y: torch.Tensor, x: torch.Tensor, qw: QWeight, bias=None, tol: float = 2e-3,
                 out_roundings: int = 1) -> None:
    """|y - ref| <= tol * (|x| @ |W|^T + |bias|) + output rounding: accumulation order differs, indexing
    bugs give O(1) errors. `out_roundings`: how many bf16/fp16 roundings of the output the route makes."""
    ref = reference.linear(x, qw, bias, out_dtype=torch.float64)
    xv = reference.activation_values(x, qw).double().abs()
    bound = xv @ dispatch.dequantize(qw).double().abs().T
    if bias is not None:
        bound = bound + bias.double().abs()
    out_eps = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-10}[y.dtype] * out_roundings
    err = (y.double() - ref).abs()
    allowed = tol * bound + out_eps * ref.abs() + 1e-30
    bad = err > allowed
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} outputs off; worst at {bad.nonzero()[0].tolist()}: "
                           f"got {y.double()[bad][0].item()}, want {ref[bad][0].item()}")


# partial row tiles, K % 128 != 0, fewer K steps than warps (K = 16, 576), 2.5 steps a warp (2560)
SHAPES = [(256, 4096), (300, 1040), (4096, 576), (129, 16), (1000, 2560)]
MS = [1, 2, 3, 5, 8, 9, 16, 17, 31, 32]


FAMILIES = [(f, "bf16") for f in Format] + [(f, "fp8") for f in W8A8_FORMATS]  # W8A16: every format


def _gemv(launch, qw: QWeight):
    return launch.w8a16_gemv if qw.act is Act.BF16 else launch.w8a8_gemv


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fmt,act", FAMILIES)
def test_gemv_matches_reference(launch, fmt, act, path):
    for i, (n, k) in enumerate(SHAPES):
        qw = dispatch.quantize(_weight(n, k, i), fmt, act=act)
        for m in (MS if path == "native" else [1, 9, 32]):
            x = _x(m, k, torch.bfloat16, i * 100 + m)
            _check_close(_gemv(launch, qw)(x, qw, None, torch.float32, **PATHS[path]), x, qw)


@pytest.mark.parametrize("fmt", [Format.FP8_TENSOR, Format.FP8_ROW, Format.FP8_BLOCK])
def test_w8a16_gemv_fp16_activations_and_bias(launch, fmt):
    n, k = 300, 1040
    qw = dispatch.quantize(_weight(n, k, 7), fmt, act="bf16")
    bias = torch.randn(n, device="cuda").to(torch.float16)
    for m in (1, 12, 32):
        x = _x(m, k, torch.float16, m)
        for out in (torch.float16, torch.float32):
            _check_close(launch.w8a16_gemv(x, qw, bias, out), x, qw, bias)
        _check_close(launch.w8a16_gemv(x, qw, bias, torch.float32, arch="compute_80"), x, qw, bias)


def _every_config(m: int):
    """Every GemvConfig the kernels accept at M tokens (configs.fits): all warps, row tiles and ring depths."""
    from kernels_cuda.configs import MAX_UNROLL, GemvConfig

    return [c for c in (GemvConfig(w, mt, u) for w in (2, 4, 8) for mt in (1, 2) for u in range(1, MAX_UNROLL + 1))
            if c.fits(m)]


@pytest.mark.parametrize("fmt,act", FAMILIES)
def test_gemv_every_config_bias_bf16_output(launch, fmt, act):
    """Every config value at each token-tile size (M = 5, 13, 27), on a shape with partial 16/32-row tiles
    and K % 128 != 0 (21 K steps: 3 warps of 8 get an extra step, rings deeper than a warp's share)."""
    n, k = 1000, 2576
    qw = dispatch.quantize(_weight(n, k, 3), fmt, act=act)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    run = _gemv(launch, qw)
    for m in (5, 13, 27):
        x = _x(m, k, torch.bfloat16, m)
        for cfg in _every_config(m):
            _check_close(run(x, qw, bias, torch.bfloat16, cfg), x, qw, bias)


@pytest.mark.parametrize("path", ["native", "sm80"])
@pytest.mark.parametrize("fmt,act", FAMILIES)
def test_gemv_shared_memory_ring_is_bit_identical_to_the_register_ring(launch, fmt, act, path):
    """GemvConfig.smem_ring (the weight ring in shared memory, cp.async): the same products summed in the same order as
    the register ring at the same warps, so the same bits; and within the reference's bound. Shapes with partial row
    tiles, K % 128 != 0 and fewer K steps than warps (zero-filled copies), every CTA shape and two ring depths, M over
    both token-tile sizes it serves; fp32 output and bf16 output with a bias; on sm_90 and the compute_80 PTX."""
    from kernels_cuda.configs import GemvConfig

    run = None
    for i, (n, k) in enumerate([(1000, 2576), (129, 16), (300, 1040)]):
        qw = dispatch.quantize(_weight(n, k, 40 + i), fmt, act=act)
        run = _gemv(launch, qw)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for m in (1, 5, 13, 16):
            x = _x(m, k, torch.bfloat16, 7 * m + i)
            for w, mt, ring in itertools.product((8, 4), (1, 2), (3, 1)):
                cfg = GemvConfig(w, mt, 1, ring)
                if not cfg.fits(m):
                    continue
                want = run(x, qw, None, torch.float32, GemvConfig(w, mt, 1), **PATHS[path])
                got = run(x, qw, None, torch.float32, cfg, **PATHS[path])
                assert torch.equal(got, want), (n, k, m, cfg)
                _check_close(got, x, qw)
                got_b = run(x, qw, bias, torch.bfloat16, cfg, **PATHS[path])
                assert torch.equal(got_b, run(x, qw, bias, torch.bfloat16, GemvConfig(w, mt, 1), **PATHS[path]))
    assert run is not None


@pytest.mark.parametrize("fmt,act", FAMILIES)
def test_gemv_every_m_default_config(launch, fmt, act):
    """M = 1..32 with the default config of each M (the dispatcher's choice without a table), fp32 output."""
    from dispatch.problem import Problem
    from dispatch.target import detect
    from kernels_cuda.configs import default_gemv_config

    n, k = 300, 1040
    qw = dispatch.quantize(_weight(n, k, 5), fmt, act=act)
    run = _gemv(launch, qw)
    target = detect()
    for m in range(1, 33):
        x = _x(m, k, torch.bfloat16, 7 * m)
        cfg = default_gemv_config(Problem.of(x.shape, qw, x_dtype=x.dtype), target)
        _check_close(run(x, qw, None, torch.float32, cfg), x, qw)


def _one_hot_x(m: int, k: int, cols: list[int]) -> torch.Tensor:
    x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    for i, c in enumerate(cols):
        x[i, c] = 1.0
    return x


@pytest.mark.parametrize("path", list(PATHS))
def test_w8a16_decodes_every_code_exactly(launch, path):
    """y[m, n] = w[n, col_m] exactly when x is one-hot: proves the decode and the K permutation of the
    fragments, code by code (every finite e4m3 code appears in every K position class)."""
    n, k = 256, 256
    codes = torch.arange(n * k, device="cuda", dtype=torch.int64).remainder(255)  # 0..254 (skips 0xff)
    codes = torch.where(codes == 0x7F, torch.zeros_like(codes), codes)  # NaN code: never in a weight
    q = codes.to(torch.uint8).reshape(n, k).view(torch.float8_e4m3fn).contiguous()
    qw = QWeight(Format.FP8_TENSOR, Act.BF16, q, torch.tensor(1.0, device="cuda"))
    want_all = dispatch.dequantize(qw)
    for start in range(0, k, 32):
        cols = list(range(start, start + 32))
        x = _one_hot_x(32, k, cols)
        y = launch.w8a16_gemv(x, qw, None, torch.float32, **PATHS[path])
        assert torch.equal(y, want_all[:, cols].T.contiguous()), f"columns {start}..{start + 31} differ"


def test_mx_scales_apply_per_group(launch):
    n, k = 64, 256
    qw = dispatch.quantize(_weight(n, k, 11), Format.MXFP8, act="bf16")
    want_all = dispatch.dequantize(qw)
    for start in range(0, k, 32):
        cols = list(range(start, start + 32))
        y = launch.w8a16_gemv(_one_hot_x(32, k, cols), qw, None, torch.float32)
        assert torch.equal(y, want_all[:, cols].T.contiguous())


@pytest.mark.parametrize("path", list(PATHS))
def test_mx_every_scale_code_decodes_exactly(launch, path):
    """Every e8m0 code whose weights stay finite (0..246) with every finite e4m3 code, one-hot x: the weight the
    MMA sees is dequantize's value rounded once to bf16, through the one-fma decode (CTAs whose codes are all
    <= 134) and the Rare policy's second multiply (CTAs with a larger code; csrc/fp8_common.cuh
    fp8d_mx_decode_mul), both in one launch. Outputs whose bf16 value is subnormal are left out (that range is
    outside the exactness promise)."""
    n, k = 256, 256
    codes = torch.arange(n * k, device="cuda", dtype=torch.int64).remainder(255)
    codes = torch.where(codes == 0x7F, torch.zeros_like(codes), codes)
    q = codes.to(torch.uint8).reshape(n, k).view(torch.float8_e4m3fn).contiguous()
    # rows 0..127: codes 0..134 only (their CTAs run the one-fma policy); rows 128..255: 0..246 (the Rare one)
    sc = torch.arange(n * k // 32, device="cuda", dtype=torch.int64).mul(7).reshape(n, k // 32)
    sc = torch.cat([sc[: n // 2].remainder(135), sc[n // 2:].remainder(247)])
    qw = QWeight(Format.MXFP8, Act.BF16, q, sc.to(torch.uint8).view(torch.float8_e8m0fnu).contiguous())
    want_all = dispatch.dequantize(qw).to(torch.bfloat16).float()
    assert torch.isfinite(want_all).all() and (sc[n // 2:] > 134).any() and (sc[n // 2:] < 134).any()
    for start in range(0, k, 32):
        cols = list(range(start, start + 32))
        got = launch.w8a16_gemv(_one_hot_x(32, k, cols), qw, None, torch.float32, **PATHS[path]).T
        want = want_all[:, cols]
        keep = (want.abs() >= 2.0**-126) | (want == 0)
        assert torch.equal(got[keep], want[keep]), f"columns {start}..{start + 31} differ"


def test_mx_nan_scale_code_gives_nan(launch):
    """e8m0 code 255 is NaN: the rows of that group come out NaN, the other rows stay finite."""
    n, k = 64, 256
    qw = dispatch.quantize(_weight(n, k, 12), Format.MXFP8, act="bf16")
    sc = qw.scale.view(torch.uint8).clone()
    sc[5, 3] = 255
    qw = QWeight(Format.MXFP8, Act.BF16, qw.qdata, sc.view(torch.float8_e8m0fnu))
    y = launch.w8a16_gemv(_x(4, k, torch.bfloat16, 3), qw, None, torch.float32)
    assert torch.isnan(y[:, 5]).all() and torch.isfinite(torch.cat([y[:, :5], y[:, 6:]], 1)).all()


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize("cfg", ["4,1,1,0", "8,2,1,0", "8,1,1,3", "4,2,1,3"])
def test_mx_partial_tiles_read_clamped_scale_codes(launch, m, cfg):
    """The MX scale loads are clamped (row to N - 1, group to the row's last one), not predicated: N = 40 leaves a
    partial 16-row tile, K = 160 a partial 128-wide step whose chunks past K take the last group's code. A NaN code
    there (row 39) gives that row NaN and no other; a code above the fold in row 20's last group sends that CTA to the
    Rare policy; every other output is the reference's."""
    from kernels_cuda.configs import GemvConfig
    warps, mtiles, unroll, ring = (int(v) for v in cfg.split(","))
    config = GemvConfig(warps=warps, mtiles=mtiles, unroll=unroll, smem_ring=ring)
    n, k = 40, 160
    qw = dispatch.quantize(_weight(n, k, 13), Format.MXFP8, act="bf16")
    sc = qw.scale.view(torch.uint8).clone()
    sc[39, 4] = 255
    sc[20, 4] = 140
    qw = QWeight(Format.MXFP8, Act.BF16, qw.qdata, sc.view(torch.float8_e8m0fnu).contiguous())
    x = _x(m, k, torch.bfloat16, 14)
    y = launch.w8a16_gemv(x, qw, None, torch.float32, config=config)
    assert torch.isnan(y[:, 39]).all() and torch.isfinite(y[:, :39]).all()
    _check_close(y[:, :39], x, QWeight(Format.MXFP8, Act.BF16, qw.qdata[:39].contiguous(),
                                       qw.scale[:39].contiguous()))


# --- activation quantization: bit-identical ---------------------------------------------------------
def _special_x(m: int, k: int, dtype) -> torch.Tensor:
    x = _x(m, k, torch.float32, m * 7 + k)
    if m >= 3:
        x[1] = 0.0  # all-zero token: floor scale, zero codes
        x[2, : min(k, 5)] = torch.tensor([448.0, -448.0, 0.5, -1e-30, 3.0e38][: min(k, 5)])
    if m >= 5 and k >= 3:
        x[3, 0] = float("nan")
        x[4, 2] = float("inf")
    # values near e4m3 rounding ties relative to the row's scale
    if m >= 6 and k >= 8:
        x[5, :8] = torch.tensor([448.0, 1.0625, 1.1875, 0.0087890625, 0.0009765625, 0.0029296875, 240.0, 232.0])
    return x.to(dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.float8_e4m3fn:
        au, bu = a.view(torch.uint8), b.view(torch.uint8)
        nan_a, nan_b = (au & 0x7F) == 0x7F, (bu & 0x7F) == 0x7F
        return bool(torch.equal(nan_a, nan_b) and torch.equal(au[~nan_a], bu[~nan_b]))
    na, nb = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(na, nb) and torch.equal(a[~na].view(torch.int32), b[~nb].view(torch.int32)))


@pytest.mark.parametrize("arch", [None, "compute_80"])
@pytest.mark.parametrize("g", list(ActGranularity))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_act_quant_bit_identical(launch, g, dtype, arch):
    for m, k in [(1, 1), (1, 7), (3, 128), (6, 129), (8, 576), (17, 4096), (32, 1040), (32, 16384), (64, 8192),
                 (16, 4096), (4, 4096), (32, 2048)]:  # per-tensor one-launch path at 1, 2, 8 CTAs
        x = _special_x(m, k, dtype)
        want_q, want_s = dispatch.quantize_activation(x, g)
        got_q, got_s = launch.quantize_activation(x, g, arch=arch)
        assert got_s.shape == want_s.shape and got_q.shape == want_q.shape
        assert _same_bits(got_s, want_s), f"scales differ for {g} {dtype} [{m}, {k}]"
        assert _same_bits(got_q, want_q), f"codes differ for {g} {dtype} [{m}, {k}]"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_act_quant_misaligned_x_bit_identical(launch, dtype):
    """A view 1 element into its storage: the per-tensor kernel's 16-byte amax loads must fall back to
    scalar loads (and every granularity must still match)."""
    for m, k in [(16, 4096), (3, 129), (1, 4096)]:
        buf = _special_x(1, m * k + 1, dtype).flatten()
        x = buf[1:].view(m, k)
        assert x.is_contiguous() and x.data_ptr() % 16
        for g in ActGranularity:
            want_q, want_s = dispatch.quantize_activation(x, g)
            got_q, got_s = launch.quantize_activation(x, g)
            assert _same_bits(got_s, want_s) and _same_bits(got_q, want_q), f"{g} {dtype} [{m}, {k}]"


@pytest.mark.parametrize("m", [16, 2, 1])
def test_act_quant_per_tensor_nan_in_one_cta_share_reaches_all(launch, m):
    """The one-launch per-tensor path: each CTA computes the amax over ALL of x, so a NaN in the last CTA's share
    makes every code and the scale NaN, as in the reference."""
    x = _x(m, 4096, torch.bfloat16, 3)
    x[m - 1, 4095] = float("nan")
    want_q, want_s = dispatch.quantize_activation(x, ActGranularity.PER_TENSOR)
    got_q, got_s = launch.quantize_activation(x, ActGranularity.PER_TENSOR)
    assert torch.isnan(got_s) and _same_bits(got_q, want_q)


# --- dequantization: bit-identical --------------------------------------------------------------------
@pytest.mark.parametrize("arch", [None, "compute_80"])
@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dequant_bit_identical(launch, fmt, dtype, arch):
    """Every tuned config, on shapes whose chunk count is not a multiple of the CTA (tails), K a multiple of 8 but not
    of 16, K not a multiple of 8 (the scalar path), rows crossing blocks, and more row blocks than gridDim.y holds
    (65600 rows of 128 chunks: the 128-thread config's grid spills into z)."""
    from kernels_cuda.candidates import DEQUANT_CONFIGS

    for i, (n, k) in enumerate([(256, 4096), (300, 1040), (33, 100), (129, 576), (1000, 2064), (70, 1000),
                                (65600, 1024)]):
        qw = dispatch.quantize(_weight(n, k, i), fmt, act="bf16")
        want = dispatch.dequantize(qw).to(dtype)
        for cfg in DEQUANT_CONFIGS:
            got = _dequant().dequantize(qw, dtype, cfg, arch=arch)
            assert torch.equal(got, want), f"{fmt} [{n}, {k}] {dtype} {cfg}"


@pytest.mark.parametrize("arch", [None, "compute_80"])
def test_dequant_all_codes_including_nan(launch, arch):
    q = torch.arange(256, device="cuda", dtype=torch.int32).to(torch.uint8).repeat(4, 4)
    qw = QWeight(Format.FP8_TENSOR, Act.BF16, q.view(torch.float8_e4m3fn).contiguous(), torch.tensor(1.0, device="cuda"))
    got = _dequant().dequantize(qw, torch.bfloat16, arch=arch).float()
    want = dispatch.dequantize(qw).to(torch.bfloat16).float()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_cublas_bf16_output_is_within_one_ulp_of_the_rounded_fp32_output(launch):
    """What cuda.dequant_cublas's bf16 route for tensor/row scales relies on (kernels_cuda/_dequant_route.py): under
    full_precision_reduction, cuBLAS's bf16-output GEMM rounds its fp32 sums once, so the route's output is two
    roundings from the exact value. Asserted within 1 ulp of the rounded fp32 output (the route's test allows two
    roundings); on the H200 (session 9) no output differed at all."""
    from kernels_cuda._dequant_route import full_precision_reduction

    g = torch.Generator(device="cuda").manual_seed(3)
    worst, off = 0, 0
    for m, n, k in [(256, 512, 1024), (300, 1000, 2560), (512, 4096, 4096), (4096, 4096, 4096)]:
        x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda", generator=g) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
        with full_precision_reduction():
            y16 = torch.mm(x, w.to(torch.bfloat16).t())
            y32 = torch.mm(x, w.to(torch.bfloat16).t(), out_dtype=torch.float32).to(torch.bfloat16)
        ulp = torch.ldexp(torch.ones_like(y32, dtype=torch.float32), torch.frexp(y32.float()).exponent - 8)
        ulps = (y16.float() - y32.float()).abs() / ulp  # bf16: 8 significant bits, |v| in [2^(e-1), 2^e)
        worst, off = max(worst, float(ulps.max())), off + int((ulps > 0).sum())
    print(f"cuBLAS bf16 output: {off} outputs differ from the rounded fp32 output, by at most {worst} ulp")
    assert worst <= 1


@pytest.mark.parametrize("m,n", [(1, 8), (3, 4096), (300, 1000), (64, 1027)])
def test_scale_columns_is_f32_math_rounded_once(launch, m, n):
    """csrc/scale_cols.cu (the bf16 output epilogue of cuda.dequant_cublas): bit-identical to
    (y.float() * scale).to(bf16), per row of N and per tensor, on the 16-byte path (N % 8 == 0) and the scalar one."""
    from dispatch.errors import UnsupportedError
    from kernels_cuda._dequant_route import scale_columns_

    g = torch.Generator(device="cuda").manual_seed(m * 7919 + n)
    y = (torch.randn(m, n, device="cuda", generator=g) * 300).to(torch.bfloat16)
    for scale in (torch.rand(n, device="cuda", generator=g) * 3e-3 + 1e-4,
                  torch.tensor(0.0123, device="cuda")):
        want = (y.float() * scale).to(torch.bfloat16)
        got = y.clone()
        scale_columns_(got, scale)
        assert torch.equal(got, want)
    with pytest.raises(UnsupportedError, match="16-byte aligned bf16"):
        scale_columns_(y.float(), scale)


# --- candidates, graphs, determinism ----------------------------------------------------------------
def test_candidates_run_and_dequant_cublas(launch):
    from kernels_cuda.candidates import CudaDequantCublas, CudaW8A8Gemv, CudaW8A16Gemv
    from dispatch.problem import Problem
    from dispatch.target import detect

    target = detect()
    for cand, fmt, act in [(CudaW8A16Gemv(), Format.FP8_ROW, "bf16"), (CudaW8A8Gemv(), Format.FP8_BLOCK, "fp8"),
                           (CudaDequantCublas(), Format.MXFP8, "bf16")]:
        assert cand.available()
        qw = dispatch.quantize(_weight(512, 1024, 5), fmt, act=act)
        m = 4 if cand.id != "cuda.dequant_cublas" else 256
        x = _x(m, 1024, torch.bfloat16, 9)
        p = Problem.of(x.shape, qw, x_dtype=x.dtype)
        assert cand.supports(p, target), cand.supports(p, target).reason
        y = cand.run(x, qw, cand.prepare(qw), None, torch.bfloat16, cand.default_config(p, target))
        _check_close(y, x, qw, tol=1e-2 if cand.id == "cuda.dequant_cublas" else 2e-3)


@pytest.mark.parametrize("fmt", list(Format))
def test_dequant_cublas_matches_w8a16_semantics(launch, fmt):
    """cuda.dequant_cublas at prefill M: tensor/row: exact codes, the scale applied to the GEMM's output (bf16 in
    and out: to its bf16 output in fp32 math, two roundings relative to the output, which out_eps = 2^-8 covers;
    otherwise to an fp32 output); mxfp8: exact weights; fp8_block: each weight rounded once to bf16. Accumulation
    in fp32 throughout, across split-K slices too (run 3 recorded cuBLAS's default bf16 split-K reduction wrong).
    The codes view of a weight is built once and shares its storage."""
    from kernels_cuda.candidates import CudaDequantCublas
    from kernels_cuda.configs import DequantConfig
    from dispatch.problem import Problem
    from dispatch.target import detect

    cand, target = CudaDequantCublas(), detect()
    rounded = fmt is Format.FP8_BLOCK  # one bf16 rounding of each weight (<= 2^-9 relative); others exact
    scaled_out = fmt in (Format.FP8_TENSOR, Format.FP8_ROW)
    # (16, 28672, 4096): below the candidate's M range, run directly: the M where run 3 saw the bf16 split-K
    # reduction go wrong.
    for i, (m, n, k) in enumerate([(256, 512, 1024), (300, 1000, 2560), (512, 4096, 4096), (16, 28672, 4096)]):
        qw = dispatch.quantize(_weight(n, k, 40 + i), fmt, act="bf16")
        for x_dtype in (torch.bfloat16, torch.float16):
            if fmt is Format.MXFP8 and x_dtype == torch.float16:
                continue
            x = _x(m, k, x_dtype, 50 + i)
            for bias, out_dtype in itertools.product((None, torch.randn(n, device="cuda").to(x_dtype)),
                                                     (torch.float32, x_dtype)):
                p = Problem.of(x.shape, qw, x_dtype=x.dtype, out_dtype=out_dtype, has_bias=bias is not None)
                assert m < 64 or cand.supports(p, target), cand.supports(p, target).reason
                y = cand.run(x, qw, cand.prepare(qw), bias, out_dtype, DequantConfig())
                assert y.dtype == out_dtype and y.shape == (m, n)
                # tensor/row, bf16 in and out, no bias: cuBLAS's bf16 output, then the scale's rounding
                twice = scaled_out and bias is None and x_dtype == out_dtype == torch.bfloat16
                _check_close(y, x, qw, bias, tol=4e-3 if rounded else 5e-4, out_roundings=2 if twice else 1)
        if fmt in (Format.FP8_TENSOR, Format.FP8_ROW):
            view = qw._cache["cuda.dequant_cublas.codes"]
            assert view.qdata.data_ptr() == qw.qdata.data_ptr() and float(view.scale) == 1.0


def _capture(fn):
    """(graph, outputs) of fn() captured on a side stream, as torch.cuda.graph wants it; not yet replayed."""
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            outs = fn()
    torch.cuda.current_stream().wait_stream(s)
    return graph, outs


def _assert_replay_equals_eager(chain) -> None:
    """A chain of launches captured in a CUDA graph (programmatic launches there) gives, replayed, exactly what its eager
    calls give."""
    eager = chain()
    graph, outs = _capture(chain)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outs, eager):
        assert torch.equal(a, b)


def test_cuda_graph_capture_and_determinism(launch):
    qa = dispatch.quantize(_weight(4096, 4096, 1), Format.FP8_ROW, act="bf16")
    qb = dispatch.quantize(_weight(4096, 4096, 2), Format.FP8_BLOCK, act="fp8")
    qc = dispatch.quantize(_weight(4096, 4096, 3), Format.FP8_TENSOR, act="fp8")
    x = _x(4, 4096, torch.bfloat16, 1)
    eager = [launch.w8a16_gemv(x, qa), launch.w8a8_gemv(x, qb), launch.w8a8_gemv(x, qc)]  # also compiles
    again = [launch.w8a16_gemv(x, qa), launch.w8a8_gemv(x, qb), launch.w8a8_gemv(x, qc)]
    for a, b in zip(eager, again):
        assert torch.equal(a, b), "not run-to-run deterministic"
    graph, outs = _capture(lambda: [launch.w8a16_gemv(x, qa), launch.w8a8_gemv(x, qb), launch.w8a8_gemv(x, qc)])
    x.copy_(_x(4, 4096, torch.bfloat16, 2))  # new input values, same buffer
    graph.replay()
    torch.cuda.synchronize()
    fresh = [launch.w8a16_gemv(x, qa), launch.w8a8_gemv(x, qb), launch.w8a8_gemv(x, qc)]
    for a, b in zip(outs, fresh):
        assert torch.equal(a, b), "graph replay differs from an eager launch on the same input"


def test_misaligned_x_view_is_handled(launch):
    qw = dispatch.quantize(_weight(128, 256, 4), Format.FP8_ROW, act="bf16")
    buf = _x(1, 256 + 8, torch.bfloat16, 3)
    x = buf.view(-1)[1:257].view(1, 256)  # a view 2 bytes past an aligned base
    assert x.data_ptr() % 16 != 0 and x.is_contiguous()
    _check_close(launch.w8a16_gemv(x, qw, None, torch.float32), x, qw)


@pytest.mark.parametrize("n,k", [(28672, 4096), (4096, 14336)])
def test_decode_shapes_smoke(launch, n, k):
    """The benchmark shapes at M = 1, 4, 16: correct (performance is measured by tools/bench)."""
    for fmt in Format:
        act = "bf16" if fmt in (Format.MXFP8, Format.FP8_ROW) else "fp8"
        qw = dispatch.quantize(_weight(n, k, 0), fmt, act=act)
        run = _gemv(launch, qw)
        for m in (1, 4, 16):
            x = _x(m, k, torch.bfloat16, m)
            _check_close(run(x, qw, None, torch.float32), x, qw)


def _set_pdl(launch, monkeypatch, on: bool | None) -> None:
    """FP8DISPATCH_PDL on, off or (None) unset, and the launch plans that cached its value dropped."""
    if on is None:
        monkeypatch.delenv(launch.PDL_ENV, raising=False)
    else:
        monkeypatch.setenv(launch.PDL_ENV, "1" if on else "0")
    for f in (launch.pdl_allowed, launch._gemv_spec, launch._act_quant_launches):
        f.cache_clear()


def test_programmatic_launch_chain_is_exact(launch, monkeypatch):
    """Each kernel consumes the previous kernel's output (torch op -> W8A16 GEMV -> W8A16 GEMV -> act quant ->
    W8A8 GEMV -> ...), the pattern where a missing griddepcontrol.wait reads stale data. With PDL (sm_90: graph
    captures launch programmatically, eager calls plainly) the outputs must be bit-identical to plain launches,
    eager and in a graph replay (the GEMVs are deterministic)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90+")

    def unit_rows(n, k, seed):  # rows of norm 1: activations keep their magnitude through the chain
        w = _weight(n, k, seed)
        return w / w.norm(dim=1, keepdim=True)

    plan = [((4096, 4096), Format.FP8_ROW, "bf16"), ((2048, 4096), Format.MXFP8, "bf16"),
            ((4096, 2048), Format.FP8_BLOCK, "fp8"), ((4096, 4096), Format.FP8_TENSOR, "fp8"),
            ((4096, 4096), Format.FP8_ROW, "fp8"), ((4096, 4096), Format.FP8_BLOCK, "bf16")]
    layers = [dispatch.quantize(unit_rows(n, k, 10 + i), fmt, act=act) for i, ((n, k), fmt, act) in enumerate(plan)]

    def chain(x):
        outs = []
        for _ in range(3):
            x = x * 1.0001  # a torch kernel writes the next input right before the first GEMV reads it
            for qw in layers:
                x = _gemv(launch, qw)(x, qw)
                outs.append(x)
        return outs

    x0 = _x(4, 4096, torch.bfloat16, 5)
    try:
        _set_pdl(launch, monkeypatch, False)
        assert not launch.pdl_allowed(launch.device_arch(0))
        plain = chain(x0)
        assert all(torch.isfinite(y).all() for y in plain)
        _set_pdl(launch, monkeypatch, True)
        assert launch.pdl_allowed(launch.device_arch(0))
        for i, (a, b) in enumerate(zip(plain, chain(x0))):  # eager: plain launches, so run-to-run determinism
            assert torch.equal(a, b), f"output {i} differs with programmatic dependent launches"
        graph, outs = _capture(lambda: chain(x0))
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            for i, (a, b) in enumerate(zip(plain, outs)):
                assert torch.equal(a, b), f"graph output {i} differs with programmatic dependent launches"
    finally:
        _set_pdl(launch, monkeypatch, None)


# --- the one-launch W8A8 GEMV (kernels_cuda/_w8a8_fused.py) ----------------------------------------------------
def _fused():
    from kernels_cuda import _w8a8_fused

    return _w8a8_fused


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_one_launch_w8a8_equals_the_two_launch_route_bit_for_bit(launch, fmt, path):
    """Each CTA quantizes x itself, with the quantizer's device functions: y must be the two-launch route's to the bit
    (NaN where it has NaN), for every x dtype, M = 1..8, partial row tiles, K % 128 != 0, K < 128, with a bias. The
    reference check makes the comparison independent of the route it copies."""
    fq = _fused()
    kw = PATHS[path]
    for (n, k), seed in zip(SHAPES, itertools.count(60)):
        qw = dispatch.quantize(_weight(n, k, seed), fmt, act="fp8")
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        for m, dtype in [(1, torch.bfloat16), (2, torch.float16), (3, torch.float32), (5, torch.bfloat16),
                         (8, torch.bfloat16), (8, torch.float32)]:
            x = _x(m, k, dtype, seed + m)
            for b in (None, bias):
                y1 = fq.w8a8_gemv_fq(x, qw, b, torch.float32, **kw)
                y2 = launch.w8a8_gemv(x, qw, b, torch.float32, **kw)
                assert _same_bits(y1, y2), f"{fmt} {path} [{m}, {k}] x {dtype} bias={b is not None}"
            _check_close(fq.w8a8_gemv_fq(x, qw, bias, torch.bfloat16, **kw), x, qw, bias)


@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_one_launch_w8a8_special_values_and_every_config(launch, fmt):
    """Zero tokens (floor scale), saturating values, e4m3 rounding ties, NaN and Inf in x: the codes the CTAs make
    must be the quantizer's, under every config the candidate offers at M = 1, 6 and 8."""
    from dispatch.target import detect
    from dispatch.problem import Problem
    from kernels_cuda.candidates import CudaW8A8GemvFused

    fq, cand = _fused(), CudaW8A8GemvFused()
    for m, n, k in [(1, 4096, 4096), (6, 1000, 2560), (8, 300, 1040)]:
        qw = dispatch.quantize(_weight(n, k, m), fmt, act="fp8")
        x = _special_x(m, k, torch.bfloat16)
        cfgs = cand.configs(Problem(fmt, Act.FP8, m, n, k), detect("cuda"))
        assert cfgs
        for cfg in cfgs:
            y1 = fq.w8a8_gemv_fq(x, qw, None, torch.float32, cfg)
            y2 = launch.w8a8_gemv(x, qw, None, torch.float32, cfg)
            assert _same_bits(y1, y2), f"{fmt} [{m}, {n}, {k}] {cfg}"
        if m >= 5:  # NaN reached the output where the quantizer's scale made it (per tensor: everywhere)
            assert torch.isnan(y1[3]).all()


@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_persistent_one_launch_w8a8_walks_many_row_tiles_bit_for_bit(launch, fmt):
    """A persistent grid holds only the resident CTAs: on a weight of many more row tiles, each CTA runs several of
    them after one quantization of x (the next tile's weight loads issued before the current tile's reduction). y must
    equal the two-launch route's and the one-CTA-per-tile kernel's to the bit, for every config the candidate offers,
    with a partial last tile and a bias."""
    from dispatch.problem import Problem
    from dispatch.target import detect
    from kernels_cuda.candidates import CudaW8A8GemvFused
    from kernels_cuda.configs import GemvConfig

    fq, cand = _fused(), CudaW8A8GemvFused()
    n, k = 40008, 1040  # 2501 16-row tiles, the last one half full: more than any config keeps resident on an H200
    qw = dispatch.quantize(_weight(n, k, 11), fmt, act="fp8")
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    for m in (1, 5, 8):
        x = _x(m, k, torch.bfloat16, 20 + m)
        cfgs = cand.configs(Problem(fmt, Act.FP8, m, n, k), detect("cuda"))
        assert any(c.persistent for c in cfgs) and any(not c.persistent for c in cfgs)
        for cfg in cfgs:
            _, grid, *_ = fq._spec(qw.act_granularity, m, n, k, cfg, torch.cuda.current_device(), None, False, False)
            tiles = -(-n // cfg.rows_per_cta)
            assert (grid[0] < tiles) == cfg.persistent, (cfg, grid, tiles)
            y1 = fq.w8a8_gemv_fq(x, qw, bias, torch.float32, cfg)
            # the same K split (warps) sums in the same order: the two-launch GEMV at the same geometry
            y2 = launch.w8a8_gemv(x, qw, bias, torch.float32, GemvConfig(cfg.warps, cfg.mtiles, cfg.unroll))
            assert _same_bits(y1, y2), f"{fmt} M = {m} {cfg}"
        _check_close(fq.w8a8_gemv_fq(x, qw, bias, torch.bfloat16), x, qw, bias)


def test_one_launch_w8a8_in_a_graph_with_programmatic_launches(launch):
    """Captured (programmatic launches: each kernel reads x only after its wait) between two kernels that write x, it
    must read the x of its position in the stream, as eager calls do."""
    fq = _fused()
    qw = dispatch.quantize(_weight(4096, 4096, 5), Format.FP8_BLOCK, act="fp8")
    qr = dispatch.quantize(_weight(4096, 4096, 6), Format.FP8_ROW, act="fp8")
    x = _x(1, 4096, torch.bfloat16, 9)

    def chain():
        y1 = fq.w8a8_gemv_fq(x, qw)
        y2 = fq.w8a8_gemv_fq(y1, qr)  # reads what the launch just before it wrote
        return [y1, y2, launch.w8a8_gemv(y2, qw)]

    _assert_replay_equals_eager(chain)


def test_one_launch_w8a8_refuses_what_it_cannot_serve(launch):
    from dispatch.errors import UnsupportedError

    fq = _fused()
    qw = dispatch.quantize(_weight(256, 14336, 7), Format.FP8_BLOCK, act="fp8")
    with pytest.raises(UnsupportedError, match="1 <= M <= 8"):
        fq.w8a8_gemv_fq(_x(9, 14336, torch.bfloat16, 1), qw)
    with pytest.raises(UnsupportedError, match="shared memory"):
        fq.w8a8_gemv_fq(_x(4, 14336, torch.bfloat16, 1), qw)


# --- the W8A8 GEMV that quantizes x inside its K loop (kernels_cuda/_w8a8_inline.py) ----------------------------------
def _inline():
    from kernels_cuda import _w8a8_inline

    return _w8a8_inline


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_inline_quant_w8a8_equals_the_two_launch_route_bit_for_bit(launch, fmt, path):
    """Each warp quantizes its K steps of x with the quantizer's device functions in the quantizer's arrangement: y must
    be the two-launch route's to the bit for bf16 and fp16 x, M = 1, 2 (every FP8D_CFG_QT), partial row tiles,
    K % 128 != 0, K < 128, with and without a bias; and close to the reference."""
    iq = _inline()
    kw = PATHS[path]
    for (n, k), seed in zip(SHAPES, itertools.count(70)):
        qw = dispatch.quantize(_weight(n, k, seed), fmt, act="fp8")
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        for m, dtype in [(1, torch.bfloat16), (1, torch.float16), (2, torch.float16), (2, torch.bfloat16)]:
            x = _x(m, k, dtype, seed + m)
            for b in (None, bias):
                y1 = iq.w8a8_gemv_inline(x, qw, b, torch.float32, **kw)
                y2 = launch.w8a8_gemv(x, qw, b, torch.float32, **kw)
                assert _same_bits(y1, y2), f"{fmt} {path} [{m}, {k}] x {dtype} bias={b is not None}"
            _check_close(iq.w8a8_gemv_inline(x, qw, bias, torch.bfloat16, **kw), x, qw, bias)


@pytest.mark.parametrize("fmt", W8A8_FORMATS)
def test_inline_quant_w8a8_special_values_and_every_config(launch, fmt):
    """Zero tokens (floor scale), saturating values, e4m3 rounding ties, NaN and Inf in x, under every config the
    candidate offers (register and shared-memory rings, 1 and 2 row tiles) at M = 1 and 2: the codes the warps make
    must be the quantizer's, so y is the two-launch route's at the same config to the bit. Token 1 of M = 2 is
    all zero (floor scale) or holds the NaN, Inf, saturating values and rounding ties."""
    from dispatch.problem import Problem
    from dispatch.target import detect
    from kernels_cuda.candidates import CudaW8A8GemvInline

    iq, cand = _inline(), CudaW8A8GemvInline()
    for rows, n, k in [((0,), 4096, 4096), ((0, 1), 6144, 4096), ((2, 3), 1000, 2560), ((5, 4), 300, 1040)]:
        m = len(rows)
        qw = dispatch.quantize(_weight(n, k, m), fmt, act="fp8")
        x = _special_x(6, k, torch.bfloat16)[list(rows)].contiguous()  # rows: random, zero, saturating, NaN, Inf, ties
        cfgs = cand.configs(Problem(fmt, Act.FP8, m, n, k), detect("cuda"))
        assert cfgs and any(c.smem_ring for c in cfgs)
        for cfg in cfgs:
            y1 = iq.w8a8_gemv_inline(x, qw, None, torch.float32, cfg)
            y2 = launch.w8a8_gemv(x, qw, None, torch.float32, cfg)
            assert _same_bits(y1, y2), f"{fmt} [{m}, {n}, {k}] {cfg}"
        if rows == (2, 3):  # NaN reached the output where the quantizer's scale made it (per tensor: everywhere)
            assert torch.isnan(y1[1]).all()


def test_inline_quant_w8a8_in_a_graph_with_programmatic_launches(launch):
    """Captured (programmatic launches: x is read only after the wait) between kernels that write x, it must read the
    x of its position in the stream, as eager calls do."""
    iq = _inline()
    qw = dispatch.quantize(_weight(4096, 4096, 5), Format.FP8_BLOCK, act="fp8")
    qr = dispatch.quantize(_weight(4096, 4096, 6), Format.FP8_TENSOR, act="fp8")
    x = _x(2, 4096, torch.bfloat16, 9)

    def chain():
        y1 = iq.w8a8_gemv_inline(x, qw)
        y2 = iq.w8a8_gemv_inline(y1, qr)  # reads what the launch just before it wrote (amax pass, then the loop)
        return [y1, y2, iq.w8a8_gemv_inline(y2, qw)]

    _assert_replay_equals_eager(chain)


def test_inline_quant_w8a8_refuses_what_it_cannot_serve(launch):
    from dispatch.errors import UnsupportedError
    from kernels_cuda.configs import GemvConfig

    iq = _inline()
    qw = dispatch.quantize(_weight(256, 4096, 7), Format.FP8_BLOCK, act="fp8")
    with pytest.raises(UnsupportedError, match="1 <= M <= 2"):
        iq.w8a8_gemv_inline(_x(3, 4096, torch.bfloat16, 1), qw)
    with pytest.raises(UnsupportedError, match="bf16 or fp16"):
        iq.w8a8_gemv_inline(_x(2, 4096, torch.float32, 1), qw)
    with pytest.raises(UnsupportedError, match="register budget"):
        iq.w8a8_gemv_inline(_x(2, 4096, torch.bfloat16, 1), qw, config=GemvConfig(8, 2, 4))


# ---- decode tiles (kernels_cuda/_tiles.py, dispatch.add_decode_tiles): the same GEMVs on the tiled layout ----------

def _tiles():
    from kernels_cuda import _tiles

    return _tiles


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fmt,act", FAMILIES)
def test_gemv_on_decode_tiles_equals_the_row_major_codes_bit_for_bit(launch, fmt, act, path):
    """The tiled layout changes where each 16-byte chunk is read from, nothing else: y must be the row-major launch's
    to the bit, on partial 16/32-row tiles (N % 32 != 0), K % 128 != 0 and K < 128, every token-tile size, a bias,
    under every config at M = 5 (native path), and on each MMA path."""
    tl = _tiles()
    kw = PATHS[path]
    row_launch = launch.w8a8_gemv if act == "fp8" else launch.w8a16_gemv
    for (n, k), seed in zip(SHAPES, itertools.count(80)):
        qw = dispatch.add_decode_tiles(dispatch.quantize(_weight(n, k, seed), fmt, act=act))
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        for m in (1, 5, 16, 27):
            x = _x(m, k, torch.bfloat16, seed + m)
            cfgs = _every_config(m) if m == 5 and path == "native" else [None]
            for cfg in cfgs:
                for b in (None, bias):
                    y1 = row_launch(x, qw, b, torch.float32, cfg, tiles=tl.tiles_of(qw), **kw)
                    y2 = row_launch(x, qw, b, torch.float32, cfg, **kw)
                    assert _same_bits(y1, y2), f"{fmt}/{act} {path} [{m}, {n}, {k}] {cfg} bias={b is not None}"


def test_dispatch_uses_decode_tiles_when_present_and_in_a_graph(launch):
    """dispatch.add_decode_tiles opts a weight in: the GEMVs' variants on tiles give the row-major kernel's bits, in a
    CUDA graph too; the row-major candidates never read the tiles, their variants always do, and dispatch's own pick
    reads them exactly when its decision names a variant (zeroed tiles change the output exactly there);
    QWeight.to() drops the tiles; a CPU weight or foreign tiles get typed errors."""
    from dispatch import registry
    from dispatch.errors import FormatError, UnsupportedError
    from dispatch.linear import decision_for
    from kernels_cuda.candidates import CudaW8A16Gemv, CudaW8A16GemvTiles, CudaW8A8Gemv, CudaW8A8GemvTiles
    from kernels_cuda.configs import GemvConfig

    tl = _tiles()
    for cand, variant, fmt, act in ((CudaW8A16Gemv(), CudaW8A16GemvTiles(), Format.FP8_ROW, "bf16"),
                                    (CudaW8A8Gemv(), CudaW8A8GemvTiles(), Format.FP8_BLOCK, "fp8")):
        plain = dispatch.quantize(_weight(6144, 4096, 3), fmt, act=act)
        tiled = dispatch.quantize(_weight(6144, 4096, 3), fmt, act=act)
        x = _x(4, 4096, torch.bfloat16, 3)
        y_before = dispatch.linear(x, tiled)  # a plan made before the tiles: add_decode_tiles must drop it
        assert dispatch.add_decode_tiles(tiled) is tiled and tl.decode_tiles(tiled) is not None
        first = tl.decode_tiles(tiled)
        assert dispatch.add_decode_tiles(tiled) is tiled and tl.decode_tiles(tiled) is first  # made once
        picked = decision_for(x, tiled).candidate_id
        with dispatch.force(variant.id):  # (a weight without tiles has no candidate under this policy)
            # the row-major GEMV at the variant's config (the tables pick each candidate's own config, and a different
            # K split sums in a different order: session 31's re-tune gave the two different ones here)
            y_plain = cand.run(x, plain, None, None, torch.bfloat16, decision_for(x, tiled).config)
            assert _same_bits(dispatch.linear(x, tiled), y_plain)
            graph, outs = _capture(lambda: [dispatch.linear(x, tiled)])
            graph.replay()
            torch.cuda.synchronize()
            assert _same_bits(outs[0], y_plain)
        cfgs = (GemvConfig(8, 1, 1), GemvConfig(8, 2, 1), GemvConfig(4, 1, 4))
        for cfg in cfgs:
            want = cand.run(x, plain, None, None, torch.bfloat16, cfg)
            assert _same_bits(variant.run(x, tiled, None, None, torch.bfloat16, cfg), want)
            assert _same_bits(cand.run(x, tiled, None, None, torch.bfloat16, cfg), want)
        # ... and the tiles are really read, by the variants and by dispatch where it picks one: zero them
        first.zero_()
        for cfg in cfgs:
            want = cand.run(x, plain, None, None, torch.bfloat16, cfg)
            assert not _same_bits(variant.run(x, tiled, None, None, torch.bfloat16, cfg), want), cfg
            assert _same_bits(cand.run(x, tiled, None, None, torch.bfloat16, cfg), want), cfg
        reads = registry.get(picked).reads_decode_tiles
        assert _same_bits(dispatch.linear(x, tiled), y_before) == (not reads), picked
    assert tl.decode_tiles(tiled.to("cpu")) is None
    qw = dispatch.quantize(_weight(300, 1040, 4), Format.FP8_ROW, act="bf16")
    with pytest.raises(FormatError, match="no decode tiles"):
        tl.tiles_of(qw)
    with pytest.raises(FormatError, match="tiled layout"):
        launch.w8a16_gemv(_x(1, 1040, torch.bfloat16, 1), qw, tiles=torch.zeros(10, dtype=torch.uint8, device="cuda"))
    with pytest.raises(UnsupportedError, match="on cpu"):
        dispatch.add_decode_tiles(qw.to("cpu"))


def test_fp8linear_keeps_its_decode_tiles_through_moves_and_loads(launch):
    """A layer given decode tiles makes them again from its current codes on every rebuild on the GPU (load_state_dict,
    .to("cuda") after a trip to the CPU): never stale, never silently lost; its output stays the reference's."""
    tl = _tiles()
    model = torch.nn.Sequential(torch.nn.Linear(1040, 300, bias=False)).cuda()
    dispatch.quantize_model(model, "fp8_row")
    dispatch.add_decode_tiles(model)
    layer = model[0]
    assert model.fp8dispatch_decode_tiles == ["0"] and torch.equal(tl.decode_tiles(layer.qweight),
                                                                   tl.tile_codes(layer.qweight.qdata))
    other = torch.nn.Sequential(torch.nn.Linear(1040, 300, bias=False)).cuda()
    dispatch.quantize_model(other, "fp8_row")
    model.load_state_dict(other.state_dict())
    assert torch.equal(tl.decode_tiles(layer.qweight), tl.tile_codes(other[0].qweight.qdata))
    model.to("cpu")
    assert tl.decode_tiles(layer.qweight) is None
    model.to("cuda")
    assert torch.equal(tl.decode_tiles(layer.qweight), tl.tile_codes(layer.qweight.qdata))
    x = _x(3, 1040, torch.bfloat16, 7)
    ref = reference.linear(x, layer.qweight, None, torch.float32)
    torch.testing.assert_close(model(x).float(), ref, rtol=2e-2, atol=2e-2)
