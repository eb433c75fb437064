"""``python -m labcore sim``: simulate a collective from the command line.

Bad input is refused before any work with one line saying what to fix (exit status 2).

Examples
--------
python -m labcore sim all_reduce --algo ring -n 8 --size 64M --topology nvswitch8
python -m labcore sim all_reduce --algo auto -n 8 --size 1G --topology nvswitch8
python -m labcore sim all_reduce --algo best -n 32 --size 1G --topology multinode --no-values
python -m labcore sim all_reduce --algo tree -n 16 -b 8 -e 256M -f 4       # a size sweep
"""
from __future__ import annotations

import argparse
import sys

from labcore import validate
from labcore.collectives import describe
from labcore.sim.core.schedules import ALGORITHMS
from labcore.sim.machines import presets
from labcore.sim.nccl import tuner
from labcore.sim.simulation import MAX_RANKS, simulate
from labcore.sim.core.trace import ScheduleError, _fmt_bytes

_PROG = "python -m labcore sim"
DEFAULT_SIZE = 64 << 20


def _size(text: str) -> int:
    """An argparse type: bytes in the lab's one size grammar (:func:`labcore.validate.size`: 64M, 1MiB, 1T)."""
    try:
        return validate.size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole(least: int):
    """An argparse type: a whole number of at least ``least``."""
    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {'at least 1' if least == 1 else f'{least} or more'}, "
                                             f"got {value}")
        return value
    return read


_positive, _count = _whole(1), _whole(0)


