"""Session 37 A/B (call 5): the wgmma W8A16 GEMM's mxfp8 decode with folded multipliers only (FP8D_MX_NOBIG 1: one IMAD
a scale code, no warp vote, no branch for codes above FOLD_MAX; the weight must have none) against the shipped decode,
at the tables' mxfp8 configs, with fp8_row at the same config and bf16 as references; outputs compared bit for bit
(the bench weights have no code above FOLD_MAX). Alternating order, one process.
`git apply docs/perf/h200_s37_mx_nobig.patch && python3 docs/perf/h200_s37_mx_nobig_ab.py`"""
import concurrent.futures
import os

import torch

import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.precompile_cuda import _run_safe
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

VARIANTS = [1]
base_module = _wgmma_gemm.module
X = {"v": 0}


def module(fmt, cfg):
    name, entry, d = base_module(fmt, cfg)
    if fmt is Format.MXFP8 and X["v"]:
        d = tuple(sorted(dict(d, FP8D_MX_NOBIG=X["v"]).items()))
    return name, entry, d


def use(v):
    X["v"] = v
    _wgmma_gemm._spec.cache_clear()


_wgmma_gemm.module = module
C = WgmmaGemmConfig
# (M, N, K, config): the tables' mxfp8 configs at the cells below bf16 (M = 1024, 256) and two at M = 4096
CELLS = [(1024, 6144, 4096, C(208, 2, 4, 1, 1)), (1024, 6656, 2560, C(208, 2, 4, 1, 1)),
         (1024, 4096, 4096, C(256, 2, 4, 1, 1)), (1024, 28672, 4096, C(256, 2, 4, 1, 1)),
         (1024, 8192, 2560, C(256, 2, 5, 1, 1)), (1024, 128256, 4096, C(256, 2, 4, 1, 1)),
         (256, 6144, 4096, C(256, 2, 4, 2, 1, True)), (256, 4096, 4096, C(128, 2, 6, 2, 2, True)),
         (256, 28672, 4096, C(256, 2, 5, 1, 2)), (256, 6656, 2560, C(256, 2, 4, 2, 1, True)),
         (256, 8192, 2560, C(256, 2, 4, 2, 1, True)), (256, 8192, 8192, C(256, 2, 4, 2, 1, True)),
         (256, 128256, 4096, C(256, 2, 5, 1, 2)), (256, 4096, 14336, C(256, 2, 4, 4, 1)),
         (4096, 6144, 4096, C(256, 2, 4, 1, 1)), (4096, 8192, 2560, C(256, 2, 4, 1, 1))]
items = []
for *_, c in CELLS:
    for fmt, vs in ((Format.FP8_ROW, [0]), (Format.MXFP8, [0] + VARIANTS)):
        for v in vs:
            use(v)
            name, _, d = module(fmt, c)
            it = ("wgmma_gemm", name, d, "sm_90a")
            if it not in items:
                items.append(it)
with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as ex:
    errs = [e for e in ex.map(_run_safe, items) if e]
print(f"compiled {len(items) - len(errs)} of {len(items)} modules {errs[:2]}", flush=True)

timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=3000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
print("| M | N x K | cfg | bf16 | fp8_row | mxfp8 | " + " | ".join(f"mx v{v}" for v in VARIANTS) + " | mx/row | nobig/mx | same |")
for m, n, k, c in CELLS:
    w = make_weight(n, k, "cuda")
    x = make_activation(m, k, "cuda")
    sets = {f: build_weight_set(w, f, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
            for f in (Format.FP8_ROW, Format.MXFP8)}
    bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
    outs = []
    for v in (0, 1):
        use(v)
        outs.append(w8a16_wgmma_gemm(x, sets[Format.MXFP8].copies[0], None, torch.bfloat16, c))
    same = torch.equal(*outs)
    runs = [(Format.FP8_ROW, 0)] + [(Format.MXFP8, v) for v in [0] + VARIANTS]
    t = {r: [] for r in runs}
    for rep in range(2):
        for f, v in (runs if rep == 0 else runs[::-1]):
            use(v)
            ws = sets[f]
            t[(f, v)].append(timer.time(lambda i, ws=ws, c=c, x=x: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c),
                                        ws.ncopies, pol).us)
    bf = timer.time(lambda i, bw=bw: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
    b = {r: min(v) for r, v in t.items()}
    row, mx = b[(Format.FP8_ROW, 0)], b[(Format.MXFP8, 0)]
    cols = " | ".join(f"{b[(Format.MXFP8, v)]:.2f}" for v in VARIANTS)
    print(f"| {m} | {n}x{k} | {c.bm},{c.wgs},{c.stages},{c.split},{c.depth},{int(c.slice_cluster)} | {bf:.2f} | "
          f"{row:.2f} | {mx:.2f} | {cols} | {mx / row:.3f} | "
          f"{b[(Format.MXFP8, 1)] / mx:.3f} | {same} |", flush=True)
    del sets, bw
    torch.cuda.empty_cache()
