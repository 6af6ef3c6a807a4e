"""Where the W8A8 decode route's activation quantizer spends its share: per-CTA timestamps of a CUDA-graph chain.

Session 26 measured the quantizer's share of the two-launch route (the route against its GEMV launch alone): 1-3 us
at M = 1, up to 8 us per tensor at M = 16. This probe replays the same chains as the bench (a CUDA graph of R calls,
programmatic launches, weights rotating over copies) with the route's kernels compiled once more with timestamps
(`tools/perf/csrc/trace_w8a8.cu`: %globaltimer, ns, per CTA at its start, after its wait for the previous grid, and at
its end) and splits each call of the chain:

  period          GEMV_i's last CTA end - GEMV_(i-1)'s last CTA end (the per-call time of the chain)
  q_pass          quantizer_i's first CTA past its wait - GEMV_(i-1)'s end     (per tensor only: the traced quantizer)
  q_work          quantizer_i's last CTA end - its first CTA past the wait     (per tensor only)
  q_to_g          GEMV_i's first CTA past its wait - quantizer_i's last end     (per tensor only)
  between         GEMV_i's first CTA past its wait - GEMV_(i-1)'s end (everything between two GEMVs' work)
  g_after_wait    GEMV_i's end - its first CTA past the wait
  g_early         GEMV_(i-1)'s end - GEMV_i's first CTA start (how far ahead its CTAs were resident)

for the route ("route") and for the GEMV alone on codes quantized outside the chain ("alone"), medians over the calls.
The group and per-token quantizers run untraced (their bodies are kernels, not device functions): their share shows
in `between`. The traced kernels are the shipped ones plus a few stores; they are probes, not the product. For the
one-launch per-tensor quantizer also: its programmatic trigger after its amax ("route_t1") or at its end
("route_t2") instead of at entry, and a variant that reads x once into registers, one CTA per register slot
("route_1rt", 8 slots; "route_1rt_fit", the fewest slots that hold x, not run yet; codes and scale checked against the
shipped quantizer's). Session 27's run:
docs/perf/h200_s27_2026-12-01.md, section 4.

    python -m tools.perf.probe_quant_timeline [--m 1,4,16] [--formats fp8_tensor,fp8_block,fp8_row] [--out t.jsonl]
"""

from __future__ import annotations

import json
import pathlib
import statistics

SOURCE = "trace_w8a8.cu"
SHAPES = "4096x4096,8192x8192,28672x4096"


def trace_sources(real):
    """`real` (kernels_cuda.compiler.sources) plus this probe's source and the two product kernels it includes, as
    headers: what compiler.sources must return while the probe compiles."""
    here = pathlib.Path(__file__).parent / "csrc" / SOURCE

    def sources():
        s = real()
        return {**s, SOURCE: here.read_text(), "act_quant_inc.cuh": s["act_quant.cu"],
                "gemv_w8a8_inc.cuh": s["gemv_w8a8.cu"]}

    return sources


def _stats(tr, n):
    """(min start, min after-wait, max after-wait, max end) over n CTAs of one launch's trace [n, 3] (int64 ns)."""
    t = tr[:n]
    return int(t[:, 0].min()), int(t[:, 1].min()), int(t[:, 1].max()), int(t[:, 2].max())


