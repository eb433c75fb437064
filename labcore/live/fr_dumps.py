"""torch's two flight recorders on a rank, read as one: NCCL's and the CPU backends'.

torch 2.13 keeps one flight recorder per kind of event (torch/csrc/distributed/c10d/FlightRecorder.hpp):
ProcessGroupNCCL records into its own ``FlightRecorder<at::cuda::CUDAEvent>``, gloo (and every other
backend) into ``FlightRecorder<c10::Event>``. Each has its own dump functions in
``torch._C._distributed_c10d``:

- ``_dump_fr_trace(includeCollectives, includeStackTraces, onlyActive)`` and
  ``_dump_fr_trace_json(includeCollectives, onlyActive)``: the CPU recorder, in every build;
- ``_dump_nccl_trace(...)`` and ``_dump_nccl_trace_json(...)``, same arguments: NCCL's recorder, bound
  only in CUDA builds (``#ifdef USE_C10D_NCCL`` in torch/csrc/distributed/c10d/init.cpp; the C++ side is
  ``dump_nccl_trace``/``dump_nccl_trace_json`` in ProcessGroupNCCL.hpp).

torch's own debug server shows them as two pages, "FlightRecorder CPU" and "FlightRecorder NCCL"
(torch/distributed/debug/_debug_handlers.py). A lab rank on NCCL runs ``cpu:gloo,cuda:nccl``: its GPU
collectives are in NCCL's recorder and its CPU ones in the other, so the lab reads both. Reading only
``_dump_fr_trace`` on NCCL returns no entries and no error.

Each recorder numbers its entries (``record_id``) on its own, so an entry is named by
``(recorder, record_id)``: :func:`key`.

Example
-------
>>> available()[-1]          # every build has the CPU recorder; CUDA builds list "nccl" first
'cpu'
"""
from __future__ import annotations

from labcore.readers.flight_dump import plain

__all__ = ["RECORDERS", "available", "read", "read_json", "key"]

#: recorder -> (its pickled dump, its JSON dump), NCCL's first: the GPU's collectives are there.
RECORDERS = {"nccl": ("_dump_nccl_trace", "_dump_nccl_trace_json"),
             "cpu": ("_dump_fr_trace", "_dump_fr_trace_json")}


def _c10d():
    import torch

    return torch._C._distributed_c10d


def available() -> list[str]:
    """The recorders this build of torch can dump, NCCL's first."""
    c10d = _c10d()
    return [name for name, (pickled, _) in RECORDERS.items() if hasattr(c10d, pickled)]


def read(stacks: bool = True) -> dict:
    """Every recorder's pickled dump, read as plain data and merged.

    Returns torch's dump layout (``version``, ``pg_config``, ``entries``) with each entry's
    ``recorder`` added and the entries in creation order; ``pg_status`` maps each recorder to its
    own group status (group -> last enqueued, started and completed sequence numbers).
    """
    c10d = _c10d()
    merged = {"version": None, "pg_config": {}, "pg_status": {}, "entries": []}
    for name in available():
        trace = plain(getattr(c10d, RECORDERS[name][0])(includeStackTraces=stacks))
        merged["version"] = merged["version"] or trace.get("version")
        merged["pg_config"] = {**trace.get("pg_config", {}), **merged["pg_config"]}
        merged["pg_status"][name] = trace.get("pg_status", {})
        merged["entries"] += [dict(e, recorder=name) for e in trace.get("entries", [])]
    merged["entries"].sort(key=lambda e: (e.get("time_created_ns", 0), key(e)))
    return merged


def read_json(only_active: bool = True) -> str:
    """NCCL's recorder as torch's JSON dump where this build has it, else the CPU one's.

    The JSON form has no Python stacks, which makes it cheap enough to take while a call waits.
    """
    name = available()[0]
    return getattr(_c10d(), RECORDERS[name][1])(includeCollectives=True, onlyActive=only_active).decode()


def key(entry: dict) -> tuple[str, int]:
    """An entry's name among every recorder's: (recorder, record_id)."""
    return entry.get("recorder", "cpu"), int(entry["record_id"])
