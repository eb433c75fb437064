"""``sweep``: nccl-tests' size sweep of one collective, from a notebook cell.

The notebook side plans the sweep (sizes, memory), then asks the ranks to run
:func:`labcore.bench.harness.measure` once per size, so a progress bar
moves as sizes finish and every size's buffers are freed before the next one.

Example
-------
>>> import labcore as lc
>>> with lc.Cluster(2, backend="gloo") as cl:                      # doctest: +SKIP
...     df = lc.bench.sweep(cl, "all_reduce", max_bytes=1 << 20, factor=4)
>>> df[["size", "placement", "time_us", "busbw", "wrong"]]         # doctest: +SKIP
"""
from __future__ import annotations

from contextlib import nullcontext

import pandas as pd

from labcore import validate
from labcore.bench import checks, memory
from labcore.bench import ops as _ops
from labcore.bench.harness import PLACEMENTS, measure
from labcore.readers.nccl_tests import COLUMNS
from labcore.bench.units import dtype_of, size_steps
from labcore.live.settings import check_env


# Largest size of a default sweep (nccl-tests' default -e is 32M); smaller if memory is short.
DEFAULT_MAX_BYTES = 32 << 20


# torch's flight recorder records a Python stack with every collective (2000 entries by default in
# torch 2.13, FlightRecorder.hpp); nccl-tests records nothing, so a sweep's own ranks run without it.
RECORDER_OFF = {"TORCH_FR_BUFFER_SIZE": "0"}


def _free_memory():
    return memory.free_bytes_here()


def _recorder_entries() -> int:
    """Entries this rank's flight recorders keep (0: off)."""
    import os

    value = os.environ.get("TORCH_FR_BUFFER_SIZE", "")
    return int(value) if value.strip().isdigit() else 2000


def rank_budget(cl) -> tuple[int, str]:
    """Bytes each rank may use, asked of the ranks themselves (the notebook never touches CUDA)."""
    kinds = cl.call(_free_memory, timeout=60)
    kind = kinds[0][0]
    free = min(f for _, f in kinds)
    where = "GPU memory" if kind == "cuda" else f"host RAM shared by {cl.world_size} ranks"
    return memory.per_rank_budget(kind, free, cl.world_size), where


def plan_sizes(op: str, nranks: int, itemsize: int, budget: int | None, min_bytes=8, max_bytes=None,
               factor=2, step=None, check=True, where="host RAM") -> list[int]:
    """The requested sizes to measure, or an error naming the fix.

    Errors: a size that cannot fit in ``budget`` bytes per rank (MemoryError), and
    sizes that repeat or that give no rank any data (ValueError). With
    ``max_bytes=None`` the sweep goes up to 32 MiB, stopping early at the largest
    size that fits. ``budget=None`` checks everything but memory (before the ranks
    can say how much they have).
    """
    if _ops.op_name(op) == _ops.BARRIER:
        _size(min_bytes, "-b (min_bytes)")   # a barrier moves no data, but a size given is still read
        if max_bytes is not None:
            _size(max_bytes, "-e (max_bytes)")
        return [0]
    factor = checks.check_factor(factor)
    lo = _size(min_bytes, "-b (min_bytes)")
    step = _size(step, "-i (step)") if step is not None else None
    if max_bytes is None:
        sizes = size_steps(lo, max(lo, DEFAULT_MAX_BYTES), factor, step)
        if budget is not None:
            fitting = memory.largest_fitting(op, sizes, nranks, itemsize, budget, check)
            if not fitting:
                memory.require_fit(op, sizes[0], nranks, itemsize, budget, check, where)
            sizes = fitting
    else:
        sizes = size_steps(lo, _size(max_bytes, "-e (max_bytes)"), factor, step)
        if budget is not None:
            memory.require_fit(op, max(sizes), nranks, itemsize, budget, check, where)
    checks.check_sizes(op, sizes, nranks, itemsize)
    return sizes


def _size(value, flag: str) -> int:
    """``value`` read as nccl-tests reads ``-b/-e/-i``, its error naming the flag it came from."""
    return validate.size(value, flag, nccl_tests=True)


