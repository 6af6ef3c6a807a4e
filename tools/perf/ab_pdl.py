"""Programmatic dependent launch of the Triton GEMM chain (kernels_triton._pdl), off against on, on the GPU:

    python -m tools.perf.ab_pdl --m 64,256 [--shapes 4096x4096,...] [--rounds 2] [--out ab.jsonl]
    python -m tools.perf.ab_pdl --family gemv --m 1,4,16      # the Triton decode GEMVs (session 16)
    python -m tools.perf.ab_pdl --family act_quant --m 16,64,256,1024,4096 --formats fp8_tensor/fp8,...  (session 19)

--family cuda_wgmma flips the programmatic launch of the CUDA wgmma W8A16 GEMM (and its split-K reduction; FP8DISPATCH_PDL
through kernels_cuda._launch.pdl_allowed) at the table's config where it holds the key, else its default (session 36).
--family cuda_act_quant flips the CUDA quantizer's single-read register paths (act_quant.cu, compiled with and without
-DFP8D_ACTQ_SINGLE_READ=0) under the CUDA W8A8 GEMV (the table's config where it holds the key, else its default).
--family act_quant flips only the Triton activation quantizer's programmatic launch (kernels_triton._act_quant.PDL;
the GEMMs stay as shipped) under the W8A8 route the table holds for the cell where that route launches it (a
`_scaled_mm` candidate or the Triton W8A8 GEMM), else under the format's `_scaled_mm` candidate.

Per cell (format/act x shape x M): the Triton GEMM (or GEMV) of that format/act with the shipped table's config where
it holds the key, else with its default config, timed with PDL off and on; the table's own route (whatever it is)
and bf16 F.linear in the same process. (Session 13 also timed here, on code since removed: an L2 prefetch of the
weight before the wait, triggering the next launch early or after the main loop, and a programmatic activation
quantizer; docs/perf/h200_pdl_2026-11-30_s13.md.) The bench's weight, workload and timing policy (tools.perf.recheck_entries): graph
replay over weight copies rotating through > 3.3x L2, median. W8A8 times include the activation quantizer. The
variants alternate within a round, rounds repeat the order reversed. A line per cell and round, a JSON line per
cell in --out."""

from __future__ import annotations

import argparse
import json
import os

from tools.perf.probe_w8a16_gemm import SHAPES

FORMATS = ("fp8_row/bf16", "mxfp8/bf16", "fp8_block/fp8", "fp8_tensor/fp8", "fp8_row/fp8")
TRITON_GEMMS = {"bf16": "triton.w8a16_gemm", "fp8": "triton.w8a8_gemm"}
TRITON_GEMVS = {"bf16": "triton.w8a16_gemv", "fp8": "triton.w8a8_gemv"}
SCALED_MM = {"fp8_tensor": "torch.scaled_mm_tensorwise", "fp8_row": "torch.scaled_mm_rowwise",
             "fp8_block": "torch.scaled_mm_blockwise"}  # W8A8 routes that launch the Triton quantizer
QUANTIZING = frozenset(SCALED_MM.values()) | {"triton.w8a8_gemm"}


VARIANTS = {"off": False, "on": True}  # name -> the family's switch (_switch)


