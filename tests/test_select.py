"""Selection with simulated targets: pure, no GPU. Expectations are derived from the candidates' own
support predicates, never restated here."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dispatch import registry
from dispatch.errors import NoCandidateError
from dispatch.force import policy
from dispatch.formats import Act, Format
from dispatch.heuristic import prior_of
from dispatch.linear import fast_bucket
from dispatch.problem import M_BUCKETS, Problem, m_bucket
from dispatch.select import select
from dispatch.target import Target
from dispatch.torch_candidates import ScaledMMBlockwise, ScaledMMRowwise, ScaledMMTensorwise, candidates
from dispatch.problem import Support
from dispatch_fakes import ALL_PAIRS, FakeKernel, fake_backends

SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (2112, 7168), (3000, 1000), (192, 576)]
ARCHES = ["sm_80", "sm_89", "sm_90", "gfx1201"]


def problems(ms=(1, 4, 16, 64, 256, 1024, 4096)):
    for f, a in sorted(ALL_PAIRS, key=str):
        for n, k in SHAPES:
            for m in ms:
                yield Problem(f, a, m, n, k)


def _uses_fp8_mma(c, p, t) -> bool:
    declared = getattr(c, "uses_fp8_mma", None)
    return prior_of(c, p, t).fp8_mma if declared is None else declared


def _all_candidates():
    return list(candidates()) + fake_backends()


def test_fast_bucket_matches_m_bucket():
    for m in list(range(1, 5000)) + [8191, 8192, 8193, 100000]:
        assert fast_bucket(m) == m_bucket(m), m


@pytest.mark.parametrize("with_fakes", [False, True])
def test_sm80_never_fp8_mma_or_scaled_mm(with_fakes):
    t = Target.simulated_for("sm_80")
    cands = _all_candidates() if with_fakes else list(candidates())
    by_id = {c.id: c for c in cands}
    for p in problems():
        d = select(p, t, candidates=cands)
        c = by_id[d.candidate_id]
        assert "scaled_mm" not in d.candidate_id
        assert not _uses_fp8_mma(c, p, t), (p, d.candidate_id)
        # and every fp8-MMA candidate said no, with a reason
        for cid, why in d.rejected:
            if cid in by_id and _uses_fp8_mma(by_id[cid], p, t):
                assert why


def test_sm80_registered_backends_never_scaled_mm():
    t = Target.simulated_for("sm_80")
    cands = registry.candidates()
    for p in problems(ms=(1, 16, 1024)):
        d = select(p, t, candidates=cands, unavailable=registry.unavailable_backends())
        assert "scaled_mm" not in d.candidate_id
        assert registry.get(d.candidate_id).supports(p, t)


def test_simulated_target_assumes_availability():
    class Absent(FakeKernel):
        def available(self):
            return Support.no("toolkit missing here")

    t = Target.simulated_for("sm_90")
    p = Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4096)
    d = select(p, t, candidates=[Absent("cuda.k", vendor="nvidia")])
    assert d.candidate_id == "cuda.k" and d.assumed_available == (("cuda.k", "toolkit missing here"),)


def test_sm89_never_blockwise_scaled_mm():
    t = Target.simulated_for("sm_89")
    bw = ScaledMMBlockwise()
    for p in problems():
        assert not bw.supports(p, t)
        d = select(p, t, candidates=_all_candidates())
        assert d.candidate_id != bw.id


def test_sm90_blockwise_gates():
    bw = ScaledMMBlockwise()
    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    p = Problem(Format.FP8_BLOCK, Act.FP8, 64, 4096, 4096)
    assert bw.supports(p, t)
    # M = 1 is refused by cuBLAS: never selected there
    p1 = Problem(Format.FP8_BLOCK, Act.FP8, 1, 4096, 4096)
    assert not bw.supports(p1, t)
    assert select(p1, t, candidates=list(candidates())).candidate_id != bw.id
    # torch version gate
    old = Target.simulated_for("sm_90", torch_version="2.8.0")
    s = bw.supports(p, old)
    assert not s and "2.9" in s.reason
    assert select(p, old, candidates=list(candidates())).candidate_id != bw.id


def test_torch_version_gates_rowwise_sm89():
    rw = ScaledMMRowwise()
    p = Problem(Format.FP8_ROW, Act.FP8, 16, 4096, 4096)
    assert not rw.supports(p, Target.simulated_for("sm_89", torch_version="2.6.0"))
    assert rw.supports(p, Target.simulated_for("sm_89", torch_version="2.7.0"))
    assert rw.supports(p, Target.simulated_for("sm_90", torch_version="2.5.0"))
    assert not ScaledMMTensorwise().supports(Problem(Format.FP8_TENSOR, Act.FP8, 16, 4096, 4096),
                                             Target.simulated_for("sm_80"))


def test_gfx1201_picks_hip_or_triton_when_they_support_it():
    t = Target.simulated_for("gfx1201")
    cands = _all_candidates()
    for p in problems(ms=(1, 4, 16)):
        d = select(p, t, candidates=cands)
        native = [c for c in cands if c.backend in ("hip", "triton") and (p.fmt, p.act) in c.serves
                  and c.supports(p, t)]
        if native:
            assert d.backend in ("hip", "triton"), (p, d)


def test_gfx1201_with_registered_backends():
    # the same statement over whatever backends this build registers (fakes excluded)
    t = Target.simulated_for("gfx1201")
    cands = registry.candidates()
    for p in problems(ms=(1, 16)):
        # availability in this (CPU) process is not asked for a simulated target
        native = [c for c in cands if c.backend in ("hip", "triton") and (p.fmt, p.act) in c.serves
                  and c.supports(p, t)]
        if native:
            d = select(p, t, candidates=cands)
            if d.backend == "pad":  # K % 16 != 0: the padded problem is dispatched, and must stay native
                assert p.k % 16
                d = select(dataclasses.replace(p, k=-(-p.k // 16) * 16), t, candidates=cands)
            assert d.backend in ("hip", "triton"), (p, d)


def test_selection_is_pure_and_deterministic():
    t = Target.simulated_for("sm_90")
    cands = _all_candidates()
    p = Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4096)
    assert select(p, t, candidates=cands) == select(p, t, candidates=cands)


def test_every_pair_has_a_candidate_everywhere():
    # the reference is the last resort: every (format, act) runs on every target
    for arch in ARCHES + ["cpu"]:
        t = Target.simulated_for(arch)
        for p in problems(ms=(1, 4096)):
            select(p, t, candidates=list(candidates()))


def test_cpu_uses_scaled_mm_only_where_it_matches():
    t = Target.simulated_for("cpu")
    for p in problems(ms=(1, 64)):
        d = select(p, t, candidates=list(candidates()))
        assert d.candidate_id in {c.id for c in candidates() if c.supports(p, t)}
        assert d.candidate_id != "torch.dequant_mm"


def test_force_and_deny():
    t = Target.simulated_for("sm_90")
    cands = _all_candidates()
    p = Problem(Format.FP8_TENSOR, Act.FP8, 16, 4096, 4096)
    d = select(p, t, candidates=cands, policy=policy(force=("torch.reference",)))
    assert d.candidate_id == "torch.reference"
    assert any("not forced" in why for _, why in d.rejected)
    d = select(p, t, candidates=cands, policy=policy(force=("triton",)))
    assert d.backend == "triton"
    d = select(p, t, candidates=cands, policy=policy(deny=("triton", "cuda", "torch.scaled_mm_tensorwise")))
    assert d.backend == "torch" and d.candidate_id != "torch.scaled_mm_tensorwise"
    d = select(p, t, candidates=cands, policy=policy(force=("triton.*",)))
    assert d.backend == "triton"
    with pytest.raises(NoCandidateError) as ei:
        select(p, t, candidates=cands, policy=policy(force=("cuda.does_not_exist",)))
    msg = str(ei.value)
    assert "cuda.does_not_exist" in msg and "torch.reference" in msg and "not forced" in msg


def test_no_candidate_error_lists_every_reason():
    t = Target.simulated_for("sm_80")
    p = Problem(Format.FP8_TENSOR, Act.FP8, 16, 4096, 4096)
    with pytest.raises(NoCandidateError) as ei:
        select(p, t, candidates=[ScaledMMTensorwise()], unavailable={"hip": "no ROCm here"})
    msg = str(ei.value)
    assert "fp8 tensor cores" in msg and "hip.*" in msg and "no ROCm here" in msg


def test_fp32_and_fp16_problems_select():
    t = Target.simulated_for("sm_90")
    for xd in (torch.float16, torch.float32):
        p = Problem(Format.FP8_ROW, Act.FP8, 16, 4096, 4096, xd, xd)
        d = select(p, t, candidates=list(candidates()))
        # rowwise _scaled_mm writes bf16 only on GPUs: never chosen for fp16/fp32 output
        assert d.candidate_id != "torch.scaled_mm_rowwise"


def test_buckets_cover_serving_range():
    assert M_BUCKETS[0] == 1 and all(b == 2 * a for a, b in zip(M_BUCKETS, M_BUCKETS[1:]))


def test_heuristic_ranks_unvalidated_backends_last():
    t = Target.simulated_for("gfx1201")
    p = Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4096)
    cands = fake_backends()
    d = select(p, t, candidates=cands, hardware_validated=lambda c: c.backend != "hip")
    assert d.backend == "triton" and "hip.w8a16_gemv" in d.detail
    d = select(p, t, candidates=cands, policy=policy(force=("hip",)), hardware_validated=lambda c: c.backend != "hip")
    assert d.candidate_id == "hip.w8a16_gemv"  # still reachable when it is the only one allowed


def test_tuned_config_illegal_for_this_x_dtype_falls_back_to_the_default():
    """The table key has no x dtype: an mxfp8 entry tuned with bf16 x (a swap_ab GEMM config) also answers
    an fp16 problem, where swap_ab is illegal. Found on the H200 as an UnsupportedError at launch; the
    selection must hand out a config the candidate accepts for the problem at hand."""
    from dispatch import tables
    from dispatch.tables import TableSet, Tier
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton.candidates import candidates as triton_candidates

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    cand = next(c for c in triton_candidates() if c.id == "triton.w8a16_gemm")
    tuned = GemmConfig(64, 128, 128, 8, 4, 4, swap_ab=True, tma=True, split_k=0)
    e = tables.make_entry("mxfp8", "bf16", 4096, 4096, 64, cand.id, tuned.to_dict(), registry.source_hash(cand),
                          10.0, 1e-3)
    ts = TableSet((Tier("device", tables.merge(tables.new_table(t), [e])),))
    for xd, want_tuned in ((torch.bfloat16, True), (torch.float16, False)):
        p = Problem(Format.MXFP8, Act.BF16, 64, 4096, 4096, xd, xd)
        d = select(p, t, ts, [cand])
        assert d.source == "table" and (d.config == tuned) == want_tuned, (xd, d.config)
        assert d.config in cand.configs(p, t)


def test_cuda_gemv_uses_its_shape_rule_not_a_config_borrowed_from_another_shape():
    """Nearest-shape entries lend their candidate, but the CUDA GEMVs' config comes from their own rule of
    the shape (it matched the autotuned config on most untabled cells of the H200 bench, borrowed ones cost
    up to 1.26x); candidates that do borrow keep the tuned config when it is in their space."""
    from dispatch import tables
    from dispatch.tables import TableSet, Tier
    from kernels_cuda.candidates import candidates as cuda_candidates
    from kernels_cuda.configs import GemvConfig, default_gemv_config

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    gemv = next(c for c in cuda_candidates() if c.id == "cuda.w8a16_gemv")
    tuned = GemvConfig(warps=8, mtiles=1, unroll=2)
    e = tables.make_entry("mxfp8", "bf16", 4096, 14336, 1, gemv.id, tuned.to_dict(), registry.source_hash(gemv),
                          20.0, 1e-3)
    ts = TableSet((Tier("device", tables.merge(tables.new_table(t), [e])),))
    near = Problem(Format.MXFP8, Act.BF16, 1, 5120, 25600)
    d = select(near, t, ts, [gemv])
    assert d.source == "nearest" and d.config == gemv.default_config(near, t) != tuned
    # (the candidate's rule: configs.default_gemv_config, with two row tiles where one makes a second wave)
    assert d.config == GemvConfig(8, 2, 1) == default_gemv_config(near, t)
    exact = Problem(Format.MXFP8, Act.BF16, 1, 4096, 14336)
    assert select(exact, t, ts, [gemv]).config == tuned


def test_triton_w8a8_gemm_default_tile_at_medium_m_follows_n():
    """Where the heuristic decides (no tuned entry), the W8A8 GEMM at M = 256 takes the 64x64 tile on N <= 4096
    and 64x128 above (the faster of the two on the H200 in those regimes), a tile its space offers."""
    from kernels_triton.candidates import candidates as triton_candidates

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    gemm = next(c for c in triton_candidates() if c.id == "triton.w8a8_gemm")
    for n, k, want in ((2112, 7168, (64, 64)), (3000, 1000, (64, 64)), (6144, 4096, (64, 128))):
        p = Problem(Format.FP8_BLOCK, Act.FP8, 256, n, k)
        cfg = gemm.default_config(p, t)
        assert (cfg.block_m, cfg.block_n) == want and cfg in gemm.configs(p, t), (n, k, cfg)
        assert cfg.tma == (k % 16 == 0)  # the TMA twin only where rows are 16-byte aligned
    assert gemm.default_config(Problem(Format.FP8_BLOCK, Act.FP8, 64, 2112, 7168), t) == \
        gemm.configs(Problem(Format.FP8_BLOCK, Act.FP8, 64, 2112, 7168), t)[0]


def test_nearest_entry_does_not_cross_the_decode_prefill_boundary():
    """A tuned entry at M = 64 (a tiled GEMM) is not lent to M = 16 (GEMV territory) of the same shape, nor an
    M = 16 entry to M = 64: the heuristic decides there. Within a side it is lent as before (M = 4 from M = 16,
    M = 256 from M = 64)."""
    from dispatch import tables
    from dispatch.tables import TableSet, Tier
    from kernels_triton.candidates import candidates as triton_candidates

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    cands = [c for c in triton_candidates() if c.id in ("triton.w8a16_gemm", "triton.w8a16_gemv")]
    gemm, gemv = (next(c for c in cands if c.id == i) for i in ("triton.w8a16_gemm", "triton.w8a16_gemv"))
    entries = [tables.make_entry("fp8_row", "bf16", 4096, 4096, 64, gemm.id, gemm.configs(
                   Problem(Format.FP8_ROW, Act.BF16, 64, 4096, 4096), t)[0].to_dict(), registry.source_hash(gemm),
                   12.0, 1e-3),
               tables.make_entry("fp8_row", "bf16", 28672, 4096, 16, gemv.id, gemv.configs(
                   Problem(Format.FP8_ROW, Act.BF16, 16, 28672, 4096), t)[0].to_dict(), registry.source_hash(gemv),
                   40.0, 1e-3)]
    ts = TableSet((Tier("device", tables.merge(tables.new_table(t), entries)),))

    def decide(m, n, k):
        return select(Problem(Format.FP8_ROW, Act.BF16, m, n, k), t, ts, cands)

    # each problem's own-shape entry is 2 buckets away, across; the other shape is 2.8 (log2 7) away
    assert decide(16, 4096, 4096).source == "heuristic"
    assert decide(64, 28672, 4096).source == "heuristic"
    d = decide(4, 28672, 4096)
    assert d.source == "nearest" and d.candidate_id == gemv.id
    d = decide(256, 4096, 4096)
    assert d.source == "nearest" and d.candidate_id == gemm.id


def test_nearest_entry_not_lent_where_its_config_fills_far_fewer_sms():
    """Session 16 on the H200: the fp8_block/fp8 4096x14336 M = 256 entry (the Triton GEMM, 128 x 128 tiles with
    split-K chosen at launch: 64 tiles x 2 splits fill 0.97 of 132 SMs; 1.13x faster than cuBLAS there) was lent to
    5120x25600, where one split of 80 tiles fills 0.61 and the GEMM ran 1.53x cuBLAS. It is skipped there, with the
    reason, and the heuristic decides; at 4096x12288 (the same geometry) it is lent as before."""
    from dispatch import tables
    from dispatch.tables import TableSet, Tier
    from kernels_triton._gemm_config import GemmConfig

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    cands = [c for c in registry.candidates() if c.id in ("triton.w8a8_gemm", "torch.scaled_mm_blockwise")]
    gemm = next(c for c in cands if c.id == "triton.w8a8_gemm")
    tuned = GemmConfig(128, 128, 128, 8, 8, 4, tma=True, split_k=0)
    src = Problem(Format.FP8_BLOCK, Act.FP8, 256, 4096, 14336)
    assert tuned in gemm.configs(src, t)
    far = Problem(Format.FP8_BLOCK, Act.FP8, 256, 5120, 25600)
    assert gemm.grid_fill(src, tuned, t) > 0.95 and gemm.grid_fill(far, tuned, t) < 0.65
    e = tables.make_entry("fp8_block", "fp8", 4096, 14336, 256, gemm.id, tuned.to_dict(), registry.source_hash(gemm),
                          43.0, 1e-3)
    ts = TableSet((Tier("device", tables.merge(tables.new_table(t), [e])),))
    d = select(far, t, ts, cands)
    assert d.source == "heuristic" and d.candidate_id == "torch.scaled_mm_blockwise", d
    assert any("of the last wave's SMs here against" in s for s in d.skipped_entries), d.skipped_entries
    d = select(Problem(Format.FP8_BLOCK, Act.FP8, 256, 4096, 12288), t, ts, cands)
    assert d.source == "nearest" and d.candidate_id == gemm.id and d.config == tuned, d


def test_one_launch_w8a8_entries_are_not_lent_to_nearby_shapes():
    """Session 21 on the H200: the one-launch W8A8 GEMV won fp8_tensor 4096x4096 M = 1 (a one-wave grid) and ran
    1.2-1.25x slower than the best on 4096x14336 and 8192x8192, where the fallback chain had lent that entry. Its
    entry serves its own key only; nearby shapes go to the next entry or the heuristic, with the reason."""
    from dispatch import tables
    from dispatch.tables import TableSet, Tier
    from kernels_cuda.candidates import candidates as cuda_candidates
    from kernels_cuda._w8a8_fused import FqGemvConfig

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    cands = [c for c in cuda_candidates() if c.id in ("cuda.w8a8_gemv_fq", "cuda.w8a8_gemv")]
    fq = next(c for c in cands if c.id == "cuda.w8a8_gemv_fq")
    cfg = FqGemvConfig(warps=8, mtiles=1, unroll=2, persistent=True)
    e = tables.make_entry("fp8_tensor", "fp8", 4096, 4096, 1, fq.id, cfg.to_dict(), registry.source_hash(fq), 7.4, 1e-3)
    ts = TableSet((Tier("device", tables.merge(tables.new_table(t), [e])),))
    d = select(Problem(Format.FP8_TENSOR, Act.FP8, 1, 4096, 4096), t, ts, cands)
    assert d.source == "table" and d.candidate_id == fq.id and d.config == cfg
    d = select(Problem(Format.FP8_TENSOR, Act.FP8, 1, 4096, 14336), t, ts, cands)
    assert d.source == "heuristic" and d.candidate_id == "cuda.w8a8_gemv", d
    assert any("not lent" in s for s in d.skipped_entries), d.skipped_entries


def test_decode_tiles_problems_use_the_tiles_tables_then_hand_the_row_major_pick_over():
    """Problem.decode_tiles (a weight given dispatch.add_decode_tiles): its exact key in a table measured on tiles
    decides, whatever it picked; without one the row-major chain decides and a CUDA GEMV pick runs on its variant on
    tiles at the same config where _tiles.helps says so (else the row-major kernel); a forced row-major GEMV stays
    row-major; a row-major problem never sees the tiles table nor the variants."""
    from dispatch import tables
    from dispatch.force import Policy
    from dispatch.tables import TableSet, Tier
    from kernels_cuda import _tiles
    from kernels_cuda.candidates import candidates as cuda_candidates
    from kernels_cuda.configs import GemvConfig

    t = Target.simulated_for("sm_90", torch_version="2.11.0")
    cands = list(cuda_candidates()) + list(candidates())
    by_id = {c.id: c for c in cands}
    gemv, variant = by_id["cuda.w8a16_gemv"], by_id["cuda.w8a16_gemv_tiles"]
    helps, no_help = GemvConfig(8, 1, 2), GemvConfig(8, 1, 1)  # fp8_row fits three CTAs per SM at one tile, ring 1
    assert _tiles.helps(helps, Act.BF16, Format.FP8_ROW) and not _tiles.helps(no_help, Act.BF16, Format.FP8_ROW)
    row_p = Problem(Format.FP8_ROW, Act.BF16, 1, 4096, 4096)
    tiled_p = dataclasses.replace(row_p, decode_tiles=True)

    def entry(cand, cfg, us):
        return tables.make_entry("fp8_row", "bf16", 4096, 4096, 1, cand.id, cfg.to_dict(), registry.source_hash(cand),
                                 us, 1e-3)

    for cfg, want in ((helps, variant.id), (no_help, gemv.id)):
        row_table = tables.merge(tables.new_table(t), [entry(gemv, cfg, 6.0)])
        ts = TableSet((Tier("device", row_table),))
        d = select(row_p, t, ts, cands)
        assert (d.candidate_id, d.config, d.source) == (gemv.id, cfg, "table")
        d = select(tiled_p, t, ts, cands)
        assert (d.candidate_id, d.config, d.source) == (want, cfg, "table") and d.problem == tiled_p
        assert "no entry tuned on decode tiles" in d.detail
        forced = select(tiled_p, t, ts, cands, Policy(force=(gemv.id,)))
        assert forced.candidate_id == gemv.id
        # a forced variant runs with the config its row-major kernel's entry chose, helps or not
        forced = select(tiled_p, t, ts, cands, Policy(force=(variant.id,)))
        assert (forced.candidate_id, forced.config, forced.source) == (variant.id, cfg, "table")
        with pytest.raises(NoCandidateError, match="has none"):
            select(row_p, t, ts, cands, Policy(force=(variant.id,)))
        # a table measured on tiles wins for the tiled problem only, even where it picked the row-major kernel
        for pick in (variant, gemv):
            tiled_table = tables.merge(tables.new_table(t, layout="decode_tiles"), [entry(pick, no_help, 5.0)])
            ts2 = TableSet((Tier("device", tiled_table), Tier("device", row_table)))
            d = select(tiled_p, t, ts2, cands)
            assert (d.candidate_id, d.config) == (pick.id, no_help) and "tuned on decode tiles" in d.detail
            assert select(row_p, t, ts2, cands).candidate_id == gemv.id
    assert not variant.supports(row_p, t) and variant.supports(tiled_p, t)
    # with no table at all: the heuristic's pick, handed over the same way
    d = select(tiled_p, t, TableSet(), cands)
    h = select(row_p, t, TableSet(), cands)
    assert d.config == h.config and d.candidate_id == (
        by_id[h.candidate_id].decode_tiles_variant if by_id[h.candidate_id].decode_tiles_variant
        and by_id[by_id[h.candidate_id].decode_tiles_variant].tiles_help(h.config, tiled_p) else h.candidate_id)
