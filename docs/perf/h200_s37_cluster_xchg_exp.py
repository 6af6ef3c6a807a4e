"""Session 37 experiment (call 1; `git apply docs/perf/h200_s37_experiments.patch` first: it holds both of this session's experiments): the clustered K slices'
exchange of accumulators as shipped (FP8D_CLUSTER_XCHG 0: per-thread remote stores between two cluster barriers)
against variants given as arguments: 2, bulk copies (cp.async.bulk shared::cta -> shared::cluster, prepared in session
36); 3, asynchronous remote stores (st.async) completing on the receiver's mbarrier. Each variant is checked bit for bit
against the shipped exchange and against the reference, then timed at M = 256 at the tables' clustered configs, in
alternating order in one process. `python3 docs/perf/h200_s37_cluster_xchg_exp.py 2 3`"""
import concurrent.futures
import os
import sys

import torch

import dispatch
from dispatch import reference
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.precompile_cuda import _run_safe
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight, rel_err

VARIANTS = [int(a) for a in sys.argv[1:]] or [2, 3]
base_module = _wgmma_gemm.module
X = {"v": 0}


def module(fmt, cfg):
    name, entry, d = base_module(fmt, cfg)
    if cfg.slice_cluster and X["v"]:
        d = tuple(sorted(dict(d, FP8D_CLUSTER_XCHG=X["v"]).items()))
    return name, entry, d


def use(v):
    X["v"] = v
    _wgmma_gemm._spec.cache_clear()


_wgmma_gemm.module = module
C = WgmmaGemmConfig
# (format, N, K, config): the tables' clustered M = 256 entries, and the 256-token tile for two unclustered keys
CELLS = [("fp8_row", 4096, 4096, C(128, 2, 6, 2, 2, True)), ("fp8_row", 4096, 14336, C(128, 2, 6, 2, 2, True)),
         ("fp8_row", 6144, 4096, C(256, 2, 4, 2, 1, True)), ("fp8_row", 8192, 8192, C(256, 2, 5, 2, 2, True)),
         ("fp8_row", 6656, 2560, C(256, 2, 4, 2, 1, True)), ("fp8_row", 8192, 2560, C(256, 2, 4, 2, 1, True)),
         ("mxfp8", 4096, 4096, C(128, 2, 6, 2, 2, True)), ("mxfp8", 6144, 4096, C(256, 2, 5, 2, 2, True)),
         ("mxfp8", 6656, 2560, C(256, 2, 4, 2, 1, True)), ("mxfp8", 8192, 2560, C(256, 2, 4, 2, 1, True)),
         ("mxfp8", 8192, 8192, C(256, 2, 4, 2, 1, True)), ("mxfp8", 4096, 14336, C(128, 2, 6, 4, 2, True))]
CHECK_CFGS = sorted({c for *_, c in CELLS} | {C(208, 2, 4, 3, 1, True)}, key=str)

# Compile every module first, in parallel (a variant whose shared memory does not fit fails its static_assert).
items = []
for fmt in ("fp8_row", "mxfp8"):
    for c in CHECK_CFGS:
        for v in [0] + VARIANTS:
            use(v)
            name, _, d = module(Format(fmt), c)
            items.append(("wgmma_gemm", name, d, "sm_90a"))
with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as ex:
    errs = list(ex.map(_run_safe, items))
broken = {(it[1], it[2]) for it, e in zip(items, errs) if e}
print(f"compiled {len(items) - len(broken)} of {len(items)} modules", flush=True)


def compiles(fmt, c, v):
    use(v)
    name, _, d = module(Format(fmt), c)
    return (name, d) not in broken


bad = 0
for fmt in ("fp8_row", "mxfp8"):
    for (m, n, k) in ((77, 1000, 1024), (300, 520, 2048), (256, 4096, 4096)):
        qw = dispatch.quantize(make_weight(n, k, "cuda"), fmt, act="bf16")
        x = make_activation(m, k, "cuda")
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        ref = reference.linear(x, qw, b)
        for c in CHECK_CFGS:
            use(0)
            y0 = w8a16_wgmma_gemm(x, qw, b, torch.bfloat16, c)
            for v in VARIANTS:
                if not compiles(fmt, c, v):
                    print(f"check {fmt} {c} variant {v}: does not fit, skipped")
                    continue
                use(v)
                y = w8a16_wgmma_gemm(x, qw, b, torch.bfloat16, c)
                torch.cuda.synchronize()
                e, same = rel_err(y, ref), torch.equal(y0, y)
                bad += not (e < 1e-2 and same)
                if not (e < 1e-2 and same):
                    print(f"check {fmt} {m}x{n}x{k} {c} variant {v}: rel_err {e:.2e} equal to shipped {same} FAILED")
print(f"checks: {bad} failed", flush=True)

timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
print("| fmt | N x K | cfg | shipped us | " + " | ".join(f"v{v} us | ratio" for v in VARIANTS) + " | bf16 us |")
for fmt, n, k, c in CELLS:
    w = make_weight(n, k, "cuda")
    ws = build_weight_set(w, Format(fmt), Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
    x = make_activation(256, k, "cuda")
    bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
    vs = [0] + [v for v in VARIANTS if compiles(fmt, c, v)]
    t = {v: [] for v in vs}
    for r in range(3):
        for v in (vs if r % 2 == 0 else vs[::-1]):
            use(v)
            t[v].append(timer.time(lambda i, ws=ws, c=c: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c),
                                   ws.ncopies, pol).us)
    bf = timer.time(lambda i, bw=bw: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
    a = min(t[0])
    cols = " | ".join(f"{min(t[v]):.2f} | {min(t[v]) / a:.3f}" if v in t else "- | -" for v in VARIANTS)
    print(f"| {fmt} | {n}x{k} | {c.bm},{c.wgs},{c.stages},{c.split},{c.depth} | {a:.2f} | {cols} | {bf:.2f} |", flush=True)
    del ws, bw
    torch.cuda.empty_cache()
