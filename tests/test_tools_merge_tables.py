"""tools/perf/merge_tables: the faster entry per key wins; tables measured on other kernel sources are refused."""

from __future__ import annotations

import pytest

from dispatch import registry, tables
from dispatch.target import Target
from tools.perf import merge_tables


def _table(entries):
    t = tables.new_table(Target.simulated_for("sm_90", torch_version="2.11.0"), path="mem.yaml")
    return tables.merge(t, entries)


def _entry(impl: str, m_bucket: int, us: float, source_hash: str | None = None):
    cand = registry.get(impl)
    return tables.make_entry("fp8_row", "bf16", 4096, 4096, m_bucket, impl, {},
                             source_hash if source_hash is not None else registry.source_hash(cand), us=us,
                             error=1e-3)


def test_faster_entry_wins_per_key():
    base = _table([_entry("torch.reference", 1, 10.0), _entry("torch.reference", 16, 10.0)])
    new = _table([_entry("torch.dequant_mm", 16, 12.0), _entry("torch.dequant_mm", 1, 8.0)])
    merged, replaced = merge_tables.merge_faster(base, new)
    got = {e.m_bucket: (e.impl, e.us) for e in merged.entries}
    assert got == {1: ("torch.dequant_mm", 8.0), 16: ("torch.reference", 10.0)} and replaced == 1


def test_stale_entries_are_named():
    t = _table([_entry("torch.dequant_mm", 1, 8.0, source_hash="sha256:0000000000000000")])
    stale = merge_tables.stale_entries(t)
    assert len(stale) == 1 and "torch.dequant_mm fp8_row/bf16 4096x4096 M<=1" in stale[0]
    assert merge_tables.stale_entries(_table([_entry("torch.dequant_mm", 1, 8.0)])) == []


def test_cli_refuses_stale_tables(tmp_path):
    base = tmp_path / "base.yaml"
    tables.save_table(_table([_entry("torch.dequant_mm", 1, 8.0)]), base)
    stale = tmp_path / "stale.yaml"
    tables.save_table(_table([_entry("torch.dequant_mm", 1, 7.0, source_hash="sha256:0000000000000000")]), stale)
    with pytest.raises(SystemExit, match="re-run tools.autotune"):
        merge_tables.main([str(base), str(stale), "--out", str(tmp_path / "out.yaml")])
    merge_tables.main([str(base), str(base), "--out", str(tmp_path / "out.yaml")])
    assert len(tables.load_table(tmp_path / "out.yaml").entries) == 1


def test_drop_stale_needs_every_dropped_key_retuned(tmp_path):
    """--drop-stale: a stale base entry is never compared; its key must come back from the new tables."""
    base = tmp_path / "base.yaml"
    tables.save_table(_table([_entry("torch.dequant_mm", 1, 1.0, source_hash="sha256:0000000000000000"),
                              _entry("torch.reference", 16, 10.0)]), base)
    partial = tmp_path / "partial.yaml"
    tables.save_table(_table([_entry("torch.reference", 16, 9.0)]), partial)
    with pytest.raises(SystemExit, match="no re-tuned entry"):
        merge_tables.main([str(base), str(partial), "--out", str(tmp_path / "out.yaml"), "--drop-stale"])
    with pytest.raises(SystemExit, match="re-run tools.autotune"):  # without the flag the stale base is refused
        merge_tables.main([str(base), str(partial), "--out", str(tmp_path / "out.yaml")])
    full = tmp_path / "full.yaml"
    tables.save_table(_table([_entry("torch.reference", 1, 5.0)]), full)
    merge_tables.main([str(base), str(partial), str(full), "--out", str(tmp_path / "out.yaml"), "--drop-stale"])
    got = {e.m_bucket: (e.impl, e.us) for e in tables.load_table(tmp_path / "out.yaml").entries}
    assert got == {1: ("torch.reference", 5.0), 16: ("torch.reference", 9.0)}  # the stale 1.0 us never won
