"""Which backends exist, and their candidates: a static backend -> module map, imported lazily.

A backend whose module fails to import (missing toolkit, missing package) is unavailable with the reason;
every other backend keeps working. Nothing is imported until the first selection needs candidates.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import pathlib
import threading
from typing import Callable, Iterator, Sequence

from .problem import Candidate
from .target import Target

# Priority order matters only for ties in the heuristic and for the order explain() lists candidates.
BACKEND_MODULES: dict[str, str] = {
    "cuda": "kernels_cuda.candidates",
    "hip": "kernels_hip.candidates",
    "triton": "kernels_triton.candidates",
    "torch": "dispatch.torch_candidates",
    "pad": "dispatch.pad_k",  # K % 16 != 0 on GPUs: pads and dispatches again (its inner plan picks a backend above)
}

_REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
_lock = threading.Lock()
_loaded: "_Registry | None" = None
_override: "_Registry | None" = None
# Bumped whenever the candidate set or the tables change; part of every plan-cache key, so a cached
# plan never outlives the inputs it was chosen from.
generation = 0


class _Registry:
    def __init__(self, candidates: Sequence[Candidate], unavailable: dict[str, str],
                 validated_archs: "dict[str, frozenset[str]] | None" = None):
        self.candidates = tuple(candidates)
        self.unavailable = dict(unavailable)
        self.by_id = {c.id: c for c in self.candidates}
        # backend -> archs whose hardware ran its kernels; a backend absent here is validated everywhere
        self.validated_archs = dict(validated_archs or {})


def _load() -> _Registry:
    cands: list[Candidate] = []
    unavailable: dict[str, str] = {}
    seen: set[str] = set()
    validated_archs: dict[str, frozenset[str]] = {}
    for backend, module in BACKEND_MODULES.items():
        try:
            mod = importlib.import_module(module)
            found = list(mod.candidates())
        except Exception as e:  # a broken optional backend must not break the others; keep the reason
            unavailable[backend] = f"import of {module} failed: {type(e).__name__}: {e}"
            continue
        # A backend declares where its kernels have run on real hardware: HARDWARE_VALIDATED = False (nowhere),
        # True (everywhere it claims support), or a collection of arch names ({"sm_90"}).
        flag = getattr(mod, "HARDWARE_VALIDATED", True)
        if flag is not True:
            validated_archs[backend] = frozenset(flag) if flag else frozenset()
        for c in found:
            if c.id in seen:
                raise AssertionError(f"duplicate candidate id {c.id!r} (from {module})")
            seen.add(c.id)
            cands.append(c)
    return _Registry(cands, unavailable, validated_archs)


def _current() -> _Registry:
    global _loaded
    if _override is not None:
        return _override
    reg = _loaded
    if reg is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
            reg = _loaded
    return reg


def candidates() -> tuple[Candidate, ...]:
    """Every candidate of every importable backend, in priority order."""
    return _current().candidates


def unavailable_backends() -> dict[str, str]:
    """backend -> why its candidates could not be loaded."""
    return dict(_current().unavailable)


def hardware_validated(candidate: Candidate, target: Target | None = None) -> bool:
    """False when the candidate (class attribute `hardware_validated = False`) or its backend module
    (`HARDWARE_VALIDATED`) declares that it has not yet run on real hardware of `target`'s arch (without a
    target: on any hardware)."""
    if not getattr(candidate, "hardware_validated", True):
        return False
    archs = _current().validated_archs.get(candidate.backend)
    if archs is None:
        return True
    if target is None or target.is_cpu:
        return bool(archs)
    return target.arch in archs


def get(candidate_id: str) -> Candidate | None:
    return _current().by_id.get(candidate_id)


def bump_generation() -> None:
    """Invalidate every cached plan (called when tables or the candidate set change)."""
    global generation
    with _lock:
        generation += 1


def reload() -> None:
    """Re-import the backends on next use (after installing a toolkit, for example)."""
    global _loaded
    with _lock:
        _loaded = None
    bump_generation()


@contextlib.contextmanager
def use_candidates(cands: Sequence[Candidate], unavailable: dict[str, str] | None = None,
                   unvalidated_backends: Sequence[str] = ()) -> Iterator[None]:
    """Replace the candidate set (tests, experiments); restores the previous set on exit. Process-wide."""
    global _override
    prev = _override
    _override = _Registry(cands, unavailable or {}, {b: frozenset() for b in unvalidated_backends})
    bump_generation()
    try:
        yield
    finally:
        _override = prev
        bump_generation()


_hash_cache: dict[str, str] = {}


def source_hash(candidate: Candidate) -> str:
    """Content hash of a candidate's `source_files` (tuned entries record it; a mismatch means stale).

    Relative paths are relative to the repository root (the parent of the `dispatch` package).
    A candidate without source files hashes to "" (its entries are never considered stale).
    """
    key = f"{type(candidate).__module__}.{type(candidate).__qualname__}:{candidate.id}"
    h = _hash_cache.get(key)
    if h is None:
        h = sources_digest(tuple(candidate.source_files), read_repo_file)
        _hash_cache[key] = h
    return h


def read_repo_file(path: str) -> bytes | None:
    """A file of this checkout by its path in `source_files` (relative to the repository root), None if missing."""
    p = pathlib.Path(path)
    try:
        return (p if p.is_absolute() else _REPO_ROOT / p).read_bytes()
    except OSError:
        return None


def sources_digest(files: Sequence[str], read: Callable[[str], "bytes | None"]) -> str:
    """The source hash of `files` as `read` returns them (None: missing); "" for no files. tools.restamp_table
    computes it over another revision's files with the same function."""
    if not files:
        return ""
    digest = hashlib.sha256()
    for f in files:
        data = read(f)
        digest.update(str(f).encode() + b"\0")
        digest.update(b"<missing>" if data is None else data)
    return "sha256:" + digest.hexdigest()[:16]
