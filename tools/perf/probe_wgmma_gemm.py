"""The sm_90 W8A16 wgmma GEMM (kernels_cuda/_wgmma_gemm.py) on the GPU: checks, then times it against bf16 F.linear and
the shipped dispatched path, in one process (graph replay over weight copies > 3.3x L2, median; tools/perf/timing.py).

    python -m tools.perf.probe_wgmma_gemm [--m 64,256,1024,4096] [--shapes ...] [--formats fp8_row] [--out f.jsonl]

Checks first (edge tiles, bias, both scale layouts, every config): relative error against dispatch.reference; a failed
check is printed and the config is not timed. The last lines are a table: per cell the bf16 time, the dispatched path's
time and kernel, the best wgmma config's time, and the speedups."""

from __future__ import annotations

import argparse
import json

from tools.perf.probe_harness import SHAPES

CHECKS = ((77, 1000, 1008), (300, 4104, 4096), (256, 6144, 4096), (1, 256, 128), (130, 2000, 2560))
TOL = 1e-2  # relative Frobenius error against the float64 reference; bf16 output rounding is ~3e-3


def configs_for(m: int, n: int = 4096, k: int = 4096) -> list:
    """The candidate's config space at M (kernels_cuda.candidates: the spaces this probe's runs chose)."""
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.target import Target
    from kernels_cuda.candidates import CudaW8A16GemmWgmma

    return list(CudaW8A16GemmWgmma().configs(Problem(Format.FP8_ROW, Act.BF16, m, n, k), Target.simulated_for("sm_90")))


def all_configs() -> list:
    from kernels_cuda.candidates import wgmma_configs

    return wgmma_configs()


def check(fmts: list, configs: list | None = None) -> set:
    """Relative error of every config (of the spaces, or `configs`) on the check shapes; returns the configs that
    failed."""
    import torch

    import dispatch
    from dispatch import reference
    from kernels_cuda._wgmma_gemm import k_unsupported_reason, w8a16_wgmma_gemm
    from tools.perf.workload import make_activation, make_weight, rel_err

    bad = set()
    for (m, n, k) in CHECKS:
        for fmt in fmts:
            if k_unsupported_reason(dispatch.Format(fmt), k):
                continue
            qw = dispatch.quantize(make_weight(n, k, "cuda"), fmt, act="bf16")
            x = make_activation(m, k, "cuda")
            for bias in (None, torch.randn(n, device="cuda", dtype=torch.bfloat16)):
                ref = reference.linear(x, qw, bias)
                for cfg in (configs or all_configs()):
                    if not cfg.runs_at(k):
                        continue
                    try:
                        y = w8a16_wgmma_gemm(x, qw, bias, torch.bfloat16, cfg)
                        torch.cuda.synchronize()
                        e = rel_err(y, ref)
                    except Exception as ex:  # a crash is a failed check, printed
                        e, msg = float("inf"), f"{type(ex).__name__}: {str(ex)[:200]}"
                    else:
                        msg = ""
                    ok = e < TOL
                    if not ok:
                        bad.add(cfg)
                    print(f"check {fmt} M={m} N={n} K={k} bias={bias is not None} {cfg}: rel_err {e:.2e} "
                          f"{'ok' if ok else 'FAILED'} {msg}", flush=True)
    return bad


