"""``python -m labcore {bench,sim,course} ...``: the lab's command line."""
from __future__ import annotations

import os
import signal
import sys

_USAGE = """usage: python -m labcore {bench,sim,course} ...

  bench   measure a collective the way nccl-tests does (also under torchrun)
  sim     step through a collective algorithm on a simulated topology
  course  the student release, nbgrader assignments and learners' progress

Run `python -m labcore bench -h`, `... sim -h` or `... course -h` for the options."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "bench":
        from labcore.bench.cli import main as run
    elif command == "sim":
        from labcore.sim.cli import main as run
    elif command == "course":
        from labcore.course.cli import main as run
    else:
        print(f"unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
        return 2
    try:
        code = int(run(rest) or 0)
        sys.stdout.flush()          # inside the try: a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader went away (`... | head`): say nothing more, as a shell command would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
