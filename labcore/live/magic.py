"""``%%ranks N``: run a notebook cell on every rank of a cached cluster.

Each rank keeps its own namespace between ``%%ranks`` cells (as ipyparallel's
engines do), with ``torch``, ``dist``, ``rank``, ``world_size`` and ``device``
predefined. ``--out NAME`` copies NAME from every rank back into the notebook as
a list in rank order. ``--record NAME`` records every collective the cell issues
(:mod:`labcore.live.recorder`): in the cell NAME is the recorder (``with NAME.step():``),
in the notebook the combined Recording.

``--on cl`` runs the cell on an existing cluster held in the notebook variable
``cl`` instead (one made with other options, or on ipyparallel engines).

    %load_ext labcore

    %%ranks 4
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    print(t.item())
"""
from __future__ import annotations

import argparse
import keyword
import shlex
import sys

from labcore.live.base import check_timeout
from labcore.live.cluster import Cluster

_clusters: dict[tuple[int, str], Cluster] = {}
DEFAULT_TIMEOUT_S = 60.0


def get_cluster(world_size: int, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT_S) -> Cluster:
    """The cluster ``%%ranks`` uses for this size and backend, started on first use."""
    key = (world_size, backend)
    cluster = _clusters.get(key)
    if cluster is None or cluster.closed:
        cluster = _clusters[key] = Cluster(world_size, backend=backend, timeout=timeout)
    cluster.timeout = timeout
    return cluster


def close_all() -> None:
    """Stop every cluster the magic started (``%ranks_close`` calls this)."""
    while _clusters:
        _clusters.popitem()[1].close()


class _UsageError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one message, raised; argparse would print and exit
        raise _UsageError(f"%%ranks: {message}.\n{self.format_usage()}example: %%ranks 4 --out result")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%%ranks", add_help=False, description="Run this cell on every rank.")
    p.add_argument("world_size", type=int, nargs="?", help="number of ranks")
    p.add_argument("--on", metavar="CLUSTER",
                   help="run on this notebook variable's cluster (e.g. one on ipyparallel engines)")
    p.add_argument("--backend", default=None, choices=["auto", "gloo", "nccl"],
                   help="the backend of the cluster this cell starts (default auto; not with --on)")
    p.add_argument("--timeout", type=_seconds, default=None,
                   help=f"seconds before a hang report (default {DEFAULT_TIMEOUT_S:g}; with --on, the cluster's own)")
    p.add_argument("--out", action="append", default=[], metavar="NAME",
                   help="copy NAME from every rank into the notebook (a list in rank order)")
    p.add_argument("--record", metavar="NAME", help="record the cell's collectives into NAME (a Recording)")
    return p


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a finite, positive number of seconds (e.g. --timeout 30), not {text!r}") from None
    try:
        return check_timeout(seconds, "--timeout")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--timeout ")) from None


def parse_line(line: str) -> argparse.Namespace:
    """Parse the ``%%ranks`` line; a mistake raises an error that shows the usage."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise _UsageError(f"could not read '%%ranks {line}': {exc}") from None
    args = _parser().parse_args(words)
    if args.world_size is None and args.on is None:
        raise _UsageError("%%ranks needs the number of ranks (e.g. %%ranks 4) or a cluster (%%ranks --on cl)")
    if args.world_size is not None and args.world_size < 1:
        raise _UsageError(f"%%ranks needs at least 1 rank, got {args.world_size}")
    if args.on is not None and args.backend is not None:
        raise _UsageError(f"%%ranks: --backend {args.backend} cannot apply with --on {args.on}, which runs on "
                          f"that cluster's own backend: drop --backend, or start the cluster with the "
                          "backend you want")
    for name in args.out:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise _UsageError(f"%%ranks: --out needs a Python name to copy back, such as result, not {name!r}")
    if args.record is not None:
        from labcore.live.recorder import check_recording_name

        try:
            check_recording_name(args.record)
        except ValueError as exc:
            raise _UsageError(f"%%ranks: {exc}") from None
        if args.record in args.out:
            raise _UsageError(f"%%ranks: --record {args.record} and --out {args.record} would both fill "
                              f"{args.record!r}; give the recording another name")
    return args


def _is_cluster(value) -> bool:
    """Whether ``value`` runs cells as a cluster does (a module with an ``exec`` is not one)."""
    if not (callable(getattr(value, "exec", None)) and callable(getattr(value, "pull", None))):
        return False
    try:
        size = value.world_size
    except Exception:  # noqa: BLE001 - anything that cannot say its size is not a cluster here
        return False
    return isinstance(size, int) and not isinstance(size, bool)


def ranks(line: str, cell: str, user_ns: dict | None = None) -> None:
    """The body of the ``%%ranks`` cell magic."""
    args = parse_line(line)
    if args.on is not None:
        cluster = (user_ns or {}).get(args.on)
        if not _is_cluster(cluster):
            what = "" if args.on not in (user_ns or {}) else f" ({args.on} is a {type(cluster).__name__})"
            raise _UsageError(f"%%ranks --on {args.on}: no cluster named {args.on!r} in the notebook{what} "
                              "(create it first, e.g. cl = lc.Cluster(4))")
        if args.world_size not in (None, cluster.world_size):
            raise _UsageError(f"%%ranks {args.world_size} --on {args.on}: that cluster has "
                              f"{cluster.world_size} ranks")
        timeout = args.timeout           # None: the cluster's own, left as its owner set it
    else:
        timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
        cluster = get_cluster(args.world_size, args.backend or "auto", timeout)
    results = {}
    if args.record:
        from labcore.live.recorder import record_cell

        values, results[args.record] = record_cell(cluster, args.record, cell, timeout)
    else:
        values = cluster.exec(cell, timeout=timeout)
    for rank, value in enumerate(values):
        if value is not None:
            print(f"Out[rank {rank}]: {value}")
    # All or nothing: every name is pulled before any is set, so a name the ranks lack leaves
    # the notebook as it was (not half updated).
    for name in dict.fromkeys(args.out):
        results[name] = cluster.pull(name, timeout=timeout)
    if user_ns is not None:
        user_ns.update(results)
    sys.stdout.flush()


def register(ipython) -> None:
    """Register ``%%ranks`` and ``%ranks_close`` with an IPython shell."""
    def ranks_magic(line, cell):
        ranks(line, cell, ipython.user_ns)

    def ranks_close(line=""):
        close_all()

    ipython.register_magic_function(ranks_magic, magic_kind="cell", magic_name="ranks")
    ipython.register_magic_function(ranks_close, magic_kind="line", magic_name="ranks_close")
