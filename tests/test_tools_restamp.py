"""tools/restamp_table: a measurement survives an edit of comments and docstrings, and nothing else."""

from __future__ import annotations

import subprocess

from dispatch import registry, tables
from dispatch.target import Target
from tools import restamp_table as rt

PY_OLD = b'''"""Module doc."""
import math


def f(x):
    """Doc of f."""
    return math.sqrt(x) * 2  # why two
'''
PY_DOCS = b'''"""Module doc, reworded at length."""
import math


def f(x):
    """Doc of f, now saying more."""
    # a new comment
    return math.sqrt(x) * 2  # why two: a longer reason
'''
PY_CODE = PY_DOCS.replace(b"* 2", b"* 3")

CU_OLD = b'''// header comment
__device__ float g(float a) {
  const char* s = "keep // this"; /* block */
  return a * 2.0f;  // trailing
}
'''
CU_DOCS = b'''// header comment, rewritten
// over two lines
__device__ float g(float a) {
  const char* s = "keep // this";
    return a * 2.0f;
}
'''


def test_c_comments_go_and_literals_stay():
    assert rt.strip_c_comments('a = "x // y"; // z\nb = \'/\'; /* c\n d */ e') == 'a = "x // y"; \nb = \'/\';   e'
    assert rt.strip_c_comments('s = "esc \\" // in"; t') == 's = "esc \\" // in"; t'


def test_only_comment_and_docstring_edits_are_equivalent():
    assert rt.why_not_equivalent("k.py", PY_OLD, PY_DOCS) is None
    assert "code changed" in rt.why_not_equivalent("k.py", PY_OLD, PY_CODE)
    assert rt.why_not_equivalent("k.cu", CU_OLD, CU_DOCS) is None
    assert "code changed" in rt.why_not_equivalent("k.cu", CU_OLD, CU_DOCS.replace(b"2.0f", b"2.5f"))
    # a literal is code: text inside a string must not be read as a comment
    assert "code changed" in rt.why_not_equivalent("k.cu", CU_OLD, CU_OLD.replace(b"keep // this", b"keep"))
    assert "changed" in rt.why_not_equivalent("t.yaml", b"a: 1\n", b"a: 1 # c\n")
    assert "missing" in rt.why_not_equivalent("k.py", None, PY_OLD)
    assert "cannot be parsed" in rt.why_not_equivalent("k.py", PY_OLD, b"def (:\n")


def test_removing_definitions_nothing_uses_is_equivalent():
    """Code moved out of a hashed file (kernels_cuda/_launch.py lost the dequant launcher in session 17): deleting
    top-level definitions, and the import names only they used, changes none of the code that stays."""
    old = (b"from m import a, b\n\ndef keep(x):\n    return a(x)\n\ndef gone(x):\n    'doc'\n    return b(x)\n\n"
           b"class Gone:\n    pass\n")
    new = b"from m import a\n\ndef keep(x):\n    'now documented'\n    return a(x)\n"
    assert rt.removed_unused_definitions(old, new) == ["b", "gone", "Gone"]
    assert rt.why_not_equivalent("k.py", old, new) is None
    # not when what stays still uses a removed name, or when anything else changed too
    assert rt.removed_unused_definitions(old + b"y = gone\n", new + b"y = gone\n") is None
    assert rt.removed_unused_definitions(old, new + b"__all__ = ['gone']\n") is None
    assert rt.removed_unused_definitions(old, new.replace(b"a(x)", b"a(x + 1)")) is None
    assert rt.removed_unused_definitions(old, new.replace(b"from m import a", b"from m import a, c")) is None
    assert rt.removed_unused_definitions(old + b"z = 1\n", new) is None  # a statement that is not a definition
    assert "code changed" in rt.why_not_equivalent("k.py", old, new.replace(b"a(x)", b"a(x + 1)"))


def _table(entries):
    t = tables.new_table(Target.simulated_for("sm_90", torch_version="2.11.0"), path="mem.yaml")
    return tables.merge(t, entries)


def _entry(impl, m, h):
    n = 1024 * (1 + sorted(("cand.docs", "cand.code", "cand.other", "cand.gone", "cuda.k", "triton.k", "both.k")).index(impl))
    return tables.make_entry("fp8_row", "bf16", n, 4096, m, impl, {}, h, us=10.0, error=1e-3, note="measured")


