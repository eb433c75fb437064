"""Who logged what: the ranks of an NCCL log, their host, process, device and communicator.

NCCL's init lines name a rank outright (``ncclCommInitRank comm 0x.. rank 3 nranks 8 cudaDev 3 ...``),
but many real logs are excerpts without them: only channel, ring and peer lines survive. Those still
say who logged them. Every line's prefix names its process (``host:pid:tid [cudaDev]``), and a peer
line names the rank that printed it:

- ``Channel 00/0 : 1[1] -> 0[0] [send] via ...``: the sender, rank 1; ``[receive]``: the receiver;
- a line without a direction (NCCL 2.3-2.7's ``Ring 00 : 155[3d000] -> 157[b2000] via P2P/IPC``,
  2.8-2.1x's ``Channel 00 : 2[a000] -> 3[b000] via P2P/direct pointer``): the end the launcher's rank
  tag names (``[155]``, mpirun's ``[1,155]<stdout>:``), else the end every undirected line of that
  process and device shares, else the sender (NCCL logs its send connections);
- ``Ring 00 : prev -> rank -> next``: the rank in the middle.

The brackets after a rank hold its CUDA device (NCCL 2.12 and later) or its PCI bus id (``3d000``,
``1b0``: before 2.12, and in every ``busId`` field).

One process can hold ranks of several communicators (vLLM's tensor- and pipeline-parallel groups, a
``ncclCommSplit``). A device has one rank per communicator, so a device of one process that logs
lines for two rank numbers shows two communicators; their lines are then told apart by the
communicator's address where NCCL 2.2x appends it (``comm 0x5609976f9470 nRanks 32``), else by the
thread that set up its connections. Elsewhere ``comm`` is left empty: one communicator per process
needs no column, and an address is a process's own (two processes' rows of one communicator differ).

Example
-------
>>> peers = [dict(host="h", pid="7", tid="9", dev=1, tag=None, src=1, dst=0, direction="send", src_id="1",
...               dst_id="0", pointer=None)]
>>> ranks_table([], peers)[["rank", "host", "pid", "cuda_dev"]].values.tolist()
[[1, 'h', '7', 1]]
"""
from __future__ import annotations

import pandas as pd

__all__ = ["COLUMNS", "ranks_table", "logger", "label_communicators"]

COLUMNS = ["rank", "nranks", "cuda_dev", "bus_id", "host", "pid", "comm", "nodes", "local_ranks", "local_rank",
           "function", "comm_id"]
_COUNTS = ("rank", "nranks", "cuda_dev", "nodes", "local_ranks", "local_rank")


def _device_or_bus(text: str | None) -> tuple[int | None, str | None]:
    """A bracket after a rank: a CUDA device (a short decimal) or a PCI bus id (hex, or 3+ digits)."""
    if not text:
        return None, None
    if text.isdigit() and len(text) <= 2:
        return int(text), None
    return None, text


def _shared_end(peers: list[dict]) -> dict:
    """(host, pid, dev) -> the one rank every undirected line of that process and device names."""
    ends: dict = {}
    for p in peers:
        if not p["direction"]:
            key = (p["host"], p["pid"], p["dev"])
            ends[key] = ends.get(key, {p["src"], p["dst"]}) & {p["src"], p["dst"]}
    return {k: next(iter(v)) for k, v in ends.items() if len(v) == 1}


def logger(peers: list[dict]) -> list[int]:
    """The rank that printed each peer line (see the module's rules)."""
    shared = _shared_end(peers)
    out = []
    for p in peers:
        if p["direction"]:
            out.append(p["src"] if p["direction"] == "send" else p["dst"])
        elif p["tag"] in (p["src"], p["dst"]):
            out.append(p["tag"])
        else:
            out.append(shared.get((p["host"], p["pid"], p["dev"]), p["src"]))
    return out