def main(argv: list[str] | None = None) -> None:
    import pathlib

    import torch

    from dispatch import registry
    from dispatch.formats import Act, Format
    from dispatch.problem import Problem
    from dispatch.tables import load_table
    from dispatch.target import detect
    from dispatch.weight_quant import quantize
    from tools.perf.routes import RouteCtx, candidate_route
    from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes, warm_gpu
    from tools.perf.workload import bf16_copies, build_weight_set, make_weight

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="64,256")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--family", choices=("gemm", "gemv", "act_quant", "cuda_act_quant", "cuda_wgmma"), default="gemm")
    a = ap.parse_args(argv)
    kernels = {"gemv": TRITON_GEMVS, "cuda_act_quant": {"fp8": "cuda.w8a8_gemv"},
               "cuda_wgmma": {"bf16": "cuda.w8a16_gemm_wgmma"}}.get(a.family, TRITON_GEMMS)
    switch = _switch(a.family)  # what the variants flip
    table = load_table(pathlib.Path(__file__).resolve().parents[2] / "tuning_db" / "nvidia_h200.yaml").index()
    timer, rot, l2 = CudaTimer(), RotationPolicy(), l2_bytes()
    policy = TimingPolicy(target_graph_us=3000.0, min_calls=20, max_calls=300, replays=7, eager_iters=10)  # bench's
    cands = {c.id: c for c in registry.candidates()}
    tgt = detect(torch.device("cuda"))
    saved = switch.get()
    out = open(a.out, "a") if a.out else None
    warm_gpu(1.0)
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        w = make_weight(n, k, "cuda")
        bw = bf16_copies(w, l2_bytes=l2, rotation=rot)
        for fa in a.formats.split(","):
            fmt, act = Format(fa.split("/")[0]), Act(fa.split("/")[1])
            if act.value not in kernels:
                continue
            ws = build_weight_set(w, fmt, act, l2_bytes=l2, rotation=rot, quantize=quantize)
            for m in (int(v) for v in a.m.split(",")):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                ctx = RouteCtx(fmt, act, x, ws, lambda bw=bw: bw)
                hit = table.get((fmt, act, n, k, m))
                entry = hit[1] if hit else None
                gemm = cands[kernels[act.value]]
                if a.family in ("act_quant", "cuda_act_quant") and act.value != "fp8":
                    continue
                if a.family == "act_quant":
                    gemm = cands[entry.impl if entry is not None and entry.impl in QUANTIZING else SCALED_MM[fmt.value]]
                if entry is not None and entry.impl == gemm.id:
                    cfg, src = gemm.config_type.from_dict(dict(entry.config)), "table"
                else:
                    cfg, src = gemm.default_config(Problem(fmt, act, m, n, k), tgt), "default"
                route = candidate_route(gemm, cfg, gemm.id)
                times: dict[str, list[float]] = {v: [] for v in VARIANTS}
                table_us: list[float] = []
                bf16_us: list[float] = []
                for r in range(a.rounds):
                    order = list(VARIANTS.items())
                    for name, on in (order if r % 2 == 0 else order[::-1]):
                        switch.set(on)
                        call, nc = route.make(ctx)
                        times[name].append(timer.time(call, nc, policy).best_us)
                    switch.set(saved)
                    if entry is not None and entry.impl in cands and entry.impl != gemm.id:
                        c = cands[entry.impl]
                        call, nc = candidate_route(c, c.config_type.from_dict(dict(entry.config)), c.id).make(ctx)
                        table_us.append(timer.time(call, nc, policy).best_us)
                    t = timer.time(lambda i, x=x, bw=bw: torch.nn.functional.linear(x, bw[i]), len(bw), policy)
                    bf16_us.append(t.best_us)
                    print(f"{fa} {n}x{k} M={m} r{r} [{gemm.id} {src} {cfg}] "
                          + " | ".join(f"{v} {ts[-1]:.2f}" for v, ts in times.items())
                          + (f" | table {entry.impl} {table_us[-1]:.2f}" if table_us else "")
                          + f" | bf16 {bf16_us[-1]:.2f}", flush=True)
                if out:
                    out.write(json.dumps({"fmt": fmt.value, "act": act.value, "n": n, "k": k, "m": m, "family": a.family,
                                          "impl": gemm.id, "config_src": src,
                                          "config": cfg.to_dict(), "us": {v: min(ts) for v, ts in times.items()},
                                          "us_all": times, "table_impl": entry.impl if entry else None,
                                          "table_us": min(table_us) if table_us else None,
                                          "bf16_us": min(bf16_us)}) + "\n")
                    out.flush()
                del ctx
            del ws
            torch.cuda.empty_cache()
        del bw
    switch.set(saved)


class _ModuleFlag:
    """A module-level bool read at each launch: kernels_triton._pdl.ENABLED (every Triton GEMM / GEMV) or
    kernels_triton._act_quant.PDL (the Triton quantizer alone)."""

    def __init__(self, module, attr: str) -> None:
        self.module, self.attr = module, attr

    def get(self) -> bool:
        return getattr(self.module, self.attr)

    def set(self, on: bool) -> None:
        setattr(self.module, self.attr, on)


class _CudaSingleRead:
    """The CUDA quantizer's single-read paths as a switch: off wraps kernels_cuda._launch.act_quant_module so the
    module compiles with -DFP8D_ACTQ_SINGLE_READ=0 (another module key, so another loaded module), and clears the
    cached launches that hold the loaded kernels."""

    def __init__(self) -> None:
        from kernels_cuda import _launch
        self.launch, self.module = _launch, _launch.act_quant_module
        self.on = True

    def get(self) -> bool:
        return self.on

    def set(self, on: bool) -> None:
        base = self.module

        def two_reads(force_sw_cvt: bool = False):
            name, defines = base(force_sw_cvt)
            return name, tuple(sorted(dict(defines, FP8D_ACTQ_SINGLE_READ=0).items()))

        self.launch.act_quant_module = base if on else two_reads
        self.launch._act_quant_launches.cache_clear()
        self.on = on


class _CudaPdl:
    """FP8DISPATCH_PDL as a switch: the CUDA launchers read it through kernels_cuda._launch.pdl_allowed (cached per
    arch; the GEMV launch plans cache it too, so those caches are cleared with it)."""

    def __init__(self) -> None:
        from kernels_cuda import _launch
        self.launch = _launch

    def get(self) -> bool:
        return os.environ.get(self.launch.PDL_ENV, "1") != "0"

    def set(self, on: bool) -> None:
        os.environ[self.launch.PDL_ENV] = "1" if on else "0"
        for f in (self.launch.pdl_allowed, self.launch._gemv_spec, self.launch._act_quant_launches):
            f.cache_clear()


def _switch(family: str):
    """The A/B switch of a --family."""
    from kernels_triton import _act_quant, _pdl

    if family == "act_quant":
        return _ModuleFlag(_act_quant, "PDL")
    if family == "cuda_act_quant":
        return _CudaSingleRead()
    if family == "cuda_wgmma":
        return _CudaPdl()
    return _ModuleFlag(_pdl, "ENABLED")


if __name__ == "__main__":
    main()
