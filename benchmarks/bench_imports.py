"""What the package's layout costs at start-up: ``import labcore``, a rank's worker import, a warm ``Cluster.run``.

Each figure comes from fresh processes (the import times) or one cluster (the warm call), for this checkout
and, with ``--vs REF``, for another commit checked out beside it, measured in turns (A, B, A, B, ...) so a
busy machine slows both alike; it prints the medians and the ratios this / REF.

- ``import labcore``: a fresh interpreter importing the package (what a notebook's first cell pays);
- worker import: ``import labcore.live.worker`` in a fresh interpreter, what every rank imports before it
  runs anything, with the number of modules it loads;
- warm ``Cluster.run``: the median round trip of a no-op on a 2-rank gloo cluster after a warm-up.

Run:  .venv/bin/python benchmarks/bench_imports.py [--vs 10c1da9] [--rounds 7] [--calls 200]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_IMPORT = "import time; t = time.perf_counter(); import {module}; import sys; print(time.perf_counter() - t, len(sys.modules))"
_CLUSTER = """
import json, statistics, time
import labcore as lc

def noop():
    return None

if __name__ == "__main__":
    with lc.Cluster(2, backend="gloo", timeout=60) as cl:
        for _ in range(20):
            cl.run(noop)
        times = []
        for _ in range({calls}):
            t = time.perf_counter()
            cl.run(noop)
            times.append(time.perf_counter() - t)
    print(json.dumps(statistics.median(times)))
"""


def _run(code: str, tree: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"bench_imports: a run in {tree} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def _once(tree: Path, calls: int) -> dict:
    out = {}
    for label, module in (("import labcore", "labcore"), ("worker import", "labcore.live.worker")):
        seconds, modules = _run(_IMPORT.format(module=module), tree).split()
        out[label], out[label + " modules"] = float(seconds), int(modules)
    script = tree / ".bench_cluster_run.py"
    script.write_text(_CLUSTER.format(calls=calls))
    try:
        out["warm Cluster.run"] = json.loads(_run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                                                  tree))
    finally:
        script.unlink()
    return out


def _checkout(ref: str) -> Path:
    where = Path(tempfile.mkdtemp(prefix="labcore-bench-"))
    done = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where / "tree"), ref],
                          capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(where, ignore_errors=True)
        raise SystemExit(f"bench_imports: cannot check out {ref!r}: {done.stderr.strip()}")
    return where / "tree"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vs", metavar="REF", help="a commit to measure beside this checkout")
    p.add_argument("--rounds", type=int, default=7, help="fresh runs of each figure (default 7)")
    p.add_argument("--calls", type=int, default=200, help="timed calls of the warm cluster (default 200)")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.calls < 1:
        p.error("--rounds and --calls must be 1 or more")
    trees = {"this checkout": ROOT}
    other = _checkout(a.vs) if a.vs else None
    if other is not None:
        trees[a.vs] = other
    try:
        runs: dict = {name: [] for name in trees}
        for _ in range(a.rounds):
            for name, tree in trees.items():
                runs[name].append(_once(tree, a.calls))
    finally:
        if other is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], capture_output=True)
            shutil.rmtree(other.parent, ignore_errors=True)
    figures = list(runs["this checkout"][0])
    print(f"{'figure':<26}" + "".join(f"{name:>18}" for name in trees) + ("      ratio" if other else ""))
    for fig in figures:
        med = {name: statistics.median(r[fig] for r in rs) for name, rs in runs.items()}
        unit = (lambda v: f"{v:>18.0f}") if fig.endswith("modules") else (lambda v: f"{v * 1e3:>15.2f} ms")
        line = f"{fig:<26}" + "".join(unit(v) for v in med.values())
        if other:
            line += f"  {med['this checkout'] / med[a.vs]:9.2f}"
        print(line)
    print(f"(medians of {a.rounds} fresh runs; warm Cluster.run: the median of {a.calls} calls on 2 gloo ranks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