class _Parser(argparse.ArgumentParser):
    """argparse with its error as one line (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{_PROG}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    ops = sorted(ALGORITHMS)
    p = _Parser(prog=_PROG, description="Step through a collective algorithm on a simulated topology.")
    p.add_argument("op", choices=ops, help="collective")
    p.add_argument("--algo", default=None, help="algorithm (default: the collective's own); 'auto' for NCCL's "
                   "choice by its model (tuner), "
                   "'best' for the fastest as simulated; "
                   + "; ".join(f"{o}: {', '.join(sorted(a))}" for o, a in ALGORITHMS.items()))
    p.add_argument("-n", "--ranks", type=_positive, default=8, help="number of ranks (default 8)")
    p.add_argument("--size", type=_size, default=None, help="bytes as nccl-tests counts them (default 64M)")
    p.add_argument("-b", "--minbytes", type=_size, help="sweep: smallest size")
    p.add_argument("-e", "--maxbytes", type=_size, help="sweep: largest size")
    p.add_argument("-f", "--stepfactor", type=_positive, default=2, help="sweep: size multiplier, 2 or more (default 2)")
    p.add_argument("--topology", default="uniform", choices=list(presets.PRESETS),
                   help="machine, a preset of labcore.sim.machines.presets, built for -n ranks (default uniform)")
    p.add_argument("--protocol", default="auto", help="NCCL protocol on presets that describe them: auto (the "
                   "fastest), LL, LL128, Simple, NVLS")
    p.add_argument("--reduce-op", default="sum", choices=["sum", "max", "min", "prod"])
    p.add_argument("--pipeline", type=_positive, help="pieces for chain/tree/switch/hierarchical algorithms")
    p.add_argument("--channels", type=_positive, help="rings or trees at once (default: the topology's)")
    p.add_argument("--gpus-per-node", type=_positive, help="for hierarchical on a single-node topology")
    p.add_argument("--root", type=int, help="root rank for broadcast/reduce")
    p.add_argument("--no-contention", action="store_true", help="every message gets its links' full bandwidth")
    p.add_argument("--no-values", action="store_true", help="time only (for big runs); skips the check")
    p.add_argument("--show-steps", type=_count, default=4, help="how many steps to print (default 4)")
    return p


def _choose(args, topo, size: int) -> tuple[str, str, dict]:
    """(simulator algorithm, note, builder options) for --algo auto at ``size`` bytes: NCCL's tuner's
    pick on the preset's own tuner machine, as :func:`labcore.sim.nccl.tuner.simulated_as` plays it; one
    line saying why where there is none or the topology cannot play it."""
    try:
        machine = presets.tuner_for(topo)
    except presets.NoTuner as why:
        raise ValueError(f"--algo auto needs NCCL's tuner, and {why}; use --algo best (the fastest as "
                         "simulated) or name an algorithm") from None
    choice = tuner.predict(args.op, size, machine)
    try:
        algo, _, options, stand_in = tuner.simulated_as(choice.algorithm, choice.protocol, topo, op=args.op)
    except ValueError as why:
        raise ValueError(f"NCCL's tuner picks {choice.name} for {args.op}; {why}") from None
    note = (f"NCCL's tuner picks {choice.name} ({choice.time_us:.1f} us predicted on {machine.ranks} ranks, "
            f"{machine.nodes} node(s)); simulating {algo!r}" + (f" ({stand_in})" if stand_in else ""))
    return algo, note, options


def _smallest(args) -> int:
    return 8 if args.minbytes is None else args.minbytes


def _check(args) -> None:
    """Refuse what the simulator would refuse, before any work."""
    if args.ranks > MAX_RANKS:
        raise ValueError(f"-n/--ranks must be at most {MAX_RANKS}, got {args.ranks}")
    if args.algo is None:
        args.algo = describe(args.op).sim
    if args.algo not in ("auto", "best") and args.algo not in ALGORITHMS[args.op]:
        raise ValueError(f"no {args.algo!r} algorithm for {args.op}; choose one of "
                         f"{', '.join(sorted(ALGORITHMS[args.op]))}, auto or best")
    if args.maxbytes is not None or args.minbytes is not None:
        if args.size is not None:
            raise ValueError("give --size (one size) or -b/-e (a sweep), not both")
        if args.maxbytes is None:
            raise ValueError("-b/--minbytes needs -e/--maxbytes for a sweep")
        lo = _smallest(args)
        if lo < 1:
            raise ValueError("-b/--minbytes must be at least 1: sweep sizes multiply (-f), and 0 stays 0")
        if lo > args.maxbytes:
            raise ValueError(f"-b {lo} is larger than -e {args.maxbytes}: swap them")
        if args.stepfactor < 2:
            raise ValueError("-f/--stepfactor must be 2 or more")
    if args.root is not None and not 0 <= args.root < args.ranks:
        raise ValueError(f"--root must be a rank in 0..{args.ranks - 1}, got {args.root}")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, TypeError, ScheduleError) as err:
        print(f"{_PROG}: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    _check(args)
    if args.size is None:
        args.size = DEFAULT_SIZE
    topo = presets.topology(args.topology, args.ranks)
    options = {k: v for k, v in (("pipeline", args.pipeline), ("gpus_per_node", args.gpus_per_node),
                                 ("root", args.root), ("channels", args.channels)) if v is not None}
    protocol = None if args.protocol.lower() == "none" else args.protocol
    kwargs = dict(topology=topo, reduce_op=args.reduce_op, contention=not args.no_contention, protocol=protocol,
                  **options)
    if args.maxbytes is not None:
        first, _, extra = _choose(args, topo, _smallest(args)) if args.algo == "auto" else (args.algo, "", {})
        simulate(args.op, first, args.ranks, _smallest(args), values=False, **kwargs, **extra)   # refuse before printing
        picked = "NCCL's tuner's pick at each size" if args.algo == "auto" else repr(args.algo)
        print(f"# {args.op}, algorithm {picked}, {args.ranks} ranks, on {topo.name}")
        return _sweep(args, topo, kwargs)
    algo, note, extra = _choose(args, topo, args.size) if args.algo == "auto" else (args.algo, "", {})
    trace = simulate(args.op, algo, args.ranks, args.size, values=not args.no_values, **kwargs, **extra)
    print(f"# {args.op}, algorithm {trace.schedule.algorithm!r}, {args.ranks} ranks, on {topo.name}")
    if note:
        print(f"# {note}")
    sched = trace.schedule
    lines = str(sched).splitlines()
    print(lines[0])
    for line in lines[1: 1 + args.show_steps]:
        print("  " + (line if len(line) < 160 else line[:157] + "..."))
    if sched.n_steps > args.show_steps:
        print(f"  ... {sched.n_steps - args.show_steps} more steps")
    s = trace.summary()
    bound = s["bound_us"]
    print(f"size        {_fmt_bytes(sched.nbytes)} ({sched.nbytes:.0f} B)")
    print(f"time        {s['time_us']:.3f} us  ({sched.n_steps} steps, {sched.n_transfers} transfers, "
          f"{s['channels']} channel(s){', protocol ' + s['protocol'] if s['protocol'] else ''})")
    for name in ("algbw", "busbw"):
        print(f"{name}       " + (f"{s[name]:.3f} GB/s" if s[name] is not None else "none: one rank moves nothing"))
    reach = f"reaches {100 * bound / s['time_us']:.1f}% of it" if s["time_us"] > 0 else "nothing to send"
    print(f"lower bound {bound:.3f} us (any algorithm on this topology): {reach}")
    if trace.has_values:
        trace.verify()
        print(f"values      verified against numpy ({args.reduce_op})")
    return 0


def _sweep(args, topo, kwargs: dict) -> int:
    auto = args.algo == "auto"
    print(f"{'size':>12} {'time(us)':>12} {'algbw':>9} {'busbw':>9} {'bound(us)':>12} {'protocol':>9}"
          + (f" {'algorithm':>18}" if auto else ""))
    size = _smallest(args)
    while size <= args.maxbytes:
        algo, _, extra = _choose(args, topo, size) if auto else (args.algo, "", {})
        t = simulate(args.op, algo, args.ranks, size, values=False, **kwargs, **extra)
        s = t.summary()
        bw = [f"{s[k]:>9.3f}" if s[k] is not None else f"{'-':>9}" for k in ("algbw", "busbw")]
        print(f"{size:>12} {s['time_us']:>12.3f} {bw[0]} {bw[1]} {s['bound_us']:>12.3f} "
              f"{s['protocol'] or '-':>9}" + (f" {algo:>18}" if auto else ""))
        size *= args.stepfactor
    return 0
