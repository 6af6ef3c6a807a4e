"""Session 38 probe: why the dispatched mxfp8 W8A16 path at M = 64 (the Triton GEMM, split K) ran 6-12 % slower in
the bench than the autotune measured the same candidate and config on three small shapes (fp8_row: within 2 %).
Per shape, in one process, alternating order, min of two rounds:
  dispatch   dispatch.linear over bench-built weight copies (prepared on their first call, as an engine's);
  direct     the candidate's run at the table's config over copies all prepared up front (as the autotune does);
  unfolded   dispatch.linear with the fold answer forced False (kernels_triton._gemm_launch.fold_ok);
then how many copies hold the fold answer True, and whether dispatch and unfolded give the same bits.
`python3 docs/perf/h200_s38_mx64_probe.py`"""
import torch

import dispatch
from dispatch import mx_fold, registry
from dispatch.formats import Act, Format
from kernels_triton import _gemm_launch
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

M = 64
SHAPES = [(4096, 4096), (8192, 2560), (6656, 2560), (8192, 8192), (6144, 4096)]
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=3000.0, min_calls=30, max_calls=400, replays=7, eager_iters=5)
real_fold_ok = _gemm_launch.fold_ok


def probe(n: int, k: int) -> None:
    w = make_weight(n, k, "cuda")
    x = make_activation(M, k, "cuda")
    bw = bf16_copies(w, l2_bytes=l2, rotation=rot)

    def fresh():
        return build_weight_set(w, Format.MXFP8, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)

    sets = {"dispatch": fresh(), "direct": fresh(), "unfolded": fresh()}
    e = dispatch.explain(x, sets["dispatch"].qw)
    cand = registry.get(e.candidate_id)
    cfg = e.decision.config
    prepared = [cand.prepare(c) for c in sets["direct"].copies]
    torch.cuda.synchronize()

    def call(name):
        ws = sets[name]
        if name == "direct":
            return lambda i: cand.run(x, ws.copies[i], prepared[i], None, torch.bfloat16, cfg)
        return lambda i: dispatch.linear(x, ws.copies[i])

    t = {name: [] for name in sets}
    for rnd in range(2):
        for name in (list(sets) if rnd == 0 else list(sets)[::-1]):
            _gemm_launch.fold_ok = (lambda qw: False) if name == "unfolded" else real_fold_ok
            t[name].append(timer.time(call(name), sets[name].ncopies, pol).us)
    _gemm_launch.fold_ok = lambda qw: False
    y_unf = dispatch.linear(x, sets["unfolded"].copies[0])
    _gemm_launch.fold_ok = real_fold_ok
    y = dispatch.linear(x, sets["dispatch"].copies[0])
    folded = sum(bool(c._cache.get(mx_fold.KEY)) for c in sets["dispatch"].copies)
    bf = timer.time(lambda i: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
    b = {name: min(v) for name, v in t.items()}
    print(f"| {n}x{k} | {e.candidate_id} {cfg} | {bf:.2f} | {b['dispatch']:.2f} | {b['direct']:.2f} | "
          f"{b['unfolded']:.2f} | {b['dispatch'] / b['direct']:.3f} | {folded} of {len(sets['dispatch'].copies)} | "
          f"{torch.equal(y, y_unf)} |", flush=True)


print("| N x K | pick | bf16 us | dispatch us | direct us | unfolded us | dispatch / direct | copies folded | same bits |")
print("|---|---|---|---|---|---|---|---|---|")
for n, k in SHAPES:
    probe(n, k)
    torch.cuda.empty_cache()
