"""Forcing and denying implementations: a context manager (context-local) and two environment variables.

    with dispatch.force("triton"):            # only candidates of the Triton backend
    with dispatch.force("torch.scaled_mm_rowwise"):   # exactly one candidate
    with dispatch.force(deny=["cuda"]):       # anything but the CUDA backend
    FP8DISPATCH_FORCE=triton   FP8DISPATCH_DENY=cuda,torch.dequant_mm   (comma-separated)

A name is a backend ("triton") or a candidate id ("triton.w8a16_splitk"); a trailing "*" matches a prefix.
The context manager overrides FP8DISPATCH_FORCE inside its block; denials from both add up. The environment is
read once, at the first dispatch (the hot path cannot afford os.environ lookups); `reload_env()` re-reads it.
The state lives in a `contextvars.ContextVar`, so threads and asyncio tasks do not see each other's forcing.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import fnmatch
import os
from typing import Iterable, Iterator

FORCE_ENV = "FP8DISPATCH_FORCE"
DENY_ENV = "FP8DISPATCH_DENY"


@dataclasses.dataclass(frozen=True, eq=False)
class Policy:
    """Which candidates may run. Part of the plan-cache key: instances are interned (`policy(...)`), so
    identity hashing is both fast on the hot path and equal for equal policies."""

    force: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    origin: str = ""  # "force()" / "FP8DISPATCH_FORCE" etc., for messages

    @staticmethod
    def matches(name: str, candidate_id: str, backend: str) -> bool:
        if "*" in name or "?" in name:
            return fnmatch.fnmatchcase(candidate_id, name)
        return name == backend or name == candidate_id

    def rejects(self, candidate_id: str, backend: str) -> str | None:
        """None if allowed, else the reason."""
        for d in self.deny:
            if self.matches(d, candidate_id, backend):
                return f"denied by {self.origin or 'policy'} (deny={d!r})"
        if self.force and not any(self.matches(f, candidate_id, backend) for f in self.force):
            return f"not forced ({self.origin or 'policy'} forces {', '.join(self.force)})"
        return None

    @property
    def active(self) -> bool:
        return bool(self.force or self.deny)


_interned: dict[tuple, Policy] = {}


def policy(force: tuple[str, ...] = (), deny: tuple[str, ...] = (), origin: str = "") -> Policy:
    """The one Policy instance for these values."""
    key = (tuple(force), tuple(deny), origin)
    p = _interned.get(key)
    if p is None:
        p = _interned.setdefault(key, Policy(*key))
    return p


_NO_POLICY = policy()
_ctx: contextvars.ContextVar[Policy | None] = contextvars.ContextVar("fp8dispatch_force", default=None)


def _split(s: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in s.split(",") if p.strip())


_env_snapshot: Policy | None = None


def _env_policy() -> Policy:
    # Read once per process (os.environ lookups cost ~1 us each, too much for the hot path);
    # reload_env() re-reads after the variables change.
    global _env_snapshot
    p = _env_snapshot
    if p is None:
        f, d = os.environ.get(FORCE_ENV, ""), os.environ.get(DENY_ENV, "")
        if not f and not d:
            p = _NO_POLICY
        else:
            origin = " and ".join(n for n, v in ((FORCE_ENV, f), (DENY_ENV, d)) if v)
            p = policy(_split(f), _split(d), origin)
        _env_snapshot = p
    return p


def reload_env() -> Policy:
    """Re-read FP8DISPATCH_FORCE / FP8DISPATCH_DENY (they are read once, at the first dispatch)."""
    global _env_snapshot
    _env_snapshot = None
    return _env_policy()


def current() -> Policy:
    """The policy in effect here: the innermost force() block, combined with the environment."""
    p = _ctx.get()
    return _env_policy() if p is None else p


@contextlib.contextmanager
def force(*names: str, deny: Iterable[str] = ()) -> Iterator[Policy]:
    """Restrict dispatch to `names` (backends or candidate ids) and/or exclude `deny` within the block.

    Nested blocks: the inner force list replaces the outer one; deny lists accumulate.
    """
    outer = current()
    deny_t = tuple(deny)
    for n in names + deny_t:
        if not isinstance(n, str) or not n:
            raise TypeError("force()/deny names must be non-empty strings (backend or candidate id)")
    new = policy(tuple(names) if names else outer.force, outer.deny + deny_t,
                 "dispatch.force()" if names or deny_t else outer.origin)
    token = _ctx.set(new)
    try:
        yield new
    finally:
        _ctx.reset(token)
