"""The bench's comparison routes: everything a user could run instead of (or through) the dispatcher.

A route turns one problem's tensors into `call(i)` (i = weight copy) plus the number of copies it rotates
over, and says what its output is checked against:
- "format": dispatch.reference of the format (the dispatcher, backend candidates, the _scaled_mm modes);
- "true":   the fp32 product with the unquantized bf16 weight (bf16 F.linear, GemLite: own quantization).

The torch._scaled_mm routes here quantize activations with dispatch.quantize_activation (plain torch ops,
bit-exact to the reference), as a user without this project would; the dispatcher's own torch candidates
(listed separately as backend "torch") use the project's fused Triton quantizer where available.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from dispatch.activation import quantize_activation
from dispatch.formats import Act, ActGranularity, Format
from dispatch.weight_quant import dequantize

from .timing import Call
from .workload import WeightSet


@dataclasses.dataclass
class RouteCtx:
    fmt: Format
    act: Act
    x: torch.Tensor
    ws: WeightSet
    w_bf16: Callable[[], list[torch.Tensor]]  # bf16 weight copies (built on first use)


@dataclasses.dataclass(frozen=True)
class Route:
    name: str
    group: str  # "dispatch" | "bf16" | "scaled_mm" | "naive" | "backend" | "gemlite"
    check: str  # "format" | "true"
    make: Callable[[RouteCtx], tuple[Call, int]]
    bytes_kind: str = "fp8"  # weight bytes counted for % copy BW: "fp8" (codes + scales) or "bf16"


class RouteUnavailable(Exception):
    """This route does not apply here (the message says why); not a failure."""


def _bf16(ctx: RouteCtx) -> tuple[Call, int]:
    ws = ctx.w_bf16()
    x = ctx.x
    return (lambda i: torch.nn.functional.linear(x, ws[i])), len(ws)


def _dispatch(ctx: RouteCtx) -> tuple[Call, int]:
    import dispatch

    copies, x = ctx.ws.copies, ctx.x
    return (lambda i: dispatch.linear(x, copies[i])), len(copies)


def _scaled_mm(gran: ActGranularity, fast_accum: bool) -> Callable[[RouteCtx], tuple[Call, int]]:
    def make(ctx: RouteCtx) -> tuple[Call, int]:
        x, out_dtype = ctx.x, ctx.x.dtype
        if gran is ActGranularity.PER_TENSOR:
            ws = [(q.qdata.t(), q.scale) for q in ctx.ws.copies]

            def call(i: int) -> torch.Tensor:
                xq, xs = quantize_activation(x, gran)
                return torch._scaled_mm(xq, ws[i][0], scale_a=xs, scale_b=ws[i][1], out_dtype=out_dtype,
                                        use_fast_accum=fast_accum)
        elif gran is ActGranularity.PER_TOKEN:
            ws = [(q.qdata.t(), q.scale.view(1, -1)) for q in ctx.ws.copies]

            def call(i: int) -> torch.Tensor:
                xq, xs = quantize_activation(x, gran)
                return torch._scaled_mm(xq, ws[i][0], scale_a=xs, scale_b=ws[i][1], out_dtype=out_dtype,
                                        use_fast_accum=fast_accum)
        else:  # 1x128 activation groups x 128x128 weight blocks (cuBLASLt, Hopper)
            ws = [(q.qdata.t(), q.scale.t()) for q in ctx.ws.copies]

            def call(i: int) -> torch.Tensor:
                xq, xs = quantize_activation(x, gran)
                return torch._scaled_mm(xq, ws[i][0], scale_a=xs.t().contiguous().t(), scale_b=ws[i][1],
                                        out_dtype=out_dtype)
        return call, len(ctx.ws.copies)
    return make


def _dequant_linear(ctx: RouteCtx) -> tuple[Call, int]:
    copies, x = ctx.ws.copies, ctx.x
    return (lambda i: torch.nn.functional.linear(x, dequantize(copies[i]).to(x.dtype))), len(copies)


# What a route's verdict means where a reader would not guess it; bench_report prints the note of every route that
# failed or was wrong somewhere, under the list of those cells.
ROUTE_NOTES = {
    "dequantize + bf16 F.linear": (
        "the weight as `dispatch.dequantize(qw).to(bf16)` before a bf16 GEMM: exact for mxfp8 (code x 2^e fits bf16), "
        "one more rounding of every code x scale for fp8_row and fp8_tensor (relative 2^-9), which is not those "
        "formats' fp32 definition: on the bench's weights and activations (row and 32-column factors 2^-3..2^3 on "
        "both) outputs that are sums with heavy cancellation move past 0.02 * rms + 0.02 * |ref| while the relative "
        "error stays ~2.5e-3, so the route is reported wrong there and not timed (tests/test_tools_bench.py "
        "reproduces it on the CPU; cuda.dequant_cublas keeps the codes exact and scales the GEMM's output instead)"),
}


def standard_routes(fmt: Format, act: Act) -> list[Route]:
    """dispatch.linear, bf16 cuBLAS, and the torch-only routes with this format's semantics."""
    routes = [Route("dispatch.linear", "dispatch", "format", _dispatch),
              Route("bf16 F.linear", "bf16", "true", _bf16, "bf16")]
    if act is Act.FP8:
        g = {Format.FP8_TENSOR: ActGranularity.PER_TENSOR, Format.FP8_ROW: ActGranularity.PER_TOKEN,
             Format.FP8_BLOCK: ActGranularity.PER_TOKEN_GROUP_128}[fmt]
        tag = {ActGranularity.PER_TENSOR: "tensorwise", ActGranularity.PER_TOKEN: "rowwise",
               ActGranularity.PER_TOKEN_GROUP_128: "blockwise"}[g]
        routes.append(Route(f"_scaled_mm {tag} + torch quant", "scaled_mm", "format", _scaled_mm(g, False)))
        if g is not ActGranularity.PER_TOKEN_GROUP_128:  # cuBLAS refuses fast accum with block scaling
            routes.append(Route(f"_scaled_mm {tag} fast_accum + torch quant", "scaled_mm", "format",
                                _scaled_mm(g, True)))
    else:
        routes.append(Route("dequantize + bf16 F.linear", "naive", "format", _dequant_linear))
    return routes


