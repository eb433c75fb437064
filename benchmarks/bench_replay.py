"""How replay's time grows with the collectives of one step: 1,000, 2,000, 4,000 and 20,000.

Goal (issue 20, 2-core machine): a step of 20,000 collectives replayed in under 5 s, and the
time about doubling when the collectives double (linear), where it used to grow four-fold
(quadratic: 1,000 took 2.1 s, 2,000 8.4 s, 4,000 27 s, 20,000 over 300 s).

The recording is one step of 4 ranks, built directly (no cluster needed): DDP-like per-parameter
all-reduces (18 sizes from 4 KiB to 16 MiB, as the layers of a model repeat), one every 40 us, most
overlapped with backward compute recorded beside them, every fifth one blocking, with the compute
scopes the profiler would see. It is replayed on the 32-rank ``multinode`` preset with NCCL's
tuner's picks (so the 18 sizes are simulated once each and the rest is replay's own walk).

Side by side in one run: the replay of this checkout, and the replay of commit 76cf9b2 (loaded
from git as a module; skipped with a note when git or the commit is not at hand). The old code
is run up to 4,000 collectives unless ``--old-all`` is given (20,000 took over 300 s).

Run:  python benchmarks/bench_replay.py [--old-all]
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

COUNTS = (1_000, 2_000, 4_000, 20_000)
OLD_COMMIT = "76cf9b2"
MACHINE = None  # set in main()
RANKS = 4
SIZES = [4 << 10 << (k % 13) for k in range(18)]       # 4 KiB .. 16 MiB, repeating like layers


def recording(n: int):
    """One step of ``n`` collectives on each of 4 ranks (see the module docstring)."""
    from labcore.live.recorder import Recording

    gap, length = 40e-6, 30e-6
    issued = np.arange(n) * gap
    blocking = np.arange(n) % 5 == 4
    rows, scopes = [], []
    for rank in range(RANKS):
        for k in range(n):
            rows.append(dict(rank=rank, step=0, op="all_reduce", bytes=SIZES[k % len(SIZES)], in_bytes=0,
                             out_bytes=0, dtype="float", group="0", group_ranks=tuple(range(RANKS)),
                             group_size=RANKS, seq=k, issued_s=issued[k], start_s=issued[k],
                             end_s=issued[k] + length, time_us=length * 1e6, overlapped=not blocking[k],
                             frame="", via="", backend_op="gloo:all_reduce"))
            if not blocking[k]:       # backward compute recorded while the collective ran
                scopes.append(dict(rank=rank, step=0, name="AddmmBackward0", start_s=issued[k] + 2e-6,
                                   end_s=issued[k] + 20e-6))
    steps = pd.DataFrame([dict(rank=r, step=0, start_s=0.0, end_s=n * gap + 1e-3) for r in range(RANKS)])
    return Recording("bench", RANKS, "gloo", pd.DataFrame(rows), pd.DataFrame(scopes), steps, tuple(range(RANKS)))


def old_replay():
    """``replay`` of commit 76cf9b2, or None with the reason."""
    try:
        source = subprocess.run(["git", "show", f"{OLD_COMMIT}:labcore/sim/replays.py"], capture_output=True,
                                text=True, check=True, timeout=60, cwd=Path(__file__).parent).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"old code not at hand ({err})"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "replays_76cf9b2.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("replays_76cf9b2", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module           # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module.replay, ""


def per_doubling(n: int, t: float | None, before: tuple | None) -> str:
    """The time's growth for twice the collectives, from the count before: (t / t0) ** (log 2 / log(n / n0))."""
    if not t or not before:
        return f"{'':>6}"
    n0, t0 = before
    return f"{(t / t0) ** (math.log(2) / math.log(n / n0)):6.2f}"


def machine():
    """The multinode preset for the new replay, without NCCL's view of it: the old replay (given the
    preset's name) does not hand that view to the placed group, so with it the new replay would also
    play NCCL's mid-size mechanisms (labcore.sim.nccl.mechanisms) and the totals would differ for that
    reason, not the walk's."""
    from labcore.sim import presets

    topology = presets.topology("multinode")
    topology.nccl = None
    return topology


def timed(fn, rec, topology) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process, the replayed step's overlapped total)."""
    start, cpu = time.perf_counter(), time.process_time()
    r = fn(rec, topology)
    return time.perf_counter() - start, time.process_time() - cpu, r.overlap_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old-all", action="store_true", help="run the old code at 20,000 too (over 300 s)")
    args = p.parse_args()
    from labcore.sim.apps.replay import replay

    global MACHINE
    MACHINE = machine()
    old, why = old_replay()
    replay(recording(10), MACHINE)                  # warm up: imports, the tuner, the 18 sizes' first runs
    print(f"replay of one step, {RANKS} ranks, on multinode (32 ranks); wall and CPU seconds, and the wall time's "
          "growth per doubling of the collectives (2.0 = linear, 4.0 = quadratic)")
    print(f"{'collectives':>11} {'new s':>8} {'cpu s':>7} {'x':>6} {'old s':>8} {'cpu s':>7} {'x':>6}  same prediction")
    prev_new = prev_old = None
    results = {}
    for n in COUNTS:
        rec = recording(n)
        t_new, cpu_new, total_new = timed(replay, rec, MACHINE)
        run_old = old is not None and (n <= 4_000 or args.old_all)
        t_old, cpu_old, total_old = timed(old, rec, "multinode") if run_old else (None, None, None)
        same = "" if total_old is None else ("yes" if total_old == total_new else f"NO ({total_old} vs {total_new})")
        old_cols = f"{t_old:8.3f} {cpu_old:7.3f}" if t_old else f"{'n/a':>8} {'':>7}"
        print(f"{n:>11} {t_new:>8.3f} {cpu_new:>7.3f} {per_doubling(n, t_new, prev_new)} {old_cols} "
              f"{per_doubling(n, t_old, prev_old)}  {same}")
        prev_new, prev_old = (n, t_new), ((n, t_old) if t_old else None)
        results[n] = (t_new, cpu_new)
    if why:
        print(why)
    wall, cpu = results[20_000]
    print(f"20,000 collectives: {wall:.2f} s wall, {cpu:.2f} s CPU (goal < 5 s): {'met' if wall < 5 else 'NOT met'}"
          + ("" if wall < 5 or cpu >= 5 else " on the wall clock; met in CPU time (the machine is loaded)"))


if __name__ == "__main__":
    sys.exit(main())