def test_restamp_carries_over_docs_only_edits_and_keeps_the_rest_stale():
    base = {"a.py": PY_OLD, "b.cu": CU_OLD}
    docs = {"a.py": PY_DOCS, "b.cu": CU_DOCS}
    code = {"a.py": PY_CODE, "b.cu": CU_DOCS}
    files = {"cand.docs": ("a.py", "b.cu"), "cand.code": ("a.py",), "cand.other": ("b.cu",)}
    now = docs

    def reader(d):
        return d.get

    h_base = registry.sources_digest(("a.py", "b.cu"), reader(base))
    h_code_base = registry.sources_digest(("a.py",), reader(base))
    h_now = registry.sources_digest(("a.py", "b.cu"), reader(now))
    assert h_base != h_now
    entries = [_entry("cand.docs", 1, h_base), _entry("cand.docs", 16, h_now),
               _entry("cand.code", 1, h_code_base), _entry("cand.other", 1, "sha256:0000000000000000"),
               _entry("cand.gone", 1, h_base)]
    got, out = rt.restamp(_table(entries), files, reader(base), reader(now), "abc1234")
    by = {(e.impl, e.m_bucket): e for e in got.entries}
    assert by[("cand.docs", 1)].source_hash == h_now and "re-stamped from abc1234" in by[("cand.docs", 1)].note
    assert by[("cand.docs", 1)].note.startswith("measured; ")
    assert by[("cand.docs", 16)] == entries[1]  # current: untouched
    assert by[("cand.code", 1)].source_hash == registry.sources_digest(("a.py",), reader(now))  # docs-only too
    kept = {(e.impl, e.m_bucket): why for e, why in out.kept}
    assert set(kept) == {("cand.other", 1), ("cand.gone", 1)} and len(out.restamped) == 2
    assert "measured on sha256:0000000000000000, not on abc1234" in kept[("cand.other", 1)]
    assert "no candidate" in kept[("cand.gone", 1)]

    # the same base with a real code change in a.py: nothing that hashes a.py is carried over
    got2, out2 = rt.restamp(_table(entries), files, reader(base), reader(code), "abc1234")
    kept2 = {(e.impl, e.m_bucket): why for e, why in out2.kept}
    assert "a.py: code changed" in kept2[("cand.docs", 1)] and "a.py: code changed" in kept2[("cand.code", 1)]
    assert out2.restamped == []


def test_images_equal_accepts_kernel_source_edits_and_new_headers_for_the_checked_candidates_only():
    """`images_equal` (compiled images checked byte-identical): a .cu code change and a header new since the base are
    accepted for the listed candidates, whose base hash is over the files the base had; Python files still follow the
    docstring rule; other candidates keep the code change stale."""
    code_cu = CU_OLD.replace(b"2.0f", b"2.5f")
    base = {"a.py": PY_OLD, "b.cu": CU_OLD}
    now = {"a.py": PY_DOCS, "b.cu": code_cu, "new.cuh": b"#pragma once\n"}
    files = {"cuda.k": ("a.py", "b.cu", "new.cuh"), "triton.k": ("b.cu",)}
    h_base_cuda = registry.sources_digest(("a.py", "b.cu"), base.get)  # the base's file list had no new.cuh
    h_base_triton = registry.sources_digest(("b.cu",), base.get)
    entries = [_entry("cuda.k", 1, h_base_cuda), _entry("triton.k", 1, h_base_triton)]
    got, out = rt.restamp(_table(entries), files, base.get, now.get, "abc1234", images_equal=("cuda.k",))
    by = {e.impl: e for e in got.entries}
    assert by["cuda.k"].source_hash == registry.sources_digest(files["cuda.k"], now.get)
    assert "kernel image byte-identical" in by["cuda.k"].note
    kept = {e.impl: why for e, why in out.kept}
    assert set(kept) == {"triton.k"} and "b.cu: code changed" in kept["triton.k"]
    # without the image check the same edit is stale for both
    _, out2 = rt.restamp(_table(entries), files, base.get, now.get, "abc1234")
    assert out2.restamped == [] and len(out2.kept) == 2
    # a Python code change is never covered by the image check
    now3 = dict(now, **{"a.py": PY_CODE})
    _, out3 = rt.restamp(_table(entries), files, base.get, now3.get, "abc1234", images_equal=("cuda.k",))
    assert out3.restamped == [] and "a.py: code changed" in dict((e.impl, w) for e, w in out3.kept)["cuda.k"]


