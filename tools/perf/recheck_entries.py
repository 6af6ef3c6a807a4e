"""Re-time table entries where the bench and the autotune disagreed, on the GPU, in one process:

    python -m tools.perf.recheck_entries --new NEW.yaml --base tuning_db/nvidia_h200.yaml \
        --keys mxfp8/bf16:28672x4096:64,fp8_row/bf16:8192x8192:1024 [--rounds 2]

Per key and round, on the bench's weight (tools.perf.workload.make_weight: per-row and per-32-column factors) and
on a plain randn weight (what kernels_triton._gemm_bench.time_prefill times): the NEW entry's candidate and config
called directly, the BASE entry's, and bf16 F.linear, with the bench's timing policy (graph replay over rotating
copies, median). Prints one line per (key, weight kind, round)."""

from __future__ import annotations

import argparse


def _entry(path: str, key: tuple):
    """The entry of the table at `path` for `key`, or None."""
    from dispatch.tables import load_table
    hit = load_table(path).index().get(key)
    return hit[1] if hit else None


def main(argv: list[str] | None = None) -> None:
    import torch

    from dispatch import registry
    from dispatch.formats import Act, Format
    from dispatch.weight_quant import quantize
    from tools.perf.routes import RouteCtx, candidate_route
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, warm_gpu
    from tools.perf.workload import bf16_copies, build_weight_set, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--keys", required=True, help="fmt/act:NxK:M,...")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
    policy = TimingPolicy(target_graph_us=3000.0, min_calls=20, max_calls=300, replays=7, eager_iters=10)  # bench's
    cands = {c.id: c for c in registry.candidates()}
    warm_gpu(1.0)
    for spec in a.keys.split(","):
        fa, shape, m = spec.split(":")
        fmt, act = (Format(v) if i == 0 else Act(v) for i, v in enumerate(fa.split("/")))
        n, k = (int(v) for v in shape.split("x"))
        m = int(m)
        entries = {"new": _entry(a.new, (fmt, act, n, k, m)), "base": _entry(a.base, (fmt, act, n, k, m))}
        for kind in ("bench_weight", "randn_weight"):
            g = torch.Generator(device="cuda").manual_seed(0)
            w = make_weight(n, k, "cuda") if kind == "bench_weight" else \
                torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16)
            ws = build_weight_set(w, fmt, act, l2_bytes=l2, rotation=rot, quantize=quantize)
            x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
            bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
            ctx = RouteCtx(fmt, act, x, ws, lambda bw=bw: bw)
            for r in range(a.rounds):
                parts = []
                for name, e in entries.items():
                    if e is None:
                        continue
                    cand = cands[e.impl]
                    route = candidate_route(cand, cand.config_type.from_dict(dict(e.config)), name)
                    call, nc = route.make(ctx)
                    parts.append(f"{name} {e.impl} {timer.time(call, nc, policy).best_us:.1f} (table {e.us:.1f})")
                t = timer.time(lambda i, bw=bw, x=x: torch.nn.functional.linear(x, bw[i]), len(bw), policy)
                parts.append(f"bf16 {t.best_us:.1f}")
                print(f"{fmt.value}/{act.value} {n}x{k} M={m} {kind} r{r}: " + " | ".join(parts), flush=True)
            del ws, ctx
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
