"""Read a stuck rank's stack dump (faulthandler, on SIGUSR1) into "which collective, which line",
and the ranks' states together into the one line that says who diverged and how.

Example
-------
>>> s = StackSummary("all_reduce", "step (train.py, line 9)", "...")
>>> headline(finished=[2], stuck={0: s, 1: s, 3: s}, calls={2: 0})
'rank 2 never entered all_reduce; ranks 0, 1, 3 wait in it'
"""
from __future__ import annotations

import os
import re
import sysconfig
from collections import Counter
from dataclasses import dataclass, field

_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>\S+)')
# Frames inside torch.distributed that are decorators or helpers, not the call a learner made.
_WRAPPERS = {"wrapper", "_fn", "inner", "_get_default_group", "_check_single_tensor"}
_C10D = os.path.join("torch", "distributed", "distributed_c10d.py")
_STDLIB = sysconfig.get_paths()["stdlib"]
# The function of the worker that waits for the GPU before replying (labcore.live.progress).
_GPU_WAIT = "finish_gpu_work"
_SENDS, _RECVS = {"send", "isend"}, {"recv", "irecv"}


@dataclass(frozen=True)
class StackSummary:
    """The collective a rank is blocked in and the user's line that called it, or waits at.

    ``gpu`` is the collective the rank queued and had not finished (the flight recorder's
    unfinished entry, :mod:`labcore.live.progress`) while its stack showed no collective: NCCL
    queues a collective and returns, and the rank waits for its GPU at a later ``.item()``,
    ``.tolist()`` or synchronize (``user_frame``), or in the worker before it replies (no
    ``user_frame``); ``collective`` is then that one's op.
    """

    collective: str | None
    user_frame: str | None
    stack: str
    gpu: str | None = None

    def __str__(self) -> str:
        if not self.stack:  # faulthandler answers even inside C code, so the process did not run
            return ("gave no stack dump (is the process stopped, by SIGSTOP, Ctrl-Z or a debugger, "
                    "or did its code take over SIGUSR1?)")
        if self.gpu and self.user_frame:
            return (f"waits at {self.user_frame} for {self.gpu}, which it queued (the call returned at once, as "
                    "NCCL's do) and which has not finished")
        if self.gpu:
            where = f"returned from the code, waiting for its GPU, still in {self.gpu}"
        elif self.collective:
            where = f"in {self.collective}()"
        else:
            where = "not in a torch.distributed call"
        if self.user_frame:
            where += f", called from {self.user_frame}"
        return where


def _is_library(path: str) -> bool:
    """Frames a learner did not write: torch, the lab's own cluster code, Python's standard library
    and installed packages (torch 2.13's deprecation wrappers live in typing_extensions.py), except
    the lab's exercises, which stand in for a learner's code."""
    if "/labcore/" in path:
        return "/labcore/live/" in path
    return (path.startswith("<frozen") or path.startswith(_STDLIB) or "/site-packages/" in path
            or "/dist-packages/" in path)


def _collective(frames: list[dict]) -> str | None:
    """The torch.distributed function the learner called: the outermost public one of
    distributed_c10d (``all_gather_into_tensor``, not the ``all_gather_single`` it calls),
    else the innermost torch.distributed frame that is not a wrapper (DDP's, FSDP's)."""
    public = [f["func"] for f in frames if f["file"].endswith(_C10D) and not f["func"].startswith("_")
              and f["func"] not in _WRAPPERS]
    if public:
        return public[-1]
    return next((f["func"] for f in frames if "torch/distributed" in f["file"] and f["func"] not in _WRAPPERS), None)


