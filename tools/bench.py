"""Side-by-side benchmark of the dispatched path against bf16 cuBLAS, torch._scaled_mm and each backend's best.

    python -m tools.bench --shapes baseline --out bench_out                 # the full comparison
    python -m tools.bench --quick --out /tmp/b                             # smoke test (1 shape, M 1 and 256)
    python -m tools.bench --what quantizer,overhead,untabled --out /tmp/b  # load-time and fallback checks

Per shape, format and M, one row per route: dispatch.linear, bf16 F.linear, each torch._scaled_mm mode with
the same semantics (its activation quantization included), each dispatcher candidate called directly with
its best known config (from an autotune journal given with --tuned, else the table entry, else its default),
and GemLite when importable. Columns: graph-replay us, eager us, % of the measured copy bandwidth (M <= 64)
or TFLOP/s (M >= 128), speedup over bf16, relative error against dispatch.reference. The ceilings are measured
in the same run. Output: a short markdown summary printed last; results.json, report.md and speedup.png
(with matplotlib) under --out, rewritten after every shape so a timeout still leaves data.

Other sections (--what): `quantizer` (dispatch.quantize bandwidth and peak transient memory on a 28672x4096
weight), `overhead` (dispatch.linear host overhead vs calling the chosen candidate directly),
`untabled` (shapes in no table: the dispatcher's fallback choice vs autotuning them).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

if __package__ in (None, ""):  # `python tools/bench.py`: make the repository importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tools.perf.source_digest import source_digest  # noqa: E402 (after the path setup above)

EXIT_DEVICE_LOST = 75
DECODE_MAX_M = 64  # up to here the weight stream dominates: report % copy BW; above, TFLOP/s


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", default="main", help="comma list of: main, quantizer, overhead, untabled (or all)")
    ap.add_argument("--shapes", default="baseline", help="NxK list (out x in) for main, or 'baseline'")
    ap.add_argument("--m", default="1,4,16,64,256,1024,4096", help="M values for main")
    ap.add_argument("--formats", default="fp8_block,fp8_tensor,fp8_row,fp8_row:fp8,mxfp8",
                    help="format[:act] list or 'all' (see tools/autotune.py)")
    ap.add_argument("--untabled-shapes", default="untabled", help="shapes for the untabled section")
    ap.add_argument("--untabled-m", default="1,16,256,4096", help="M values for the untabled section")
    ap.add_argument("--untabled-max-configs", type=int, default=3,
                    help="configs per candidate when tuning an untabled shape (as the shipped tables were tuned; 0 = all)")
    ap.add_argument("--quantizer-shape", default="28672x4096", help="weight shape for the quantizer section")
    ap.add_argument("--overhead-shape", default="4096x4096", help="weight shape for the overhead section (M = 1)")
    ap.add_argument("--tuned", default="", help="autotune output dir (journal.jsonl): per-candidate best configs")
    ap.add_argument("--tables", default="", help="set FP8DISPATCH_TUNING_DIR (overlay table dir) for this run")
    ap.add_argument("--skip", default="torch.reference", help="candidates never benchmarked (ids/backends/globs)")
    ap.add_argument("--no-candidates", action="store_true", help="only dispatch, bf16, _scaled_mm, GemLite rows")
    ap.add_argument("--decode-tiles", action="store_true",
                    help="give every weight copy its decode tiles (dispatch.add_decode_tiles, +N x K bytes each): the "
                         "dispatched path as an engine that opted in runs it")
    ap.add_argument("--quick", action="store_true", help="smoke test: 4096x4096, M 1 and 256, short timing")
    ap.add_argument("--out", default="bench_out", help="output directory")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop starting new shapes after this many seconds")
    ap.add_argument("--device", default="", help="cuda (default when available) or cpu (wall-clock smoke runs)")
    return ap


# --- helpers ---------------------------------------------------------------------------------------
def _git_commit() -> str:
    try:
        repo = pathlib.Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (out.stdout.strip() or "unknown") + ("+dirty" if dirty else "")
    except Exception:
        return "unknown"


def _short(e: BaseException, n: int = 300) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s if len(s) <= n else s[:n] + " ..."


class Bench:
    def __init__(self, args: argparse.Namespace):
        import torch

        from dispatch import registry
        from dispatch import target as target_mod
        from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, WallTimer, l2_bytes

        self.args = args
        self.torch = torch
        self.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.cuda = self.device.type == "cuda"
        self.target = target_mod.detect(self.device)
        self.timer = CudaTimer() if self.cuda else WallTimer()
        self.l2 = l2_bytes(self.device)
        if not self.cuda:  # CPU: a smoke test of the tool, not a measurement
            self.rotation = RotationPolicy(max_copies=2)
            self.policy = TimingPolicy(target_graph_us=0.0, min_calls=2, max_calls=4, replays=2, eager_iters=2)
        elif args.quick:
            self.rotation = RotationPolicy()
            self.policy = TimingPolicy(target_graph_us=1000.0, min_calls=10, max_calls=100, replays=3, eager_iters=5)
        else:
            self.rotation = RotationPolicy()
            self.policy = TimingPolicy(target_graph_us=3000.0, min_calls=20, max_calls=300, replays=7, eager_iters=10)
        self.registry = registry
        self.out = pathlib.Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.deadline = time.time() + args.budget_s if args.budget_s > 0 else None
        self.ceilings = None
        self.tuned = self._load_tuned(args.tuned) if args.tuned else {}
        self.results: dict[str, Any] = {
            "meta": {"device": self.target.device_name, "arch": self.target.arch, "torch": torch.__version__,
                     "triton": self.target.triton_version, "runtime": self.target.runtime_version,
                     "commit": _git_commit(), "sources": source_digest(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                     "command": "python -m tools.bench " + " ".join(sys.argv[1:]),
                     "overlay_tables": os.environ.get("FP8DISPATCH_TUNING_DIR", ""),
                     "decode_tiles": bool(getattr(args, "decode_tiles", False)),
                     "unavailable_backends": registry.unavailable_backends(),
                     "method": "graph replay of R calls rotating over weight copies (> 3.3x L2 per rotation), "
                               "median per call; eager = median CUDA-event interval of back-to-back calls"},
            "ceilings": None, "main": [], "quantizer": [], "overhead": [], "untabled": [], "errors": []}

    # --- infrastructure -----------------------------------------------------------------------------
    def save(self) -> None:
        from tools.perf.report import write_json

        write_json(self.out / "results.json", self.results)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def _device_lost(self, e: BaseException) -> None:
        from tools.perf.timing import DeviceLost, check_device

        if self.cuda:
            why = check_device(self.torch)
            if why:
                raise DeviceLost(f"device unusable after {_short(e)}; check: {why}") from e

    def _pair_rows(self, section: str, pairs: list, fields: dict[str, Any],
                   measure: Callable[[dict[str, Any], Any, Any], None]) -> None:
        """One row per (fmt, act) into results[section]: format, act, `fields`, then what measure(row, fmt, act)
        adds, or the error it raised (a lost device propagates); saved after the last pair."""
        for fmt, act in pairs:
            row: dict[str, Any] = {"format": fmt.value, "act": act.value, **fields}
            try:
                measure(row, fmt, act)
            except Exception as e:
                self._device_lost(e)
                row.update(status="error", error=_short(e))
            self.results[section].append(row)
            print(f"[bench] {section} {row}", flush=True)
        self.save()

    def _weight_set(self, w: Any, fmt: Any, act: Any, what: str) -> Any:
        """The rotation copies of `w` quantized to (fmt, act), or None with "<what>: quantize failed: ..."
        recorded (a lost device propagates)."""
        from dispatch.weight_quant import quantize
        from tools.perf.workload import build_weight_set

        try:
            return build_weight_set(w, fmt, act, l2_bytes=self.l2, rotation=self.rotation, quantize=quantize,
                                    decode_tiles=self._tiles(w.shape[1]))
        except Exception as e:
            self._device_lost(e)
            self.results["errors"].append(f"{what}: quantize failed: {_short(e)}")
            return None

    def _tiles(self, k: int) -> bool:
        """Whether weights of K columns get decode tiles in this run (--decode-tiles; CUDA; K % 16 == 0)."""
        return bool(getattr(self.args, "decode_tiles", False)) and self.cuda and k % 16 == 0

    @staticmethod
    def _load_tuned(path: str) -> dict[tuple, dict]:
        """(fmt, act, n, k, m, impl) -> config dict of the candidate's fastest correct config in the journal(s)."""
        import json

        from tools.perf.journal import Journal

        best: dict[tuple, tuple[int, float, dict]] = {}
        for jp in sorted(pathlib.Path(path).glob("**/journal.jsonl")):
            for rec in Journal(jp):
                k = rec["key"]
                if rec.get("status") != "ok" or rec.get("best_us") is None:
                    continue
                key = (k["fmt"], k["act"], k["n"], k["k"], k["m"], k["impl"])
                rank = (0 if k["stage"] == "final" else 1, rec["best_us"])  # careful timings first
                if key not in best or rank < best[key][:2]:
                    best[key] = (*rank, json.loads(k["config"]))
        return {k: v[2] for k, v in best.items()}

    def config_for(self, cand: Any, problem: Any) -> tuple[Any, str]:
        from dispatch import tables
        from dispatch.decode_tiles import LAYOUT as DECODE_TILES

        key = (problem.fmt.value, problem.act.value, problem.n, problem.k, problem.m, cand.id)
        if key in self.tuned:
            return cand.config_type.from_dict(self.tuned[key]), "tuned"
        key = (problem.fmt, problem.act, problem.n, problem.k, problem.bucket)
        layouts = (DECODE_TILES, tables.ROW_MAJOR) if problem.decode_tiles else (tables.ROW_MAJOR,)
        for layout in layouts:
            for _, _, e in tables.tables_for(self.target).exact(key, layout):
                if e.impl == cand.id:
                    return cand.config_type.from_dict(dict(e.config)), "table"
        return cand.default_config(problem, self.target), "default"

    def measure(self, route: Any, ctx: Any, ref: Any, true: Any, problem: Any) -> dict[str, Any]:
        from tools.perf.routes import RouteUnavailable
        from tools.perf.timing import DeviceLost
        from tools.perf.verify import Tolerance, check_output
        from tools.perf.workload import rel_err

        torch = self.torch
        row: dict[str, Any] = {"route": route.name, "group": route.group}
        try:
            call, ncopies = route.make(ctx)
        except RouteUnavailable as e:
            return {**row, "status": "n/a", "error": str(e)[:300]}
        except Exception as e:
            self._device_lost(e)
            return {**row, "status": "error", "error": _short(e)}
        try:
            out = call(0)
            loose = Tolerance(rel_fro=0.2, rtol=1.0, atol_rms=1.0)  # own quantization: sanity only
            target_ref = ref if route.check == "format" else true
            v = check_output(out, target_ref, ctx.x.dtype, Tolerance() if route.check == "format" else loose)
            row["rel_err"] = v.rel_err
            row["rel_err_true"] = rel_err(out, true) if isinstance(out, torch.Tensor) and out.shape == true.shape \
                else None
            del out
        except DeviceLost:
            raise
        except Exception as e:
            self._device_lost(e)
            return {**row, "status": "error", "error": _short(e)}
        if not v.ok:
            return {**row, "status": "wrong", "error": v.reason}
        try:
            t = self.timer.time(call, ncopies, self.policy)
        except DeviceLost:
            raise
        except Exception as e:
            self._device_lost(e)
            return {**row, "status": "error", "error": "timing: " + _short(e)}
        us = t.best_us
        wbytes = 2 * problem.n * problem.k if route.bytes_kind == "bf16" else problem.weight_bytes
        copy = (self.ceilings.copy_gbps if self.ceilings else None) or self.target.spec.mem_gbps
        row.update(status="ok", us=t.us, eager_us=t.eager_us, best_us=us, method=t.method, ncopies=t.ncopies,
                   calls=t.calls, note=t.note, weight_bytes=wbytes,
                   pct_copy_bw=100.0 * wbytes / (us * 1e-6) / (copy * 1e9),
                   tflops=problem.flops / (us * 1e-6) / 1e12)
        return row

    # --- sections -----------------------------------------------------------------------------------
    def run_ceilings(self) -> None:
        from tools.perf.timing import Ceilings, measure_ceilings, warm_gpu

        if not self.cuda:
            self.ceilings = Ceilings()
        else:
            warm_gpu(1.0, self.device)
            self.ceilings = measure_ceilings(self.timer, self.device)
        self.results["ceilings"] = self.ceilings.to_dict()
        print(f"[bench] ceilings: {self.ceilings.to_dict()}", flush=True)

    def run_main(self, shapes: list, pairs: list, ms: list[int]) -> None:
        from tools.perf.timing import DeviceLost
        from tools.perf.tuner import _matches
        from tools.perf.workload import bf16_copies, make_weight

        torch = self.torch
        skip = [s for s in self.args.skip.split(",") if s]
        for shape in shapes:
            if self.out_of_time():
                self.results["errors"].append(f"budget spent before shape {shape}")
                print(f"[bench] time budget spent; skipping {shape} and later shapes", flush=True)
                break
            n, k = shape.n, shape.k
            w = make_weight(n, k, self.device)
            wcopies: list = []
            xs: dict[int, tuple] = {}  # M -> (x, fp32 product with the unquantized weight), shared by formats

            def w_bf16() -> list:
                if not wcopies:
                    wcopies.extend(bf16_copies(w, l2_bytes=self.l2, rotation=self.rotation))
                return wcopies

            for fmt, act in pairs:
                if self.out_of_time():
                    self.results["errors"].append(f"budget spent before {fmt}/{act} {n}x{k}")
                    break
                t0 = time.perf_counter()
                ws = self._weight_set(w, fmt, act, f"{fmt}/{act} {n}x{k}")
                if ws is None:
                    continue
                cands = [] if self.args.no_candidates else [
                    c for c in self.registry.candidates() if (fmt, act) in c.serves and not _matches(skip, c)]
                for m in ms:
                    try:
                        self._main_problem(shape, fmt, act, m, w, ws, w_bf16, xs, cands)
                    except DeviceLost:
                        raise
                    except Exception as e:  # e.g. out of memory for this M: record, keep going
                        self._device_lost(e)
                        self.results["errors"].append(f"{fmt}/{act} {n}x{k} M={m}: {_short(e)}")
                print(f"[bench] {fmt}/{act} {n}x{k}: {len(ms)} M values, {time.perf_counter() - t0:.1f}s", flush=True)
                del ws
                self.save()
            if self.cuda:
                torch.cuda.empty_cache()

    def _main_problem(self, shape: Any, fmt: Any, act: Any, m: int, w: Any, ws: Any, w_bf16: Any,
                      xs: dict, cands: list) -> None:
        from dispatch import reference
        from dispatch.problem import Problem
        from tools.perf.routes import RouteCtx, candidate_route, gemlite_route, standard_routes
        from tools.perf.workload import make_activation

        torch = self.torch
        n, k = shape.n, shape.k
        problem = Problem(fmt, act, m, n, k, torch.bfloat16, torch.bfloat16, False, self._tiles(k))
        if m not in xs:
            x = make_activation(m, k, self.device)
            acc = torch.float64 if self.cuda else torch.float32
            xs[m] = (x, (x.to(acc) @ w.to(acc).T).float())
        x, true = xs[m]
        ref = reference.linear(x, ws.qw, None, torch.float32)
        ctx = RouteCtx(fmt, act, x, ws, w_bf16)
        routes = standard_routes(fmt, act)
        unsupported = []
        for c in cands:
            try:
                av = c.available()
                sup = c.supports(problem, self.target) if av else av
                if not sup:
                    unsupported.append({"route": c.id, "group": "backend", "status": "unsupported",
                                        "error": sup.reason})
                    continue
                cfg, src = self.config_for(c, problem)
            except Exception as e:
                unsupported.append({"route": c.id, "group": "backend", "status": "error", "error": _short(e)})
                continue
            routes.append(candidate_route(c, cfg, src))
        g = gemlite_route(fmt, act)
        if g is not None:
            routes.append(g)
        rows = [self.measure(r, ctx, ref, true, problem) for r in routes] + unsupported
        self.results["main"].append({"format": fmt.value, "act": act.value, "n": n, "k": k, "m": m,
                                     "shape_name": shape.name, "decision": self.decision(x, ws.qw), "rows": rows})

    def decision(self, x: Any, qw: Any) -> dict[str, Any]:
        try:
            import dispatch

            e = dispatch.explain(x, qw)
            d = e.decision
            return {"candidate": d.candidate_id, "config": d.config.to_dict(), "source": d.source,
                    "detail": d.detail}
        except Exception as ex:
            return {"error": _short(ex)}

    def run_quantizer(self, pairs: list, n: int = 28672, k: int = 4096) -> None:
        import dispatch
        from tools.perf.workload import make_weight

        torch = self.torch
        w = make_weight(n, k, self.device)

        def measure(row: dict[str, Any], fmt: Any, act: Any) -> None:
            qw = dispatch.quantize(w, fmt, act=act.value)  # warm (and compile, if it compiles)
            out_bytes = qw.nbytes
            del qw
            times, peaks = [], []
            for _ in range(5 if self.cuda else 2):
                if self.cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats(self.device)
                    base = torch.cuda.memory_allocated(self.device)
                t0 = time.perf_counter()
                qw = dispatch.quantize(w, fmt, act=act.value)
                if self.cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                if self.cuda:
                    peaks.append(torch.cuda.max_memory_allocated(self.device) - base)
                del qw
            t = statistics.median(times)
            moved = 2 * n * k + out_bytes  # bf16 read + codes and scales written
            copy = (self.ceilings.copy_gbps if self.ceilings else None) or self.target.spec.mem_gbps
            if self.cuda:
                row.update(self._quantizer_kernel_time(w, fmt, moved, copy))
            row.update(status="ok", ms=t * 1e3, gbps=moved / t / 1e9, pct_copy_bw=100 * moved / t / 1e9 / copy,
                       bytes_moved=moved, output_bytes=out_bytes,
                       peak_transient_bytes=(max(peaks) - out_bytes) if peaks else None,
                       note="host-timed (quantize may synchronize); peak = max_memory_allocated - before - output")

        self._pair_rows("quantizer", pairs, {"n": n, "k": k}, measure)

    def _quantizer_kernel_time(self, w: Any, fmt: Any, moved: int, copy: float) -> dict[str, Any]:
        """Device time of the fused quantizer kernels alone (graph replay), without dispatch.quantize's Python
        validation and its one host sync: the number the >= 70 % of copy bandwidth target is about."""
        from dispatch.formats import MXScaleMode
        from dispatch.target import detect
        from kernels_triton.weight_quant import quantize_weight
        from tools.perf.timing import TimingPolicy

        hw = detect(w.device).has_triton_fp8_dtype
        pol = TimingPolicy(target_graph_us=5000.0, min_calls=5, max_calls=50, replays=5, eager_iters=3)
        try:
            # one copy: the bf16 weight (2 B/elem) is already > 3x the L2, so every call reads it from HBM
            t = self.timer.time(lambda i: quantize_weight(w, fmt, MXScaleMode.RCEIL, hw_fp8=hw), 1, pol)
        except Exception as e:
            self._device_lost(e)
            return {"kernel_error": _short(e)}
        us = t.us if t.us is not None else t.eager_us
        return {"kernel_ms": us / 1e3, "kernel_pct_copy_bw": 100 * moved / (us * 1e-6) / 1e9 / copy,
                "kernel_method": t.method}

    def run_overhead(self, pairs: list, n: int = 4096, k: int = 4096) -> None:
        import dispatch
        from dispatch.overhead import host_overhead
        from tools.perf.workload import make_weight

        w = make_weight(n, k, self.device)

        def measure(row: dict[str, Any], fmt: Any, act: Any) -> None:
            qw = dispatch.quantize(w, fmt, act=act.value)
            row.update(status="ok", **host_overhead(qw, m=1))

        self._pair_rows("overhead", pairs, {"n": n, "k": k, "m": 1}, measure)

    def run_untabled(self, shapes: list, pairs: list, ms: list[int]) -> None:
        from dispatch import reference
        from dispatch.weight_quant import quantize
        from tools.perf.journal import Journal
        from tools.perf.routes import RouteCtx, standard_routes
        from dispatch.problem import Problem
        from tools.perf.timing import QUICK
        from tools.perf.tuner import TuneEnv, TuneSettings, Tuner
        from tools.perf.workload import make_activation, make_weight

        torch = self.torch
        settings = TuneSettings(skip=tuple(s for s in self.args.skip.split(",") if s), compare_bf16=False,
                                rotation=self.rotation, quick=QUICK if self.cuda else self.policy,
                                final=self.policy, top_k=2,
                                max_configs=getattr(self.args, "untabled_max_configs", 3) or None,
                                decode_tiles=self._tiles(16))
        env = TuneEnv(self.device, self.target, self.timer, self.registry.candidates(), self.registry.source_hash,
                      quantize, reference.linear, self.l2)
        tuner = Tuner(env, settings, Journal(self.out / "untabled" / "journal.jsonl"))
        dispatch_route = standard_routes(pairs[0][0], pairs[0][1])[0]  # dispatch.linear
        for shape in shapes:
            if self.out_of_time():
                self.results["errors"].append(f"budget spent before untabled shape {shape}")
                break
            w = make_weight(shape.n, shape.k, self.device)
            for fmt, act in pairs:
                ws = self._weight_set(w, fmt, act, f"untabled {fmt}/{act} {shape}")
                if ws is None:
                    continue
                for m in ms:
                    problem = Problem(fmt, act, m, shape.n, shape.k, torch.bfloat16, torch.bfloat16, False,
                                      self._tiles(shape.k))
                    x = make_activation(m, shape.k, self.device)
                    ref = reference.linear(x, ws.qw, None, torch.float32)
                    row: dict[str, Any] = {"format": fmt.value, "act": act.value, "n": shape.n, "k": shape.k, "m": m,
                                           "decision": self.decision(x, ws.qw)}
                    row["fallback"] = self.measure(dispatch_route, RouteCtx(fmt, act, x, ws, lambda: [w]), ref, ref,
                                                   problem)
                    try:
                        res = tuner.tune(problem)
                        win = res.winner
                        row["tuned"] = ({"candidate": win.impl, "config": win.config, "us": win.us}
                                        if win else {"error": "no correct candidate",
                                                     "failed": [(o.impl, o.error) for o in res.failed]})
                    except Exception as e:
                        self._device_lost(e)
                        row["tuned"] = {"error": _short(e)}
                    fb, tu = row["fallback"].get("best_us"), row["tuned"].get("us")
                    row["fallback_over_tuned"] = fb / tu if fb and tu else None
                    self.results["untabled"].append(row)
                    print(f"[bench] untabled {fmt}/{act} {shape.n}x{shape.k} M={m}: fallback "
                          f"{row['decision'].get('candidate')} ({row['decision'].get('source')}) "
                          f"{fb if fb is None else round(fb, 2)} us vs tuned {row['tuned'].get('candidate')} "
                          f"{tu if tu is None else round(tu, 2)} us", flush=True)
                del ws
                self.save()
            tuner.work.release()


