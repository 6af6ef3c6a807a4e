"""tools/autotune logic on CPU: verification before timing, failed-candidate recording, ranking, journal resume,
crash recovery, table writing/merging, and the timing arithmetic. Fake candidates advance a fake clock by
their config's cost, so the measured times are exact and the ranking is deterministic."""

from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import pytest
import torch

from dispatch import reference, registry, tables
from dispatch.errors import TableError
from dispatch.formats import Act, Format
from dispatch.problem import Candidate, KernelConfig, Problem, Support
from dispatch.target import Target, detect
from dispatch.weight_quant import quantize
from tools.perf.journal import Journal
from tools.perf.table_sink import TableSink
from tools.perf.timing import Ceilings, RotationPolicy, TimingPolicy, WallTimer, one_rotation
from tools.perf.tuner import TuneEnv, TuneSettings, Tuner
from tools.perf.verify import Tolerance, check_output

PAIR = (Format.FP8_ROW, Act.BF16)


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance_us(self, us: float) -> None:
        self.t += us * 1e-6


@dataclasses.dataclass(frozen=True)
class CostConfig(KernelConfig):
    cost_us: float = 10.0


class FakeCand(Candidate):
    """Computes with the reference (or wrongly, or raises) and advances the clock by its config's cost."""

    config_type: ClassVar[type[KernelConfig]] = CostConfig

    def __init__(self, cid: str, costs, clock: FakeClock, behavior: str = "ok"):
        self.id, self.backend = cid, cid.split(".")[0]
        self.serves = frozenset({PAIR})
        self.costs, self.clock, self.behavior = list(costs), clock, behavior
        self.runs: list[float] = []

    def supports(self, problem: Problem, target: Target) -> Support:
        return Support.no("fake: not for this problem") if self.behavior == "unsupported" else Support.yes()

    def configs(self, problem, target):
        return [CostConfig(c) for c in self.costs]

    def default_config(self, problem, target):
        return CostConfig(self.costs[0])

    def run(self, x2d, qw, prepared, bias, out_dtype, config):
        self.runs.append(config.cost_us)
        self.clock.advance_us(config.cost_us)
        if self.behavior == "raise":
            raise RuntimeError("boom: fake kernel crashed")
        y = reference.linear(x2d, qw, bias, out_dtype)
        if self.behavior == "wrong":
            y[:, 3] = 0  # one output feature lost (e.g. a bad tail mask)
        return y


def make_env(cands, clock, hashes=None):
    hashes = hashes if hashes is not None else {}
    return TuneEnv(torch.device("cpu"), detect(torch.device("cpu")), WallTimer(clock=clock), cands,
                   lambda c: hashes.get(c.id, "h0"), quantize, reference.linear, l2_bytes=1 << 16,
                   log=lambda s: None)


SETTINGS = TuneSettings(quick=TimingPolicy(target_graph_us=0, min_calls=2, max_calls=4, replays=2, eager_iters=2),
                        final=TimingPolicy(target_graph_us=0, min_calls=4, max_calls=8, replays=3, eager_iters=2),
                        rotation=RotationPolicy(max_copies=2), compare_bf16=False, top_k=2)


def problem(m=3, n=64, k=96):
    return Problem(PAIR[0], PAIR[1], m, n, k)


def fakes(clock):
    return {
        "fast": FakeCand("fake.fast", [7.0, 3.0, 5.0], clock),
        "slow": FakeCand("fake.slow", [20.0], clock),
        "wrong": FakeCand("fake.wrong", [1.0], clock, "wrong"),
        "raise": FakeCand("fake.raise", [1.0, 2.0], clock, "raise"),
        "unsup": FakeCand("fake.unsup", [1.0], clock, "unsupported"),
    }


def test_winner_failed_and_unsupported_are_recorded_and_failures_never_timed():
    clock = FakeClock()
    c = fakes(clock)
    tuner = Tuner(make_env(list(c.values()), clock), SETTINGS, Journal(None))
    res = tuner.tune(problem())
    assert res.winner is not None and res.winner.impl == "fake.fast" and res.winner.config == {"cost_us": 3.0}
    assert res.winner.us == pytest.approx(3.0) and res.winner.rel_err < 1e-2
    by = {(o.impl, o.config.get("cost_us")): o for o in res.outcomes}
    assert by[("fake.wrong", 1.0)].status == "failed" and "wrong result" in by[("fake.wrong", 1.0)].error
    assert by[("fake.raise", 1.0)].status == "failed" and "boom" in by[("fake.raise", 1.0)].error
    assert by[("fake.unsup", None)].status == "unsupported" and "not for this problem" in by[("fake.unsup", None)].error
    # failing candidates ran exactly once per config (the verification) and were never timed
    assert c["wrong"].runs == [1.0]
    assert c["raise"].runs == [1.0, 2.0]
    assert c["unsup"].runs == []
    # only the top_k (2) configs by quick time were re-timed: fast@3 and fast@5, not fast@7 or slow
    finals = {o.config["cost_us"] for o in res.outcomes if o.us is not None}
    assert finals == {3.0, 5.0}


