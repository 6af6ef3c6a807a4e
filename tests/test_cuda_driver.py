"""kernels_cuda/_driver.py on CPU: the argument packing and the context handling of a launch, against a fake
driver that reads the parameter block the way cuLaunchKernel does (4 bytes for an int parameter, 8 for a
pointer or a long long). The real launches run in the GPU tests (every CUDA and HIP kernel test goes
through this launcher)."""

from __future__ import annotations

import ctypes

import pytest

cupy_driver = pytest.importorskip("cupy_backends.cuda.api.driver")

from kernels_cuda import _driver  # noqa: E402


class FakeDriver:
    def __init__(self, current_ctx: int):
        self.current = current_ctx
        self.launches: list[dict] = []
        self.set_calls: list[int] = []

    def ctxGetCurrent(self):  # noqa: N802 (CuPy's name)
        return self.current

    def ctxSetCurrent(self, ctx):  # noqa: N802
        self.set_calls.append(ctx)
        self.current = ctx

    def launchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        # Read the parameter block now, as the driver does (it copies the values at launch).
        addrs = (ctypes.c_void_p * 4).from_address(params)
        self.launches.append(dict(
            f=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream, extra=extra, ctx=self.current,
            ptr=ctypes.c_uint64.from_address(addrs[0]).value,
            i32=ctypes.c_int32.from_address(addrs[1]).value,
            i64=ctypes.c_int64.from_address(addrs[2]).value,
            neg32=ctypes.c_int32.from_address(addrs[3]).value))


@pytest.fixture
def fake(monkeypatch):
    def make(current_ctx):
        drv = FakeDriver(current_ctx)
        for name in ("ctxGetCurrent", "ctxSetCurrent", "launchKernel"):
            monkeypatch.setattr(cupy_driver, name, getattr(drv, name))
        monkeypatch.setattr(_driver, "current_stream", lambda device: 0xABC0 + device)
        return drv
    return make


KERNEL = _driver.LoadedKernel(entry="k", device=1, fn_ptr=0x1234, ctx=0x77, module=None)
ARGS = (0x7F00_0000_1000, 4096, 1 << 40, -3)


def test_arguments_reach_the_driver_with_their_widths(fake):
    drv = fake(current_ctx=0x77)
    _driver.launch(KERNEL, (5, 2, 1), (256, 1, 1), ARGS, smem=1024)
    (call,) = drv.launches
    assert call["f"] == 0x1234 and call["grid"] == (5, 2, 1) and call["block"] == (256, 1, 1)
    assert call["smem"] == 1024 and call["stream"] == 0xABC1 and call["extra"] == 0
    assert (call["ptr"], call["i32"], call["i64"], call["neg32"]) == ARGS
    assert drv.set_calls == []  # the module's context was already current: no context switch


def test_launch_from_another_context_switches_and_restores(fake):
    drv = fake(current_ctx=0x99)
    _driver.launch(KERNEL, (1, 1, 1), (32, 1, 1), ARGS)
    assert drv.launches[0]["ctx"] == 0x77
    assert drv.set_calls == [0x77, 0x99] and drv.current == 0x99


def test_launch_from_a_fresh_thread_makes_the_context_current(fake):
    # A thread with no current context keeps the device's primary context current afterwards (what torch's
    # first use of the device would do too).
    drv = fake(current_ctx=0)
    _driver.launch(KERNEL, (1, 1, 1), (32, 1, 1), ARGS)
    assert drv.launches[0]["ctx"] == 0x77 and drv.set_calls == [0x77]


def test_full_precision_reduction_restores_torch_flags_exactly():
    import torch

    from kernels_cuda._dequant_route import full_precision_reduction

    get_bf16 = torch._C._get_cublas_allow_bf16_reduced_precision_reduction
    get_fp16 = torch._C._get_cublas_allow_fp16_reduced_precision_reduction
    mm = torch.backends.cuda.matmul
    before = (get_bf16(), get_fp16())
    try:
        mm.allow_fp16_reduced_precision_reduction = False  # a user setting that must survive
        user = (get_bf16(), get_fp16())
        with full_precision_reduction():
            inside = (get_bf16(), get_fp16())
        assert (get_bf16(), get_fp16()) == user
        flat = [v[0] if isinstance(v, tuple) else v for v in inside]
        assert flat == [False, False]
    finally:
        for kind, v in zip(("bf16", "fp16"), before):
            setter = getattr(torch._C, f"_set_cublas_allow_{kind}_reduced_precision_reduction")
            setter(*v) if isinstance(v, tuple) else setter(v)


def test_load_builds_once_per_key(monkeypatch):
    built = []

    def fake_load(entry, device, image):
        built.append((entry, device, image))
        return _driver.LoadedKernel(entry, device, len(built), 0, None)

    monkeypatch.setattr(_driver, "_load", fake_load)
    monkeypatch.setattr(_driver, "_LOADED", {})
    a = _driver.load(("src", "sm_90", ()), "k", 0, lambda: b"img")
    b = _driver.load(("src", "sm_90", ()), "k", 0, lambda: b"other")
    c = _driver.load(("src", "sm_90", ()), "k", 1, lambda: b"img1")
    assert a is b and a is not c and built == [("k", 0, b"img"), ("k", 1, b"img1")]


