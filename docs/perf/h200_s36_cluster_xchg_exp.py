"""Session 36 experiment (call 4; `git apply docs/perf/h200_s36_cluster_xchg_global.patch` first): the clustered K
slices' exchange through distributed shared memory (FP8D_CLUSTER_XCHG 0) or through global memory / L2 (1). Checks (1)
against the reference, then times both at M = 256 in one process. `python3 docs/perf/h200_s36_cluster_xchg_exp.py 2`
compares the bulk-copy exchange instead (FP8D_CLUSTER_XCHG 2, `git apply docs/perf/h200_s36_cluster_xchg_bulk.patch`;
prepared in session 36, not run)."""
import sys

import torch

import dispatch
from dispatch import reference
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight, rel_err

base_module = _wgmma_gemm.module
X = {"v": 0}
VARIANT = int(sys.argv[1]) if len(sys.argv) > 1 else 1  # 1: through L2 (call 4); 2: bulk copies


def module(fmt, cfg):
    name, entry, d = base_module(fmt, cfg)
    if cfg.slice_cluster and X["v"]:
        d = tuple(sorted(dict(d, FP8D_CLUSTER_XCHG=X["v"]).items()))
    return name, entry, d


def use(v):
    X["v"] = v
    _wgmma_gemm._spec.cache_clear()


_wgmma_gemm.module = module
cfgs = [WgmmaGemmConfig(256, 2, 4, 2, slice_cluster=True), WgmmaGemmConfig(128, 2, 6, 2, 2, True),
        WgmmaGemmConfig(208, 2, 4, 3, slice_cluster=True), WgmmaGemmConfig(128, 2, 6, 4, 2, True),
        WgmmaGemmConfig(256, 2, 5, 2, 2, True)]
bad = 0
for fmt in ("fp8_row", "mxfp8"):
    for (m, n, k) in ((77, 1000, 1024), (300, 520, 2048), (256, 4096, 4096)):
        qw = dispatch.quantize(make_weight(n, k, "cuda"), fmt, act="bf16")
        x = make_activation(m, k, "cuda")
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        ref = reference.linear(x, qw, b)
        for c in cfgs:
            ys = []
            for v in (0, VARIANT):
                use(v)
                ys.append(w8a16_wgmma_gemm(x, qw, b, torch.bfloat16, c))
            e = rel_err(ys[1], ref)
            same = torch.equal(ys[0], ys[1])
            ok = e < 1e-2 and same
            bad += not ok
            if not ok:
                print(f"check {fmt} {m}x{n}x{k} {c}: rel_err {e:.2e} equal to DSMEM {same} FAILED")
print(f"checks: {bad} failed")
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
print(f"| fmt | N x K | cfg | DSMEM us | variant {VARIANT} us | ratio | bf16 us |")
for fmt in ("fp8_row", "mxfp8"):
    for (n, k, c) in ((8192, 256, cfgs[0]), (8192, 2560, cfgs[0]), (4096, 4096, cfgs[1]), (8192, 8192, cfgs[4]),
                      (6144, 4096, cfgs[0]), (6656, 2560, cfgs[0]), (4096, 14336, cfgs[3])):
        w = make_weight(n, k, "cuda")
        ws = build_weight_set(w, Format(fmt), Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
        x = make_activation(256, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        t = {0: [], VARIANT: []}
        for r in range(2):
            for v in ((0, VARIANT) if r == 0 else (VARIANT, 0)):
                use(v)
                t[v].append(timer.time(lambda i, ws=ws, c=c: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c),
                                       ws.ncopies, pol).us)
        bf = timer.time(lambda i, bw=bw: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
        a, g = min(t[0]), min(t[VARIANT])
        print(f"| {fmt} | {n}x{k} | {c.bm},{c.wgs},{c.stages},{c.split},{c.depth} | {a:.2f} | {g:.2f} | {g / a:.3f} | "
              f"{bf:.2f} |", flush=True)
        del ws, bw
        torch.cuda.empty_cache()
