"""One command for everything one GPU can show about the lab's GPU path, as a pass/fail table.

Run:  python benchmarks/gpu_acceptance.py            (about 3-6 minutes on one GPU)

Each check runs with a deadline and prints one row: pass, fail (with the reason) or skipped
(with the reason). Checks that need more GPUs than the machine has are listed as skipped with
the count they need; with two or more GPUs ``pytest -m gpu`` runs the suite's multi-GPU tests.
On a machine without a GPU every check is "skipped: no GPU" and the script exits 0, so CI can
run it. The exit status is 1 when any check failed.

The checks:

- a 1-rank NCCL cluster, CPU tensors beside CUDA ones in its group (``cpu:gloo,cuda:nccl``),
  with the notebook process left without CUDA;
- bench rows timed with CUDA events (``lc.bench.sweep``);
- NCCL's own log (``NCCL_DEBUG=INFO``) whole and in the call that wrote it, with and without
  ``PYTHONUNBUFFERED`` (each in a fresh Python: the forkserver's C streams are set up there);
- the recorder on NCCL: rows with times, and the profiler's NCCL kernel names
  (``ncclDevKernel_*``, older ``ncclKernel_*``) when the recorder profiles CUDA;
- a GPU hang reported in the call that queued it, naming the collective the GPU is in;
- the suite's GPU tests (``pytest -m gpu``) and the notebooks' GPU cells that one GPU runs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import labcore as lc  # noqa: E402 (after the path that makes this checkout's labcore the one imported)
from labcore.live.sysinfo import gpu_count  # noqa: E402

# NCCL's prefix on every log line: "host:pid:tid [device] NCCL INFO|WARN" (NCCL 2.30.7 src/debug.cc).
_NCCL_LINE = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (INFO|WARN) ")


class Skip(Exception):
    """A check that cannot run here, and why."""


@dataclass
class Check:
    name: str
    gpus: int
    run: object  # () -> str, the detail of a pass; raises AssertionError (fail) or Skip


def _one_rank_nccl() -> str:
    import torch

    def both():
        import torch
        import torch.distributed as dist
        cpu, gpu = torch.ones(2), torch.ones(2, device=lc.rank_info().device)
        dist.all_reduce(cpu)
        dist.all_reduce(gpu)
        return str(dist.get_backend()), cpu.tolist(), gpu.tolist()

    with lc.Cluster(1, backend="nccl", timeout=120, show_output=False) as cl:
        [(backend, cpu, gpu)] = cl.run(both)
    assert backend == "cpu:gloo,cuda:nccl", backend
    assert cpu == gpu == [1.0, 1.0], (cpu, gpu)
    assert not torch.cuda.is_initialized(), "the notebook process initialised CUDA"
    return f"group {backend}; notebook without CUDA"


def _bench_rows() -> str:
    df = lc.bench.sweep(1, "all_reduce", max_bytes="1M", factor=16, warmup=2, iters=5, progress=False)
    assert len(df) and (df["wrong"] == 0).all() and (df["time_us"] > 0).all(), df.to_string()
    assert df.attrs["params"]["backend"] == "nccl", df.attrs["params"]
    return f"{len(df)} rows on nccl, CUDA-event timed, 0 wrong"


_LOG_SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {root!r})
    import labcore as lc

    def fresh_communicator():
        import torch, torch.distributed as dist
        g = dist.new_group([0])                 # a new NCCL communicator: its INIT lines print now
        t = torch.ones(4, device=lc.rank_info().device)
        dist.all_reduce(t, group=g)
        dist.destroy_process_group(g)
        return "done"

    if __name__ == "__main__":
        with lc.Cluster(1, backend="nccl", timeout=120, show_output=False,
                        env={{"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}}) as cl:
            start = cl.last_output[0][0]
            cl.run(fresh_communicator)
            call = cl.last_output[0][0]
        print(json.dumps([start, call]))
''')


def _nccl_log(unbuffered: bool):
    def check() -> str:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
        done = subprocess.run([sys.executable, "-c", _LOG_SCRIPT.format(root=str(ROOT))], env=env,
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-800:]
        start, call = json.loads(done.stdout.strip().splitlines()[-1])
        nccl = [line for line in call.splitlines() if " NCCL " in line]
        assert nccl, "the call that made a communicator showed no NCCL line"
        broken = [line for line in nccl if not _NCCL_LINE.match(line)]
        assert not broken, f"lines cut or joined: {broken[:2]}"
        assert "NCCL INFO" in start or "NCCL INFO" in call
        return f"{len(nccl)} whole NCCL lines in the call, {start.count('NCCL INFO')} at start"
    return check


def _recorder() -> str:
    def recorded():
        import torch
        import torch.distributed as dist
        from labcore.live import recorder
        t = torch.ones(1 << 16, device=lc.rank_info().device)
        with lc.live.record("acceptance") as rec:
            for _ in range(3):
                dist.all_reduce(t)
            torch.cuda.synchronize()
        names = sorted({e[0] for e in recorder._events(rec._profile)})
        return rec, [n for n in names if n.startswith(("ncclDevKernel_", "ncclKernel_"))]

    with lc.Cluster(1, backend="nccl", timeout=120, show_output=False) as cl:
        [(rec, kernels)] = cl.run(recorded)
    rows = rec.collectives()
    assert len(rows) == 3, rows.to_string()
    timed = rows[["start_s", "end_s"]].notna().all(axis=1).sum()
    if not kernels:
        raise Skip(f"{len(rows)} rows ({timed} with start and end); the recorder profiles CPU activity only, "
                   "so no NCCL kernel names yet (issue 19 item 4)")
    return f"{len(rows)} rows, {timed} timed; kernels {', '.join(kernels[:2])}"


def _hang_reported() -> str:
    def gpu_busy(seconds: float):
        import torch
        import torch.distributed as dist
        torch.cuda._sleep(int(seconds * 2e9))      # a spinning kernel; the all_reduce queues behind it
        dist.all_reduce(torch.ones(4, device=lc.rank_info().device))
        return "queued"

    with lc.Cluster(1, backend="nccl", timeout=60, show_output=False) as cl:
        start = time.monotonic()
        try:
            cl.call(gpu_busy, (30.0,), timeout=4)
        except lc.CollectiveTimeout as err:
            where = err.report.stuck[0]
            assert where.gpu and "all_reduce" in where.gpu, str(err.report)
            took = time.monotonic() - start
        else:
            raise AssertionError("the call returned before its GPU work finished")
        assert cl.run(lambda: "fresh") == ["fresh"]
    return f"CollectiveTimeout after {took:.1f} s: GPU {where.gpu}"


def _pytest_gpu() -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "gpu", "tests"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    assert done.returncode == 0, tail
    return tail


def _gpu_cells() -> str:
    """Run each notebook's GPU-gated cells that one GPU enables, after the notebook's first cell."""
    ran, need_more = [], []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [("".join(c["source"])) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        for k, source in enumerate(cells):
            wanted = [int(n) for n in re.findall(r"has_gpus\((\d+)\)", source)]
            if not wanted:
                continue
            if min(wanted) > gpu_count():
                need_more.append(f"{path.stem}[{k}] ({min(wanted)} GPUs)")
                continue
            if re.search(r"^\s*%", cells[0] + "\n" + source, re.M):
                continue  # a cell magic needs a kernel; nbval runs those
            program = f"def display(*a):\n    print(*a)\n{cells[0]}\n{source}\n"
            done = subprocess.run([sys.executable, "-c", program], cwd=path.parent, capture_output=True, text=True,
                                  timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
            assert done.returncode == 0, f"{path.stem} cell {k}: {done.stderr.strip().splitlines()[-1:]}"
            ran.append(f"{path.stem}[{k}]")
    return f"ran {', '.join(ran) or 'none'}; need more GPUs: {', '.join(need_more) or 'none'}"


CHECKS = [
    Check("1-rank NCCL cluster, CPU and CUDA tensors", 1, _one_rank_nccl),
    Check("bench rows timed by CUDA events", 1, _bench_rows),
    Check("NCCL log whole, in its call", 1, _nccl_log(unbuffered=False)),
    Check("NCCL log whole, PYTHONUNBUFFERED=1", 1, _nccl_log(unbuffered=True)),
    Check("recorder on NCCL: times and kernel names", 1, _recorder),
    Check("a GPU hang reported in its own call", 1, _hang_reported),
    Check("pytest -m gpu", 1, _pytest_gpu),
    Check("notebooks' GPU cells", 1, _gpu_cells),
    # what one GPU cannot show (pytest -m gpu runs them where the GPUs are)
    Check("a fault on NCCL names the rank that raised", 2, None),
    Check("a skipped collective hangs its own call on NCCL", 2, None),
    Check("notebook 04's NCCL log and 08's 2-GPU sweep", 2, None),
    Check("notebooks 05/06 and the clinic's watchdog on 4 NCCL ranks", 4, None),
]


def _outcome(check: Check, gpus: int) -> tuple[str, str]:
    if gpus == 0:
        return "skipped", "no GPU"
    if gpus < check.gpus:
        return "skipped", f"needs {check.gpus} GPUs, this machine has {gpus}"
    if check.run is None:
        return "skipped", "run by pytest -m gpu on this machine"
    try:
        return "pass", check.run()
    except Skip as why:
        return "skipped", str(why)
    except (AssertionError, Exception) as exc:  # one row per check, whatever went wrong
        return "fail", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def main() -> int:
    gpus = gpu_count() if lc.has_gpus(1) else 0
    print(f"# GPU acceptance: {gpus} GPU(s) usable by NCCL here, torch {__import__('torch').__version__}")
    rows, started = [], time.monotonic()
    for check in CHECKS:
        t0 = time.monotonic()
        status, detail = _outcome(check, gpus)
        rows.append((check.name, status, detail, time.monotonic() - t0))
        print(f"{check.name:<58} {status + (': ' + detail if status == 'skipped' else ''):<}", flush=True)
    print()
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  {'result':<8} {'s':>6}  detail")
    for name, status, detail, seconds in rows:
        print(f"{name:<{width}}  {status:<8} {seconds:6.1f}  {detail}")
    failed = [r for r in rows if r[1] == "fail"]
    print(f"\n{sum(r[1] == 'pass' for r in rows)} passed, {len(failed)} failed, "
          f"{sum(r[1] == 'skipped' for r in rows)} skipped in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
