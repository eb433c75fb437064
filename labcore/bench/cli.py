"""``python -m labcore bench OP ...``: nccl-tests' command line and table, in Python.

Flags mirror nccl-tests' (``-b -e -f -i -n -w -c -o -d -r -N``; ``-g`` is the number
of ranks). Run it two ways:

- plainly: ``python -m labcore bench all_reduce -b 8 -e 128M -f 2 -g 4`` starts a
  labcore Cluster of ``-g`` ranks on this machine (NCCL with enough GPUs, else gloo);
- under torchrun: ``torchrun --nproc-per-node 4 -m labcore bench all_reduce ...``,
  where every process is one rank (so it spans nodes with torchrun's or SLURM's
  multi-node launch); rank 0 prints.

Every input is checked before a rank starts; a bad one gets one line naming the fix
and exit status 2. ``--json FILE`` saves the sweep with every repeat (it can serve as
a baseline), written whole or not at all; it replaces an existing file only if that is a
sweep the lab saved (or with ``--force``), never writes through a symbolic link, and an
empty or over-long name is refused before anything is measured. Ctrl-C at any moment
(even while torch imports) ends with one line and status 130. ``--baseline FILE`` runs the evidence gate
against one (repeat with ``-N`` so it can decide): the gate is :mod:`labcore.evidence`'s, which builds on
this package, so ``python -m labcore bench`` hands it in (``main(argv, gate=...)``).

Example
-------
>>> from labcore.bench.cli import main
>>> main(["all_reduce", "-b", "8", "-e", "1K", "-f", "8", "-g", "2", "-n", "2", "-w", "1"])  # doctest: +SKIP
0
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pandas as pd

from labcore import validate
from labcore.bench import baseline as _baseline
from labcore.bench import checks, memory
from labcore.bench.harness import PLACEMENTS, describe_rank, measure
from labcore.bench.ops import NAMES, OPS, nccl_tests_program, op_name
from labcore.bench.sweep import COLUMNS, plan_sizes
from labcore.bench.table import footer_lines, header_lines, row_line
from labcore.bench.units import dtype_of, parse_size
from labcore.live.sysinfo import choose_backend, network_summary

# Exit statuses: 0 done; 1 wrong elements, a regression or a failed rank; 2 bad input;
# 3 the gate could not decide; 128 + signal number when stopped by SIGINT/SIGTERM.
INCONCLUSIVE = 3

DIFFERENCES = """\
where the lab differs from nccl-tests 2.19.6 on purpose:
  -g      the number of ranks (one process and device each), not GPUs per thread; no -t.
  timing  nccl-tests' loop, timed with the host clock from a synchronize to the one after its
          last call; the table shows its mean per call averaged over ranks. --json adds the
          median call (median_us): on NCCL from a second loop stamped with CUDA events, on
          gloo (whose calls block) from a perf_counter stamp after each call of the one loop.
          torch's flight recorder is off in the ranks (TORCH_FR_BUFFER_SIZE=0 unless set), as
          nccl-tests records nothing; torch still adds its own host cost to every call.
  -w      5 warm-up calls before each size's timed loop (nccl-tests: -w 1, all sizes warmed
          up first at factor 2).
  -b/-e   default 8 to 32M, less if memory is short (nccl-tests: 32M to 32M); -b 0 needs -i.
  -f      may be fractional (nccl-tests reads a whole number); a factor that repeats a size
          is refused, and so is -f with -i (nccl-tests lets a factor above 1 win).
  limits  at most 4096 sizes in a sweep, each below 2**63 bytes; -f at most 2**30; -n and -w at
          most 1000000 calls; -N at most 10000 repeats.
  -c      on (1) or off (0) (nccl-tests: the number of checks).
  -N      repeats the sweep, interleaved, as nccl-tests' -N; the gate (--baseline) needs them.
  -o      sum, prod, max, min, avg; not mulsum or all. -d takes one type, not all.
  places  torch has all_reduce, broadcast and reduce in place only: their out-of-place rows are
          the in-place call on a separate output buffer, filled from the input before timing
          (the copy is not timed), and labelled in a # note line.
  gloo    runs its own CPU algorithms.