def test_journal_resume_measures_nothing_twice(tmp_path):
    clock = FakeClock()
    c = fakes(clock)
    j = tmp_path / "journal.jsonl"
    first = Tuner(make_env(list(c.values()), clock), SETTINGS, Journal(j)).tune(problem())
    runs_before = {k: len(v.runs) for k, v in c.items()}
    again = Tuner(make_env(list(c.values()), clock), SETTINGS, Journal(j)).tune(problem())
    assert {k: len(v.runs) for k, v in c.items()} == runs_before  # nothing ran: all from the journal
    assert again.winner.impl == first.winner.impl and again.winner.us == first.winner.us
    assert all(o.resumed for o in again.outcomes if o.status != "unsupported")


def test_changed_source_hash_is_measured_again(tmp_path):
    clock = FakeClock()
    c = fakes(clock)
    j = tmp_path / "journal.jsonl"
    Tuner(make_env([c["fast"]], clock), SETTINGS, Journal(j)).tune(problem())
    n = len(c["fast"].runs)
    Tuner(make_env([c["fast"]], clock, {"fake.fast": "h1"}), SETTINGS, Journal(j)).tune(problem())
    assert len(c["fast"].runs) > n


def test_crash_inside_a_candidate_is_recorded_failed_and_skipped_on_restart(tmp_path):
    clock = FakeClock()
    c = fakes(clock)
    j = tmp_path / "journal.jsonl"
    # Simulate a worker that died inside fake.fast@3.0: its "start" line is written, its result never.
    journal = Journal(j)
    tuner = Tuner(make_env([c["fast"]], clock), SETTINGS, journal)
    key = tuner._key(problem(), c["fast"], CostConfig(3.0), "quick")
    journal.start(key)
    lines = j.read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "start"
    # The supervisor marks the dangling start of the dead pid as failed ...
    assert Journal(j).fail_dangling("died", pid=12345) == []  # another process: untouched
    assert Journal(j).fail_dangling("the process died while this ran") == [key]
    # ... and the restarted worker skips that config without running it.
    c2 = FakeCand("fake.fast", [7.0, 3.0, 5.0], clock)
    res = Tuner(make_env([c2], clock), SETTINGS, Journal(j)).tune(problem())
    assert 3.0 not in c2.runs
    assert res.winner.config == {"cost_us": 5.0}
    crashed = [o for o in res.outcomes if o.config == {"cost_us": 3.0}][0]
    assert crashed.status == "failed" and "died" in crashed.error


def test_truncated_journal_line_is_ignored(tmp_path):
    j = tmp_path / "journal.jsonl"
    j.write_text('{"kind": "result", "key": {"fmt": "fp8_row"\n')
    assert Journal(j).results == {}


def test_table_sink_writes_merges_resumes_and_refuses_other_devices(tmp_path):
    clock = FakeClock()
    c = fakes(clock)
    env = make_env([c["fast"], c["slow"]], clock)
    path = tmp_path / "t.yaml"
    tuner = Tuner(env, SETTINGS, Journal(None))
    sink = TableSink(path, env.target, generated_by="test")
    sink.add(tuner.tune(problem(m=3)), Ceilings(copy_gbps=100.0), 50.0)
    sink2 = TableSink(path, env.target)  # reopen: merges, keeps the first entry
    sink2.add(tuner.tune(problem(m=16)), Ceilings(), 50.0)
    t = tables.load_table(path)
    assert sorted(e.m_bucket for e in t.entries) == [4, 16]
    e = t.entries[0]
    assert e.impl == "fake.fast" and dict(e.config) == {"cost_us": 3.0} and e.source_hash == "h0"
    assert e.us == pytest.approx(3.0) and e.pct_copy_bw is not None and e.tflops is not None
    # resume at table level: same hash -> current; changed hash -> measured again
    assert sink2.is_current(problem(m=3), lambda impl: "h0")
    assert not sink2.is_current(problem(m=3), lambda impl: "h1")
    assert not sink2.is_current(problem(m=64), lambda impl: "h0")
    other = Target.simulated_for("sm_90")
    with pytest.raises(TableError, match="belongs elsewhere"):
        TableSink(path, other)


