"""A training step's own compute as load: processes that train a model while collectives are timed.

:func:`labcore.bench.noisy_neighbours` is *another* job on the machine (a busy loop).
A training job also loads the machine itself: while some ranks communicate, the other
ranks (and, with DDP's overlap, the same ones) run forward and backward passes that
compete for cores and memory bandwidth. :func:`training_neighbours` starts ``n``
processes that each train a small MLP with torch (forward, backward, SGD step, one
thread each), so a sweep measured inside the ``with`` block sees that load.

The block starts only once every process has finished a first step (torch imported,
model built), so the load is really on while measuring; each process stops when the
block ends, when the notebook's process goes away, or after ``max_seconds``.

Example
-------
>>> from labcore.evidence.compute_load import training_neighbours
>>> with training_neighbours(1, max_seconds=60) as pids:               # doctest: +SKIP
...     len(pids)
1
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from contextlib import contextmanager

from labcore import validate
from labcore.evidence.load import stop_processes

# One process: train an MLP in a loop, say "ready" after the first step, and stop when the
# parent is gone or the time is up (checked after every step, a few ms).
_TRAIN = """
import os, sys, time
import torch
parent, end, width = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.Tanh())])
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(64, width)
first = True
while os.getppid() == parent and time.monotonic() < end:
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    if first:
        print("ready", flush=True)
        first = False
"""


def _wait_ready(procs, timeout: float) -> None:
    """Return once every process printed "ready"; raise naming the problem otherwise."""
    waiting = {p.stdout.fileno(): p for p in procs}
    deadline = time.monotonic() + timeout
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(waiting)} training process(es) did not finish a first step within "
                               f"{timeout:g} s; the machine may be overloaded: use fewer (n) or a longer "
                               "ready_timeout")
        readable, _, _ = select.select(list(waiting), [], [], min(left, 0.5))
        for fd in readable:
            line = waiting[fd].stdout.readline()
            if line.strip() == "ready":
                del waiting[fd]
            elif not line:
                code = waiting[fd].wait(timeout=5)
                raise RuntimeError(f"a training process exited with status {code} before its first step "
                                   "(is torch importable by this Python?)")


@contextmanager
def training_neighbours(n: int = 2, width: int = 512, max_seconds: float = 300.0,
                        ready_timeout: float = 60.0):
    """Run ``n`` processes training an MLP for the duration of the ``with`` block; yields their pids.

    Parameters
    ----------
    n : how many training processes (each uses one core, like one more rank's compute).
    width : the MLP's width (4 layers of width x width): larger is heavier per step.
    max_seconds : each stops by itself after this long, even if the block is still running.
    ready_timeout : seconds to wait for every process's first step before giving up.
    """
    n, width = validate.whole_number(n, "n", least=1), validate.whole_number(width, "width", least=1)
    for name, value in (("max_seconds", max_seconds), ("ready_timeout", ready_timeout)):
        validate.positive_number(value, name, must="a finite number of seconds above 0")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", _TRAIN, str(os.getpid()), str(max_seconds),
                                           str(width)], stdout=subprocess.PIPE, text=True, env=env))
        _wait_ready(procs, ready_timeout)
        yield [p.pid for p in procs]
    finally:
        stop_processes(procs)
