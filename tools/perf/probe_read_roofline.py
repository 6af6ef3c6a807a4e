"""How close to the copy rate can anything read a decode weight's bytes? A pure-read ceiling per size, timed on the GPU.

Issues 4 and 7 ask decode at M <= 16 on the large shapes for >= 90 % of the measured copy rate (`measure_ceilings`:
an SM kernel copying 1 GiB). A decode GEMV reads each weight byte once, so its ceiling on a given weight is the
fastest kernel that only reads those bytes, launched back to back the same way (CUDA-graph replay over copies rotating
through > 3.3x L2, median), which includes the launch, the ramp-up and the tail that a 1 GiB copy amortizes. This
probe times, per shape's fp8 byte count (N x K):
  read      : tools/perf/csrc/read_roofline.cu, 16-byte loads over a grid-stride loop, the best of grids of 1, 2, 4, 8
              CTAs of 256 threads per SM x 2, 4, 8 loads in flight per thread
  fp8_row   : dispatch.linear, fp8_row/bf16 at M = 1 (the shipped table's pick)
  fp8_tensor: dispatch.linear, fp8_tensor/fp8 at M = 1 (activation quantization included)
each as a percentage of the same run's copy rate. A table last.

    python -m tools.perf.probe_read_roofline [--shapes 4096x14336,...] [--out probe.jsonl]
"""

from __future__ import annotations

import argparse
import json
import pathlib

SHAPES = "4096x14336,8192x8192,28672x4096,128256x4096"
SOURCE = "read_roofline.cu"


def main(argv: list[str] | None = None) -> None:
    import torch

    import dispatch
    from dispatch.formats import Act, Format
    from dispatch.weight_quant import quantize
    from kernels_cuda import _driver, _launch, compiler
    from kernels_cuda._driver import ptr
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, measure_ceilings, warm_gpu
    from tools.perf.workload import build_weight_set, make_activation, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
    policy = TimingPolicy(target_graph_us=2000.0, min_calls=20, max_calls=300, replays=5, eager_iters=3)
    # The kernel lives beside this tool, not in the product's csrc: compiled as if it were there (same headers).
    real_sources = compiler.sources
    text = (pathlib.Path(__file__).parent / "csrc" / SOURCE).read_text()
    compiler.sources = lambda: {**real_sources(), SOURCE: text}
    dev = torch.cuda.current_device()
    arch = _launch.device_arch(dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    kernels = {u: _launch._kernel(SOURCE, "rr_read", (("RR_UNROLL", u),), dev, arch) for u in (2, 4, 8)}
    sink = torch.zeros(1, dtype=torch.int64, device="cuda")
    warm_gpu(1.0)
    copy = measure_ceilings(timer).copy_gbps
    print(f"copy ceiling (1 GiB SM copy, this run): {copy:.1f} GB/s; {sms} SMs, L2 {l2 >> 20} MiB", flush=True)
    out = open(a.out, "a") if a.out else None
    rows = []
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        nbytes = n * k
        copies = [torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
                  for _ in range(rot.copies(nbytes, l2))]
        best = (float("inf"), None)
        for u, kern in kernels.items():
            for per_sm in (1, 2, 4, 8):
                def call(i, kern=kern, grid=(sms * per_sm, 1, 1), c=copies):
                    _driver.launch(kern, grid, (256, 1, 1), (ptr(c[i]), nbytes // 16, -1, ptr(sink)))
                t = timer.time(call, len(copies), policy).best_us
                best = min(best, (t, f"{per_sm} CTAs/SM, {u} loads"), key=lambda b: b[0])
        del copies
        row = {"n": n, "k": k, "bytes": nbytes, "copy_gbps": copy, "read_us": best[0], "read_config": best[1]}
        w = make_weight(n, k, "cuda")
        x = make_activation(1, k, "cuda")
        for fmt, act in ((Format.FP8_ROW, Act.BF16), (Format.FP8_TENSOR, Act.FP8)):
            ws = build_weight_set(w, fmt, act, l2_bytes=l2, rotation=rot, quantize=quantize)
            q = ws.copies
            row[f"{fmt.value}_us"] = timer.time(lambda i, q=q: dispatch.linear(x, q[i]), ws.ncopies, policy).best_us
            row[f"{fmt.value}_bytes"] = q[0].nbytes
            del ws, q
        del w
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()

    def pct(nb: int, us: float) -> float:
        return 100.0 * nb / (us * 1e-6) / 1e9 / copy

    print("\n| shape | fp8 MB | pure read us | % copy | best read grid | fp8_row/bf16 M=1 us | % copy | "
          "fp8_tensor/fp8 M=1 us | % copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']}x{r['k']} | {r['bytes'] / 1e6:.1f} | {r['read_us']:.2f} | {pct(r['bytes'], r['read_us']):.1f} | "
              f"{r['read_config']} | {r['fp8_row_us']:.2f} | {pct(r['fp8_row_bytes'], r['fp8_row_us']):.1f} | "
              f"{r['fp8_tensor_us']:.2f} | {pct(r['fp8_tensor_bytes'], r['fp8_tensor_us']):.1f} |")


if __name__ == "__main__":
    main()
