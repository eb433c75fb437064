"""What real jobs leave behind, read into the lab's own frames: nothing here starts a rank.

- :mod:`~labcore.readers.nccl_tests`: nccl-tests' stdout -> the DataFrame ``lc.bench.sweep`` returns;
- :mod:`~labcore.readers.nccl_log`: ``NCCL_DEBUG=INFO`` lines -> what NCCL chose (:class:`NcclLog`);
- :mod:`~labcore.readers.profiler_trace`: PyTorch profiler (Kineto) traces -> a :class:`Recording`;
- :mod:`~labcore.readers.flight_dump`: torch's flight-recorder dumps, read safely, and torch's analysis;
- :mod:`~labcore.readers.smi_topo`: ``nvidia-smi topo -m`` -> a link matrix;
- :mod:`~labcore.readers.recording`: the :class:`Recording` model the live recorder returns too, and
  :mod:`~labcore.readers.intervals`, the time spans both measure overlap with.

Readers never import torch at module level (torch's flight-recorder analyzer is loaded only to run it).
Names load on first use: a rank imports the recording model without pandas and the parsers.

Example
-------
>>> import labcore as lc
>>> lc.read_nccl_tests is lc.readers.read_nccl_tests
True
"""
from __future__ import annotations

import importlib

# public name -> (module, its name there)
_NAMES = {
    "read_nccl_tests": ("labcore.readers.nccl_tests", "read_nccl_tests"),
    "NcclLog": ("labcore.readers.nccl_log", "NcclLog"), "parse_nccl_log": ("labcore.readers.nccl_log", "parse"),
    "recorded_nccl_log": ("labcore.readers.nccl_log", "recorded"), "NCCL_LOGS_DIR": ("labcore.readers.nccl_log", "LOGS_DIR"),
    "read_trace": ("labcore.readers.profiler_trace", "read_trace"),
    "kernel_choice": ("labcore.readers.profiler_trace", "kernel_choice"),
    "TRACES_DIR": ("labcore.readers.profiler_trace", "TRACES_DIR"),
    "load_dump": ("labcore.readers.flight_dump", "load_dump"), "analyze_dumps": ("labcore.readers.flight_dump", "analyze"),
    "FlightAnalysis": ("labcore.readers.flight_dump", "FlightAnalysis"),
    "parse_topo": ("labcore.readers.smi_topo", "parse_topo"), "TopoMatrix": ("labcore.readers.smi_topo", "TopoMatrix"),
    "TOPO_LEGEND": ("labcore.readers.smi_topo", "LEGEND"),
    "Recording": ("labcore.readers.recording", "Recording"), "combine": ("labcore.readers.recording", "combine"),
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        module, attr = _NAMES[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(__all__)
