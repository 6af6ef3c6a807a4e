"""fp8dispatch: FP8 linear layers behind an autotuning dispatcher.

Public API (stable): Format, Act, ActGranularity, QWeight, quantize, dequantize, from_checkpoint,
quantize_activation, reference, linear, explain, force, FP8Linear, quantize_model, Target.
Nothing here touches a device or the filesystem at import time.
"""

from __future__ import annotations

from . import reference
from .activation import quantize_activation
from .checkpoint import from_checkpoint
from .errors import (BackendUnavailable, CompileError, FormatError, FP8DispatchError, NoCandidateError,
                     TableError, UnsupportedError)
from .formats import Act, ActGranularity, Format, MXScaleMode, QWeight
from .weight_quant import dequantize, quantize
from .target import Target

__all__ = [
    "Act", "ActGranularity", "BackendUnavailable", "CompileError", "FP8DispatchError", "Format", "FormatError",
    "MXScaleMode", "NoCandidateError", "QWeight", "TableError", "Target", "UnsupportedError", "dequantize",
    "from_checkpoint", "quantize", "quantize_activation", "reference",
]

# dispatcher (dispatch helper)
from . import registry, tables  # noqa: E402
from .explain import Explanation, explain  # noqa: E402
from .force import force  # noqa: E402
from .linear import linear  # noqa: E402
from .nn import FP8Linear, quantize_model  # noqa: E402
from .select import Decision, select  # noqa: E402

__all__ += ["Decision", "Explanation", "FP8Linear", "explain", "force", "linear", "quantize_model", "registry",
            "select", "tables"]
