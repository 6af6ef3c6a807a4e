"""Session 35 experiment: the cluster-2 wgmma GEMM against cluster 1, and cluster 2 without multicast (FP8D_EXP_NOMC:
the cluster launch alone), plus the driver's max active clusters.
Needs docs/perf/h200_s35_wgmma_cluster_multicast_blocking.patch applied (the cluster and FP8D_EXP_NOMC); run from the repository root."""
import ctypes
import torch
import dispatch
from dispatch.formats import Act, Format
from kernels_cuda import _wgmma_gemm as G, _driver
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
from tools.perf.workload import build_weight_set, make_activation, make_weight

orig_module, orig_xmap = G.module, G._x_map
mode = {"v": ""}
def module(fmt, cfg):
    name, entry, d = orig_module(fmt, cfg)
    return name, entry, tuple(sorted(d + ((("FP8D_EXP_NOMC", 1),) if mode["v"] == "nomc" else ())))
def xmap(addr, m, k, bm):
    return orig_xmap(addr, m, k, bm * 2 if mode["v"] == "nomc" else bm)
G.module, G._x_map = module, xmap

class LaunchConfig(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]
lib = _driver._libcuda()
timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=5, eager_iters=3)
for shape, m, base in (("4096x4096", 256, (128, 1, 8, 1, 2)), ("4096x4096", 1024, (256, 2, 5, 1, 1)),
                       ("6144x4096", 256, (128, 2, 7, 1, 2)), ("28672x4096", 256, (256, 2, 5, 1, 1))):
    n, k = (int(v) for v in shape.split("x"))
    w = make_weight(n, k, "cuda")
    ws = build_weight_set(w, Format.FP8_ROW, Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
    x = make_activation(m, k, "cuda")
    c1, c2 = WgmmaGemmConfig(*base, 1), WgmmaGemmConfig(*base, 2)
    mode["v"] = ""
    kern = G._spec(Format.FP8_ROW, c2, 0)
    cfg = LaunchConfig(c2.grid(m, n), 1, 1, 128 * c2.wgs, 1, 1, c2.smem, None, None, 0)
    nclu = ctypes.c_int(-1)
    err = lib.cuOccupancyMaxActiveClusters(ctypes.byref(nclu), ctypes.c_void_p(kern.fn_ptr), ctypes.byref(cfg))
    us = {}
    for rnd in range(2):
        for v, c in (("c1", c1), ("c2", c2), ("nomc", c2)):
            mode["v"] = "nomc" if v == "nomc" else ""
            G._spec.cache_clear()
            y = G.w8a16_wgmma_gemm(x, ws.copies[0], None, torch.bfloat16, c)
            t = timer.time(lambda i, c=c: G.w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c), ws.ncopies, pol).us
            us[v] = min(us.get(v, t), t)
    ref = dispatch.reference.linear(x, ws.copies[0])
    print(f"| {shape} M={m} | {base} | grid {c2.grid(m, n)} | max active clusters {nclu.value} (err {err}) | "
          f"c1 {us['c1']:.1f} | c2 {us['c2']:.1f} | c2 no multicast {us['nomc']:.1f} |", flush=True)
