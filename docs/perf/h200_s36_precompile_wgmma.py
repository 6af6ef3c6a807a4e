"""Session 36: compile the wgmma GEMM's modules (its spaces' configs x formats, plus configs given as
'bm,wgs,stages,split,depth,cluster;...') in parallel before a probe, as tools/perf/precompile_cuda does for the space
(calls 1, 2: python3 docs/perf/h200_s36_precompile_wgmma.py "CONFIGS")."""
import concurrent.futures
import os
import sys
import time

from kernels_cuda import _wgmma_gemm
from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
from kernels_cuda.candidates import wgmma_configs
from tools.perf.precompile_cuda import _run

extra = [WgmmaGemmConfig(*(int(v) for v in c.split(","))) for c in (sys.argv[1] if len(sys.argv) > 1 else "").split(";") if c]
items = []
for fmt in _wgmma_gemm.FORMATS:
    for cfg in list(wgmma_configs()) + extra:
        name, _, d = _wgmma_gemm.module(fmt, cfg)
        it = ("wgmma_gemm", name, d, "sm_90a")
        if it not in items:
            items.append(it)
items.append(("wgmma_gemm", _wgmma_gemm.REDUCE_SOURCE, (), "sm_90a"))
t = time.time()
with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as ex:
    list(ex.map(_run, items))
print(f"precompiled {len(items)} wgmma modules in {time.time() - t:.0f} s", flush=True)