def main(argv: list[str] | None = None) -> int:
    from tools.autotune import parse_pairs
    from tools.perf.shapes import parse_ints, parse_shapes
    from tools.perf.timing import DeviceLost
    from tools.perf.bench_report import render

    args = build_parser().parse_args(argv)
    if args.tables:
        os.environ["FP8DISPATCH_TUNING_DIR"] = args.tables
    what = {"main", "quantizer", "overhead", "untabled"} if args.what == "all" else set(args.what.split(","))
    unknown = what - {"main", "quantizer", "overhead", "untabled"}
    if unknown:
        print(f"unknown --what {sorted(unknown)}", file=sys.stderr)
        return 2
    shapes = parse_shapes("4096x4096" if args.quick else args.shapes)
    ms = [1, 256] if args.quick else parse_ints(args.m)
    pairs = parse_pairs(args.formats)
    b = Bench(args)
    t0 = time.time()
    rc = 0
    try:
        b.run_ceilings()
        if "main" in what:
            b.run_main(shapes, pairs, ms)
        if "quantizer" in what:
            qs = parse_shapes(args.quantizer_shape)[0]
            b.run_quantizer(pairs, qs.n, qs.k)
        if "overhead" in what:
            os_ = parse_shapes(args.overhead_shape)[0]
            b.run_overhead(pairs, os_.n, os_.k)
        if "untabled" in what:
            b.run_untabled(parse_shapes(args.untabled_shapes), pairs, parse_ints(args.untabled_m))
    except DeviceLost as e:
        b.results["errors"].append(f"device lost: {e}")
        print(f"[bench] device fault; results so far are saved: {e}", flush=True)
        rc = EXIT_DEVICE_LOST
    finally:
        b.results["meta"]["elapsed_s"] = round(time.time() - t0, 1)
        b.save()
        summary = render(b.results, b.out)
    print("\n" + summary, flush=True)
    print(f"\n[bench] full results: {b.out / 'results.json'}, {b.out / 'report.md'}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
