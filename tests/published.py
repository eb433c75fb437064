"""The published nccl-tests tables of tests/data, every collective, and the simulator's busbw against theirs.

``tests/data/published_index.json`` says, for every table, which machine ran it (GPU, nodes, GPUs and
NICs per node), whether it is in the calibration or the held-out set, the preset the lab names (or will
name) for that machine and, until that preset exists, a stand-in built from today's public factories
(``labcore.sim.machines.topologies``). Only public names are used: ``labcore.read_nccl_tests``,
``labcore.sim.simulate`` and ``labcore.sim.machines.topologies`` / ``labcore.sim.nccl.tuner``; nothing here needs a
change when the model improves or the presets move into one registry.

Each entry names its collective (``"collective"``; an entry without one is an all_reduce table): its rows
are read as that collective's, simulated as it and compared with nccl-tests' busbw factor for it
(:func:`labcore.collectives.describe`). The comparison is simulated busbw / published busbw per size. For
nccl-tests output it is computed from the times (published in-place time / simulated time: the same ratio,
without the rounding of small busbw values); for the busbw-only tables of vendor pages, from the busbw itself.

Example
-------
>>> entry = index_entries()[0]
>>> sorted(entry)[:4]
['family', 'file', 'fitted_before_split', 'format']
>>> band_of(64 << 10), band_of(1 << 20), band_of(16 << 20)
('<=64KiB', '64KiB-16MiB', '>=16MiB')
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

DATA = Path(__file__).parent / "data"
INDEX = DATA / "published_index.json"
SETS = ("calibration", "held-out")
BANDS = ("<=64KiB", "64KiB-16MiB", ">=16MiB")
PLACEMENT = "in-place"          # the out-of-place column's first rows often hold warm-up outliers
_MD_ROW = re.compile(r"\|\s*([0-9.]+)([KMG])\s*\|\s*([0-9.]+)\s*\|")


def index_entries(which: str | None = None, collective: str | None = None) -> list[dict]:
    """The index's tables, all or those of one set ("calibration" or "held-out") and of one collective."""
    if which is not None and which not in SETS:
        raise ValueError(f"set must be one of {SETS}, not {which!r}")
    tables = json.loads(INDEX.read_text())["tables"]
    return [t for t in tables if which in (None, t["set"]) and collective in (None, collective_of(t))]


def collective_of(entry: dict) -> str:
    """The collective a table measured: its entry's ``"collective"``, all_reduce where it names none."""
    return entry.get("collective", "all_reduce")


def collectives() -> list[str]:
    """The collectives the index holds tables of, all_reduce first, then in the order of the index."""
    seen = dict.fromkeys(["all_reduce"])
    seen.update(dict.fromkeys(collective_of(t) for t in index_entries()))
    return list(seen)


def busbw_factor(entry: dict) -> float:
    """nccl-tests' busbw / algbw for the table's collective on its ranks."""
    from labcore.collectives import describe

    return describe(collective_of(entry)).busbw_factor(entry["ranks"])


def split_rule() -> dict:
    """The split's date, rule and machine families, as written in the index."""
    return json.loads(INDEX.read_text())["split"]


def split_of_collectives() -> dict:
    """The other collectives' split (``split_collectives``): its date, collectives and rule."""
    return json.loads(INDEX.read_text())["split_collectives"]


def band_of(nbytes: int) -> str:
    """The size band: up to 64 KiB, 64 KiB to 16 MiB, 16 MiB and up."""
    if nbytes <= 64 << 10:
        return BANDS[0]
    return BANDS[1] if nbytes < 16 << 20 else BANDS[2]


