"""Atomic file writes: the one implementation behind the tuning tables (dispatch.tables.save_table) and the
compiled-kernel caches (kernels_cuda.compiler, kernels_hip.compiler).

The content goes to a temporary file in the destination's folder, which is then renamed over the
destination (os.replace: atomic on POSIX within one file system). A reader therefore sees the old file or
the whole new one, never a partial write -- an interrupted autotune or two processes compiling the same
kernel at once cannot leave half a table or half a binary behind. On any failure the temporary file is
removed and the error propagates.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_open(path: "str | os.PathLike", mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """A file opened for writing (`mode` "wb" or "w") that replaces `path` only when the block completes;
    creates the parent folders."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=str(out.parent))
    try:
        with os.fdopen(fd, mode) if encoding is None else os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write(path: "str | os.PathLike", data: bytes) -> None:
    """Write `data` to `path` atomically (see the module docstring)."""
    with atomic_open(path, "wb") as f:
        f.write(data)
