"""The autotune loop: for each problem, verify every candidate x config against the reference, time the
correct ones briefly, re-time the best few carefully, and report the winner.

Order of work and why:
1. Candidates come from the dispatcher's registry; those that do not serve the (format, act), are not
   available, or do not support the problem are listed as unsupported with the candidate's own reason.
2. Every config is FIRST run once and checked against dispatch.reference (tools/perf/verify.py). A config
   that raises or is wrong is recorded as failed with its error and is never timed.
3. Quick timing (timing.QUICK: a graph of ~20-60 calls, 3 replays) ranks the correct configs; the top
   `top_k` are timed again with timing.FINAL and the fastest of those wins. Most of the time in a tuning
   run is compilation; the quick stage keeps the rest small.
4. Every measurement goes to the journal first (resume, audit); the caller writes winners to the table.

Everything device-specific is injected (`TuneEnv`): tests run this loop on CPU tensors with fake candidates
and a fake clock.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time
from typing import Any, Callable, Iterator, Sequence

import torch

from dispatch.formats import Act, Format, QWeight
from dispatch.problem import Candidate, KernelConfig, Problem, m_bucket
from dispatch.target import Target

from .journal import Journal, MeasureKey, config_key
from .timing import FINAL, QUICK, DeviceLost, RotationPolicy, Timer, Timing, TimingPolicy, check_device
from .verify import Tolerance, check_output
from .workload import WeightSet, bf16_copies, build_weight_set, make_activation, make_weight

BF16_ID = "baseline.bf16_linear"  # journal id of the bf16 F.linear comparison (not a dispatcher candidate)
MAX_ERROR_CHARS = 600


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    quick: TimingPolicy = QUICK
    final: TimingPolicy = FINAL
    top_k: int = 3
    max_configs: int | None = None  # per candidate: the first N of configs() (backends list the likely first)
    # Per candidate id: its own N instead of max_configs (0 = every config), e.g. every config of a kernel whose
    # config space just grew while the others keep a short list.
    max_configs_for: tuple[tuple[str, int], ...] = ()
    tolerance: Tolerance = Tolerance()
    rotation: RotationPolicy = RotationPolicy()
    skip: tuple[str, ...] = ("torch.reference",)  # never tuned: exact but orders of magnitude slower
    only: tuple[str, ...] = ()  # if set, only these candidate ids / backends / globs
    compare_bf16: bool = True
    # Configs that must be tried even when max_configs cuts them, per (problem, candidate): e.g. the configs a
    # previous table chose (autotune --keep-configs), so that a re-tune never loses an earlier winner because a
    # config space was reordered. Only configs the candidate still offers for the problem are added.
    also_try: Callable[[Problem, Candidate], Sequence[KernelConfig]] | None = None
    # Every weight copy gets its decode tiles (dispatch.add_decode_tiles) and every problem has decode_tiles: the
    # candidates that read the tiles compete with the rest (autotune --decode-tiles; a table of weight_layout
    # decode_tiles).
    decode_tiles: bool = False


@dataclasses.dataclass
class TuneEnv:
    """What the loop needs from the outside world."""

    device: torch.device
    target: Target
    timer: Timer
    candidates: Sequence[Candidate]
    source_hash: Callable[[Candidate], str]
    quantize: Callable[..., QWeight]
    reference: Callable[..., torch.Tensor]
    l2_bytes: int
    log: Callable[[str], None] = print

    def device_check(self) -> str | None:
        return check_device(torch) if self.device.type == "cuda" else None


@dataclasses.dataclass
class Outcome:
    impl: str
    backend: str
    config: dict[str, Any]
    status: str  # "ok" | "failed" | "unsupported"
    error: str = ""
    rel_err: float | None = None
    us_quick: float | None = None
    us: float | None = None  # final (re-timed) graph median; None if not among the top_k
    eager_us: float | None = None
    method: str = ""
    ncopies: int = 0
    calls: int = 0
    resumed: bool = False

    @property
    def rank_us(self) -> float:
        return self.us if self.us is not None else (self.us_quick if self.us_quick is not None else float("inf"))


@dataclasses.dataclass
class ProblemResult:
    problem: Problem
    outcomes: list[Outcome]
    winner: Outcome | None
    source_hashes: dict[str, str]
    bf16_us: float | None = None
    skipped: str = ""  # why the problem was not tuned (already in the table, budget spent)
    elapsed_s: float = 0.0

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def _matches(patterns: Sequence[str], c: Candidate) -> bool:
    for p in patterns:
        if any(ch in p for ch in "*?["):
            if fnmatch.fnmatchcase(c.id, p):
                return True
        elif p in (c.id, c.backend):
            return True
    return False


def _short(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s if len(s) <= MAX_ERROR_CHARS else s[:MAX_ERROR_CHARS] + " ..."


class Workloads:
    """Tensors for the current shape (bf16 weight + copies), format (WeightSet) and M (x, references)."""

    def __init__(self, env: TuneEnv, rotation: RotationPolicy, decode_tiles: bool = False):
        self.env, self.rotation, self.decode_tiles = env, rotation, decode_tiles
        self._shape: tuple[int, int] | None = None
        self._w: torch.Tensor | None = None
        self._w_copies: list[torch.Tensor] | None = None
        self._sets: dict[tuple[Format, Act], WeightSet] = {}
        self._x: dict[tuple[int, int], torch.Tensor] = {}
        self._ref: dict[tuple[Format, Act, int], torch.Tensor] = {}

    def _use_shape(self, n: int, k: int) -> None:
        if self._shape != (n, k):
            self.release()
            self._shape = (n, k)

    def release(self) -> None:
        self._shape, self._w, self._w_copies = None, None, None
        self._sets.clear()
        self._x.clear()
        self._ref.clear()
        if self.env.device.type == "cuda":
            torch.cuda.empty_cache()

    def weight(self, n: int, k: int) -> torch.Tensor:
        self._use_shape(n, k)
        if self._w is None:
            self._w = make_weight(n, k, self.env.device)
        return self._w

    def bf16_copies(self, n: int, k: int) -> list[torch.Tensor]:
        w = self.weight(n, k)
        if self._w_copies is None:
            self._w_copies = bf16_copies(w, l2_bytes=self.env.l2_bytes, rotation=self.rotation)
        return self._w_copies

    def weight_set(self, fmt: Format, act: Act, n: int, k: int) -> WeightSet:
        w = self.weight(n, k)
        ws = self._sets.get((fmt, act))
        if ws is None:
            # One format's copies at a time: free the previous format's before allocating.
            self._sets.clear()
            self._ref.clear()
            ws = build_weight_set(w, fmt, act, l2_bytes=self.env.l2_bytes, rotation=self.rotation,
                                  quantize=self.env.quantize, decode_tiles=self.decode_tiles)
            self._sets[(fmt, act)] = ws
        return ws

    def x(self, m: int, k: int) -> torch.Tensor:
        if (m, k) not in self._x:
            self._x[(m, k)] = make_activation(m, k, self.env.device)
        return self._x[(m, k)]

    def ref(self, ws: WeightSet, m: int) -> torch.Tensor:
        key = (ws.fmt, ws.act, m)
        if key not in self._ref:
            self._ref[key] = self.env.reference(self.x(m, ws.k), ws.qw, None, torch.float32)
        return self._ref[key]


class Tuner:
    def __init__(self, env: TuneEnv, settings: TuneSettings, journal: Journal, *,
                 is_current: Callable[[Problem], bool] | None = None, deadline: float | None = None):
        self.env, self.s, self.journal = env, settings, journal
        self.is_current = is_current
        self.deadline = deadline
        self.work = Workloads(env, settings.rotation, settings.decode_tiles)

    # --- plan -------------------------------------------------------------------------------------
    def plan(self, problem: Problem) -> tuple[list[tuple[Candidate, list[KernelConfig]]], list[Outcome]]:
        """(candidate, configs) to measure, and the candidates that cannot run with their reasons."""
        todo: list[tuple[Candidate, list[KernelConfig]]] = []
        out: list[Outcome] = []
        pair = (problem.fmt, problem.act)
        for c in self.env.candidates:
            if pair not in c.serves or _matches(self.s.skip, c):
                continue
            if self.s.only and not _matches(self.s.only, c):
                continue
            try:
                av = c.available()
                sup = c.supports(problem, self.env.target) if av else av
            except Exception as e:  # a broken predicate is the candidate's failure, not the run's
                out.append(Outcome(c.id, c.backend, {}, "failed", f"supports() raised {_short(e)}"))
                continue
            if not sup:
                out.append(Outcome(c.id, c.backend, {}, "unsupported", sup.reason))
                continue
            try:
                cfgs = list(c.configs(problem, self.env.target))
            except Exception as e:
                out.append(Outcome(c.id, c.backend, {}, "failed", f"configs() raised {_short(e)}"))
                continue
            offered = cfgs
            limit = dict(self.s.max_configs_for).get(c.id, self.s.max_configs)
            if limit:
                cfgs = cfgs[:limit]
            if self.s.also_try is not None:
                cfgs += [x for x in self.s.also_try(problem, c) if x in offered and x not in cfgs]
            todo.append((c, cfgs))
        return todo, out

    def _key(self, problem: Problem, c: Candidate, cfg: KernelConfig, stage: str) -> MeasureKey:
        return MeasureKey(problem.fmt.value, problem.act.value, problem.n, problem.k, problem.m, c.id,
                          config_key(cfg.to_dict()), self.env.source_hash(c), stage)

    # --- measure ----------------------------------------------------------------------------------
    def _device_lost(self, e: BaseException) -> None:
        why = self.env.device_check()
        if why:
            raise DeviceLost(f"device unusable after {_short(e)}; check: {why}") from e

    def _timing_fields(self, t: Timing) -> dict[str, Any]:
        return {"us": t.us, "eager_us": t.eager_us, "best_us": t.best_us, "method": t.method,
                "ncopies": t.ncopies, "calls": t.calls, "replays_us": list(t.replays_us), "note": t.note}

    def _timed(self, c: Candidate, cfg: KernelConfig, ws: WeightSet, x: torch.Tensor, prepared: list[Any],
               out_dtype: torch.dtype, policy: TimingPolicy, what: str, **extra: Any) -> dict[str, Any]:
        """Journal fields of `c` timed over the weight copies (`extra` follows the status), or its failure
        ("<what> raised ..."); a lost device propagates."""
        copies = ws.copies
        try:
            t = self.env.timer.time(lambda i: c.run(x, copies[i], prepared[i], None, out_dtype, cfg),
                                    ws.ncopies, policy)
        except DeviceLost:
            raise
        except Exception as e:
            self._device_lost(e)
            return {"status": "failed", "error": f"{what} raised {_short(e)}", **extra}
        return {"status": "ok", **extra, **self._timing_fields(t)}

    def _quick(self, problem: Problem, c: Candidate, cfg: KernelConfig, ws: WeightSet) -> dict[str, Any]:
        x, ref = self.work.x(problem.m, problem.k), self.work.ref(ws, problem.m)
        try:
            prepared = ws.prepared(c.id, c.prepare)
        except Exception as e:
            self._device_lost(e)
            return {"status": "failed", "error": f"prepare() raised {_short(e)}"}
        try:
            out = c.run(x, ws.qw, prepared[0], None, problem.out_dtype, cfg)
            verdict = check_output(out, ref, problem.out_dtype, self.s.tolerance)
            del out
        except Exception as e:
            self._device_lost(e)
            return {"status": "failed", "error": f"run() raised {_short(e)}"}
        if not verdict.ok:
            return {"status": "failed", "error": f"wrong result: {verdict.reason}", "rel_err": verdict.rel_err}
        return self._timed(c, cfg, ws, x, prepared, problem.out_dtype, self.s.quick, "timing", rel_err=verdict.rel_err)

    def _final(self, problem: Problem, c: Candidate, cfg: KernelConfig, ws: WeightSet) -> dict[str, Any]:
        x = self.work.x(problem.m, problem.k)
        prepared = ws.prepared(c.id, c.prepare)
        return self._timed(c, cfg, ws, x, prepared, problem.out_dtype, self.s.final, "final timing")

    def _measure(self, key: MeasureKey, fn: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        rec = self.journal.get(key)
        if rec is not None:
            return rec, True
        self.journal.start(key)
        try:
            fields = fn()
        except DeviceLost as e:
            self.journal.finish(key, status="failed", error=f"device fault: {e}"[:MAX_ERROR_CHARS])
            raise
        return self.journal.finish(key, **fields), False

    def bf16_time(self, n: int, k: int, m: int) -> float | None:
        key = MeasureKey("bf16", "bf16", n, k, m, BF16_ID, "{}", "", "final")

        def run() -> dict[str, Any]:
            copies = self.work.bf16_copies(n, k)
            x = self.work.x(m, k)
            try:
                t = self.env.timer.time(lambda i: torch.nn.functional.linear(x, copies[i]), len(copies),
                                        self.s.final)
            except Exception as e:
                self._device_lost(e)
                return {"status": "failed", "error": _short(e)}
            return {"status": "ok", **self._timing_fields(t)}

        rec, _ = self._measure(key, run)
        return rec.get("best_us") if rec.get("status") == "ok" else None

    # --- one problem ------------------------------------------------------------------------------
    def tune(self, problem: Problem) -> ProblemResult:
        t0 = time.perf_counter()
        todo, outcomes = self.plan(problem)
        hashes = {c.id: self.env.source_hash(c) for c, _ in todo}
        if problem.decode_tiles and not any(c.reads_decode_tiles for c, _ in todo):
            return ProblemResult(problem, outcomes, None, hashes, skipped="no candidate reads decode tiles here: the "
                                 "row-major table answers this problem for weights with tiles too")
        if self.is_current is not None and self.is_current(problem):
            return ProblemResult(problem, outcomes, None, hashes, skipped="in the table with the same source hash "
                                 "(--retune to measure again)")
        quick: list[tuple[Candidate, KernelConfig, Outcome]] = []
        ws: WeightSet | None = None
        for c, cfgs in todo:
            for cfg in cfgs:
                key = self._key(problem, c, cfg, "quick")
                if ws is None and self.journal.get(key) is None:
                    ws = self.work.weight_set(problem.fmt, problem.act, problem.n, problem.k)
                rec, resumed = self._measure(key, lambda c=c, cfg=cfg: self._quick(problem, c, cfg, ws))
                o = Outcome(c.id, c.backend, cfg.to_dict(), rec.get("status", "failed"), rec.get("error", ""),
                            rec.get("rel_err"), rec.get("best_us"), None, rec.get("eager_us"), rec.get("method", ""),
                            rec.get("ncopies", 0), rec.get("calls", 0), resumed)
                quick.append((c, cfg, o))
                outcomes.append(o)
        ranked = sorted((q for q in quick if q[2].status == "ok"), key=lambda q: q[2].us_quick)
        for c, cfg, o in ranked[: self.s.top_k]:
            key = self._key(problem, c, cfg, "final")
            if ws is None and self.journal.get(key) is None:
                ws = self.work.weight_set(problem.fmt, problem.act, problem.n, problem.k)
            rec, _ = self._measure(key, lambda c=c, cfg=cfg: self._final(problem, c, cfg, ws))
            if rec.get("status") == "ok":
                o.us, o.eager_us, o.method = rec.get("best_us"), rec.get("eager_us"), rec.get("method", o.method)
                o.ncopies, o.calls = rec.get("ncopies", o.ncopies), rec.get("calls", o.calls)
            else:  # correct once, but its careful timing broke: not a winner
                o.status, o.error = "failed", rec.get("error", "final timing failed")
        finals = [o for _, _, o in ranked[: self.s.top_k] if o.status == "ok" and o.us is not None]
        winner = min(finals, key=lambda o: o.us) if finals else None
        bf16 = self.bf16_time(problem.n, problem.k, problem.m) if self.s.compare_bf16 else None
        return ProblemResult(problem, outcomes, winner, hashes, bf16, elapsed_s=time.perf_counter() - t0)

    def run(self, shapes: Sequence[tuple[int, int]], pairs: Sequence[tuple[Format, Act]], ms: Sequence[int],
            *, x_dtype: torch.dtype = torch.bfloat16) -> Iterator[ProblemResult]:
        """Problems in shape -> format -> M order (weights are built once per shape and format)."""
        try:
            for n, k in shapes:
                for fmt, act in pairs:
                    for m in ms:
                        p = Problem(fmt, act, m, n, k, x_dtype, x_dtype, False, self.s.decode_tiles)
                        if self.deadline is not None and time.time() > self.deadline:
                            yield ProblemResult(p, [], None, {}, skipped="time budget spent (rerun to resume)")
                            continue
                        try:
                            yield self.tune(p)
                        except DeviceLost:
                            raise
                        except Exception as e:  # e.g. out of memory building this shape: skip it, keep going
                            self._device_lost(e)
                            self.work.release()
                            yield ProblemResult(p, [], None, {}, skipped=f"error: {_short(e)}")
        finally:
            self.work.release()


def bucket_of(problem: Problem) -> int:
    return m_bucket(problem.m)
