"""tools/perf/peers.py: the baseline file's tables parsed, and the comparison by speedup over bf16."""

from __future__ import annotations

from conftest import REPO
from tools.perf import peers

MD = """
## Decode (M = 1, 16): us / % of copy BW / speedup vs bf16 / rel err

### N=4096 K=4096

| variant | M=1 | M=16 |
|---|---|---|
| bf16_linear | 12.9 / 77% / 1.00x / 2e-03 | 13.0 / 77% / 1.00x / 2e-03 |
| bw_gemm | n/a (error) | 9.5 / 62% / 1.37x / 3e-02 |
| gemlite_a16w8_fp8 | 7.1 / 56% / 1.82x / 2e-03 | 9.3 / 43% / 1.40x / 2e-03 |

## All M, bandwidth view: us / % of copy BW / speedup vs bf16 / rel err

### N=4096 K=4096

| variant | M=1 | M=4 |
|---|---|---|
| gemlite_a16w8_fp8 | 7.2 / 55% / 1.79x / 2e-03 | 12.0 / 33% / 1.08x / 2e-03 |
"""


def test_parse_keeps_the_first_measurement_and_skips_errors():
    t = peers.parse_baseline(MD)
    assert t[("gemlite_a16w8_fp8", 4096, 4096, 1)] == 1.82  # decode table first; the all-M repeat is not used
    assert t[("gemlite_a16w8_fp8", 4096, 4096, 4)] == 1.08
    assert ("bw_gemm", 4096, 4096, 1) not in t and t[("bw_gemm", 4096, 4096, 16)] == 1.37


def test_compare_by_speedup_in_each_run():
    t = peers.parse_baseline(MD)
    bench = {"main": [{"format": "fp8_row", "act": "bf16", "n": 4096, "k": 4096, "m": 1,
                       "rows": [{"route": "dispatch.linear", "us": 5.0, "status": "ok"},
                                {"route": "bf16 F.linear", "us": 10.0, "status": "ok"}]},
                      {"format": "fp8_row", "act": "bf16", "n": 4096, "k": 4096, "m": 16,
                       "rows": [{"route": "dispatch.linear", "us": 10.0, "status": "ok"},
                                {"route": "bf16 F.linear", "us": 13.0, "status": "ok"}]}]}
    rows = peers.compare(peers.dispatched_speedups([bench]), t)
    assert [(r["m"], r["peer"], round(r["ratio"], 3)) for r in rows] == [(1, "gemlite_a16w8_fp8", round(2.0 / 1.82, 3)),
                                                                          (16, "gemlite_a16w8_fp8", round(1.3 / 1.40, 3))]


def test_the_shared_baseline_file_parses():
    path = REPO.parent / "shared" / "perf" / "h200_baseline.md"
    if not path.exists():
        import pytest

        pytest.skip("shared/ is not beside this checkout")
    t = peers.parse_baseline(path.read_text())
    shapes = {(n, k) for (_, n, k, _) in t}
    assert len(shapes) == 8  # the 8 baseline shapes
    assert all(v in {x for (x, *_rest) in t} for vs in peers.PEERS.values() for v in vs)
    assert t[("bf16_linear", 4096, 4096, 1)] == 1.0


def test_later_candidate_files_replace_earlier_cells(tmp_path, capsys):
    """--candidates C1 C2 --candidates-bf16 B1 B2: each file's Triton times over its own bench's bf16 time; C2's cell
    replaces C1's, a cell only C1 timed stays, and a cell whose bench lacks the bf16 time is not taken from C2."""
    import json

    def cell(m, rows):
        return {"format": "fp8_row", "act": "bf16", "n": 4096, "k": 4096, "m": m, "rows": rows}

    def bf16(m, us):
        return cell(m, [{"route": "bf16 F.linear", "us": us, "status": "ok"}])

    def tri(m, us):
        return cell(m, [{"route": "triton.w8a16_gemv", "us": us, "status": "ok"}])

    files = {"md": MD, "c1": {"main": [tri(1, 10.0), tri(16, 10.0)]}, "b1": {"main": [bf16(1, 10.0), bf16(16, 13.0)]},
             "c2": {"main": [tri(1, 5.0), tri(16, 5.0)]}, "b2": {"main": [bf16(1, 10.0)]},
             "bench": {"main": []}}
    paths = {}
    for name, body in files.items():
        paths[name] = tmp_path / name
        paths[name].write_text(body if isinstance(body, str) else json.dumps(body))
    peers.main(["--baseline", str(paths["md"]), "--bench", str(paths["bench"]),
                "--candidates", str(paths["c1"]), str(paths["c2"]),
                "--candidates-bf16", str(paths["b1"]), str(paths["b2"])])
    out = capsys.readouterr().out.split("the fastest Triton kernel alone")[1]
    # M = 1: C2's 2.00x (>= 1.82, at or above); M = 16: C1's 1.30x (below 1.40), C2 had no bf16 time there
    assert "all: 1 of 2 cells" in out and "M=16: 1.30x vs gemlite_a16w8_fp8 1.40x" in out, out
