"""Every module a candidate's hashed Python files import from the kernel packages is hashed by that candidate too.

A tuning-table entry records the hash of its candidate's `source_files`; a module the launch path imports but the list
misses can change what runs without staling the entry (session 29 found `kernels_triton/_fast_launch.py`,
`kernels_cuda/_kinds.py` and others missing, and added them: `tools.restamp_table --newly-hashed`). Direct imports of
each hashed file, inside functions too; the exceptions below say why each cannot change a measurement.
"""

from __future__ import annotations

import ast
import pathlib

from conftest import REPO
from dispatch import registry

PACKAGES = ("kernels_triton", "kernels_cuda", "kernels_hip")

# (candidate id, imported file) -> why it need not be hashed
NOT_HASHED = {
    ("triton.w8a16_gemm", "kernels_triton/_gemv.py"): "imported for _sm_count only (a device property)",
    ("triton.w8a8_gemm", "kernels_triton/_gemv.py"): "imported for _sm_count only (a device property)",
}
# candidates whose hashed file is shared with others whose imports it holds (dispatch/torch_candidates.py: the
# kernels_triton quantizer serves the _scaled_mm candidates, which hash it)
SHARED_FILE_IMPORTS = {"torch.dequant_mm", "torch.reference"}


def _imports(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text())
    pkg = str(pathlib.PurePosixPath(path).parent).replace("/", ".")
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                mod = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES and (REPO / (name.replace(".", "/") + ".py")).exists():
                out.add(name.replace(".", "/") + ".py")
    return out


def test_hashed_files_cover_their_imports():
    missing = []
    for c in registry.candidates():
        if c.id in SHARED_FILE_IMPORTS:
            continue
        hashed = set(c.source_files)
        for f in c.source_files:
            if f.endswith(".py"):
                missing += [(c.id, f, g) for g in sorted(_imports(f) - hashed) if (c.id, g) not in NOT_HASHED]
    assert not missing, "hash these too (and re-tune or re-stamp with --newly-hashed): " + "; ".join(
        f"{cid}: {f} imports {g}" for cid, f, g in missing)


def test_the_exceptions_are_still_imports():
    """An exception that no longer applies goes."""
    by_id = {c.id: c for c in registry.candidates()}
    for (cid, g) in NOT_HASHED:
        assert any(g in _imports(f) for f in by_id[cid].source_files if f.endswith(".py")), (cid, g)
