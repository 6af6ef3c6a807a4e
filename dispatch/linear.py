"""`dispatch.linear(x, qw, bias=None, out_dtype=None)`: the call, with a per-weight plan cache.

Hot path (eager): a few attribute reads, one tuple key, one dict lookup in `qw._cache`, then the chosen
kernel. Plans are keyed by (M bucket, x dtype, out dtype, bias?, force/deny policy, registry generation);
the weight's device is fixed per QWeight, and so are its layouts (dispatch.add_decode_tiles drops the plans). A miss
builds the plan under a lock: detect the target, load the tables, `select(...)`, run the candidate's load-time
`prepare(qw)` once per candidate and weight.

Gradients: where x or the bias requires grad under grad mode, the call goes through the custom op, whose backward
gives dx = dy @ dequantized W (straight through the activation quantization of the W8A8 formats) and dbias; the
weight is frozen. Under no_grad / inference_mode (an engine) that branch is one flag test.

Inputs: x [..., K] with any leading dims (M = prod of them, M = 0 gives an empty [..., N]); non-contiguous
x is copied to a contiguous [M, K] (reshape). bf16 and fp16 are the kernel dtypes. fp32 x is accepted and
handed to the candidates as fp32: those that declare fp32 support run it (torch._scaled_mm quantizes it
directly, dequantize-then-GEMM computes in fp32/TF32 per torch's matmul precision setting), the others
reject it, and the reference path (fp32 math) is the fallback; no silent downcast happens.
out_dtype defaults to x.dtype.

No host synchronization, no branching on tensor values: safe inside CUDA-graph capture once the plan for
that M bucket exists (build it with one eager call before capture: the plan build itself may allocate and
run the weight's one-time preparation, which must not be captured). Under torch.compile the call becomes
the custom op `fp8dispatch::linear` (dispatch.ops) with a fake implementation, so fullgraph=True holds.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

import torch

from .force import Policy, current as current_policy
from . import registry
from .errors import FormatError, UnsupportedError
from .formats import QWeight
from .ops import linear_op, remember
from .decode_tiles import has_decode_tiles
from .problem import M_BUCKETS, Candidate, KernelConfig, Problem
from .select import Decision, select
from .tables import tables_for
from .target import Target, detect

_current_cuda_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else (lambda: -1)

PLANS_KEY = "dispatch.plans"
PREPARED_KEY = "dispatch.prepared"
_MAX_BUCKET = M_BUCKETS[-1]
_lock = threading.RLock()


class Plan(NamedTuple):
    run: Callable[..., torch.Tensor]
    prepared: Any
    config: KernelConfig
    decision: Decision


def fast_bucket(m: int) -> int:
    """== problem.m_bucket(m) for the power-of-two bucket list, in O(1)."""
    b = 1 << max(0, (m - 1).bit_length())
    return b if b < _MAX_BUCKET else _MAX_BUCKET


def _check(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype | None) -> None:
    from .reference import check_linear_args

    check_linear_args(x, qw, bias)
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise FormatError(f"x must be bf16, fp16 or fp32, got {x.dtype}")
    if out_dtype is not None and out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise FormatError(f"out_dtype must be bf16, fp16 or fp32, got {out_dtype}")


def _problem(qw: QWeight, bucket: int, x_dtype: torch.dtype, out_dtype: torch.dtype, has_bias: bool) -> Problem:
    n, k = qw.shape
    # Plans are shared by every M of a bucket, so candidates are asked about the bucket's largest M.
    return Problem(qw.format, qw.act, bucket, n, k, x_dtype, out_dtype, has_bias, has_decode_tiles(qw))


def plan_for(qw: QWeight, bucket: int, x_dtype: torch.dtype, out_dtype: torch.dtype, has_bias: bool,
             policy: Policy, target: Target | None = None) -> Plan:
    """Build (or fetch) the plan of one weight for one key. Thread-safe."""
    with _lock:
        target = target or detect(qw.device)
        problem = _problem(qw, bucket, x_dtype, out_dtype, has_bias)
        decision = select(problem, target, tables_for(target), registry.candidates(), policy,
                          unavailable=registry.unavailable_backends())
        cand = registry.get(decision.candidate_id)
        assert cand is not None, decision.candidate_id
        return Plan(cand.run, _prepared(qw, cand), decision.config, decision)


def _prepared(qw: QWeight, cand: Candidate) -> Any:
    prep = qw._cache.setdefault(PREPARED_KEY, {})
    if cand.id not in prep:
        if type(cand).prepare is Candidate.prepare:  # nothing to prepare: safe even inside capture
            prep[cand.id] = None
            return None
        if qw.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise UnsupportedError(
                f"dispatch.linear: the first call for this weight with {cand.id} happens inside CUDA-graph "
                "capture, and its one-time weight preparation must not be captured; call the layer once "
                "eagerly with the same M (any value in the same M bucket) before capturing")
        prep[cand.id] = cand.prepare(qw)
    return prep[cand.id]


def linear(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """y[..., N] = x[..., K] @ W.T (+ bias) with the weight's format semantics (see dispatch.reference)."""
    if torch.compiler.is_compiling() or (
            (x.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled()):
        # the custom op: an opaque node for torch.compile, and the autograd formula (dispatch.ops) when x or the
        # bias needs a gradient (_wants_grad, inlined: this is the hot path)
        return linear_op(x, qw.qdata, qw.scale, qw.format.value, qw.act.value, bias, out_dtype)
    return _linear(x, qw, bias, out_dtype)


def _wants_grad(x: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether autograd must record this call: flags only, never values (graph-safe). The kernels' outputs carry
    no grad_fn, so such a call goes through the custom op, whose backward gives dx (and dbias)."""
    return (x.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled()


class _Plans(dict):
    """A weight's plans, plus the facts the hot path checks (read once from the QWeight)."""

    __slots__ = ("n", "k", "device", "device_index")

    def __init__(self, qw: QWeight):
        super().__init__()
        self.n, self.k = qw.shape
        self.device = qw.device
        # GPU weights: Tensor.get_device() compared with an int instead of building a torch.device per call
        # (-1 means "compare devices", the CPU case, where get_device() cannot tell CPU from meta).
        self.device_index = qw.device.index if qw.device.type == "cuda" and qw.device.index is not None else -1


def _linear(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None, out_dtype: torch.dtype | None,
            _policy: "Policy | None" = None) -> torch.Tensor:
    plans = qw._cache.get(PLANS_KEY)
    if plans is None:
        with _lock:
            plans = qw._cache.setdefault(PLANS_KEY, _Plans(qw))
    shape = x.shape
    k = plans.k
    di = plans.device_index
    if shape[-1] != k or ((not x.is_cuda or x.get_device() != di) if di >= 0 else x.device != plans.device):
        _check(x, qw, bias, out_dtype)  # raises the precise error
        raise AssertionError("unreachable")
    if di >= 0 and di != _current_cuda_device():
        # Tensors on a GPU that is not the current one (a model spread over GPUs in one process): Triton and the
        # CUDA backend launch on the current device and stream, so make x's current for this call (session 18:
        # every route failed there before, on two H200s).
        with torch.cuda.device(di):
            return _linear(x, qw, bias, out_dtype, _policy)
    two_d = len(shape) == 2
    m = shape[0] if two_d else x.numel() // k
    x_dtype = x.dtype
    out_dtype = out_dtype or x_dtype
    if m == 0:
        _check(x, qw, bias, out_dtype)
        return x.new_empty((*shape[:-1], plans.n), dtype=out_dtype)
    bucket = 1 << (m - 1).bit_length()  # fast_bucket, inlined (a call costs as much as the rest of the key)
    if bucket > _MAX_BUCKET:
        bucket = _MAX_BUCKET
    policy = current_policy() if _policy is None else _policy
    key = (bucket, x_dtype, out_dtype, bias is not None, policy, registry.generation)
    plan = plans.get(key)
    if plan is None:
        _check(x, qw, bias, out_dtype)
        with _lock:
            plan = plans.get(key)
            if plan is None:
                plan = plan_for(qw, bucket, x_dtype, out_dtype, bias is not None, policy)
                plans[key] = plan
        remember(qw)
    if two_d:  # the common serving case: no reshape/view (each costs ~1 us of host time)
        return plan.run(x if x.is_contiguous() else x.contiguous(), qw, plan.prepared, bias, out_dtype,
                        plan.config)
    x2d = x.reshape(m, k)
    if not x2d.is_contiguous():
        x2d = x2d.contiguous()
    y = plan.run(x2d, qw, plan.prepared, bias, out_dtype, plan.config)
    return y.view(*shape[:-1], plans.n)


def decision_for(x: torch.Tensor, qw: QWeight, bias: torch.Tensor | None = None,
                 out_dtype: torch.dtype | None = None) -> Decision:
    """The decision `linear` uses (or would use) for these arguments here."""
    m = x.numel() // x.shape[-1] if x.shape[-1] else 0
    policy = current_policy()
    return plan_for(qw, fast_bucket(max(m, 1)), x.dtype, out_dtype or x.dtype, bias is not None, policy).decision


def clear_plans(qw: QWeight) -> None:
    """Forget a weight's plans and prepared layouts (e.g. after changing tables in place)."""
    with _lock:
        qw._cache.pop(PLANS_KEY, None)
        qw._cache.pop(PREPARED_KEY, None)
