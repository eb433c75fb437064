"""One command for everything the GPUs of a machine can show about the lab's GPU path, as a pass/fail table.

Run:  python benchmarks/gpu_acceptance.py [--out DIR]      (about 3-6 minutes on one GPU)

What it needs, said before it starts: the test extra (``pip install -e ".[test]"``: pytest runs
the suite's GPU tests), an NVIDIA GPU with a driver that runs this torch's CUDA (torch 2.13's default
Linux wheel is a CUDA 13 build, which needs a driver of the 580 series or newer; ``nvidia-smi`` shows
the driver's version), and a CUDA build of torch. Where something is missing it says what, in one
line, and exits 2.

Each check runs with a deadline and prints one row: pass, fail (with the first line of the reason) or
skipped (with the reason). Everything else goes to the output folder (``--out DIR``, else a new folder
in the temporary directory), whose path is printed first and last:

- ``checks/NN_<name>.txt``: each check's full text (the detail, or the whole traceback);
- ``ranks/<check>.txt``: what the ranks of each check's cluster printed, start-up included;
- ``pytest_gpu.txt``: the full report of ``pytest -m gpu``;
- ``nvidia-smi.txt`` (``nvidia-smi -q``) and ``torch.txt`` (``torch.__config__.show()``,
  ``torch.version.cuda`` and NCCL's version, asked in a child so this process stays without CUDA).

One GPU cannot form a multi-rank NCCL communicator (NCCL runs one rank per GPU): the checks that
need two or more GPUs are skipped with that reason; with more GPUs ``pytest -m gpu`` runs them.
The exit status is 1 when any check failed.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import labcore as lc  # noqa: E402 (after the path that makes this checkout's labcore the one imported)
from labcore.live.sysinfo import CUDA_FIX, cuda_runs, gpu_count  # noqa: E402

# NCCL's prefix on every log line, "host:pid:tid [device] NCCL INFO|WARN" (NCCL 2.30.7 src/debug.cc), with
# WARN's source line, and the timestamp NCCL puts before WARN lines by default since its 2.2x releases
# ("[2026-05-05 06:16:47] node-01:189884:189884 [3] plugin/net.cc:... NCCL WARN", NCCL's user guide,
# troubleshooting/logging.html: NCCL_DEBUG_TIMESTAMP_FORMAT, NCCL_DEBUG_TIMESTAMP_LEVELS).
NCCL_LINE = re.compile(r"^(?:\[[^\]]{1,64}\] )?\S+:\d+:\d+ \[\d+\] (?:\S+ )?NCCL (INFO|WARN) ")
# Within this much of each other the bench's time and CUDA events around the same loop agree.
AGREE_RATIO, AGREE_US = 0.25, 5.0
MULTI_GPU = "one GPU cannot form a multi-rank NCCL communicator (NCCL runs one rank per GPU): needs {n} GPUs"


class Skip(Exception):
    """A check that cannot run here, and why."""


@dataclass
class Run:
    """The output folder of one run and the rank logs its checks left."""

    out: Path
    logs: dict = field(default_factory=dict)

    def keep_ranks(self, name: str, cl) -> None:
        """What the ranks of ``cl`` printed at start-up and in their last call."""
        parts = [f"== start-up ==\n{o}{e}" for o, e in cl.start_output] + \
                [f"== last call, rank {r} ==\n{o}{e}" for r, (o, e) in enumerate(cl.last_output)]
        self.logs[name] = "\n".join(parts)


@dataclass
class Check:
    name: str
    gpus: int
    run: object  # (Run) -> str, the detail of a pass; raises AssertionError (fail) or Skip


def _one_rank_nccl(run: Run) -> str:
    import torch

    def both():
        import torch
        import torch.distributed as dist
        cpu, gpu = torch.ones(2), torch.ones(2, device=lc.rank_info().device)
        dist.all_reduce(cpu)
        dist.all_reduce(gpu)
        return str(dist.get_backend()), cpu.tolist(), gpu.tolist()

    with lc.Cluster(1, backend="nccl", timeout=120, show_output=False, env={"NCCL_DEBUG": "INFO"}) as cl:
        [(backend, cpu, gpu)] = cl.run(both)
        run.keep_ranks("one_rank_nccl", cl)
    assert backend == "cpu:gloo,cuda:nccl", backend
    assert cpu == gpu == [1.0, 1.0], (cpu, gpu)
    assert not torch.cuda.is_initialized(), "the notebook process initialised CUDA"
    return f"group {backend}; notebook without CUDA"


def _flight_recorders(run: Run) -> str:
    def entries():
        import torch
        import torch.distributed as dist

        from labcore.live import fr_dumps
        dist.all_reduce(torch.ones(4, device=lc.rank_info().device))
        dist.all_reduce(torch.ones(4))
        torch.cuda.synchronize()
        return fr_dumps.available(), sorted({e["recorder"] for e in fr_dumps.read(stacks=False)["entries"]})

    with lc.Cluster(1, backend="nccl", timeout=120, show_output=False) as cl:
        [(available, holding)] = cl.run(entries)
        run.keep_ranks("flight_recorders", cl)
    assert available == ["nccl", "cpu"], f"torch's dump functions here: {available}"
    assert holding == ["cpu", "nccl"], f"entries only in {holding}"
    return "NCCL's recorder holds the GPU's collective, the CPU one gloo's"


def _bench_rows(run: Run) -> str:
    df = lc.bench.sweep(1, "all_reduce", max_bytes="1M", factor=16, warmup=2, iters=5, progress=False,
                        env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,TUNING,ENV"})
    run.logs["bench_rows"] = "\n".join(df.attrs["log"])
    assert len(df) and (df["wrong"] == 0).all() and (df["time_us"] > 0).all(), df.to_string()
    assert set(df["backend"]) == {"nccl"}, set(df["backend"])
    nccl = df.attrs["nccl"]
    assert nccl.version, "no NCCL version in the sweep's log: the start-up lines were not kept"
    return f"{len(df)} rows on nccl, 0 wrong; NCCL {nccl.version} from the start-up log"


def _events_us(nbytes: int, iters: int) -> float:
    """On a rank: microseconds per in-place all_reduce, from CUDA events around a loop of them."""
    import torch
    import torch.distributed as dist

    t = torch.ones(nbytes // 4, device=lc.rank_info().device)
    for _ in range(5):
        dist.all_reduce(t)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        dist.all_reduce(t)   # returns once queued; torch makes the current stream wait for NCCL's
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def _bench_against_events(run: Run) -> str:
    sizes, iters = [1 << 20, 64 << 20], 50
    with lc.Cluster(1, backend="nccl", timeout=300, show_output=False) as cl:
        df = lc.bench.sweep(cl, "all_reduce", min_bytes=sizes[0], max_bytes=sizes[-1], factor=64, iters=iters,
                            placements=("in-place",), check=False, progress=False)
        events = {n: cl.run(_events_us, n, iters)[0] for n in sizes}
        run.keep_ranks("bench_against_events", cl)
    lines, off = [], []
    for n in sizes:
        bench = float(df.loc[df["size"] == n, "time_us"].iloc[0])
        lines.append(f"{n >> 20} MiB: bench {bench:.1f} us, CUDA events {events[n]:.1f} us")
        if abs(bench - events[n]) > max(AGREE_RATIO * events[n], AGREE_US):
            off.append(lines[-1])
    assert not off, "; ".join(off)
    return "; ".join(lines)


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
            start = cl.start_output[0][0]
            cl.run(fresh_communicator)
            call = cl.last_output[0][0]
        print(json.dumps([start, call]))
''')


def _nccl_log(unbuffered: bool):
    def check(run: Run) -> str:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
        done = subprocess.run([sys.executable, "-c", _LOG_SCRIPT.format(root=str(ROOT))], env=env,
                              capture_output=True, text=True, timeout=240)
        run.logs[f"nccl_log{'_unbuffered' * unbuffered}"] = done.stdout + done.stderr
        assert done.returncode == 0, done.stderr[-4000:]
        start, call = json.loads(done.stdout.strip().splitlines()[-1])
        nccl = [line for line in call.splitlines() if " NCCL " in line]
        assert nccl, "the call that made a communicator showed no NCCL line"
        broken = [line for line in nccl if not NCCL_LINE.match(line)]
        assert not broken, f"lines cut or joined: {broken[:2]}"
        assert "NCCL INFO" in start, "the start-up made the default group's communicator but kept no NCCL line"
        return f"{len(nccl)} whole NCCL lines in the call, {start.count('NCCL INFO')} at start"
    return check


def _recorder(run: Run) -> str:
    def recorded():
        import torch
        import torch.distributed as dist
        t = torch.ones(1 << 16, device=lc.rank_info().device)
        with lc.live.record("acceptance") as rec:
            for _ in range(3):
                dist.all_reduce(t)
        return rec

    with lc.Cluster(1, backend="nccl", timeout=120, show_output=False) as cl:
        [rec] = cl.run(recorded)
        run.keep_ranks("recorder", cl)
    rows = rec.collectives()
    assert len(rows) == 3, f"{len(rows)} rows (NCCL's flight recorder read?):\n{rows.to_string()}"
    timed = int(rows[["start_s", "end_s"]].notna().all(axis=1).sum())
    kernels = sorted(set(rows["kernel"]) - {""})
    assert kernels and all(k.startswith(("ncclDevKernel_", "ncclKernel_")) for k in kernels), kernels
    return f"{len(rows)} rows, {timed} timed; kernels {', '.join(kernels[:2])}"


def _hang_reported(run: Run) -> str:
    def gpu_busy(seconds: float):
        import torch
        import torch.distributed as dist
        t = torch.ones(4, device=lc.rank_info().device)
        torch.cuda._sleep(int(seconds * 2e9))      # a spinning kernel; the all_reduce queues behind it
        dist.all_reduce(t)
        return t.sum().item()                      # the line that waits for the GPU

    with lc.Cluster(1, backend="nccl", timeout=60, show_output=False) as cl:
        start = time.monotonic()
        try:
            cl.call(gpu_busy, (30.0,), timeout=4)
        except lc.CollectiveTimeout as err:
            where = err.report.stuck[0]
            run.logs["hang_report"] = str(err.report) + "\n\n" + where.stack
            assert where.gpu and "all_reduce" in where.gpu and where.user_frame, str(err.report)
            took = time.monotonic() - start
        else:
            raise AssertionError("the call returned before its GPU work finished")
        assert cl.run(lambda: "fresh") == ["fresh"]
    return f"CollectiveTimeout after {took:.1f} s: {where}"


def _pytest_gpu(run: Run) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "0", "-m", "gpu", "-rA",
                           "tests"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    (run.out / "pytest_gpu.txt").write_text(done.stdout + done.stderr)
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    assert done.returncode == 0, f"{tail} (full report: {run.out / 'pytest_gpu.txt'})"
    return tail


def _gpu_cells(run: Run) -> str:
    """Run each notebook's GPU-gated cells that this machine's GPUs enable, after the notebook's first cell."""
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
            run.logs[f"cell_{path.stem}_{k}"] = done.stdout + done.stderr
            assert done.returncode == 0, f"{path.stem} cell {k}: {done.stderr.strip().splitlines()[-1:]}"
            ran.append(f"{path.stem}[{k}]")
    return f"ran {', '.join(ran) or 'none'}; need more GPUs: {', '.join(need_more) or 'none'}"


