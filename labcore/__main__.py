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
    if command not in ("bench", "sim", "course"):
        print(f"unknown command {command!r}\n\n{_USAGE}", file=sys.stderr)
        return 2
    try:
        # imported here, inside the try: the bench's first seconds are torch's import
        if command == "bench":
            from labcore.bench.cli import main as bench
            from labcore.evidence import cli_gate

            def run(args):
                return bench(args, gate=cli_gate)
        elif command == "sim":
            from labcore.sim.cli import main as run
        else:
            from labcore.course.cli import main as run
        code = int(run(rest) or 0)
        sys.stdout.flush()          # inside the try: a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader went away (`... | head`): say nothing more, as a shell command would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return _interrupted(command)


def _interrupted(command: str) -> int:
    """Ctrl-C (SIGINT) at any moment (while torch imports, while checking, simulating or measuring):
    one line and the shell's status for it, 130, not a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # a second Ctrl-C must not interrupt the goodbye
    print(f"labcore {command}: stopped by SIGINT (Ctrl-C)", file=sys.stderr)
    return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
