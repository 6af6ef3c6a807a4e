"""tools/perf/config_ranks.py: configs ranked by their quick-pass ratio to each cell's best, winners by final stage."""

from __future__ import annotations

from tools.perf import config_ranks


def _rec(n, cfg, stage, us):
    return {"kind": "result", "status": "ok", "us": us,
            "key": {"impl": "triton.w8a16_gemv", "act": "bf16", "m": 1, "fmt": "fp8_row", "n": n, "k": 4096,
                    "config": cfg, "stage": stage}}


def test_ranks_by_median_ratio_and_counts_final_wins():
    recs = [_rec(1024, "a", "quick", 10.0), _rec(1024, "b", "quick", 12.0), _rec(1024, "c", "quick", 9.0),
            _rec(2048, "a", "quick", 20.0), _rec(2048, "b", "quick", 19.0),  # "c" not timed here: left out
            _rec(1024, "a", "final", 9.5), _rec(1024, "c", "final", 9.0),
            _rec(2048, "a", "final", 19.5), _rec(2048, "b", "final", 19.8)]
    lines = config_ranks.ranks(recs)
    assert lines[0] == "triton.w8a16_gemv act=bf16 M=1: 2 cells"
    # a: ratios 10/9, 20/19 -> median 1.08, worst 1.11, won 2048; b: 12/9, 1.0 -> median 1.17, worst 1.33
    assert lines[1].split() == ["median", "1.08x", "worst", "1.11x", "wins", "1", "a"]
    assert lines[2].split() == ["median", "1.17x", "worst", "1.33x", "wins", "0", "b"]
    assert len(lines) == 3
