"""Session 35 experiment: the copy ring alone (no decode, no wgmma) with and without x shared by a cluster of 2
(multicast, blocking refill), and the full kernel both ways: does sharing x shorten the copies?
Needs docs/perf/h200_s35_wgmma_cluster_multicast_blocking.patch and h200_s35_wgmma_skeleton_exp.patch applied; run from the repository root."""
import torch
import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm as G
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import build_weight_set, make_activation, make_weight

orig = G.module
mode = {"v": ()}
def module(fmt, cfg):
    name, entry, d = orig(fmt, cfg)
    return name, entry, tuple(sorted(d + mode["v"]))
G.module = module
SK = (("FP8D_EXP_NODECODE", 1), ("FP8D_EXP_NOMMA", 1))
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=5, eager_iters=3)
for shape, m, c1, c2 in (("4096x4096", 256, (128, 1, 6, 1, 2), (128, 1, 7, 1, 2)),
                         ("6144x4096", 256, (128, 2, 6, 1, 2), (128, 2, 7, 1, 2)),
                         ("4096x4096", 1024, (256, 2, 5, 1, 1), (256, 2, 5, 1, 1))):
    n, k = (int(v) for v in shape.split("x"))
    w = make_weight(n, k, "cuda")
    ws = build_weight_set(w, Format.FP8_ROW, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
    x = make_activation(m, k, "cuda")
    runs = {"c1": (WgmmaGemmConfig(*c1, 1), ()), "c2": (WgmmaGemmConfig(*c2, 2), ()),
            "c1 copies only": (WgmmaGemmConfig(*c1, 1), SK), "c2 copies only": (WgmmaGemmConfig(*c2, 2), SK)}
    us = {}
    for rnd in range(2):
        for name, (c, ex) in (runs.items() if rnd == 0 else list(runs.items())[::-1]):
            mode["v"] = ex
            G._spec.cache_clear()
            t = timer.time(lambda i, c=c: G.w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c), ws.ncopies, pol).us
            us[name] = min(us.get(name, t), t)
    print(f"| {shape} M={m} | {c1} / {c2} | " + " | ".join(f"{k} {v:.1f}" for k, v in us.items()) + " |", flush=True)
