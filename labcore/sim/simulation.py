"""simulate(): one collective, one algorithm, one topology, step by step (numpy only, no torch).

Builds the algorithm's schedule (:mod:`labcore.sim.core.schedules`), checks it against the topology,
times every transfer (:mod:`labcore.sim.core.engine`), moves real values when asked and returns the
:class:`~labcore.sim.core.trace.Trace`. A preset name resolves through the one catalog of machines
(:mod:`labcore.sim.machines.presets`); NCCL's mid-size mechanisms come from :mod:`labcore.sim.nccl.mechanisms`.

Example
-------
>>> t = simulate("all_reduce", ranks=8, nbytes=64 << 20, topology="nvswitch8")
>>> t.verify(); t.schedule.algorithm
'ring'
>>> simulate("broadcast", ranks=4, nbytes=4096).schedule.algorithm     # the collective's own default
'chain'
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import weakref

import numpy as np

from labcore import validate
from labcore.collectives import canonical, describe
from labcore.sim.core import engine
from labcore.sim.core.buffers import REDUCE_OPS
from labcore.sim.core.network import Topology
from labcore.sim.core.registry import REGISTRY
from labcore.sim.core.schedules import ALGORITHMS, build, nccl_algorithms
from labcore.sim.core.trace import Trace
from labcore.sim.machines import presets, topologies
from labcore.sim.nccl import mechanisms as nccl_mechanisms

__all__ = ["simulate", "MAX_VALUES_BYTES", "MAX_TRANSFERS", "MAX_PIPELINE", "MAX_CHANNELS", "MAX_RANKS"]

MAX_VALUES_BYTES = 1 << 30       # a value-carrying run keeps every step's buffers: refuse what would pass this
# (the whole run's peak, engine.values_bytes: Binder gives 2 GB, and the notebook, its clusters and plots want theirs)
MAX_TRANSFERS = 12_000_000       # a schedule's transfers (a few hundred bytes each while it is timed)
MAX_PIPELINE = 1 << 14
MAX_CHANNELS = 64
MAX_RANKS = 1 << 14


def simulate(op: str, algorithm: str | None = None, ranks: int = 8, nbytes: float = 1 << 20, topology=None,
             reduce_op: str = "sum", values: bool = True, contention: bool = True, elements: int = 1,
             seed: int = 0, protocol: str | None = "auto", mechanisms="default", processes: str | None = None,
             **options) -> Trace:
    """Simulate collective ``op`` with ``algorithm`` on ``ranks`` ranks and return its Trace.

    Parameters
    ----------
    op : a collective the simulator plays (``ALGORITHMS``: "all_reduce", "reduce_scatter", "all_gather",
        "broadcast", "reduce", "all_to_all"; nccl-tests' names and the aliases of :mod:`labcore.collectives`
        too).
    algorithm : a name from ``ALGORITHMS[op]``; "best": the fastest of the schedules that play one of
        NCCL's algorithms (:func:`labcore.sim.core.schedules.nccl_algorithms`) that the topology can run,
        as simulated; None (the default): the collective's own default (``describe(op).sim``).
    ranks : number of ranks (any number from 1).
    nbytes : message size S in bytes, as nccl-tests reports it for ``op``.
    topology : a topology from :mod:`labcore.sim.machines.topologies`, or a preset name such as
        ``"nvswitch8"`` or ``"dgx_h100_ib"`` (:mod:`labcore.sim.machines.presets`, built for ``ranks``);
        default ``uniform(ranks)`` (1 us, 10 GB/s per link).
    reduce_op : "sum", "max", "min" or "prod".
    values : move real numbers (needed by ``verify()``); False times only, for big runs.
    contention : transfers that share a link share its bandwidth.
    elements : numbers carried per chunk when values are on.
    seed : seed for the random integer inputs.
    protocol : on a topology that describes NCCL's protocols: "auto" (the fastest), or one
        of ``topology.protocols``; None runs the topology as it is.
    processes : the job's process layout (:data:`labcore.sim.machines.presets.PROCESS_LAYOUTS`):
        "per_node" (one process drives a node's GPUs, nccl-tests ``-g 8``) or "per_gpu" (mpirun,
        srun, torchrun), which sets the host time a collective takes to issue
        (:func:`labcore.sim.machines.presets.with_processes`). None: a preset name is built with its
        own (:attr:`labcore.sim.machines.presets.Preset.default_processes`: "per_node" on one node,
        "per_gpu" across nodes), a topology object runs as it is; given with an object, a copy of it
        runs with that layout.
    mechanisms : on a topology that knows its NCCL machine (the NVSwitch presets), which of NCCL's
        mid-size mechanisms a collective of NCCL's tuner plays (:data:`labcore.sim.nccl.mechanisms.MECHANISMS`:
        "channels", NCCL's channels at a size; "chunks", its chunk pipeline; "correction", its
        tree correction factor; "netlatency", the net plugin's latency on every step across nodes;
        "plateau", the multi-node Ring/Simple latency; "netoverhead", a multi-node ring's floor on
        its NVLink steps; "caps", NCCL's bus bandwidth caps on a tree across nodes): "default" (all
        but the plateau and netoverhead,
        :data:`labcore.sim.nccl.mechanisms.DEFAULT`), "all", () for none, or a tuple of names.
    **options : passed to the schedule builder (``root``, ``pipeline``, ``order``, ``channels``,
        ``gpus_per_node``). Left out, they come from the topology: its nodes (hierarchical and
        NCCL's multi-node trees), its channels and their rings, the protocol's pipeline.

    Example
    -------
    >>> t = simulate("broadcast", algorithm="chain", ranks=4, nbytes=4096, pipeline=4)
    >>> t.verify(); t.schedule.n_steps
    6
    >>> t = simulate("all_reduce", "ring", 32, 1 << 30, topology="multinode", values=False)
    >>> t.schedule.n_channels, t.protocol, round(t.busbw)     # one ring per NIC
    (8, 'Simple', 364)
    """
    op = _collective(op)
    algorithm = describe(op).sim if algorithm is None else algorithm
    _check(op, algorithm, ranks, nbytes, elements, options)
    _check_run(reduce_op, values, contention, seed, topology)
    ranks = int(ranks)
    if topology is None:
        topo = topologies.uniform(ranks)
    elif isinstance(topology, str):
        topo = presets.topology(topology, ranks, processes=processes)
    elif processes is not None:
        topo = presets.with_processes(copy.copy(topology), processes)
    else:
        topo = topology
    if topo.ranks != ranks:
        raise ValueError(f"the topology {topo.name!r} has {topo.ranks} ranks but ranks={ranks}; "
                         f"build it for {ranks} ranks")
    which = nccl_mechanisms.selected(mechanisms)
    candidates = _candidates(op, topo) if algorithm == "best" else [algorithm]
    best, schedules = None, {}
    for algo in candidates:
        nccl_runs = nccl_mechanisms.nccl_protocol(op, algo, nbytes, topo) if protocol == "auto" else None
        for proto in _protocols(topo, algo, nccl_runs or protocol):
            view = topo if proto is None else topo.with_protocol(proto, algo)
            adj = nccl_mechanisms.adjust(op, algo, proto, nbytes, topo, options, which)
            if "caps" in which and adj.nccl_algorithm == "Tree" and proto != "LL":
                adj = _capped(op, algo, proto, topo, options, which, adj)
            view = nccl_mechanisms.apply(view, adj)
            given = {**options, **{k: v for k, v in (("channels", adj.channels), ("pipeline", adj.pipeline))
                                   if v is not None}}
            opts = _options(op, algo, ranks, nbytes, topo, view, given)
            key = (algo, tuple(sorted((k, str(v)) for k, v in opts.items())))
            if key not in schedules:
                _check_size(op, algo, ranks, opts)
                sched = build(op, algo, ranks, nbytes, **opts)
                engine.check_schedule(sched, view)
                schedules[key] = (sched, engine.plan(sched, view))
            sched, plan = schedules[key]
            timed = engine.timing(plan, view, contention)
            if best is None or timed["time_s"] < best[0]["time_s"]:
                best = (timed, sched, view, plan)
    timed, sched, view, plan = best
    if values:
        need = engine.values_bytes(sched, elements)
        if need > MAX_VALUES_BYTES:
            raise ValueError(f"carrying values through this run would need ~{need / 2**30:.1f} GiB at its peak "
                             f"({sched.n_steps} steps x {sched.chunks} chunks x {sched.agents} agents), over the "
                             f"{MAX_VALUES_BYTES / 2**30:g} GiB a run with values may take; time it only "
                             "(values=False, --no-values on the command line), or use fewer ranks or pieces")
    trace = Trace(sched, view, reduce_op, contention=contention, protocol=view.protocol, **timed)
    if values:
        engine._move_values(trace, elements, seed)
    return trace


_TREE_PEAKS = weakref.WeakKeyDictionary()


def _capped(op, algo, proto, topo, options, which, adj):
    """The adjustment with every link slowed so that the tree's peak busbw (at PEAK_BYTES, without this
    mechanism) is at most NCCL's bus bandwidth for it (mechanism "caps", LL128 and Simple: NCCL caps
    the collective's busBw, not one kind of link). The peak is kept per topology object and what a
    copy may change."""
    cap = nccl_mechanisms.tree_cap(topo.nccl, proto)
    if cap is None:
        return adj
    rest = tuple(m for m in which if m != "caps")
    key = (op, algo, proto, rest, tuple(sorted((k, str(v)) for k, v in options.items())), topo.net_latency_s,
           topo.issue_s)
    peaks = _TREE_PEAKS.setdefault(topo, {})
    if key not in peaks:
        peaks[key] = simulate(op, algo, topo.ranks, nccl_mechanisms.PEAK_BYTES, topology=topo, values=False,
                              protocol=proto, mechanisms=rest, **options).busbw * 1e9
    scale = min(1.0, cap / peaks[key])
    return dataclasses.replace(adj, bandwidth_scale=adj.bandwidth_scale * scale)


def _collective(op) -> str:
    """The lab's name of a collective the simulator plays; one-line ValueError otherwise."""
    try:
        name = canonical(op)
    except ValueError:
        name = None
    if name not in ALGORITHMS:
        raise ValueError(f"unknown collective {op!r}; choose one of {', '.join(ALGORITHMS)}")
    return name