exit status: 0 done, 1 wrong elements or regression or a failed rank, 2 bad input,
3 gate inconclusive (measure more with -N), 128+N stopped by signal N."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage block) and exits 2."""

    def error(self, message):
        self.exit(2, f"labcore bench: {message} (see python -m labcore bench -h)\n")


def _parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog="python -m labcore bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure a collective like nccl-tests: time, algbw, busbw and #wrong per size.",
        epilog=DIFFERENCES)
    p.add_argument("op", help=f"collective: {', '.join(NAMES)}")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 0.3K, 64K (default 8)")
    p.add_argument("-e", "--maxbytes", default=None,
                   help="largest size, e.g. 128M (default 32M, less if memory is short)")
    p.add_argument("-f", "--stepfactor", type=float, default=None, help="multiply sizes by this (default 2)")
    p.add_argument("-i", "--stepbytes", default=None, help="add this many bytes instead (not with -f)")
    p.add_argument("-g", "--ngpus", type=int, default=None,
                   help="ranks to start (default: GPUs seen, else 2); ignored under torchrun")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("-N", "--run_cycles", type=int, default=1,
                   help="repeat the whole sweep this many times, interleaved (default 1)")
    p.add_argument("-c", "--check", type=int, default=1, choices=[0, 1],
                   help="check the results: 1 on, 0 off (default 1)")
    p.add_argument("-o", "--op", dest="redop", default="sum", help="sum, prod, max, min or avg (default sum)")
    p.add_argument("-d", "--datatype", default="float", help="float, half, bfloat16, double, int8, ...")
    p.add_argument("-r", "--root", type=int, default=0, help="root of rooted collectives (default 0)")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one size may take (default 300)")
    p.add_argument("--json", metavar="FILE", help="save the sweep, every repeat, as JSON (a baseline); an "
                   "existing file is replaced only if it is a sweep the lab saved, or with --force")
    p.add_argument("--force", action="store_true",
                   help="let --json replace an existing file that is not a sweep the lab saved")
    p.add_argument("--baseline", metavar="FILE",
                   help="compare with this saved sweep; exit 1 on a regression, 3 if inconclusive")
    p.add_argument("--tolerance", type=float, default=0.25,
                   help="slowdown allowed before a size regresses (default 0.25: up to 1.25x)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="false-alarm rate of the gate over all sizes (default 0.05)")
    p.add_argument("--compare-from", default="0", help="compare only sizes from this many bytes up")
    return p


def _one_line(exc: BaseException) -> str:
    """``exc`` as one line that is never blank (a bare MemoryError has no message)."""
    text = " ".join(str(exc).split())
    if text:
        return text
    if isinstance(exc, MemoryError):
        return ("ran out of memory (MemoryError): free some memory, or ask for smaller sizes (-e) or "
                "fewer ranks (-g)")
    return type(exc).__name__


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ)


def _spec(args) -> dict:
    return dict(op=op_name(args.op), dtype=dtype_of(args.datatype)[0], redop=args.redop,
                root=args.root, warmup=args.warmup_iters, iters=args.iters, check=bool(args.check))


def _planned_ranks(args) -> int:
    """The number of ranks this run will have, known before any rank starts."""
    if _under_torchrun():
        text = os.environ.get("WORLD_SIZE", "1")
        if not text.strip().isdigit():
            raise ValueError(f"WORLD_SIZE is {text!r}, not a number of ranks: launch with torchrun, which sets it")
        return checks.check_ranks(int(text), "WORLD_SIZE")
    if args.ngpus is not None:
        return checks.check_ranks(args.ngpus, "-g")
    from labcore.live.sysinfo import gpu_count

    gpus = gpu_count() if args.backend != "gloo" else 0
    return gpus if gpus >= 2 else 2