def once(n: int, k: int, m: int, bm: int, wgs: int, stages: int, split: int = 1, depth: int = 1, *, fmt: str) -> None:
    import torch

    import dispatch
    from kernels_cuda._wgmma_gemm import WgmmaGemmConfig, w8a16_wgmma_gemm
    from tools.perf.workload import make_activation, make_weight

    w = make_weight(n, k, "cuda")
    qw, x = dispatch.quantize(w, fmt, act="bf16"), make_activation(m, k, "cuda")
    for _ in range(3):
        w8a16_wgmma_gemm(x, qw, None, torch.bfloat16, WgmmaGemmConfig(bm, wgs, stages, split, depth))
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--m", default="64,256,1024,4096")
    ap.add_argument("--formats", default="fp8_row")
    ap.add_argument("--out")
    ap.add_argument("--checks-only", action="store_true")
    ap.add_argument("--configs", help="WgmmaGemmConfig fields in order (bm,wgs,stages,split,depth,slice_cluster), ';' "
                                      "between configs: "
                                      "time these (checked first) instead of the candidate's space at each M")
    ap.add_argument("--once", help="N,K,M,bm,wgs,stages[,split,depth]: three plain launches of one config (for Nsight "
                                   "Compute), then three of bf16 F.linear on the same shape")
    a = ap.parse_args(argv)
    if a.once:
        return once(*(int(v) for v in a.once.split(",")), fmt=a.formats.split(",")[0])

    import torch

    import dispatch
    from dispatch.formats import Act, Format
    from kernels_cuda._wgmma_gemm import w8a16_wgmma_gemm
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes
    from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight, rel_err

    fmts = a.formats.split(",")
    only = None
    if a.configs:
        from kernels_cuda._wgmma_gemm import WgmmaGemmConfig
        only = [WgmmaGemmConfig(*(int(v) for v in c.split(","))) for c in a.configs.split(";") if c]
    bad = check(fmts, only)
    if a.checks_only:
        return
    timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
    pol = TimingPolicy(target_graph_us=2000.0, min_calls=10, max_calls=200, replays=5, eager_iters=3)
    out = open(a.out, "a") if a.out else None
    rows = []
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = make_weight(n, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        for fmt in fmts:
            ws = build_weight_set(w, Format(fmt), Act.BF16, l2_bytes=l2, rotation=rot, quantize=dispatch.quantize)
            for m in (int(v) for v in a.m.split(",")):
                x = make_activation(m, k, "cuda")
                bf = timer.time(lambda i: torch.nn.functional.linear(x, bw[i % len(bw)]), len(bw), pol).us
                disp = timer.time(lambda i: dispatch.linear(x, ws.copies[i]), ws.ncopies, pol).us
                e = dispatch.explain(x, ws.qw)
                picked = f"{e.candidate_id} {e.decision.config}"
                ref = dispatch.reference.linear(x, ws.qw)
                best = None
                for cfg in (only or configs_for(m)):
                    if cfg in bad or not cfg.runs_at(k):
                        continue
                    y = w8a16_wgmma_gemm(x, ws.qw, None, torch.bfloat16, cfg)
                    err = rel_err(y, ref)
                    t = timer.time(lambda i, c=cfg: w8a16_wgmma_gemm(x, ws.copies[i], None, torch.bfloat16, c),
                                   ws.ncopies, pol).us
                    row = {"fmt": fmt, "n": n, "k": k, "m": m, "cfg": cfg.to_dict(), "us": t,
                           "rel_err": err, "bf16_us": bf, "dispatch_us": disp, "dispatch": picked}
                    if out:
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                    print(f"{fmt} {n}x{k} M={m} {cfg}: {t:.1f} us err {err:.1e} (bf16 {bf:.1f}, dispatch {disp:.1f})",
                          flush=True)
                    if t is not None and (best is None or t < best["us"]):
                        best = row
                if best:
                    rows.append(best)
        torch.cuda.empty_cache()
    print("\n| format | N x K | M | bf16 us | dispatch us | wgmma us (bm, wgs, stages, split, depth, slice_cluster) | "
          "vs bf16 | vs dispatch | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tf = 2 * r["m"] * r["n"] * r["k"] / r["us"] / 1e6
        print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {r['bf16_us']:.1f} | {r['dispatch_us']:.1f} | "
              f"{r['us']:.1f} {tuple(r['cfg'].values())} | {r['bf16_us'] / r['us']:.2f}x | {r['dispatch_us'] / r['us']:.2f}x | "
              f"{tf:.0f} |")


if __name__ == "__main__":
    main()
