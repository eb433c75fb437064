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

from labcore.files import MAX_TEXT_BYTES, bundled, check_text_limited, read_text_limited
from labcore.readers import nccl_ranks

# Every quantifier that can meet a long run of the same characters is bounded or anchored, so
# that a line is scanned a fixed number of times whatever it holds (one 200,000-character line
# is read in linear time; see benchmarks/bench_readers.py).
_MARKER = re.compile(r"NCCL (INFO|WARN)")
# What comes before the marker: host:pid:tid [cudaDev], and on WARN lines the source line
# ("misc/ibvwrap.cc:63"); only the last characters before the marker are looked at.
_TAIL = re.compile(r"(?:([^\s:\[\]]{1,255}):(\d{1,10}):(\d{1,10}) )?\[(\d{1,6})\](?: ([^\s\[\]]{1,200}))? ?$")
_TAIL_WINDOW = 512
_VERSION = re.compile(r"[NR]CCL version (?:: )?(\S{1,100})")     # RCCL: "RCCL version : 2.26.6-HEAD:f224e2c"
_RANK_PREFIX = re.compile(r"\[Rank (\d{1,9})\] ")                      # NCCL 2.29+ on the Init START line
_RING = re.compile(r"Channel (\d+)/(\d+) :((?: +\d+)+) *$")
_PEER = re.compile(r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[([^\]]{0,40})\])? -> (\d+)(?:\[([^\]]{0,40})\])?"
                   r"(?: \[(send|receive)\])? via (.*)$")
# NCCL 2.2x appends the communicator's address and size to channel and tree lines
_COMM_SUFFIX = re.compile(r" comm (0x[0-9a-fA-F]{1,16}) nRanks (\d{1,9})\s*$")
# Ray's note on lines it folded: "... [repeated 2x across cluster]"
_RAY_REPEAT = re.compile(r"\s*\[repeated \d{1,9}x across cluster\]\s*$")
# A launcher's rank tag before NCCL's prefix: "[155] ", "[15]worker-23:...", mpirun's "[1,155]<stdout>:"
_TAG = re.compile(r"\s{0,8}\[(?:\d{1,6},)?(\d{1,6})\](?:<std(?:out|err)>:)?")
_NEIGHBOURS = re.compile(r"Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+) *$")
_TREES = re.compile(r"Trees(.*)$")
_TREE_ENTRY = re.compile(r"\[(\d{1,6})\] +(\S+)")
_TREE_LINE = re.compile(r"Tree (\d+) : (-?\d+) -> (\d+) -> (-?\d+)/(-?\d+)/(-?\d+) *$")
_CHANNELS = re.compile(r"(\d+) coll channels(.*)$")
_COUNT = re.compile(r"(\d{1,9}) (collnet|nvls) channels")
# ncclCommInitRank/Config/All/Split/Scalable (the function leads the line from NCCL 2.21), or a bare
# "comm" (older releases; busId from 2.5, nvmlDev from 2.4).
_INIT = re.compile(r"(?:(nccl\w{1,40}) )?comm (\S+) rank (\d+) nranks (\d+)(?: cudaDev (\d+))?(?: nvmlDev \d+)?"
                   r"(?: busId ([0-9a-fA-Fx]+))?(.*)$")
# NCCL 2.3's "rank 6 nranks 8" and 2.2x's "Init timings[ - ncclCommInitRankConfig]: rank 2 nranks 16 total ..."
_RANK_LINE = re.compile(r"(?:Init timings(?: - (nccl\w{1,40}))?: )?rank (\d{1,9}) nranks (\d{1,9})(?:\s|$)")
_COMM_ID = re.compile(r" commId (0x[0-9a-fA-F]{1,16})")
_COMM_NODES = re.compile(r"comm (\S+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
_ENV = re.compile(r"(NCCL_\w+) set (?:by environment )?to (\S+)")
_NETWORK = re.compile(r"Using (?:internal )?[Nn]etwork (\S+)")   # NCCL 2.3: "Using internal Network IB"
_NICS = re.compile(r"NET/(IB|Socket) : Using (.*?)(?: \[RO\])?;? ?(?:OOB|$)")
_NIC = re.compile(r"\[(\d{1,4})\](\S{1,64}?)(?::(\d+)/(IB|RoCE)(/SHARP)?|<\d+>|:\S+)")
_GRAPH = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), (?:bw|speed) "
                    r"([\d.]+)/([\d.]+), type (\w+)/(\w+), sameChannels (\d+)")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")
