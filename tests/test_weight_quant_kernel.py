"""The fused Triton weight quantizer (kernels_triton.weight_quant): bit-identical to the torch-ops quantizer.

CPU: the launch rule; an exhaustive proof that the kernels' reciprocal division equals IEEE division for bf16/fp16
weights; the kernels' logic under the Triton interpreter (software e4m3 encoder, and the reciprocal division with
an exactly emulated FMA) -- NOT a GPU validation. GPU (marked gpu): every format, dtype and code path against the
torch path, on the real 28672x4096 shape, on every finite bf16/fp16 value, on crafted ties and saturation.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import dispatch
from dispatch.formats import Format, MXScaleMode, resolve_act
from dispatch.target import Target

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)


# --- reference and crafted inputs (shared by the interpreter child and the GPU tests) ---------------------------

def torch_path(w: torch.Tensor, fmt: Format, mode: MXScaleMode):
    from dispatch.weight_quant import _quantize_torch
    return _quantize_torch(w, fmt, resolve_act(fmt, None), mode)


def modes(fmt: Format):
    return (MXScaleMode.RCEIL, MXScaleMode.FLOOR) if fmt is Format.MXFP8 else (MXScaleMode.RCEIL,)


def crafted_weight(n: int, k: int, dtype: torch.dtype, seed: int, device="cpu") -> torch.Tensor:
    """Varied magnitudes per row and per 32-column group, zeros, -0.0, subnormals, exact e4m3 ties and values
    that saturate, groups whose mxfp8 rceil ratio amax/448 is an fp32 subnormal. Generated on `device`."""
    g = torch.Generator(device=device).manual_seed(seed)
    w = torch.randn(n, k, generator=g, device=device)
    w *= torch.exp2(torch.randint(-10, 10, (n, 1), generator=g, device=device).float())
    col = torch.exp2(torch.randint(-3, 4, (1, (k + 31) // 32), generator=g, device=device).float())
    w *= col.repeat_interleave(32, 1)[:, :k]
    w[0, : min(k, 40)] = 0.0
    if n > 1:
        w[1, : min(k, 7)] = -0.0
    if n > 2:  # a row with max 448: scale exactly 1, so these quotients are exact ties of e4m3 rounding
        ties = torch.tensor([448.0, 1.0625, -1.1875, 2.0 ** -10, -3 * 2.0 ** -10, 5 * 2.0 ** -10, 432.0, -240.0,
                             13.5, -0.0068359375, 2.0 ** -11])
        w[2] = 0.5
        w[2, : min(k, ties.numel())] = ties[: min(k, ties.numel())].to(device)
    if n > 3:  # fp32/bf16 subnormals next to normal values
        w[3, : min(k, 16)] = torch.tensor([1e-39, -3e-40, 1e-38, 2e-38] * 4)[: min(k, 16)].to(device)
    if n > 4:  # amax/448 is an fp32 subnormal in (2^-127, 2^-126): rceil exponent -126 (not -127)
        w[4] = 448 * 1.5 * 2.0 ** -127 * torch.rand(k, generator=g, device=device)
        w[4, 0] = 448 * 1.5 * 2.0 ** -127
    if dtype == torch.float16:
        w = w.clamp(-6e4, 6e4)
    return w.to(dtype)


def all_finite_values(dtype: torch.dtype, rows: int, seed: int, device="cpu") -> torch.Tensor:
    """Every finite value of a 16-bit float type once, shuffled into `rows` rows, with a planted per-row maximum
    so the scales vary (each bit pattern meets many different divisors across seeds)."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    v = bits.view(dtype)
    v = v[torch.isfinite(v.float())]
    g = torch.Generator().manual_seed(seed)
    v = v[torch.randperm(v.numel(), generator=g)]
    k = -(-v.numel() // rows)
    w = torch.zeros(rows * k, dtype=dtype)
    w[: v.numel()] = v
    w = w.reshape(rows, k)
    fin = torch.finfo(dtype).max
    planted = (torch.rand(rows, generator=g) * fin).to(dtype)
    w[:, 0] = planted
    return w.to(device)


# --- the launch rule (pure, no GPU) --------------------------------------------------------------------------

def test_select_config_rule():
    from kernels_triton.weight_quant import ROW_MAX_BLOCK_K, WeightQuantConfig, select_config

    h200, l40s, a100 = (Target.simulated_for(a) for a in ("sm_90", "sm_89", "sm_80"))
    bf16 = torch.bfloat16
    c = select_config(Format.FP8_BLOCK, 28672, 4096, bf16, h200, True, True)
    assert (c.block_r, c.block_k, c.hw_cvt, c.recip_div) == (128, 128, True, True)
    # the hardware cast only where it is one correctly rounded instruction; the reciprocal division only with a
    # fused FMA and <= 11-bit significands
    assert not select_config(Format.FP8_BLOCK, 256, 256, bf16, l40s, True, True).hw_cvt
    assert not select_config(Format.FP8_BLOCK, 256, 256, bf16, a100, False, True).hw_cvt
    assert select_config(Format.FP8_ROW, 256, 256, torch.float16, h200, True, True).recip_div
    assert not select_config(Format.FP8_ROW, 256, 256, torch.float32, h200, True, True).recip_div
    assert not select_config(Format.FP8_ROW, 256, 256, bf16, h200, True, False).recip_div
    assert not select_config(Format.MXFP8, 256, 256, bf16, h200, True, True).recip_div  # power-of-two scales
    # fp8_row keeps whole rows in registers up to ROW_MAX_BLOCK_K, loops beyond
    r = select_config(Format.FP8_ROW, 28672, 4096, bf16, h200, True, True)
    assert (r.block_k, r.row_loop, r.block_r * r.block_k) == (4096, False, 8192)
    assert select_config(Format.FP8_ROW, 10, 576, bf16, h200, True, True).block_k == 1024
    assert select_config(Format.FP8_ROW, 10, ROW_MAX_BLOCK_K, bf16, h200, True, True).num_warps == 16
    assert select_config(Format.FP8_ROW, 10, ROW_MAX_BLOCK_K + 1, bf16, h200, True, True).row_loop
    # mxfp8 tiles: whole 32-groups, at most 16 groups wide
    m = select_config(Format.MXFP8, 28672, 4096, bf16, h200, True, True)
    assert (m.block_k, m.block_r) == (512, 16)
    assert select_config(Format.MXFP8, 7, 33, bf16, h200, True, True).block_k == 64
    # per-tensor column tiles: least padding of K (576 -> 128), widest on ties
    assert select_config(Format.FP8_TENSOR, 100, 576, bf16, h200, True, True).block_k == 128
    assert select_config(Format.FP8_TENSOR, 100, 4096, bf16, h200, True, True).block_k == 512
    with pytest.raises(ValueError, match="power of two"):
        WeightQuantConfig(3, 128, 8)


# --- exhaustive proof of the reciprocal division ------------------------------------------------------------

_MARKSTEIN_C = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
static float f(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }
static uint32_t u(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
/* For every significand a in [1, 2) with P bits and every fp32 significand s in [1, 2): the kernels' quotient
   (y = RN(1/s), q0 = RN(a*y), r = RN(s*q0 - a), q = RN(q0 - r*y)) against the IEEE quotient RN(a/s). Also counts
   how often the uncorrected RN(a*y) differs: a control that shows this check can fail. */
int main(int argc, char **argv) {
  int P = atoi(argv[1]);
  long long bad = 0, naive_bad = 0, n = 0;
  for (uint32_t ma = 0; ma < (1u << (P - 1)); ma++) {
    volatile float a = f(0x3f800000u | (ma << (24 - P)));
    for (uint32_t ms = 0; ms < (1u << 23); ms++) {
      float s = f(0x3f800000u | ms);
      float y = 1.0f / s;
      float q0 = a * y;
      float r = fmaf(s, q0, -a);
      float q = fmaf(-r, y, q0);
      float ref = a / s;
      n++;
      bad += u(q) != u(ref);
      naive_bad += u(q0) != u(ref);
    }
  }
  printf("P=%d pairs=%lld mismatches=%lld naive_mismatches=%lld\n", P, n, bad, naive_bad);
  return 0;
}
"""


@pytest.mark.parametrize("bits,name", [(8, "bf16"), (11, "fp16")])
def test_markstein_division_exhaustive(tmp_path, bits, name):
    """Proof by exhaustion (bf16: 2^30 pairs, ~2 s; fp16: 2^33 pairs, ~20 s) that the kernels' reciprocal division is
    the IEEE quotient. Every operation is correctly rounded and commutes with scaling by powers of two, so
    significands in [1, 2) cover all exponents wherever the codes can be nonzero (see `_div_by_scale`).
    Compiled with FP contraction off; fmaf is a fused (single-rounding) FMA by the C standard."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler for the exhaustive check")
    src = tmp_path / "markstein.c"
    src.write_text(_MARKSTEIN_C)
    exe = tmp_path / "markstein"
    flags = ["-O2", "-ffp-contract=off", "-fno-fast-math"]
    if platform.machine() in ("x86_64", "AMD64") and "fma" in open("/proc/cpuinfo").read():
        flags.append("-mfma")  # hardware FMA (else libm's fmaf, equally exact, slower)
    subprocess.run([cc, *flags, "-o", str(exe), str(src), "-lm"], check=True, capture_output=True)
    out = subprocess.run([str(exe), str(bits)], check=True, capture_output=True, text=True, timeout=600).stdout
    fields = dict(kv.split("=") for kv in out.split())
    assert int(fields["pairs"]) == 2 ** (bits - 1 + 23)
    assert int(fields["mismatches"]) == 0, out
    assert int(fields["naive_mismatches"]) > 0, out  # the check discriminates


# --- Triton interpreter (CPU): the kernels' logic, not a GPU validation ----------------------------------------

def _exact_fma32(x, y, z):
    """Single-rounding fp32 fma from float64 (the interpreter's own fma rounds twice): x*y is exact in float64; the
    float64 sum is made round-to-odd with TwoSum's error term, then one rounding to fp32 is correct (53 >= 24+2)."""
    x, y, z = (np.asarray(a, dtype=np.float64) for a in (x, y, z))
    p = x * y
    s = p + z
    bp = s - p
    err = (p - (s - bp)) + (z - bp)
    even = (s.view(np.int64) & 1) == 0
    toward = np.where(err > 0, np.inf, -np.inf)
    s = np.where((err != 0) & even & np.isfinite(s), np.nextafter(s, toward), s)
    return s.astype(np.float32)


@contextlib.contextmanager
def fast_nan_max_reduce():
    """Under the Triton interpreter, reduce with the kernels' NaN-propagating max as numpy's max (NaN-propagating
    too) instead of calling the combine function one element at a time in Python. Speed only; restored on exit.
    Shared with tests/test_triton_act_quant.py."""
    from triton.runtime import interpreter

    from kernels_triton import weight_quant

    generic = interpreter.ReduceOps.apply_impl

    def apply_impl(self, input):
        if self.combine_fn is weight_quant._max_nan:
            return self.min_max(input[0], val_reduce_op=np.max, idx_reduce_op=None)
        return generic(self, input)

    interpreter.ReduceOps.apply_impl = apply_impl
    try:
        yield
    finally:
        interpreter.ReduceOps.apply_impl = generic


def _interp_main() -> int:
    """Runs in a child process with TRITON_INTERPRET=1: the kernels on CPU tensors vs the torch path."""
    with fast_nan_max_reduce():
        return _interp_checks()


def _interp_checks() -> int:
    from fractions import Fraction

    from triton.runtime import interpreter

    from dispatch.target import detect
    from kernels_triton.weight_quant import quantize_weight, select_config

    failures = []
    # the exact-fma emulation itself, against rational arithmetic (random and cancellation-prone inputs)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(3000).astype(np.float32)
    ys = (np.float32(1) / xs).astype(np.float32)
    zs = np.concatenate([-np.ones(1500, np.float32), rng.standard_normal(1500).astype(np.float32)])
    got = _exact_fma32(xs, ys, zs)
    for x, y, z, r in zip(xs, ys, zs, got):
        if r != _rn32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))):
            failures.append(f"exact fma emulation fma({x}, {y}, {z}) = {r}")
            break

    fma_calls = []

    def exact_fma(self, x, y, z):
        fma_calls.append(x.data.size)
        return interpreter.TensorHandle(_exact_fma32(x.data, y.data, z.data).astype(z.data.dtype), z.dtype.scalar)

    shapes = [(130, 300), (1, 33), (257, 576), (3, 1), (6, 129), (2, 4096)]
    cases = [(f"crafted seed {seed}", crafted_weight(n, k, dtype, seed))
             for seed, (n, k) in enumerate(shapes) for dtype in (torch.bfloat16, torch.float16, torch.float32)]
    cases += [(f"every finite {d}", all_finite_values(d, 256, seed=1)) for d in (torch.bfloat16, torch.float16)]
    for case, w in cases:
        n, k = w.shape
        dtype = w.dtype
        for fmt in Format:
            for mode in modes(fmt):
                ref = torch_path(w, fmt, mode)
                variants = [("div_rn", None)]
                base = select_config(fmt, n, k, dtype, detect("cpu"), False, False)
                if fmt is not Format.MXFP8 and dtype is not torch.float32:
                    variants.append(("recip", base.__class__(**{**base.to_dict(), "recip_div": True})))
                if fmt is Format.FP8_ROW and k > 64:  # the long-row loop path on a short row
                    variants.append(("row_loop", base.__class__(**{**base.to_dict(), "row_loop": True,
                                                                   "block_k": 64, "block_r": 2})))
                for name, cfg in variants:
                    saved = interpreter.InterpreterBuilder.create_fma
                    if name == "recip":
                        interpreter.InterpreterBuilder.create_fma = exact_fma
                    try:
                        q, s, bad = quantize_weight(w, fmt, mode, hw_fp8=False, config=cfg)
                    finally:
                        interpreter.InterpreterBuilder.create_fma = saved
                    tag = f"{fmt.value}/{mode.value} {dtype} {n}x{k} {name} ({case})"
                    if not torch.equal(q.view(torch.uint8), ref.qdata.view(torch.uint8)):
                        d = (q.view(torch.uint8) != ref.qdata.view(torch.uint8)).nonzero()[:3].tolist()
                        failures.append(f"codes {tag} first diffs {d}")
                    if not torch.equal(s.reshape(-1).view(torch.uint8), ref.scale.reshape(-1).view(torch.uint8)):
                        failures.append(f"scales {tag}")
                    if int(bad) != 0:
                        failures.append(f"non-finite count {tag}")
    if not fma_calls:
        failures.append("the reciprocal-division variant never reached tl.fma")
    w = torch.randn(8, 64)
    w[5, 7] = float("nan")
    w[2, 1] = float("inf")
    for fmt in Format:
        bad = int(quantize_weight(w, fmt, MXScaleMode.RCEIL, hw_fp8=False)[2])
        want = {Format.FP8_ROW: 2, Format.MXFP8: 2}.get(fmt)  # rows / groups holding a NaN or Inf
        if bad == 0 or (want is not None and bad != want):
            failures.append(f"non-finite count {fmt.value}: {bad}")
    print("\n".join(failures) or "OK")
    return 1 if failures else 0


