"""NCCL's model as tables: one call's cost table, the TUNING table, sweeps and crossovers.

Example
-------
>>> from labcore.sim.nccl.tuner.machine import MACHINES
>>> t = cost_table("all_reduce", 4 << 20, MACHINES["dgx_h100"])
>>> t.loc[t["chosen"], "option"].item()
'NVLS/Simple'
>>> print(tuning_log(MACHINES["dgx_h100"]).splitlines()[7][:59])
NCCL INFO     AllReduce |    15.2/  43.6 |    31.5/ 128.8 |
"""
from __future__ import annotations

from labcore.sim.nccl.tuner import constants as C
from labcore.sim.nccl.tuner.machine import Machine
from labcore.sim.nccl.tuner.model import check_nbytes, choose, options, tune


def cost_table(op: str, nbytes: int, machine: Machine, *, algo_env: str | None = None,
               proto_env: str | None = None):
    """Every algorithm x protocol NCCL prices for one call, as a DataFrame (21 rows, NCCL's order).

    Columns: ``algorithm``, ``protocol``, ``option`` ("Ring/LL"), ``latency_us`` and
    ``algbw_gbs`` (what enters this call's time, the size corrections included),
    ``time_us`` (NaN where the option is unavailable), ``available``, ``chosen`` (the one
    NCCL runs) and ``note`` (why an option is unavailable, or which correction applied).

    Parameters
    ----------
    op : "all_reduce", "all_gather", "reduce_scatter", "broadcast" or "reduce".
    nbytes : bytes as nccl-tests prints the size (the whole buffer for all_gather/reduce_scatter).
    machine : a :class:`~labcore.sim.nccl.tuner.machine.Machine`, e.g. ``MACHINES["dgx_h100"]``.
    algo_env, proto_env : NCCL_ALGO / NCCL_PROTO values, e.g. ``"allreduce:^NVLS"``.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> t = cost_table("all_reduce", 8, MACHINES["dgx_h100"])
    >>> t.loc[t["available"], ["option", "time_us"]].round(2).values.tolist()[:2]
    [['Tree/LL', 15.2], ['Tree/LL128', 31.5]]
    """
    import pandas as pd

    opts = options(op, nbytes, machine, algo_env, proto_env)
    best = choose(op, nbytes, machine, algo_env, proto_env).name
    rows = [{"algorithm": o.algorithm, "protocol": o.protocol, "option": o.name, "latency_us": o.latency_us,
             "algbw_gbs": o.algbw_gbs, "time_us": o.time_us, "available": o.time_us is not None,
             "chosen": o.name == best, "note": o.note} for o in opts]
    return pd.DataFrame(rows).astype({"time_us": float})


def tuning_table(machine: Machine, *, algo_env: str | None = None, proto_env: str | None = None):
    """NCCL's TUNING table as a DataFrame: function, algorithm, protocol, latency_us, algbw_gbs,
    max_threads, note (why a bandwidth is 0). The numbers hold for every size; a call then
    applies the size corrections (see :func:`cost_table`).

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> t = tuning_table(MACHINES["pcie_4090"])
    >>> t.query("function == 'AllReduce' and algorithm == 'Ring'")["note"].tolist()
    ['', 'LL128 is off by default on this path', '']
    """
    import pandas as pd

    t = tune(machine, algo_env, proto_env)
    rows = [{"function": f, "algorithm": a, "protocol": p, "latency_us": t.latency[f, a, p],
             "algbw_gbs": t.bandwidth[f, a, p], "max_threads": t.max_threads[a, p],
             "note": t.off.get((f, a, p), "")}
            for f in C.FUNCTIONS for a in C.ALGORITHMS for p in C.PROTOCOLS]
    return pd.DataFrame(rows)


