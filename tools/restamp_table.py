"""Carry tuning-table measurements over an edit of comments and docstrings only.

A table entry records the hash of the files its candidate hashes (`dispatch.registry.source_hash`). Any byte edit
makes it stale, a comment included: the dispatcher then ignores the measurement until a re-tune on the GPU. This
tool proves that an edit changed no code and re-stamps the entries it covers:

    python -m tools.restamp_table --base REV [--table tuning_db/nvidia_h200.yaml] [--dry-run]

REV is the git revision whose sources were measured. For each stale entry, the candidate's files at REV must hash
to the entry's recorded source_hash (so REV really is the measured code), and every one of them must be equivalent
at REV and in the checkout:
  .py          the same syntax tree once docstrings are removed (comments are not in it; neither are line numbers),
               or that tree less top-level functions / classes (and the import names only they used) that nothing
               left in the file mentions: code deleted or moved to another module, none changed,
  .cu / .cuh   the same lines once // and /* */ comments, leading and trailing blanks and empty lines are removed
               (string and character literals are kept as they are),
  other files  the same bytes.
Only then does the entry get the checkout's source hash. Every other stale entry is left as it was, with the reason.
A re-stamp is a claim about code, not a measurement: the note of each re-stamped entry says so and names REV.

    python -m tools.restamp_table --base REV --images-equal sm_90

adds a second rule for the CUDA candidates (compiled at run time, so their code IS the compiled image): a .cu / .cuh
difference, a header new since REV included, is accepted for a candidate when every kernel module of that candidate
that REV compiles for that arch (`tools.perf.precompile_cuda.variants`: every GEMV config, the quantizers, the
dequant kernels) compiles to a byte-identical image in a checkout of REV and in this one
(`tools.perf.cuda_image_digest`, NVRTC, no GPU). A new
policy hook or a helper moved to a header leaves the measured kernels' machine code as it was. Where only some of a
candidate's modules differ, and each of those serves known formats (the GEMVs' and the wgmma GEMM's modules are
compiled per weight scale layout or activation granularity: `module_formats`), the candidate's entries of the other
formats are accepted (session 31: an edit of the MX path changed the mxfp8 GEMV modules only). Only tables whose
device has that arch are re-stamped this way; their Python files must still pass the rules above.

    python -m tools.restamp_table --base REV --newly-hashed PATH [PATH ...]

is for a hashed list that missed a file the candidate's code already used at REV (session 29: the Triton launchers
imported kernels_triton/_fast_launch.py before the candidates hashed it): the entry's hash must be REV's over the list
without PATH, and PATH must be byte-identical at REV and now. The measured code is then exactly what the extended list
names.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
import pathlib
import re
import subprocess
from typing import Callable, Mapping, Sequence

from dispatch import registry, tables

Reader = Callable[[str], "bytes | None"]


# --- equivalence ----------------------------------------------------------------------------------------------
def _tree_without_docstrings(src: bytes) -> ast.Module:
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:]
    return tree


def _python_without_docstrings(src: bytes) -> str:
    return ast.dump(_tree_without_docstrings(src))


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _aliases(node: ast.ImportFrom, ordered: bool = False):
    names = [(x.name, x.asname) for x in node.names]
    return names if ordered else set(names)


def removed_unused_definitions(old: bytes, new: bytes) -> list[str] | None:
    """The names of the top-level definitions `new` lost, when that is its only code change: `new` is `old`
    (docstrings aside) less some top-level functions / classes, and less the names of `from ... import` lists that
    only they used, and nothing left in `new` mentions any of those names (as a name, an attribute or a string).
    Deleting code nothing calls (moving it to another module) changes none of the code that stays. None otherwise."""
    o, n = _tree_without_docstrings(old).body, _tree_without_docstrings(new).body
    removed: list[str] = []
    i = 0
    for stmt in n:
        while i < len(o) and ast.dump(o[i]) != ast.dump(stmt):
            a = o[i]
            if isinstance(a, _DEFS):
                removed.append(a.name)
            elif isinstance(a, ast.ImportFrom) and isinstance(stmt, ast.ImportFrom) and a.module == stmt.module \
                    and a.level == stmt.level and _aliases(stmt) < _aliases(a) \
                    and [x for x in _aliases(a, ordered=True) if x in _aliases(stmt)] == _aliases(stmt, ordered=True):
                removed += [x[1] or x[0] for x in _aliases(a, ordered=True) if x not in _aliases(stmt)]
                break  # stmt is this import, less some names
            else:
                return None
            i += 1
        if i == len(o):
            return None
        i += 1
    for a in o[i:]:
        if not isinstance(a, _DEFS):
            return None
        removed.append(a.name)
    used: set[str] = set()
    for node in ast.walk(ast.Module(body=n, type_ignores=[])):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.update(node.value.replace(".", " ").split())
    return removed if removed and not used & set(removed) else None


def strip_c_comments(src: str) -> str:
    """`src` (C, C++, CUDA) without its comments; string and character literals untouched; a block comment
    becomes one space (as the preprocessor does), a line comment ends at its newline."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            out.append(" ")
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _c_code_lines(src: bytes) -> list[str]:
    text = strip_c_comments(src.decode("utf-8", errors="surrogateescape"))
    return [re.sub(r"[ \t]+", " ", line.strip()) for line in text.splitlines() if line.strip()]