def _busbw_table(path: Path, ranks: int) -> list[dict]:
    """Rows of a busbw-only markdown table: the i-th row is 1 KiB x 2**i (its rounded decimal label is
    checked against that), the time follows from nccl-tests' busbw = S / t x 2(n-1)/n."""
    rows = []
    for line in path.read_text().splitlines():
        m = _MD_ROW.match(line)
        if m:
            size = 1024 << len(rows)
            label = float(m.group(1)) * {"K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
            if not 0.9 < size / label < 1.2:
                raise ValueError(f"{path.name}: row {len(rows)} is labelled {line.strip()!r}, not ~{size} bytes")
            busbw = float(m.group(3))
            time_us = size / (busbw * 1e3) * 2 * (ranks - 1) / ranks if busbw > 0 else math.nan
            rows.append(dict(size=size, time_us=time_us, busbw=busbw, from_times=False))
    return rows


def published_rows(entry: dict) -> list[dict]:
    """(size, time_us, busbw, from_times) of every size of a table, read with the lab's reader
    (``labcore.read_nccl_tests``; the in-place column, the first repeat of each size; a size-0
    line, which times an empty call, is no size).

    Raises whatever the reader raises for a table it cannot read (the index says which).
    """
    path = DATA / entry["file"]
    if entry["format"] == "busbw-table":
        return _busbw_table(path, entry["ranks"])
    from labcore.readers import read_nccl_tests

    op = collective_of(entry)
    df = read_nccl_tests(path, op=op, ranks=entry["ranks"])
    df = df[(df["op"] == op) & (df["placement"] == PLACEMENT) & (df["repeat"] == 0) & (df["size"] > 0)]
    return [dict(size=int(r.size), time_us=float(r.time_us), busbw=float(r.busbw), from_times=True)
            for r in df.drop_duplicates("size").itertuples()]


def arithmetic_slips(rows: list[dict], ranks: int, collective: str = "all_reduce") -> list[int]:
    """Sizes whose printed busbw does not follow from their size and time (a misread column or a copy
    slip): busbw = S / t x the collective's factor (2(n-1)/n for all_reduce) within the printed 2
    decimals and nccl-tests' float rounding."""
    from labcore.collectives import describe

    factor = describe(collective).busbw_factor(ranks)
    bad = []
    for r in rows:
        if not r["from_times"]:
            continue
        t = r["time_us"]
        expected = r["size"] / (t * 1e3) * factor if t > 0 else math.inf
        if not abs(expected - r["busbw"]) <= 0.011 + 0.004 * r["busbw"]:
            bad.append(r["size"])
    return bad


def _preset(entry: dict):
    """(topology or None, why not): the index's preset from the one registry (``labcore.sim.machines.presets``)
    built for the table's layout, where its NICs are the table's (a different NIC rate is another
    machine, left to the stand-in)."""
    from labcore.sim import presets

    if entry["preset"] not in presets.PRESETS:
        return None, ""
    spec = presets.entry(entry["preset"])
    layout = dict(nodes=entry["nodes"], gpus_per_node=entry["gpus_per_node"])
    if spec.kind == "cluster" and entry["nics_per_node"]:
        layout["nics_per_node"] = entry["nics_per_node"]
    try:
        topo = presets.topology(entry["preset"], entry["ranks"], **layout)
    except ValueError as e:
        return None, f"; preset {entry['preset']} refused: {str(e).splitlines()[0]}"
    gbps = topo.notes.get("nic B/s", 0) * 8 / 1e9
    if entry["nic_gbps"] and gbps and abs(gbps - entry["nic_gbps"]) > 1:
        return None, f"; preset {entry['preset']} has {gbps:.0f} Gb/s NICs, the table {entry['nic_gbps']}"
    return topo, ""


def topology_for(entry: dict):
    """(topology, how): the index's preset where the registry knows it and builds the table's layout,
    else its stand-in from today's factories; ``(None, reason)`` when neither. The table's process
    layout (the index's ``processes``, from its quote or source) sets the host time: one launch a GPU
    its process drives (:func:`labcore.sim.machines.presets.with_processes`)."""
    from labcore.sim import presets

    topo, how = _topology_for(entry)
    if topo is not None:
        before = topo.issue_s
        presets.with_processes(topo, processes_of(entry))
        if topo.issue_s != before:
            how += f"; {entry['processes']} ({topo.issue_s * 1e6:.2f} us to issue a collective)"
    return topo, how


def processes_of(entry: dict) -> str:
    """The table's process layout as the presets name it (``labcore.sim.presets.PROCESS_LAYOUTS``): one
    process driving several GPUs is "per_node"; one a GPU, and a layout its source does not state, is
    "per_gpu" (mpirun, srun and torchrun start a process a GPU: the common case)."""
    return "per_node" if entry.get("processes", "").startswith("one process,") else "per_gpu"


def _topology_for(entry: dict):
    from labcore.sim import topologies, tuner

    topo, why = _preset(entry)
    if topo is not None and topo.ranks == entry["ranks"] and getattr(topo, "nodes", entry["nodes"]) == entry["nodes"]:
        return topo, f"preset {entry['preset']}"
    missing = f"no preset yet ({entry['preset']}{why})"
    stand = entry["stand_in"]
    if not stand:
        return None, missing
    factory = getattr(topologies, stand["factory"], None)
    if factory is None:
        return None, f"{missing}; stand-in {stand['factory']} is gone"
    try:
        topo = factory(**stand["kwargs"])
    except (TypeError, ValueError) as e:
        return None, f"{missing}; stand-in {stand['factory']} refused: {e}"
    how = f"{missing}; stand-in {stand['factory']}({_kwargs_text(stand['kwargs'])})"
    # a block built by hand names no NCCL machine; the index says which one prices the stand-in
    if entry.get("tuner_machine") in tuner.MACHINES:
        topo.nccl = tuner.MACHINES[entry["tuner_machine"]].with_ranks(topo.ranks, topo.nodes)
        how += f", priced as {entry['tuner_machine']}"
    return topo, how


def _kwargs_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in kwargs.items())


