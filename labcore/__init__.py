"""labcore: the helper package of the Collective Communication Lab.

Its parts, imported lazily so that ``import labcore`` stays cheap and the simulator never pulls in
torch (docs/architecture.md draws them and which way each imports):

- ``labcore.live``: real collectives on worker processes (``Cluster``, ``%%ranks``), the hang report
  and the recorder of what training sends;
- ``labcore.readers``: what real jobs leave behind (nccl-tests output, NCCL logs, profiler traces,
  flight-recorder dumps, ``nvidia-smi topo -m``), read into the same frames and recordings;
- ``labcore.bench``: the nccl-tests port (time, algbw, busbw, #wrong), and
  ``labcore.evidence``: what repeated sweeps show (the gate, drift, targets, rollouts);
- ``labcore.sim``: the step-by-step simulator and its cost models (numpy only);
- ``labcore.viz`` and ``labcore.exercises``: figures and checked exercises; ``labcore.course``:
  the student release, grading and learners' progress (``lc.progress()``).

Example
-------
>>> import labcore as lc
>>> with lc.Cluster(world_size=2) as cl:          # doctest: +SKIP
...     cl.run(lambda: lc.rank_info().rank)
[0, 1]
"""
from __future__ import annotations

import importlib

from labcore import events

__version__ = "0.1.0"

_SUBMODULES = {
    "live": "labcore.live", "readers": "labcore.readers", "bench": "labcore.bench", "evidence": "labcore.evidence",
    "sim": "labcore.sim", "viz": "labcore.viz", "exercises": "labcore.exercises", "course": "labcore.course",
}
# top-level name -> the package that defines it
_NAMES = {
    **dict.fromkeys(("Cluster", "EngineCluster", "has_gpus", "rank_info", "device", "machine_summary",
                     "ClusterError", "RankError", "RankDied", "CollectiveTimeout"), "labcore.live"),
    **dict.fromkeys(("read_trace", "read_nccl_tests", "parse_nccl_log"), "labcore.readers"),
}

__all__ = sorted(set(_SUBMODULES) | set(_NAMES) | {"load_ipython_extension", "progress"})


def __getattr__(name: str):
    if name in _SUBMODULES:
        module = importlib.import_module(_SUBMODULES[name])
        globals()[name] = module
        return module
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'labcore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(__all__)


def progress(path=None):
    """This learner's progress, one row per notebook (every ``check()`` is recorded; see labcore.course).

    >>> lc.progress()           # doctest: +SKIP
    """
    from labcore.course.tracking import progress as table

    return table(path)


def load_ipython_extension(ipython) -> None:
    """``%load_ext labcore`` registers the ``%%ranks`` cell magic."""
    from labcore.live.magic import register

    register(ipython)


def _record_attempt(exercise, result) -> None:
    """The course keeps every checked attempt (labcore.course.tracking); the exercises only announce it."""
    from labcore.course.tracking import record_attempt

    record_attempt(exercise, result)


events.listen("attempt", _record_attempt)
