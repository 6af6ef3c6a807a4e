"""Run under TRITON_INTERPRET=1 (CPU): the fused weight quantizer's software-encode path vs the torch path.
Not a GPU validation: the interpreter cannot run the hardware fp8 cast (tests/test_weight_quant_kernel.py has
the GPU test)."""
import sys

import torch

import dispatch
from dispatch.formats import Format, MXScaleMode
from kernels_triton.weight_quant import quantize_weight

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
g = torch.Generator().manual_seed(seed)
failures = []
for n, k in [(130, 300), (1, 33), (257, 576), (3, 1)]:
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-10, 10, (n, 1), generator=g).float())
    w = w.to(torch.bfloat16)
    w[0, : min(k, 40)] = 0
    for fmt in Format:
        for mode in (MXScaleMode.RCEIL, MXScaleMode.FLOOR) if fmt is Format.MXFP8 else (MXScaleMode.RCEIL,):
            q, s, bad = quantize_weight(w, fmt, mode, hw_fp8=False)
            ref = dispatch.quantize(w, fmt, mx_scale_mode=mode)
            if not torch.equal(q.view(torch.uint8), ref.qdata.view(torch.uint8)):
                failures.append(f"codes {fmt} {mode} {n}x{k}")
            if not torch.equal(s.reshape(-1).view(torch.uint8), ref.scale.reshape(-1).view(torch.uint8)):
                failures.append(f"scales {fmt} {mode} {n}x{k}")
            if int(bad) != 0:
                failures.append(f"bad count {fmt}")
w = torch.randn(8, 64)
w[5, 7] = float("nan")
w[2, 1] = float("inf")
if int(quantize_weight(w, Format.FP8_ROW, MXScaleMode.RCEIL, hw_fp8=False)[2]) != 2:
    failures.append("non-finite count")
print("\n".join(failures) or "OK")
sys.exit(1 if failures else 0)
