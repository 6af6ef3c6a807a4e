"""CPU checks of session 12's GPU probe tools: what they would launch is legal, and they find the table entries they
re-time (the timings themselves need the GPU)."""

from __future__ import annotations

import pathlib

import pytest

from conftest import REPO


@pytest.mark.parametrize("fa", ["fp8_row/bf16", "mxfp8/bf16", "fp8_block/fp8", "fp8_tensor/fp8"])
def test_m64_probe_configs_are_legal_for_their_layout(fa):
    """Every config the m64 probe times passes the same legality check the launchers apply, so an "error" row in
    its output is a run-time failure, never a config the kernels refuse."""
    from dispatch.formats import Format
    from kernels_triton._gemm_layouts import W8A8_LAYOUT, W8A16_LAYOUT
    from tools.perf.probe_w8a16_gemm import m64_configs

    fmt, act = fa.split("/")
    configs = m64_configs(fmt, act, 4096)
    assert len(configs) == (25 if act == "bf16" else 20)
    for name, c in configs.items():
        assert c.swap_ab == (act == "bf16") and c.tma
        why = (c.legal_for_w8a16(W8A16_LAYOUT[Format(fmt)], False) if act == "bf16"
               else c.legal_for_w8a8(W8A8_LAYOUT[Format(fmt)]))
        assert why == "", (fa, name, why)
    assert configs["64x64x128s3/k4"].split_k == 4 and configs["64x128x128s4/kauto"].split_k == 0


def test_recheck_finds_the_entries_it_retimes(tmp_path: pathlib.Path):
    """tools.perf.recheck_entries looks entries up by their full key: present in the shipped table, absent from a
    table without them (it then skips that side instead of timing something else)."""
    from dispatch.formats import Act, Format
    from dispatch.tables import load_table, save_table
    from tools.perf.recheck_entries import _entry

    shipped = REPO / "tuning_db/nvidia_h200.yaml"
    key = (Format.MXFP8, Act.BF16, 28672, 4096, 64)
    e = _entry(str(shipped), key)
    assert e is not None and e.key == key
    t = load_table(shipped)
    empty = tmp_path / "t.yaml"
    save_table(t.__class__(**{**t.__dict__, "entries": tuple(x for x in t.entries if x.key != key)}), empty)
    assert _entry(str(empty), key) is None
    assert _entry(str(empty), (Format.FP8_ROW, Act.BF16, 6144, 4096, 64)) is not None


def test_fit_priors_reproduces_the_shipped_triton_gemv_priors():
    """dispatch/heuristic.py's Triton GEMV priors are least-squares fits the tool reproduces from the files in docs/perf
    (to 0.03 of bw_eff and 0.3 us of fixed cost): the W8A16 GEMVs' at M = 4 (MEASURED_PRIORS, every bucket but 1 and
    16) and M = 16 (ROWS_16_PRIORS) to session 34's measurement of their current code, relative residuals; the W8A8
    GEMVs' MEASURED_PRIORS still session 11's fit (absolute residuals; session 34's M = 4 / 16 fits are not used, see
    dispatch/heuristic.py)."""
    import json

    from dispatch.formats import Format
    from dispatch.heuristic import MEASURED_PRIORS, ROWS_16_PRIORS
    from tools.perf.fit_priors import fit

    fits = fit(json.loads((REPO / "docs/perf/h200_triton_gemv_summary_2026-11-30_s11.json").read_text()))
    assert {(f.candidate, f.fmt, f.act) for f in fits} == {
        ("triton.w8a16_gemv", "fp8_row", "bf16"), ("triton.w8a16_gemv", "mxfp8", "bf16"),
        ("triton.w8a8_gemv", "fp8_block", "fp8"), ("triton.w8a8_gemv", "fp8_row", "fp8"),
        ("triton.w8a8_gemv", "fp8_tensor", "fp8")}
    s34 = json.loads((REPO / "docs/perf/h200_candidates_triton_gemv_2026-12-01_s34.json").read_text())
    fits = [f for f in fits if f.candidate == "triton.w8a8_gemv"] + [
        f for f in fit(s34, ms=(4,), relative=True) if f.candidate == "triton.w8a16_gemv"]
    assert len(fits) == 5
    for f in fits:
        assert f.cells == (24 if f.candidate == "triton.w8a8_gemv" else 8)
        pr = MEASURED_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    sixteen = [f for f in fit(s34, ms=(16,), relative=True) if f.candidate == "triton.w8a16_gemv"]
    assert len(sixteen) == 2
    for f in sixteen:
        pr = ROWS_16_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    assert ROWS_16_PRIORS[("triton.w8a16_gemv", Format.FP8_TENSOR)] == ROWS_16_PRIORS[("triton.w8a16_gemv",
                                                                                       Format.FP8_ROW)]
    assert not any(c == "triton.w8a8_gemv" for c, _ in ROWS_16_PRIORS)