def _rn32(exact) -> np.float32:
    """The fp32 round-to-nearest-even of a rational (float() of a Fraction rounds to float64 first, which can
    double-round: decide among the neighbors exactly)."""
    from fractions import Fraction

    c = np.float32(float(exact))
    cands = [np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array(v).view(np.int32)) & 1))


def test_interpreter_kernels_match_torch_quantizer():
    """CPU, Triton interpreter: software e4m3 encoder, div.rn and the reciprocal division (exact FMA emulated), the
    long-row loop, partial tiles, N = 1, K = 1, K not a multiple of 32/128, ties, saturation, zeros and -0.0,
    subnormals, non-finite counts. A check of the kernels' logic, NOT a GPU validation."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([REPO_ROOT, HERE]))
    r = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True, text=True,
                       timeout=900, cwd=REPO_ROOT)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout[-4000:] + r.stderr[-4000:]


# --- GPU (marked gpu; run by the lead on the H200) ------------------------------------------------------------

def _hw_fp8() -> bool:
    """fp8e4nv codes where Triton has the type (sm_89+); else only the uint8 software path exists."""
    from dispatch.target import detect
    return detect("cuda").has_triton_fp8_dtype


def _assert_same(got, ref, tag):
    q, s, bad = got
    qa, qb = q.view(torch.uint8), ref.qdata.view(torch.uint8)
    if not torch.equal(qa, qb):
        idx = (qa != qb).nonzero()[:5].tolist()
        raise AssertionError(f"codes differ {tag}: {(qa != qb).sum().item()} at {idx}")
    assert torch.equal(s.reshape(-1).view(torch.uint8), ref.scale.reshape(-1).view(torch.uint8)), f"scales {tag}"
    assert int(bad) == 0, tag


# Real 28672x4096 (Llama-3-70B-like up/gate), K = 14336 (whole rows at the register limit), K = 20000 (the fp8_row
# loop), partial 128x128 blocks and 32-groups, N = 1, K = 1.
GPU_SHAPES = {
    torch.bfloat16: [(28672, 4096), (4096, 14336), (64, 20000), (130, 576), (1, 33), (257, 129), (3, 1)],
    torch.float16: [(28672, 4096), (130, 576), (1, 33)],
    torch.float32: [(28672, 4096), (64, 20000), (130, 576)],
}
SOFTWARE_ENCODER_SHAPES = [(28672, 4096), (130, 576), (1, 33)]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", list(Format), ids=lambda f: f.value)
@pytest.mark.parametrize("dtype", list(GPU_SHAPES), ids=str)
def test_gpu_kernel_bits_equal_torch_path(fmt, dtype):
    """Every format, mode and input dtype against the torch path on the GPU (the real 28672x4096 shape among
    others; small shapes also against the CPU torch path), through the hardware fp8 cast (sm_90) and, for bf16, the
    uint8 software encoder; reciprocal (bf16/fp16) and IEEE (fp32) division; whole rows and the long-row loop."""
    from kernels_triton.weight_quant import quantize_weight

    for i, (n, k) in enumerate(GPU_SHAPES[dtype]):
        w = crafted_weight(n, k, dtype, seed=100 + i, device="cuda")
        for mode in modes(fmt):
            ref = torch_path(w, fmt, mode)
            if n * k <= 1 << 20:
                cpu = torch_path(w.cpu(), fmt, mode)
                assert torch.equal(ref.qdata.view(torch.uint8).cpu(), cpu.qdata.view(torch.uint8)), (n, k)
                assert torch.equal(ref.scale.reshape(-1).view(torch.uint8).cpu(),
                                   cpu.scale.reshape(-1).view(torch.uint8)), (n, k)
            paths = {_hw_fp8()}
            if dtype == torch.bfloat16 and (n, k) in SOFTWARE_ENCODER_SHAPES:
                paths.add(False)  # the uint8 software encoder (sm_80's path) on this GPU too
            for hw_fp8 in paths:
                _assert_same(quantize_weight(w, fmt, mode, hw_fp8=hw_fp8), ref, (fmt, mode, dtype, n, k, hw_fp8))
            del ref
        del w
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gpu_every_finite_16bit_value(dtype):
    """Every finite bf16/fp16 value through every format, under several shuffles and planted row maxima (so each
    value meets many scales): the reciprocal division and the hardware cast on the whole input domain."""
    from kernels_triton.weight_quant import quantize_weight

    for seed in range(4):
        for rows in (256, 512):
            w = all_finite_values(dtype, rows, seed, device="cuda")
            for fmt in Format:
                for mode in modes(fmt):
                    _assert_same(quantize_weight(w, fmt, mode, hw_fp8=_hw_fp8()), torch_path(w, fmt, mode),
                                 (fmt, mode, dtype, seed, rows))


@pytest.mark.gpu
def test_gpu_config_variants_agree():
    """Other tiles, warp counts and paths give the same bits (the rule's choice is only about speed)."""
    from dispatch.target import detect
    from kernels_triton.act_quant_config import exact_hw_e4m3_cast
    from kernels_triton.weight_quant import WeightQuantConfig, quantize_weight

    cvt = exact_hw_e4m3_cast(detect("cuda"))  # the hardware cast only where it is exact (sm_90)
    w = crafted_weight(1000, 3000, torch.bfloat16, seed=7, device="cuda")
    variants = {
        Format.FP8_BLOCK: [WeightQuantConfig(128, 128, 8, cvt, True), WeightQuantConfig(128, 128, 4, False, False)],
        Format.FP8_ROW: [WeightQuantConfig(1, 512, 4, cvt, True, row_loop=True),
                         WeightQuantConfig(4, 4096, 16, cvt, False)],
        Format.MXFP8: [WeightQuantConfig(64, 128, 4, cvt), WeightQuantConfig(2, 4096, 8, False)],
        Format.FP8_TENSOR: [WeightQuantConfig(1, 1024, 4, cvt, True, amax_iters=1),
                            WeightQuantConfig(64, 128, 8, False, False, amax_iters=16)],
    }
    for fmt, cfgs in variants.items():
        for mode in modes(fmt):
            ref = torch_path(w, fmt, mode)
            for cfg in cfgs:
                _assert_same(quantize_weight(w, fmt, mode, hw_fp8=_hw_fp8(), config=cfg), ref, (fmt, mode, cfg))


@pytest.mark.gpu
def test_gpu_nonfinite_weight_reports_location():
    from kernels_triton.weight_quant import quantize_weight

    w = torch.randn(1000, 512, device="cuda")
    w[777, 5] = float("nan")
    for fmt in ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"]:
        with pytest.raises(dispatch.FormatError, match=r"\[777, 5\]"):
            dispatch.quantize(w, fmt)
    w[777, 5] = float("-inf")
    for fmt in Format:
        assert int(quantize_weight(w, fmt, MXScaleMode.RCEIL, hw_fp8=_hw_fp8())[2]) > 0, fmt


@pytest.mark.gpu
def test_gpu_quantize_uses_kernel_and_allocates_only_outputs():
    """dispatch.quantize on CUDA: the kernel path allocates its outputs and (almost) nothing else (issue 2 bounds
    the transient at 64 MB). Measured on the H200 (2026-11-29): <= 4 KB for fp8_block/fp8_tensor/fp8_row, 524800 B
    for mxfp8 (not yet traced; constant, not proportional to the 117 MB weight: the bound below would catch a
    per-row or per-weight temporary)."""
    w = torch.randn(28672, 4096, device="cuda", dtype=torch.bfloat16)
    for fmt in Format:
        qw = dispatch.quantize(w, fmt)  # compile outside the measurement
        out_bytes = qw.qdata.numel() + qw.scale.numel() * qw.scale.element_size()
        del qw
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        qw = dispatch.quantize(w, fmt)
        torch.cuda.synchronize()
        transient = torch.cuda.max_memory_allocated() - base - out_bytes
        assert transient <= (1 << 20 if fmt is Format.MXFP8 else 4096), (fmt, transient)
        del qw


if __name__ == "__main__":
    sys.exit(_interp_main())