def _validate(op, nranks, dtype, redop, root, warmup, iters, placements, repeats, slowdown, check, corrupt,
              timeout):
    from labcore.live.base import check_timeout

    name = checks.check_collective(op, nranks, redop, root)
    _, torch_dtype = dtype_of(dtype)
    warmup, iters, repeats = checks.check_counts(warmup, iters, repeats)
    slowdown = validate.whole_number(slowdown, "slowdown", least=1)
    corrupt = validate.whole_number(corrupt, "corrupt", least=0)
    if not isinstance(check, bool):
        raise ValueError(f"check must be True or False, not {check!r}")
    if timeout is not None:
        check_timeout(timeout)
    if isinstance(placements, str) or not all(isinstance(p, str) for p in placements):
        raise ValueError(f"placements must be a tuple of placement names such as ('in-place',), not {placements!r}")
    placements = tuple(placements)
    if not placements or set(placements) - set(PLACEMENTS) or len(set(placements)) != len(placements):
        raise ValueError(f"placements must name each of {PLACEMENTS} at most once (and one at least), "
                         f"got {placements}")
    # Plain ints from here on (numpy's integers are accepted, and sent to the ranks as ints).
    counts = dict(root=validate.whole(root), warmup=warmup, iters=iters, repeats=repeats, slowdown=slowdown,
                  corrupt=corrupt)
    return name, torch_dtype, placements, counts


def sweep(cluster, op: str = "all_reduce", *, min_bytes=8, max_bytes=None, factor: float = 2,
          step=None, dtype="float", redop: str = "sum", root: int = 0, warmup: int = 5,
          iters: int = 20, placements=PLACEMENTS, check: bool = True, env: dict | None = None,
          progress: bool = True, timeout: float | None = None, corrupt: int = 0, repeats: int = 1,
          slowdown: int = 1, flight_recorder: bool = False) -> pd.DataFrame:
    """Measure ``op`` over a range of sizes the way nccl-tests does.

    Parameters
    ----------
    cluster : labcore.Cluster or int
        The ranks to use; an int starts a cluster of that many ranks for this sweep.
    op : str
        all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, gather,
        scatter, sendrecv (ring neighbours), hypercube (all-gather by recursive doubling over
        point-to-point, power-of-two ranks) or barrier (latency only).
    min_bytes, max_bytes : int or str
        First and last requested size (``8``, ``"0.3K"``, ``"128M"``), read as nccl-tests'
        ``-b``/``-e``. The printed ``size`` is the larger per-rank buffer after nccl-tests'
        rounding (split buffers: each rank's share down to 16 bytes, so small sizes give
        size-0 rows). ``max_bytes=None``: up to 32 MiB, less if memory is short.
    factor, step : sizes multiply by ``factor``, or grow by ``step`` bytes when it is given.
    dtype : nccl-tests type name ("float", "half", "bfloat16", "int8", ...) or torch dtype.
    redop : "sum", "prod", "max", "min" or "avg" (reductions only).
    root : root rank of broadcast, reduce, gather and scatter.
    warmup, iters : untimed calls, then timed calls, per size and placement (same on every rank).
    placements : ("out-of-place", "in-place") or either one.
    check : run once more on verifiable inputs and count wrong elements (#wrong, -1 when off).
    env : environment for the ranks, e.g. ``{"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring"}``;
        NCCL reads it at start-up, so the sweep runs on a fresh cluster of the same size and
        backend, and NCCL's INFO lines, from the ranks' start-up (where NCCL builds its
        communicator and logs its version, graphs, channels and TUNING table) to the last size,
        are parsed into ``df.attrs["nccl"]``.
    progress : show a tqdm progress bar over the sizes.
    timeout : seconds one size may take before the ranks are reported hung (cluster default).
    corrupt : damage this many output elements on every checked rank after the check's call,
        to watch #wrong catch it (a teaching aid; 0 in real use).
    repeats : run the whole size sweep this many times, interleaved (every size once, then
        again), as nccl-tests' ``-N``; :func:`labcore.evidence.compare` needs repeats to say
        more than "inconclusive".
    slowdown : issue the collective this many times per timed call: a real slowdown by
        about that factor, to check that a regression gate catches it (1 in real use).
    flight_recorder : keep torch's flight recorder on in the ranks the sweep starts (off by
        default: it records a Python stack with every collective, which nccl-tests does not pay).
        A cluster handed in runs as it was started; ``df.attrs["params"]["flight_recorder"]``
        says how many entries its ranks kept (0: off).

    Returns
    -------
    pandas.DataFrame, one row per size and placement, columns ``op, size, count, type, redop,
    root, ranks, backend, placement, time_us, algbw, busbw, wrong, note, median_us, repeat,
    wrong_ranks`` (GB/s with GB = 1e9 bytes; ``wrong`` -1 where not checked; ``note`` labels
    emulated or unchecked placements; ``median_us`` is the median call, averaged over ranks:
    steadier than the mean on a shared machine; ``repeat`` numbers the sweeps from 0;
    ``wrong_ranks`` counts the ranks whose check failed; ``backend`` is the backend that ran
    the sizes, "nccl" or "gloo"). ``df.attrs`` holds the parameters, each rank's captured output
    from its start-up on (``"log"``) and, on NCCL or when NCCL logged, ``"nccl"`` (the parsed
    :class:`~labcore.readers.nccl_log.NcclLog`).

    Examples
    --------
    >>> import labcore as lc
    >>> df = lc.bench.sweep(2, "broadcast", max_bytes="64K", factor=8)   # doctest: +SKIP
    >>> (df.wrong == 0).all()                                           # doctest: +SKIP
    True
    """
    from labcore.live.cluster import Cluster
    from labcore.live.sysinfo import choose_backend

    owned = validate.whole(cluster) is not None
    if not owned and not callable(getattr(cluster, "call", None)):
        raise TypeError(f"sweep runs on a cluster (lc.Cluster, lc.EngineCluster) or a number of ranks to "
                        f"start, not {type(cluster).__name__}")
    nranks = checks.check_ranks(cluster) if owned else cluster.world_size
    cluster = nranks if owned else cluster
    name, torch_dtype, placements, counts = _validate(op, nranks, dtype, redop, root, warmup, iters,
                                                      placements, repeats, slowdown, check, corrupt, timeout)
    root, warmup, iters, repeats, slowdown, corrupt = (counts[k] for k in ("root", "warmup", "iters", "repeats",
                                                                            "slowdown", "corrupt"))
    factor = checks.check_factor(factor)
    env = check_env(env)
    if not isinstance(flight_recorder, bool):
        raise ValueError(f"flight_recorder must be True or False, not {flight_recorder!r}")
    own_env = dict(env or {}) if flight_recorder else {**RECORDER_OFF, **(env or {})}
    # Checked now, before any rank starts: what the backend can run, the sizes and, for ranks
    # this call starts on the CPU, their memory (the ranks of a given cluster say how much they have).
    backend = choose_backend(nranks, "auto") if owned else getattr(cluster, "backend", None)
    checks.check_support(name, torch_dtype, redop, backend)
    budget, where = memory.local_budget(nranks) if owned and backend == "gloo" else (None, "")
    plan_sizes(name, nranks, torch_dtype.itemsize, budget, min_bytes, max_bytes, factor, step, check, where)
    if owned:
        cl = Cluster(cluster, env=own_env, show_output=False)
    elif env:
        cl = Cluster(cluster.world_size, backend=cluster.backend, env=own_env, show_output=False)
        owned = True
    else:
        cl = cluster
    with (cl if owned else nullcontext(cl)):
        return _sweep_on(cl, name, torch_dtype, min_bytes, max_bytes, factor, step, dtype, redop, root,
                         warmup, iters, placements, check, env, progress, timeout, corrupt,
                         repeats, slowdown)


