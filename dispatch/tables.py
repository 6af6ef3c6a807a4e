"""Tuned tables: YAML files whose keys live inside the file, with a schema version, a loader that names
the file and entry of every problem, a writer API for tools/autotune, and the lookup chain

    user overlay dir ($FP8DISPATCH_TUNING_DIR) -> shipped device table -> shipped arch table

(the analytic heuristic after the chain is in `dispatch.heuristic`; the choice among them in `dispatch.select`).
tuning_db/README.md documents the format.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import pathlib
import re
import threading
from typing import Any, Iterable, Mapping, Sequence

import yaml

from ._atomic import atomic_open
from .errors import TableError
from .formats import Act, Format
from .problem import M_BUCKETS
from .target import Target

SCHEMA_VERSION = 1
KIND = "fp8dispatch-tuning-table"
OVERLAY_ENV = "FP8DISPATCH_TUNING_DIR"
log = logging.getLogger("fp8dispatch.tables")

_ENTRY_REQUIRED = ("format", "act", "n", "k", "m_bucket", "impl", "config", "source_hash", "us", "error", "date")
_ENTRY_OPTIONAL = ("pct_copy_bw", "tflops", "note")
_TOP_REQUIRED = ("schema_version", "kind", "device", "versions", "entries")
_TOP_OPTIONAL = ("generated_by", "created", "weight_layout")
# `weight_layout`: which copy of the weight the entries were measured on. Absent: the row-major codes every weight has.
# "decode_tiles": weights given decode tiles (dispatch.add_decode_tiles); such a table answers only problems with
# decode_tiles, and its candidates may read the tiles (dispatch.select).
ROW_MAJOR = ""
WEIGHT_LAYOUTS = (ROW_MAJOR, "decode_tiles")


# --- Version ranges ------------------------------------------------------------------------------
_CLAUSE = re.compile(r"^\s*(>=|<=|==|>|<)?\s*(\d+(?:\.\d+)*)\s*$")


def _vt(v: str) -> tuple[int, ...]:
    out = []
    for p in v.split("+")[0].split("."):
        m = re.match(r"\d+", p)
        if not m:
            break
        out.append(int(m.group()))
    return tuple(out)


def parse_range(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """">=2.11,<2.12" -> [(">=", (2, 11)), ("<", (2, 12))]; "*" -> [] (any version)."""
    spec = str(spec).strip()
    if spec in ("*", ""):
        return []
    clauses = []
    for part in spec.split(","):
        m = _CLAUSE.match(part)
        if not m:
            raise ValueError(f"bad version clause {part!r} in {spec!r} (use e.g. '>=2.11,<2.12' or '*')")
        clauses.append((m.group(1) or "==", _vt(m.group(2))))
    return clauses


def version_in(version: str | None, spec: str) -> bool:
    clauses = parse_range(spec)
    if not clauses:
        return True
    if version is None:
        return False
    v = _vt(version)
    for op, ref in clauses:
        if op == "==":  # "==2.11" matches 2.11.x
            if v[:len(ref)] != ref:
                return False
            continue
        n = max(len(v), len(ref))
        a, b = v + (0,) * (n - len(v)), ref + (0,) * (n - len(ref))
        if not {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]:
            return False
    return True


# --- Values --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Entry:
    """One measured winner: the key (format, act, n, k, m_bucket) and what was measured."""

    format: Format
    act: Act
    n: int
    k: int
    m_bucket: int
    impl: str
    config: Mapping[str, Any]
    source_hash: str
    us: float
    error: float
    date: str
    pct_copy_bw: float | None = None
    tflops: float | None = None
    note: str = ""

    @property
    def key(self) -> tuple[Format, Act, int, int, int]:
        return (self.format, self.act, self.n, self.k, self.m_bucket)

    def to_yaml(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": self.format.value, "act": self.act.value, "n": self.n, "k": self.k,
                             "m_bucket": self.m_bucket, "impl": self.impl, "config": dict(self.config),
                             "source_hash": self.source_hash, "us": self.us, "error": self.error,
                             "date": self.date}
        for f in ("pct_copy_bw", "tflops"):
            if getattr(self, f) is not None:
                d[f] = getattr(self, f)
        if self.note:
            d["note"] = self.note
        return d


@dataclasses.dataclass(frozen=True)
class Table:
    """A parsed table. `device_name` None makes it an arch table (any device of `arch`)."""

    path: str
    arch: str
    device_name: str | None
    torch_range: str
    triton_range: str
    entries: tuple[Entry, ...]
    generated_by: str = ""
    created: str = ""
    layout: str = ROW_MAJOR  # WEIGHT_LAYOUTS

    @property
    def kind(self) -> str:
        return "arch" if self.device_name is None else "device"

    def mismatch(self, target: Target) -> str | None:
        """None when this table applies to `target`, else why not."""
        if self.arch != target.arch:
            return f"arch {self.arch} != target {target.arch}"
        if self.device_name is not None and self.device_name != target.device_name:
            return f"device {self.device_name!r} != target {target.device_name!r}"
        if not version_in(target.torch_version, self.torch_range):
            return f"torch {target.torch_version} outside {self.torch_range!r}"
        if not version_in(target.triton_version, self.triton_range):
            return f"triton {target.triton_version} outside {self.triton_range!r}"
        return None

    def index(self) -> dict[tuple, tuple[int, Entry]]:
        return {e.key: (i, e) for i, e in enumerate(self.entries)}

    def to_yaml(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "kind": KIND,
            "device": {"name": self.device_name, "arch": self.arch},
            "versions": {"torch": self.torch_range, "triton": self.triton_range},
        }
        if self.generated_by:
            d["generated_by"] = self.generated_by
        if self.created:
            d["created"] = self.created
        if self.layout:
            d["weight_layout"] = self.layout
        d["entries"] = [e.to_yaml() for e in sorted(self.entries, key=_sort_key)]
        return d


def _sort_key(e: Entry) -> tuple:
    return (e.format.value, e.act.value, e.n, e.k, e.m_bucket)


# --- Parsing and validation ----------------------------------------------------------------------
def _err(path: str, where: str, msg: str) -> TableError:
    return TableError(f"tuning table {path}: {where}: {msg}")


def _num(path: str, where: str, d: Mapping, key: str, typ: type, *, positive: bool = False,
         optional: bool = False) -> Any:
    if key not in d or d[key] is None:
        if optional:
            return None
        raise _err(path, where, f"missing {key!r}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float) if typ is float else int):
        raise _err(path, where, f"{key!r} must be {'a number' if typ is float else 'an integer'}, got {v!r}")
    if positive and not v > 0:
        raise _err(path, where, f"{key!r} must be > 0, got {v!r}")
    if typ is float and v != v:
        raise _err(path, where, f"{key!r} is NaN")
    return typ(v)


def _parse_entry(path: str, i: int, e: Any) -> Entry:
    where = f"entry #{i}"
    if not isinstance(e, Mapping):
        raise _err(path, where, f"must be a mapping, got {type(e).__name__}")
    desc = "/".join(str(e.get(k, "?")) for k in ("format", "act", "n", "k", "m_bucket"))
    where = f"entry #{i} ({desc})"
    unknown = set(e) - set(_ENTRY_REQUIRED) - set(_ENTRY_OPTIONAL)
    if unknown:
        raise _err(path, where, f"unknown keys {sorted(unknown)}")
    for k in _ENTRY_REQUIRED:
        if k not in e:
            raise _err(path, where, f"missing {k!r}")
    try:
        fmt, act = Format.parse(e["format"]), Act.parse(e["act"])
    except Exception as ex:
        raise _err(path, where, str(ex)) from None
    n = _num(path, where, e, "n", int, positive=True)
    k = _num(path, where, e, "k", int, positive=True)
    mb = _num(path, where, e, "m_bucket", int, positive=True)
    if mb not in M_BUCKETS:
        raise _err(path, where, f"m_bucket {mb} is not one of {list(M_BUCKETS)}")
    impl = e["impl"]
    if not isinstance(impl, str) or "." not in impl:
        raise _err(path, where, f"'impl' must be a candidate id '<backend>.<kernel>', got {impl!r}")
    cfg = e["config"]
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, Mapping) or not all(isinstance(x, str) for x in cfg):
        raise _err(path, where, f"'config' must be a mapping of field names, got {cfg!r}")
    for name, v in cfg.items():
        if not isinstance(v, (int, float, bool, str)):
            raise _err(path, where, f"config field {name!r} must be a scalar, got {v!r}")
    sh = e["source_hash"]
    if not isinstance(sh, str):
        raise _err(path, where, f"'source_hash' must be a string, got {sh!r}")
    us = _num(path, where, e, "us", float, positive=True)
    error = _num(path, where, e, "error", float)
    if error < 0:
        raise _err(path, where, f"'error' must be >= 0, got {error}")
    date = e["date"]
    if isinstance(date, (datetime.date, datetime.datetime)):
        date = date.isoformat()
    if not isinstance(date, str):
        raise _err(path, where, f"'date' must be an ISO date string, got {date!r}")
    return Entry(fmt, act, n, k, mb, impl, dict(cfg), sh, us, error, date,
                 _num(path, where, e, "pct_copy_bw", float, optional=True),
                 _num(path, where, e, "tflops", float, optional=True), str(e.get("note", "") or ""))


def parse_table(data: Any, path: str) -> Table:
    """Validate a loaded YAML document; every problem is a TableError naming the file and the entry."""
    if not isinstance(data, Mapping):
        raise _err(path, "top level", f"must be a mapping, got {type(data).__name__}")
    for k in _TOP_REQUIRED:
        if k not in data:
            raise _err(path, "top level", f"missing {k!r}")
    unknown = set(data) - set(_TOP_REQUIRED) - set(_TOP_OPTIONAL)
    if unknown:
        raise _err(path, "top level", f"unknown keys {sorted(unknown)}")
    if data["schema_version"] != SCHEMA_VERSION:
        raise _err(path, "schema_version",
                   f"is {data['schema_version']!r}, this version of fp8dispatch reads {SCHEMA_VERSION}; "
                   "re-run tools/autotune or upgrade fp8dispatch")
    if data["kind"] != KIND:
        raise _err(path, "kind", f"is {data['kind']!r}, expected {KIND!r}")
    dev = data["device"]
    if not isinstance(dev, Mapping) or not isinstance(dev.get("arch"), str) or set(dev) - {"name", "arch"}:
        raise _err(path, "device", "must be a mapping {name: <device name or null>, arch: <e.g. sm_90>}")
    name = dev.get("name")
    if name is not None and not isinstance(name, str):
        raise _err(path, "device.name", f"must be a string or null, got {name!r}")
    ver = data["versions"]
    if not isinstance(ver, Mapping) or set(ver) != {"torch", "triton"}:
        raise _err(path, "versions", "must be a mapping {torch: <range>, triton: <range>}")
    for lib in ("torch", "triton"):
        try:
            parse_range(str(ver[lib]))
        except ValueError as ex:
            raise _err(path, f"versions.{lib}", str(ex)) from None
    layout = data.get("weight_layout", ROW_MAJOR) or ROW_MAJOR
    if layout not in WEIGHT_LAYOUTS:
        raise _err(path, "weight_layout", f"is {layout!r}; known: {[v for v in WEIGHT_LAYOUTS if v]} (absent for the "
                   "row-major codes)")
    raw = data["entries"] or []
    if not isinstance(raw, list):
        raise _err(path, "entries", "must be a list")
    entries = tuple(_parse_entry(path, i, e) for i, e in enumerate(raw))
    seen: dict[tuple, int] = {}
    for i, e in enumerate(entries):
        if e.key in seen:
            raise _err(path, f"entry #{i}", f"duplicate key {_key_str(e.key)} (also entry #{seen[e.key]})")
        seen[e.key] = i
    return Table(path, dev["arch"], name, str(ver["torch"]), str(ver["triton"]), entries,
                 str(data.get("generated_by", "") or ""), str(data.get("created", "") or ""), layout)


def _key_str(key: tuple) -> str:
    fmt, act, n, k, mb = key
    return f"{fmt}/{act} N={n} K={k} M-bucket={mb}"


def load_table(path: "str | os.PathLike") -> Table:
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as ex:
        raise _err(path, "YAML", f"not parseable: {ex}") from None
    except OSError as ex:
        raise TableError(f"tuning table {path}: cannot read: {ex}") from None
    return parse_table(data, path)


# --- Writer API (tools/autotune) -----------------------------------------------------------------
def new_table(target: Target, *, device_specific: bool = True, torch_range: str | None = None,
              triton_range: str | None = None, generated_by: str = "", path: str = "",
              layout: str = ROW_MAJOR) -> Table:
    """An empty table for `target`, of entries measured on `layout` (WEIGHT_LAYOUTS). Default version ranges: the
    target's torch and triton minor versions."""
    if layout not in WEIGHT_LAYOUTS:
        raise TableError(f"weight layout {layout!r} is not one of {list(WEIGHT_LAYOUTS)}")
    def minor_range(v: str | None) -> str:
        if not v:
            return "*"
        t = _vt(v)
        if len(t) < 2:
            return "*"
        return f">={t[0]}.{t[1]},<{t[0]}.{t[1] + 1}"

    return Table(path, target.arch, target.device_name if device_specific else None,
                 torch_range or minor_range(target.torch_version),
                 triton_range or minor_range(target.triton_version), (), generated_by,
                 datetime.date.today().isoformat(), layout)