def _without_newly_hashed(src: bytes, paths: Sequence[str]) -> str:
    """The docstring-free tree of `src` with the string constants `paths` taken out of every tuple assigned to a
    `source_files` attribute or name: the code change that adding a file to a candidate's hashed list is."""
    tree = _tree_without_docstrings(src)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "source_files" for t in targets) and node.value is not None:
                for sub in ast.walk(node.value):
                    if isinstance(sub, ast.Tuple):
                        sub.elts = [e for e in sub.elts if not (isinstance(e, ast.Constant) and e.value in paths)]
    return ast.dump(tree)


def why_not_equivalent(path: str, old: bytes | None, new: bytes | None,
                       newly_hashed: Sequence[str] = ()) -> str | None:
    """None when `old` and `new` (one file at two revisions) hold the same code, else the reason. With `newly_hashed`,
    a Python file may also differ by those paths added to a `source_files` tuple (see restamp())."""
    if old is None or new is None:
        return f"{path}: {'missing at the base' if old is None else 'missing now'}"
    if old == new:
        return None
    suffix = pathlib.PurePath(path).suffix
    try:
        if suffix == ".py":
            same = _python_without_docstrings(old) == _python_without_docstrings(new) \
                or removed_unused_definitions(old, new) is not None \
                or bool(newly_hashed) and _python_without_docstrings(old) == _without_newly_hashed(new, newly_hashed)
        elif suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp", ".c"):
            same = _c_code_lines(old) == _c_code_lines(new)
        else:
            return f"{path}: changed (only .py and C/CUDA sources are compared beyond their bytes)"
    except (SyntaxError, ValueError) as e:
        return f"{path}: cannot be parsed ({e})"
    return None if same else f"{path}: code changed, not only comments or docstrings"


# --- re-stamping --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    restamped: list[tables.Entry]
    kept: list[tuple[tables.Entry, str]]  # still stale, why


_C_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".c")