def label_communicators(peers: list[dict], loggers: list[int]) -> list[str | None]:
    """Each peer line's communicator, where its process holds ranks of more than one, else None."""
    ranks: dict = {}
    for p, r in zip(peers, loggers):
        ranks.setdefault((p["host"], p["pid"]), {}).setdefault(p["dev"], set()).add(r)
    mixed = {proc for proc, devs in ranks.items() if any(len(rs) > 1 for rs in devs.values())}
    return [(p["pointer"] or f"thread {p['tid']}") if (p["host"], p["pid"]) in mixed else None for p in peers]


def _sightings_of_peers(peers: list[dict], loggers: list[int], comms: list) -> list[dict]:
    """What peer lines say of the rank that printed them: its process, device or bus id, communicator."""
    out = []
    for p, rank, comm in zip(peers, loggers, comms):
        dev, bus = _device_or_bus(p["src_id"] if rank == p["src"] else p["dst_id"])
        out.append(dict(host=p["host"], pid=p["pid"], rank=rank, comm=comm,
                        cuda_dev=p["dev"] if p["dev"] is not None else dev, bus_id=bus))
    return out


def _merge(rows: list[dict]) -> dict:
    merged: dict = {}
    for row in rows:
        for k, v in row.items():
            if v is not None and merged.get(k) is None:
                merged[k] = v
    return merged


def _rows(sightings: list[dict]) -> list[dict]:
    """One row per rank of each process and communicator. A sighting that names no communicator
    (an init timing, a ring neighbour line) joins its rank's row where there is one communicator to
    join, or the one whose device it names."""
    by_rank: dict = {}
    for s in sightings:
        by_rank.setdefault((s["host"], s["pid"], s["rank"]), []).append(s)
    out = []
    for group in by_rank.values():
        comms = list(dict.fromkeys(s["comm"] for s in group if s["comm"] is not None))
        if len(comms) <= 1:
            out.append(_merge([dict(s, comm=comms[0] if comms else None) for s in group]))
            continue
        loose = [s for s in group if s["comm"] is None]
        for comm in comms:
            own = [s for s in group if s["comm"] == comm]
            devs = {s.get("cuda_dev") for s in own} - {None}
            out.append(_merge(own + [s for s in loose if s.get("cuda_dev") in devs]))
    return out


def _remote_bus_ids(peers: list[dict], rows: list[dict]) -> None:
    """Bus ids printed for the far end of a line, given to that rank's row where only one row has its number."""
    count: dict = {}
    for row in rows:
        count[row["rank"]] = count.get(row["rank"], 0) + 1
    by_rank = {row["rank"]: row for row in rows if count[row["rank"]] == 1}
    for p in peers:
        for rank, text in ((p["src"], p["src_id"]), (p["dst"], p["dst_id"])):
            _, bus = _device_or_bus(text)
            row = by_rank.get(rank)
            if bus and row is not None and row.get("bus_id") is None:
                row["bus_id"] = bus


def _mixing(rows: list[dict]) -> set:
    """Processes (host, pid) one of whose devices holds more than one rank: several communicators."""
    seen: dict = {}
    for row in rows:
        if row.get("cuda_dev") is not None:
            seen.setdefault((row.get("host"), row.get("pid"), row["cuda_dev"]), set()).add(row["rank"])
    return {(host, pid) for (host, pid, _), ranks in seen.items() if len(ranks) > 1}


def ranks_table(sightings: list[dict], peers: list[dict]) -> pd.DataFrame:
    """The ranks table: init-line sightings (dicts with host, pid, rank, comm and what the line gave)
    and peer lines (dicts with host, pid, tid, dev, tag, src, dst, direction, src_id, dst_id, pointer)."""
    loggers = logger(peers)
    comms = label_communicators(peers, loggers)
    rows = _rows(sightings + _sightings_of_peers(peers, loggers, comms))
    _remote_bus_ids(peers, rows)
    mixing = _mixing(rows)
    for row in rows:   # an address names a communicator only among those of its own process
        if (row.get("host"), row.get("pid")) not in mixing:
            row["comm"] = None
    frame = pd.DataFrame({k: pd.array([r.get(k) for r in rows], dtype="Int64") if k in _COUNTS
                          else pd.Series([r.get(k) for r in rows], dtype=object) for k in COLUMNS})
    return frame.sort_values("rank", kind="stable", ignore_index=True)
