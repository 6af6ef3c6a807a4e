"""Session 35 experiment (not shipped): the wgmma W8A16 GEMM at M = 256 with its decode removed (FP8D_EXP_NODECODE:
the operand is junk bits, no code loads) or its wgmmas removed (FP8D_EXP_NOMMA), against the shipped kernel: which part
sets the pace of a 128 x 64 tile (one warpgroup) and of a 128 x 128 one. Graph replay over weight copies, median.
Needs docs/perf/h200_s35_wgmma_skeleton_exp.patch applied (its experiment defines); run from the repository root."""
import torch
import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm as G
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import build_weight_set, make_activation, make_weight

orig = G.module
EXP = {"": (), "nodecode": (("FP8D_EXP_NODECODE", 1),), "nomma": (("FP8D_EXP_NOMMA", 1),),
       "neither": (("FP8D_EXP_NODECODE", 1), ("FP8D_EXP_NOMMA", 1))}
mode = {"v": ""}
def module(fmt, cfg):
    name, entry, d = orig(fmt, cfg)
    return name, entry, tuple(sorted(d + EXP[mode["v"]]))
G.module = module
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=5, eager_iters=3)
rows = []
for shape, cfgs in (("4096x4096", [WgmmaGemmConfig(128, 1, 6, 1, 2), WgmmaGemmConfig(128, 2, 6, 1, 2)]),
                    ("6144x4096", [WgmmaGemmConfig(128, 2, 6, 1, 2), WgmmaGemmConfig(128, 1, 6, 1, 2)]),
                    ("28672x4096", [WgmmaGemmConfig(256, 2, 5, 1, 1), WgmmaGemmConfig(128, 1, 6, 1, 2)])):
    n, k = (int(v) for v in shape.split("x"))
    w = make_weight(n, k, "cuda")
    ws = build_weight_set(w, Format.FP8_ROW, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
    x = make_activation(256, k, "cuda")
    for cfg in cfgs:
        us = {}
        for rnd in range(2):
            for v in (EXP if rnd == 0 else list(EXP)[::-1]):
                mode["v"] = v
                G._spec.cache_clear()
                t = timer.time(lambda i, c=cfg: G.w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c), ws.ncopies, pol).us
                us[v] = min(us.get(v, t), t)
        flops = 2 * 256 * n * k
        print(f"| {shape} | {cfg.bm}x{cfg.bn} s{cfg.stages} d{cfg.depth} | " + " | ".join(f"{us[v]:.1f}" for v in EXP) +
              f" | {flops / us[''] / 1e6:.0f} |", flush=True)
print("columns: shipped, no decode, no wgmma, neither (us); TFLOP/s of the shipped kernel")