def restamp(table: tables.Table, source_files: Mapping[str, Sequence[str]], base: Reader, now: Reader,
            base_name: str, images_equal: Sequence[str] = (),
            newly_hashed: Sequence[str] = (),
            images_differ_for: Mapping[str, frozenset[str]] | None = None) -> tuple[tables.Table, Outcome]:
    """`source_files`: candidate id -> the files it hashes. Entries current now are left alone. `images_equal`: the
    candidate ids whose compiled images were checked byte-identical at the base and now (their C/CUDA differences,
    and C/CUDA files new since the base, are accepted; the base hash is then over the files the base has).
    `newly_hashed`: files a candidate's list gained after the base although its code already used them there (a
    module its launchers imported but the list missed): the base hash is over the list without them, and each must
    be byte-identical at the base and now, so the measured code is the code the extended list names. The edit that
    adds them to a hashed file's `source_files` tuple is then accepted too (nothing else in that file may change).
    `images_differ_for`: candidate id -> the formats whose modules' images differ (every other module of it checked
    byte-identical): that candidate's entries of the other formats count as in `images_equal`."""
    out = Outcome([], [])
    differ_for = images_differ_for or {}
    # (impl, images checked equal for this entry) -> (base hash, why not, files gained)
    verdicts: dict[tuple[str, bool], tuple[str, str | None, list[str]]] = {}
    entries = []
    for e in table.entries:
        files = source_files.get(e.impl)
        if files is None:
            out.kept.append((e, f"no candidate {e.impl!r} in this checkout"))
            entries.append(e)
            continue
        current = registry.sources_digest(files, now)
        if e.source_hash == current:
            entries.append(e)
            continue
        by_image = e.impl in images_equal or (e.impl in differ_for and e.format.value not in differ_for[e.impl])
        if (e.impl, by_image) not in verdicts:  # git is asked only for candidates with stale entries
            checked = [f for f in files if not (by_image and f.endswith(_C_SUFFIXES))]
            reasons = [r for f in checked if (r := why_not_equivalent(f, base(f), now(f), newly_hashed))]
            hashed = [f for f in files if not (by_image and f.endswith(_C_SUFFIXES) and base(f) is None)]
            # Which of the newly hashed files this candidate's list gained (the others it hashed already): the subset
            # whose removal gives the entry's hash at the base. A sha256 match names the measured list exactly.
            maybe = [f for f in hashed if f in newly_hashed]
            gained: list[str] = []
            for r in range(len(maybe) + 1):
                hit = next((list(sub) for sub in itertools.combinations(maybe, r)
                            if registry.sources_digest([f for f in hashed if f not in sub], base) == e.source_hash),
                           None)
                if hit is not None:
                    gained = hit
                    break
            reasons += [f"{f}: newly hashed but {'missing at the base' if base(f) is None else 'changed since'}"
                        for f in gained if base(f) is None or base(f) != now(f)]
            verdicts[(e.impl, by_image)] = (registry.sources_digest([f for f in hashed if f not in gained], base),
                                            "; ".join(reasons) or None, gained)
        base_hash, why, gained = verdicts[(e.impl, by_image)]
        if e.source_hash != base_hash:
            out.kept.append((e, f"measured on {e.source_hash}, not on {base_name} ({base_hash})"))
            entries.append(e)
        elif why:
            out.kept.append((e, why))
            entries.append(e)
        else:
            note = f"{e.note}; " if e.note else ""
            removed = sorted({name for f in files if f.endswith(".py") and (a := base(f)) is not None
                              and (b := now(f)) is not None and a != b
                              and _python_without_docstrings(a) != _python_without_docstrings(b)
                              for name in removed_unused_definitions(a, b) or ()})
            what = "comments/docstrings changed only" if not removed else \
                f"comments/docstrings changed and unused definitions removed ({', '.join(removed)})"
            if by_image and any(base(f) != now(f) for f in files if f.endswith(_C_SUFFIXES)):
                what += (f"; kernel sources changed, every {table.arch} kernel image byte-identical" if e.impl in
                         images_equal else f"; kernel sources changed, every {table.arch} kernel image of "
                         f"{e.format.value} byte-identical (those of {', '.join(sorted(differ_for[e.impl]))} differ)")
            added = gained
            if added:
                what = (f"the hashed list gained {', '.join(added)}, byte-identical at {base_name} (the code used it "
                        f"there); otherwise {what}")
            e2 = dataclasses.replace(e, source_hash=current, note=f"{note}re-stamped from {base_name}: {what}")
            out.restamped.append(e2)
            entries.append(e2)
    return dataclasses.replace(table, entries=tuple(entries)), out


def git_reader(rev: str, repo: pathlib.Path) -> Reader:
    def read(path: str) -> bytes | None:
        r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True)
        return r.stdout if r.returncode == 0 else None
    return read


