"""FP8Linear / quantize_model: one-call model conversion and safetensors round trips."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import dispatch
from dispatch.formats import Act, Format

PAIRS = [(f, a) for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)]


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleDict({"up": nn.Linear(160, 256), "down": nn.Linear(256, 160, bias=False)})
                                     for _ in range(2)])
        self.lm_head = nn.Linear(160, 96, bias=False)

    def forward(self, x):
        for blk in self.layers:
            x = x + blk["down"](torch.relu(blk["up"](x)))
        return self.lm_head(x)


def _model(seed=0):
    torch.manual_seed(seed)
    return Tiny().to(torch.bfloat16)


@pytest.mark.parametrize("fa", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_from_linear_matches_reference(fa):
    lin = nn.Linear(160, 96).to(torch.bfloat16)
    m = dispatch.FP8Linear.from_linear(lin, *fa)
    assert m.format is fa[0] and m.act is fa[1]
    x = torch.randn(3, 5, 160, dtype=torch.bfloat16)
    ref = dispatch.reference.linear(x, m.qweight, m.bias)
    torch.testing.assert_close(m(x).float(), ref.float(), rtol=2 ** -6, atol=1e-2)
    assert "format=" in repr(m)


def test_quantize_model_include_exclude():
    model = _model()
    x = torch.randn(2, 160, dtype=torch.bfloat16)
    dense = model(x)
    dispatch.quantize_model(model, "fp8_block", exclude=["lm_head"])
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.lm_head, dispatch.FP8Linear)
    assert sorted(model.fp8dispatch_quantized) == ["layers.0.down", "layers.0.up", "layers.1.down", "layers.1.up"]
    q = model(x)
    assert torch.isfinite(q).all()
    rel = (q.float() - dense.float()).norm() / dense.float().norm()
    assert rel < 0.1  # fp8 W8A8 error, not a wiring error
    m2 = dispatch.quantize_model(_model(), "fp8_row", include=["layers.1.*"])
    assert m2.fp8dispatch_quantized == ["layers.1.up", "layers.1.down"]
    with pytest.raises(TypeError):
        dispatch.quantize_model(_model(), "fp8_row", exclude="lm_head")


@pytest.mark.parametrize("fa", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_safetensors_round_trip(tmp_path, fa):
    model = dispatch.quantize_model(_model(0), fa[0], act=fa[1])
    path = tmp_path / "m.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    # a differently initialized model, quantized the same way, then loaded
    other = dispatch.quantize_model(_model(1), fa[0], act=fa[1])
    x = torch.randn(2, 160, dtype=torch.bfloat16)
    before = other(x)  # builds plans from the old values: loading must drop them
    other.load_state_dict(load_file(str(path)))
    assert torch.equal(other(x), model(x)) and not torch.equal(before, model(x))
    sd = load_file(str(path))
    assert sd["layers.0.up.qdata"].dtype == torch.float8_e4m3fn
    if fa[0] is Format.MXFP8:
        assert sd["layers.0.up.scale"].dtype == torch.uint8  # portable e8m0 codes


def test_loading_a_different_format_is_an_error():
    a = dispatch.quantize_model(_model(), "fp8_tensor")
    b = dispatch.quantize_model(_model(), "fp8_row", act="fp8")
    with pytest.raises((ValueError, RuntimeError), match="fp8_tensor|size mismatch"):
        b.load_state_dict(a.state_dict())


def test_module_casts_keep_codes():
    m = dispatch.FP8Linear.from_linear(nn.Linear(64, 32), "fp8_row")
    codes = m.qdata.clone()
    m.to("cpu")
    assert m.qweight.qdata.data_ptr() == m.qdata.data_ptr()
    m.half()  # model-wide dtype casts must not turn fp8 codes into fp16 values; bias follows the cast
    assert m.qdata.dtype == torch.float8_e4m3fn and torch.equal(m.qdata.view(torch.uint8), codes.view(torch.uint8))
    assert m.bias.dtype == torch.float16 and m.qweight.qdata is m.qdata
    x = torch.randn(2, 64, dtype=torch.float16)
    torch.testing.assert_close(m(x), dispatch.reference.linear(x, m.qweight, m.bias), rtol=2 ** -6, atol=1e-2)


def test_compiled_model_fullgraph():
    torch._dynamo.reset()
    model = dispatch.quantize_model(_model(), "fp8_tensor", exclude=["lm_head"])
    x = torch.randn(3, 160, dtype=torch.bfloat16)
    cm = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(cm(x), model(x))
