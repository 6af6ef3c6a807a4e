"""Session 37 A/B (call 9): the shipped wgmma W8A16 GEMM's folded mxfp8 decode (FP8D_MX_FOLD, taken where
dispatch.mx_fold says every scale code is at most 134: the bench weights) against its unfolded decode (mx_fold.fold_ok
patched to False), at the tables' mxfp8 configs, with fp8_row at the same config and bf16 as references; bit-identical
outputs checked per cell; alternating order, one process. `python3 docs/perf/h200_s37_mx_fold_ship_ab.py`"""
import torch

import dispatch
from dispatch.formats import Act, Format
from dispatch import mx_fold
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

fold_ok = mx_fold.fold_ok
C = WgmmaGemmConfig
CELLS = [(1024, 6144, 4096, C(208, 2, 4, 1, 1)), (1024, 6656, 2560, C(208, 2, 4, 1, 1)),
         (1024, 4096, 4096, C(256, 2, 4, 1, 1)), (1024, 28672, 4096, C(256, 2, 4, 1, 1)),
         (1024, 8192, 2560, C(256, 2, 5, 1, 1)), (256, 6144, 4096, C(256, 2, 4, 2, 1, True)),
         (256, 4096, 4096, C(128, 2, 6, 2, 2, True)), (256, 28672, 4096, C(256, 2, 5, 1, 2)),
         (256, 8192, 8192, C(256, 2, 4, 2, 1, True)), (256, 4096, 14336, C(256, 2, 4, 4, 1)),
         (4096, 6144, 4096, C(256, 2, 4, 1, 1)), (4096, 8192, 2560, C(256, 2, 4, 1, 1))]
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=3000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
print("| M | N x K | cfg | bf16 us | fp8_row us | mxfp8 unfolded us | mxfp8 folded us | folded / unfolded | mx / row | same |")
for m, n, k, c in CELLS:
    w = make_weight(n, k, "cuda")
    x = make_activation(m, k, "cuda")
    sets = {f: build_weight_set(w, f, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
            for f in (Format.FP8_ROW, Format.MXFP8)}
    bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
    runs = [("row", Format.FP8_ROW, True), ("unfolded", Format.MXFP8, False), ("folded", Format.MXFP8, True)]
    outs = {}
    for name, f, fold in runs:
        mx_fold.fold_ok = fold_ok if fold else (lambda qw: False)
        outs[name] = w8a16_wgmma_gemm(x, sets[f].copies[0], None, torch.bfloat16, c)
    same = torch.equal(outs["unfolded"], outs["folded"])
    t = {name: [] for name, *_ in runs}
    for rep in range(2):
        for name, f, fold in (runs if rep == 0 else runs[::-1]):
            mx_fold.fold_ok = fold_ok if fold else (lambda qw: False)
            ws = sets[f]
            t[name].append(timer.time(lambda i, ws=ws, c=c, x=x: w8a16_wgmma_gemm(x, ws.copies[i], None,
                                                                                 torch.bfloat16, c),
                                      ws.ncopies, pol).us)
    mx_fold.fold_ok = fold_ok
    bf = timer.time(lambda i, bw=bw: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
    b = {name: min(v) for name, v in t.items()}
    print(f"| {m} | {n}x{k} | {c.bm},{c.wgs},{c.stages},{c.split},{c.depth},{int(c.slice_cluster)} | {bf:.2f} | "
          f"{b['row']:.2f} | {b['unfolded']:.2f} | {b['folded']:.2f} | {b['folded'] / b['unfolded']:.3f} | "
          f"{b['folded'] / b['row']:.3f} | {same} |", flush=True)
    del sets, bw
    torch.cuda.empty_cache()