def candidate_route(cand: Any, config: Any, config_from: str) -> Route:
    """One dispatcher candidate with a given config, called directly (no dispatcher on the path)."""
    def make(ctx: RouteCtx) -> tuple[Call, int]:
        copies, x = ctx.ws.copies, ctx.x
        prepared = ctx.ws.prepared(cand.id, cand.prepare)
        out_dtype = x.dtype
        return (lambda i: cand.run(x, copies[i], prepared[i], None, out_dtype, config)), len(copies)

    return Route(f"{cand.id} [{config_from}]", "backend", "format", make)


# GemLite processors per (format, act), tried in order (class names differ across GemLite versions).
_GEMLITE = {
    (Format.FP8_ROW, Act.BF16): [("A16W8_FP8", {}), ("A16W8", {"fp8": True})],
    (Format.FP8_ROW, Act.FP8): [("A8W8_fp8_dynamic", {})],
    (Format.FP8_BLOCK, Act.FP8): [("A8W8_fp8_dynamic", {"block_quant": True})],
    (Format.MXFP8, Act.BF16): [("A16W8_MXFP", {})],
}


def gemlite_route(fmt: Format, act: Act) -> Route | None:
    """GemLite's processor for this format, when GemLite is importable (it quantizes the bf16 weight itself)."""
    if (fmt, act) not in _GEMLITE:
        return None
    try:
        import gemlite.helper as gh  # noqa: F401
    except Exception:
        return None

    def make(ctx: RouteCtx) -> tuple[Call, int]:
        import gemlite.helper as gh

        errors = []
        for name, kw in _GEMLITE[(fmt, act)]:
            cls = getattr(gh, name, None)
            if cls is None:
                errors.append(f"gemlite.helper has no {name}")
                continue
            try:
                # One GemLite layer per fp8 weight copy, so it rotates over as many bytes as the fp8 routes.
                w = ctx.w_bf16()[0]
                layers = []
                for _ in range(ctx.ws.ncopies):
                    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
                    lin.weight.data.copy_(w)
                    layers.append(cls(device=str(w.device), **kw).from_linear(lin))
                x = ctx.x
                return (lambda i: layers[i](x)), len(layers)
            except Exception as e:  # try the next processor name; report all if none works
                errors.append(f"{name}: {type(e).__name__}: {e}")
        raise RouteUnavailable("; ".join(errors))

    return Route(f"gemlite {'/'.join(n for n, _ in _GEMLITE[(fmt, act)])}", "gemlite", "true", make, "fp8")
