"""The per-rank half of the benchmark: time and check one collective at one size.

:func:`measure` runs on every rank, inside ``Cluster.run`` or under torchrun,
and is the only code that touches buffers. It follows nccl-tests' harness
(nccl-tests 2.19.6, commit a0b82b2, ``src/common.cu``: ``BenchTime``):

1. allocate the buffers for one size (out-of-place: send and recv; in-place: one
   buffer with nccl-tests' in-place offsets), fill the input with verifiable values;
2. ``warmup`` untimed calls (at least one), a barrier, then ``iters`` timed calls;
3. the reported time is the **mean over ranks** of each rank's mean call
   (nccl-tests' default ``-a 1``), timed as nccl-tests times it: the host clock around
   the whole loop, after a synchronize and up to the synchronize that waits for its last
   call. On the GPU the lab then runs the loop once more, with a CUDA event after each call,
   for the median call (mean over ranks, ``median_us``): events recorded in the timed loop
   would add their own host cost to it. gloo's calls return once the data has arrived,
   so on the CPU one loop with a ``perf_counter`` stamp after each call gives both;
4. with ``check`` on, re-fill the inputs, run once more and compare every output
   element with its exact value; #wrong is summed over ranks and ``wrong_ranks``
   counts the ranks whose check failed (nccl-tests' "Out of bounds values" adds
   those up). In-place alltoall and sendrecv share one buffer and are not checked,
   as in nccl-tests (#wrong N/A).

Every rank gets the same numbers back, and every rank runs exactly
``max(warmup, 1) + iters (+1)`` calls, so no rank can wait on a collective the others skip.

Example
-------
Under torchrun, after ``dist.init_process_group``::

    rows = measure(dict(op="all_reduce", nbytes=1 << 20, dtype="float"))
"""
from __future__ import annotations

import os
import socket
import statistics
import time

import torch
import torch.distributed as dist

from labcore.bench import ops as _ops
from labcore.live.context import backend_for, rank_info
from labcore.bench.units import dtype_of
from labcore.bench.verify import CHECK_BLOCK, count_wrong, inputs
from labcore.readers.nccl_tests import PLACEMENTS


DEFAULTS = dict(dtype="float", redop="sum", root=0, warmup=5, iters=20,
                placements=PLACEMENTS, check=True, corrupt=0, slowdown=1)


def _device() -> torch.device:
    dev = rank_info().device
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    return dev


def describe_rank() -> dict:
    """This rank's pid, host and device, for the "Using devices" lines of the CLI."""
    from labcore.live.sysinfo import cpu_summary

    dev = _device()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_summary()["cpu"]
    return dict(rank=dist.get_rank(), pid=os.getpid(), host=socket.gethostname(), device=str(dev),
                name=name)


def _buffers(op, placement, lay, ctx, dev):
    """(send, recv): in place, views of one buffer at nccl-tests' in-place offsets."""
    if placement == "out-of-place":
        return (torch.empty(lay.send, dtype=ctx.dtype, device=dev),
                torch.empty(lay.recv, dtype=ctx.dtype, device=dev))
    buf = torch.empty(max(lay.send, lay.recv), dtype=ctx.dtype, device=dev)
    mine = slice(ctx.rank * ctx.count, (ctx.rank + 1) * ctx.count)
    if op.inplace == "send_in_recv":
        return buf[mine], buf
    if op.inplace == "recv_in_send":
        return buf, buf[mine]
    return buf, buf


def _fill(send, op, ctx):
    k = torch.arange(send.numel(), device=send.device)
    send.copy_(inputs(ctx.rank, k, op.fill_redop(ctx.redop), ctx.nranks, ctx.dtype))


def _emulated(op, placement) -> bool:
    """torch.distributed has this collective in place only (all_reduce, broadcast, reduce)."""
    return op.copies and placement == "out-of-place"


def _prepare(op, placement, send, recv, ctx) -> None:
    """Fill the input with verifiable values; an emulated out-of-place call starts from it copied
    into the output buffer (on the root alone for broadcast: the others' output is overwritten)."""
    _fill(send, op, ctx)
    if _emulated(op, placement) and (op.name != "broadcast" or ctx.rank == ctx.root):
        recv.copy_(send)


def _caller(op, placement, send, recv, ctx):
    """The call to time. nccl-tests' out-of-place call reads one buffer and writes another and copies
    nothing, so an emulated one is the in-place call on the output buffer that :func:`_prepare` filled:
    the copy stays out of the timed loop."""
    if _emulated(op, placement):
        return lambda: op.run(recv, recv, ctx)
    return lambda: op.run(send, recv, ctx)