def merge(table: Table, entries: Iterable[Entry]) -> Table:
    """New entries replace existing ones with the same key; others are kept."""
    by_key = {e.key: e for e in table.entries}
    for e in entries:
        by_key[e.key] = e
    return dataclasses.replace(table, entries=tuple(sorted(by_key.values(), key=_sort_key)))


def save_table(table: Table, path: "str | os.PathLike | None" = None) -> pathlib.Path:
    """Validate and write atomically (temp file + rename), so an interrupted autotune never leaves half a file."""
    out = pathlib.Path(path or table.path)
    if not str(out):
        raise TableError("save_table: no path given and the table has none")
    data = table.to_yaml()
    parse_table(data, str(out))  # never write what we could not read back
    with atomic_open(out, "w", encoding="utf-8") as f:
        f.write("# fp8dispatch tuning table: schema in tuning_db/README.md. Written by dispatch.tables.save_table.\n")
        yaml.safe_dump(data, f, sort_keys=False, default_flow_style=None, width=120)
    return out


def make_entry(fmt: "Format | str", act: "Act | str", n: int, k: int, m_bucket: int, impl: str,
               config: Mapping[str, Any], source_hash: str, us: float, error: float, *,
               pct_copy_bw: float | None = None, tflops: float | None = None, note: str = "",
               date: str | None = None) -> Entry:
    """Build a validated entry (the same checks as loading)."""
    d = {"format": str(Format.parse(fmt)), "act": str(Act.parse(act)), "n": n, "k": k, "m_bucket": m_bucket,
         "impl": impl, "config": dict(config), "source_hash": source_hash, "us": us, "error": error,
         "date": date or datetime.date.today().isoformat()}
    if pct_copy_bw is not None:
        d["pct_copy_bw"] = pct_copy_bw
    if tflops is not None:
        d["tflops"] = tflops
    if note:
        d["note"] = note
    return _parse_entry("<new entry>", 0, d)