def test_programmatic_launch_passes_the_attribute_and_the_geometry(fake, monkeypatch):
    drv = fake(current_ctx=0x99)
    seen = []

    def fake_ex(config, fn, params):
        attr = config.attrs[0]
        addrs = (ctypes.c_void_p * 4).from_address(params)
        seen.append(dict(fn=fn, grid=tuple(config.grid), block=tuple(config.block), smem=config.shared_mem_bytes,
                         stream=config.stream, n=config.num_attrs, id=attr.id, value=attr.value, ctx=drv.current,
                         i32=ctypes.c_int32.from_address(addrs[1]).value))
        return 0

    monkeypatch.setattr(_driver, "cu_launch_kernel_ex", fake_ex)
    monkeypatch.setattr(_driver, "is_capturing", lambda: False)
    _driver.launch(KERNEL, (7, 1, 1), (128, 1, 1), ARGS, smem=512, pdl=True)
    assert len(drv.launches) == 1 and seen == []  # eager: the plain cuLaunchKernel (less host time)
    drv.launches.clear()
    monkeypatch.setattr(_driver, "is_capturing", lambda: True)
    _driver.launch(KERNEL, (7, 1, 1), (128, 1, 1), ARGS, smem=512, pdl=True)
    assert drv.launches == []  # captured: cuLaunchKernelEx, not the plain cuLaunchKernel
    (s,) = seen
    assert (s["fn"], s["grid"], s["block"], s["smem"], s["stream"]) == (0x1234, (7, 1, 1), (128, 1, 1), 512, 0xABC1)
    assert (s["n"], s["id"], s["value"], s["i32"]) == (1, 6, 1, 4096)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert s["ctx"] == 0x77 and drv.current == 0x99  # same context handling as a plain launch

    monkeypatch.setattr(_driver, "cu_launch_kernel_ex", lambda *a: 1)
    with pytest.raises(RuntimeError, match="FP8DISPATCH_PDL=0"):
        _driver.launch(KERNEL, (1, 1, 1), (32, 1, 1), ARGS, pdl=True)


def test_launch_config_layout_matches_cuda_h():
    # cuda.h (CUDA 12/13): CUlaunchConfig has 7 uints, then the stream at offset 32, attrs at 40, numAttrs at 48.
    assert _driver.CuLaunchConfig.attrs.offset == 40 and _driver.CuLaunchConfig.num_attrs.offset == 48
    assert _driver.CuLaunchAttribute.value.offset == 8 and ctypes.sizeof(_driver.CuLaunchAttribute) == 72


@pytest.mark.parametrize("arch,want", [("sm_90", True), ("sm_90a", True), ("sm_100", True), ("compute_90", True),
                                       ("sm_89", False), ("sm_80", False), ("compute_80", False)])
def test_pdl_only_where_the_code_has_griddepcontrol(monkeypatch, arch, want):
    from kernels_cuda import _launch

    monkeypatch.delenv(_launch.PDL_ENV, raising=False)
    _launch.pdl_allowed.cache_clear()
    try:
        assert _launch.pdl_allowed(arch) is want
        monkeypatch.setenv(_launch.PDL_ENV, "0")
        _launch.pdl_allowed.cache_clear()
        assert _launch.pdl_allowed(arch) is False
    finally:
        _launch.pdl_allowed.cache_clear()


def test_dequant_route_picks_the_output_path_by_dtypes_and_bias(monkeypatch):
    """kernels_cuda._dequant_route.linear on the CPU with its kernels emulated (the dequant kernel as
    dispatch.dequantize, csrc/scale_cols.cu as f32 math rounded once, cuBLAS as an fp64 product rounded once):
    tensor/row scales take the bf16-output path with the in-place scale only for bf16 in and out without a bias,
    the fp32-output path otherwise (a bias can cancel the product: rounding before adding it is not relative to
    the output); mxfp8 takes one GEMM on the exact weight. The GPU tests run the real kernels."""
    import torch

    import dispatch
    from dispatch import reference
    from dispatch.formats import Format
    from kernels_cuda import _dequant_route

    scaled = []

    def fake_mm(a, b, out_dtype=None):
        return (a.double() @ b.double()).to(out_dtype or a.dtype)

    def fake_scale(y, scale):
        scaled.append(tuple(y.shape))
        y.copy_((y.float() * scale).to(y.dtype))

    monkeypatch.setattr(torch, "mm", fake_mm)
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda x, w, b=None: (x.double() @ w.double().T + (0 if b is None else b.double())).to(x.dtype))
    monkeypatch.setattr(_dequant_route._dequant, "dequantize", lambda qw, dtype, cfg=None: dispatch.dequantize(qw).to(dtype))
    monkeypatch.setattr(_dequant_route, "scale_columns_", fake_scale)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 256, generator=g)
    for fmt in (Format.FP8_ROW, Format.FP8_TENSOR, Format.MXFP8):
        qw = dispatch.quantize(w, fmt, act="bf16")
        for x_dtype, out_dtype, with_bias in [(torch.bfloat16, torch.bfloat16, False), (torch.bfloat16, torch.bfloat16, True),
                                              (torch.bfloat16, torch.float32, False), (torch.float16, torch.float16, True)]:
            if fmt is Format.MXFP8 and x_dtype == torch.float16:
                continue
            x = torch.randn(5, 256, generator=g).to(x_dtype)
            bias = torch.randn(96, generator=g).to(x_dtype) if with_bias else None
            scaled.clear()
            y = _dequant_route.linear(x, qw, bias, out_dtype, None)
            want_scale_pass = fmt is not Format.MXFP8 and x_dtype == out_dtype == torch.bfloat16 and not with_bias
            assert y.dtype == out_dtype and y.shape == (5, 96)
            assert scaled == ([(5, 96)] if want_scale_pass else []), (fmt, x_dtype, out_dtype, with_bias)
            ref = reference.linear(x, qw, bias, out_dtype=torch.float64)
            rounds = 2 if want_scale_pass else 1
            eps = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-10}[out_dtype] * rounds
            assert ((y.double() - ref).abs() <= ref.abs() * eps + 1e-6 * ref.abs().max()).all(), (fmt, x_dtype, with_bias)