def _sweep_on(cl, name, torch_dtype, min_bytes, max_bytes, factor, step, dtype, redop, root, warmup,
              iters, placements, check, env, progress, timeout, corrupt, repeats,
              slowdown) -> pd.DataFrame:
    from tqdm.auto import tqdm

    from labcore.readers import nccl_log

    # every call's output record, from the ranks' start-up on (NCCL logs its init there)
    calls = [getattr(cl, "start_output", [])]
    budget, where = rank_budget(cl)
    calls.append(cl.last_output)
    sizes = plan_sizes(name, cl.world_size, torch_dtype.itemsize, budget, min_bytes, max_bytes,
                       factor, step, check, where)
    spec = dict(op=name, dtype=dtype_of(dtype)[0], redop=redop, root=root, warmup=warmup,
                iters=iters, placements=placements, check=check, corrupt=corrupt, slowdown=slowdown)
    recorder = min(cl.call(_recorder_entries, timeout=60))
    calls.append(cl.last_output)
    rows = []
    runs = ((rep, nbytes) for rep in range(repeats) for nbytes in sizes)   # lazily: repeats x sizes may be long
    with tqdm(runs, total=repeats * len(sizes), desc=f"{name} on {cl.world_size} ranks ({cl.backend})",
              unit="size", disable=not progress, leave=False) as bar:
        for rep, nbytes in bar:
            got = cl.call(measure, args=({**spec, "nbytes": nbytes},), timeout=timeout)[0]
            rows += [dict(row, repeat=rep) for row in got]
            calls.append(cl.last_output)   # the record itself: lines a rank prints later join it
            if rows:
                bar.set_postfix(busbw=f"{rows[-1]['busbw']:.3g} GB/s")
    calls[-1] = cl.last_output   # read again: what the ranks printed since the last call returned joins it
    logs = ["".join(out + err for out, err in (call[r] for call in calls if r < len(call)))
            for r in range(cl.world_size)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs.update(params=dict(spec, ranks=cl.world_size, backend=cl.backend, env=dict(env or {}),
                                min_bytes=min_bytes, max_bytes=max_bytes, factor=factor, step=step,
                                repeats=repeats, flight_recorder=recorder),
                    log=logs)
    parsed = nccl_log.parse(logs)
    if parsed.found or cl.backend == "nccl":
        df.attrs["nccl"] = parsed
    return df
