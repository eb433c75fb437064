"""``python -m labcore bench OP ...``: nccl-tests' command line and table, in Python.

Flags mirror nccl-tests' (``-b -e -f -i -n -w -c -o -d -r``; ``-g`` is the number
of ranks). Run it two ways:

- plainly: ``python -m labcore bench all_reduce -b 8 -e 128M -f 2 -g 4`` starts a
  labcore Cluster of ``-g`` ranks on this machine (NCCL with enough GPUs, else gloo);
- under torchrun: ``torchrun --nproc-per-node 4 -m labcore bench all_reduce ...``,
  where every process is one rank (so it spans nodes with torchrun's or SLURM's
  multi-node launch); rank 0 prints.

``--json FILE`` saves the sweep (it can serve as a baseline); ``--baseline FILE``
compares against one, prints pass/regression per size and exits 1 on a regression.

Example
-------
>>> from labcore.live.bench.cli import main
>>> main(["all_reduce", "-b", "8", "-e", "1K", "-f", "8", "-g", "2", "-n", "2", "-w", "1"])  # doctest: +SKIP
0
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import pandas as pd

from labcore.live.bench import baseline as _baseline
from labcore.live.bench import memory
from labcore.live.bench.harness import describe_rank, measure
from labcore.live.bench.ops import NAMES, canonical
from labcore.live.bench.sweep import COLUMNS, plan_sizes
from labcore.live.bench.table import footer_lines, header_lines, row_line
from labcore.live.bench.units import dtype_of, parse_size
from labcore.live.sysinfo import network_summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labcore bench",
        description="Measure a collective like nccl-tests: time, algbw, busbw and #wrong per size.")
    p.add_argument("op", help=f"collective: {', '.join(NAMES)}")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 64K (default 8)")
    p.add_argument("-e", "--maxbytes", default=None,
                   help="largest size, e.g. 128M (default 32M, less if memory is short)")
    p.add_argument("-f", "--stepfactor", type=float, default=2, help="multiply sizes by this (default 2)")
    p.add_argument("-i", "--stepbytes", default=None, help="add this many bytes instead of multiplying")
    p.add_argument("-g", "--ngpus", type=int, default=None,
                   help="ranks to start (default: GPUs seen, else 2); ignored under torchrun")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("-c", "--check", type=int, default=1, help="check the results: 1 on, 0 off (default 1)")
    p.add_argument("-o", "--op", dest="redop", default="sum", help="sum, prod, max, min or avg (default sum)")
    p.add_argument("-d", "--datatype", default="float", help="float, half, bfloat16, double, int8, ...")
    p.add_argument("-r", "--root", type=int, default=0, help="root of rooted collectives (default 0)")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one size may take (default 300)")
    p.add_argument("--json", metavar="FILE", help="save the sweep as JSON (usable as a baseline)")
    p.add_argument("--baseline", metavar="FILE", help="compare with this saved sweep; exit 1 on a regression")
    p.add_argument("--tolerance", type=float, default=0.2,
                   help="a size regresses when more than this fraction slower (default 0.2)")
    p.add_argument("--compare-from", default="0", help="compare only sizes from this many bytes up")
    return p


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ)


def _spec(args) -> dict:
    return dict(op=canonical(args.op), dtype=dtype_of(args.datatype)[0], redop=args.redop,
                root=args.root, warmup=args.warmup_iters, iters=args.iters, check=bool(args.check))


def _check_root(spec, nranks):
    if not 0 <= spec["root"] < nranks:
        raise ValueError(f"root (-r) must be a rank between 0 and {nranks - 1}, not {spec['root']}")


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
    step = f"{parse_size(args.stepbytes)}(bytes)" if args.stepbytes else f"{args.stepfactor:g}(factor)"
    lines = [f"# labcore bench {spec['op']}: nranks {nranks} backend {backend} minBytes {min(sizes)} "
             f"maxBytes {max(sizes)} step: {step} warmup iters: {spec['warmup']} iters: {spec['iters']} "
             f"validation: {int(spec['check'])}",
             "#", "# Using devices"]
    lines += [f"#  Rank {r['rank']:2d} Pid {r['pid']:6d} on {r['host']:>10} device {r['device']:>6} {r['name']}"
              for r in ranks_info]
    return lines + network_summary()  # under torchrun every rank evaluates this (it gathers per node)


def _run_sizes(run_one, sizes, spec, say) -> pd.DataFrame:
    rows = []
    for nbytes in sizes:
        got = run_one({**spec, "nbytes": nbytes})
        if got:
            by = {r["placement"]: r for r in got}
            say(row_line(by.get("out-of-place"), by.get("in-place")))
        rows += got
    return pd.DataFrame(rows, columns=COLUMNS)


def _finish(args, df, spec, nranks, backend, say) -> int:
    df.attrs["params"] = dict(spec, ranks=nranks, backend=backend, min_bytes=args.minbytes,
                              max_bytes=args.maxbytes, factor=args.stepfactor, step=args.stepbytes)
    say(*footer_lines(df))
    if args.json:
        _baseline.save_baseline(df, args.json)
        say(f"# saved the sweep to {args.json}")
    failed = bool(spec["check"]) and int(df.loc[df["wrong"] > 0, "wrong"].sum()) > 0
    if args.baseline:
        result = _baseline.compare(args.baseline_df, df, args.tolerance, parse_size(args.compare_from))
        say(f"# evidence gate against {args.baseline} (tolerance {args.tolerance:g}):",
            f"# {'size':>10}  {'placement':>12}  {'base us':>9}  {'now us':>9}  {'ratio':>6}  status")
        for _, r in result.iterrows():
            say(f"# {int(r['size']):>10}  {r['placement']:>12}  {r['baseline_us']:9.2f}  "
                f"{r['current_us']:9.2f}  {r['ratio']:6.2f}  {r['status']}")
        bad = _baseline.regressed(result)
        say(f"# evidence gate: {'REGRESSION' if bad else 'pass'}")
        failed = failed or bad
    return 1 if failed else 0


def _main_torchrun(args, spec) -> int:
    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    local = int(os.environ.get("LOCAL_RANK", 0))
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=args.timeout),
                            device_id=torch.device("cuda", local) if backend == "nccl" else None)
    try:
        nranks, rank = dist.get_world_size(), dist.get_rank()
        _check_root(spec, nranks)
        say = _Printer(rank == 0)
        if args.ngpus is not None and args.ngpus != nranks:
            say(f"# -g {args.ngpus} ignored: torchrun started {nranks} ranks")
        kind, free = memory.free_bytes_here()
        budget = memory.per_rank_budget(kind, free, int(os.environ.get("LOCAL_WORLD_SIZE", nranks)))
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
        least = torch.tensor([budget], dtype=torch.int64, device=device)
        dist.all_reduce(least, op=dist.ReduceOp.MIN)  # every rank plans the same sizes
        sizes = plan_sizes(spec["op"], nranks, dtype_of(spec["dtype"])[1].itemsize, int(least.item()),
                           args.minbytes, args.maxbytes, args.stepfactor,
                           parse_size(args.stepbytes) if args.stepbytes else None, spec["check"])
        infos = [None] * nranks
        dist.all_gather_object(infos, describe_rank())
        say(*_preamble(args, spec, sizes, nranks, backend, infos), *header_lines())
        df = _run_sizes(measure, sizes, spec, say)
        code = _finish(args, df, spec, nranks, backend, say) if rank == 0 else 0
        flag = torch.tensor([code], dtype=torch.int64, device=device)
        dist.broadcast(flag, src=0)  # every rank exits with rank 0's verdict
        return int(flag.item())
    finally:
        dist.destroy_process_group()


def _main_cluster(args, spec) -> int:
    from labcore.live.cluster import Cluster
    from labcore.live.sysinfo import gpu_count
    from labcore.live.bench.sweep import rank_budget

    nranks = args.ngpus or (gpu_count() if args.backend != "gloo" and gpu_count() >= 2 else 2)
    _check_root(spec, nranks)
    say = _Printer(True)
    with Cluster(nranks, backend=args.backend, timeout=args.timeout, show_output=False) as cl:
        budget, where = rank_budget(cl)
        sizes = plan_sizes(spec["op"], nranks, dtype_of(spec["dtype"])[1].itemsize, budget,
                           args.minbytes, args.maxbytes, args.stepfactor,
                           parse_size(args.stepbytes) if args.stepbytes else None, spec["check"], where)
        say(*_preamble(args, spec, sizes, nranks, cl.backend, cl.run(describe_rank)), *header_lines())
        df = _run_sizes(lambda s: cl.call(measure, args=(s,))[0], sizes, spec, say)
        return _finish(args, df, spec, nranks, cl.backend, say)


def main(argv: list[str]) -> int:
    """Entry point of ``python -m labcore bench``; returns the exit status.

    0: done, every check passed and no regression; 1: wrong elements, a regression
    against ``--baseline``, or a rank failed; 2: bad arguments or a size that cannot fit.
    """
    args = _parser().parse_args(argv)
    try:
        spec = _spec(args)
        parse_size(args.minbytes)
        if args.maxbytes is not None:
            parse_size(args.maxbytes)
        # Read the baseline before measuring anything; only the printing rank needs it.
        prints = int(os.environ.get("RANK", 0)) == 0
        args.baseline_df = _baseline.load_baseline(args.baseline) if args.baseline and prints else None
    except (ValueError, FileNotFoundError) as exc:
        print(f"labcore bench: {exc}", file=sys.stderr)
        return 2
    from labcore.live.errors import ClusterError

    try:
        if _under_torchrun():
            return _main_torchrun(args, spec)
        return _main_cluster(args, spec)
    except (ValueError, MemoryError) as exc:
        print(f"labcore bench: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"labcore bench: the ranks failed:\n{exc}", file=sys.stderr)
        return 1
