"""`dispatch.explain(x_or_shape, qw, target=None)`: what `dispatch.linear` runs for these arguments and why.

Works without a GPU: pass `target=Target.simulated_for("sm_90")` (or "sm_80", "sm_89", "gfx1201") to see the
decision a deployment would get. The decision is computed by the same `select` call `linear` uses.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from .force import current as current_policy
from . import registry
from .decode_tiles import LAYOUT as DECODE_TILES
from .formats import QWeight
from .linear import _problem, fast_bucket
from .problem import Problem
from .select import Decision, select
from .tables import TableSet, tables_for
from .target import Target, detect

NOT_RUN_ON_HARDWARE = "not yet run on hardware"


@dataclasses.dataclass(frozen=True)
class Explanation:
    m: int
    problem: Problem
    target: Target
    decision: Decision
    tables: TableSet
    unvalidated: frozenset[str]  # candidate ids whose backend has not run on hardware
    notes: tuple[str, ...] = ()  # what the user can do about a slow shape (see `_notes`)

    @property
    def candidate_id(self) -> str:
        return self.decision.candidate_id

    def _tag(self, cid: str) -> str:
        return f" [{NOT_RUN_ON_HARDWARE}]" if cid in self.unvalidated else ""

    def __str__(self) -> str:
        p, t, d = self.problem, self.target, self.decision
        dt = lambda x: str(x).replace("torch.", "")  # noqa: E731
        lines = [
            f"problem: {p.fmt}/{p.act} M={self.m} (M bucket {p.bucket}) N={p.n} K={p.k} x={dt(p.x_dtype)} "
            f"out={dt(p.out_dtype)} bias={'yes' if p.has_bias else 'no'}",
            f"target:  {t.arch} {t.device_name}{' (simulated)' if t.simulated else ''}, torch {t.torch_version}, "
            f"triton {t.triton_version or '-'}, runtime {t.runtime_version or '-'}",
            f"chosen:  {d.candidate_id}{self._tag(d.candidate_id)} config {d.config}",
            f"from:    {d.source}: {d.detail}",
        ]
        pol = current_policy()
        if pol.active:
            lines.append(f"policy:  force={list(pol.force)} deny={list(pol.deny)} ({pol.origin})")
        if d.estimates:
            lines.append("estimates: " + ", ".join(f"{cid} {us:g} us{self._tag(cid)}" for cid, us in d.estimates))
        if d.assumed_available:
            lines.append("assumed available on the simulated target (cannot run in this process):")
            lines += [f"  - {cid}: {why}{self._tag(cid)}" for cid, why in d.assumed_available]
        lines.append("rejected:" if d.rejected else "rejected: none")
        lines += [f"  - {cid}: {why}{self._tag(cid)}" for cid, why in d.rejected]
        if d.skipped_entries:
            lines.append("table entries skipped:")
            lines += [f"  - {s}" for s in d.skipped_entries]
        lines += [f"note:    {n}" for n in self.notes]
        tiers = ", ".join(f"{tr.name}:{tr.table.path}" for tr in self.tables.tiers) or "none"
        lines.append(f"tables:  {tiers}")
        for path, why in self.tables.skipped:
            lines.append(f"  - not applicable: {path}: {why}")
        return "\n".join(lines)


def explain(x_or_shape: "torch.Tensor | Sequence[int] | int", qw: QWeight, target: Target | None = None, *,
            bias: bool = False, out_dtype: torch.dtype | None = None,
            x_dtype: torch.dtype | None = None) -> Explanation:
    """Explain the choice for activations `x_or_shape` ([..., K] tensor, a shape, or M) and weight `qw`."""
    if isinstance(x_or_shape, torch.Tensor):
        shape, xd = tuple(x_or_shape.shape), x_or_shape.dtype
        dev = x_or_shape.device
    else:
        shape = (int(x_or_shape), qw.in_features) if isinstance(x_or_shape, int) else tuple(x_or_shape)
        xd, dev = torch.bfloat16, qw.device
    xd = x_dtype or xd
    m = 1
    for s in shape[:-1]:
        m *= int(s)
    target = target or detect(dev)
    problem = _problem(qw, fast_bucket(max(m, 1)), xd, out_dtype or xd, bias)
    tables = tables_for(target)
    cands = registry.candidates()
    decision = select(problem, target, tables, cands, current_policy(),
                      unavailable=registry.unavailable_backends())
    unvalidated = frozenset(c.id for c in cands if not registry.hardware_validated(c, target))
    notes = _notes(problem, target)
    if problem.decode_tiles:
        cand = registry.get(decision.candidate_id)
        notes += (_tiles_note(decision, cand is not None and cand.reads_decode_tiles),)
    else:
        tiled = select(dataclasses.replace(problem, decode_tiles=True), target, tables, cands, current_policy(),
                       unavailable=registry.unavailable_backends())
        offer = _tiles_offer(problem, decision, tiled, tables)
        notes += (offer,) if offer else ()
    return Explanation(m, problem, target, decision, tables, unvalidated, notes)


# explain() mentions decode tiles to a weight without them where the table tuned on tiles is at least this much faster for
# the key (entries of two runs: single cells move by up to 9 % between runs on the H200 with no code change).
TILES_OFFER_RATIO = 0.93


def _tiles_offer(problem: Problem, decision: Decision, tiled: Decision, tables: TableSet) -> str | None:
    """What the table tuned on decode tiles measured for this key, where a weight with tiles would use that entry and it
    is faster than this decision's entry."""
    if decision.source != "table" or tiled.source != "table" or not tiled.detail.endswith("tuned on decode tiles"):
        return None
    key = (problem.fmt, problem.act, problem.n, problem.k, problem.bucket)
    here = next((e for _, _, e in tables.exact(key) if e.impl == decision.candidate_id), None)
    there = next((e for _, _, e in tables.exact(key, DECODE_TILES) if e.impl == tiled.candidate_id), None)
    if here is None or there is None or there.us > TILES_OFFER_RATIO * here.us:
        return None
    return (f"dispatch.add_decode_tiles(qw) (a copy of the codes: +{problem.n * problem.k / 1e6:.0f} MB) would run "
            f"{there.impl}: {there.us:g} us in the table tuned on decode tiles ({there.date}) against {here.us:g} us for "
            f"this pick ({here.date}); the two tables are different runs (tools.bench --decode-tiles times both in one)")


