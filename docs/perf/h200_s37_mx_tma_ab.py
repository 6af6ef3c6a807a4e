"""Session 37 A/B (call 3; on c59d4ae, `git apply docs/perf/h200_s37_mx_tma.patch` first; measured, not shipped): the
wgmma W8A16 GEMM's MX scale codes through the pipeline's tensor copies (the patch's path where K % 512 == 0) against
per-thread global loads (the shipped path), at the tables' mxfp8 configs, with fp8_row at the same config and bf16 as
references; bit-identical outputs checked per cell; alternating order, one process.
`python3 docs/perf/h200_s37_mx_tma_ab.py`"""
import torch

import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

applies = _wgmma_gemm.mx_tma_applies
C = WgmmaGemmConfig
CELLS = [(1024, 6144, 4096, C(208, 2, 4, 1, 1)), (1024, 6656, 2560, C(208, 2, 4, 1, 1)),
         (1024, 4096, 4096, C(256, 2, 4, 1, 1)), (1024, 28672, 4096, C(256, 2, 4, 1, 1)),
         (1024, 8192, 2560, C(256, 2, 5, 1, 1)), (256, 6144, 4096, C(256, 2, 4, 2, 1, True)),
         (256, 4096, 4096, C(128, 2, 6, 2, 2, True)), (256, 28672, 4096, C(256, 2, 5, 1, 2)),
         (256, 8192, 8192, C(256, 2, 4, 2, 1, True)), (256, 4096, 14336, C(256, 2, 4, 4, 1)),
         (4096, 6144, 4096, C(256, 2, 4, 1, 1)), (4096, 8192, 2560, C(256, 2, 4, 1, 1))]
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=3000.0, min_calls=10, max_calls=200, replays=7, eager_iters=3)
print("| M | N x K | cfg | bf16 us | fp8_row us | mxfp8 loads us | mxfp8 copies us | copies / loads | mx / row | same |")
for m, n, k, c in CELLS:
    w = make_weight(n, k, "cuda")
    x = make_activation(m, k, "cuda")
    sets = {f: build_weight_set(w, f, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
            for f in (Format.FP8_ROW, Format.MXFP8)}
    bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
    runs = [("row", Format.FP8_ROW, True), ("loads", Format.MXFP8, False), ("copies", Format.MXFP8, True)]
    outs = {}
    for name, f, tma in runs:
        _wgmma_gemm.mx_tma_applies = applies if tma else (lambda qw: False)
        outs[name] = w8a16_wgmma_gemm(x, sets[f].copies[0], None, torch.bfloat16, c)
    same = torch.equal(outs["loads"], outs["copies"])
    t = {name: [] for name, *_ in runs}
    for rep in range(2):
        for name, f, tma in (runs if rep == 0 else runs[::-1]):
            _wgmma_gemm.mx_tma_applies = applies if tma else (lambda qw: False)
            ws = sets[f]
            t[name].append(timer.time(lambda i, ws=ws, c=c, x=x: w8a16_wgmma_gemm(x, ws.copies[i], None,
                                                                                 torch.bfloat16, c),
                                      ws.ncopies, pol).us)
    _wgmma_gemm.mx_tma_applies = applies
    bf = timer.time(lambda i, bw=bw: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
    b = {name: min(v) for name, v in t.items()}
    print(f"| {m} | {n}x{k} | {c.bm},{c.wgs},{c.stages},{c.split},{c.depth},{int(c.slice_cluster)} | {bf:.2f} | "
          f"{b['row']:.2f} | {b['loads']:.2f} | {b['copies']:.2f} | {b['copies'] / b['loads']:.3f} | "
          f"{b['copies'] / b['row']:.3f} | {same} |", flush=True)
    del sets, bw
    torch.cuda.empty_cache()
