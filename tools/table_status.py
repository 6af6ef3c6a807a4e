"""Which shipped tuning-table entries are current for this checkout (informational; CI prints it).

An entry is stale when the source files its implementation hashes changed since it was measured: the
dispatcher then skips it (with a reason in `dispatch.explain`) and the heuristic decides, until the next
`tools.autotune` on that device. Editing a kernel is allowed; this line says a re-tune is due (or, for an edit
of comments and docstrings only, `tools.restamp_table`, which proves that and carries the entries over).

    python -m tools.table_status
"""

from __future__ import annotations

import collections

import tuning_db
from dispatch import registry, tables


def main() -> int:
    cands = {c.id: c for c in registry.candidates()}
    for path in tuning_db.table_paths():
        t = tables.load_table(path)
        stale = collections.Counter(e.impl for e in t.entries
                                    if e.impl not in cands or registry.source_hash(cands[e.impl]) != e.source_hash)
        detail = ", ".join(f"{impl} {n}" for impl, n in sorted(stale.items()))
        print(f"tuning table {path.name}: {len(t.entries)} entries, {sum(stale.values())} stale"
              + (f" ({detail}: re-run tools.autotune on that device, or, after an edit of comments and docstrings "
               "only, python -m tools.restamp_table --base <the measured revision>)" if stale else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
