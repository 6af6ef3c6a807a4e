"""Session 38 probe: does the graph launch's host latency inflate the timer's per-call time for routes that get small
graphs? The timer sizes a graph from the eager time (tools/perf/timing.py: ~3000 us of eager calls), so a route whose
eager call is slow on the host (dispatch.linear on the Triton GEMM: ~100 us eager for a 12 us kernel) gets ~26 calls
a graph, bf16 F.linear ~100. Each cell timed four ways in one process, alternating order, min of two rounds:
  A  the bench's policy (target 3000 us, min 20 calls);   B  the same with at least 300 calls a graph;
  C  A with the device kept busy while the host launches each replay (TimingPolicy.hide_launch);   D  B with it.
Needs `git apply docs/perf/h200_s38_timer_hide_launch.patch` (the field was dropped after this probe).
`python3 docs/perf/h200_s38_timer_probe.py`"""
import dataclasses

import torch

import dispatch
from dispatch.formats import Act, Format
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

CELLS = [("mxfp8", 64, 4096, 4096), ("mxfp8", 64, 6656, 2560), ("mxfp8", 64, 8192, 2560), ("fp8_row", 64, 4096, 4096),
         ("bf16", 64, 4096, 4096), ("bf16", 64, 6656, 2560), ("fp8_row", 1, 4096, 4096), ("fp8_tensor", 16, 4096, 4096),
         ("mxfp8", 256, 6656, 2560), ("bf16", 256, 6656, 2560)]
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
A = TimingPolicy(target_graph_us=3000.0, min_calls=20, max_calls=300, replays=7, eager_iters=10)
B = dataclasses.replace(A, min_calls=300, max_calls=400)
POL = {"A": A, "B": B, "C": dataclasses.replace(A, hide_launch=True), "D": dataclasses.replace(B, hide_launch=True)}


def cell(fmt: str, m: int, n: int, k: int) -> None:
    w = make_weight(n, k, "cuda")
    x = make_activation(m, k, "cuda")
    if fmt == "bf16":
        copies = bf16_copies(w, l2_bytes=l2, rotation=rot)
        ncopies = len(copies)

        def call(i):
            return torch.nn.functional.linear(x, copies[i])
        pick = "F.linear"
    else:
        act = Act.FP8 if fmt == "fp8_tensor" else Act.BF16
        ws = build_weight_set(w, Format(fmt), act, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
        ncopies = ws.ncopies

        def call(i):
            return dispatch.linear(x, ws.copies[i])
        pick = dispatch.explain(x, ws.qw).candidate_id
    t = {name: [] for name in POL}
    calls = {}
    for rnd in range(2):
        for name in (list(POL) if rnd == 0 else list(POL)[::-1]):
            r = timer.time(call, ncopies, POL[name])
            t[name].append(r.us)
            calls[name] = r.calls
    b = {name: min(v) for name, v in t.items()}
    print(f"| {fmt} | {m} | {n}x{k} | {pick} | " + " | ".join(f"{b[q]:.2f} ({calls[q]})" for q in POL)
          + f" | {b['A'] / b['D']:.3f} |", flush=True)


print("| format | M | N x K | route | A us (calls) | B | C | D | A / D |")
print("|---|---|---|---|---|---|---|---|---|")
for c in CELLS:
    cell(*c)
    torch.cuda.empty_cache()