CHECKS = [
    Check("1-rank NCCL cluster, CPU and CUDA tensors", 1, _one_rank_nccl),
    Check("both flight recorders read (NCCL's and the CPU one)", 1, _flight_recorders),
    Check("bench rows on nccl, NCCL's start-up log kept", 1, _bench_rows),
    Check("bench time against CUDA events", 1, _bench_against_events),
    Check("NCCL log whole, in its call", 1, _nccl_log(unbuffered=False)),
    Check("NCCL log whole, PYTHONUNBUFFERED=1", 1, _nccl_log(unbuffered=True)),
    Check("recorder on NCCL: times and kernel names", 1, _recorder),
    Check("a GPU hang reported at the line that waits", 1, _hang_reported),
    Check("pytest -m gpu", 1, _pytest_gpu),
    Check("notebooks' GPU cells", 1, _gpu_cells),
    # multi-rank NCCL (pytest -m gpu runs them where the GPUs are)
    Check("a fault on NCCL names the rank that raised", 2, None),
    Check("a skipped collective hangs its own call on NCCL", 2, None),
    Check("notebook 04's NCCL log and 08's 2-GPU sweep", 2, None),
    Check("notebooks 05/06 and the clinic's watchdog on 4 NCCL ranks", 4, None),
]


def missing() -> str | None:
    """What this machine lacks for the checks, in one line, or None."""
    import torch

    lacks = []
    if importlib.util.find_spec("pytest") is None:
        lacks.append("the test extra (pip install -e \".[test]\")")
    if torch.version.cuda is None:
        lacks.append(f"a CUDA build of torch (this is {torch.__version__})")
    if shutil.which("nvidia-smi") is None:
        lacks.append("an NVIDIA driver (nvidia-smi is not installed)")
    if not lc.has_gpus(1):
        lacks.append("a GPU that NVML counts")
    if lacks:
        return ("gpu_acceptance: cannot run here: it needs " + "; ".join(lacks) +
                ". torch's default Linux wheel (2.13: CUDA 13) needs a driver of the 580 series or newer, which "
                "nvidia-smi shows")
    ok, why = cuda_runs()
    return None if ok else f"gpu_acceptance: CUDA cannot run here ({why}); {CUDA_FIX}"


