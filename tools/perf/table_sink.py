"""Where autotune winners go: a tuning table written through the dispatcher's writer API (dispatch.tables).

The table is re-saved (atomically) after every problem, so a run killed at any point leaves a valid table
with everything measured so far. An existing table for another device or arch is never merged into.
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable

from dispatch import tables
from dispatch.errors import TableError
from dispatch.problem import Problem, m_bucket
from dispatch.target import Target

from .timing import Ceilings
from .tuner import ProblemResult


def default_table_path(target: Target, layout: str = tables.ROW_MAJOR) -> pathlib.Path:
    slug = "".join(ch if ch.isalnum() else "_" for ch in target.device_name.lower()).strip("_")
    return pathlib.Path("tuning_db") / f"{slug or target.arch}{'_' + layout if layout else ''}.yaml"


class TableSink:
    def __init__(self, path: "str | os.PathLike", target: Target, *, generated_by: str = "",
                 layout: str = tables.ROW_MAJOR):
        self.path = pathlib.Path(path)
        self.target = target
        if self.path.exists():
            t = tables.load_table(self.path)
            why = t.mismatch(target)
            if why:
                raise TableError(f"tuning table {self.path} belongs elsewhere ({why}); write this device's "
                                 "results to another file with --table")
            if t.layout != layout:
                raise TableError(f"tuning table {self.path} holds entries measured on weight layout "
                                 f"{t.layout or 'row-major'!r}, this run measures {layout or 'row-major'!r}: write them "
                                 "to another file with --table")
            self.table = t
        else:
            self.table = tables.new_table(target, generated_by=generated_by, path=str(self.path), layout=layout)
        self.written = 0

    def entry_for(self, problem: Problem) -> "tables.Entry | None":
        key = (problem.fmt, problem.act, problem.n, problem.k, m_bucket(problem.m))
        for e in self.table.entries:
            if e.key == key:
                return e
        return None

    def is_current(self, problem: Problem, hash_of: Callable[[str], str | None]) -> bool:
        """An entry exists and its implementation's source is unchanged since it was measured."""
        e = self.entry_for(problem)
        return e is not None and hash_of(e.impl) == e.source_hash

    def add(self, res: ProblemResult, ceilings: Ceilings, fallback_copy_gbps: float) -> "tables.Entry | None":
        w = res.winner
        if w is None or w.us is None:
            return None
        p = res.problem
        copy_gbps = ceilings.copy_gbps or fallback_copy_gbps
        pct = 100.0 * p.weight_bytes / (w.us * 1e-6) / (copy_gbps * 1e9) if copy_gbps else None
        tflops = p.flops / (w.us * 1e-6) / 1e12
        others = sorted((o for o in res.outcomes if o.status == "ok" and o is not w and o.us is not None),
                        key=lambda o: o.us)
        note = [f"M={p.m}", f"eager {w.eager_us:.1f} us" if w.eager_us else "",
                f"{w.method} x{w.calls} over {w.ncopies} copies",
                f"runner-up {others[0].impl} {others[0].us:.2f} us" if others else "",
                f"{len(res.failed)} failed" if res.failed else "",
                f"bf16 {res.bf16_us:.2f} us" if res.bf16_us else ""]
        entry = tables.make_entry(p.fmt, p.act, p.n, p.k, m_bucket(p.m), w.impl, w.config,
                                  res.source_hashes.get(w.impl, ""), round(w.us, 3), float(w.rel_err or 0.0),
                                  pct_copy_bw=round(pct, 1) if pct is not None else None, tflops=round(tflops, 2),
                                  note="; ".join(s for s in note if s))
        self.table = tables.merge(self.table, [entry])
        tables.save_table(self.table, self.path)
        self.written += 1
        return entry