def test_is_current_skips_problems_already_in_the_table():
    clock = FakeClock()
    c = fakes(clock)
    tuner = Tuner(make_env([c["fast"]], clock), SETTINGS, Journal(None), is_current=lambda p: True)
    res = tuner.tune(problem())
    assert res.winner is None and "same source hash" in res.skipped and c["fast"].runs == []


def test_run_order_budget_and_only_skip():
    clock = FakeClock()
    c = fakes(clock)
    env = make_env(list(c.values()), clock)
    only = dataclasses.replace(SETTINGS, only=("fake.slow",))
    res = Tuner(env, only, Journal(None)).tune(problem())
    assert res.winner.impl == "fake.slow" and {o.impl for o in res.outcomes} == {"fake.slow"}
    skip = dataclasses.replace(SETTINGS, skip=("fake.fast", "fake.sl*"))
    res = Tuner(env, skip, Journal(None)).tune(problem())
    assert res.winner is None and not any(o.impl in ("fake.fast", "fake.slow") for o in res.outcomes)
    out = list(Tuner(env, SETTINGS, Journal(None), deadline=0.0).run([(64, 96)], [PAIR], [1, 2]))
    assert [r.skipped for r in out] == ["time budget spent (rerun to resume)"] * 2


def test_verify_elementwise_bound_catches_one_bad_feature_frobenius_misses():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 4096, generator=g)
    out = ref.clone().to(torch.bfloat16)
    assert check_output(out, ref, torch.bfloat16).ok
    out[:, 17] = 0
    loose = Tolerance(rel_fro=0.05)
    v = check_output(out, ref, torch.bfloat16, loose)
    assert v.rel_err < 0.05 and not v.ok and "elements outside" in v.reason
    assert not check_output(out.float(), ref, torch.bfloat16).ok  # dtype
    assert not check_output(out[:1], ref, torch.bfloat16).ok  # shape
    nan = ref.clone().to(torch.bfloat16)
    nan[1, 2] = float("nan")
    assert "non-finite" in check_output(nan, ref, torch.bfloat16).reason
    assert not check_output("x", ref, torch.bfloat16).ok


def test_rotation_and_graph_size_arithmetic():
    rot = RotationPolicy(factor=3.3, max_bytes=1 << 30, max_copies=64)
    l2 = 60 << 20
    n16 = rot.copies(4096 * 4096 + 4 * 4096, l2)  # 4096x4096 fp8_row
    assert n16 * (4096 * 4096) > 3.3 * l2 and (n16 - 1) * (4096 * 4096 + 4 * 4096) <= 3.3 * l2
    assert rot.copies(128256 * 4096, l2) == 1  # lm_head alone overflows L2
    assert rot.copies(1000, l2) == 64  # capped in count
    assert RotationPolicy(max_bytes=10_000).copies(4000, l2) == 2  # capped in memory
    pol = TimingPolicy(target_graph_us=100.0, min_calls=20, max_calls=60)
    for ncopies, est in [(1, 1.0), (7, 1.0), (11, 50.0), (100, 1.0)]:
        calls = pol.calls_for(ncopies, est)
        assert calls % ncopies == 0 and calls >= ncopies and calls >= min(20, calls)
    for ncopies, est in [(1, 0.1), (7, 1e6), (300, 1.0)]:  # the developer benchmarks' graph: one pass
        assert one_rotation(5).calls_for(ncopies, est) == ncopies


def test_wall_timer_measures_exact_fake_costs():
    clock = FakeClock()
    t = WallTimer(clock=clock).time(lambda i: clock.advance_us(2.5 + i), 2,
                                    TimingPolicy(target_graph_us=0, min_calls=4, max_calls=4, replays=3, eager_iters=2))
    assert t.us == pytest.approx(3.0) and t.calls == 4 and t.method == "wall"
    assert t.best_us == t.us


def test_timers_drain_the_device_after_each_warm_up_pass():
    """Two untimed passes over every copy, a drain after each, before the first timed call: a weight's load-time read
    started by its first call (dispatch.mx_fold) has then landed for every copy when the graph is captured."""
    events = []
    t = WallTimer(clock=FakeClock(), sync=lambda: events.append("sync"))
    t.time(lambda i: events.append(i), 3, TimingPolicy(target_graph_us=0, min_calls=3, max_calls=3, replays=1,
                                                      eager_iters=1))
    assert TimingPolicy().warmup_rounds == 2
    assert events[:8] == [0, 1, 2, "sync", 0, 1, 2, "sync"]


