"""The fused activation quantizer's launch shape, timed: every `ActQuantConfig` of a small grid, alone and inside
its W8A8 `_scaled_mm` route, against the shipped default, in one process (the default was chosen from the sm_90
SASS and had never been timed).

    python -m tools.perf.probe_act_quant [--mk 4096x4096,...] [--out DIR] [--quick]

Per (M x K, granularity): each config's codes and scales are first checked bit-identical to the default's (and the
default's to `dispatch.quantize_activation` at the smallest shape), then timed (graph replay, median):
  alone   x rotating over copies that read > 3.3x the L2 (what a cold activation costs);
  route   the quantizer + `torch._scaled_mm` of the granularity's format (tensorwise / rowwise / blockwise) on a
          weight of the shape's N rotating over copies, x fixed (as `tools.bench` times W8A8 routes).
Prints a table per granularity (best config against the default) and writes probe_act_quant.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pathlib

import torch

import dispatch
from tools.perf.timing import QUICK, CudaTimer, RotationPolicy, l2_bytes

# (M, K, N): N is the output width of the route's GEMM (a baseline shape with this K)
DEFAULT_MKN = ((4096, 4096, 4096), (4096, 2560, 6656), (4096, 14336, 4096), (1024, 4096, 6144), (256, 4096, 4096),
               (64, 4096, 4096), (64, 2560, 6656))
GRANULARITIES = ("per_tensor", "per_token", "per_token_group_128")


def _configs(granularity: str, quick: bool):
    from kernels_triton.act_quant_config import ActQuantConfig
    blocks = (4096, 8192, 16384) if quick else (2048, 4096, 8192, 16384)
    warps = (4, 8, 16)
    amax = (2, 4, 8) if granularity == "per_tensor" else (4,)
    out = [ActQuantConfig()]
    for b, w, a in itertools.product(blocks, warps, amax):
        if b // (32 * w) < 4:  # fewer than 4 values a thread: one 64-bit load of bf16, not a 128-bit one
            continue
        c = ActQuantConfig(block=b, num_warps=w, amax_programs_per_sm=a)
        if c not in out:
            out.append(c)
    return out


def _scaled_mm_route(granularity: str, n: int, k: int, ncopies: int):
    """(weights, run(xq, xs, i)) for the granularity's _scaled_mm mode, bf16 out."""
    w = [(torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn) for _ in range(ncopies)]
    if granularity == "per_tensor":
        ws = torch.tensor(0.01, device="cuda")
        return lambda xq, xs, i: torch._scaled_mm(xq, w[i].t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)
    if granularity == "per_token":
        ws = torch.full((1, n), 0.01, device="cuda")
        return lambda xq, xs, i: torch._scaled_mm(xq, w[i].t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)
    from dispatch.weight_quant import quantize
    qws = [quantize(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), "fp8_block", act="fp8")
           for _ in range(ncopies)]
    from dispatch.torch_candidates import ScaledMMBlockwise
    prep = [ScaledMMBlockwise().prepare(q) for q in qws]
    return lambda xq, xs, i: torch._scaled_mm(xq, qws[i].qdata.t(), scale_a=xs.t().contiguous().t(),
                                              scale_b=prep[i],  # column-major [M, K/128], as the candidate
                                              out_dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    from kernels_triton import quantize_activation as tq

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mkn", default=",".join(f"{m}x{k}x{n}" for m, k, n in DEFAULT_MKN))
    ap.add_argument("--granularities", default=",".join(GRANULARITIES))
    ap.add_argument("--quick", action="store_true", help="a smaller config grid")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    timer, l2 = CudaTimer(), l2_bytes()
    rows, bad = [], 0
    for spec in a.mkn.split(","):
        m, k, n = (int(v) for v in spec.split("x"))
        xcopies = RotationPolicy().copies(m * k * 2, l2)
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(xcopies)]
        xs[0][0, 0] = 1000.0  # one outlier: the scale is not the bulk's
        wcopies = RotationPolicy().copies(n * k, l2)
        for g in a.granularities.split(","):
            route = _scaled_mm_route(g, n, k, wcopies)
            ref_q, ref_s = tq(xs[0], g)
            if m * k <= 64 * 4096:
                dq, ds = dispatch.quantize_activation(xs[0], g)
                if not (torch.equal(dq.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(ds.reshape(ref_s.shape), ref_s)):
                    print(f"{m}x{k} {g}: the DEFAULT config differs from dispatch.quantize_activation", flush=True)
                    bad += 1
            for cfg in _configs(g, a.quick):
                q, s = tq(xs[0], g, cfg)
                same = torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(s, ref_s)
                row = dict(m=m, k=k, n=n, granularity=g, config=dataclasses.asdict(cfg), bit_identical=same)
                if not same:
                    bad += 1
                    rows.append(row)
                    print(f"{m}x{k} {g} {cfg}: DIFFERS from the default's codes/scales", flush=True)
                    continue
                alone = timer.time(lambda i, cfg=cfg, xs=xs, g=g: tq(xs[i], g, cfg), xcopies, QUICK)
                full = timer.time(lambda i, cfg=cfg, x0=xs[0], g=g, route=route: route(*tq(x0, g, cfg), i), wcopies, QUICK)
                row.update(alone_us=alone.us, route_us=full.us, gbps=m * k * 3 / alone.us / 1e3 if alone.us else None)
                rows.append(row)
        xs = route = None  # free before the next shape
        torch.cuda.empty_cache()
    # summary: per (shape, granularity) the default against the best route time
    print(f"\n{'M x K':>12} {'granularity':22} {'default alone':>13} {'route':>8} | {'best route cfg':34} "
          f"{'alone':>7} {'route':>8} {'speedup':>7}")
    for (m, k, g), grp in itertools.groupby(rows, key=lambda r: (r["m"], r["k"], r["granularity"])):
        grp = [r for r in grp if r.get("route_us")]
        if not grp:
            continue
        d, b = grp[0], min(grp, key=lambda r: r["route_us"])
        c = b["config"]
        print(f"{m:>5}x{k:<6} {g:22} {d['alone_us']:13.2f} {d['route_us']:8.2f} | "
              f"b{c['block']} w{c['num_warps']} a{c['amax_programs_per_sm']:<22} {b['alone_us']:7.2f} {b['route_us']:8.2f} "
              f"{d['route_us'] / b['route_us']:7.3f}")
    if a.out:
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "probe_act_quant.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"{'ALL bit-identical' if not bad else f'{bad} DIFFER'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
