"""`FP8Linear` (an nn.Module around a QWeight) and `quantize_model` (swap a model's nn.Linear layers in one call).

State dict of an FP8Linear: `qdata` (float8_e4m3fn [N, K]), `scale` (QWeight.to_dict() form: fp32, or uint8
e8m0 codes for mxfp8), `fp8_format` (uint8 [2]: indices into FORMATS and ACTS, so the format travels with the
tensors through safetensors without file metadata) and `bias` when present. Loading a state dict rebuilds the
QWeight, which drops cached plans and prepared layouts derived from the old values.

Decode tiles (`layer.add_decode_tiles()`, or `dispatch.add_decode_tiles(model)` for many layers) are a choice of the
layer, not of one QWeight: every rebuild on a CUDA device (`.to("cuda")`, `load_state_dict`) makes them again from the
codes it now holds, so they never go stale and are not lost by a move. They are not part of the state dict.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable, Sequence

import torch
from torch import nn

from .decode_tiles import add_decode_tiles
from .formats import Act, Format, QWeight
from .linear import _linear, _wants_grad  # at import, not per call: a function-level import costs ~0.5 us a call
from .ops import linear_op, remember

FORMATS: tuple[Format, ...] = (Format.FP8_BLOCK, Format.FP8_TENSOR, Format.FP8_ROW, Format.MXFP8)
ACTS: tuple[Act, ...] = (Act.FP8, Act.BF16)


def _code(fmt: Format, act: Act) -> torch.Tensor:
    return torch.tensor([FORMATS.index(fmt), ACTS.index(act)], dtype=torch.uint8)


class FP8Linear(nn.Module):
    """y = dispatch.linear(x, qweight, bias). Drop-in for nn.Linear at inference; x gets gradients (the weight is
    frozen), see dispatch.linear."""

    def __init__(self, qweight: QWeight, bias: torch.Tensor | None = None):
        super().__init__()
        if not isinstance(qweight, QWeight):
            raise TypeError(f"FP8Linear needs a QWeight, got {type(qweight).__name__}")
        n, k = qweight.shape
        self.in_features, self.out_features = k, n
        d = qweight.to_dict()
        self.register_buffer("qdata", d["qdata"])
        self.register_buffer("scale", d["scale"])
        self.register_buffer("fp8_format", _code(qweight.format, qweight.act))
        if bias is not None:
            if bias.shape != (n,):
                raise ValueError(f"bias must have shape [{n}], got {tuple(bias.shape)}")
            self.bias = nn.Parameter(bias.detach().to(qweight.device), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self._qw = qweight
        self.decode_tiles = False  # add_decode_tiles(): made again on every rebuild on a CUDA device
        self._remember()

    # --- construction ------------------------------------------------------------------------------
    @classmethod
    def from_linear(cls, linear: nn.Linear, fmt: "Format | str", act: "Act | str | None" = None,
                    **quantize_kwargs) -> "FP8Linear":
        from .weight_quant import quantize

        qw = quantize(linear.weight.detach(), fmt, act=act, **quantize_kwargs)
        return cls(qw, None if linear.bias is None else linear.bias.detach().clone())

    # --- the weight ----------------------------------------------------------------------------------
    @property
    def format(self) -> Format:
        return FORMATS[int(self.fp8_format[0])]

    @property
    def act(self) -> Act:
        return ACTS[int(self.fp8_format[1])]

    @property
    def qweight(self) -> QWeight:
        return self._qw

    def _rebuild(self) -> None:
        fmt, act = self.format, self.act
        scale = self.scale.view(torch.float8_e8m0fnu) if fmt is Format.MXFP8 else self.scale
        self._qw = QWeight(fmt, act, self.qdata, scale)
        if self.decode_tiles and self._qw.device.type == "cuda":
            add_decode_tiles(self._qw)
        self._remember()

    def add_decode_tiles(self) -> "FP8Linear":
        """Give this layer decode tiles (dispatch.add_decode_tiles: +N x K bytes on its CUDA device, for faster decode
        GEMVs) now and after every move to a CUDA device or state-dict load. Returns the layer."""
        add_decode_tiles(self._qw)  # raises, with the reason, where it cannot (a CPU weight, K % 16 != 0)
        self.decode_tiles = True
        return self

    def _remember(self) -> None:
        remember(self._qw)

    def _apply(self, fn, recurse=True):
        # .to(device) moves the codes and scales; a dtype cast (model.to(torch.bfloat16), .half()) must not
        # turn fp8 codes into values: those buffers keep their dtype and only follow the device. bias casts.
        keep = {name: self._buffers[name] for name in ("qdata", "scale", "fp8_format")}
        out = super()._apply(fn, recurse)
        for name, old in keep.items():
            new = self._buffers[name]
            if new.dtype != old.dtype:
                self._buffers[name] = old.to(new.device)
        self._rebuild()
        return out

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "fp8_format"
        if key in state_dict and not torch.equal(state_dict[key].to(torch.uint8).cpu(), self.fp8_format.cpu()):
            f, a = (int(v) for v in state_dict[key])
            raise ValueError(f"{prefix or 'FP8Linear'}: state dict holds {FORMATS[f]}/{ACTS[a]} but this layer is "
                             f"{self.format}/{self.act}; quantize the model with that format before loading")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._rebuild()  # new values: plans and prepared layouts of the old ones must not be reused

    # --- the call ------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self._parameters["bias"]  # (registered, maybe None): nn.Module.__getattr__ costs ~0.4 us a read
        if torch.compiler.is_compiling() or _wants_grad(x, bias):  # see dispatch.linear
            qw = self._qw
            return linear_op(x, self.qdata, qw.scale, qw.format.value, qw.act.value, bias, None)
        return _linear(x, self._qw, bias, None)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, format={self.format.value}, "
                f"act={self.act.value}, bias={self.bias is not None}" + (", decode_tiles=True" if self.decode_tiles else ""))


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def quantize_model(model: nn.Module, fmt: "Format | str", *, act: "Act | str | None" = None,
                   include: Sequence[str] = ("*",), exclude: Sequence[str] = (),
                   **quantize_kwargs) -> nn.Module:
    """Replace every nn.Linear whose qualified name matches an `include` glob and no `exclude` glob by an
    FP8Linear (in place; returns the model). Globs match the full dotted name, e.g. exclude=["lm_head"]
    or ["*lm_head", "model.layers.0.*"]. The model's `fp8dispatch_quantized` attribute lists what changed.
    """
    if isinstance(include, str) or isinstance(exclude, str):
        raise TypeError("include/exclude take a list of glob patterns, e.g. exclude=['lm_head']")
    targets = [(name, mod) for name, mod in model.named_modules()
               if isinstance(mod, nn.Linear) and _matches(name, include) and not _matches(name, exclude)]
    done = []
    for name, mod in targets:
        new = FP8Linear.from_linear(mod, fmt, act, **quantize_kwargs)
        if name == "":
            raise ValueError("quantize_model was given an nn.Linear itself; use FP8Linear.from_linear")
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
        done.append(name)
    model.fp8dispatch_quantized = done
    return model
