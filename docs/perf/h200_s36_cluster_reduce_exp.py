"""Session 36 experiment (call 3; `git apply docs/perf/h200_s36_cluster_reduce_exp.patch` first): where the clustered
K slices' fixed cost goes. FP8D_EXP_REDUCE 0: shipped reduce-scatter; 1: the two cluster barriers without the remote
stores and sums; 2: neither (wrong sums: timing only). fp8_row, N = 8192, M = 256, K sweep; unsplit references in the same process."""
import torch

import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import build_weight_set, make_activation, make_weight

base_module = _wgmma_gemm.module
EXP = {"v": 0}


def module(fmt, cfg):
    name, entry, d = base_module(fmt, cfg)
    if cfg.slice_cluster and EXP["v"]:
        d = tuple(sorted(dict(d, FP8D_EXP_REDUCE=EXP["v"]).items()))
    return name, entry, d


_wgmma_gemm.module = module
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
cl = WgmmaGemmConfig(256, 2, 4, 2, slice_cluster=True)
refs = [WgmmaGemmConfig(256, 2, 4), WgmmaGemmConfig(128, 2, 6, depth=2)]
print("| K | exp0 (shipped) | exp1 (barriers only) | exp2 (no reduction) | 256x128 unsplit | 128x128 unsplit |")
for k in (256, 1280, 2560, 5120):
    w = make_weight(8192, k, "cuda")
    ws = build_weight_set(w, Format.FP8_ROW, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
    x = make_activation(256, k, "cuda")
    row = []
    for rnd in range(2):
        t = {}
        for v in (0, 1, 2):
            EXP["v"] = v
            _wgmma_gemm._spec.cache_clear()
            t[v] = timer.time(lambda i: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, cl), ws.ncopies, pol).us
        for j, c in enumerate(refs):
            t[3 + j] = timer.time(lambda i, c=c: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c),
                                  ws.ncopies, pol).us
        row.append(t)
    print(f"| {k} | " + " | ".join(f"{min(r[v] for r in row):.2f}" for v in range(5)) + " |", flush=True)