def _tiles_note(decision: Decision, reads: bool) -> str:
    head = "this weight has decode tiles (dispatch.add_decode_tiles): "
    if reads:
        return head + f"{decision.candidate_id} reads them"
    if "no entry tuned on decode tiles" not in decision.detail:
        why = "the table tuned on tiles measured it faster"
    elif "does not help at this config" in decision.detail:
        why = "no table tuned on tiles has this key, and its variant on tiles does not help at the row-major pick's config"
    else:
        why = "no table tuned on tiles has this key, and the row-major chain's pick has no variant on tiles"
    return head + f"{decision.candidate_id} reads the row-major codes ({why})"


def _notes(problem: Problem, target: Target) -> tuple[str, ...]:
    if target.is_cpu or problem.k % 16 == 0:
        return ()
    k16 = -(-problem.k // 16) * 16
    return (f"K = {problem.k} is not a multiple of 16: the CUDA and HIP kernels and torch._scaled_mm cannot serve "
            "it and the Triton kernels run without 16-byte loads (on the H200 every fp8 path ran 1.3-3.6x slower "
            f"than bf16 on 3000x1000: docs/perf/h200_s20_2026-11-30.md). Zero columns up to K = {k16} give the "
            "same result: candidate pad.k16 does that per call (a padded weight copy made once, one pad launch "
            "for x) and dispatches the aligned problem; quantizing a padded weight yourself (and padding x) saves "
            "the copy.",)