# --- The chain --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tier:
    name: str  # "overlay" | "device" | "arch"
    table: Table


@dataclasses.dataclass(frozen=True)
class TableSet:
    """The tables that apply to one target, in lookup order, plus the ones skipped and why."""

    tiers: tuple[Tier, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason)

    def exact(self, key: tuple, layout: str = ROW_MAJOR) -> list[tuple[Tier, int, Entry]]:
        """Entries of `key` in the tables measured on `layout`, in lookup order."""
        out = []
        for t in self.tiers:
            if t.table.layout != layout:
                continue
            for i, e in enumerate(t.table.entries):
                if e.key == key:
                    out.append((t, i, e))
        return out

    def same_kind(self, fmt: Format, act: Act, layout: str = ROW_MAJOR) -> list[tuple[Tier, int, Entry]]:
        return [(t, i, e) for t in self.tiers if t.table.layout == layout for i, e in enumerate(t.table.entries)
                if e.format is fmt and e.act is act]


EMPTY = TableSet()


def _tables_in(d: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in d.glob("*.yaml") if p.is_file()) if d.is_dir() else []


def build_table_set(target: Target, *, overlay_dir: "str | os.PathLike | None" = None,
                    shipped: Sequence["str | os.PathLike"] | None = None) -> TableSet:
    """Load every table, keep those that apply to `target` (overlay first, then device, then arch tables).

    A table that does not parse raises TableError (a corrupt file is never silently ignored); one for another
    device/arch/version is skipped with its reason.
    """
    if shipped is None:
        import tuning_db

        shipped = tuning_db.table_paths()
    tiers: list[Tier] = []
    skipped: list[tuple[str, str]] = []
    if overlay_dir:
        od = pathlib.Path(overlay_dir)
        if not od.is_dir():
            skipped.append((str(od), f"{OVERLAY_ENV} is not a directory"))
        for p in _tables_in(od):
            t = load_table(p)
            why = t.mismatch(target)
            if why:
                skipped.append((str(p), why))
            else:
                tiers.append(Tier("overlay", t))
    device, arch = [], []
    for p in shipped:
        t = load_table(p)
        why = t.mismatch(target)
        if why:
            skipped.append((str(p), why))
        else:
            (device if t.kind == "device" else arch).append(Tier(t.kind, t))
    return TableSet(tuple(tiers + device + arch), tuple(skipped))


_sets: dict[tuple, TableSet] = {}
_sets_lock = threading.Lock()


def tables_for(target: Target) -> TableSet:
    """Cached `build_table_set` for a target and the current overlay directory."""
    overlay = os.environ.get(OVERLAY_ENV) or None
    key = (target, overlay)
    ts = _sets.get(key)
    if ts is None:
        with _sets_lock:
            ts = _sets.get(key)
            if ts is None:
                ts = build_table_set(target, overlay_dir=overlay)
                for path, why in ts.skipped:
                    log.info("tuning table %s does not apply to %s: %s", path, target.arch, why)
                _sets[key] = ts
    return ts


def reload_tables() -> None:
    """Forget loaded tables (after autotune wrote new ones); cached plans are invalidated too."""
    from . import registry

    with _sets_lock:
        _sets.clear()
    registry.bump_generation()