def _validate(args) -> tuple[dict, int, list[int]]:
    """Check every input but the files before a rank starts: (spec, ranks, requested sizes)."""
    if args.stepfactor is not None and args.stepbytes is not None:
        raise ValueError("give -f (sizes multiply) or -i (sizes add), not both")
    if args.stepfactor is None and args.stepbytes is None:
        args.stepfactor = 2.0
    spec = _spec(args)
    nranks = _planned_ranks(args)
    checks.check_collective(spec["op"], nranks, spec["redop"], spec["root"])
    checks.check_counts(args.warmup_iters, args.iters, args.run_cycles)
    validate.finite_number(args.tolerance, "--tolerance", at_least=0, below=10,
                           must="the slowdown allowed as a fraction (0.25 = 25%)")
    validate.finite_number(args.alpha, "--alpha", above=0, below=1, must="a false-alarm rate between 0 and 1")
    # A plain run's ranks start here; under torchrun the backend and memory are known on the ranks.
    backend = None if _under_torchrun() else choose_backend(nranks, args.backend)
    if backend is not None:
        checks.check_support(spec["op"], spec["dtype"], spec["redop"], backend)
    budget, where = memory.local_budget(nranks) if backend == "gloo" else (None, "")
    itemsize = dtype_of(spec["dtype"])[1].itemsize
    sizes = plan_sizes(spec["op"], nranks, itemsize, budget, args.minbytes, args.maxbytes,
                       args.stepfactor, args.stepbytes, spec["check"], where)
    validate.size(args.compare_from, "--compare-from", nccl_tests=True)
    return spec, nranks, sizes


def _check_files(args, spec, nranks, sizes) -> pd.DataFrame | None:
    """--json can be written and --baseline fits this run (read where rank 0 runs): the baseline."""
    if args.json is not None:
        checks.check_output(args.json, args.force)
    if not args.baseline:
        return None
    if args.gate is None:
        raise ValueError("--baseline runs the evidence gate, which this entry point was not given: run "
                         "`python -m labcore bench ...`")
    if args.json and Path(args.json).resolve() == Path(args.baseline).resolve():
        raise ValueError(f"--json and --baseline both name {args.baseline}: the run would overwrite its own "
                         "baseline; save this run to another file")
    try:
        base = _baseline.load_baseline(args.baseline)
    except (ValueError, FileNotFoundError):
        raise
    except MemoryError:
        raise ValueError(f"ran out of memory reading the baseline {args.baseline}: free some memory, or give "
                         "the JSON file saved with --json FILE") from None
    except Exception as exc:  # noqa: BLE001 - whatever else went wrong, one line naming the file
        text = " ".join(str(exc).split())
        what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        raise ValueError(f"cannot read the baseline {args.baseline} ({what}); give the JSON file saved "
                         "with --json FILE") from None
    itemsize = dtype_of(spec["dtype"])[1].itemsize
    args.gate.fits(base, _planned(spec, nranks, itemsize, sizes), args.baseline, parse_size(args.compare_from))
    return base


def _planned(spec, nranks, itemsize, sizes) -> pd.DataFrame:
    """The (op, size, type, redop, ranks, placement) rows the run will print, for checking a baseline."""
    if spec["op"] not in OPS:
        return pd.DataFrame(dict(op=[spec["op"]], size=[0], type=["none"], redop=["none"], ranks=[nranks],
                                 placement=["in-place"]))
    op = OPS[spec["op"]]
    printed = [op.printed_size(s, nranks, itemsize) for s in sizes]
    return pd.DataFrame(dict(op=spec["op"], size=printed * len(PLACEMENTS), type=spec["dtype"],
                             redop=op.printed_redop(spec["redop"]), ranks=nranks,
                             placement=[p for p in PLACEMENTS for _ in printed]))


class _Printer:
    """Prints nccl-tests' layout line by line as sizes finish (only on the printing rank)."""

    def __init__(self, active: bool):
        self.active = active

    def __call__(self, *lines: str) -> None:
        if self.active:
            for line in lines:
                print(line)
            sys.stdout.flush()


