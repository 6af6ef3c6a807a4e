"""The table-free fallback replayed on the measured H200 bench (docs/perf): a regression guard for the priors."""

from __future__ import annotations

import json

from conftest import REPO
from tools.heuristic_eval import evaluate

RESULTS = REPO / "docs/perf/h200_bench_results_2026-11-29.json"


def test_heuristic_alone_is_within_15_percent_on_most_measured_cells():
    r = evaluate(json.loads(RESULTS.read_text()))
    assert r["cells"] == 120
    # 118 of 120 with the priors fitted to this run; a prior change that loses more than a few cells fails here.
    assert r["within"] >= 114, r["misses"]


CANDIDATES_S2 = REPO / "docs/perf/h200_candidates_2026-11-29_s2.json"


def test_fallback_chain_on_shapes_left_out_of_the_shipped_table():
    """Session 2's measurements (every candidate, 8 shapes x 7 M buckets x 5 format/acts): each cell decided
    with the shipped H200 table minus its own shape (the nearest-shape entries, then the heuristic) picks a
    candidate within 15 % of the fastest in 274 of 280 cells (2026-11-29); the heuristic alone in 254 (its
    priors were fitted before this run, on M = 1, 16, 4096 only)."""
    from dispatch import tables

    data = json.loads(CANDIDATES_S2.read_text())
    r = evaluate(data, table=tables.load_table(REPO / "tuning_db/nvidia_h200.yaml"))
    assert r["cells"] == 280
    assert r["within"] >= 268, r["misses"]
    assert evaluate(data)["within"] >= 245
