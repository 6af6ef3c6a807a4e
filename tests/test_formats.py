"""QWeight: layouts are types; a wrong layout is an error at construction, never a wrong result."""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch import Act, Format, FormatError, QWeight, quantize


def _codes(n, k):
    return torch.randint(0, 0x7E, (n, k), dtype=torch.uint8).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("fmt, scale", [
    ("fp8_block", torch.ones(2, 5)),
    ("fp8_tensor", torch.ones(())),
    ("fp8_row", torch.ones(130)),
    ("mxfp8", torch.full((130, 19), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)),
])
def test_valid_layouts(fmt, scale):
    qw = QWeight(fmt, None, _codes(130, 600), scale)
    assert qw.format is Format.parse(fmt) and qw.shape == (130, 600)


@pytest.mark.parametrize("fmt, scale, match", [
    ("fp8_block", torch.ones(5, 2), r"\[2, 5\]"),  # transposed block scales: same numel, wrong layout
    ("fp8_block", torch.ones(130 // 128, 600 // 128), r"\[2, 5\]"),  # floor instead of ceil
    ("fp8_tensor", torch.ones(1), r"shape \[\]"),
    ("fp8_row", torch.ones(130, 1), r"\[130\]"),
    ("fp8_row", torch.ones(130, dtype=torch.bfloat16), "float32"),
    ("mxfp8", torch.ones(130, 19), "float8_e8m0fnu"),
    ("mxfp8", torch.full((130, 18), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu), r"\[130, 19\]"),
])
def test_wrong_scale_layout_is_an_error(fmt, scale, match):
    with pytest.raises(FormatError, match=match):
        QWeight(fmt, None, _codes(130, 600), scale)


def test_other_construction_errors():
    with pytest.raises(FormatError, match="float8_e4m3fn"):
        QWeight("fp8_row", None, torch.zeros(4, 4, dtype=torch.uint8), torch.ones(4))
    with pytest.raises(FormatError, match="2-D"):
        QWeight("fp8_tensor", None, _codes(4, 4)[0], torch.ones(()))
    with pytest.raises(FormatError, match="contiguous"):
        QWeight("fp8_tensor", None, _codes(4, 8)[:, ::2], torch.ones(()))
    with pytest.raises(dispatch.UnsupportedError):
        QWeight("mxfp8", "fp8", _codes(4, 32), torch.zeros(4, 1, dtype=torch.uint8).view(torch.float8_e8m0fnu))


def test_require_checks_the_tag():
    qw = quantize(torch.randn(4, 32), "fp8_row")
    assert qw.require(Format.FP8_ROW) is qw
    with pytest.raises(FormatError, match="fp8_block"):
        qw.require(Format.FP8_BLOCK)
    with pytest.raises(FormatError):
        qw.require(Format.FP8_ROW, Act.FP8)


@pytest.mark.parametrize("fmt", ["fp8_block", "fp8_tensor", "fp8_row", "mxfp8"])
def test_safetensors_round_trip(tmp_path, fmt):
    from safetensors.torch import load_file, safe_open, save_file

    qw = quantize(torch.randn(130, 200), fmt)
    path = str(tmp_path / "w.safetensors")
    save_file(qw.to_dict(), path, metadata=qw.metadata())
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    back = QWeight.from_dict(load_file(path), meta)
    assert back.format is qw.format and back.act is qw.act
    assert torch.equal(back.qdata.view(torch.uint8), qw.qdata.view(torch.uint8))
    assert torch.equal(back.scale.reshape(-1).view(torch.uint8), qw.scale.reshape(-1).view(torch.uint8))
    with pytest.raises(FormatError, match="missing key"):
        QWeight.from_dict({"qdata": qw.qdata}, meta)


def test_to_device_is_identity_on_same_device():
    qw = quantize(torch.randn(4, 32), "fp8_block")
    assert qw.to("cpu") is qw
    assert qw.nbytes == 4 * 32 + 4


def test_strings_and_enums_are_interchangeable():
    assert Format.parse("FP8_ROW") is Format.FP8_ROW
    assert str(Format.MXFP8) == "mxfp8"
    assert Act.parse("bf16") is Act.BF16


def test_mx_fold_answers_whether_every_scale_code_folds():
    """dispatch.mx_fold: True iff every e8m0 code is <= 134 (the NaN code 255 does not fold), False for other formats;
    the answer is cached on the weight, and a CPU weight needs no asynchronous read."""
    from dispatch import mx_fold

    w = torch.randn(64, 128)
    qw = quantize(w, "mxfp8", act="bf16")
    mx_fold.start_read(qw)  # CPU: nothing to start
    assert mx_fold.PENDING not in qw._cache
    assert mx_fold.fold_ok(qw) is True and qw._cache[mx_fold.KEY] is True
    for code, folds in ((mx_fold.FOLD_MAX, True), (mx_fold.FOLD_MAX + 1, False), (255, False)):
        s = qw.scale.view(torch.uint8).clone()
        s[3, 1] = code
        assert mx_fold.fold_ok(QWeight(qw.format, qw.act, qw.qdata, s.view(torch.float8_e8m0fnu))) is folds, code
    assert mx_fold.fold_ok(quantize(w, "fp8_row", act="bf16")) is False
    w[5, :32] = 448.0 * 2**7 * 1.5  # a group amax above 448 x 2^7 needs scale code 135
    assert mx_fold.fold_ok(quantize(w, "mxfp8", act="bf16")) is False


def test_mx_fold_flags_can_be_written_outside_inference_mode_after_one_was_made_inside(monkeypatch):
    """dispatch.mx_fold's flags are views of one long-lived pinned slab, made outside inference mode even when the first
    weight is prepared inside it (the session-20 bug of this mechanism's first, Triton-side home: the next flag's copy outside inference mode raised
    'Inplace update to inference tensor outside InferenceMode'). Pinned memory needs a GPU: the slab here is plain host
    memory, what is tested is the mode the slab and its views are made in."""
    import types

    from dispatch import mx_fold

    shim = types.SimpleNamespace(uint8=torch.uint8, inference_mode=torch.inference_mode,
                                 zeros=lambda *a, pin_memory=False, **k: torch.zeros(*a, **k))
    monkeypatch.setattr(mx_fold, "torch", shim)
    monkeypatch.setattr(mx_fold, "_slab", [None, mx_fold._SLAB_BYTES])
    with torch.inference_mode():
        mx_fold._pinned_flag().copy_(torch.ones(1, dtype=torch.uint8))
    assert not mx_fold._slab[0].is_inference()
    mx_fold._pinned_flag().copy_(torch.ones(1, dtype=torch.uint8))  # outside inference mode, the same slab
    with torch.no_grad():
        mx_fold._pinned_flag().copy_(torch.ones(1, dtype=torch.uint8))
    assert mx_fold._slab[0][:3].tolist() == [1, 1, 1] and mx_fold._slab[1] == 3