def summarize_stack(dump: str, gpu: tuple[str, str] | None = None) -> StackSummary:
    """Pick the thread that runs the worker loop and find the collective it is in and the user's line.

    faulthandler prints each thread most recent call first; the worker's own
    thread is the one serving requests in labcore's worker module (its lifeline
    watcher lives there too, but never in ``serve``). ``gpu`` is
    :func:`labcore.live.progress.read_gpu` of the rank's snapshot: the collective it queued and
    had not finished, used when its stack shows no collective (it waits for its GPU).
    """
    threads = [block for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump) if block.strip()]
    main = next((t for t in threads if re.search(r"labcore/live/worker\.py\", line \d+ in serve", t)),
                threads[0] if threads else "")
    frames = [m.groupdict() for m in map(_FRAME.match, main.splitlines()) if m]
    collective = _collective(frames)
    user = next((f for f in frames if not _is_library(f["file"])), None)
    user_frame = f'{user["func"]} ({user["file"]}, line {user["line"]})' if user else None
    if any(f["func"] == _GPU_WAIT for f in frames):
        op, what = gpu or (None, "work the call queued (the flight recorder names no collective)")
        return StackSummary(op, None, main.strip(), what)
    if collective is None and gpu is not None:   # waiting, at a line of its own, for a collective it queued
        return StackSummary(gpu[0], user_frame, main.strip(), gpu[1])
    return StackSummary(collective, user_frame, main.strip())


def _ranks(ranks, both: bool = False) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) == 2:
        return f"ranks {ranks[0]} and {ranks[1]}" + (" both" if both else "")
    return "ranks " + ", ".join(map(str, ranks))


def _point_to_point(in_op: dict[int, str]) -> str:
    sends = [r for r, op in in_op.items() if op in _SENDS]
    recvs = [r for r, op in in_op.items() if op in _RECVS]
    if sends and not recvs:
        return (f"{_ranks(sends, both=True)} wait in send, and no rank waits in recv: a send waits for its "
                "peer's recv")
    if recvs and not sends:
        return f"{_ranks(recvs, both=True)} wait in recv, and no rank is sending: each waits for a send"
    return (f"{_ranks(sends)} wait{'s' * (len(sends) == 1)} in send and {_ranks(recvs)} in recv: sends and "
            "receives that do not pair up (peer, size or order)")


def _different_ops(in_op: dict[int, str]) -> str:
    counts = Counter(in_op.values()).most_common()
    (top, n), rest = counts[0], counts[1:]
    if rest and rest[0][1] == n:  # no majority: only the code says which is meant
        camps = " and ".join(f"{_ranks(r for r, o in in_op.items() if o == op)} in {op}" for op, _ in counts)
        return f"the ranks called different collectives: {camps}"
    odd = "; ".join(f"{_ranks(r for r, o in in_op.items() if o == op)} called {op}" for op, _ in rest)
    return f"{odd} where {_ranks(r for r, o in in_op.items() if o == top)} called {top}"


def _left_early(op: str, waiting: list[int], finished: list[int], calls: dict) -> str:
    counts = [calls.get(r) for r in finished]
    if counts and all(c == 0 for c in counts):
        return f"{_ranks(finished)} never entered {op}; {_ranks(waiting)} wait in it"
    done = (f" after {counts[0]} collective{'s' * (counts[0] != 1)}" if None not in counts
            and len(set(counts)) == 1 else "")
    if len(waiting) < len(finished):
        whose = "its call did not match theirs" if len(waiting) == 1 else "their calls did not match"
        return (f"{_ranks(waiting)} still wait{'s' * (len(waiting) == 1)} in {op}, which {_ranks(finished)} "
                f"left{done}: {whose} (sizes, or order)")
    if len(finished) < len(waiting):
        maybe = "" if done else " never entered it, or"
        return (f"{_ranks(finished)} returned{done} while {_ranks(waiting)} wait in {op}: "
                f"{'it' if len(finished) == 1 else 'they'}{maybe} did not match their call")
    return f"{_ranks(waiting)} wait in {op}; {_ranks(finished)} returned from the call"


def _counted(finished: list[int], busy: list[int], calls: dict) -> str | None:
    """Where no record names a collective (the flight recorder off): ranks that returned after fewer
    collectives than ranks still running issued skipped the one those wait for."""
    done = {calls.get(r) for r in finished}
    running = {calls.get(r) for r in busy}
    if not finished or not busy or len(done) != 1 or len(running) != 1 or None in done | running:
        return None
    (d,), (n,) = done, running
    if n <= d:
        return None
    return (f"{_ranks(finished)} returned after {d} collective{'s' * (d != 1)} while {_ranks(busy)} issued {n} and "
            f"{'has' if len(busy) == 1 else 'have'} not returned: a collective {_ranks(finished)} never entered "
            "(no flight recorder names it: it is off on these ranks)")


