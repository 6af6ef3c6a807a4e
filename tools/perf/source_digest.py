"""One digest of the code a measurement ran: sha256 over the relative path and bytes of every source file of the
package directories (Python, CUDA/HIP sources and headers, shell scripts).

Why not the git commit alone: the GPU machine receives a copy of the working tree whose git metadata can lag the
tree (session 6's reports read an older commit plus "dirty"), so a commit id there does not name the code. The
digest depends only on the files, so `python -m tools.perf.source_digest` on a checkout says whether it is the code
a report was measured on.
"""

from __future__ import annotations

import hashlib
import pathlib
import sys

DIRS = ("dispatch", "kernels_cuda", "kernels_triton", "kernels_hip", "tools")
SUFFIXES = {".py", ".cu", ".cuh", ".h", ".hip", ".sh"}
ROOT = pathlib.Path(__file__).resolve().parents[2]


def source_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    out = []
    for d in DIRS:
        base = root / d
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                    and "__pycache__" not in p.parts and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def source_digest(root: pathlib.Path = ROOT) -> str:
    h = hashlib.sha256()
    for p in source_files(root):
        rel = p.relative_to(root).as_posix().encode()
        data = p.read_bytes()
        h.update(len(rel).to_bytes(4, "little") + rel + len(data).to_bytes(8, "little") + data)
    return "sha256:" + h.hexdigest()[:16]


if __name__ == "__main__":
    print(source_digest(pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
