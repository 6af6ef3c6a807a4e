"""dispatch.isa.main_loop_barriers / gcn_main_loop_barriers: barriers inside the largest loop body of cuobjdump SASS
and of AMDGPU assembly (the ISA report's "loop bar" column). CPU only; the real-kernel case compiles ahead of time."""

from __future__ import annotations

import pytest

from dispatch.isa import gcn_main_loop_barriers, main_loop_barriers, main_loop_instructions


def _sass(lines: list[str]) -> str:
    """cuobjdump-style text for instruction strings, 16 bytes apart from 0x0000."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {ins} ;  /* 0x0 */" for i, ins in enumerate(lines))


def test_barriers_are_counted_in_the_largest_loop_only():
    sass = _sass([
        "BAR.SYNC.DEFER_BLOCKING 0x0",  # 0x00 prologue: outside every loop
        "LDG.E.128 R4, desc[UR4][R2.64]",  # 0x10 main loop starts
        "BAR.SYNC.DEFER_BLOCKING 0x0",  # 0x20
        "STS.128 [R8], R4",  # 0x30
        "BAR.SYNC.DEFER_BLOCKING 0x0",  # 0x40
        "@P1 BRA 0x10",  # 0x50 back to the main loop's top
        "SHFL.BFLY PT, R5, R8, 0x4, 0x1f",  # 0x60 a small epilogue loop
        "BAR.SYNC.DEFER_BLOCKING 0x0",  # 0x70
        "@!P2 BRA 0x60",  # 0x80
        "EXIT",  # 0x90
        "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR11+0x26000], R11",  # 0xa0 an out-of-line mbarrier retry block,
        "@!P0 BRA 0xa0",  # 0xb0
        "BRA 0x20",  # 0xc0 returning into the loop: its span (0x20..0xc0, 3 barriers) is no loop body
        "BRA 0xd0",  # 0xd0 the trap loop cuobjdump ends with
    ])
    assert main_loop_barriers(sass) == 2


def test_no_loop_means_no_loop_barriers():
    assert main_loop_barriers(_sass(["BAR.SYNC.DEFER_BLOCKING 0x0", "EXIT", "BRA 0x20"])) == 0


def test_the_report_reads_a_real_kernel():
    """A 3-stage tensor-core GEMV on sm_90: its K loop holds its cp.async pipeline's barriers; gfx1201 rows are read."""
    pytest.importorskip("triton")
    from kernels_triton import isa as I
    from kernels_triton._gemm_layouts import WScale
    from kernels_triton.configs import GemvConfig

    row = I.compile_and_inspect(I.gemv_variant("gemv", "sm_90", WScale.ROW, 0, GemvConfig(16, 64, 128, 0, 4, 3)))
    assert row.compiled and row.loop_barriers >= 1, row


def test_gcn_barriers_count_in_the_loop_with_most_instructions():
    asm = """\
\ts_barrier
\ts_branch .LBB0_2
.LBB0_1:                                ;   in Loop: Header=BB0_2 Depth=1
\tv_add_f32 v1, v2, v3
\ts_barrier_signal -1
\ts_barrier_wait -1
.LBB0_2:                                ; =>This Inner Loop Header: Depth=1
\tglobal_load_b128 v[4:7], v[0:1], off
\ts_barrier_wait -1
\ts_cbranch_scc0 .LBB0_1
.LBB0_3:                                ; %exit
\ts_barrier_wait -1
.LBB0_4:                                ; =>This Inner Loop Header: Depth=1
\ts_barrier_wait -1
\ts_cbranch_scc0 .LBB0_4
\ts_endpgm
"""
    assert gcn_main_loop_barriers(asm) == 2
    assert gcn_main_loop_barriers("\ts_barrier\n\ts_endpgm\n") == 0


def _hgmma_pairs_fully_waited(sass: str) -> bool:
    """Whether, in the main loop, every HGMMA is retired (WARPGROUP.DEPBAR.LE gsb0, 0x0) before the next one issues."""
    pending = False
    for text in main_loop_instructions(sass):
        if text.startswith("HGMMA"):
            if pending:
                return False
            pending = "gsb0" in text  # the group's last HGMMA; a chained one (no gsb0) issues with the next
        elif text.startswith("WARPGROUP.DEPBAR.LE") and text.rstrip().endswith("0x0"):
            pending = False
    return True


