"""What NCCL chose: parse the ``NCCL_DEBUG=INFO`` lines of every rank into tables.

At start-up each NCCL rank logs its version, the rings and trees it built, how
many channels it uses, and which transport connects it to each peer (P2P over
NVLink/PCIe, SHM through host memory, NET over sockets or InfiniBand). These
lines are the only place NCCL says what it decided (NCCL's user guide,
``docs/userguide/source/env.rst``: NCCL_DEBUG, NCCL_DEBUG_SUBSYS), so the lab
turns them into DataFrames instead of asking learners to read them raw.

Example
-------
>>> from labcore.live.nccl_log import parse
>>> log = parse('''NCCL version 2.21.5+cuda12.4
... h:1:1 [0] NCCL INFO Channel 00/02 :    0   1
... h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
... h:1:1 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer''')
>>> log.version, log.channels, log.rings
('2.21.5+cuda12.4', 2, {0: [0, 1]})
>>> log.transports[["src", "dst", "transport", "detail"]].values.tolist()
[[0, 1, 'P2P', 'P2P/CUMEM/read']]
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

_VERSION = re.compile(r"NCCL version (\S+)")
_RING = re.compile(r"NCCL INFO Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_TREE = re.compile(r"NCCL INFO Trees (.*)$")
_TREE_ENTRY = re.compile(r"\[(\d+)\]\s+(\S+)")
_PEER = re.compile(
    r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[(send|receive)\])? via (\S+)")
_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels")
_COMM = re.compile(r"NCCL INFO (?:ncclCommInitRank(?:Config)? )?comm \S+ rank (\d+) nranks (\d+) "
                   r"cudaDev (\d+)(?: nvmlDev \d+)? busId (\S+)")
_ENV = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (\S+)")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")


@dataclass(eq=False)  # identity equality: pandas compares DataFrame.attrs when concatenating
class NcclLog:
    """NCCL's start-up decisions, as found in the INFO lines.

    Attributes
    ----------
    version : NCCL version string, or None.
    ranks : DataFrame (rank, nranks, cuda_dev, bus_id), one row per rank that logged its init.
    channels : number of collective channels (the largest any rank reported), or None.
    rings : channel -> rank order of that ring.
    trees : DataFrame (rank, channel, tree): "up/down->rank->..." strings as NCCL prints them.
    transports : DataFrame (channel, src, dst, direction, transport, detail): one row per
        connection; ``transport`` is P2P, SHM or NET, ``detail`` NCCL's full label.
    env : NCCL_* settings NCCL reports it took from the environment.
    network : the network plugin in use ("Socket", "IB", ...), or None.
    """

    version: str | None = None
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    channels: int | None = None
    rings: dict = field(default_factory=dict)
    trees: pd.DataFrame = field(default_factory=pd.DataFrame)
    transports: pd.DataFrame = field(default_factory=pd.DataFrame)
    env: dict = field(default_factory=dict)
    network: str | None = None

    @property
    def found(self) -> bool:
        """True when the text held any NCCL INFO line this parser understands."""
        return bool(self.version or self.channels or self.rings or len(self.transports)
                    or len(self.ranks) or self.env)

    def peer_table(self) -> pd.DataFrame:
        """Transport per (src, dst) pair with the number of channels using it."""
        if self.transports.empty:
            return pd.DataFrame(columns=["src", "dst", "transport", "detail", "channels"])
        t = self.transports.drop_duplicates(["channel", "src", "dst", "detail"])
        return (t.groupby(["src", "dst", "transport", "detail"]).size()
                .rename("channels").reset_index().sort_values(["src", "dst"], ignore_index=True))

    def summary(self) -> pd.DataFrame:
        """One small table: version, channels, rings, trees, transports, network, env."""
        kinds = sorted(self.transports["transport"].unique()) if len(self.transports) else []
        rows = [("NCCL version", self.version or "not logged"),
                ("collective channels", self.channels if self.channels is not None else "not logged"),
                ("rings", "; ".join(f"{c}: {' '.join(map(str, r))}" for c, r in sorted(self.rings.items()))
                 or "not logged"),
                ("trees logged by ranks", len(self.trees["rank"].unique()) if len(self.trees) else 0),
                ("transports", ", ".join(kinds) or "not logged"),
                ("network", self.network or "not logged")]
        rows += [(k, v) for k, v in sorted(self.env.items())]
        return pd.DataFrame(rows, columns=["what", "value"])


def _lines(logs) -> list[tuple[int | None, str]]:
    if isinstance(logs, str):
        return [(None, line) for line in logs.splitlines()]
    return [(rank, line) for rank, text in enumerate(logs) for line in str(text).splitlines()]


def parse(logs) -> NcclLog:
    """Parse NCCL INFO output.

    Parameters
    ----------
    logs : str, or a list of per-rank texts (e.g. ``[out + err for out, err in cl.last_output]``).
        Lines that are not NCCL's are ignored, so whole captured outputs can be passed.
    """
    out = NcclLog()
    ranks, trees, peers = [], [], []
    for who, line in _lines(logs):
        if m := _VERSION.search(line):
            out.version = out.version or m.group(1)
        elif m := _RING.search(line):
            out.rings[int(m.group(1))] = [int(x) for x in m.group(3).split()]
        elif m := _PEER.search(line):
            detail = m.group(5)
            peers.append(dict(channel=int(m.group(1)), src=int(m.group(2)), dst=int(m.group(3)),
                              direction=m.group(4) or "", transport=detail.split("/")[0], detail=detail))
        elif m := _TREE.search(line):
            for channel, tree in _TREE_ENTRY.findall(m.group(1)):
                trees.append(dict(rank=who, channel=int(channel), tree=tree))
        elif m := _CHANNELS.search(line):
            out.channels = max(out.channels or 0, int(m.group(1)))
        elif m := _COMM.search(line):
            ranks.append(dict(rank=int(m.group(1)), nranks=int(m.group(2)),
                              cuda_dev=int(m.group(3)), bus_id=m.group(4)))
        elif m := _ENV.search(line):
            out.env[m.group(1)] = m.group(2)
        elif m := _NETWORK.search(line):
            out.network = m.group(1)
    # A tree line names its own rank in the middle ("up->RANK->down"): use it when known.
    for t in trees:
        mid = re.search(r"->(\d+)->", t["tree"])
        if mid:
            t["rank"] = int(mid.group(1))
    out.ranks = pd.DataFrame(ranks, columns=["rank", "nranks", "cuda_dev", "bus_id"]).drop_duplicates(
        "rank", ignore_index=True).sort_values("rank", ignore_index=True)
    out.trees = pd.DataFrame(trees, columns=["rank", "channel", "tree"])
    out.transports = pd.DataFrame(
        peers, columns=["channel", "src", "dst", "direction", "transport", "detail"])
    return out