def test_fit_priors_reproduces_the_one_row_triton_gemv_priors():
    """The one-row priors (dispatch.heuristic.ONE_ROW_PRIORS) are the same fit: the Triton GEMVs' to session 34's
    M = 1 measurement of their current code (relative residuals; session 15's before), the CUDA GEMVs' to the shipped
    table's M = 1 entries; the heuristic uses them at M = 1 only."""
    import json

    from dispatch import registry
    from dispatch.formats import Act, Format
    from dispatch.heuristic import MEASURED_PRIORS, ONE_ROW_PRIORS, ROWS_16_PRIORS, prior_of
    from dispatch.problem import Problem
    from dispatch.target import Target
    from tools.perf.fit_priors import fit

    fits = fit(json.loads((REPO / "docs/perf/h200_candidates_triton_gemv_2026-12-01_s34.json").read_text()), ms=(1,),
               relative=True)
    assert len(fits) == 5
    for f in fits:
        assert f.cells == 8
        pr = ONE_ROW_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    # the CUDA W8A16 GEMV's one-row terms: the same fit to the shipped H200 table's M = 1 entries
    import yaml
    entries = yaml.safe_load((REPO / "tuning_db/nvidia_h200.yaml").read_text())["entries"]
    table = {"problems": [dict(format=e["format"], act=e["act"], n=e["n"], k=e["k"], m=e["m_bucket"], winner=e["impl"],
                               us=e["us"]) for e in entries if e["impl"] == "cuda.w8a16_gemv"]}
    cuda_fits = fit(table, ms=(1,))
    assert len(cuda_fits) == 2
    # the CUDA W8A8 GEMVs' (two-launch and one-launch): the fit to session 22's measurement of every candidate on
    # every W8A8 key at M = 1 (8 cells each; since the one-launch GEMV won 4 of the table's M = 1 keys, the table's
    # winners alone leave too few two-launch cells to fit)
    s22 = json.loads((REPO / "docs/perf/h200_candidates_decode_w8a8_m1_4_2026-11-30_s22.json").read_text())
    cuda_fits += fit(s22, ms=(1,))
    cuda_fits = [f for f in cuda_fits if f.candidate.startswith("cuda.w8a")]
    assert len(cuda_fits) == 8
    for f in cuda_fits:
        pr = ONE_ROW_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    # the one-launch GEMV at 2..8 tokens (MEASURED_PRIORS): the same run at M = 4 (7 cells: K = 14336 does not fit)
    fq_fits = [f for f in fit(s22, ms=(4,)) if f.candidate == "cuda.w8a8_gemv_fq"]
    assert len(fq_fits) == 3
    for f in fq_fits:
        assert f.cells == 7
        pr = MEASURED_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    gemv = {c.id: c for c in registry.candidates()}["triton.w8a16_gemv"]
    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    for m, table in ((1, ONE_ROW_PRIORS), (2, MEASURED_PRIORS), (16, ROWS_16_PRIORS), (32, MEASURED_PRIORS)):
        p = Problem(Format.MXFP8, Act.BF16, m, 4096, 4096)
        assert prior_of(gemv, p, t) == table[("triton.w8a16_gemv", Format.MXFP8)], m