def tuning_log(machine: Machine, *, algo_env: str | None = None, proto_env: str | None = None) -> str:
    """The TUNING lines rank 0 prints with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``, in
    NCCL 2.30.7's layout (three algorithms a block; ``latency/bandwidth`` in us and GB/s).

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> tuning_log(MACHINES["dgx_h100"]).splitlines()[7][:31]
    'NCCL INFO     AllReduce |    15'
    """
    t = tune(machine, algo_env, proto_env)
    lines = []
    n = len(C.ALGORITHMS)
    for block in range(-(-n // 3)):
        algos = [C.ALGORITHMS[i] for i in range(3 * block, 3 * block + 3) if i < n]
        lines.append("  Algorithm   |" + "".join(f" {'':>14}   {a:>14}   {'':>14} |" for a in algos))
        lines.append("  Protocol    |" + "".join(f" {p:>14} |" for _ in range(3) for p in C.PROTOCOLS))
        lines.append(" Max NThreads |" + "".join(f" {t.max_threads[a, p]:>14d} |" for a in algos
                                                for p in C.PROTOCOLS))
        for f in C.FUNCTIONS:
            lines.append(f"{f:>13} |" + "".join(f"{t.latency[f, a, p]:8.1f}/{t.bandwidth[f, a, p]:6.1f} |"
                                                for a in algos for p in C.PROTOCOLS))
    return "\n".join("NCCL INFO " + line for line in lines)


def cost_sweep(op: str, machine: Machine, sizes, *, algo_env: str | None = None, proto_env: str | None = None):
    """Long DataFrame over ``sizes``: one row per available option and size (columns of
    :func:`cost_table` plus ``size``), ``chosen`` marking NCCL's pick.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> df = cost_sweep("all_gather", MACHINES["dgx_h100"], [1 << 10, 1 << 30])
    >>> df.loc[df["chosen"], ["size", "option"]].values.tolist()
    [[1024, 'Ring/LL'], [1073741824, 'Ring/Simple']]
    """
    import pandas as pd

    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"sizes must be a list of byte counts such as [1024, 1 << 20], not {sizes!r}")
    frames = []
    for size in map(check_nbytes, sizes):
        t = cost_table(op, size, machine, algo_env=algo_env, proto_env=proto_env)
        frames.append(t[t["available"]].assign(size=size))
    if not frames:
        raise ValueError("sizes is empty: give at least one byte count")
    cols = ["size", "algorithm", "protocol", "option", "latency_us", "algbw_gbs", "time_us", "chosen", "note"]
    return pd.concat(frames, ignore_index=True)[cols]


def crossovers(op: str, machine: Machine, min_bytes: int = 8, max_bytes: int = 16 << 30, *,
               algo_env: str | None = None, proto_env: str | None = None) -> list[tuple[int, str, str]]:
    """Sizes where NCCL's choice changes as the message grows: (first byte count of the new
    choice, old choice, new choice), found by bisection between powers of two.

    Example
    -------
    >>> from labcore.sim.nccl.tuner.machine import MACHINES
    >>> [new for _, _, new in crossovers("all_reduce", MACHINES["dgx_h100"])][-1]
    'NVLS/Simple'
    """
    def pick(size):
        return choose(op, size, machine, algo_env, proto_env).name

    min_bytes, max_bytes = check_nbytes(min_bytes), check_nbytes(max_bytes)
    if not 1 <= min_bytes < max_bytes:
        raise ValueError(f"crossovers searches from min_bytes up to a larger max_bytes, from 1 byte (sizes double), "
                         f"not {min_bytes} to {max_bytes}")

    out = []
    size, prev = min_bytes, pick(min_bytes)
    while size < max_bytes:
        nxt = min(size * 2, max_bytes)
        if pick(nxt) == prev:
            size = nxt
            continue
        lo, hi = size, nxt                      # prev at lo, something else at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if pick(mid) == prev else (lo, mid)
        new = pick(hi)
        out.append((hi, prev, new))
        size, prev = hi, new                    # look for more changes in the same octave
    return out


def protocol_table():
    """LL, LL128 and Simple side by side: line size, payload per line, how the receiver knows the
    data arrived, and the ring buffer NCCL gives each (device.h, init.cc).

    Example
    -------
    >>> protocol_table()["efficiency"].tolist()
    [0.5, 0.9375, 1.0]
    """
    import pandas as pd

    return pd.DataFrame([
        {"protocol": "LL", "line_bytes": C.LL_LINE_BYTES, "data_bytes": C.LL_LINE_BYTES // 2,
         "efficiency": 0.5, "synchronisation": "a flag next to every 4 data bytes",
         "buffer_bytes": C.LL_BUFFSIZE},
        {"protocol": "LL128", "line_bytes": C.LL128_LINE_BYTES, "data_bytes": C.LL128_DATA_BYTES,
         "efficiency": C.LL128_DATA_BYTES / C.LL128_LINE_BYTES,
         "synchronisation": "one 8-byte flag in every 128-byte line", "buffer_bytes": C.LL128_BUFFSIZE},
        {"protocol": "Simple", "line_bytes": None, "data_bytes": None, "efficiency": 1.0,
         "synchronisation": "memory fence, then one counter a step", "buffer_bytes": C.SIMPLE_BUFFSIZE},
    ])
