"""Session 10's probes of the Triton W8A16 GEMM against the shipped table (docs/perf/h200_w8a16_gemm_2026-11-30_s10.md),
on the GPU, graph replay over weight copies > 3.3x L2 (`kernels_triton._gemm_bench.time_prefill`):

    python -m tools.perf.probe_w8a16_gemm bk128   # 128-deep K tiles (8 warps) against the table, M = 256, 1024, 4096
    python -m tools.perf.probe_w8a16_gemm split   # fixed split-K counts 1-4 of one tile per format, M = 256, 1024

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


def main(argv: list[str] | None = None) -> None:
    from kernels_triton._gemm_config import GemmConfig
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", choices=("bk128", "split"))
    a = ap.parse_args(argv)
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
