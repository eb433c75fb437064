"""Shared fixtures and the suite's lanes.

Lanes (markers registered in pyproject.toml):

- ``live``: starts rank processes, kernels, engines or other subprocesses;
- ``notebook``: a notebook cell run by nbval (every cell of ``notebooks/``);
- ``browser``: drives Chromium (and each notebook's rendering after its cells: the plugin
  tests/notebook_render.py, loaded for every run by pyproject.toml's addopts);
- ``slow``: long tests (a file of them, or one test over ~5 s on 2 cores);
- ``gpu``: needs CUDA devices (skips without them, saying why).

Each test file carries its lane (``pytestmark = pytest.mark.live``, or a list); the fast lane is
every test without one: ``pytest -m fast`` (no processes, no notebooks). A test in the fast lane that
starts a process fails and says to mark its file.
"""
from __future__ import annotations

import os

import psutil
import pytest

import labcore as lc

LANE_MARKERS = ("live", "notebook", "browser", "slow", "gpu")


def pytest_collection_modifyitems(config, items):
    """A notebook cell is in the notebook (and live) lane; a test file says its own lane with ``pytestmark``;
    what has none is the fast lane."""
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
            item.add_marker(pytest.mark.live)
        elif not any(item.get_closest_marker(m) for m in LANE_MARKERS):
            item.add_marker(pytest.mark.fast)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_process(request):
    """A fast-lane test that starts a process belongs in the live lane: say so instead of passing."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    before, cpu = _children(), os.times()
    yield
    after = os.times()
    started = _children() - before
    waited = (after.children_user + after.children_system) - (cpu.children_user + cpu.children_system)
    if started or waited > 0:
        pytest.fail(f"{request.node.nodeid} started processes: mark it @pytest.mark.live "
                    "(or give its file pytestmark = pytest.mark.live)")


@pytest.fixture
def tmp_path():
    """A short temporary folder, removed after the test. pytest's own sits under a numbered base whose
    path grows with every session on the machine (and the suite starts sessions of its own), and tests
    point TMPDIR into it: the ranks' forkserver socket must fit in about 100 characters."""
    import pathlib
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="t")
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def gloo_cluster():
    """``gloo_cluster(n, **options)``: a gloo Cluster of n ranks shared by the module's tests, closed at its end.

    The same arguments give the same cluster; options are ``lc.Cluster``'s (``timeout``, ``env``, ...).
    """
    made: dict = {}

    def get(n: int, **options):
        options.setdefault("timeout", 60)
        key = (n, tuple(sorted((k, repr(v)) for k, v in options.items())))
        if key not in made:
            made[key] = lc.Cluster(n, backend="gloo", **options)
        return made[key]

    yield get
    for cl in made.values():
        cl.close()


_PROGRESS_DIR: list = []   # [the session's folder, LABCORE_PROGRESS as it was]
_WORKER_TMP: list = []     # [an xdist worker's temporary folder, TMPDIR as it was]


def pytest_configure(config):
    """Every check() records the attempt (labcore.course): in the tests, into a temporary file, never the
    home. Set at start-up, not in a fixture, so nbval's kernels (which no fixture reaches) inherit it too."""
    import signal
    import tempfile

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a shell starts a background job with Ctrl-C ignored, and children inherit that: the tests
        # interrupt CLIs and scripts as a terminal does, so they start with Ctrl-C as a terminal has it
        signal.signal(signal.SIGINT, signal.default_int_handler)

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # each worker its own temporary folder: tests that look for what a run left behind in it
        # (scratch folders, flight-recorder dumps) see their own worker's files only. multiprocessing's
        # own folder is made first, outside it: its exit-time removal runs after this session's
        import multiprocessing.util

        multiprocessing.util.get_temp_dir()
        _WORKER_TMP[:] = [tempfile.mkdtemp(prefix=f"pytest-{worker}-"), os.environ.get("TMPDIR")]
        os.environ["TMPDIR"] = _WORKER_TMP[0]
        tempfile.tempdir = None
    _PROGRESS_DIR[:] = [tempfile.mkdtemp(prefix="labcore-test-progress-"), os.environ.get("LABCORE_PROGRESS")]
    os.environ["LABCORE_PROGRESS"] = os.path.join(_PROGRESS_DIR[0], "progress.jsonl")
    # A check of a learner's function runs in a process forked from the checker's template, which a notebook
    # starts at its first such check (labcore.exercises.checker); the session starts it here, as the kernel
    # would, so that a fast test checking a function reuses it instead of starting a process of its own
    from labcore.exercises import checker

    if worker or not getattr(config.option, "numprocesses", None):        # not xdist's controller: it checks nothing
        checker.start()


def _remove_and_restore(made: list, variable: str) -> None:
    """Remove the folder a session made and set ``variable`` back to what it was."""
    import shutil

    if not made:
        return
    folder, before = made
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = before


def pytest_unconfigure(config):
    import tempfile

    from labcore.exercises import checker

    checker.stop()
    _remove_and_restore(_PROGRESS_DIR, "LABCORE_PROGRESS")
    _remove_and_restore(_WORKER_TMP, "TMPDIR")
    tempfile.tempdir = None


@pytest.fixture(scope="session")
def progress_file():
    """The file this test session's checks record into."""
    from pathlib import Path

    return Path(os.environ["LABCORE_PROGRESS"])
