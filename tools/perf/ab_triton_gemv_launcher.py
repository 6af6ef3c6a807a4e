"""A/B of the Triton decode GEMV's launcher (GPU): another version of kernels_triton/_gemv.py loaded beside the
checkout's, outputs compared bit for bit, host time per eager call (median of 400 calls, three alternating rounds,
the best round of each). Session 34's run compared the JIT launcher of b87eecc with the cached spec + fast launch:

    git show b87eecc:kernels_triton/_gemv.py > /tmp/old_gemv.py
    python -m tools.perf.ab_triton_gemv_launcher --old /tmp/old_gemv.py
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

import torch

import dispatch
from kernels_triton import _gemv as new
from kernels_triton.configs import GemvConfig
from tools.perf.host_profile import host_us


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="path of the other kernels_triton/_gemv.py")
    args = ap.parse_args(argv)
    spec = importlib.util.spec_from_file_location("kernels_triton._gemv_old", args.old)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)

    torch.manual_seed(0)
    dev = torch.device("cuda")
    cases = [("fp8_row", "bf16", 4096, 4096, 1), ("mxfp8", "bf16", 4096, 4096, 1), ("fp8_row", "bf16", 4096, 4096, 16),
             ("mxfp8", "bf16", 6144, 4096, 16), ("fp8_block", "fp8", 4096, 4096, 1), ("fp8_tensor", "fp8", 4096, 4096, 16),
             ("fp8_row", "fp8", 4096, 14336, 16)]
    rows = []
    bad = 0
    for fmt, act, n, k, m in cases:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k ** 0.5
        qw = dispatch.quantize(w, fmt, act=act)
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, device=dev, dtype=torch.bfloat16)
        name = "w8a8_gemv" if act == "fp8" else "w8a16_gemv"
        cfgs = [None, new.default_config(m)]
        if m == 16:
            cfgs.append(GemvConfig(16, 64, 128, 1, 4, 3, fuse_act_quant=False))  # split_k = 1: no K split, one launch
        for cfg in cfgs:
            for bias in (None, b):
                yo = getattr(old, name)(x, qw, bias, config=cfg)
                yn = getattr(new, name)(x, qw, bias, config=cfg)
                torch.cuda.synchronize()
                same = torch.equal(yo.view(torch.int16), yn.view(torch.int16))
                bad += not same
                print(f"{fmt}/{act} {n}x{k} M={m} cfg={cfg} bias={bias is not None}: bit-identical {same}", flush=True)
        # host time at the default config (split where auto_split_k says so), alternating rounds
        t = {"old": [], "new": []}
        for r in range(3):
            for tag, mod in (("old", old), ("new", new)):
                f = getattr(mod, name)
                t[tag].append(host_us(lambda f=f, x=x, qw=qw: f(x, qw, None)))
        split = new.auto_split_k(m, n, k, new.default_config(m), new._sm_count(0))
        rows.append((f"{fmt}/{act} {n}x{k} M={m}", split, min(t["old"]), min(t["new"]), t["old"], t["new"]))
        del w, qw
    ref = torch.nn.functional.linear
    xb = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    wb = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    bf = min(host_us(lambda: ref(xb, wb)) for _ in range(3))
    print(f"\nnot bit-identical: {bad}")
    print(f"bf16 F.linear host us (4096x4096, M=1): {bf:.1f}")
    print("| case | split | old host us | new host us | new/old | rounds old | rounds new |\n|---|---|---|---|---|---|---|")
    for c, s, o, nw, ro, rn in rows:
        print(f"| {c} | {s} | {o:.1f} | {nw:.1f} | {nw / o:.2f} | {' '.join(f'{v:.1f}' for v in ro)} | {' '.join(f'{v:.1f}' for v in rn)} |")


if __name__ == "__main__":
    main()