def test_images_differing_for_some_formats_keep_only_those_formats_stale():
    """`images_differ_for` (session 31: an MX-only kernel edit): the candidate's entries of formats whose modules all
    compiled byte-identically are re-stamped, saying so; those of the formats whose modules differ stay stale."""
    code_cu = CU_OLD.replace(b"2.0f", b"2.5f")
    base, now = {"a.py": PY_OLD, "b.cu": CU_OLD}, {"a.py": PY_DOCS, "b.cu": code_cu}
    files = {"cuda.k": ("a.py", "b.cu")}
    h = registry.sources_digest(files["cuda.k"], base.get)
    row = tables.make_entry("fp8_row", "bf16", 4096, 4096, 1, "cuda.k", {}, h, us=10.0, error=1e-3, note="measured")
    mx = tables.make_entry("mxfp8", "bf16", 4096, 4096, 1, "cuda.k", {}, h, us=11.0, error=1e-3, note="measured")
    got, out = rt.restamp(_table([row, mx]), files, base.get, now.get, "abc1234",
                          images_differ_for={"cuda.k": frozenset({"mxfp8"})})
    by = {e.format.value: e for e in got.entries}
    assert by["fp8_row"].source_hash == registry.sources_digest(files["cuda.k"], now.get)
    assert "every sm_90 kernel image of fp8_row byte-identical (those of mxfp8 differ)" in by["fp8_row"].note
    assert [(e.format.value, "b.cu: code changed" in why) for e, why in out.kept] == [("mxfp8", True)]


def test_module_formats_name_the_formats_whose_launches_load_a_module():
    """Per-format modules are the GEMVs' and the wgmma GEMM's (their launchers pass the weight's own scale layout or
    activation granularity); the activation quantizer, the dequant kernels (fp8_row runs the fp8_tensor module) and the
    split-K reduction serve every format. formats_differing collects them per candidate; a shared module that differs
    takes the whole candidate out."""
    key = "cuda.w8a16_gemv|sm_90:gemv_w8a16.cu:FP8D_CFG_MT=1,FP8D_CFG_NT=1,FP8D_CFG_SCALE=3,FP8D_CFG_U=1,FP8D_CFG_XKIND=0"
    assert rt.module_formats(key) == {"mxfp8"}
    assert rt.module_formats("cuda.w8a8_gemv|sm_90:gemv_w8a8.cu:FP8D_CFG_ACTQ=1,FP8D_CFG_MT=1") == {"fp8_row"}
    assert rt.module_formats("cuda.w8a8_gemv_fq|sm_90:gemv_w8a8.cu:FP8D_CFG_ACTQ=2,FP8D_CFG_FQ=1") == {"fp8_block"}
    assert rt.module_formats("cuda.w8a16_gemm_wgmma|sm_90:gemm_w8a16_wgmma.cu:FP8D_CFG_BM=128,FP8D_CFG_SCALE=0") == \
        {"fp8_tensor"}
    assert rt.module_formats("cuda.dequant_cublas|sm_90:dequant.cu:FP8D_CFG_SCALE=1") is None
    assert rt.module_formats("cuda.w8a8_gemv,cuda.w8a8_gemv_tiles|sm_90:act_quant.cu:") is None
    old = {"cuda.w8a16_gemv|sm_90:gemv_w8a16.cu:FP8D_CFG_SCALE=3": "x", "cuda.w8a16_gemv|sm_90:gemv_w8a16.cu:FP8D_CFG_SCALE=1": "y",
           "cuda.w8a8_gemv|sm_90:gemv_w8a8.cu:FP8D_CFG_ACTQ=0": "z", "cuda.w8a8_gemv|sm_90:act_quant.cu:": "q"}
    new = dict(old, **{"cuda.w8a16_gemv|sm_90:gemv_w8a16.cu:FP8D_CFG_SCALE=3": "x2",
                       "cuda.w8a8_gemv|sm_90:gemv_w8a8.cu:FP8D_CFG_ACTQ=0": "z2", "cuda.w8a8_gemv|sm_90:act_quant.cu:": "q2"})
    assert rt.formats_differing(old, new) == {"cuda.w8a16_gemv": {"mxfp8"}}