def _repeated(call, times: int):
    """``call`` issued ``times`` times: a real slowdown by about that factor (to test a gate)."""
    if times == 1:
        return call

    def calls():
        for _ in range(times):
            call()
    return calls


def _note(op, placement) -> str:
    if _emulated(op, placement):
        return "emulated: the in-place call on the output buffer, filled from the input before timing"
    if not op.inplace_checked and placement == "in-place":
        return "not checked: send and receive share one buffer (nor does nccl-tests check it)"
    return ""


def _barrier(dev):
    # With NCCL, name the device so torch need not guess (and warn) which GPU the barrier is on.
    if dev.type == "cuda":
        dist.barrier(device_ids=[dev.index])
    else:
        dist.barrier()


def _first_call(call, name, dtype):
    """Run the first warm-up call, turning "backend lacks this" errors into a message with a fix.

    Every rank makes the same call with the same arguments, so when the backend lacks the
    operation every rank raises here, and none is left waiting in a collective.
    """
    try:
        call()
    except (RuntimeError, NotImplementedError) as exc:
        text = str(exc)
        if "not support" in text.lower() or "unsupported" in text.lower():
            raise RuntimeError(
                f"the {_backend(rank_info().device)} backend of torch {torch.__version__} cannot run {name} on "
                f"{dtype} tensors ({text.strip().splitlines()[0]}). Try another dtype (-d) or "
                "reduction (-o), the other backend, or a newer torch.") from exc
        raise


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def per_call_seconds(call, iters, dev) -> list[float]:
    """Seconds of each of ``iters`` back-to-back calls on this rank (a CUDA event or
    ``perf_counter`` stamp after every call)."""
    if dev.type == "cuda":
        stamps = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        stamps[0].record()
        for stamp in stamps[1:]:
            call()
            stamp.record()
        stamps[-1].synchronize()
        per_call = [a.elapsed_time(b) / 1e3 for a, b in zip(stamps, stamps[1:])]
    else:
        stamps = [time.perf_counter()]
        for _ in range(iters):
            call()
            stamps.append(time.perf_counter())
        per_call = [b - a for a, b in zip(stamps, stamps[1:])]
    return per_call


def host_timed(call, iters, dev) -> float:
    """Seconds per call as nccl-tests times them (src/common.cu ``BenchTime``): the host clock around
    ``iters`` back-to-back calls, from a synchronize to the synchronize that waits for the last one."""
    _sync(dev)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    _sync(dev)
    return (time.perf_counter() - start) / iters


def _timed_loop(call, iters, dev) -> tuple[float, float]:
    """Seconds per call on this rank: the loop's mean (nccl-tests' number) and the median call.

    On the CPU every call is stamped in one loop (gloo's calls block), so both come from it. On
    the GPU the mean comes from :func:`host_timed` and the median from a second loop stamped with
    CUDA events (:func:`per_call_seconds`). The median ignores the odd call that the operating
    system delayed, which the mean (rightly, for nccl-tests) keeps.
    """
    if dev.type != "cuda":
        per_call = per_call_seconds(call, iters, dev)
        return sum(per_call) / iters, statistics.median(per_call)
    mean = host_timed(call, iters, dev)
    return mean, statistics.median(per_call_seconds(call, iters, dev))


def _backend(dev) -> str:
    """The backend that runs this rank's tensors: "nccl" on a GPU of a lab NCCL group, else "gloo"."""
    return backend_for(dev.type)


def _check(op, recv, ctx, corrupt) -> int:
    """Wrong elements in this rank's output, compared block by block to bound scratch memory."""
    if not op.checked_on(ctx):
        return 0
    if corrupt:
        # A deliberate fault, to see the check catch it: damage the first elements of the result.
        recv[:corrupt] += 1
    wrong = 0
    for start in range(0, recv.numel(), CHECK_BLOCK):
        k = torch.arange(start, min(start + CHECK_BLOCK, recv.numel()), device=recv.device)
        wrong += count_wrong(recv[start:start + k.numel()], op.expect(ctx, k), ctx.redop)
    return wrong


def _mean_over_ranks(value: float, dev) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def _sum_over_ranks(value: int, dev) -> int:
    t = torch.tensor([value], dtype=torch.int64, device=dev)
    dist.all_reduce(t)
    return int(t.item())