def test_ptxas_serialization_report_matches_the_sass():
    """Where kernels_triton.isa.ptxas_verbose (the report's "wgmma ser") says ptxas serialized a sm_90
    wgmma GEMM (its info C7515), the SASS retires each HGMMA group before the next issues. (The converse does not
    hold: a kernel with one group per K step shows the same pattern from the K step's own wait.)"""
    pytest.importorskip("triton")
    from kernels_triton import isa as I
    from kernels_triton._gemm_isa import gemm_isa_variants

    seen = []
    for v in gemm_isa_variants(("sm_90",)):
        ck = I.compile_variant(v)
        if "wgmma.mma_async" not in ck.asm["ptx"]:
            continue
        said = bool(I.ptxas_verbose(ck.asm["ptx"], "sm_90").serialized)
        seen.append((v.kernel, said, _hgmma_pairs_fully_waited(I.sass_of(ck.asm["cubin"]))))
    assert seen and all(waited for _, said, waited in seen if said), [s for s in seen if s[1] and not s[2]]


def test_sass_loop_tool_reports_a_config(capsys):
    """tools.sass_loop (the command behind the per-config numbers in kernels_triton/README) on the sm_90 W8A16 GEMV
    default at 1 token row: registers, spills, and its main loop's instruction count and barriers."""
    pytest.importorskip("triton")
    from tools import sass_loop

    assert sass_loop.main(["gemv", "ROW", "0", "1,16,512,0,4"]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "spills 0 bytes" in out
    n = int(out.split("main loop: ")[1].split()[0])
    assert n > 50 and "FFMA" in out
    # the W8A8 GEMM (fp8 wgmma: QGMMA) with its loop printed
    cfg = '{"block_m": 64, "block_n": 128, "block_k": 128, "num_warps": 4, "num_stages": 3, "tma": true}'
    assert sass_loop.main(["gemm8", "GROUP_BLOCK", cfg, "--show"]) == 0
    out = capsys.readouterr().out
    assert "spills 0 bytes" in out and "QGMMA.64x128x32" in out.split("main loop: ")[1].split("\n", 2)[2]


def test_no_sm90_gemm_has_its_wgmmas_serialized():
    """ptxas serializes no wgmma of the Triton GEMMs on sm_90: the report's variants and every W8A16 / W8A8 GEMM config
    of the shipped H200 table (13 of its 34 W8A16 GEMM entries ran serialized configs before the K loop was made to
    run at least once, kernels_triton._gemm._k_tile_range)."""
    pytest.importorskip("triton")
    import json
    import pathlib

    import yaml

    from dispatch.target import Target
    from kernels_triton import isa as I
    from kernels_triton._gemm_config import GemmConfig
    from kernels_triton._gemm_isa import _w8a16_variant, gemm_isa_variants
    from kernels_triton._gemm_layouts import WScale

    variants = list(gemm_isa_variants(("sm_90",)))
    table = yaml.safe_load((pathlib.Path(__file__).parents[1] / "tuning_db" / "nvidia_h200.yaml").read_text())
    pairs = {(e["format"], json.dumps(e["config"], sort_keys=True)) for e in table["entries"]
             if e["impl"] == "triton.w8a16_gemm"}
    t = Target.simulated_for("sm_90")
    for fmt, cfg in sorted(pairs):
        ws = {"fp8_row": WScale.ROW, "mxfp8": WScale.MX32, "fp8_tensor": WScale.TENSOR}[fmt]
        variants.append(_w8a16_variant(t, ws, "bf16", GemmConfig(**json.loads(cfg))))
    serialized = []
    for v in variants:
        ck = I.compile_variant(v)
        if "wgmma.mma_async" in ck.asm["ptx"] and I.ptxas_verbose(ck.asm["ptx"], "sm_90").serialized:
            serialized.append(v.kernel)
    assert len(variants) > 20 and not serialized, serialized