def test_newly_hashed_file_identical_at_the_base_is_accepted_and_nothing_else():
    """`newly_hashed`: a file the candidate's list gained since the base (its code already imported it there). The base
    hash is over the old list; the file must be byte-identical at the base and now."""
    base = {"a.py": PY_OLD, "launch.py": b"X = 1\n"}
    now = {"a.py": PY_DOCS, "launch.py": b"X = 1\n"}
    files = {"triton.k": ("a.py", "launch.py"), "cuda.k": ("a.py",)}
    h_old_list = registry.sources_digest(("a.py",), base.get)
    entries = [_entry("triton.k", 1, h_old_list), _entry("cuda.k", 1, h_old_list)]
    got, out = rt.restamp(_table(entries), files, base.get, now.get, "abc1234", newly_hashed=("launch.py",))
    by = {e.impl: e for e in got.entries}
    assert by["triton.k"].source_hash == registry.sources_digest(files["triton.k"], now.get)
    assert "the hashed list gained launch.py, byte-identical at abc1234" in by["triton.k"].note
    assert len(out.restamped) == 2  # cuda.k: a docstring edit of a.py only
    # without the flag the grown list does not hash to the entry's base hash
    _, out2 = rt.restamp(_table(entries), files, base.get, now.get, "abc1234")
    assert [e.impl for e, _ in out2.kept] == ["triton.k"]
    # a file named newly hashed that a candidate hashed already: the entry's hash at the base tells which ones it gained
    base4, now4 = dict(base, **{"shared.py": b"S = 1\n"}), dict(now, **{"shared.py": b"S = 1\n"})
    files4 = {"both.k": ("a.py", "launch.py", "shared.py")}
    e4 = _entry("both.k", 1, registry.sources_digest(("a.py", "shared.py"), base4.get))
    got4, out4 = rt.restamp(_table([e4]), files4, base4.get, now4.get, "abc1234",
                            newly_hashed=("launch.py", "shared.py"))
    assert len(out4.restamped) == 1 and "gained launch.py," in got4.entries[0].note
    # the hashed list lives in a hashed file: adding the path to its source_files tuple is the one code change allowed
    cands_old = b'class C:\n    source_files = ("a.py", "cands.py")\n    x = 1\n'
    cands_new = b'class C:\n    source_files = ("a.py", "cands.py",\n                    "launch.py")\n    x = 1\n'
    assert rt.why_not_equivalent("cands.py", cands_old, cands_new, ("launch.py",)) is None
    assert "code changed" in rt.why_not_equivalent("cands.py", cands_old, cands_new)
    assert "code changed" in rt.why_not_equivalent("cands.py", cands_old, cands_new.replace(b"x = 1", b"x = 2"),
                                                   ("launch.py",))
    # the added file changed since the base, or did not exist there: stale
    for base3 in (dict(base, **{"launch.py": b"X = 2\n"}), {"a.py": PY_OLD}):
        _, out3 = rt.restamp(_table(entries), files, base3.get, now.get, "abc1234", newly_hashed=("launch.py",))
        kept = dict((e.impl, w) for e, w in out3.kept)
        assert "launch.py: newly hashed but" in kept["triton.k"]


def test_git_reader_reads_a_revision(tmp_path):
    def git(*a):
        return subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "k.py").write_bytes(PY_OLD)
    git("add", "k.py")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    (tmp_path / "k.py").write_bytes(PY_DOCS)
    read = rt.git_reader("HEAD", tmp_path)
    assert read("k.py") == PY_OLD and read("missing.py") is None


def test_image_digest_keys_name_the_candidates_that_load_them():
    """`--images-equal` decides candidate by candidate: every module precompile_cuda lists is owned by a registered
    CUDA candidate (never "*"), and every CUDA candidate owns some module, so an edit that changes one candidate's
    images leaves the others' entries re-stampable."""
    from kernels_cuda.candidates import candidates as cuda_candidates
    from tools.perf import cuda_image_digest as cid
    from tools.perf.precompile_cuda import variants

    owners = {c for it in variants("sm_90", ("native",)) for c in cid.module_key(it).split("|")[0].split(",")}
    assert "*" not in owners
    assert owners == {c.id for c in cuda_candidates()}
    assert cid.module_candidates("gemv_w8a8.cu", (("FP8D_CFG_ACTQ", 0), ("FP8D_CFG_FQ", 1))) == "cuda.w8a8_gemv_fq"
    assert cid.module_candidates("gemv_w8a8.cu", (("FP8D_CFG_ACTQ", 0),)) == "cuda.w8a8_gemv"
    assert cid.module_candidates("gemv_w8a8.cu", (("FP8D_CFG_FQ", 1), ("FP8D_CFG_INLINE", 1))) == "cuda.w8a8_gemv_inline"
    assert cid.module_candidates("gemv_w8a8.cu", (("FP8D_CFG_ACTQ", 0), ("FP8D_CFG_TILED", 1))) == "cuda.w8a8_gemv_tiles"
    assert cid.module_candidates("gemv_w8a16.cu", (("FP8D_CFG_TILED", 1),)) == "cuda.w8a16_gemv_tiles"
    assert cid.module_candidates("new_kernel.cu", ()) == "*"