def _tuner_pick(entry: dict, topology, nbytes: int):
    """(simulator algorithm, protocol, options) of NCCL's pick for the table's collective on its machine
    (the preset's own tuner machine, else the index's), or None when the lab's tuner has no machine for
    it or NCCL prices no algorithm for the collective (all_to_all: grouped send/recv, simulated as such).
    Raises the simulator's one-line ValueError where the topology cannot play the pick."""
    from labcore.sim import presets, tuner

    op = collective_of(entry)
    if entry["nccl_algo"] or op not in tuner.FUNCTION_OF:
        return None
    try:
        machine = presets.tuner_for(topology)
    except presets.NoTuner:
        name = entry["tuner_machine"]
        if name not in tuner.MACHINES:
            return None
        machine = tuner.MACHINES[name].with_ranks(entry["ranks"], nodes=entry["nodes"])
    pick = tuner.predict(op, nbytes, machine)
    algorithm, protocol, options, _ = tuner.simulated_as(pick.algorithm, pick.protocol, topology, op)
    return algorithm, protocol, options


def simulated_busbw(entry: dict, topology, nbytes: int, algorithm: str = "best",
                    mechanisms="default") -> tuple[float, str]:
    """(busbw GB/s, what ran) of the simulator for one size of a table, as the table's collective.

    ``algorithm``: "best" (the fastest of NCCL's algorithms as simulated) or "tuner" (NCCL's pick by
    the lab's port of its tuner, with its protocol where the topology has it). A table run with a
    forced algorithm (``nccl_algo``, e.g. NCCL_ALGO=Ring) is simulated with that algorithm.
    ``mechanisms``: NCCL's mechanisms the simulator plays (``labcore.sim.nccl.mechanisms``).
    """
    import labcore.sim as sim

    protocol, options = "auto", {}
    if entry["nccl_algo"]:
        algorithm = entry["nccl_algo"].lower()
    elif algorithm == "tuner":
        pick = _tuner_pick(entry, topology, nbytes)
        algorithm, protocol, options = pick if pick else ("best", "auto", {})
    trace = sim.simulate(collective_of(entry), algorithm, entry["ranks"], nbytes, topology=topology,
                         values=False, protocol=protocol, mechanisms=mechanisms, **options)
    return trace.busbw, f"{trace.schedule.algorithm}/{trace.protocol}"


def table_ratios(entry: dict, algorithm: str = "best", mechanisms="default") -> dict:
    """Simulated / published busbw for every size of one table.

    Returns a dict: ``rows`` [(size, published busbw, simulated busbw, ratio, what ran)], ``topology``
    (how it was built), ``status`` ("ok", or why no number came out: the reader, the arithmetic check,
    no topology) and ``errors`` {size: the simulator's one-line refusal}.
    """
    out = dict(file=entry["file"], set=entry["set"], collective=collective_of(entry), rows=[], errors={},
               topology="", status="ok")
    try:
        rows = published_rows(entry)
    except (ValueError, KeyError) as e:
        out["status"] = f"reader cannot read it yet: {str(e).splitlines()[0]}"
        return out
    slips = arithmetic_slips(rows, entry["ranks"], out["collective"])
    if slips:
        out["status"] = f"reader misreads it ({len(slips)} sizes fail busbw = S/t x the busbw factor)"
        return out
    topology, out["topology"] = topology_for(entry)
    if topology is None:
        out["status"] = out["topology"]
        return out
    factor = busbw_factor(entry)
    for r in rows:
        try:
            busbw, ran = simulated_busbw(entry, topology, r["size"], algorithm, mechanisms)
        except (ValueError, RuntimeError, MemoryError) as e:
            out["errors"][r["size"]] = str(e).splitlines()[0]
            continue
        ratio = (r["time_us"] / (r["size"] / (busbw * 1e3) * factor)
                 if r["from_times"] else busbw / r["busbw"] if r["busbw"] > 0 else math.nan)
        out["rows"].append((r["size"], r["busbw"], busbw, ratio, ran))
    return out


