"""Selection: a pure function of (problem, target, tables, candidates, policy) -> Decision.

Order of the chain, each step with its reason recorded in the Decision:
1. filter: policy (force/deny), backend availability, (format, act) served, the candidate's support predicate;
2. an exact tuned entry (overlay -> device table -> arch table) whose implementation is eligible and whose
   source hash matches the code here (else it is skipped as stale/unknown, with the reason);
3. the nearest tuned entry for the same (format, act): distance in log2 of N, K and the M bucket, on the same side
   of the decode / prefill boundary (DECODE_MAX_BUCKET), unless its config fills far fewer SM slots here than
   where it was tuned (NEAREST_MIN_FILL_RATIO);
4. the analytic heuristic (dispatch.heuristic) over the eligible candidates.
A weight with decode tiles (Problem.decode_tiles, dispatch.add_decode_tiles) first looks up its exact key in the tables
measured on tiles (`weight_layout: decode_tiles`); without one, the chain above runs on the row-major problem and a pick
with a `decode_tiles_variant` is handed to that variant, at the same config, where the variant's `tiles_help` says so.
No device is touched; tests drive it with `Target.simulated_for(...)` and fake candidates.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from typing import Callable, Mapping, Sequence

from .errors import NoCandidateError, TableError
from .force import Policy, policy as _policy
from .heuristic import estimate_us
from .problem import M_BUCKETS, Candidate, KernelConfig, Problem, Support
from .decode_tiles import LAYOUT as DECODE_TILES
from .tables import EMPTY, Entry, TableSet, Tier
from .target import Target

log = logging.getLogger("fp8dispatch.select")

# Nearest-shape fallback: an entry further than this (sum of |log2| ratios of N, K and the M bucket) is
# not trusted; the heuristic decides instead. 2.0 admits e.g. N half as large and K twice as large.
NEAREST_MAX_DISTANCE = 2.0
# The M bucket weighs more than N, K: kernels change regime with M (GEMV -> split-K -> tiled GEMM).
M_WEIGHT = 1.0
# A nearest entry never crosses from the decode buckets (M <= 16: GEMVs) to the prefill ones (tiled GEMMs) or
# back: a tiled GEMM's entry at M = 64 says nothing of M = 16 (session 11: without the CUDA backend, the H200
# table's M = 64 entries lent their Triton GEMMs, never timed below M = 64, to 16 of the 40 M = 16 cells of the
# replay; with this rule the heuristic decides those, and picks a measured kernel in 6 of them).
DECODE_MAX_BUCKET = 16
# A nearest entry is not lent where its config fills less than this fraction of the SM slots it filled at the tuned
# shape (Candidate.grid_fill: programs over whole waves): the measured advantage came with that fill. Session 16 on
# the H200: fp8_block/fp8 4096x14336 M = 256 (the Triton GEMM, 64 tiles x 2 splits: 0.97 of 132 SMs; 1.13x faster
# than cuBLAS) was lent to 5120x25600 (80 tiles, one split: 0.61), where it ran 1.53x cuBLAS. Replays
# (tests/test_heuristic_eval.py): any value in 0.7-0.9 fixes that cell (untabled 30 of 32) and changes no other count
# (fallback chain 273 of 280, without CuPy 270); 0.6 and below keep the miss. One program per SM is assumed, though
# small tiles fit 2-3 CTAs per SM: a coarse test of the same geometry at both shapes.
NEAREST_MIN_FILL_RATIO = 0.75


@dataclasses.dataclass(frozen=True)
class Decision:
    """What runs, with which config, and why."""

    candidate_id: str
    config: KernelConfig
    source: str  # "table" | "nearest" | "heuristic" | "forced"
    detail: str  # the table file and entry, or the estimate
    rejected: tuple[tuple[str, str], ...] = ()  # (candidate id or backend, reason)
    skipped_entries: tuple[str, ...] = ()  # table entries that were found but not used, with reasons
    estimates: tuple[tuple[str, float], ...] = ()  # heuristic estimates (us) of every eligible candidate
    problem: Problem | None = None
    # simulated targets: eligible candidates unavailable in this process (assumed present on the target)
    assumed_available: tuple[tuple[str, str], ...] = ()

    @property
    def backend(self) -> str:
        return self.candidate_id.split(".", 1)[0]


def _entry_ref(tier: Tier, idx: int, e: Entry) -> str:
    return (f"{tier.name} table {tier.table.path} entry #{idx} ({e.format}/{e.act} N={e.n} K={e.k} "
            f"M-bucket={e.m_bucket}: {e.impl}, {e.us:g} us)")


_logged: set[tuple] = set()
_logged_lock = threading.Lock()


def _log_once(key: tuple, msg: str, *args) -> None:
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    log.info(msg, *args)


def _config_for(cand: Candidate, entry: Entry, tier: Tier, idx: int, problem: Problem,
                target: Target, *, exact: bool) -> KernelConfig:
    try:
        cfg = cand.config_type.from_dict(dict(entry.config))
    except (TypeError, ValueError) as ex:
        raise TableError(f"tuning table {tier.table.path}: entry #{idx} ({entry.format}/{entry.act} N={entry.n} "
                         f"K={entry.k} M-bucket={entry.m_bucket}): config {dict(entry.config)} does not fit "
                         f"{cand.id}'s {cand.config_type.__name__}: {ex}") from None
    # The config must be one the candidate offers for *this* problem, else its default is used. Borrowed
    # (nearest-shape) configs need it; exact entries too, because the table key has no x dtype: an entry tuned
    # with bf16 x also serves fp16 x, where some configs are illegal (found on the H200: an mxfp8 swap_ab
    # config, legal with bf16 x, refused at launch with fp16 x).
    if not exact and not cand.borrows_configs:
        return cand.default_config(problem, target)
    space = cand.configs(problem, target)
    if cfg in space:
        return cfg
    if exact:
        _log_once(("config",) + entry.key + (cand.id, str(problem.x_dtype)),
                  "tuned config %s of %s is not in its space for x=%s: using the default config",
                  dict(entry.config), _entry_ref(tier, idx, entry), problem.x_dtype)
    return cand.default_config(problem, target)


def eligible(problem: Problem, target: Target, candidates: Sequence[Candidate], policy: Policy,
             unavailable: Mapping[str, str] | None = None
             ) -> tuple[list[Candidate], list[tuple[str, str]], list[tuple[str, str]]]:
    """Candidates that may run `problem` on `target`, every rejected one with its reason, and (simulated
    targets only) the eligible ones that cannot run in this process, with why."""
    ok: list[Candidate] = []
    rejected: list[tuple[str, str]] = []
    assumed: list[tuple[str, str]] = []
    for backend, why in (unavailable or {}).items():
        rejected.append((f"{backend}.*", f"backend unavailable: {why}"))
    for c in candidates:
        why = policy.rejects(c.id, c.backend)
        if why is None:
            if (problem.fmt, problem.act) not in c.serves:
                why = f"does not serve {problem.fmt}/{problem.act}"
            else:
                av = c.available()
                # available() describes this process (toolkit, visible GPU); a simulated target plans for
                # another machine, so there it is assumed and only reported (Decision.assumed_available).
                if not av and not target.simulated:
                    why = f"unavailable: {av.reason}"
                else:
                    sp = supports_whole_bucket(c, problem, target)
                    if not sp:
                        why = sp.reason
                    elif not av:
                        assumed.append((c.id, av.reason))
        if why is None:
            ok.append(c)
        else:
            rejected.append((c.id, why))
    return ok, rejected, assumed


def supports_whole_bucket(c: Candidate, problem: Problem, target: Target) -> Support:
    """A plan serves every M of its bucket, so a candidate must support both ends of the bucket (the
    bucket's largest M is problem.m; the smallest is one more than the previous bucket). Found on the H200:
    blockwise _scaled_mm planned for bucket 4 at M=4 was then run at M=3."""
    sp = c.supports(problem, target)
    lo = _bucket_low(problem.m)
    if sp and lo != problem.m:
        low = c.supports(dataclasses.replace(problem, m=lo), target)
        if not low:
            return Support.no(f"{low.reason} (at M={lo}, the smallest M of the M-bucket {problem.m})")
    return sp


def _bucket_low(m: int) -> int:
    prev = [b for b in M_BUCKETS if b < m]
    return prev[-1] + 1 if prev else 1


def select(problem: Problem, target: Target, tables: TableSet = EMPTY, candidates: Sequence[Candidate] = (),
           policy: Policy | None = None, *, unavailable: Mapping[str, str] | None = None,
           source_hash: Callable[[Candidate], str] | None = None,
           hardware_validated: Callable[[Candidate], bool] | None = None) -> Decision:
    """Choose an implementation and config for `problem` on `target` (see the module docstring)."""
    if source_hash is None:
        from .registry import source_hash
    policy = policy or _policy()
    ok, rejected, assumed = eligible(problem, target, candidates, policy, unavailable)
    if not ok:
        lines = "\n".join(f"  - {cid}: {why}" for cid, why in rejected) or "  (no candidates registered)"
        hint = (f"\nThe policy {policy.origin} restricts candidates; relax it (force={list(policy.force)}, "
                f"deny={list(policy.deny)})." if policy.active else "")
        raise NoCandidateError(
            f"no implementation can run {problem.fmt}/{problem.act} M={problem.m} N={problem.n} K={problem.k} "
            f"x={problem.x_dtype} out={problem.out_dtype} on {target.arch} ({target.device_name}); "
            f"rejected:\n{lines}{hint}")
    by_id = {c.id: c for c in ok}
    rejected_ids = dict(rejected)
    skipped: list[str] = []
    common = dict(rejected=tuple(rejected), problem=problem, assumed_available=tuple(assumed))

    stand_in: dict[str, tuple[Candidate, Candidate]] = {}  # row-major id -> (it, its eligible variant on tiles)

    def usable(tier: Tier, idx: int, e: Entry) -> Candidate | None:
        ref = _entry_ref(tier, idx, e)
        cand = by_id.get(e.impl)
        measured = cand
        if cand is None and e.impl in stand_in:
            measured, cand = stand_in[e.impl]
        if cand is None:
            why = (f"its implementation is rejected here: {rejected_ids[e.impl]}" if e.impl in rejected_ids
                   else "unknown implementation (not registered in this build)")
            skipped.append(f"{ref}: {why}")
            return None
        have = source_hash(measured)
        if e.source_hash != have:
            skipped.append(f"{ref}: stale (tuned against source {e.source_hash or '-'}, code here is {have or '-'})")
            return None
        return cand

    key = (problem.fmt, problem.act, problem.n, problem.k, problem.bucket)
    if problem.decode_tiles:
        for tier, idx, e in tables.exact(key, DECODE_TILES):
            cand = usable(tier, idx, e)
            if cand is not None:
                cfg = _config_for(cand, e, tier, idx, problem, target, exact=True)
                return Decision(cand.id, cfg, "table", _entry_ref(tier, idx, e) + ", tuned on decode tiles",
                                skipped_entries=tuple(skipped), **common)
        try:
            row_major = select(dataclasses.replace(problem, decode_tiles=False), target, tables, candidates, policy,
                               unavailable=unavailable, source_hash=source_hash, hardware_validated=hardware_validated)
        except NoCandidateError:
            # Only candidates that read tiles may run (a forced variant): the chain below, where the row-major entries of
            # the kernel a variant stands in for lend it their choice of config.
            stand_in.update((c.id, (c, by_id[c.decode_tiles_variant])) for c in candidates
                            if c.decode_tiles_variant in by_id)
        else:
            return _onto_tiles(row_major, problem, by_id, tuple(skipped), common)
    for tier, idx, e in tables.exact(key):
        cand = usable(tier, idx, e)
        if cand is not None:
            cfg = _config_for(cand, e, tier, idx, problem, target, exact=True)
            return Decision(cand.id, cfg, "table", _entry_ref(tier, idx, e) + _stood_in(cand, e),
                            skipped_entries=tuple(skipped), **common)

    near = []
    for tier, idx, e in tables.same_kind(problem.fmt, problem.act):
        d = (abs(math.log2(e.n / problem.n)) + abs(math.log2(e.k / problem.k))
             + M_WEIGHT * abs(math.log2(e.m_bucket / problem.bucket)))
        same_regime = (e.m_bucket <= DECODE_MAX_BUCKET) == (problem.bucket <= DECODE_MAX_BUCKET)
        if d <= NEAREST_MAX_DISTANCE and same_regime:
            # ties: prefer the larger M bucket (a kernel tuned for more rows covers fewer), then tier order
            near.append((d, -e.m_bucket, len(near), tier, idx, e))
    near.sort(key=lambda t: t[:3])
    for d, _, _, tier, idx, e in near:
        cand = usable(tier, idx, e)
        if cand is not None and not cand.lent_to_nearby_shapes:
            skipped.append(f"{_entry_ref(tier, idx, e)} (nearest, distance {d:.2f}): {cand.id} entries are not lent "
                           "to other shapes")
            continue
        if cand is not None:
            tuned_at = Problem(problem.fmt, problem.act, e.m_bucket, e.n, e.k, problem.x_dtype, problem.out_dtype)
            why = cand.lending_refused(tuned_at, problem, target)
            if why:
                skipped.append(f"{_entry_ref(tier, idx, e)} (nearest, distance {d:.2f}): {why}")
                continue
            cfg = _config_for(cand, e, tier, idx, problem, target, exact=False)
            was = cand.grid_fill(tuned_at, cand.config_type.from_dict(dict(e.config)), target)
            here = cand.grid_fill(problem, cfg, target)
            if was is not None and here is not None and here < NEAREST_MIN_FILL_RATIO * was:
                skipped.append(f"{_entry_ref(tier, idx, e)} (nearest, distance {d:.2f}): its config fills "
                               f"{here:.0%} of the last wave's SMs here against {was:.0%} at the tuned shape")
                continue
            _log_once(("nearest",) + key + (target.arch, target.device_name),
                      "no tuned entry for %s/%s N=%d K=%d M-bucket=%d on %s: using nearest %s (distance %.2f)",
                      problem.fmt, problem.act, problem.n, problem.k, problem.bucket, target.device_name,
                      _entry_ref(tier, idx, e), d)
            return Decision(cand.id, cfg, "nearest", f"nearest tuned shape (distance {d:.2f}): "
                            + _entry_ref(tier, idx, e) + _stood_in(cand, e), skipped_entries=tuple(skipped), **common)

    if hardware_validated is None:
        from . import registry

        def hardware_validated(c: Candidate) -> bool:
            return registry.hardware_validated(c, target)
    # The heuristic never prefers a kernel that has not run on real hardware over one that has (a tuned
    # entry may choose it: it was measured). Estimates are listed for all.
    # A last-resort route (the exact reference) comes after every kernel, proven or not: on an arch where no
    # kernel has run yet (gfx1201 today), an unproven kernel still beats an fp64 reference matmul.
    est = sorted(((getattr(c, "last_resort", False), not hardware_validated(c), estimate_us(c, problem, target), i, c)
                  for i, c in enumerate(ok)), key=lambda t: t[:4])
    best = est[0][4]
    unproven = [c.id for _, u, _, _, c in est if u]
    why_miss = "no tuned table applies" if not tables.tiers else "no tuned entry within reach"
    _log_once(("heuristic",) + key + (target.arch, target.device_name),
              "%s for %s/%s N=%d K=%d M-bucket=%d on %s (%s): analytic heuristic picks %s",
              why_miss, problem.fmt, problem.act, problem.n, problem.k, problem.bucket, target.device_name,
              target.arch, best.id)
    forced = f" among candidates allowed by {policy.origin}" if policy.active else ""
    ranked = (f"; ranked after hardware-validated candidates: {', '.join(unproven)}"
              if unproven and best.id not in unproven else "")
    return Decision(best.id, best.default_config(problem, target), "heuristic",
                    f"{why_miss}; analytic estimate {est[0][2]:.1f} us{forced} (bytes/FLOPs vs "
                    f"{target.spec.reference_part} rates){ranked}",
                    skipped_entries=tuple(skipped), estimates=tuple((c.id, round(us, 2)) for _, _, us, _, c in est),
                    **common)


def _stood_in(cand: Candidate, e: Entry) -> str:
    return "" if cand.id == e.impl else f", run by {cand.id} on the weight's decode tiles (no entry tuned on decode tiles)"


def _onto_tiles(d: Decision, problem: Problem, by_id: Mapping[str, Candidate], skipped: tuple[str, ...],
                common: dict) -> Decision:
    """The row-major chain's decision `d` for a weight with decode tiles: handed to the pick's decode-tiles variant (same
    config) where that variant is eligible here and its `tiles_help` says so, else kept."""
    skipped += d.skipped_entries
    picked = by_id.get(d.candidate_id)
    variant = by_id.get(picked.decode_tiles_variant or "") if picked is not None else None
    detail = f"{d.detail}; no entry tuned on decode tiles"
    if variant is not None and variant.tiles_help(d.config, problem):
        return dataclasses.replace(d, candidate_id=variant.id, detail=f"{detail}: {d.candidate_id}'s pick, run by "
                                   f"{variant.id} on the tiles", skipped_entries=skipped, **common)
    if variant is not None:
        detail += f"; {variant.id} does not help at this config: the row-major codes"
    return dataclasses.replace(d, detail=detail, skipped_entries=skipped, **common)
