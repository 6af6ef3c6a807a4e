"""Tuned tables: schema validation, errors naming file and entry, the lookup chain, stale/unknown entries,
nearest-shape fallback, the writer API."""

from __future__ import annotations

import dataclasses

import logging

import pytest
import yaml

import tuning_db
from dispatch import tables
from dispatch.errors import TableError
from dispatch.formats import Act, Format
from dispatch.problem import Problem
from dispatch.registry import source_hash
from dispatch.select import select
from dispatch.target import Target
from dispatch_fakes import FakeConfig, fake_backends

H200 = Target.simulated_for("sm_90", torch_version="2.11.0")


def _entry(impl="triton.gemm", n=4096, k=4096, mb=16, fmt="fp8_row", act="bf16", config=None, sh="", us=10.0):
    return {"format": fmt, "act": act, "n": n, "k": k, "m_bucket": mb, "impl": impl,
            "config": config if config is not None else {"block_n": 128, "split_k": 1}, "source_hash": sh,
            "us": us, "error": 1e-3, "date": "2026-01-01"}


def _doc(entries, name="NVIDIA H200", arch="sm_90", torch_range=">=2.11,<2.12", triton_range="*"):
    return {"schema_version": 1, "kind": "fp8dispatch-tuning-table", "device": {"name": name, "arch": arch},
            "versions": {"torch": torch_range, "triton": triton_range}, "entries": entries}


def _write(path, doc):
    path.write_text(yaml.safe_dump(doc))
    return path


def test_every_shipped_table_validates():
    paths = tuning_db.table_paths()
    for p in paths:
        t = tables.load_table(p)
        assert t.entries, f"{p} has no entries"
        for e in t.entries:
            assert e.source_hash.startswith("sha256:") or e.source_hash == ""
    # (no tables are shipped until tools/autotune runs on the H200; then this loop checks them)


def test_round_trip_writer(tmp_path):
    t = tables.new_table(H200, generated_by="test")
    e1 = tables.make_entry("fp8_row", "bf16", 4096, 4096, 16, "triton.gemm", {"block_n": 128}, "", 9.5, 1e-3,
                           pct_copy_bw=88.0)
    e2 = tables.make_entry("fp8_row", "bf16", 4096, 4096, 16, "triton.gemv", {}, "", 8.5, 1e-3)
    t = tables.merge(t, [e1])
    t = tables.merge(t, [e2])  # same key: replaced
    assert len(t.entries) == 1 and t.entries[0].impl == "triton.gemv"
    path = tables.save_table(t, tmp_path / "h200.yaml")
    back = tables.load_table(path)
    assert back.entries == t.entries and back.device_name == "NVIDIA H200" and back.arch == "sm_90"
    assert back.mismatch(H200) is None


def test_weight_layout_round_trips_and_separates_lookups(tmp_path):
    """A table measured on decode tiles keeps its layout through save/load, and TableSet lookups see only the tables
    of the layout asked for (a row-major problem never gets an entry timed on tiles, nor the reverse)."""
    e = tables.make_entry("fp8_row", "bf16", 4096, 4096, 1, "cuda.w8a16_gemv_tiles", {}, "", 5.0, 1e-3)
    tiled = tables.merge(tables.new_table(H200, layout="decode_tiles"), [e])
    back = tables.load_table(tables.save_table(tiled, tmp_path / "t.yaml"))
    assert back.layout == "decode_tiles" and back.entries == tiled.entries
    row = tables.merge(tables.new_table(H200), [dataclasses.replace(e, impl="cuda.w8a16_gemv")])
    assert tables.load_table(tables.save_table(row, tmp_path / "r.yaml")).layout == ""
    ts = tables.TableSet((tables.Tier("device", back), tables.Tier("device", row)))
    assert [x.impl for _, _, x in ts.exact(e.key)] == ["cuda.w8a16_gemv"]
    assert [x.impl for _, _, x in ts.exact(e.key, "decode_tiles")] == ["cuda.w8a16_gemv_tiles"]
    assert [x.impl for _, _, x in ts.same_kind(e.format, e.act)] == ["cuda.w8a16_gemv"]
    with pytest.raises(TableError, match="weight layout"):
        tables.new_table(H200, layout="tiles")


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["entries"][1].pop("us"), "entry #1 (fp8_row/bf16/4096/4096/32): missing 'us'"),
    (lambda d: d["entries"][1].update(m_bucket=3), "entry #1"),
    (lambda d: d["entries"][1].update(n=-1), "'n' must be > 0"),
    (lambda d: d["entries"][1].update(format="fp4"), "unknown format"),
    (lambda d: d["entries"][1].update(impl="nodot"), "candidate id"),
    (lambda d: d["entries"][1].update(bogus=1), "unknown keys ['bogus']"),
    (lambda d: d.update(schema_version=2), "schema_version"),
    (lambda d: d.update(kind="other"), "kind"),
    (lambda d: d.pop("device"), "missing 'device'"),
    (lambda d: d["versions"].update(torch=">=two"), "versions.torch"),
    (lambda d: d["entries"].append(dict(d["entries"][0])), "entry #2: duplicate key"),
    (lambda d: d.update(weight_layout="tiles"), "weight_layout"),
])
def test_corrupt_tables_name_file_and_entry(tmp_path, mutate, needle):
    doc = _doc([_entry(), _entry(mb=32)])
    mutate(doc)
    p = _write(tmp_path / "bad.yaml", doc)
    with pytest.raises(TableError) as ei:
        tables.load_table(p)
    assert str(p) in str(ei.value) and needle in str(ei.value)


