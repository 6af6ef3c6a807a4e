"""Shared test setup: hypothesis profiles, the GPU marker, and paths to the shared real data."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
from hypothesis import HealthCheck, settings

# CI profile: bounded examples, no deadline (the Triton interpreter and first compiles are slow).
settings.register_profile("ci", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("gpu", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Under xdist each worker's torch starts one CPU thread per core: 12 GPU-test workers on the H200 host's 16 cores
# make 192 threads. In session 15 four real-size quantizer tests hit their 140 s limit inside plain CPU tensor ops
# that build their inputs (the likely cause: that oversubscription). Each worker gets its share of the cores.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("FP8DISPATCH_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU (marked gpu); runs on the lent H200 via tools/gpu_suite.sh")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def weights_dir():
    d = SHARED_DATA / "weights"
    if not d.is_dir():
        pytest.skip(f"real weight matrices not found at {d} (set FP8DISPATCH_SHARED_DATA)")
    return d


def pytest_runtest_logreport(report):
    """With FP8DISPATCH_FAILURE_LOG set, append each failure's traceback to that file as soon as it happens, so a
    GPU run cut at its time limit (before pytest's summary) still says why each test failed. Under xdist this
    hook runs in the controller, which serializes the writes."""
    path = os.environ.get("FP8DISPATCH_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"===== {report.nodeid} ({report.when})\n{report.longreprtext}\n")


def require_triton_interpreter() -> None:
    """For the launchers of the interpreter suites: skip where Triton's interpreter cannot run (a GPU machine's
    numpy), but fail under tools/test.sh (CI's command, which sets FP8DISPATCH_REQUIRE_INTERPRETER): CI must run them."""
    why = triton_interpreter_unusable()
    if why:
        (pytest.fail if os.environ.get("FP8DISPATCH_REQUIRE_INTERPRETER") else pytest.skip)(why)


def triton_interpreter_unusable() -> str | None:
    """Why Triton's CPU interpreter cannot run in this environment, or None. Triton 3.6 needs numpy < 2.4
    (tools/env.sh pins it for CI): its interpreter converts one-element arrays to Python scalars, which newer numpy
    refuses ("only 0-dimensional arrays can be converted to Python scalars", on the GPU machine, session 9)."""
    import numpy
    import triton

    numpy_version = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    if triton.__version__.startswith("3.6.") and numpy_version >= (2, 4):
        return (f"Triton {triton.__version__}'s interpreter needs numpy < 2.4, this environment has numpy "
                f"{numpy.__version__} (CI pins it: tools/env.sh)")
    return None


def assert_programmatic_chain_exact(chain, x0: torch.Tensor, monkeypatch, what: str) -> None:
    """`chain(x0)` (a list of outputs, each kernel reading the one before) with programmatic dependent launches
    (kernels_triton._pdl) must be bit-identical to plain launches, eager and in three graph replays: a missing
    griddepcontrol.wait reads stale data, an early write races the previous kernel. GPU only."""
    from kernels_triton import _pdl

    monkeypatch.setattr(_pdl, "ENABLED", False)
    ref = chain(x0)
    assert all(torch.isfinite(y).all() for y in ref), what
    monkeypatch.setattr(_pdl, "ENABLED", True)
    for i, (a, b) in enumerate(zip(ref, chain(x0))):
        assert torch.equal(a, b), f"{what} output {i} differs with programmatic launches (eager)"
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = chain(x0)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(ref, outs)):
            assert torch.equal(a, b), f"{what} graph output {i} differs with programmatic launches"
