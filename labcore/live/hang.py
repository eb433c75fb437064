"""Read a stuck rank's stack dump (faulthandler, on SIGUSR1) into "which collective, which line"."""
from __future__ import annotations

import re
from dataclasses import dataclass

_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>\S+)')
# Frames inside torch.distributed that are decorators or helpers, not the call a learner made.
_WRAPPERS = {"wrapper", "_fn", "inner", "_get_default_group", "_check_single_tensor"}


@dataclass(frozen=True)
class StackSummary:
    """The collective a rank is blocked in and the user's line that called it."""

    collective: str | None
    user_frame: str | None
    stack: str

    def __str__(self) -> str:
        if not self.stack:  # faulthandler answers even inside C code, so the process did not run
            return ("gave no stack dump (is the process stopped, by SIGSTOP, Ctrl-Z or a debugger, "
                    "or did its code take over SIGUSR1?)")
        where = f"in {self.collective}()" if self.collective else "not in a torch.distributed call"
        if self.user_frame:
            where += f", called from {self.user_frame}"
        return where


def _is_library(path: str) -> bool:
    return any(part in path for part in ("/torch/", "/labcore/live/", "/multiprocessing/", "<frozen"))


def summarize(dump: str) -> StackSummary:
    """Pick the thread that runs the worker loop and find its innermost torch.distributed frame.

    faulthandler prints each thread most recent call first; the worker's own
    thread is the one serving requests in labcore's worker module (its lifeline
    watcher lives there too, but never in ``serve``).
    """
    threads = [block for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump) if block.strip()]
    main = next((t for t in threads if re.search(r"labcore/live/worker\.py\", line \d+ in serve", t)),
                threads[0] if threads else "")
    frames = [m.groupdict() for m in map(_FRAME.match, main.splitlines()) if m]
    collective = next((f["func"] for f in frames
                       if "torch/distributed" in f["file"] and f["func"] not in _WRAPPERS), None)
    user = next((f for f in frames if not _is_library(f["file"])), None)
    user_frame = f'{user["func"]} ({user["file"]}, line {user["line"]})' if user else None
    return StackSummary(collective, user_frame, main.strip())
