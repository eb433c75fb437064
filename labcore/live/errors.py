"""What a :class:`labcore.Cluster` raises when a rank fails, dies or hangs.

Every error names the rank(s) involved and says what happens next: the cluster
replaces its ranks on the next call, so a learner can fix the cell and rerun it.
"""
from __future__ import annotations


_RESTART = ("The cluster stopped its ranks; the next call starts a fresh group "
            "(names defined by earlier %%ranks cells are gone).")


class ClusterError(RuntimeError):
    """Base class of the lab's cluster errors."""


class RankError(ClusterError):
    """A rank raised an exception inside the function or cell it was running.

    Attributes
    ----------
    rank : int
        The first rank that reported an exception.
    errors : dict[int, tuple[str, str, str]]
        Every rank that failed: exception type name, message, remote traceback.
    restarted : bool
        Whether the other ranks were stuck and the group had to be replaced.
    """

    def __init__(self, errors: dict, restarted: bool):
        self.errors = dict(sorted(errors.items()))
        self.rank = next(iter(self.errors))
        self.restarted = restarted
        parts = []
        for rank, (name, message, tb) in self.errors.items():
            parts.append(f"rank {rank} raised {name}: {message}\n\nRemote traceback (rank {rank}):\n{tb.rstrip()}")
        tail = _RESTART if restarted else "The other ranks finished; the cluster is still usable."
        super().__init__("\n\n".join(parts) + "\n\n" + tail)


class RankDied(ClusterError):
    """A rank's process exited while it was working (os._exit, a signal, a crash)."""

    def __init__(self, rank: int, exitcode: int | None, output: str = ""):
        self.rank = rank
        self.exitcode = exitcode
        if exitcode is None:   # an engine: its exit status went to its launcher
            how = "died (its process is gone)"
        elif exitcode < 0:
            import signal
            how = f"was killed by {signal.Signals(-exitcode).name}"
        else:
            how = f"exited with code {exitcode}"
        msg = f"rank {rank} {how} while running the call."
        if output.strip():
            msg += f"\n\nIts last output:\n{output.rstrip()}"
        super().__init__(msg + "\n\n" + _RESTART)


class CollectiveTimeout(ClusterError, TimeoutError):
    """A call did not finish on every rank before its deadline; ``report`` says where ranks were."""

    def __init__(self, report: "HangReport"):  # noqa: F821 (labcore.live.hang.HangReport)
        self.report = report
        super().__init__(f"{report}\n\n{_RESTART}")
