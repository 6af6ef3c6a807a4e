"""The torch.library custom op `fp8dispatch::linear`, so torch.compile(fullgraph=True) sees one opaque node
with a fake (meta) implementation instead of tracing into the dispatcher.

The op receives the weight's tensors, not the QWeight. Its eager implementation finds the QWeight (and with
it the per-weight plan cache) through a registry keyed by the tensors' storage pointers, filled by
`dispatch.linear` and `FP8Linear`; a weight seen only through the op is rebuilt once (validated) and kept in
a bounded cache. The op also carries the autograd formula of `dispatch.linear` (see `_backward`).
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Optional

import torch

from .formats import QWeight

_known: dict[tuple, "weakref.ref[QWeight]"] = {}
_rebuilt: "collections.OrderedDict[tuple, QWeight]" = collections.OrderedDict()
_REBUILT_MAX = 256
_lock = threading.Lock()


def _key(qdata: torch.Tensor, scale: torch.Tensor, fmt: str, act: str) -> tuple:
    return (qdata.data_ptr(), scale.data_ptr(), tuple(qdata.shape), qdata.device, fmt, act)


def remember(qw: QWeight) -> None:
    """Let the op find this QWeight (and its plans) from its tensors."""
    k = _key(qw.qdata, qw.scale, qw.format.value, qw.act.value)
    with _lock:
        _known[k] = weakref.ref(qw)


def _lookup(qdata: torch.Tensor, scale: torch.Tensor, fmt: str, act: str) -> QWeight:
    k = _key(qdata, scale, fmt, act)
    ref = _known.get(k)
    qw = ref() if ref is not None else None
    if qw is not None and qw.qdata.data_ptr() == k[0]:
        return qw
    with _lock:
        qw = _rebuilt.get(k)
        if qw is None:
            qw = QWeight(fmt, act, qdata, scale)
            _rebuilt[k] = qw
            while len(_rebuilt) > _REBUILT_MAX:
                _rebuilt.popitem(last=False)
        else:
            _rebuilt.move_to_end(k)
    return qw


@torch.library.custom_op("fp8dispatch::linear", mutates_args=())
def linear_op(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor, fmt: str, act: str,
              bias: Optional[torch.Tensor], out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    from .linear import _linear  # linear imports this module: resolve the cycle at call time

    y = _linear(x, _lookup(qdata, scale, fmt, act), bias, out_dtype)
    # custom ops must not return a view of an input (possible for nothing here, but M = 0 paths are cheap)
    return y


@linear_op.register_fake
def _linear_fake(x, qdata, scale, fmt, act, bias, out_dtype):
    return x.new_empty((*x.shape[:-1], qdata.shape[0]), dtype=out_dtype or x.dtype)


# Gradients, for calls where x (or the bias) requires grad under grad mode: `dispatch.linear` and `FP8Linear` route
# those through this op (eager and compiled alike). The weight is frozen (fp8 codes carry no gradient). dx = dy @ W
# with W dequantized as the reference does (code * scale in fp32, rounded once: to bf16 for a bf16 or fp16 dy, whose
# range holds any scale, where fp16's does not; to fp32 for an fp32 dy): for the W8A8 formats the activation
# quantization is passed straight through (its rounding has no useful derivative; the usual straight-through
# estimator of FP8 training). The transient is that W ([N, K], 2 or 4 bytes a weight, freed after the call).
def _setup_context(ctx, inputs, output):
    x, qdata, scale, fmt, act, bias, out_dtype = inputs
    ctx.save_for_backward(qdata, scale)
    ctx.fmt, ctx.act, ctx.x_shape, ctx.x_dtype = fmt, act, x.shape, x.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx, dy):
    from .torch_candidates import dequantize_to

    qdata, scale = ctx.saved_tensors
    dy2 = dy.reshape(-1, qdata.shape[0])
    dx = dbias = None
    if ctx.needs_input_grad[0]:
        gdtype = torch.float32 if dy.dtype == torch.float32 else torch.bfloat16
        w = dequantize_to(QWeight(ctx.fmt, ctx.act, qdata, scale), gdtype)  # metadata checks only: traceable
        dx = (dy2.to(gdtype) @ w).to(ctx.x_dtype).reshape(ctx.x_shape)
    if ctx.needs_input_grad[5]:
        dbias = dy2.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
    return dx, None, None, None, None, dbias, None


linear_op.register_autograd(_backward, setup_context=_setup_context)