def _needs() -> str:
    """The preamble: what the run needs and what this machine has."""
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    return (f"# needs: the test extra (found), a CUDA build of torch (torch {torch.__version__}, CUDA "
            f"{torch.version.cuda}), a driver that runs it (580+ for CUDA 13: {', '.join(smi) or '?'}), GPUs "
            f"({gpu_count()} usable by NCCL; multi-rank checks need 2 or 4)")


def _machine_files(out: Path) -> None:
    """nvidia-smi -q and torch's build configuration, asked in children (this process stays CUDA-free)."""
    smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60)
    (out / "nvidia-smi.txt").write_text(smi.stdout + smi.stderr)
    program = ("import torch; print(torch.__config__.show()); print('torch.version.cuda', torch.version.cuda); "
               "print('nccl', '.'.join(map(str, torch.cuda.nccl.version())))")
    config = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    (out / "torch.txt").write_text(config.stdout + config.stderr)


def _outcome(check: Check, gpus: int, run: Run) -> tuple[str, str, str]:
    """(status, one line, full text) of one check."""
    if gpus < check.gpus:
        why = MULTI_GPU.format(n=check.gpus) if gpus == 1 else f"needs {check.gpus} GPUs, this machine has {gpus}"
        return "skipped", why, why
    if check.run is None:
        return "skipped", "run by pytest -m gpu on this machine", "see pytest_gpu.txt"
    try:
        detail = check.run(run)
        return "pass", detail, detail
    except Skip as why:
        return "skipped", str(why), str(why)
    except Exception as exc:  # one row per check, whatever went wrong; the whole story in its file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return "fail", f"{type(exc).__name__}: {first}", traceback.format_exc()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for every check's full text and the machine's facts")
    args = parser.parse_args(argv)
    lacking = missing()
    if lacking:
        print(lacking)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-acceptance-"))
    (out / "checks").mkdir(parents=True, exist_ok=True)
    (out / "ranks").mkdir(exist_ok=True)
    run, gpus = Run(out), gpu_count()
    print(_needs())
    print(f"# output: {out}", flush=True)
    _machine_files(out)
    rows, started = [], time.monotonic()
    for number, check in enumerate(CHECKS, 1):
        t0 = time.monotonic()
        status, detail, text = _outcome(check, gpus, run)
        rows.append((check.name, status, detail, time.monotonic() - t0))
        slug = re.sub(r"\W+", "_", check.name.lower()).strip("_")[:60]
        (out / "checks" / f"{number:02d}_{slug}.txt").write_text(f"{check.name}: {status}\n\n{text}\n")
        print(f"{check.name:<58} {status + (': ' + detail if status == 'skipped' else ''):<}", flush=True)
    for name, text in run.logs.items():
        (out / "ranks" / f"{name}.txt").write_text(text)
    print()
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  {'result':<8} {'s':>6}  detail")
    for name, status, detail, seconds in rows:
        print(f"{name:<{width}}  {status:<8} {seconds:6.1f}  {detail}")
    failed = [r for r in rows if r[1] == "fail"]
    print(f"\n{sum(r[1] == 'pass' for r in rows)} passed, {len(failed)} failed, "
          f"{sum(r[1] == 'skipped' for r in rows)} skipped in {time.monotonic() - started:.0f} s")
    print(f"everything is in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
