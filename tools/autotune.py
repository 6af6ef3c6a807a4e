"""Autotune the dispatcher's candidates on this GPU and write a tuning table.

    python -m tools.autotune --shapes baseline --m 1,4,16,64,256,1024,4096 --table tuning_db/h200.yaml
    python -m tools.autotune --hf-config path/to/config.json --tp 2 --formats all
    python -m tools.autotune --shapes 4096x4096 --simulate sm_90 --dry-run      # the plan, no GPU needed

Shapes are N x K (out_features x in_features). For every problem (shape, format/act, M) each supported
candidate x config is first checked against dispatch.reference (wrong or crashing: recorded as failed,
never timed), then timed with CUDA graphs over weight copies that overflow L2 (tools/perf/timing.py); the
winner goes into the YAML table through dispatch.tables (re-saved after every problem). Every measurement
is journaled to <out>/journal.jsonl first, so an interrupted run resumes where it stopped: rerun the same
command. A candidate that kills the CUDA context (or the process) is recorded as failed by the supervising
parent process, which restarts the work without it. See docs/perf/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence

if __package__ in (None, ""):  # `python tools/autotune.py`: make the repository importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

CHILD_ENV = "FP8DISPATCH_AUTOTUNE_CHILD"
DEADLINE_ENV = "FP8DISPATCH_AUTOTUNE_DEADLINE"
EXIT_DEVICE_LOST = 75


def _cpu_timing() -> dict:
    from tools.perf.timing import RotationPolicy, TimingPolicy

    small = TimingPolicy(target_graph_us=0.0, min_calls=2, max_calls=4, replays=2, eager_iters=2)
    return {"quick": small, "final": small, "rotation": RotationPolicy(max_copies=2)}


def parse_pairs(spec: str):
    """"fp8_block,fp8_row:fp8" -> [(Format, Act)]; a bare format takes its default act; "all" = every valid pair."""
    from dispatch.formats import DEFAULT_ACT, Act, Format, resolve_act

    if spec.strip() == "all":
        return [(f, a) for f in Format for a in Act if (f, a) != (Format.MXFP8, Act.FP8)]
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        f_s, _, a_s = part.partition(":")
        f = Format.parse(f_s)
        a = resolve_act(f, a_s or DEFAULT_ACT[f])
        if (f, a) not in out:
            out.append((f, a))
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.autotune", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="", help="NxK list (out x in), or 'baseline' / 'untabled'")
    ap.add_argument("--hf-config", default="", help="Hugging Face config.json: qkv, o, gate_up, down, lm_head")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel degree applied to --hf-config shapes")
    ap.add_argument("--m", default="1,4,16,64,256,1024,4096", help="M values (token counts) to tune")
    ap.add_argument("--formats", default="fp8_block,fp8_tensor,fp8_row,mxfp8",
                    help="format[:act] list (act fp8 = W8A8, bf16 = W8A16; bare = the format's default) or 'all'")
    ap.add_argument("--table", default="", help="YAML table to create or merge into (default tuning_db/<device>.yaml)")
    ap.add_argument("--out", default="", help="directory for journal.jsonl, ceilings.json, summary.{md,json} "
                                              "(default .cache/autotune/<device>)")
    ap.add_argument("--retune", action="store_true", help="measure problems already in the table again")
    ap.add_argument("--decode-tiles", action="store_true",
                    help="tune weights given decode tiles (dispatch.add_decode_tiles): the candidates that read them "
                         "compete with the rest; writes a table of weight_layout decode_tiles (default "
                         "tuning_db/<device>_decode_tiles.yaml); problems where no candidate reads tiles are skipped")
    ap.add_argument("--max-configs", type=int, default=0, help="per candidate: only the first N configs (0 = all)")
    ap.add_argument("--max-configs-for", nargs="*", default=[], metavar="ID=N",
                    help="per candidate id: N configs instead of --max-configs (0 = all), e.g. cuda.w8a16_gemv=0")
    ap.add_argument("--keep-configs", nargs="*", default=[], metavar="TABLE",
                    help="also try, past --max-configs, the config each TABLE chose for the same problem and "
                         "candidate (stale entries included: a re-tune after a kernel edit retries the old winner)")
    ap.add_argument("--top-k", type=int, default=3, help="configs re-timed carefully after the quick pass")
    ap.add_argument("--only", default="", help="only these candidate ids / backends / globs (comma-separated)")
    ap.add_argument("--skip", default="torch.reference", help="never tune these ids / backends / globs")
    ap.add_argument("--no-bf16", action="store_true", help="do not time bf16 F.linear for the speedup column")
    ap.add_argument("--no-ceilings", action="store_true", help="skip copy-bandwidth / matmul ceilings")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop starting new problems after this many "
                                                                "seconds (rerun to resume); 0 = no limit")
    ap.add_argument("--device", default="", help="cuda (default when available) or cpu (wall-clock smoke runs)")
    ap.add_argument("--simulate", default="", help="with --dry-run: plan for a simulated arch (sm_80, sm_90, ...)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (candidates, config counts) and exit")
    ap.add_argument("--max-restarts", type=int, default=4, help="restarts after a candidate kills the process")
    ap.add_argument("--no-supervise", action="store_true", help="run in this process (no crash restarts)")
    ap.add_argument("--rel-tol", type=float, default=1e-2, help="max relative Frobenius error vs the reference")
    return ap


# --- Supervisor ------------------------------------------------------------------------------------
def supervise(argv: list[str], args: argparse.Namespace, out_root: pathlib.Path) -> int:
    from tools.perf.journal import Journal

    repo = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, **{CHILD_ENV: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    if args.budget_s > 0:
        env[DEADLINE_ENV] = str(time.time() + args.budget_s)
    cmd = [sys.executable, "-m", "tools.autotune", *argv]
    for attempt in range(args.max_restarts + 1):
        child = subprocess.Popen(cmd, env=env)
        try:
            rc = child.wait()
        except KeyboardInterrupt:
            child.terminate()
            child.wait()
            raise
        if rc == 0:
            return 0
        crashed = rc == EXIT_DEVICE_LOST or rc < 0 or rc in (134, 139)  # device fault, signal, abort, segfault
        if not crashed:
            return rc
        culprits = []
        for jp in sorted(out_root.glob("**/journal.jsonl")):
            culprits += Journal(jp).fail_dangling(
                f"the process died while this ran (exit code {rc}): crash or device fault", pid=child.pid)
        names = ", ".join(f"{k.impl} {k.config} M={k.m}" for k in culprits) or "none identified"
        print(f"[autotune] worker exited with {rc}; recorded as failed: {names}; restarting "
              f"({attempt + 1}/{args.max_restarts})", flush=True)
    print("[autotune] too many restarts; the journal and table hold everything measured so far", flush=True)
    return 1


# --- Worker ----------------------------------------------------------------------------------------
def resolve_shapes(args: argparse.Namespace):
    from tools.perf.shapes import ShapeError, dedupe, parse_shapes, shapes_from_config_file

    shapes = []
    if args.hf_config:
        shapes += shapes_from_config_file(args.hf_config, args.tp)
    elif args.tp != 1:
        raise ShapeError("--tp applies to --hf-config shapes; shard --shapes yourself")
    if args.shapes:
        shapes += parse_shapes(args.shapes)
    if not shapes:
        raise ShapeError("give --shapes NxK,... (or 'baseline') and/or --hf-config config.json")
    return dedupe(shapes)


DEFAULT_OUT_ROOT = pathlib.Path(".cache") / "autotune"


def default_out(target) -> pathlib.Path:
    slug = "".join(ch if ch.isalnum() else "_" for ch in target.device_name.lower()).strip("_")
    return DEFAULT_OUT_ROOT / (slug or target.arch)


def summarize(results, ceilings, copy_fallback: float) -> tuple[str, list[dict]]:
    from tools.perf.report import fmt_us, md_table

    rows, data = [], []
    copy = ceilings.copy_gbps or copy_fallback
    for r in results:
        p, w = r.problem, r.winner
        pct = 100.0 * p.weight_bytes / (w.us * 1e-6) / (copy * 1e9) if (w and w.us and copy) else None
        tf = p.flops / (w.us * 1e-6) / 1e12 if (w and w.us) else None
        speed = r.bf16_us / w.us if (w and w.us and r.bf16_us) else None
        ok = sorted((o for o in r.outcomes if o.status == "ok" and o.us is not None), key=lambda o: o.us)
        runner = next((o for o in ok if o is not w), None)
        cfg = ",".join(f"{k}={v}" for k, v in (w.config.items() if w else []))
        rows.append([f"{p.fmt}/{p.act}", f"{p.n}x{p.k}", p.m, w.impl if w else (r.skipped or "NONE CORRECT"),
                     cfg or "-", fmt_us(w.us if w else None), fmt_us(w.eager_us if w else None),
                     f"{pct:.0f}%" if pct is not None else "-", f"{tf:.0f}" if tf is not None else "-",
                     f"{speed:.2f}x" if speed else "-",
                     f"{runner.impl} {fmt_us(runner.us)}" if runner else "-", len(r.failed)])
        data.append({"format": p.fmt.value, "act": p.act.value, "n": p.n, "k": p.k, "m": p.m,
                     "winner": w.impl if w else None, "config": w.config if w else None,
                     "us": w.us if w else None, "eager_us": w.eager_us if w else None, "pct_copy_bw": pct,
                     "tflops": tf, "bf16_us": r.bf16_us, "speedup_vs_bf16": speed, "skipped": r.skipped,
                     "elapsed_s": r.elapsed_s,
                     "outcomes": [o.__dict__ for o in r.outcomes]})
    table = md_table(["format/act", "N x K", "M", "winner", "config", "us", "eager us", "% copy BW", "TFLOP/s",
                      "vs bf16", "runner-up", "failed"], rows)
    fails: dict[tuple[str, str], int] = {}
    for r in results:
        for o in r.failed:
            fails[(o.impl, o.error[:160])] = fails.get((o.impl, o.error[:160]), 0) + 1
    if fails:
        table += "\n\nFailed candidate configs (verified before timing; never timed):\n\n" + md_table(
            ["candidate", "error", "count"], [[i, e, c] for (i, e), c in sorted(fails.items())])
    return table, data


def worker(args: argparse.Namespace) -> int:
    import torch

    from dispatch import registry, reference, target as target_mod
    from dispatch.decode_tiles import LAYOUT as DECODE_TILES
    from dispatch.tables import ROW_MAJOR
    from dispatch.weight_quant import quantize
    from tools.perf.journal import Journal
    from tools.perf.report import write_atomic, write_json
    from tools.perf.shapes import parse_ints
    from tools.perf.table_sink import TableSink, default_table_path
    from tools.perf.timing import (Ceilings, CudaTimer, DeviceLost, WallTimer, l2_bytes, measure_ceilings,
                                   warm_gpu)
    from tools.perf.tuner import TuneEnv, TuneSettings, Tuner
    from tools.perf.verify import Tolerance

    shapes = resolve_shapes(args)
    pairs = parse_pairs(args.formats)
    ms = parse_ints(args.m)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    target = target_mod.Target.simulated_for(args.simulate) if args.simulate else target_mod.detect(device)
    cands = registry.candidates()
    for b, why in registry.unavailable_backends().items():
        print(f"[autotune] backend {b} unavailable: {why}", flush=True)
    cpu_extra = {} if device.type == "cuda" else _cpu_timing()  # CPU runs are smoke tests, not measurements
    settings = TuneSettings(top_k=args.top_k, max_configs=args.max_configs or None, **cpu_extra,
                            max_configs_for=parse_max_configs_for(args.max_configs_for),
                            also_try=kept_configs(args.keep_configs) if args.keep_configs else None,
                            tolerance=Tolerance(rel_fro=args.rel_tol),
                            skip=tuple(s for s in args.skip.split(",") if s),
                            only=tuple(s for s in args.only.split(",") if s), compare_bf16=not args.no_bf16,
                            decode_tiles=args.decode_tiles)
    timer = CudaTimer() if device.type == "cuda" else WallTimer()
    env = TuneEnv(device, target, timer, cands, registry.source_hash, quantize, reference.linear,
                  l2_bytes(device), log=lambda s: print(s, flush=True))
    total = len(shapes) * len(pairs) * len(ms)
    print(f"[autotune] {target.device_name} ({target.arch}), torch {target.torch_version}, triton "
          f"{target.triton_version}; {len(shapes)} shapes x {len(pairs)} formats x {len(ms)} M = {total} problems; "
          f"{len(cands)} candidates", flush=True)

    if args.dry_run:
        from dispatch.problem import Problem

        tuner = Tuner(env, settings, Journal(None))
        n_cfg = 0
        for s in shapes:
            for f, a in pairs:
                for m in ms:
                    todo, unsup = tuner.plan(Problem(f, a, m, s.n, s.k, decode_tiles=args.decode_tiles))
                    n = sum(len(c) for _, c in todo)
                    n_cfg += n
                    print(f"{f}/{a} {s.n}x{s.k} M={m}: {n} configs over "
                          f"{', '.join(f'{c.id}({len(cf)})' for c, cf in todo) or 'nothing'}"
                          + (f"; unsupported: {', '.join(o.impl for o in unsup)}" if unsup else ""))
        print(f"[autotune] dry run: {n_cfg} candidate configs to verify and time")
        return 0

    out_dir = pathlib.Path(args.out) if args.out else default_out(target)
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = DECODE_TILES if args.decode_tiles else ROW_MAJOR
    table_path = pathlib.Path(args.table) if args.table else default_table_path(target, layout)
    sink = TableSink(table_path, target, generated_by="tools/autotune.py " + " ".join(sys.argv[1:]), layout=layout)
    journal = Journal(out_dir / "journal.jsonl")
    deadline = float(os.environ[DEADLINE_ENV]) if os.environ.get(DEADLINE_ENV) else (
        time.time() + args.budget_s if args.budget_s > 0 else None)

    ceilings = Ceilings()
    if device.type == "cuda":
        warm_gpu(1.0, device)
        if not args.no_ceilings:
            ceilings = measure_ceilings(timer, device)
            print(f"[autotune] ceilings: {json.dumps(ceilings.to_dict())}", flush=True)
    write_json(out_dir / "ceilings.json", {"ceilings": ceilings.to_dict(), "device": target.device_name,
                                           "arch": target.arch, "torch": torch.__version__,
                                           "time": time.strftime("%Y-%m-%d %H:%M:%S")})
    copy_fallback = target.spec.mem_gbps

    def hash_of(impl: str) -> str | None:
        c = registry.get(impl)
        return registry.source_hash(c) if c is not None else None

    tuner = Tuner(env, settings, journal, is_current=None if args.retune else (lambda p: sink.is_current(p, hash_of)),
                  deadline=deadline)
    results = []
    t_start = time.time()
    try:
        for i, res in enumerate(tuner.run([(s.n, s.k) for s in shapes], pairs, ms), 1):
            results.append(res)
            p, w = res.problem, res.winner
            if w is not None:
                sink.add(res, ceilings, copy_fallback)
            n_ok = sum(o.status == "ok" for o in res.outcomes)
            n_uns = sum(o.status == "unsupported" for o in res.outcomes)
            head = f"[{i}/{total}] {p.fmt}/{p.act} {p.n}x{p.k} M={p.m}:"
            if res.skipped:
                print(f"{head} skipped: {res.skipped}", flush=True)
                continue
            if w is None:
                print(f"{head} NO CORRECT CANDIDATE ({len(res.failed)} failed, {n_uns} unsupported)", flush=True)
                continue
            sp = f" | bf16 {res.bf16_us:.2f} us -> {res.bf16_us / w.us:.2f}x" if res.bf16_us else ""
            print(f"{head} {w.impl} {w.config} {w.us:.2f} us{sp} | {n_ok} ok, {len(res.failed)} failed, "
                  f"{n_uns} unsupported | {res.elapsed_s:.1f}s, total {time.time() - t_start:.0f}s", flush=True)
    except DeviceLost as e:
        print(f"[autotune] device fault, worker exits for a restart: {e}", flush=True)
        return EXIT_DEVICE_LOST
    finally:
        if results:
            md, data = summarize(results, ceilings, copy_fallback)
            write_atomic(out_dir / "summary.md", md + "\n")
            write_json(out_dir / "summary.json", {"ceilings": ceilings.to_dict(), "problems": data})
    md, _ = summarize(results, ceilings, copy_fallback)
    print("\n" + md, flush=True)
    print(f"\n[autotune] {sink.written} entries written to {table_path}; journal {out_dir / 'journal.jsonl'}; "
          f"{time.time() - t_start:.0f}s", flush=True)
    return 0


def parse_max_configs_for(items: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """`--max-configs-for` values ("cuda.w8a16_gemv=0") as TuneSettings.max_configs_for pairs."""
    out = []
    for it in items:
        cid, sep, n = it.partition("=")
        if not sep or not cid or not n.isdigit():
            raise SystemExit(f"--max-configs-for takes ID=N with N >= 0 (0 = every config), got {it!r}")
        out.append((cid, int(n)))
    return tuple(out)


def kept_configs(paths: list[str]):
    """`TuneSettings.also_try` from tables: the config each entry chose, for its key and implementation."""
    from dispatch import tables

    chosen: dict[tuple, list[dict]] = {}
    for p in paths:
        for e in tables.load_table(p).entries:
            chosen.setdefault(e.key + (e.impl,), []).append(dict(e.config))

    def also_try(problem, cand):
        out = []
        for d in chosen.get((problem.fmt, problem.act, problem.n, problem.k, problem.bucket, cand.id), []):
            try:
                out.append(cand.config_type.from_dict(d))
            except (TypeError, ValueError):  # a config of another version of the candidate: not offered anyway
                continue
        return out

    return also_try


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.dry_run or args.no_supervise or os.environ.get(CHILD_ENV):
        return worker(args)
    # The parent never touches the GPU (a CUDA context here would outlive the worker's faults).
    return supervise(argv, args, pathlib.Path(args.out) if args.out else DEFAULT_OUT_ROOT)


if __name__ == "__main__":
    sys.exit(main())
