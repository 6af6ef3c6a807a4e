"""Typed errors for users: each says what failed, why, and how to fix it."""

from __future__ import annotations


class FP8DispatchError(Exception):
    """Base class of every error this library raises on purpose."""


class FormatError(FP8DispatchError, ValueError):
    """A weight, scale or activation does not match the layout its format defines."""


class UnsupportedError(FP8DispatchError, NotImplementedError):
    """The requested combination (format, act, device, shape) has no implementation here."""


class NoCandidateError(UnsupportedError):
    """Every implementation was rejected for a problem; the message lists each with its reason."""


class TableError(FP8DispatchError, ValueError):
    """A tuning table is corrupt or does not match its schema; the message names the file and entry."""


class BackendUnavailable(FP8DispatchError, RuntimeError):
    """A kernel backend cannot run here (missing toolkit or device); the message says why."""


class CompileError(FP8DispatchError, RuntimeError):
    """A runtime compilation failed; the message holds the compiler's full log."""