def _preamble(args, spec, sizes, nranks, backend, ranks_info) -> list[str]:
    import torch

    step = f"{parse_size(args.stepbytes)}(bytes)" if args.stepbytes else f"{args.stepfactor:g}(factor)"
    lines = [f"# labcore bench (nccl-tests 2.19.6 layout) backend {backend} torch {torch.__version__} "
             f"repeats (-N) {args.run_cycles}",
             f"# Collective test starting: {nccl_tests_program(spec['op'])}",
             f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: {step} "
             f"warmup iters: {spec['warmup']} iters: {spec['iters']} agg iters: 1 "
             f"validation: {int(spec['check'])} graph: 0 unalign: 0",
             "#", "# Using devices"]
    for r in ranks_info:
        index = int(r["device"].split(":")[1]) if ":" in r["device"] else r["rank"] % max(1, nranks)
        lines.append(f"#  Rank {r['rank']:2d} Group  0 Pid {r['pid']:6d} on {r['host']:>10} device "
                     f"{index:2d} [{r['device']}] {r['name']}")
    return lines + network_summary()  # under torchrun every rank evaluates this (it gathers per node)


def _run_sizes(run_one, sizes, spec, repeats, say) -> pd.DataFrame:
    rows = []
    for rep in range(repeats):
        for nbytes in sizes:
            got = [dict(r, repeat=rep) for r in run_one({**spec, "nbytes": nbytes})]
            by = {r["placement"]: r for r in got}
            say(row_line(by.get("out-of-place"), by.get("in-place")))
            rows += got
    return pd.DataFrame(rows, columns=COLUMNS)


def _finish(args, df, spec, nranks, backend, base, say) -> int:
    df.attrs["params"] = dict(spec, ranks=nranks, backend=backend, min_bytes=args.minbytes,
                              max_bytes=args.maxbytes, factor=args.stepfactor, step=args.stepbytes,
                              repeats=args.run_cycles)
    say(*footer_lines(df))
    if args.json is not None:
        checks.check_output(args.json, args.force)      # again: the file may have changed while measuring
        try:
            _baseline.save_baseline(df, args.json)
        except OSError as exc:
            raise ValueError(f"could not save the sweep to {args.json} ({exc.strerror}); the table above holds "
                             "its results: rerun with --json in a folder you can write to") from None
        say(f"# saved the sweep ({args.run_cycles} repeat(s)) to {args.json}")
    failed = bool(spec["check"]) and int(df.loc[df["wrong"] > 0, "wrong"].sum()) > 0
    if base is None:
        return 1 if failed else 0
    verdict, lines = args.gate.judge(base, df, args.tolerance, args.alpha, parse_size(args.compare_from),
                                       args.baseline)
    say(*lines)
    if failed or verdict == "regression":
        return 1
    return INCONCLUSIVE if verdict == "inconclusive" else 0