_NVLS_HEAD = re.compile(r"NVLS Head +(\d+):((?: +\d+)+)")
_NVLS_COMM = re.compile(r"NVLS comm (\S+) headRank (-?\d+) nHeads (\d+)")
_FUNC_ROW = re.compile(r" *(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce) \|(.*)$")
_CELL = re.compile(r"(\d{1,12}\.\d)/ {0,8}(\d{1,12}\.\d)")
_HEAD = {kind: re.compile(rf" *{label} *\|(.*)$") for kind, label in
         (("algo", "Algorithm"), ("proto", "Protocol"), ("old", "Latency/AlgBw"), ("threads", "Max NThreads"))}
_MID_RANK = re.compile(r"->(\d+)->")

PATTERNS = {1: "balanced_tree", 2: "split_tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet_direct"}

@dataclass(eq=False)  # identity equality: pandas compares DataFrame.attrs when concatenating
class NcclLog:
    """NCCL's start-up decisions, as found in the INFO lines.

    Attributes
    ----------
    version : NCCL version string (RCCL's, "RCCL version : ...", for AMD's fork), or None.
    ranks : DataFrame (rank, nranks, cuda_dev, bus_id, host, pid, comm, nodes, local_ranks,
        local_rank, function, comm_id), one row per rank of each process and communicator that
        logged a line naming it: its init ("ncclCommInitRank/Config/All/Split/Scalable comm ... rank
        r nranks n ..." since 2.4, with NCCL 2.29's "[Rank r]" before it; 2.3's "rank r nranks n";
        2.2x's "Init timings: rank r nranks n"), its "comm ... rank r nRanks n nNodes m localRanks k
        localRank l" line, its ring neighbours, or the peer lines it printed (the rank that printed
        a peer line, its process and device: :mod:`labcore.readers.nccl_ranks`). ``function`` is the
        init call, ``comm_id`` the communicator's hash, ``comm`` which communicator of its process
        the row is, where a process holds ranks of several (None where a line does not say).
    nodes : nodes of the communicator (the "nNodes" of a "comm ... nRanks" line), or None.
    hosts : distinct host names in the line prefixes, INFO and WARN (anonymised logs may show one
        name for all).
    channels : collective channels (the largest "N coll channels" any rank reported), or None.
    ring_channels : the "/N" of the ring lines ("Channel 05/16 : 0 7 6 ..."), or None.
    nvls_channels, collnet_channels : from the same "coll channels" line, or None.
    rings : channel -> rank order of that ring (from "Channel 00/02 : 0 1 ..." lines, or put
        together from every rank's "Ring 00 : prev -> rank -> next" line, or from a channel's peer
        lines where each rank sends to one other, where they close a ring).
    ring_neighbours : DataFrame (rank, channel, prev, next, host) of "Ring NN : prev -> rank -> next".
    trees : DataFrame (rank, channel, tree, down_tree): "down/down/down->rank->up" as NCCL prints
        it since 2.5 ("Trees [0] ..." lines and "Tree N : up -> rank -> down/down/down" lines; NCCL
        2.4's "up->rank->down/down/down" is turned round); ``down_tree`` is NCCL 2.5's separate
        broadcast tree ("up->rank->down/down/down" after the "|"), else "".
    transports : DataFrame (channel, src, dst, direction, transport, detail, host, comm): one row per
        connection; ``transport`` is P2P, SHM or NET, ``detail`` NCCL's full label (without NCCL
        2.2x's "comm 0x... nRanks N" or Ray's "[repeated Nx across cluster]" after it), ``host``
        the machine whose rank logged the line, ``comm`` its communicator where its process holds
        ranks of several (else None; :meth:`peer_table` then groups by it).
    graphs : DataFrame of the topology search's graphs (pattern, cross_nic, channels, bw_intra,
        bw_inter, type_intra, type_inter, same_channels), one row per distinct line.
    nvls : True/False when the log says whether NVLS multicast is available, else None.
    nvls_heads : NVLS channel -> the head rank on each node.
    nvls_ranks : DataFrame (host, cuda_dev, head_rank, heads) of "NVLS comm ... headRank h nHeads n".
    tuning : DataFrame (function, algorithm, protocol, latency_us, algbw_gbs) of the TUNING table.
    max_threads : (algorithm, protocol) -> the TUNING table's "Max NThreads".
    env : NCCL_* settings NCCL reports it took from the environment.
    network : the network in use ("Socket", "IB", "IBext_v8", ...), or None.
    nics : DataFrame (host, name, port, link): the NICs NET/IB or NET/Socket says it uses;
        ``link`` is IB, RoCE or Socket.
    warnings : the text of every NCCL WARN line.
    warning_lines : DataFrame (host, cuda_dev, source, text): who warned, and NCCL's source line.
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
    ring_neighbours: pd.DataFrame = field(default_factory=pd.DataFrame)
    trees: pd.DataFrame = field(default_factory=pd.DataFrame)
    transports: pd.DataFrame = field(default_factory=pd.DataFrame)
    graphs: pd.DataFrame = field(default_factory=pd.DataFrame)
    nvls: bool | None = None
    nvls_heads: dict = field(default_factory=dict)
    nvls_ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    tuning: pd.DataFrame = field(default_factory=pd.DataFrame)
    max_threads: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    network: str | None = None
    nics: pd.DataFrame = field(default_factory=pd.DataFrame)
    warnings: list = field(default_factory=list)
    warning_lines: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def found(self) -> bool:
        """True when the text held any NCCL line this parser understands."""
        return bool(self.version or self.channels or self.rings or len(self.transports) or len(self.ranks)
                    or self.env or len(self.graphs) or len(self.tuning) or self.network or self.warnings
                    or self.nodes or self.nvls_heads or len(self.trees) or len(self.ring_neighbours)
                    or len(self.nvls_ranks))

    def peer_table(self) -> pd.DataFrame:
        """Transport per (src, dst) pair with the number of channels using it."""
        if self.transports.empty:
            return pd.DataFrame(columns=["src", "dst", "transport", "detail", "channels"])
        keys = ["src", "dst", "transport", "detail"] + (["comm"] if self.transports["comm"].notna().any() else [])
        t = self.transports.drop_duplicates(["channel", *keys])
        return (t.groupby(keys, dropna=False).size()
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
        check_text_limited(logs, MAX_TEXT_BYTES, "the log given", "pass a shorter log, or one rank's")
        return [(None, line) for line in logs.splitlines()]
    texts = [str(text) for text in logs]
    check_text_limited(" " * sum(len(t) for t in texts), MAX_TEXT_BYTES, "the logs given",
                       "pass fewer or shorter logs")
    return [(rank, line) for rank, text in enumerate(texts) for line in text.splitlines()]


class _Tuning:
    """Collects TUNING rows under the column names of the last header seen."""

    def __init__(self):
        self.algos, self.columns, self.rows, self.threads = [], [], [], {}

    def line(self, line: str) -> bool:
        if m := _HEAD["algo"].match(line):
            self.algos = [c.strip() for c in m.group(1).split("|") if c.strip()]
        elif m := _HEAD["proto"].match(line):
            protos = [c.strip() for c in m.group(1).split("|") if c.strip()][:3]
            self.columns = [(a, p) for a in self.algos for p in protos]
        elif m := _HEAD["old"].match(line):
            self.columns = [tuple(x.strip() for x in c.split("/")) for c in m.group(1).split("|") if c.strip()]
        elif m := _HEAD["threads"].match(line):
            counts = [int(c) for c in m.group(1).split("|") if c.strip()]
            self.threads.update(zip(self.columns, counts))
        elif m := _FUNC_ROW.match(line):
            for (a, p), (lat, bw) in zip(self.columns, _CELL.findall(m.group(2))):
                self.rows.append(dict(function=m.group(1), algorithm=a, protocol=p,
                                      latency_us=float(lat), algbw_gbs=float(bw)))
        else:
            return False
        return True


@dataclass
class _Entry:
    """One NCCL INFO or WARN entry: who logged it (from the prefix) and what follows the marker."""

    who: int | None
    level: str
    host: str | None
    pid: str | None
    cuda_dev: int | None
    source: str | None
    body: str
    tid: str | None = None
    tag: int | None = None     # the launcher's rank tag before NCCL's prefix ("[155] host:pid:tid [3]")


def _entries(who, line: str):
    """The entries of one line: usually one, more where lines ran together (a terminal's wrap
    pasted as one line), each with the prefix found just before its marker."""
    tag = _TAG.match(line)
    pieces = _MARKER.split(line)         # [before, level, after, level, after, ...]: one pass
    for k in range(1, len(pieces), 2):
        before = pieces[k - 1][-_TAIL_WINDOW:]
        after = pieces[k + 1]
        if k + 2 < len(pieces):          # the next entry's prefix ends this one's text
            tail = _TAIL.search(after[-_TAIL_WINDOW:])
            if tail:
                after = after[:len(after) - len(tail.group(0))]
        m = _TAIL.match(before) or _TAIL.search(before)    # the prefix usually starts the line
        host, pid, tid, dev, source = m.groups() if m else (None, None, None, None, None)
        if host is not None and host.isdigit():
            host = None           # a mangled prefix ("[15]23:83:2526"): no machine is named by digits alone
        # a leading "[N]" is a launcher's tag when NCCL's own prefix (with its host) follows it, not NCCL's "[dev]"
        rank_tag = int(tag.group(1)) if tag and k == 1 and m and m.group(1) else None
        yield _Entry(who, pieces[k], host, pid, int(dev) if dev is not None else None, source,
                     after[1:] if after.startswith(" ") else after, tid, rank_tag)


class _Collector:
    """Gathers one log's entries into rows; each handler takes an entry and its match."""

    def __init__(self, out: NcclLog):
        self.out = out
        self.tuning = _Tuning()
        self.sightings: list[dict] = []   # what init lines say of a rank (labcore.readers.nccl_ranks)
        self.trees, self.peers, self.graphs, self.nics, self.neighbours = [], [], [], [], []
        self.nvls_ranks, self.warns, self.nodes, self.hosts = [], [], {}, set()

    def version(self, e, m):
        self.out.version = self.out.version or m.group(1)

    def ring(self, e, m):
        self.out.rings[int(m.group(1))] = [int(x) for x in m.group(3).split()]
        self.out.ring_channels = max(self.out.ring_channels or 0, int(m.group(2)))

    def peer(self, e, m):
        channel, src, src_id, dst, dst_id, direction, detail = m.groups()
        detail, pointer = detail.rstrip(), None
        if suffix := _COMM_SUFFIX.search(detail):
            detail, pointer = detail[:suffix.start()], suffix.group(1)
        self.peers.append(dict(channel=int(channel), src=int(src), dst=int(dst), direction=direction or "",
                               transport=_transport(detail), detail=detail, host=e.host, pid=e.pid, tid=e.tid,
                               dev=e.cuda_dev, tag=e.tag, src_id=src_id, dst_id=dst_id, pointer=pointer))

    def neighbour(self, e, m):
        self.neighbours.append(dict(rank=int(m.group(3)), channel=int(m.group(1)), prev=int(m.group(2)),
                                    next=int(m.group(4)), host=e.host))
        self._rank(e, None, rank=int(m.group(3)), cuda_dev=e.cuda_dev)

    def tree_entries(self, e, m):
        for channel, text in _TREE_ENTRY.findall(m.group(1)):
            tree, _, down = text.partition("|")
            self.trees.append(dict(rank=e.who, channel=int(channel), tree=_down_first(tree), down_tree=down))

    def tree_line(self, e, m):
        channel, up, rank, *down = m.groups()
        self.trees.append(dict(rank=int(rank), channel=int(channel), tree=f"{'/'.join(down)}->{rank}->{up}",
                               down_tree=""))

    def channels(self, e, m):
        self.out.channels = max(self.out.channels or 0, int(m.group(1)))
        for count, kind in _COUNT.findall(m.group(2)):
            setattr(self.out, f"{kind}_channels", int(count))

    def init(self, e, m):
        function, comm, rank, nranks, dev, bus, rest = m.groups()
        comm_id = _COMM_ID.search(rest)
        self._rank(e, comm, rank=int(rank), nranks=int(nranks), cuda_dev=int(dev) if dev else e.cuda_dev,
                   bus_id=bus, function=function, comm_id=comm_id.group(1) if comm_id else None)

    def rank_line(self, e, m):
        function, rank, nranks = m.groups()
        self._rank(e, None, rank=int(rank), nranks=int(nranks), cuda_dev=e.cuda_dev, function=function)

    def comm_nodes(self, e, m):
        comm, rank, nranks, nodes, local_ranks, local_rank = m.groups()
        self.nodes[int(rank)] = int(nodes)
        self._rank(e, comm, rank=int(rank), nranks=int(nranks), cuda_dev=e.cuda_dev, nodes=int(nodes),
                   local_ranks=int(local_ranks), local_rank=int(local_rank))

    def _rank(self, e, comm, **values):
        """What one line says of a rank; the process (host, pid), the rank and the communicator's address
        in it, where the line prints one, name the row it joins (:func:`labcore.readers.nccl_ranks.ranks_table`)."""
        self.sightings.append(dict(host=e.host, pid=e.pid, comm=comm, **values))

    def env(self, e, m):
        self.out.env[m.group(1)] = m.group(2).rstrip(".")

    def network(self, e, m):
        self.out.network = m.group(1)

    def nic_list(self, e, m):
        for _, name, port, link, sharp in _NIC.findall(m.group(2)):
            self.nics.append(dict(host=e.host, name=name, port=int(port) if port else None,
                                  link=link or "Socket", sharp=bool(sharp)))

    def graph(self, e, m):
        g = m.groups()
        self.graphs.append(dict(pattern=PATTERNS.get(int(g[0]), g[0]), cross_nic=int(g[1]), channels=int(g[2]),
                                bw_intra=float(g[3]), bw_inter=float(g[4]), type_intra=g[5], type_inter=g[6],
                                same_channels=bool(int(g[7]))))

    def nvls(self, e, m):
        self.out.nvls = bool(self.out.nvls) or not m.group(1)

    def nvls_head(self, e, m):
        self.out.nvls_heads[int(m.group(1))] = [int(x) for x in m.group(2).split()]

    def nvls_comm(self, e, m):
        self.nvls_ranks.append(dict(host=e.host, cuda_dev=e.cuda_dev, head_rank=int(m.group(2)),
                                    heads=int(m.group(3))))

    def warn(self, e):
        text = e.body.strip()
        self.out.warnings.append(text)
        self.warns.append(dict(host=e.host, cuda_dev=e.cuda_dev, source=e.source, text=text))

    def entry(self, e: _Entry):
        if e.host:
            self.hosts.add(e.host)
        if e.level == "WARN":
            self.warn(e)
            return
        body = e.body
        if m := _RANK_PREFIX.match(body):
            body = body[m.end():]
        for pattern, handler in _BY_FIRST.get(body[:1], ()):
            if m := pattern.match(body):
                handler(self, e, m)
                return
        self.tuning.line(body)


