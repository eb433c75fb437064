"""Memory peaks before (commit c300692) and now: read_trace on a trace it must not hold many times over,
and a run of the simulator with values near its limit.

Each measurement runs in a fresh child process; its peak is the child's maximum resident set size
(``getrusage``, what ``/usr/bin/time -v`` reports as "Maximum resident set size") less what it held
after its imports, so the interpreter and the libraries are not counted.

  * ``read_trace`` on a 60 MiB trace of empty events (``{}``, twenty million of them): before, the
    reader ``json.loads`` the whole file; now it reads a batch of events at a time and keeps only
    those it uses (``labcore.readers.json_stream``). Target: below 4x the file and below 512 MB.
  * a ring all-reduce with values on 286 ranks: the largest run the limit before (2 GiB, by its
    estimate) accepted; now refused, its whole peak estimated first (``engine.values_bytes``);
    and 224 ranks, the largest now accepted (1 GiB limit), measured against its estimate.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_memory.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "c300692"
MiB = 1 << 20

CHILD = r"""
import importlib.util, json, resource, sys, time
kind, which, arg, old_file = sys.argv[1:5]


def old_module(name):
    spec = importlib.util.spec_from_file_location(name, old_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if kind == "trace":
    from labcore.readers import read_trace
    reader = old_module("before_trace").read_trace if which == "before" else read_trace
    work = lambda: reader(arg)
else:
    from labcore.sim import simulation, simulate
    from labcore.sim.core import engine
    from labcore.sim.core.schedules import build
    ranks = int(arg)
    sched = build("all_reduce", "ring", ranks, 1 << 20)
    estimate = engine.values_bytes(sched, 1)
    if which == "before":                      # the limit before: 2 GiB of its own estimate
        old = old_module("before_engine").values_bytes(sched, 1)
        if old > 2 << 30:
            raise SystemExit(json.dumps(dict(said=f"refused (its estimate {old / 2**30:.2f} GiB)")))
        simulation.MAX_VALUES_BYTES = 1 << 40
        estimate = old
    work = lambda: simulate("all_reduce", "ring", ranks, 1 << 20).verify()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    work()
    said = "read" if kind == "trace" else "ran"
except ValueError as err:
    said = str(err)
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
print(json.dumps(dict(said=said, grew=grew, seconds=time.perf_counter() - start,
                      estimate=None if kind == "trace" else estimate)))
"""


def _old_file(path: str, folder: str) -> str:
    """The module at ``path`` as it was at BEFORE, in ``folder``."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:{path}"], capture_output=True, text=True,
                          check=True).stdout
    target = os.path.join(folder, os.path.basename(path))
    Path(target).write_text(text)
    return target


def _child(kind: str, which: str, arg: str, old_file: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, kind, which, arg, old_file], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1800)
    lines = done.stdout.strip().splitlines() or [json.dumps(dict(said=done.stderr.strip().splitlines()[-1]))]
    return json.loads(lines[-1]) if done.returncode == 0 else json.loads(done.stderr.strip().splitlines()[-1])


def _empty_events_trace(path: str, size: int) -> int:
    with open(path, "wb") as f:
        f.write(b'{"distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"}, "traceEvents": [')
        count = size // 3
        for start in range(0, count, 1_000_000):
            n = min(1_000_000, count - start)
            f.write(b",".join([b"{}"] * n) + (b"," if start + n < count else b""))
        f.write(b"]}")
    return os.path.getsize(path)


def _row(label: str, result: dict, size: int | None = None) -> str:
    grew = result.get("grew")
    peak = f"{grew / MiB:8.0f} MiB" if grew is not None else "       -    "
    ratio = f" ({grew / size:.1f}x the file)" if grew is not None and size else ""
    estimate = f", estimate {result['estimate'] / MiB:.0f} MiB" if result.get("estimate") else ""
    seconds = f"{result['seconds']:6.1f} s" if "seconds" in result else "     -  "
    return f"  {label:<34} {peak}{ratio} {seconds}{estimate}  {result['said'][:90]}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "empty_events.json")
        size = _empty_events_trace(trace, 60 * MiB)
        old_trace = _old_file("labcore/readers/profiler_trace.py", tmp)
        old_engine = _old_file("labcore/sim/core/engine.py", tmp)
        print(f"read_trace on {size / MiB:.0f} MiB of empty events (peak above the imports)")
        for which in ("before", "now"):
            print(_row(f"{which} ({BEFORE})" if which == "before" else which,
                       _child("trace", which, trace, old_trace), size))
        print("simulate('all_reduce', 'ring', ranks, 1 MiB) with values, then verify()")
        for which, ranks in (("before", 286), ("now", 286), ("now", 224)):
            print(_row(f"{which}, {ranks} ranks", _child("sim", which, str(ranks), old_engine)))


if __name__ == "__main__":
    main()
