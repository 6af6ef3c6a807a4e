"""What the CUDA decode-GEMV probes share (probe_persistent_gemv, probe_tiled_gemv, probe_w8a8_mma): the command line,
the bench's timing (graph replay over weight copies rotating through > 3.3x L2, median), the cells (shape x format/act
x M, one weight per shape and one set of rotation copies per format), the config the shipped table chose for a GEMV,
variants timed in alternating order, and one JSON line per cell. Needs a GPU; imports torch and the backends lazily.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Callable, Iterator

SHAPES = "6144x4096,4096x4096,28672x4096,4096x14336,128256x4096,8192x8192,6656x2560,8192x2560"


def parser(doc: str, *, m: str = "1,4,16", formats: str, shapes: str = SHAPES) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--shapes", default=shapes)
    ap.add_argument("--m", default=m)
    ap.add_argument("--formats", default=formats, help="format[:act] list")
    ap.add_argument("--out", help="append one JSON line per cell here")
    return ap


@dataclasses.dataclass
class Cell:
    n: int
    k: int
    fmt: Any  # dispatch.formats.Format
    act: Any  # dispatch.formats.Act
    m: int
    ws: Any  # tools.perf.workload.WeightSet: ws.copies rotate
    bw: list  # the bf16 weight's rotation copies
    x: Any  # the activations [m, k]
    problem: Any  # dispatch.problem.Problem


class Probe:
    def __init__(self, args: argparse.Namespace, *, eager_iters: int = 5):
        import tuning_db
        from dispatch import tables
        from dispatch.target import detect
        from tools.perf.timing import CudaTimer, RotationPolicy, TimingPolicy, l2_bytes

        self.args = args
        self.timer, self.rot, self.l2, self.target = CudaTimer(), RotationPolicy(), l2_bytes(), detect("cuda")
        self.policy = TimingPolicy(target_graph_us=2000.0, min_calls=20, max_calls=300, replays=5,
                                   eager_iters=eager_iters)
        row_major = next(p for p in tuning_db.table_paths() if tables.load_table(p).layout == tables.ROW_MAJOR)
        self.entries = {e.key: e for e in tables.load_table(row_major).entries}
        self.out = open(args.out, "a") if args.out else None
        self.rows: list[dict] = []

    def gemv_config(self, p: Any, impl: str) -> Any:
        """The shipped table's config where `impl` holds the key of `p`, else the GEMV's default for it."""
        from kernels_cuda.configs import GemvConfig, default_gemv_config

        e = self.entries.get((p.fmt, p.act, p.n, p.k, p.bucket))
        return GemvConfig.from_dict(dict(e.config)) if e is not None and e.impl == impl \
            else default_gemv_config(p, self.target)

    def gemv_cell(self, c: Cell) -> tuple[list, Callable[..., Any], Any]:
        """(the decode tiles of each rotation copy, the GEMV launcher of the cell's family, its config: the shipped
        table's where the row-major GEMV holds the key)."""
        from dispatch.formats import Act
        from kernels_cuda import _launch, _tiles

        w8a8 = c.act is Act.FP8
        tiles = c.ws.prepared("decode_tiles", lambda qw: _tiles.tile_codes(qw.qdata))
        launcher = _launch.w8a8_gemv if w8a8 else _launch.w8a16_gemv
        return tiles, launcher, self.gemv_config(c.problem, "cuda.w8a8_gemv" if w8a8 else "cuda.w8a16_gemv")

    def cells(self, default_act: str) -> Iterator[Cell]:
        """Shape by shape, format by format (`--formats` entries: format or format:act), M by M; each weight set is
        freed before the next is built."""
        import torch

        from dispatch.formats import Act, Format
        from dispatch.problem import Problem
        from dispatch.weight_quant import quantize
        from tools.perf.timing import warm_gpu
        from tools.perf.workload import bf16_copies, build_weight_set, make_activation, make_weight

        warm_gpu(1.0)
        for shape in self.args.shapes.split(","):
            n, k = (int(v) for v in shape.split("x"))
            w = make_weight(n, k, "cuda")
            bw = bf16_copies(w, l2_bytes=self.l2, rotation=self.rot)
            for spec in self.args.formats.split(","):
                fname, _, aname = spec.partition(":")
                fmt, act = Format(fname), Act(aname or default_act)
                ws = build_weight_set(w, fmt, act, l2_bytes=self.l2, rotation=self.rot, quantize=quantize)
                for m in (int(v) for v in self.args.m.split(",")):
                    yield Cell(n, k, fmt, act, m, ws, bw, make_activation(m, k, "cuda"), Problem(fmt, act, m, n, k))
                del ws
                torch.cuda.empty_cache()

    def time_variants(self, variants: dict[str, Callable[[int], Any]], ncopies: int) -> dict[str, float]:
        """us per call of each variant (a function of the copy index), best of two rounds in alternating order."""
        us: dict[str, float] = {}
        for rnd in range(2):
            for name in (list(variants) if rnd == 0 else list(variants)[::-1]):
                t = self.timer.time(variants[name], ncopies, self.policy).best_us
                us[name] = min(us.get(name, t), t)
        return us

    def bf16_us(self, cell: Cell) -> float:
        import torch

        return self.timer.time(lambda i: torch.nn.functional.linear(cell.x, cell.bw[i]), len(cell.bw),
                               self.policy).best_us

    def emit_cell(self, c: Cell, config: Any, variants: dict[str, Callable[[int], Any]], same: dict[str, bool],
                  **extra: Any) -> dict:
        """Time `variants` (and bf16 F.linear on the cell), record which of them gave their reference's bits (`same`),
        and emit the cell's row (`extra` joins it); returns the row."""
        row = {"fmt": c.fmt.value, "act": c.act.value, "n": c.n, "k": c.k, "m": c.m, "config": config.to_dict(),
               "same_bits": all(same.values()), "differs": [n for n, ok in same.items() if not ok], **extra,
               "us": self.time_variants(variants, c.ws.ncopies), "bytes": c.ws.copies[0].nbytes}
        row["us"]["bf16"] = self.bf16_us(c)
        self.emit(row)
        return row

    def emit(self, row: dict, line: str | None = None) -> None:
        """Keep the row for the closing table, print it (or `line`), append it to --out."""
        self.rows.append(row)
        print(line or json.dumps(row), flush=True)
        if self.out:
            self.out.write(json.dumps(row) + "\n")
            self.out.flush()