# Tried in order on the text after "NCCL INFO" (anchored: a line is matched from its start),
# looked up by the text's first character so that an entry is tried against a few patterns only.
_HANDLERS = (("C", _RING, _Collector.ring), ("CR", _PEER, _Collector.peer), ("R", _NEIGHBOURS, _Collector.neighbour),
             ("T", _TREES, _Collector.tree_entries), ("T", _TREE_LINE, _Collector.tree_line),
             ("0123456789", _CHANNELS, _Collector.channels), ("nc", _INIT, _Collector.init),
             ("rI", _RANK_LINE, _Collector.rank_line),
             ("c", _COMM_NODES, _Collector.comm_nodes), ("N", _ENV, _Collector.env),
             ("U", _NETWORK, _Collector.network), ("N", _NICS, _Collector.nic_list), ("P", _GRAPH, _Collector.graph),
             ("N", _NVLS, _Collector.nvls), ("N", _NVLS_HEAD, _Collector.nvls_head),
             ("N", _NVLS_COMM, _Collector.nvls_comm), ("N", _VERSION, _Collector.version))
_BY_FIRST: dict[str, list] = {}
for _chars, _pattern, _handler in _HANDLERS:
    for _char in _chars:
        _BY_FIRST.setdefault(_char, []).append((_pattern, _handler))