def test_fit_priors_reproduces_the_m16_triton_w8a8_gemm_priors():
    """dispatch.heuristic.ROWS_16_PRIORS: the Triton W8A8 GEMM's M = 16 terms are the fit to session 16's re-tune,
    used in the M = 16 bucket only (M = 1: the generic term, M = 4: MEASURED_PRIORS)."""
    import json

    from dispatch import registry
    from dispatch.formats import Act, Format
    from dispatch.heuristic import MEASURED_PRIORS, ROWS_16_PRIORS, prior_of
    from dispatch.problem import Problem
    from dispatch.target import Target
    from tools.perf.fit_priors import fit

    fits = [f for f in fit(json.loads((REPO / "docs/perf/h200_candidates_2026-11-30_s16.json").read_text()), ms=(16,))
            if f.candidate == "triton.w8a8_gemm"]
    assert {f.fmt for f in fits} == {"fp8_block", "fp8_row"}
    for f in fits:
        assert f.cells == 8
        pr = ROWS_16_PRIORS[(f.candidate, Format(f.fmt))]
        assert abs(pr.bw_eff - f.bw_eff) <= 0.03 and abs(pr.fixed_us - f.fixed_us) <= 0.3, (f, pr)
    gemm = {c.id: c for c in registry.candidates()}["triton.w8a8_gemm"]
    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    for m, table in ((4, MEASURED_PRIORS), (9, ROWS_16_PRIORS), (16, ROWS_16_PRIORS), (17, MEASURED_PRIORS)):
        assert prior_of(gemm, Problem(Format.FP8_BLOCK, Act.FP8, m, 4096, 4096), t) == \
            table[("triton.w8a8_gemm", Format.FP8_BLOCK)], m


def test_cells_from_journals_prefer_the_final_stage_and_the_latest_code():
    """tools.heuristic_eval.results_from_journals (what `--write-cells` writes as docs/perf/h200_candidates_*.json):
    one row per (candidate, config) and cell, the final-stage time over the quick one whatever the order, failed
    measurements and starts without results dropped, rows of an older source hash of a candidate dropped."""
    import json

    from tools.heuristic_eval import results_from_journals

    def rec(impl, cfg, stage, status, us, kind="result", src="sha256:new"):
        key = {"fmt": "fp8_row", "act": "bf16", "n": 64, "k": 128, "m": 16, "impl": impl, "config": cfg,
               "stage": stage, "source_hash": src}
        return json.dumps({"kind": kind, "key": key, "status": status, "us": us})

    first = [rec("t.gemm", "{}", "final", "ok", 9.0), rec("t.gemm", "{}", "quick", "ok", 7.0),
             rec("t.gemm", '{"x":1}', "quick", "ok", 8.0), rec("c.gemv", "{}", "quick", "error", None),
             rec("c.gemv", '{"y":2}', "quick", "ok", 5.0, kind="start"),
             rec("t.gemv", "{}", "quick", "ok", 1.0, src="sha256:old")]
    second = [rec("t.gemm", '{"x":1}', "quick", "ok", 6.5), rec("t.gemv", "{}", "quick", "ok", 4.0)]
    (cell,) = results_from_journals([first, second])["main"]
    assert (cell["format"], cell["act"], cell["n"], cell["k"], cell["m"]) == ("fp8_row", "bf16", 64, 128, 16)
    assert sorted((r["route"], r["us"]) for r in cell["rows"]) == [("t.gemm", 6.5), ("t.gemm", 9.0), ("t.gemv", 4.0)]


def test_replay_skips_the_bf16_baseline_cells_autotune_journals_hold():
    """An autotune journal times bf16 F.linear per problem and `--write-cells` keeps those rows as cells of format
    "bf16" (session 20's 3000x1000 run): the replay leaves them out instead of failing on them. (The fp8 cell holds
    session 21's pad.k16 time too: the heuristic picks that route there now.)"""
    from tools.heuristic_eval import evaluate

    cell = {"act": "fp8", "n": 3000, "k": 1000, "m": 1}
    data = {"main": [dict(cell, format="bf16", act="bf16", rows=[{"route": "baseline.bf16_linear", "status": "ok",
                                                                 "us": 4.5}]),
                     dict(cell, format="fp8_row", rows=[{"route": "triton.w8a8_gemv", "status": "ok", "us": 9.9},
                                                        {"route": "pad.k16", "status": "ok", "us": 6.9}])]}
    r = evaluate(data)
    assert r["cells"] == 1 and r["within"] == 1, r


def test_ab_vs_bf16_reproduces_session_15s_issue3_decode_speedups():
    """docs/perf/h200_s15_2026-11-30.md quotes fp8_row/bf16 at M = 1 as 1.48x and 1.49x bf16 on 4096x4096 and 6144x4096
    (session 15's changed 1-row GEMV against session 11's bf16 times): tools.perf.ab_vs_bf16 derives them."""
    from tools.perf.ab_vs_bf16 import rows

    got = {(f, a, n, k): sp for f, a, n, k, m, us, pct, sp in rows(
        str(REPO / "docs/perf/h200_triton_ab_2026-11-30_s15.jsonl"), "gemv_m1", "new",
        str(REPO / "docs/perf/h200_triton_gemv_summary_2026-11-30_s11.json"))}
    assert len(got) == 40
    assert round(got[("fp8_row", "bf16", 4096, 4096)], 2) == 1.48 and round(got[("fp8_row", "bf16", 6144, 4096)], 2) == 1.49
    assert max(sp for (f, a, n, k), sp in got.items() if (n, k) in ((4096, 4096), (6144, 4096))) < 1.5