def _check(op, algorithm, ranks, nbytes, elements, options) -> None:
    """Refuse bad inputs before any work, with the fix."""
    if not isinstance(algorithm, str):
        raise ValueError(f"algorithm must be a name such as 'ring' or 'best', not {algorithm!r}")
    if algorithm != "best" and algorithm not in ALGORITHMS[op]:
        raise ValueError(f"no {algorithm!r} algorithm for {op}; choose one of {', '.join(sorted(ALGORITHMS[op]))} "
                         "or 'best'")
    validate.whole_number(ranks, "ranks", least=1, most=MAX_RANKS)
    validate.finite_number(nbytes, "nbytes", at_least=0, must="a finite number of bytes, 0 or more")
    validate.whole_number(elements, "elements", least=1)
    if options.get("root") is not None:
        validate.whole_number(options["root"], "root", must="a whole rank number")
    for name, most in (("pipeline", MAX_PIPELINE), ("channels", MAX_CHANNELS), ("gpus_per_node", MAX_RANKS)):
        if options.get(name) is not None:
            validate.whole_number(options[name], name, least=1, most=most)


def _check_run(reduce_op, values, contention, seed, topology) -> None:
    """Refuse what the run itself takes, before any schedule is built."""
    if reduce_op not in REDUCE_OPS:
        raise ValueError(f"unknown reduce_op {reduce_op!r}; choose one of {', '.join(REDUCE_OPS)}")
    for name, flag in (("values", values), ("contention", contention)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, not {flag!r}")
    validate.whole_number(seed, "seed", least=0)
    if topology is not None and not isinstance(topology, (str, Topology)):
        raise TypeError(f"topology must be a preset name such as 'nvswitch8' or a topology from "
                        f"labcore.sim.machines.topologies, not {type(topology).__name__}")


def _check_size(op, algo, ranks, opts) -> None:
    """Refuse a schedule too big to build, saying how big it would be."""
    p, k, c = ranks, opts.get("pipeline") or 1, opts.get("channels") or 1
    estimate = REGISTRY[op, algo].estimate(p, k, c, opts.get("gpus_per_node"))
    if estimate > MAX_TRANSFERS:
        raise ValueError(f"{op}/{algo} on {p} ranks ({k} pieces, {c} channels) would build ~{estimate / 1e6:.0f} "
                         f"million transfers (limit {MAX_TRANSFERS / 1e6:.0f} million); use fewer ranks, pieces "
                         "or channels")


def _candidates(op, topo) -> list[str]:
    """NCCL's algorithms for ``op`` that ``topo`` can run (in-network ones need a reducing switch)."""
    algos = nccl_algorithms(op)
    algos = [a for a in algos if topo.switch_agents or a not in ("nvls", "in_network")]
    if getattr(topo, "has_engine", True) is False and "nvls" in algos:
        algos.remove("nvls")
    if getattr(topo, "sharp", True) is False and "in_network" in algos:
        algos.remove("in_network")
    if topo.nodes > 1 and "nvls" in algos:     # across nodes NVLS runs when named or picked by NCCL's tuner
        algos.remove("nvls")
    if topo.nodes == 1 and "nvls" in algos and "in_network" in algos:    # NVLS needs the NVSwitch's engine
        algos.remove("in_network")
    return algos or [describe(op).sim]


def _protocols(topo, algorithm, protocol) -> list:
    """The protocols to try for ``algorithm``: None when the topology describes none."""
    if protocol is None or not topo.protocols:
        if protocol not in (None, "auto"):
            raise ValueError(f"topology {topo.name!r} describes no protocols; leave protocol at 'auto' (or None)")
        return [None]
    usable = [name for name, p in topo.protocols.items() if not p.algorithms or algorithm in p.algorithms]
    if protocol == "auto":
        return usable or [None]
    named = {name.lower(): name for name in topo.protocols}
    protocol = named.get(str(protocol).lower(), protocol)
    if protocol not in topo.protocols:
        raise ValueError(f"unknown protocol {protocol!r}: {topo.name!r} describes {', '.join(topo.protocols)}; "
                         "choose one of them or 'auto'")
    if protocol not in usable:
        raise ValueError(f"protocol {protocol!r} cannot run {algorithm!r} on {topo.name!r}; choose one of "
                         f"{', '.join(usable) or 'none'} or 'auto'")
    return [protocol]


def _options(op, algo, ranks, nbytes, topo, view, given) -> dict:
    """The builder's options: what the caller gave, the rest from the topology and protocol."""
    accepted = inspect.signature(ALGORITHMS[op][algo]).parameters
    opts = dict(given)
    if "gpus_per_node" in accepted and "gpus_per_node" not in opts and topo.nodes > 1:
        opts["gpus_per_node"] = ranks // topo.nodes
    if "channels" in accepted and "channels" not in opts:
        opts["channels"] = topo.channel_count(nbytes)
    if "order" in accepted and "order" not in opts and opts.get("channels", 1) > 1:
        opts["order"] = topo.ring_orders(opts["channels"])
    if "engine" in accepted and "engine" not in opts and getattr(topo, "engine_agent0", None) is not None:
        opts["engine"] = topo.engine_agent0           # the NVSwitches' engines come after the fabric's switch
    if "across" in accepted and "across" not in opts and topo.nodes > 1:
        opts["across"] = "switch" if getattr(topo, "sharp", False) else "ring"
    if "pipeline" in accepted and "pipeline" not in opts and view.protocol is not None and algo != "hierarchical":
        opts["pipeline"] = view.protocols[view.protocol].pieces(nbytes)
    return opts
