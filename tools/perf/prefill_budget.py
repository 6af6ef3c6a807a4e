"""What the W8A8 prefill target leaves for the activation quantizer: its share of the dispatched route, measured.

Issue 7 asks the dispatched path for fp8_tensor >= 1150 TFLOP/s (fp8_block >= 1000) at M = 4096, the activation
quantization included. Per cell this times, in one process (graph replay over weight copies > 3.3x L2, median; x
fixed, as `tools.bench` times the W8A8 routes):
  route     dispatch.linear (the table's pick: cuBLAS `_scaled_mm` after our quantizer, on the H200);
  gemm      the `_scaled_mm` call of that route on codes and scales quantized once beforehand (the route without
            its quantizer);
  quant     the routes' activation quantizer alone (dispatch.torch_candidates.quantize_act: the Triton kernel),
            the format's granularity; x is not rotated, so part of it may still be in L2 from the call before
            (route - gemm is the quantizer's cost inside the route, where the GEMM's traffic evicts it).
route and gemm are timed in alternating order, best of two rounds each.
and reports each one's TFLOP/s (2 M N K / time), the quantizer's time, what the target allows it (target time - gemm),
and the least a quantizer can take at the copy rate measured in the same run (one read of x and one write of its
codes; per tensor the exact scale needs the amax of all of x before any code, so a quantizer that does not keep x on
chip reads it twice). One JSON line per cell and a table last.

    python -m tools.perf.prefill_budget [--shapes 4096x4096,...] [--m 4096] [--formats fp8_tensor:fp8,fp8_block:fp8]
        [--out budget.jsonl]
"""

from __future__ import annotations

from tools.perf.probe_harness import Probe, parser
from tools.perf.report import md_table

TARGET_TFLOPS = {"fp8_tensor": 1150.0, "fp8_block": 1000.0}
GRANULARITY = {"fp8_tensor": "per_tensor", "fp8_block": "per_token_group_128", "fp8_row": "per_token"}


def _gemm_call(fmt: str, xq, xs, copies):
    """run(i): the route's GEMM alone on weight copy i, as dispatch.torch_candidates calls it (bf16 out)."""
    import torch

    if fmt == "fp8_tensor":
        return lambda i: torch._scaled_mm(xq, copies[i].qdata.t(), scale_a=xs, scale_b=copies[i].scale,
                                          out_dtype=torch.bfloat16)
    if fmt == "fp8_row":
        return lambda i: torch._scaled_mm(xq, copies[i].qdata.t(), scale_a=xs, scale_b=copies[i].scale.view(1, -1),
                                          out_dtype=torch.bfloat16)
    xs_cm = xs.t().contiguous().t()  # blockwise: [M, K/128] column-major x scales, the weight's [N/128, K/128] .t()
    return lambda i: torch._scaled_mm(xq, copies[i].qdata.t(), scale_a=xs_cm, scale_b=copies[i].scale.t(),
                                      out_dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> None:
    import dispatch
    from dispatch.formats import ActGranularity
    from dispatch.torch_candidates import quantize_act
    from tools.perf.timing import measure_ceilings

    ap = parser(__doc__, m="4096", formats="fp8_tensor:fp8,fp8_block:fp8",
                shapes="6144x4096,4096x4096,28672x4096,4096x14336,128256x4096,8192x8192,6656x2560,8192x2560")
    args = ap.parse_args(argv)
    probe = Probe(args)
    copy_gbps = measure_ceilings(probe.timer, "cuda").copy_gbps
    print(f"copy {copy_gbps:.1f} GB/s", flush=True)
    for c in probe.cells("fp8"):
        fmt = c.fmt.value
        flops = 2.0 * c.m * c.n * c.k
        g = ActGranularity(GRANULARITY[fmt])
        xq, xs = quantize_act(c.x, g)  # the routes' quantizer (the Triton kernel on GPUs)
        # the route and its GEMM in alternating order, best of two rounds each (one after the other, a large GEMM
        # read up to 6 % apart from its own route in session 33's first run: clocks drift under sustained load)
        us = probe.time_variants({"route": lambda i: dispatch.linear(c.x, c.ws.copies[i]),
                                  "gemm": _gemm_call(fmt, xq, xs, c.ws.copies)}, c.ws.ncopies)
        us["quant"] = probe.timer.time(lambda i: quantize_act(c.x, g), 1, probe.policy).best_us
        x_bytes = c.x.numel() * c.x.element_size()
        one_read_us = (x_bytes + c.x.numel()) / (copy_gbps * 1e3)  # read x, write one byte a value
        target_us = flops / (TARGET_TFLOPS.get(fmt, float("nan")) * 1e6)
        row = {"fmt": fmt, "act": c.act.value, "n": c.n, "k": c.k, "m": c.m, "copy_gbps": copy_gbps, "us": us,
               "tflops": {k: flops / (v * 1e6) for k, v in us.items()},
               "decision": dispatch.explain(c.x, c.ws.copies[0]).candidate_id,
               "target_us": target_us, "quant_allowed_us": target_us - us["gemm"], "quant_one_read_us": one_read_us,
               "quant_two_reads_us": one_read_us + x_bytes / (copy_gbps * 1e3)}
        probe.emit(row, f"{fmt} {c.n}x{c.k} M={c.m}: route {us['route']:.1f} us ({row['tflops']['route']:.0f} TFLOP/s), "
                        f"gemm {us['gemm']:.1f} ({row['tflops']['gemm']:.0f}), quant {us['quant']:.1f}; target allows "
                        f"the quantizer {row['quant_allowed_us']:.1f} us, one read of x takes {one_read_us:.1f}")
    rows = [(r["fmt"], f"{r['n']}x{r['k']}", f"{r['tflops']['route']:.0f}", f"{r['tflops']['gemm']:.0f}",
             f"{r['us']['quant']:.1f}", f"{r['us']['route'] - r['us']['gemm']:.1f}", f"{r['quant_allowed_us']:.1f}",
             f"{r['quant_one_read_us']:.1f}", f"{r['quant_two_reads_us']:.1f}") for r in probe.rows]
    print("\n" + md_table(["format", "N x K", "route TFLOP/s", "gemm alone TFLOP/s", "quant us", "route - gemm us",
                            "quant allowed us", "one read + write us", "two reads + write us"], rows))


if __name__ == "__main__":
    main()