def _down_first(tree: str) -> str:
    """A tree entry as NCCL 2.5+ prints it, "down/down/down->rank->up" (2.4 printed "up->rank->down...")."""
    parts = tree.split("->")
    if len(parts) == 3 and "/" in parts[2] and "/" not in parts[0]:
        return f"{parts[2]}->{parts[1]}->{parts[0]}"
    return tree


def _ring_hops(peers: list[dict]) -> list[dict]:
    """Each channel's sends as next-neighbour hops, where every rank of it sends to one rank only
    (a channel whose lines also hold tree connections is left out: its hops do not make one ring)."""
    nexts: dict = {}
    for p in peers:
        if p["direction"] != "receive":
            nexts.setdefault(p["channel"], {}).setdefault(p["src"], set()).add(p["dst"])
    return [dict(channel=channel, rank=src, next=next(iter(dsts))) for channel, hops in nexts.items()
            if all(len(d) == 1 for d in hops.values()) for src, dsts in hops.items()]


def _closed_rings(neighbours: list[dict], known: dict) -> dict:
    """Rings put together from every rank's next neighbour, for channels no ring line printed."""
    nexts: dict[int, dict] = {}
    for n in neighbours:
        nexts.setdefault(n["channel"], {})[n["rank"]] = n["next"]
    rings = {}
    for channel, nxt in nexts.items():
        if channel in known or 0 not in nxt:
            continue
        order, rank = [0], nxt[0]
        while rank in nxt and rank != 0 and len(order) <= len(nxt):
            order.append(rank)
            rank = nxt[rank]
        if rank == 0 and len(order) == len(nxt):
            rings[channel] = order
    return rings


