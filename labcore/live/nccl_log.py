"""What NCCL chose: parse the ``NCCL_DEBUG=INFO`` lines of every rank into tables.

At start-up each NCCL rank logs its version, the graphs its topology search found
(``Pattern 4, ... nChannels 12, bw 30/30, type NVL/PIX``), the rings and trees it
built, how many channels it uses, its NVLink SHARP (NVLS) heads, and which
transport connects it to each peer (P2P over NVLink or PCIe, SHM through host
memory, NET over sockets, InfiniBand or RoCE); rank 0 adds the TUNING table of
its cost model (``NCCL_DEBUG_SUBSYS=TUNING``). These lines are the only place
NCCL says what it decided (NCCL's user guide, ``docs/userguide/source/env.rst``:
NCCL_DEBUG, NCCL_DEBUG_SUBSYS), so the lab turns them into DataFrames.

Lines that are not NCCL's (a program's own output, nccl-tests' ``#`` lines, a
file's ``#`` header) are ignored, so whole captured outputs can be passed.

Example
-------
>>> log = parse('''NCCL version 2.21.5+cuda12.4
... h:1:1 [0] NCCL INFO Channel 00/02 :    0   1
... h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
... h:1:1 [0] NCCL INFO 2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer''')
>>> log.version, log.channels, log.rings
('2.21.5+cuda12.4', 2, {0: [0, 1]})
>>> log.transports[["src", "dst", "transport", "detail"]].values.tolist()
[[0, 1, 'P2P', 'P2P/CUMEM/read']]
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

_PREFIX = re.compile(r"(\S+):(\d+):(\d+) \[(\d+)\] NCCL (?:INFO|WARN)")   # host:pid:tid [cudaDev]
_VERSION = re.compile(r"NCCL version (\S+)")
_RING = re.compile(r"NCCL INFO Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_TREE = re.compile(r"NCCL INFO Trees (.*)$")
_TREE_ENTRY = re.compile(r"\[(\d+)\]\s+(\S+)")
_PEER = re.compile(r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\]"
                   r"(?: \[(send|receive)\])? via (.+?)\s*$")
_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels")
_COUNT = re.compile(r"(\d+) (collnet|nvls) channels")
_COMM = re.compile(r"NCCL INFO (?:ncclCommInitRank(?:Config)? )?comm \S+ rank (\d+) nranks (\d+) "
                   r"cudaDev (\d+)(?: nvmlDev \d+)? busId (\S+)")
_COMM_NODES = re.compile(r"NCCL INFO comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_ENV = re.compile(r"NCCL INFO (NCCL_\w+) set (?:by environment )?to (\S+)")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NICS = re.compile(r"NCCL INFO NET/(IB|Socket) : Using (.*?)(?: \[RO\])?;? ?(?:OOB|$)")
_NIC = re.compile(r"\[(\d+)\](\S+?)(?::(\d+)/(IB|RoCE)(/SHARP)?|<\d+>|:\S+)")
_GRAPH = re.compile(r"NCCL INFO Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) "
                    r"([\d.]+)/([\d.]+), type (\w+)/(\w+), sameChannels (\d+)")
_NVLS = re.compile(r"NCCL INFO NVLS multicast support is (not )?available")
_NVLS_HEAD = re.compile(r"NCCL INFO NVLS Head\s+(\d+):((?:\s+\d+)+)")
_FUNC_ROW = re.compile(r"NCCL INFO\s+(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce) \|(.*)$")
_CELL = re.compile(r"(\d+\.\d)/\s*(\d+\.\d)")
_HEAD = {kind: re.compile(rf"NCCL INFO\s+{label}\s*\|(.*)$") for kind, label in
         (("algo", "Algorithm"), ("proto", "Protocol"), ("old", "Latency/AlgBw"), ("threads", "Max NThreads"))}
_WARN = re.compile(r"NCCL WARN (.*)$")

PATTERNS = {1: "balanced_tree", 2: "split_tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet_direct"}


@dataclass(eq=False)  # identity equality: pandas compares DataFrame.attrs when concatenating
class NcclLog:
    """NCCL's start-up decisions, as found in the INFO lines.

    Attributes
    ----------
    version : NCCL version string, or None.
    ranks : DataFrame (rank, nranks, cuda_dev, bus_id, host), one row per rank that logged its init.
    nodes : nodes of the communicator (the "nNodes" of a "comm ... nRanks" line), or None.
    hosts : distinct host names in the line prefixes (anonymised logs may show one name for all).
    channels : collective channels (the largest "N coll channels" any rank reported), or None.
    ring_channels : the "/N" of the ring lines ("Channel 05/16 : 0 7 6 ..."), or None.
    nvls_channels, collnet_channels : from the same "coll channels" line, or None.
    rings : channel -> rank order of that ring.
    trees : DataFrame (rank, channel, tree): "down/down/down->rank->up" as NCCL prints it.
    transports : DataFrame (channel, src, dst, direction, transport, detail, host): one row per
        connection; ``transport`` is P2P, SHM or NET, ``detail`` NCCL's full label,
        ``host`` the machine whose rank logged the line.
    graphs : DataFrame of the topology search's graphs (pattern, cross_nic, channels, bw_intra,
        bw_inter, type_intra, type_inter, same_channels), one row per distinct line.
    nvls : True/False when the log says whether NVLS multicast is available, else None.
    nvls_heads : NVLS channel -> the head rank on each node.
    tuning : DataFrame (function, algorithm, protocol, latency_us, algbw_gbs) of the TUNING table.
    max_threads : (algorithm, protocol) -> the TUNING table's "Max NThreads".
    env : NCCL_* settings NCCL reports it took from the environment.
    network : the network in use ("Socket", "IB", "IBext_v8", ...), or None.
    nics : DataFrame (host, name, port, link): the NICs NET/IB or NET/Socket says it uses;
        ``link`` is IB, RoCE or Socket.
    warnings : the text of every NCCL WARN line.
    """

    version: str | None = None
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    nodes: int | None = None
    hosts: list = field(default_factory=list)
    channels: int | None = None
    ring_channels: int | None = None
    nvls_channels: int | None = None
    collnet_channels: int | None = None
    rings: dict = field(default_factory=dict)
    trees: pd.DataFrame = field(default_factory=pd.DataFrame)
    transports: pd.DataFrame = field(default_factory=pd.DataFrame)
    graphs: pd.DataFrame = field(default_factory=pd.DataFrame)
    nvls: bool | None = None
    nvls_heads: dict = field(default_factory=dict)
    tuning: pd.DataFrame = field(default_factory=pd.DataFrame)
    max_threads: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    network: str | None = None
    nics: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list = field(default_factory=list)

    @property
    def found(self) -> bool:
        """True when the text held any NCCL line this parser understands."""
        return bool(self.version or self.channels or self.rings or len(self.transports) or len(self.ranks)
                    or self.env or len(self.graphs) or len(self.tuning) or self.network or self.warnings
                    or self.nodes or self.nvls_heads or len(self.trees))

    def peer_table(self) -> pd.DataFrame:
        """Transport per (src, dst) pair with the number of channels using it."""
        if self.transports.empty:
            return pd.DataFrame(columns=["src", "dst", "transport", "detail", "channels"])
        t = self.transports.drop_duplicates(["channel", "src", "dst", "detail"])
        return (t.groupby(["src", "dst", "transport", "detail"]).size()
                .rename("channels").reset_index().sort_values(["src", "dst"], ignore_index=True))

    def transport(self, src: int, dst: int) -> str:
        """"P2P", "SHM" or "NET" between two ranks, as the log shows it.

        Raises ValueError when the log shows no connection from ``src`` to ``dst``.
        """
        hit = self.transports[(self.transports["src"] == src) & (self.transports["dst"] == dst)] \
            if len(self.transports) else self.transports
        if hit.empty:
            raise ValueError(f"the log shows no connection {src} -> {dst}; pick a pair from peer_table()")
        return hit["transport"].iloc[0]

    def summary(self) -> pd.DataFrame:
        """One small table: version, nodes, channels, rings, trees, NVLS, transports, network, env."""
        def logged(v):
            return "not logged" if v is None else v

        kinds = sorted(self.transports["transport"].unique()) if len(self.transports) else []
        links = sorted(self.nics["link"].unique()) if len(self.nics) else []
        rows = [("NCCL version", logged(self.version)),
                ("nodes", logged(self.nodes)),
                ("collective channels", logged(self.channels)),
                ("NVLS channels", logged(self.nvls_channels)),
                ("rings", _rings_text(self.rings)),
                ("trees logged by ranks", len(self.trees["rank"].unique()) if len(self.trees) else 0),
                ("graphs (Pattern lines)", len(self.graphs)),
                ("NVLS multicast", "not logged" if self.nvls is None else
                 "available" if self.nvls else "not available"),
                ("transports", ", ".join(kinds) or "not logged"),
                ("network", logged(self.network)),
                ("NIC link layers", ", ".join(links) or "not logged")]
        rows += [(k, v) for k, v in sorted(self.env.items())]
        return pd.DataFrame(rows, columns=["what", "value"])


def _transport(detail: str) -> str:
    """P2P, SHM or NET from NCCL's label ("P2P/CUMEM", "SHM/direct/direct", "NET/IB/0/GDRDMA");
    older releases wrote "direct shared memory" for SHM."""
    kind = detail.split("/")[0]
    return "SHM" if "shared memory" in kind else kind


def _rings_text(rings: dict) -> str:
    if not rings:
        return "not logged"
    first = min(rings)
    more = f" (+{len(rings) - 1} more)" if len(rings) > 1 else ""
    return f"channel {first}: {' '.join(map(str, rings[first]))}{more}"


def _lines(logs) -> list[tuple[int | None, str]]:
    if isinstance(logs, str):
        return [(None, line) for line in logs.splitlines()]
    return [(rank, line) for rank, text in enumerate(logs) for line in str(text).splitlines()]


class _Tuning:
    """Collects TUNING rows under the column names of the last header seen."""

    def __init__(self):
        self.algos, self.columns, self.rows, self.threads = [], [], [], {}

    def line(self, line: str) -> bool:
        if m := _HEAD["algo"].search(line):
            self.algos = [c.strip() for c in m.group(1).split("|") if c.strip()]
        elif m := _HEAD["proto"].search(line):
            protos = [c.strip() for c in m.group(1).split("|") if c.strip()][:3]
            self.columns = [(a, p) for a in self.algos for p in protos]
        elif m := _HEAD["old"].search(line):
            self.columns = [tuple(x.strip() for x in c.split("/")) for c in m.group(1).split("|") if c.strip()]
        elif m := _HEAD["threads"].search(line):
            counts = [int(c) for c in m.group(1).split("|") if c.strip()]
            self.threads.update(zip(self.columns, counts))
        elif m := _FUNC_ROW.search(line):
            for (a, p), (lat, bw) in zip(self.columns, _CELL.findall(m.group(2))):
                self.rows.append(dict(function=m.group(1), algorithm=a, protocol=p,
                                      latency_us=float(lat), algbw_gbs=float(bw)))
        else:
            return False
        return True


def parse(logs) -> NcclLog:  # noqa: C901 (to be split)
    """Parse NCCL INFO output.

    Parameters
    ----------
    logs : str, or a list of per-rank texts (e.g. ``[out + err for out, err in cl.last_output]``).
        Lines that are not NCCL's, and lines starting with ``#``, are ignored.
    """
    out = NcclLog()
    ranks, trees, peers, graphs, nics, nodes, hosts = [], [], [], [], [], {}, set()
    tuning = _Tuning()
    for who, line in _lines(logs):
        if line.lstrip().startswith("#"):
            continue
        prefix = _PREFIX.search(line)
        host = prefix.group(1) if prefix else None
        if host:
            hosts.add(host)
        if m := _VERSION.search(line):
            out.version = out.version or m.group(1)
        elif m := _RING.search(line):
            out.rings[int(m.group(1))] = [int(x) for x in m.group(3).split()]
            out.ring_channels = max(out.ring_channels or 0, int(m.group(2)))
        elif m := _PEER.search(line):
            detail = m.group(5)
            peers.append(dict(channel=int(m.group(1)), src=int(m.group(2)), dst=int(m.group(3)),
                              direction=m.group(4) or "", transport=_transport(detail), detail=detail,
                              host=host))
        elif m := _TREE.search(line):
            for channel, tree in _TREE_ENTRY.findall(m.group(1)):
                trees.append(dict(rank=who, channel=int(channel), tree=tree))
        elif m := _CHANNELS.search(line):
            out.channels = max(out.channels or 0, int(m.group(1)))
            for count, kind in _COUNT.findall(line):
                setattr(out, f"{kind}_channels", int(count))
        elif m := _COMM.search(line):
            ranks.append(dict(rank=int(m.group(1)), nranks=int(m.group(2)), cuda_dev=int(m.group(3)),
                              bus_id=m.group(4), host=host))
        elif m := _COMM_NODES.search(line):
            nodes[int(m.group(1))] = int(m.group(3))
        elif m := _ENV.search(line):
            out.env[m.group(1)] = m.group(2).rstrip(".")
        elif m := _NETWORK.search(line):
            out.network = m.group(1)
        elif m := _NICS.search(line):
            for _, name, port, link, sharp in _NIC.findall(m.group(2)):
                nics.append(dict(host=host, name=name, port=int(port) if port else None,
                                 link=link or "Socket", sharp=bool(sharp)))
        elif m := _GRAPH.search(line):
            graphs.append(dict(pattern=PATTERNS.get(int(m.group(1)), m.group(1)), cross_nic=int(m.group(2)),
                               channels=int(m.group(3)), bw_intra=float(m.group(4)), bw_inter=float(m.group(5)),
                               type_intra=m.group(6), type_inter=m.group(7), same_channels=bool(int(m.group(8)))))
        elif m := _NVLS.search(line):
            out.nvls = bool(out.nvls) or not m.group(1)
        elif m := _NVLS_HEAD.search(line):
            out.nvls_heads[int(m.group(1))] = [int(x) for x in m.group(2).split()]
        elif m := _WARN.search(line):
            out.warnings.append(m.group(1).strip())
        else:
            tuning.line(line)
    # A tree entry names its own rank in the middle ("down->RANK->up"): use it when known.
    for t in trees:
        mid = re.search(r"->(\d+)->", t["tree"])
        if mid:
            t["rank"] = int(mid.group(1))
    out.ranks = pd.DataFrame(ranks, columns=["rank", "nranks", "cuda_dev", "bus_id", "host"]).drop_duplicates(
        "rank", ignore_index=True).sort_values("rank", ignore_index=True)
    out.nodes = max(nodes.values()) if nodes else None
    out.hosts = sorted(hosts)
    out.trees = pd.DataFrame(trees, columns=["rank", "channel", "tree"])
    out.transports = pd.DataFrame(
        peers, columns=["channel", "src", "dst", "direction", "transport", "detail", "host"])
    out.graphs = pd.DataFrame(graphs, columns=["pattern", "cross_nic", "channels", "bw_intra", "bw_inter",
                                               "type_intra", "type_inter", "same_channels"]).drop_duplicates(
        ignore_index=True)
    out.tuning = pd.DataFrame(tuning.rows, columns=["function", "algorithm", "protocol", "latency_us",
                                                    "algbw_gbs"])
    out.max_threads = tuning.threads
    out.nics = pd.DataFrame(nics, columns=["host", "name", "port", "link", "sharp"]).drop_duplicates(
        ignore_index=True)
    return out


LOGS_DIR = Path(__file__).resolve().parents[2] / "tests" / "data"
"""Where the lab keeps real NCCL logs quoted from public issues (each file names its source)."""


def recorded(name: str) -> NcclLog:
    """Parse one of the real logs in :data:`LOGS_DIR`, e.g. ``recorded("nccl_info_2node_h20.log")``.

    Example
    -------
    >>> recorded("nccl_info_2node_h20.log").channels
    8
    """
    path = LOGS_DIR / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in LOGS_DIR.glob("nccl_*.log"))) if LOGS_DIR.is_dir() else "none"
        raise FileNotFoundError(f"no log {name!r} in {LOGS_DIR} (run from a checkout of the lab); "
                                f"logs there: {have}")
    return parse(path.read_text())