def main(argv: list[str] | None = None) -> None:
    import torch

    from dispatch.formats import Act, ActGranularity
    from kernels_cuda import _driver, _launch
    from kernels_cuda._driver import ptr
    from kernels_cuda._kinds import ACTQ_CODE, DTYPE_CODE
    from tools.perf.probe_harness import Probe, parser

    ap = parser(__doc__, m="1,4,16", formats="fp8_tensor,fp8_block,fp8_row", shapes=SHAPES)
    ap.add_argument("--calls", type=int, default=24, help="calls per captured chain")
    a = ap.parse_args(argv)
    from kernels_cuda import compiler

    compiler.sources = trace_sources(compiler.sources)  # this process only: the probe's kernels beside the product's
    probe = Probe(a)
    dev = torch.cuda.current_device()
    arch = _launch.device_arch(dev)
    rows = []
    for c in probe.cells("fp8"):
        assert c.act is Act.FP8, "W8A8 formats only"
        q, x, m, n, k = c.ws.copies, c.x, c.m, c.n, c.k
        g = q[0].act_granularity
        cfg = probe.gemv_config(c.problem, "cuda.w8a8_gemv")
        _, geo_grid, block, smem, pdl = _launch._gemv_spec(True, ACTQ_CODE[g], 0, m, n, cfg, dev, None, False, False)
        _, _, defines = _launch.gemv_module(True, ACTQ_CODE[g], 0, m, cfg)
        gemv = _launch._kernel(SOURCE, "trace_w8a8_gemv", defines, dev, arch)
        if smem > _driver.DEFAULT_DYNAMIC_SMEM:
            _driver.allow_dynamic_smem(gemv, smem)
        plan = _launch.act_quant_plan(m, k, g)
        traced_quant = [e for e, _, _ in plan] == ["fp8d_act_quant_tensor_redundant"]

        def quants_for(trigger):
            slots = -(-(m * k // 8) // 1024)  # "1rt": one CTA per register slot of 16-byte vectors (trace_w8a8.cu)
            fit = next(sl for sl in (1, 2, 4, 8) if sl >= slots)
            name = {0: "trace_act_quant_tensor", 1: "trace_act_quant_tensor_t1", 2: "trace_act_quant_tensor_t2",
                    "1rt": "trace_act_quant_tensor_1rt", "1rt_fit": "trace_act_quant_tensor_1rt"
                    + ("" if fit == 8 else f"_s{fit}")}[trigger]
            if trigger in ("1rt", "1rt_fit"):
                return [(_launch._kernel(SOURCE, name, defines, dev, arch), (slots, 1, 1), (1024, 1, 1), name)]
            return [(_launch._kernel(SOURCE, name if traced_quant else e, defines, dev, arch), gr, bl, e)
                    for e, gr, bl in plan]
        ncta = geo_grid[0]
        nq = plan[0][1][0] if traced_quant else 0
        R = a.calls
        tr_g = [torch.zeros((ncta, 3), dtype=torch.int64, device="cuda") for _ in range(R)]
        tr_q = [torch.zeros((max(nq, 1), 3), dtype=torch.int64, device="cuda") for _ in range(R)]
        xk = DTYPE_CODE[x.dtype]
        out_kind = DTYPE_CODE[x.dtype]
        pre_q, pre_s = _launch.quantize_activation(x, g)

        def gemv_call(i, xq, xs):
            y = torch.empty((m, n), dtype=x.dtype, device="cuda")
            qw = q[i % len(q)]
            args = (ptr(qw.qdata), ptr(qw.scale), ptr(xq), ptr(xs), 0, ptr(y), m, n, k, 0, out_kind, ptr(tr_g[i]))
            _driver.launch(gemv, geo_grid, block, args, smem, pdl=pdl)

        def route_call(i, trigger=0):
            codes = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="cuda")
            shape = {ActGranularity.PER_TENSOR: (), ActGranularity.PER_TOKEN: (m, 1)}.get(g, (m, -(-k // 128)))
            scales = torch.empty(shape, dtype=torch.float32, device="cuda")
            partial = torch.empty((plan[0][1][0],), dtype=torch.float32, device="cuda")
            for kern, gr, bl, e in quants_for(trigger):
                if traced_quant or trigger in ("1rt", "1rt_fit"):
                    args = (ptr(x), xk, ptr(codes), ptr(scales), m * k, ptr(tr_q[i]))
                elif e == "fp8d_act_quant_group":
                    args = (ptr(x), xk, ptr(codes), ptr(scales), m, k)
                elif e == "fp8d_act_quant_token":
                    args = (ptr(x), xk, ptr(codes), ptr(scales), k)
                elif e == "fp8d_act_amax_partial":
                    args = (ptr(x), xk, ptr(partial), m * k)
                else:  # fp8d_act_quant_tensor_apply
                    args = (ptr(x), xk, ptr(partial), partial.numel(), ptr(codes), ptr(scales), m * k)
                _driver.launch(kern, gr, bl, args, pdl=pdl)
            gemv_call(i, codes, scales)

        row = {"fmt": c.fmt.value, "n": n, "k": k, "m": m, "config": cfg.to_dict(), "ctas": ncta, "quant_ctas": nq,
               "quant": [e for e, _, _ in plan]}
        chains = [("route", route_call), ("alone", lambda i: gemv_call(i, pre_q, pre_s))]
        one_rt = traced_quant and x.dtype != torch.float32 and (m * k) % 8 == 0 and m * k // 8 <= 8 * 1024
        if traced_quant:  # the per-tensor quantizer with its programmatic trigger later (see trace_w8a8.cu)
            chains += [("route_t1", lambda i: route_call(i, 1)), ("route_t2", lambda i: route_call(i, 2))]
        if one_rt:  # and with one round trip to x; its codes and scale checked against the shipped quantizer first
            variants = ["1rt"] + (["1rt_fit"] if m * k // 8 <= 4 * 1024 else [])  # fit: the fewest slots that hold x
            same = []
            for v in variants:
                codes1 = torch.empty((m, k), dtype=torch.float8_e4m3fn, device="cuda")
                scale1 = torch.empty((), dtype=torch.float32, device="cuda")
                (kern, gr, bl, _), = quants_for(v)
                _driver.launch(kern, gr, bl, (ptr(x), xk, ptr(codes1), ptr(scale1), m * k, ptr(tr_q[0])))
                same.append(bool(torch.equal(codes1.view(torch.uint8), pre_q.view(torch.uint8))
                                 and torch.equal(scale1, pre_s)))
                chains.append((f"route_{v}", lambda i, v=v: route_call(i, v)))
            row["one_rt_same_codes"] = all(same)
        for name, call in chains:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for i in range(R):  # warm-up (and compile) outside the capture
                    call(i)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=s):
                for i in range(R):
                    call(i)
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            G = [_stats(t.cpu(), ncta) for t in tr_g]
            nqc = -(-(m * k // 8) // 1024) if name.startswith("route_1rt") else nq
            Q = [_stats(t.cpu(), nqc) for t in tr_q] if name.startswith("route") and traced_quant else None
            split = {"period": [], "between": [], "g_after_wait": [], "g_early": []}
            if Q:
                split.update({"q_pass": [], "q_work": [], "q_to_g": []})
            for i in range(1, R):
                prev_end = G[i - 1][3]
                split["period"].append(G[i][3] - prev_end)
                split["between"].append(G[i][1] - prev_end)
                split["g_after_wait"].append(G[i][3] - G[i][1])
                split["g_early"].append(prev_end - G[i][0])
                if Q:
                    split["q_pass"].append(Q[i][1] - prev_end)
                    split["q_work"].append(Q[i][3] - Q[i][1])
                    split["q_to_g"].append(G[i][1] - Q[i][3])
            row[name] = {k2: round(statistics.median(v) / 1000.0, 3) for k2, v in split.items()}
            del graph
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    print("\n| format | shape | M | quantizer trigger at entry / after x's amax / at the end: route period us |\n"
          "|---|---|---|---|")
    for r in rows:
        if "route_t1" in r:
            print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {r['route']['period']:.2f} / "
                  f"{r['route_t1']['period']:.2f} / {r['route_t2']['period']:.2f} (q_work {r['route']['q_work']:.2f} / "
                  f"{r['route_t1']['q_work']:.2f} / {r['route_t2']['q_work']:.2f}; alone {r['alone']['period']:.2f}) |")
    print("\n| format | shape | M | per-tensor quantizer as shipped / one round trip: route period us (q_work) | "
          "same codes |\n|---|---|---|---|---|")
    for r in rows:
        if "route_1rt" in r:
            fit = r.get("route_1rt_fit")
            fit = f" / fitted slots {fit['period']:.2f} ({fit['q_work']:.2f})" if fit else ""
            ro, one = r["route"], r["route_1rt"]
            print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {ro['period']:.2f} ({ro['q_work']:.2f}) / "
                  f"{one['period']:.2f} ({one['q_work']:.2f}){fit} | {r['one_rt_same_codes']} |")
    print("\n| format | shape | M | quantizer | route period us | alone period | route between | alone between | "
          "q_pass | q_work | q_to_g | route g_after_wait | alone g_after_wait | g_early (route) |\n"
          + "|---" * 14 + "|")
    for r in rows:
        ro, al = r["route"], r["alone"]
        qq = " | ".join(f"{ro[k]:.2f}" if k in ro else "-" for k in ("q_pass", "q_work", "q_to_g"))
        print(f"| {r['fmt']} | {r['n']}x{r['k']} | {r['m']} | {','.join(r['quant'])} ({r['quant_ctas'] or '-'} CTAs) | "
              f"{ro['period']:.2f} | {al['period']:.2f} | {ro['between']:.2f} | {al['between']:.2f} | {qq} | "
              f"{ro['g_after_wait']:.2f} | {al['g_after_wait']:.2f} | {ro['g_early']:.2f} |")


if __name__ == "__main__":
    main()
