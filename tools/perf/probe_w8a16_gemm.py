"""Session 10's probes of the Triton W8A16 GEMM against the shipped table (docs/perf/h200_w8a16_gemm_2026-11-30_s10.md),
on the GPU, graph replay over weight copies > 3.3x L2 (`kernels_triton._gemm_bench.time_prefill`):

    python -m tools.perf.probe_w8a16_gemm bk128   # 128-deep K tiles (8 warps) against the table, M = 256, 1024, 4096
    python -m tools.perf.probe_w8a16_gemm split   # fixed split-K counts 1-4 of one tile per format, M = 256, 1024
    python -m tools.perf.probe_w8a16_gemm m64     # session 12: small tiles x fixed split-K at M = 64, W8A16 and W8A8,
                                                  # with bf16 F.linear timed in the same process and each config's error

A line per cell: the table's route and time, then each probed config's time."""

from __future__ import annotations

import argparse
import dataclasses

SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096), (8192, 8192), (6656, 2560),
          (8192, 2560))


def _table() -> dict:
    """The shipped H200 table by key (the probes compare with it)."""
    import pathlib

    from dispatch.tables import load_table
    path = pathlib.Path(__file__).resolve().parents[2] / "tuning_db" / "nvidia_h200.yaml"
    return {e.key: e for e in load_table(path).entries}


def _cell(tab: dict, fmt: str, m: int, n: int, k: int, configs: dict) -> str:
    from dispatch.formats import Act, Format
    from kernels_triton._gemm_bench import time_prefill
    e = tab.get((Format(fmt), Act.BF16, n, k, m))
    out = [f"{fmt} {n}x{k} M={m} table " + (f"{e.impl} {e.us:.1f}" if e else "-")]
    for name, c in configs.items():
        r = time_prefill(fmt, "bf16", m, n, k, c)
        out.append(f"{name} {r.us:.1f}" if r.us is not None else f"{name} FAILED {r.error[:80]}")
    return " | ".join(out)


def _bf16_us(m: int, n: int, k: int) -> float:
    """bf16 F.linear on the same rotation policy as time_prefill (the number the targets compare with)."""
    import torch

    from kernels_triton._gemm_bench import _timer
    from tools.perf.timing import RotationPolicy, l2_bytes, one_rotation
    from tools.perf.workload import bf16_copies
    ws = bf16_copies(torch.randn(n, k, device="cuda", dtype=torch.bfloat16), l2_bytes=l2_bytes(),
                     rotation=RotationPolicy())
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    return _timer().time(lambda i: torch.nn.functional.linear(x, ws[i]), len(ws), one_rotation(20)).best_us


def _rel_err(fmt: str, act: str, m: int, n: int, k: int, config) -> float:
    """Relative error (max-abs over max-abs) of one config's launch against dispatch.reference."""
    import torch

    import dispatch
    from dispatch import reference
    from dispatch.formats import Act
    from kernels_triton._gemm_candidates import TritonW8A8Gemm, TritonW8A16Gemm
    g = torch.Generator(device="cuda").manual_seed(1)
    qw = dispatch.quantize(torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16), fmt, act=act)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    cand = TritonW8A16Gemm() if Act(act) is Act.BF16 else TritonW8A8Gemm()
    y = cand.run(x, qw, cand.prepare(qw), None, torch.bfloat16, config).float()
    ref = reference.linear(x, qw).float()
    return float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def m64_configs(fmt: str, act: str, k: int):
    """The m64 probe's configs for one format/act, by name ("64x64x128s5/k2": tokens x weight rows x K, stages,
    split-K; kauto = chosen at launch): 4-5 tiles x split-K auto / 1-4, swap_ab where the layout allows it (W8A16
    without a per-K-tile scale), TMA where rows are 16-byte aligned."""
    from kernels_triton._gemm_config import GemmConfig
    swap = act == "bf16" and fmt in ("fp8_row", "fp8_tensor", "mxfp8")
    tiles = [(64, 64, 128, 5), (64, 64, 128, 3), (64, 128, 128, 4), (64, 128, 128, 3)]
    if act == "bf16":
        tiles.append((64, 128, 64, 4))
    return {f"{bm}x{bn}x{bk}s{st}/k{split or 'auto'}":
            GemmConfig(bm, bn, bk, 8, 4, st, swap_ab=swap, tma=k % 16 == 0, split_k=split)
            for bm, bn, bk, st in tiles for split in (0, 1, 2, 3, 4)}


