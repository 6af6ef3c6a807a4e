"""fp8dispatch: FP8 linear layers behind an autotuning dispatcher.

Public API (stable): Format, Act, ActGranularity, MXScaleMode, QWeight, quantize, dequantize, from_checkpoint,
quantize_activation, reference, linear, explain, force, FP8Linear, quantize_model, add_decode_tiles, Target, and the
typed errors.
Nothing here touches a device or the filesystem at import time.
"""

from __future__ import annotations

from . import reference, registry, tables
from .activation import quantize_activation
from .checkpoint import from_checkpoint
from .decode_tiles import add_decode_tiles
from .errors import (BackendUnavailable, CompileError, FormatError, FP8DispatchError, NoCandidateError,
                     TableError, UnsupportedError)
from .explain import Explanation, explain
from .force import force
from .formats import Act, ActGranularity, Format, MXScaleMode, QWeight
from .linear import linear
from .nn import FP8Linear, quantize_model
from .select import Decision, select
from .target import Target
from .weight_quant import dequantize, quantize

__all__ = [
    "Act", "ActGranularity", "add_decode_tiles", "BackendUnavailable", "CompileError", "Decision", "Explanation", "FP8DispatchError",
    "FP8Linear", "Format", "FormatError", "MXScaleMode", "NoCandidateError", "QWeight", "TableError", "Target",
    "UnsupportedError", "dequantize", "explain", "force", "from_checkpoint", "linear", "quantize",
    "quantize_activation", "quantize_model", "reference", "registry", "select", "tables",
]
