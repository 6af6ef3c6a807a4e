"""The torch.library custom op `fp8dispatch::linear`, so torch.compile(fullgraph=True) sees one opaque node
with a fake (meta) implementation instead of tracing into the dispatcher.

The op receives the weight's tensors, not the QWeight. Its eager implementation finds the QWeight (and with
it the per-weight plan cache) through a registry keyed by the tensors' storage pointers, filled by
`dispatch.linear` and `FP8Linear`; a weight seen only through the op is rebuilt once (validated) and kept in
a bounded cache.
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