def image_digests(tree: pathlib.Path, arch: str) -> dict[str, str]:
    """{module key: image digest} of every CUDA kernel module `tree` compiles for `arch` (this checkout's
    tools/perf/cuda_image_digest.py, run on that tree's sources)."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import sys  # noqa: PLC0415

    here = pathlib.Path(__file__).resolve().parent / "perf" / "cuda_image_digest.py"
    env = dict(os.environ, PYTHONPATH=str(tree))
    r = subprocess.run([sys.executable, str(here), "--arch", arch], cwd=tree, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"restamp_table: compiling the kernels of {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


# The sources compiled once per weight scale layout (FP8D_CFG_SCALE) or W8A8 activation granularity (FP8D_CFG_ACTQ), whose
# launchers pass the weight's own: kernels_cuda/_launch.py (the GEMVs), _w8a8_fused.py, _w8a8_inline.py, _wgmma_gemm.py.
# (dequant.cu is not among them: the dequantize route runs fp8_row weights through the fp8_tensor module.)
_PER_FORMAT_SOURCES = ("gemv_w8a16.cu", "gemv_w8a8.cu", "gemm_w8a16_wgmma.cu")


def module_formats(key: str) -> frozenset[str] | None:
    """The formats (values) whose entries can load the module of an image-digest key ('<candidates>|<arch>:<source>:
    <defines>', tools.perf.cuda_image_digest.module_key); None where any of its candidates' formats can (the activation
    quantizer, the dequant kernels, the split-K reduction, a source not listed in _PER_FORMAT_SOURCES)."""
    from dispatch.formats import ACT_GRANULARITY  # noqa: PLC0415
    from kernels_cuda._kinds import ACTQ_CODE, SCALE_CODE  # noqa: PLC0415

    _arch, name, defines = key.split("|", 1)[1].split(":", 2)
    d = dict(kv.split("=", 1) for kv in defines.split(",") if kv)
    if name not in _PER_FORMAT_SOURCES:
        return None
    if "FP8D_CFG_ACTQ" in d:
        return frozenset(f.value for f, g in ACT_GRANULARITY.items() if str(ACTQ_CODE[g]) == d["FP8D_CFG_ACTQ"])
    if "FP8D_CFG_SCALE" in d:
        return frozenset(f.value for f, c in SCALE_CODE.items() if str(c) == d["FP8D_CFG_SCALE"])
    return None


def formats_differing(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """Candidate id -> the formats whose modules' images differ between two digest maps, for the candidates some but not
    all of whose modules differ, each differing one serving known formats (module_formats)."""
    touched: dict[str, set[str] | None] = {}
    for key in (k for k in old if new.get(k) != old[k]):
        fmts = module_formats(key)
        for c in key.split("|")[0].split(","):
            if c in touched and touched[c] is None:
                continue
            touched[c] = None if fmts is None else (touched.get(c) or set()) | fmts
    return {c: frozenset(f) for c, f in touched.items() if f is not None and c != "*"}


def images_verdict(repo: pathlib.Path, rev: str, arch: str
                   ) -> tuple[frozenset[str], str, dict[str, frozenset[str]]]:
    """(the candidate ids all of whose modules that `rev` compiles for `arch` compile byte-identically in the
    checkout, a summary, formats_differing for the others). A module of unknown candidates ("*") that differs
    disqualifies every candidate."""
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        wt = pathlib.Path(tmp) / "base"
        r = subprocess.run(["git", "worktree", "add", "--detach", str(wt), rev], cwd=repo, capture_output=True,
                           text=True)
        if r.returncode != 0:
            return frozenset(), f"cannot check out {rev}: {r.stderr.strip()}", {}
        try:
            old = image_digests(wt, arch)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=repo, capture_output=True)
    new = image_digests(repo, arch)
    if not old:
        return frozenset(), f"{rev} compiles no module for {arch}", {}
    owners = {c for key in old for c in key.split("|")[0].split(",")}
    differ = sorted(k for k in old if new.get(k) != old[k])
    hit = {c for key in differ for c in key.split("|")[0].split(",")}
    same = frozenset() if "*" in hit else frozenset(owners - hit - {"*"})
    partial = {} if "*" in hit else formats_differing(old, new)
    return same, (f"{len(differ)} of {len(old)} modules differ ({', '.join(sorted(hit))}), e.g. {differ[0]}"
                  if differ else f"all {len(old)} modules byte-identical"), partial


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision of the measured sources")
    ap.add_argument("--table", action="append", help="table file(s); default: every shipped table")
    ap.add_argument("--dry-run", action="store_true", help="report only, write nothing")
    ap.add_argument("--images-equal", metavar="ARCH",
                    help="also accept CUDA source edits whose kernel images for ARCH are byte-identical (NVRTC, no GPU)")
    ap.add_argument("--newly-hashed", nargs="+", default=(), metavar="PATH",
                    help="files added to candidates' hashed lists since the base, byte-identical there (see restamp())")
    args = ap.parse_args(argv)
    import tuning_db  # noqa: PLC0415

    repo = pathlib.Path(registry.__file__).resolve().parents[1]
    rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=repo, capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"restamp_table: {args.base!r} is not a git revision here: {rev.stderr.strip()}")
    base_name = rev.stdout.strip()
    cands = registry.candidates()
    files = {c.id: tuple(c.source_files) for c in cands}
    by_image: tuple[str, ...] = ()
    partial: dict[str, frozenset[str]] = {}
    if args.images_equal:
        same, summary, differ_for = images_verdict(repo, base_name, args.images_equal)
        by_image = tuple(c.id for c in cands if c.backend == "cuda" and c.id in same)
        partial = {c.id: differ_for[c.id] for c in cands if c.backend == "cuda" and c.id in differ_for}
        print(f"kernel images for {args.images_equal} at {base_name} and now: {summary}; covered: "
              + (", ".join(sorted(same)) or "none")
              + "".join(f"; {c} except {', '.join(sorted(f))}" for c, f in sorted(partial.items())))
    for path in args.table or [str(p) for p in tuning_db.table_paths()]:
        table = tables.load_table(path)
        on_arch = table.arch == args.images_equal
        new, out = restamp(table, files, git_reader(base_name, repo), registry.read_repo_file, base_name,
                           by_image if on_arch else (), tuple(args.newly_hashed), partial if on_arch else None)
        for e, why in out.kept:
            print(f"still stale: {e.impl} {e.format.value}/{e.act.value} {e.n}x{e.k} M<={e.m_bucket}: {why}")
        print(f"{pathlib.Path(path).name}: {len(out.restamped)} entries re-stamped from {base_name}, "
              f"{len(out.kept)} left stale" + (" (dry run: nothing written)" if args.dry_run else ""))
        if out.restamped and not args.dry_run:
            tables.save_table(new, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