def parse(logs) -> NcclLog:
    """Parse NCCL INFO output.

    Parameters
    ----------
    logs : str, or a list of per-rank texts (e.g. ``[out + err for out, err in cl.last_output]``),
        at most :data:`labcore.files.MAX_TEXT_BYTES` in all. Lines that are not NCCL's, and lines
        starting with ``#`` or ``%%`` (a file's header), are ignored; a launcher's prefix (srun's "0: ",
        mpirun's "[1,0]<stdout>:", a timestamp, Ray's "(RayWorkerWrapper pid=..)") before NCCL's own,
        and Ray's "[repeated 2x across cluster]" after it, do not matter. Each line is scanned in
        linear time.
    """
    out = NcclLog()
    c = _Collector(out)
    for who, line in _lines(logs):
        if "CCL" not in line or line.lstrip().startswith(("#", "%%")):
            continue
        line = _RAY_REPEAT.sub("", line)
        if m := _VERSION.search(line):
            c.version(None, m)
        for entry in _entries(who, line):
            c.entry(entry)
    _finish(out, c)
    return out


def _finish(out: NcclLog, c: _Collector) -> None:
    """The collected rows as the log's tables."""
    for t in c.trees:               # a tree entry names its own rank in the middle ("down->RANK->up")
        mid = _MID_RANK.search(t["tree"])
        if mid:
            t["rank"] = int(mid.group(1))
    out.ranks = nccl_ranks.ranks_table(c.sightings, c.peers)
    comms = nccl_ranks.label_communicators(c.peers, nccl_ranks.logger(c.peers))
    out.nodes = max(c.nodes.values()) if c.nodes else None
    out.hosts = sorted(c.hosts)
    out.trees = pd.DataFrame(c.trees, columns=["rank", "channel", "tree", "down_tree"])
    out.ring_neighbours = pd.DataFrame(c.neighbours, columns=["rank", "channel", "prev", "next", "host"])
    out.rings.update(_closed_rings(c.neighbours, out.rings))
    out.rings.update(_closed_rings(_ring_hops(c.peers), out.rings))
    out.transports = pd.DataFrame([dict(p, comm=comm) for p, comm in zip(c.peers, comms)],
                                  columns=["channel", "src", "dst", "direction", "transport", "detail", "host", "comm"])
    out.graphs = pd.DataFrame(c.graphs, columns=["pattern", "cross_nic", "channels", "bw_intra", "bw_inter",
                                                 "type_intra", "type_inter", "same_channels"]).drop_duplicates(
        ignore_index=True)
    out.tuning = pd.DataFrame(c.tuning.rows, columns=["function", "algorithm", "protocol", "latency_us",
                                                      "algbw_gbs"])
    out.max_threads = c.tuning.threads
    out.nics = pd.DataFrame(c.nics, columns=["host", "name", "port", "link", "sharp"]).drop_duplicates(
        ignore_index=True)
    out.nvls_ranks = pd.DataFrame(c.nvls_ranks, columns=["host", "cuda_dev", "head_rank", "heads"])
    out.warning_lines = pd.DataFrame(c.warns, columns=["host", "cuda_dev", "source", "text"])


LOGS_DIR = Path(__file__).resolve().parents[2] / "tests" / "data"
"""Where the lab keeps real NCCL logs quoted from public issues (each file names its source)."""


def recorded(name: str) -> NcclLog:
    """Parse one of the real logs in :data:`LOGS_DIR`, e.g. ``recorded("nccl_info_2node_h20.log")``.

    Only a name of a file in that folder is read (no path: "../x" is refused, naming the logs there).

    Example
    -------
    >>> recorded("nccl_info_2node_h20.log").channels
    8
    """
    if not LOGS_DIR.is_dir():
        raise FileNotFoundError(f"no log {name!r}: {LOGS_DIR} is missing (run from a checkout of the lab)")
    path = bundled(LOGS_DIR, name, what="NCCL log")
    return parse(read_text_limited(path, MAX_TEXT_BYTES, "an NCCL log"))
