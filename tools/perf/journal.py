"""The append-only JSONL log of every autotune measurement: what makes a run resumable and auditable.

Each line is one record. A "start" line is written (and flushed to disk) before a candidate runs, a
"result" line after; a start without a result means the process died inside that candidate. The
supervisor (tools/autotune.py) then records it as failed, so a crashing kernel is skipped on restart
instead of crashing the run again. Results are keyed by problem, candidate id, config and the candidate's
source hash: a changed kernel source is measured again, an unchanged one is never measured twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import threading
import time
from typing import Any, Iterator, Mapping


def config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True)
class MeasureKey:
    fmt: str
    act: str
    n: int
    k: int
    m: int
    impl: str
    config: str  # config_key(...)
    source_hash: str
    stage: str  # "quick" (verify + short timing) | "final" (re-timing of the top few)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MeasureKey":
        return cls(str(d["fmt"]), str(d["act"]), int(d["n"]), int(d["k"]), int(d["m"]), str(d["impl"]),
                   str(d["config"]), str(d["source_hash"]), str(d["stage"]))


class Journal:
    """Results by key, backed by a JSONL file (None: in memory only)."""

    def __init__(self, path: "str | os.PathLike | None"):
        self.path = pathlib.Path(path) if path else None
        self.results: dict[MeasureKey, dict[str, Any]] = {}
        self.dangling: dict[MeasureKey, dict[str, Any]] = {}  # started, never finished
        self._lock = threading.Lock()
        if self.path and self.path.exists():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                    key = MeasureKey.from_dict(rec["key"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a kill: ignore it, the measurement is simply redone
                if rec.get("kind") == "start":
                    self.dangling[key] = rec
                elif rec.get("kind") == "result":
                    self.results[key] = rec
                    self.dangling.pop(key, None)

    def _append(self, rec: dict[str, Any]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())  # the next candidate may kill the process; this line must survive it

    def get(self, key: MeasureKey) -> dict[str, Any] | None:
        return self.results.get(key)

    def start(self, key: MeasureKey) -> None:
        with self._lock:
            rec = {"kind": "start", "key": key.to_dict(), "time": time.time(), "pid": os.getpid()}
            self.dangling[key] = rec
            self._append(rec)

    def finish(self, key: MeasureKey, **fields: Any) -> dict[str, Any]:
        with self._lock:
            rec = {"kind": "result", "key": key.to_dict(), "time": time.time(), **fields}
            self.results[key] = rec
            self.dangling.pop(key, None)
            self._append(rec)
            return rec

    def fail_dangling(self, why: str, pid: int | None = None) -> list[MeasureKey]:
        """Record started-but-unfinished measurements (of process `pid`, or all) as failed, after a crash."""
        keys = [k for k, rec in self.dangling.items() if pid is None or rec.get("pid") == pid]
        for key in keys:
            self.finish(key, status="failed", error=why)
        return keys

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self.results.values()))
