"""Every `from <our module> import name` in the project names something that module defines, the imports inside
functions included: ruff sees an undefined name, not a lazy import of a name that moved away. Session 32 moved the
activation quantizer's config out of kernels_triton/configs.py and tools/perf/probe_act_quant.py kept importing it
from there inside a function (found in session 33, when the tool was next needed on the GPU). Static (ast), so it
checks modules that import triton, cupy or a GPU without importing them."""

from __future__ import annotations

import ast
import pathlib

from conftest import REPO

PACKAGES = ("dispatch", "kernels_triton", "kernels_cuda", "kernels_hip", "tools", "tuning_db")


def _module_path(mod: str) -> pathlib.Path | None:
    base = REPO / mod.replace(".", "/")
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _defined(path: pathlib.Path) -> set[str]:
    """Names bound at module level (inside top-level if / try / with blocks too)."""
    out: set[str] = set()

    def visit(stmts):
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(s.name)
            elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                    out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in s.names)
            elif isinstance(s, (ast.If, ast.Try, ast.With)):
                visit(s.body)
                visit(getattr(s, "orelse", []))
                visit(getattr(s, "finalbody", []))
                for h in getattr(s, "handlers", []):
                    visit(h.body)
    visit(ast.parse(path.read_text()).body)
    return out


def _project_files() -> list[pathlib.Path]:
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    return sorted(files + list((REPO / "tests").glob("*.py")))


def _absolute(path: pathlib.Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = list(path.relative_to(REPO).with_suffix("").parts)[:-1]  # the file's package (__init__ too)
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def test_every_import_from_a_project_module_names_what_it_defines():
    missing = []
    defined: dict[pathlib.Path, set[str]] = {}
    for path in _project_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            mod = _absolute(path, node)
            if mod.split(".")[0] not in PACKAGES:
                continue
            target = _module_path(mod)
            if target is None:
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}: no module {mod}")
                continue
            names = defined.setdefault(target, _defined(target))
            for a in node.names:
                if a.name != "*" and a.name not in names and _module_path(f"{mod}.{a.name}") is None:
                    missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {mod} has no {a.name}")
    assert not missing, "\n".join(missing)


def test_the_check_sees_a_moved_name(tmp_path):
    """The check itself: a name the module does not bind is reported, one it binds inside `if` / `try` is not."""
    mod = tmp_path / "m.py"
    mod.write_text("import os\nif os.name:\n    A = 1\ntry:\n    from json import loads as B\nexcept ImportError:\n"
                   "    B = None\ndef f():\n    C = 2\n")
    names = _defined(mod)
    assert {"A", "B", "f", "os"} <= names and "C" not in names
