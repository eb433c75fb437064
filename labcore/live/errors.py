"""What a :class:`labcore.Cluster` raises when a rank fails, dies or hangs.

Every error names the rank(s) involved and says what happens next: the cluster
replaces its ranks on the next call, so a learner can fix the cell and rerun it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class HangReport:
    """Where each rank was when a call passed its deadline.

    Its first line names the rank(s) that diverged and how (:func:`labcore.live.hang.headline`),
    then comes each rank's state. ``calls`` holds, for finished ranks, how many collectives
    they issued in the call, where the rank could count them.
    """

    timeout_s: float
    finished: list[int]
    stuck: dict[int, "object"] = field(default_factory=dict)  # rank -> labcore.live.hang.StackSummary
    unreached: list[int] = field(default_factory=list)  # ranks that never took the whole request
    calls: dict[int, int] = field(default_factory=dict)

    @property
    def headline(self) -> str:
        """The first line: who diverged, and how."""
        from labcore.live.hang import headline

        return headline(self.finished, self.stuck, self.unreached, self.calls)

    def __str__(self) -> str:
        return self.describe()

    def describe(self, verdict: bool = True) -> str:
        """The report; without ``verdict``, without its first line (an exercise that asks which rank
        diverged leaves that to the learner), like ``FlightAnalysis.describe(verdict=False)``."""
        silent = len(self.stuck) + len(self.unreached)
        done = "".join(f", rank {r} after {self.calls[r]} collective{'s' * (self.calls[r] != 1)}"
                       for r in self.finished if r in self.calls)
        lines = [self.headline[:1].upper() + self.headline[1:] + "."] if verdict else []
        lines += [f"No reply from {silent} of {len(self.finished) + silent} ranks after {self.timeout_s:g} s.",
                 f"  finished: {self.finished or 'none'}{done}"]
        for rank, where in sorted(self.stuck.items()):
            lines.append(f"  rank {rank}: {where}")
        for rank in self.unreached:
            lines.append(f"  rank {rank}: never read the call from its pipe (is the process stopped, by "
                         "SIGSTOP, Ctrl-Z or a debugger?)")
        collectives = {where.collective for where in self.stuck.values() if where.collective}
        if len(collectives) > 1:
            lines.append("Ranks are waiting in different collectives: every rank must call the "
                         "same collectives in the same order.")
        elif not collectives and self.stuck:
            lines.append("No stuck rank is inside a collective: they are running Python code (a long "
                         "loop, a sleep?). If the work is just slow, raise the timeout: "
                         "Cluster(..., timeout=s) or cl.call(fn, timeout=s).")
        elif collectives and self.finished:
            lines.append("Some ranks finished while others wait: a collective or recv that not "
                         "every rank reached (or that no rank sends to).")
        return "\n".join(lines)


class CollectiveTimeout(ClusterError, TimeoutError):
    """A call did not finish on every rank before its deadline; ``report`` says where ranks were."""

    def __init__(self, report: HangReport):
        self.report = report
        super().__init__(f"{report}\n\n{_RESTART}")