def _measure_barrier(spec, dev) -> list[dict]:
    for _ in range(spec["warmup"] + 1):
        _barrier(dev)
    mean, median = _timed_loop(lambda: _barrier(dev), spec["iters"], dev)
    return [dict(op="barrier", size=0, count=0, type="none", redop="none", root=-1,
                 ranks=dist.get_world_size(), backend=_backend(dev), placement="in-place",
                 time_us=_mean_over_ranks(mean, dev) * 1e6, algbw=0.0, busbw=0.0, wrong=-1,
                 note="barrier: latency only, no data", median_us=_mean_over_ranks(median, dev) * 1e6,
                 wrong_ranks=0)]


def measure(spec: dict) -> list[dict]:
    """Time (and check) one collective at one size on this rank; the same rows on every rank.

    Parameters
    ----------
    spec : dict with ``op`` and ``nbytes`` (the requested size: nccl-tests' -b/-e value),
        and optionally ``dtype`` ("float"), ``redop`` ("sum"), ``root`` (0), ``warmup`` (5),
        ``iters`` (20), ``placements`` (both), ``check`` (True), ``corrupt`` (0: number of
        output elements to damage on purpose before the check, to see #wrong catch it),
        ``slowdown`` (1: collectives issued per timed call, to slow a run down on purpose).

    Returns
    -------
    list of dict, one per placement, with the columns of :func:`labcore.bench.sweep`
    (but ``repeat``, which the sweep adds). A size too small to give each rank one
    element gives a size-0 row, as in nccl-tests.
    """
    spec = {**DEFAULTS, **spec}
    dev = _device()
    name = _ops.op_name(spec["op"])
    if name == _ops.BARRIER:
        return _measure_barrier(spec, dev)
    op = _ops.OPS[name]
    type_name, dtype = dtype_of(spec["dtype"])
    n, rank = dist.get_world_size(), dist.get_rank()
    if n < op.min_ranks:
        raise ValueError(f"{name} needs at least {op.min_ranks} ranks: start the cluster with world_size >= "
                         f"{op.min_ranks}")
    if op.power_of_two and n & (n - 1):
        raise ValueError(f"{name} needs a power-of-two number of ranks, not {n}")
    if op.rooted and not 0 <= spec["root"] < n:
        raise ValueError(f"root must be a rank between 0 and {n - 1}, not {spec['root']}")
    if spec["redop"] not in _ops.REDOPS:
        raise ValueError(f"unknown reduction {spec['redop']!r}; use one of {', '.join(_ops.REDOPS)}")
    if (op.kind == "reduce" and spec["redop"] == "avg" and not dtype.is_floating_point
            and _backend(dev) == "gloo"):
        raise ValueError(f"gloo cannot average {type_name} tensors: use a float type "
                         "(-d float) or another reduction (-o sum)")
    lay = op.layout(spec["nbytes"], n, dtype.itemsize)
    ctx = _ops.Ctx(rank, n, spec["root"] if op.rooted else -1, op.fill_redop(spec["redop"]), dtype,
                   lay.count, torch_op=spec["redop"])
    size = max(lay.send, lay.recv) * dtype.itemsize
    rows = []
    for placement in spec["placements"]:
        send, recv = _buffers(op, placement, lay, ctx, dev)
        _prepare(op, placement, send, recv, ctx)
        call = _caller(op, placement, send, recv, ctx)
        _first_call(call, name, type_name)
        timed = _repeated(call, spec["slowdown"])
        for _ in range(spec["warmup"] - 1):
            timed()
        _barrier(dev)
        mean, median = _timed_loop(timed, spec["iters"], dev)
        seconds = _mean_over_ranks(mean, dev)
        wrong, wrong_ranks = -1, 0
        if spec["check"] and (placement == "out-of-place" or op.inplace_checked):
            _prepare(op, placement, send, recv, ctx)
            call()
            _sync(dev)
            mine = _check(op, recv, ctx, spec["corrupt"])
            wrong = _sum_over_ranks(mine, dev)
            wrong_ranks = _sum_over_ranks(int(mine > 0), dev)
        del send, recv, call, timed  # free before the next placement allocates
        algbw, busbw = op.bandwidths(size, seconds, n)
        rows.append(dict(op=name, size=size, count=lay.count, type=type_name,
                         redop=op.printed_redop(spec["redop"]), root=ctx.root, ranks=n,
                         backend=_backend(dev), placement=placement,
                         time_us=seconds * 1e6, algbw=algbw, busbw=busbw, wrong=wrong,
                         note=_note(op, placement), median_us=_mean_over_ranks(median, dev) * 1e6,
                         wrong_ranks=wrong_ranks))
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # hand this size's buffers back, so the next size sees them as free
    return rows