def headline(finished: list[int], stuck: dict, unreached: list[int] = (), calls: dict | None = None) -> str:
    """One line naming the rank(s) that diverged and how, from where every rank was.

    ``stuck`` maps ranks to :class:`StackSummary`; ``calls`` ranks to the number of collectives
    they issued in the call (when counted; a stuck rank's count is its count so far).
    """
    calls = calls or {}
    if unreached:
        return f"{_ranks(unreached)} never read the call (stopped, by SIGSTOP, Ctrl-Z or a debugger?)"
    silent = [r for r, s in stuck.items() if not s.stack]
    if silent:
        return f"{_ranks(silent)} gave no stack dump (stopped, or its code took over SIGUSR1?)"
    in_op = {r: s.collective for r, s in stuck.items() if s.collective}
    busy = sorted(r for r in stuck if r not in in_op)
    on_gpu = [r for r in busy if stuck[r].gpu]
    if on_gpu and len(on_gpu) == len(busy) and not in_op:
        return f"{_ranks(on_gpu)} returned from the code but wait{'s' * (len(on_gpu) == 1)} for the GPU to finish it"
    importing = [r for r in busy if (stuck[r].user_frame or "").startswith("<module> (")]
    if not in_op and importing:
        where = stuck[importing[0]].user_frame.removeprefix("<module> ")
        return (f"{_ranks(importing)} {'is' if len(importing) == 1 else 'are'} still importing the call's code "
                f"{where}: imports on the ranks count toward the call's timeout")
    counted = _counted(finished, busy, calls) if not in_op else None
    if counted:
        return counted
    if not in_op:
        one = len(busy) == 1
        return (f"no rank is in a collective: {_ranks(busy)} {'is' if one else 'are'} running "
                f"{'its' if one else 'their'} own code (a loop, a sleep?)")
    if all(op in _SENDS | _RECVS for op in in_op.values()):
        return _point_to_point(in_op)
    if len(set(in_op.values())) > 1:
        return _different_ops(in_op)
    op = next(iter(in_op.values()))
    waiting = sorted(in_op)
    if busy:
        return (f"{_ranks(busy)} {'has' if len(busy) == 1 else 'have'} not reached {op}: still running "
                f"{'its' if len(busy) == 1 else 'their'} own code; {_ranks(waiting)} wait in it")
    if finished:
        return _left_early(op, waiting, sorted(finished), calls)
    return (f"every rank waits in {op}: no rank diverged that the stacks show (sizes? a rank of "
            "another group?)")


@dataclass
class HangReport:
    """Where each rank was when a call passed its deadline.

    Its first line names the rank(s) that diverged and how (:func:`headline`),
    then comes each rank's state. ``calls`` holds, for finished ranks, how many collectives
    they issued in the call, where the rank could count them.
    """

    timeout_s: float
    finished: list[int]
    stuck: dict[int, StackSummary] = field(default_factory=dict)
    unreached: list[int] = field(default_factory=list)  # ranks that never took the whole request
    calls: dict[int, int] = field(default_factory=dict)

    @property
    def headline(self) -> str:
        """The first line: who diverged, and how."""
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



def report(timeout: float, finished: list[int], dumps: dict[int, str], unreached: list[int], path,
           request_id: int):
    """The :class:`HangReport` of a call, from the stack dumps and what the ranks
    left in their run folder (``path(rank, kind)`` names a rank's file)."""
    from labcore.live import progress

    stuck = {r: summarize_stack(dump, progress.read_gpu(path(r, "gpu"))) for r, dump in dumps.items()}
    calls = {r: progress.read_calls(path(r, "calls"), request_id) for r in [*finished, *dumps]}
    return HangReport(timeout, finished, stuck, unreached, calls={r: c for r, c in calls.items() if c is not None})
