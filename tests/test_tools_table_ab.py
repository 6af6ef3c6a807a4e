"""tools.perf.table_ab: the same-run A/B comparison of two tuning tables."""

from __future__ import annotations

from dispatch import tables
from dispatch.target import Target
from tools.perf import table_ab


def _table(path, cells):
    t = tables.new_table(Target.simulated_for("sm_90"))
    entries = [tables.make_entry(f, a, n, k, m, "triton.w8a16_gemm", {}, "sha256:0", us, 0.0)
               for f, a, n, k, m, us in cells]
    return str(tables.save_table(tables.merge(t, entries), path))


def test_ratios_per_cell_per_format_and_overall(tmp_path, capsys):
    base = _table(tmp_path / "a.yaml", [("fp8_row", "bf16", 4096, 4096, 64, 20.0),
                                        ("fp8_row", "bf16", 4096, 4096, 256, 40.0),
                                        ("fp8_row", "fp8", 4096, 4096, 64, 7.0),
                                        ("mxfp8", "bf16", 4096, 4096, 64, 30.0), ("mxfp8", "bf16", 8192, 8192, 64, 9.0)])
    new = _table(tmp_path / "b.yaml", [("fp8_row", "bf16", 4096, 4096, 64, 10.0),
                                       ("fp8_row", "bf16", 4096, 4096, 256, 10.0),
                                       ("fp8_row", "fp8", 4096, 4096, 64, 14.0),
                                       ("mxfp8", "bf16", 4096, 4096, 64, 30.0)])
    assert table_ab.main([base, new, "--labels", "off,on"]) == 0
    out = capsys.readouterr().out
    assert "off/on  2.00x" in out and "off/on  4.00x" in out and "off/on  1.00x" in out
    assert "fp8_row/bf16: geomean off/on 2.828, 2.00-4.00 over 2 cells" in out
    assert "fp8_row/fp8: geomean off/on 0.500, 0.50-0.50 over 1 cells" in out  # same N, K, M: another key
    assert "mxfp8/bf16: geomean off/on 1.000, 1.00-1.00 over 1 cells" in out
    assert "all: geomean off/on 1.414 over 4 cells" in out
    assert "1 cells in one table only" in out and "mxfp8/bf16 8192x8192 M=64" in out


def test_no_common_cell_is_an_error_exit(tmp_path):
    base = _table(tmp_path / "a.yaml", [("fp8_row", "bf16", 128, 128, 1, 1.0)])
    new = _table(tmp_path / "b.yaml", [("fp8_row", "bf16", 256, 256, 2, 1.0)])
    assert table_ab.main([base, new]) == 1