@pytest.mark.parametrize("family", ["gemm", "gemv", "act_quant", "cuda_act_quant", "cuda_wgmma"])
def test_ab_pdl_switches_flip_what_they_name_and_restore(family, monkeypatch):
    """tools.perf.ab_pdl's A/B switches: off changes exactly the launch property the family names (the Triton PDL
    flags, the CUDA quantizer module's -DFP8D_ACTQ_SINGLE_READ=0 key, or the CUDA launchers' PDL for sm_90a), on
    restores it."""
    from kernels_triton import _act_quant, _pdl
    from tools.perf.ab_pdl import _switch

    if family.startswith("cuda"):
        launch = pytest.importorskip("kernels_cuda._launch")
        before = launch.act_quant_module()
        monkeypatch.delenv(launch.PDL_ENV, raising=False)
    sw = _switch(family)
    assert sw.get() is True
    try:
        sw.set(False)
        assert sw.get() is False
        if family == "cuda_act_quant":
            name, defines = launch.act_quant_module()
            assert name == before[0] and dict(defines) == dict(before[1], FP8D_ACTQ_SINGLE_READ=0)
        elif family == "cuda_wgmma":
            assert not launch.pdl_allowed("sm_90a") and (_pdl.ENABLED, _act_quant.PDL) == (True, True)
        else:
            assert (_pdl.ENABLED, _act_quant.PDL) == ((False, True) if family != "act_quant" else (True, False))
    finally:
        sw.set(True)
    assert sw.get() is True and _pdl.ENABLED and _act_quant.PDL
    if family == "cuda_act_quant":
        assert launch.act_quant_module() == before
    if family == "cuda_wgmma":
        assert launch.pdl_allowed("sm_90a")


def test_triton_gemv_probe_spaces_and_switches():
    """tools/perf/probe_triton_gemv.py: --dot-tiles replaces the tensor-core tiles (each with and without a K split),
    --tiles the FMA ones; --toggle accepts only boolean switches of kernels_triton._gemv."""
    pytest.importorskip("triton")
    from tools.perf import probe_triton_gemv as P

    dot = P.configs(16, False, "dot", dot_tiles=[(16, 128, 4), (64, 256, 3)])
    assert {(c.block_n, c.block_k, c.num_stages, c.split_k) for c in dot} == \
        {(16, 128, 4, 0), (16, 128, 4, 1), (64, 256, 3, 0), (64, 256, 3, 1)}
    assert all(c.block_m == 16 and c.use_dot for c in dot)
    fma = P.configs(1, False, "fma", tiles=[(8, 512)])
    assert {(c.block_n, c.block_k, c.num_warps) for c in fma} == {(8, 512, 4), (8, 512, 8)}
    with pytest.raises(SystemExit, match="not a boolean switch"):
        P.main(["--toggle", "GEMV_MAX_M"])


def test_prefill_budget_gemm_alone_is_the_routes_gemm():
    """tools/perf/prefill_budget.py times the route's `_scaled_mm` on codes quantized beforehand: on CPU (per-tensor and
    rowwise `_scaled_mm` run there) it gives the dispatched route's bits."""
    import torch

    import dispatch
    from dispatch.formats import ActGranularity
    from dispatch.torch_candidates import quantize_act
    from tools.perf.prefill_budget import GRANULARITY, _gemm_call

    w = torch.randn(256, 512)
    x = torch.randn(64, 512, dtype=torch.bfloat16)
    for fmt in ("fp8_tensor", "fp8_row"):
        qw = dispatch.quantize(w.bfloat16(), fmt, act="fp8")
        assert dispatch.explain(x, qw).candidate_id.startswith("torch.scaled_mm"), fmt  # the route compared
        xq, xs = quantize_act(x, ActGranularity(GRANULARITY[fmt]))
        assert torch.equal(_gemm_call(fmt, xq, xs, [qw])(0), dispatch.linear(x, qw)), fmt