def test_cli_smoke_on_cpu_with_fake_registry(tmp_path, capsys):
    from tools import autotune

    clock = FakeClock()
    c = fakes(clock)
    with registry.use_candidates(list(c.values())):
        rc = autotune.main(["--device", "cpu", "--shapes", "64x96", "--m", "1,8", "--formats", "fp8_row",
                            "--out", str(tmp_path / "out"), "--table", str(tmp_path / "t.yaml"), "--no-bf16",
                            "--no-supervise"])
        assert rc == 0
        rc = autotune.main(["--device", "cpu", "--shapes", "64x96", "--m", "1,8", "--formats", "fp8_row",
                            "--out", str(tmp_path / "out"), "--table", str(tmp_path / "t.yaml"), "--no-bf16",
                            "--no-supervise"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "fake.raise" in out and "Failed candidate configs" in out and "skipped: in the table" in out
    t = tables.load_table(tmp_path / "t.yaml")
    # real wall clock here (the CLI builds its own timer): any correct candidate may win, never a failing one
    assert {e.m_bucket for e in t.entries} == {1, 8} and {e.impl for e in t.entries} <= {"fake.fast", "fake.slow"}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["problems"][0]["winner"] is None  # second run: skipped, already in the table


def test_dry_run_lists_real_candidates_for_a_simulated_h200(capsys):
    from tools import autotune

    rc = autotune.main(["--dry-run", "--simulate", "sm_90", "--device", "cpu", "--shapes", "4096x4096",
                        "--m", "1,4096", "--formats", "all"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "fp8_tensor/fp8 4096x4096 M=1:" in out and "candidate configs to verify" in out
    assert "torch.scaled_mm_tensorwise" in out


def test_also_try_adds_previous_winners_past_max_configs(tmp_path):
    """A re-tune with --max-configs must not lose a config an earlier table chose because the space was
    reordered (found on the H200: mxfp8 128256x4096 M = 256 lost its 256x128 tile that way). Configs the
    candidate no longer offers are not added."""
    from dispatch import tables
    from tools.autotune import kept_configs

    clock = FakeClock()
    c = fakes(clock)
    env = make_env([c["fast"]], clock)
    cut = dataclasses.replace(SETTINGS, max_configs=1)
    assert Tuner(env, cut, Journal(None)).tune(problem()).winner.config == {"cost_us": 7.0}

    t = tables.new_table(detect(torch.device("cpu")), path="prev.yaml")
    keep = [tables.make_entry(PAIR[0].value, PAIR[1].value, 64, 96, 4, "fake.fast", {"cost_us": 3.0}, "old", 3.0, 0.0),
            tables.make_entry(PAIR[0].value, PAIR[1].value, 64, 96, 4, "fake.fast", {"cost_us": 0.5}, "old", 0.5, 0.0)]
    path = tmp_path / "prev.yaml"
    tables.save_table(tables.merge(t, keep[:1]), path)
    other = tmp_path / "other.yaml"
    tables.save_table(tables.merge(t, keep[1:]), other)
    also = dataclasses.replace(cut, also_try=kept_configs([str(path), str(other)]))
    todo, _ = Tuner(env, also, Journal(None)).plan(problem())
    assert [cfg.cost_us for _, cfgs in todo for cfg in cfgs] == [7.0, 3.0]  # 0.5 is not in the space: not added
    assert Tuner(env, also, Journal(None)).tune(problem()).winner.config == {"cost_us": 3.0}


def test_max_configs_for_overrides_the_cut_per_candidate():
    """--max-configs-for ID=N: that candidate gets its own count (0 = every config) while the others keep
    --max-configs (the CUDA GEMVs' space grew by the staged rings; every one of them must be timed)."""
    from tools.autotune import parse_max_configs_for

    clock = FakeClock()
    c = fakes(clock)
    env = make_env([c["fast"]], clock)
    cut = dataclasses.replace(SETTINGS, max_configs=1)
    every = len(c["fast"].configs(problem(), env.target))
    assert every > 1
    for spec, want in ((["fake.fast=0"], every), (["fake.fast=2"], 2), (["other.id=0"], 1)):
        s = dataclasses.replace(cut, max_configs_for=parse_max_configs_for(spec))
        todo, _ = Tuner(env, s, Journal(None)).plan(problem())
        assert [len(cfgs) for _, cfgs in todo] == [want], spec
    for bad in (["fake.fast"], ["=3"], ["fake.fast=-1"]):
        with pytest.raises(SystemExit):
            parse_max_configs_for(bad)
