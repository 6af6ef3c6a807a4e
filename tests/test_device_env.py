"""tools/perf/device_env.sh, sourced by every script that runs on the lent GPU machine: what it leaves in $OUT for the
device tool to bring back (at most 8 files, at most two folders down: session 38 lost a merged tuning table past the
count). Runs bash on the CPU; no GPU."""

import pathlib
import shutil
import subprocess
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = ROOT / "tools" / "perf" / "device_env.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(script: str, out: pathlib.Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "HOME": str(out.parent)}
    return subprocess.run(["bash", "-c", f"source {ENV}; {script}"], env=env, capture_output=True, text=True,
                          timeout=60)


def _members(tgz: pathlib.Path) -> set[str]:
    with tarfile.open(tgz) as t:
        return {m.name.lstrip("./") for m in t.getmembers() if m.isfile()}


def test_out_within_the_device_limits_is_left_as_written(tmp_path):
    out = tmp_path / "out"
    r = _run('for i in 1 2 3 4 5 6 7; do echo $i > "$OUT/f$i"; done; mkdir -p "$OUT/a/b"; echo x > "$OUT/a/b/g"', out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["f1", "f2", "f3", "f4", "f5", "f6", "f7", "g"]


def test_more_than_eight_files_come_back_as_one_tarball_holding_them_all(tmp_path):
    out = tmp_path / "out"
    r = _run('for i in $(seq 1 10); do echo $i > "$OUT/f$i"; done; mkdir -p "$OUT/bench"; echo {} > "$OUT/bench/r.json"',
             out)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in out.iterdir()] == ["out.tgz"]
    assert _members(out / "out.tgz") == {f"f{i}" for i in range(1, 11)} | {"bench/r.json"}


def test_a_file_three_folders_down_is_packed_too(tmp_path):
    out = tmp_path / "out"
    r = _run('mkdir -p "$OUT/a/b/c"; echo x > "$OUT/a/b/c/deep"; echo y > "$OUT/top"', out)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in out.iterdir()] == ["out.tgz"]
    assert _members(out / "out.tgz") == {"a/b/c/deep", "top"}


def test_a_script_run_by_a_sourcing_script_leaves_the_packing_to_the_outer_one(tmp_path):
    """tools/perf/retune_cuda.sh runs tiles_tables.sh with OUT=$OUT/tiles: the inner script must not pack its part
    (the outer one would then hold a tarball inside its tarball)."""
    out = tmp_path / "out"
    inner = tmp_path / "inner.sh"
    inner.write_text(f'source {ENV}\nfor i in $(seq 1 9); do echo $i > "$OUT/t$i"; done\n')
    r = _run(f'mkdir -p "$OUT/tiles"; OUT="$OUT/tiles" bash {inner}; ls "$OUT/tiles" | wc -l > "$OUT/inner_count"', out)
    assert r.returncode == 0, r.stderr
    members = _members(out / "out.tgz")
    assert {f"tiles/t{i}" for i in range(1, 10)} <= members and "tiles/out.tgz" not in members
    with tarfile.open(out / "out.tgz") as t:
        assert t.extractfile("./inner_count").read().strip() == b"9"
