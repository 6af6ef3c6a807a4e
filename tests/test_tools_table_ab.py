"""tools.perf.table_ab: the same-run A/B comparison of two tuning tables."""

from __future__ import annotations

import yaml

from tools.perf import table_ab


def _table(path, cells):
    path.write_text(yaml.safe_dump({"entries": [dict(format=f, n=n, k=k, m_bucket=m, us=us)
                                                for f, n, k, m, us in cells]}))
    return str(path)


def test_ratios_per_cell_per_format_and_overall(tmp_path, capsys):
    base = _table(tmp_path / "a.yaml", [("fp8_row", 4096, 4096, 64, 20.0), ("fp8_row", 4096, 4096, 256, 40.0),
                                        ("mxfp8", 4096, 4096, 64, 30.0), ("mxfp8", 8192, 8192, 64, 9.0)])
    new = _table(tmp_path / "b.yaml", [("fp8_row", 4096, 4096, 64, 10.0), ("fp8_row", 4096, 4096, 256, 10.0),
                                       ("mxfp8", 4096, 4096, 64, 30.0)])
    assert table_ab.main([base, new, "--labels", "off,on"]) == 0
    out = capsys.readouterr().out
    assert "off/on  2.00x" in out and "off/on  4.00x" in out and "off/on  1.00x" in out
    assert "fp8_row: geomean off/on 2.828, 2.00-4.00 over 2 cells" in out
    assert "mxfp8: geomean off/on 1.000, 1.00-1.00 over 1 cells" in out
    assert "all: geomean off/on 2.000 over 3 cells" in out
    assert "1 cells in one table only" in out


def test_no_common_cell_is_an_error_exit(tmp_path, capsys):
    base = _table(tmp_path / "a.yaml", [("fp8_row", 1, 1, 1, 1.0)])
    new = _table(tmp_path / "b.yaml", [("fp8_row", 2, 2, 2, 1.0)])
    assert table_ab.main([base, new]) == 1