def _main_torchrun(args, spec, sizes_asked) -> int:
    import torch
    import torch.distributed as dist

    backend = args.backend
    # nccl-tests records nothing per call; torch's flight recorder keeps a Python stack per collective
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "0")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    checks.check_support(spec["op"], spec["dtype"], spec["redop"], backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    local = int(os.environ.get("LOCAL_RANK", 0))
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=args.timeout),
                            device_id=torch.device("cuda", local) if backend == "nccl" else None)
    try:
        nranks, rank = dist.get_world_size(), dist.get_rank()
        say = _Printer(rank == 0)
        # The files live where rank 0 runs: it checks them, and every rank stops if one is bad.
        problem, base = [None], None
        if rank == 0:
            try:
                base = _check_files(args, spec, nranks, sizes_asked)
            except Exception as exc:  # noqa: BLE001 - every rank must hear of it, or they wait forever
                problem = [_one_line(exc)]
        dist.broadcast_object_list(problem, src=0)
        if problem[0]:
            if rank == 0:
                print(f"labcore bench: {problem[0]}", file=sys.stderr)
            return 2
        if args.ngpus is not None and args.ngpus != nranks:
            say(f"# -g {args.ngpus} ignored: torchrun started {nranks} ranks")
        kind, free = memory.free_bytes_here()
        budget = memory.per_rank_budget(kind, free, int(os.environ.get("LOCAL_WORLD_SIZE", nranks)))
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
        least = torch.tensor([budget], dtype=torch.int64, device=device)
        dist.all_reduce(least, op=dist.ReduceOp.MIN)  # every rank plans the same sizes
        sizes = plan_sizes(spec["op"], nranks, dtype_of(spec["dtype"])[1].itemsize, int(least.item()),
                           args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes, spec["check"])
        infos = [None] * nranks
        dist.all_gather_object(infos, describe_rank())
        say(*_preamble(args, spec, sizes, nranks, backend, infos), *header_lines())
        df = _run_sizes(measure, sizes, spec, args.run_cycles, say)
        code = 0
        if rank == 0:
            try:
                code = _finish(args, df, spec, nranks, backend, base, say)
            except ValueError as exc:       # the other ranks wait for the verdict: say it, then send it
                print(f"labcore bench: {_one_line(exc)}", file=sys.stderr)
                code = 2
        flag = torch.tensor([code], dtype=torch.int64, device=device)
        dist.broadcast(flag, src=0)  # every rank exits with rank 0's verdict
        return int(flag.item())
    finally:
        dist.destroy_process_group()


def _main_cluster(args, spec, nranks, base) -> int:
    from labcore.bench.sweep import rank_budget
    from labcore.live.cluster import Cluster

    say = _Printer(True)
    with Cluster(nranks, backend=args.backend, timeout=args.timeout, show_output=False) as cl:
        budget, where = rank_budget(cl)
        sizes = plan_sizes(spec["op"], nranks, dtype_of(spec["dtype"])[1].itemsize, budget,
                           args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes, spec["check"],
                           where)
        say(*_preamble(args, spec, sizes, nranks, cl.backend, cl.run(describe_rank)), *header_lines())
        df = _run_sizes(lambda s: cl.call(measure, args=(s,))[0], sizes, spec, args.run_cycles, say)
        return _finish(args, df, spec, nranks, cl.backend, base, say)


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived: unwind (closing the cluster and its run folders), then exit."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stop_on_signals():
    """Turn SIGTERM and SIGINT into :class:`Stopped`, so ``with Cluster`` closes on the way out."""
    def stop(signum, frame):
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: list[str], gate=None) -> int:
    """Entry point of ``python -m labcore bench``; returns the exit status (see ``--help``).

    ``gate`` runs ``--baseline``: an object with ``fits(base, planned, source, compare_from)`` and
    ``judge(base, df, tolerance, alpha, compare_from, source) -> (verdict, lines)``
    (:mod:`labcore.evidence.cli_gate`, which ``python -m labcore`` hands in).
    """
    args = _parser().parse_args(argv)
    args.gate = gate
    try:
        spec, nranks, sizes = _validate(args)
        base = None if _under_torchrun() else _check_files(args, spec, nranks, sizes)
    except (ValueError, FileNotFoundError, MemoryError) as exc:
        print(f"labcore bench: {_one_line(exc)}", file=sys.stderr)
        return 2
    from labcore.live.errors import ClusterError

    try:
        with _stop_on_signals():
            if _under_torchrun():
                return _main_torchrun(args, spec, sizes)
            return _main_cluster(args, spec, nranks, base)
    except Stopped as stop:
        name = signal.Signals(stop.signum).name
        print(f"labcore bench: stopped by {name}; the ranks were closed and their files removed",
              file=sys.stderr)
        return 128 + stop.signum
    except (ValueError, MemoryError) as exc:
        print(f"labcore bench: {_one_line(exc)}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"labcore bench: the ranks failed:\n{exc}", file=sys.stderr)
        return 1