def _m64(m: int, formats: list[str], shapes) -> None:
    """Small tiles x fixed split-K at one M: is the M = 64 loss of the W8A16 GEMM its programs in flight?"""
    import json
    import os

    from kernels_triton._gemm_bench import time_prefill
    tab = _table()
    out = open(os.path.join(os.environ["OUT"], f"probe_m{m}.jsonl"), "a") if os.environ.get("OUT") else None
    for fa in formats:
        fmt, act = fa.split("/")
        for n, k in shapes:
            configs = m64_configs(fmt, act, k)
            from dispatch.formats import Act, Format
            e = tab.get((Format(fmt), Act(act), n, k, m))
            row = {"fmt": fmt, "act": act, "n": n, "k": k, "m": m, "bf16_us": round(_bf16_us(m, n, k), 2),
                   "table": [e.impl, e.us, str(e.config)] if e else None, "configs": {}}
            for name, c in configs.items():
                r = time_prefill(fmt, act, m, n, k, c)
                row["configs"][name] = {"us": round(r.us, 2)} if r.us is not None else {"error": r.error[:120]}
            ok = {nm: v["us"] for nm, v in row["configs"].items() if "us" in v}
            best = min(ok, key=ok.get) if ok else None
            if best is not None:
                row["best"] = [best, ok[best], round(_rel_err(fmt, act, m, n, k, configs[best]), 5)]
            print(f"{fmt}/{act} {n}x{k} M={m} bf16 {row['bf16_us']} table "
                  + (f"{e.impl} {e.us:.1f}" if e else "-")
                  + (f" | best {best} {ok[best]:.1f} ({row['bf16_us'] / ok[best]:.2f}x bf16, err {row['best'][2]})"
                     if best else " | all failed")
                  + " | " + " ".join(f"{nm}={v:.1f}" for nm, v in sorted(ok.items(), key=lambda kv: kv[1])[:6]),
                  flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()


def main(argv: list[str] | None = None) -> None:
    from kernels_triton._gemm_config import GemmConfig
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", choices=("bk128", "split", "m64"))
    ap.add_argument("--m", type=int, default=64, help="m64 probe: the M to probe")
    ap.add_argument("--formats", default="fp8_row/bf16,mxfp8/bf16,fp8_block/fp8,fp8_tensor/fp8",
                    help="m64 probe: format/act list")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="m64 probe: NxK list")
    a = ap.parse_args(argv)
    if a.probe == "m64":
        _m64(a.m, a.formats.split(","), [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")])
        return
    tab = _table()
    if a.probe == "bk128":
        configs = {"bk128_8w_3st": GemmConfig(128, 128, 128, 8, 8, 3, swap_ab=True, split_k=0),
                   "bk128_8w_3st_tma": GemmConfig(128, 128, 128, 8, 8, 3, swap_ab=True, tma=True, split_k=0),
                   "bk128_8w_2st": GemmConfig(128, 128, 128, 8, 8, 2, swap_ab=True, split_k=0),
                   "256x128x128_8w_2st": GemmConfig(256, 128, 128, 8, 8, 2, swap_ab=True, split_k=1)}
        for fmt in ("fp8_row", "mxfp8"):
            for n, k in ((6144, 4096), (8192, 8192), (28672, 4096)):
                for m in (256, 1024, 4096):
                    print(_cell(tab, fmt, m, n, k, configs), flush=True)
    else:
        tiles = {"fp8_row": GemmConfig(128, 128, 64, 8, 8, 4, swap_ab=True),
                 "mxfp8": GemmConfig(128, 128, 128, 8, 8, 3, swap_ab=True, tma=True)}
        for m in (256, 1024):
            for fmt in ("fp8_row", "mxfp8"):
                for n, k in SHAPES:
                    configs = {f"s{s}": dataclasses.replace(tiles[fmt], split_k=s) for s in (1, 2, 3, 4)}
                    print(_cell(tab, fmt, m, n, k, configs), flush=True)


if __name__ == "__main__":
    main()