def test_unparseable_yaml(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("entries: [unclosed\n")
    with pytest.raises(TableError, match="broken.yaml"):
        tables.load_table(p)


def test_corrupt_overlay_is_an_error_not_ignored(tmp_path):
    _write(tmp_path / "x.yaml", {"schema_version": 1})
    with pytest.raises(TableError, match="x.yaml"):
        tables.build_table_set(H200, overlay_dir=tmp_path, shipped=[])


def _set(tmp_path, *docs, overlay=()):
    ship = []
    for i, d in enumerate(docs):
        ship.append(_write(tmp_path / f"s{i}.yaml", d))
    od = None
    if overlay:
        od = tmp_path / "overlay"
        od.mkdir()
        for i, d in enumerate(overlay):
            _write(od / f"o{i}.yaml", d)
    return tables.build_table_set(H200, overlay_dir=od, shipped=ship)


P = Problem(Format.FP8_ROW, Act.BF16, 16, 4096, 4096)


def test_exact_entry_wins_with_its_config(tmp_path):
    ts = _set(tmp_path, _doc([_entry(config={"block_n": 128, "split_k": 4})]))
    d = select(P, H200, ts, fake_backends())
    assert d.source == "table" and d.candidate_id == "triton.gemm"
    assert d.config == FakeConfig(128, 4) and "s0.yaml" in d.detail and "entry #0" in d.detail


def test_chain_order_overlay_device_arch(tmp_path):
    arch_doc = _doc([_entry(impl="triton.gemm")], name=None)
    dev_doc = _doc([_entry(impl="triton.gemv")])
    ts = _set(tmp_path, arch_doc, dev_doc)
    assert [t.name for t in ts.tiers] == ["device", "arch"]
    assert select(P, H200, ts, fake_backends()).candidate_id == "triton.gemv"
    ts = _set(tmp_path, arch_doc, dev_doc, overlay=[_doc([_entry(impl="cuda.w8a8_mma")])])
    assert [t.name for t in ts.tiers] == ["overlay", "device", "arch"]
    d = select(P, H200, ts, fake_backends())
    assert d.candidate_id == "cuda.w8a8_mma" and "overlay" in d.detail


def test_tables_for_other_targets_are_skipped_with_reason(tmp_path):
    ts = _set(tmp_path, _doc([_entry()], name="NVIDIA H100 80GB HBM3"), _doc([_entry()], arch="sm_89"),
              _doc([_entry()], torch_range=">=2.12"))
    assert not ts.tiers
    reasons = " | ".join(why for _, why in ts.skipped)
    assert "H100" in reasons and "arch sm_89" in reasons and "torch 2.11.0 outside" in reasons


def test_stale_and_unknown_entries_are_skipped_with_reason(tmp_path):
    ts = _set(tmp_path, _doc([_entry(impl="triton.gemm", sh="sha256:0000"), _entry(impl="triton.gone", mb=32)]))
    d = select(P, H200, ts, fake_backends())
    assert d.source != "table"
    assert any("stale" in s for s in d.skipped_entries)
    d32 = select(Problem(Format.FP8_ROW, Act.BF16, 32, 4096, 4096), H200, ts, fake_backends())
    assert any("unknown implementation" in s for s in d32.skipped_entries)


def test_rejected_impl_entry_skipped(tmp_path):
    # a tuned HIP kernel in an NVIDIA table cannot run here: skipped, with the support predicate's reason
    ts = _set(tmp_path, _doc([_entry(impl="hip.w8a16_gemv")]))
    d = select(P, H200, ts, fake_backends())
    assert d.candidate_id != "hip.w8a16_gemv"
    assert any("amd only" in s for s in d.skipped_entries)


def test_real_source_hash_matches(tmp_path):
    from dispatch.torch_candidates import DequantMM

    c = DequantMM()
    h = source_hash(c)
    assert h.startswith("sha256:")
    ts = _set(tmp_path, _doc([_entry(impl=c.id, config={}, sh=h, mb=4096)]))
    d = select(dataclasses.replace(P, m=4096), H200, ts, [c])  # a prefill route: it claims M >= 64 only
    assert d.source == "table" and d.candidate_id == c.id


def test_mismatched_config_names_file_and_entry(tmp_path):
    ts = _set(tmp_path, _doc([_entry(config={"block_q": 3})]))
    with pytest.raises(TableError) as ei:
        select(P, H200, ts, fake_backends())
    assert "s0.yaml" in str(ei.value) and "entry #0" in str(ei.value) and "block_q" in str(ei.value)


def test_nearest_shape_fallback(tmp_path, caplog):
    ts = _set(tmp_path, _doc([_entry(impl="triton.gemv", n=4096, k=4096, mb=16, config={"block_n": 128}),
                              _entry(impl="triton.gemm", n=28672, k=4096, mb=16)]))
    p = Problem(Format.FP8_ROW, Act.BF16, 16, 5120, 4096)
    with caplog.at_level(logging.INFO, logger="fp8dispatch.select"):
        d = select(p, H200, ts, fake_backends())
        select(p, H200, ts, fake_backends())
    assert d.source == "nearest" and d.candidate_id == "triton.gemv" and "N=4096" in d.detail
    assert d.config == FakeConfig(128, 1)  # in the candidate's config space for this shape: kept
    assert sum("nearest" in r.getMessage() for r in caplog.records) == 1  # logged once
    # neighbouring M bucket of the same shape (M=8 between tuned 4 and 16): larger bucket wins the tie
    ts2 = _set(tmp_path, _doc([_entry(impl="triton.gemv", mb=4), _entry(impl="triton.gemm", mb=16)]))
    d8 = select(Problem(Format.FP8_ROW, Act.BF16, 8, 4096, 4096), H200, ts2, fake_backends())
    assert d8.source == "nearest" and d8.candidate_id == "triton.gemm"
    # too far: heuristic
    far = select(Problem(Format.FP8_ROW, Act.BF16, 16, 512, 512), H200, ts, fake_backends())
    assert far.source == "heuristic" and far.estimates


def test_nearest_config_outside_space_uses_default(tmp_path):
    ts = _set(tmp_path, _doc([_entry(config={"block_n": 32, "split_k": 8})]))
    d = select(Problem(Format.FP8_ROW, Act.BF16, 16, 5120, 4096), H200, ts, fake_backends())
    assert d.source == "nearest" and d.config == FakeConfig()


def test_heuristic_miss_logged_once(caplog):
    p = Problem(Format.MXFP8, Act.BF16, 64, 1234 * 16, 4096)
    with caplog.at_level(logging.INFO, logger="fp8dispatch.select"):
        for _ in range(3):
            d = select(p, H200, tables.EMPTY, fake_backends())
    assert d.source == "heuristic"
    assert sum("heuristic" in r.getMessage() for r in caplog.records) == 1


def test_version_ranges():
    assert tables.version_in("2.11.0", ">=2.11,<2.12")
    assert not tables.version_in("2.12.0", ">=2.11,<2.12")
    assert tables.version_in("2.11.0+cu130", "==2.11")
    assert tables.version_in(None, "*") and not tables.version_in(None, ">=3.0")
    assert tables.version_in("3.6.0", ">3.5.9")


def test_overlay_env_var(tmp_path, monkeypatch):
    od = tmp_path / "ov"
    od.mkdir()
    _write(od / "mine.yaml", _doc([_entry(impl="triton.gemv")]))
    monkeypatch.setenv(tables.OVERLAY_ENV, str(od))
    try:
        ts = tables.tables_for(H200)
        assert ts.tiers and ts.tiers[0].name == "overlay"
    finally:
        monkeypatch.delenv(tables.OVERLAY_ENV)
        tables.reload_tables()
