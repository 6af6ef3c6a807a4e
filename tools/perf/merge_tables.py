"""Merge tuning tables of one device, keeping per key (format, act, N, K, M bucket) the faster entry.

Why: a partial re-tune (`tools.autotune --only cuda ...`) measures only some candidates; merging its table
with `tables.merge` would let its winner replace a faster entry of another backend. Entries of all inputs
must be current (same source hashes as the checkout): run it right after the autotunes it merges.

    python -m tools.perf.merge_tables BASE.yaml NEW.yaml [NEW2.yaml ...] --out OUT.yaml [--drop-stale]

--drop-stale: after a kernel edit, the base's entries of the edited candidates are stale. They are dropped
(never compared: their times belong to other code), and their keys must be re-tuned with EVERY candidate in
one of the NEW tables (a stale entry was that key's winner; its runner-up is not in the table). The merge
refuses if a dropped key has no entry in the NEW tables.
"""

from __future__ import annotations

import argparse
import dataclasses

from dispatch import tables


def _stale_test():
    """entry -> True if it was measured on other kernel code than this checkout's (or its candidate is gone)."""
    from dispatch import registry

    hashes = {c.id: registry.source_hash(c) for c in registry.candidates()}
    return lambda e: hashes.get(e.impl) != e.source_hash


def stale_entries(*tabs: tables.Table) -> list[str]:
    """Entries whose source hash differs from the checkout's (measured on other kernel code), as messages."""
    stale = _stale_test()
    return [f"{t.path}: {e.impl} {e.format.value}/{e.act.value} {e.n}x{e.k} M<={e.m_bucket}"
            for t in tabs for e in t.entries if stale(e)]


def drop_stale(base: tables.Table) -> tuple[tables.Table, list]:
    """(base without its stale entries, the keys dropped)."""
    stale = _stale_test()
    keep = tuple(e for e in base.entries if not stale(e))
    return dataclasses.replace(base, entries=keep), [e.key for e in base.entries if stale(e)]


def merge_faster(base: tables.Table, *others: tables.Table) -> tuple[tables.Table, int]:
    by_key = {e.key: e for e in base.entries}
    replaced = 0
    for t in others:
        for e in t.entries:
            old = by_key.get(e.key)
            if old is None or e.us <= old.us:
                replaced += old is not None
                by_key[e.key] = e
    return tables.merge(base, by_key.values()), replaced


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--drop-stale", action="store_true", help="drop the base's stale entries (see the module doc)")
    args = ap.parse_args(argv)
    base = tables.load_table(args.base)
    news = [tables.load_table(p) for p in args.new]
    if args.drop_stale:
        base, dropped = drop_stale(base)
        covered = {e.key for t in news for e in t.entries}
        missing = [k for k in dropped if k not in covered]
        if missing:
            raise SystemExit(f"[merge_tables] {len(missing)} stale base entries have no re-tuned entry in the new "
                             f"tables (first: {missing[0]}); re-tune those keys with every candidate")
        print(f"[merge_tables] dropped {len(dropped)} stale base entries, all re-tuned in the new tables")
    stale = stale_entries(base, *news)
    if stale:
        raise SystemExit(f"[merge_tables] {len(stale)} entries were measured on other kernel sources than this "
                         f"checkout (first: {stale[0]}); re-run tools.autotune for them, then merge")
    merged, replaced = merge_faster(base, *news)
    tables.save_table(merged, args.out)
    print(f"[merge_tables] {len(merged.entries)} entries ({len(base.entries)} in the base, {replaced} replaced "
          f"by faster ones) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