def band_summary(rows: list[tuple]) -> dict:
    """Per size band: n, min, median and max of simulated/published busbw, and how many sizes lie
    within 25% and within 40% of the published."""
    out = {}
    for band in BANDS:
        ratios = [r[3] for r in rows if band_of(r[0]) == band and not math.isnan(r[3])]
        if ratios:
            out[band] = dict(n=len(ratios), min=min(ratios), median=statistics.median(ratios), max=max(ratios),
                             within25=sum(abs(x - 1) <= 0.25 for x in ratios),
                             within40=sum(abs(x - 1) <= 0.40 for x in ratios))
    return out


def fit_net_latency(entries: list[dict], algorithm: str = "tuner",
                    collectives: tuple[str, ...] = ("all_reduce",)) -> tuple[float, float]:
    """(seconds, sum of squared log ratios): the network latency per step across nodes
    (``topology.net_latency_s``, :mod:`labcore.sim.nccl.mechanisms` "netlatency") that brings the
    simulator closest to the sizes of 64 KiB and below of ``entries`` (the time there is latency).
    Only calibration tables of ``collectives`` may be passed: a held-out table never sets a parameter,
    and a table of another collective is refused rather than pulled in."""
    return _fit_small_sizes(entries, "net_latency_s", algorithm, collectives)


def fit_issue_s(entries: list[dict], algorithm: str = "tuner",
                collectives: tuple[str, ...] = ("all_reduce",)) -> tuple[float, float]:
    """(seconds, sum of squared log ratios): the host time per collective when one process drives
    every GPU (``topology.issue_s``, nccl-tests ``-g 8``) that brings the simulator closest to the sizes
    of 64 KiB and below of ``entries``; over the GPUs the process drives it is the host time a launch
    (``topology.host_s``). Only one-process calibration tables of ``collectives`` may be passed (a run
    of one process per GPU issues one launch a process)."""
    apart = [e["file"] for e in entries if not e.get("processes", "").startswith("one process,")]
    if apart:
        raise ValueError(f"fit the host time on one-process tables only, not {apart}")
    return _fit_small_sizes(entries, "issue_s", algorithm, collectives)


def _fit_small_sizes(entries: list[dict], attribute: str, algorithm: str,
                     collectives: tuple[str, ...]) -> tuple[float, float]:
    """The value of the topology's ``attribute`` (seconds) that brings the simulator closest to the
    small sizes of ``entries`` (least squares of the log ratios), searched on a grid of 5 us from 0 to
    100 us, then of 0.5 us around the best."""
    import copy

    held = [e["file"] for e in entries if e["set"] != "calibration"]
    if held or not entries:
        raise ValueError(f"fit on calibration tables only, not {held or 'none'}")
    other = [e["file"] for e in entries if collective_of(e) not in collectives]
    if other:
        raise ValueError(f"fit on tables of {', '.join(collectives)} only, not {other}")
    cases = []
    for e in entries:
        topo, _ = topology_for(e)
        factor = busbw_factor(e)
        cases += [(e, topo, r["size"], r["time_us"] * 1e3 / (r["size"] * factor))     # 1 / published busbw
                  for r in published_rows(e) if band_of(r["size"]) == BANDS[0]]

    def error(seconds):
        total, moved = 0.0, {}
        for e, topo, size, inverse_busbw in cases:
            if id(topo) not in moved:          # one copy a table (the simulator keeps a tree's peak per topology)
                moved[id(topo)] = copy.copy(topo)
                setattr(moved[id(topo)], attribute, seconds)
            busbw, _ = simulated_busbw(e, moved[id(topo)], size, algorithm)
            total += math.log(busbw * inverse_busbw) ** 2
        return total

    best = min((error(us * 1e-6), us) for us in range(0, 101, 5))
    best = min((error(x * 1e-6), x) for x in [best[1] + d / 2 for d in range(-10, 11)] if x >= 0)
    return best[1] * 1e-6, best[0]
