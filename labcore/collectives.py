"""Every collective the lab knows, described once.

One :class:`Collective` per operation: its names, how nccl-tests sizes its buffers and prints
its size, its bus-bandwidth factor, who contributes to and who receives each piece of data,
whether it has a root, the fewest ranks it runs on, NCCL's name for it in the tuner, the
simulator's default algorithm, and the names torch gives it (its torch.distributed functions and
c10d's op and profiling names). The benchmark (:mod:`labcore.bench.ops`), the simulator
(:mod:`labcore.sim.core.buffers`, the schedules), replay, NCCL's tuner (:mod:`labcore.sim.nccl.tuner`),
the recorder, the profiler-trace reader and the exercises read it from here. Pure Python: the
simulator stays free of torch.

Sources: nccl-tests 2.19.6 (github.com/NVIDIA/nccl-tests, commit a0b82b2, ``src/*.cu``
``*GetCollByteCount`` and ``*GetBw``, ``doc/PERFORMANCE.md`` for the bus-bandwidth factors);
NCCL 2.30.7 ``ncclFuncStr`` for NCCL's names (src/enqueue.cc).

The byte layout (nccl-tests): a requested size of ``nbytes`` is ``nbytes // itemsize``
elements. A collective that splits one of its buffers across the ranks (``split`` "recv",
"send" or "both") gives every rank ``elements // nranks`` of them, rounded **down to a multiple
of 16 bytes**, so small sizes give the size-0 rows nccl-tests prints. The printed ``size`` is
the larger of one rank's send and receive buffers; ``count`` is the count passed to NCCL.

Roles, in the simulator's chunk terms (a rank's buffer cut into chunks; see
:mod:`labcore.sim.core.trace`): ``sources`` says whose input each chunk starts from -- "all" (every
rank's own, to be combined: the collective reduces), "owner" (the rank whose slice the chunk is),
"root", or "sender" (all_to_all's blocks: the rank sending the block) -- and ``sinks`` who must
end with it -- "all", "owner", "root" or "receiver". all_reduce is ("all", "all"), reduce_scatter
("all", "owner"), all_gather ("owner", "all"), broadcast ("root", "all"), reduce ("all", "root"),
all_to_all ("sender", "receiver"), gather ("owner", "root"), scatter ("root", "owner").

How to add a collective (three files)
-------------------------------------
1. ``labcore/collectives.py`` (here): one ``Collective(...)`` in ``_TABLE``: its name and
   aliases, nccl-tests program and split buffer, busbw factor, roles, rooted, min ranks,
   NCCL's name (``nccl``) if NCCL's tuner prices it, ``sim``, the simulator's default
   algorithm, if the simulator plays it, and torch's names for it (``torch``, ``c10d``). The
   recorder, the readers, replay and the tuner need nothing more.
2. ``labcore/bench/ops.py``, if the benchmark runs it: an ``Op`` with its torch.distributed call
   and the exact output its data check expects.
3. ``labcore/sim/core/schedules/<module>.py``, if the simulator plays it: a schedule builder
   registered with ``@algorithm("<collective>", "<algorithm>", form=...)`` together with its closed
   form (the bytes any algorithm must move follow from the roles: :mod:`labcore.sim.core.bounds`).

Tests take their lists from here and from the registers, so a new entry is checked by name.

Example
-------
>>> spec = describe("all_gather")
>>> spec.busbw_factor(4), spec.nccl, spec.sim, spec.program
(0.75, 'AllGather', 'ring', 'all_gather_perf')
>>> spec.counts(nbytes=1000, nranks=4, itemsize=4)      # 250 elements -> 60 per rank (16-byte multiple)
Counts(count=60, send=60, recv=240)
>>> canonical("alltoall_perf"), canonical("AllReduce")
('all_to_all', 'all_reduce')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Collective", "Counts", "COLLECTIVES", "describe", "canonical", "select", "ALIGN_BYTES", "BUSBW",
           "TORCH_NAMES", "C10D_NAMES", "NCCL_NAMES", "from_torch", "c10d_function"]

# nccl-tests rounds each rank's share of a split buffer down to this many bytes.
ALIGN_BYTES = 16

BUSBW = {"2(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n, "1": lambda n: 1.0,
         "0": lambda n: 0.0}
"""busbw / algbw as nccl-tests doc/PERFORMANCE.md gives it, by formula ("0": moves no data)."""

SPLITS = ("", "recv", "send", "both")
REDOPS = ("op", "none", "")
SOURCES = ("all", "owner", "root", "sender")
SINKS = ("all", "owner", "root", "receiver")


class Counts(NamedTuple):
    """Elements of one size: the call's count, one rank's send and receive buffers."""

    count: int
    send: int
    recv: int


@dataclass(frozen=True)
class Collective:
    """One collective (see the module docstring).

    Attributes
    ----------
    name : the lab's name ("all_reduce").
    aliases : other spellings accepted by :func:`canonical` (nccl-tests' short names, "allreduce").
    program : nccl-tests' program ("all_reduce_perf"), or None where it has none.
    split : the buffer that holds one chunk per rank: "" (none), "recv" (all_gather, gather),
        "send" (reduce_scatter, scatter) or "both" (all_to_all).
    redop : what nccl-tests prints in its redop column: "op" (the reduction asked with ``-o``; also for
        sendrecv, which reduces nothing), "none" (it moves data only) or "" (hypercube).
    busbw : busbw / algbw, a key of :data:`BUSBW`; ``algbw`` the bytes algbw counts as a share
        of the size ("1", or "(n-1)/n" for hypercube, which counts the chunks it receives).
    sources, sinks : the roles (module docstring); None for what is not a chunked collective
        (point-to-point, a barrier, the shifted exchange of sendrecv).
    rooted : has a root rank.
    min_ranks : the fewest ranks it runs on; ``power_of_two`` needs a power-of-two count.
    nccl : NCCL's name for it in the tuner ("AllReduce"), or None where NCCL's tuner does not
        price it (point-to-point, all_to_all).
    sim : the simulator's default algorithm, or None where the simulator has no schedule.
    point_to_point : a send or receive between two ranks.
    torch : torch.distributed functions that ask for it while the backend may run (and name)
        something else: the recorder names a row by them.
    c10d : c10d's names for it, each with the torch.distributed function that issues it: the
        dispatcher's ops (``c10d::allreduce_``, read without the trailing ``_``), the backends'
        profiling names (``nccl:_allgather_base``, ``gloo:all_reduce_barrier``) and the profiler's
        ``record_param_comms`` names (torch 2.13: torch/csrc/distributed/c10d/Ops.cpp,
        ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp).
    """

    name: str
    aliases: tuple[str, ...] = ()
    program: str | None = None
    split: str = ""
    redop: str = "none"
    busbw: str = "1"
    algbw: str = "1"
    sources: str | None = None
    sinks: str | None = None
    rooted: bool = False
    min_ranks: int = 1
    power_of_two: bool = False
    nccl: str | None = None
    sim: str | None = None
    point_to_point: bool = False
    torch: tuple[str, ...] = ()
    c10d: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        for field_name, value, allowed in (("split", self.split, SPLITS), ("redop", self.redop, REDOPS),
                                           ("busbw", self.busbw, BUSBW),
                                           ("algbw", self.algbw, BUSBW), ("sources", self.sources, SOURCES),
                                           ("sinks", self.sinks, SINKS)):
            if value is not None and value not in allowed:
                raise ValueError(f"{self.name}: {field_name} must be one of {', '.join(map(repr, allowed))}, "
                                 f"not {value!r}")
        if self.sim is not None and (self.sources is None or self.sinks is None):
            raise ValueError(f"{self.name}: a simulated collective needs its sources and sinks")

    @property
    def reduces(self) -> bool:
        """Whether it combines the ranks' inputs (every rank contributes to every chunk)."""
        return self.sources == "all"

    @property
    def chunked(self) -> bool:
        """Whether one of its buffers holds a chunk per rank (nccl-tests' split buffer)."""
        return self.split != ""

    def fill_redop(self, redop: str) -> str:
        """The reduction a run of it takes: ``redop`` where it reduces, else "none"."""
        return redop if self.reduces else "none"

    def printed_redop(self, redop: str) -> str:
        """What nccl-tests prints in the redop column for a run asked with ``redop``."""
        return redop if self.redop == "op" else self.redop

    @property
    def inplace(self) -> str:
        """How nccl-tests lays out the in-place run's one buffer: "same" (send is recv),
        "send_in_recv" (send is this rank's chunk of recv) or "recv_in_send"."""
        return {"recv": "send_in_recv", "send": "recv_in_send"}.get(self.split, "same")

    def busbw_factor(self, nranks: int) -> float:
        """busbw / algbw on ``nranks`` ranks."""
        return BUSBW[self.busbw](nranks)

    def algbw_share(self, nranks: int) -> float:
        """The bytes algbw counts, as a share of the printed size."""
        return BUSBW[self.algbw](nranks)

    def counts(self, nbytes: int, nranks: int, itemsize: int) -> Counts:
        """Element counts for a requested size of ``nbytes`` (nccl-tests' GetCollByteCount)."""
        elements = nbytes // itemsize
        if not self.split:
            return Counts(elements, elements, elements)
        base = (elements // nranks) & ~(max(1, ALIGN_BYTES // itemsize) - 1)
        whole = base * nranks
        return Counts(base, *{"recv": (base, whole), "send": (whole, base), "both": (whole, whole)}[self.split])

    def printed_size(self, nbytes: int, nranks: int, itemsize: int) -> int:
        """nccl-tests' "size" column for a requested size: the larger buffer, in bytes."""
        c = self.counts(nbytes, nranks, itemsize)
        return max(c.send, c.recv) * itemsize

    def smallest_size(self, nranks: int, itemsize: int) -> int:
        """The smallest requested size that gives every rank at least one element."""
        return nranks * max(itemsize, ALIGN_BYTES) if self.split else itemsize


_TABLE = [
    Collective("all_reduce", ("allreduce",), "all_reduce_perf", redop="op", busbw="2(n-1)/n", sources="all", sinks="all",
               nccl="AllReduce", sim="ring",
               c10d=(("allreduce", "all_reduce"), ("allreduce_coalesced", "all_reduce_coalesced"))),
    Collective("reduce_scatter", ("reducescatter",), "reduce_scatter_perf", split="send", redop="op",
               busbw="(n-1)/n",
               sources="all", sinks="owner", nccl="ReduceScatter", sim="ring",
               torch=("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter", "_reduce_scatter_base"),
               c10d=(("reduce_scatter", "reduce_scatter"), ("_reduce_scatter_base", "reduce_scatter_single"),
                     ("reduce_scatter_tensor_coalesced", "reduce_scatter_single (coalesced)"))),
    Collective("all_gather", ("allgather",), "all_gather_perf", split="recv", busbw="(n-1)/n", sources="owner",
               sinks="all", nccl="AllGather", sim="ring",
               torch=("all_gather_single", "all_gather_into_tensor", "_all_gather_base"),
               c10d=(("allgather", "all_gather"), ("_allgather_base", "all_gather_single"),
                     ("allgather_coalesced", "all_gather_coalesced"),
                     ("allgather_into_tensor_coalesced", "all_gather_single (coalesced)"))),
    Collective("broadcast", (), "broadcast_perf", sources="root", sinks="all", rooted=True, nccl="Broadcast",
               sim="chain", c10d=(("broadcast", "broadcast"),)),
    Collective("reduce", (), "reduce_perf", redop="op", sources="all", sinks="root", rooted=True, nccl="Reduce", sim="binomial",
               c10d=(("reduce", "reduce"),)),
    Collective("all_to_all", ("alltoall",), "alltoall_perf", split="both", busbw="(n-1)/n", sources="sender",
               sinks="receiver", sim="pairwise", torch=("all_to_all_single",),
               c10d=(("alltoall", "all_to_all"), ("alltoall_base", "all_to_all_single"),
                     ("all_to_allv", "all_to_all_single"))),
    Collective("gather", (), "gather_perf", split="recv", busbw="(n-1)/n", sources="owner", sinks="root",
               rooted=True, c10d=(("gather", "gather"),)),
    Collective("scatter", (), "scatter_perf", split="send", busbw="(n-1)/n", sources="root", sinks="owner",
               rooted=True, c10d=(("scatter", "scatter"),)),
    Collective("sendrecv", ("send_recv",), "sendrecv_perf", redop="op", min_ranks=2),
    Collective("hypercube", (), "hypercube_perf", split="recv", redop="", algbw="(n-1)/n", sources="owner", sinks="all",
               min_ranks=2, power_of_two=True),
    Collective("send", point_to_point=True, min_ranks=2, torch=("isend",), c10d=(("send", "send"),)),
    Collective("recv", point_to_point=True, min_ranks=2, torch=("irecv",),
               c10d=(("recv", "recv"), ("recv_any_source", "recv"))),
    Collective("barrier", busbw="0",
               c10d=(("barrier", "barrier"), ("monitored_barrier", "monitored_barrier"),
                     ("all_reduce_barrier", "barrier"))),
]

COLLECTIVES: dict[str, Collective] = {c.name: c for c in _TABLE}
"""Every collective by the lab's name, in the order above."""

_ALIASES = {alias: c.name for c in _TABLE for alias in (c.name, *c.aliases)}

TORCH_NAMES = {api: c.name for c in _TABLE for api in c.torch}
"""torch.distributed function -> the collective it asks for (where the backend may name another)."""

C10D_NAMES = {c10d: c.name for c in _TABLE for c10d, _ in c.c10d}
"""c10d's op or profiling name -> the collective."""

NCCL_NAMES = {c.name: c.nccl for c in _TABLE if c.nccl}
"""The lab's name -> NCCL's (``ncclFuncStr``), for what NCCL's tuner prices."""


def from_torch(name: str) -> str | None:
    """The collective any of torch's names stands for: the lab's name or an alias, a torch.distributed
    function (``all_gather_into_tensor``, ``isend``) or a c10d op or profiling name (``allreduce_``,
    ``_allgather_base``, ``all_reduce_barrier``); None for a name the lab does not know.

    Example
    -------
    >>> from_torch("allreduce_"), from_torch("_allgather_base"), from_torch("all_gather_into_tensor")
    ('all_reduce', 'all_gather', 'all_gather')
    >>> from_torch("wait_tensor") is None
    True
    """
    key = str(name)
    for table in (TORCH_NAMES, C10D_NAMES, _ALIASES):
        if key in table:
            return table[key]
    key = key.removesuffix("_")
    return C10D_NAMES.get(key) or _ALIASES.get(key)


def c10d_function(name: str) -> str:
    """The torch.distributed function that issues c10d's op ``name`` (``_allgather_base_`` ->
    ``all_gather_single``), for messages; the name itself where the lab does not know it."""
    key = str(name).removesuffix("_")
    return next((fn for c in _TABLE for c10d, fn in c.c10d if c10d == key), key)


def select(**having) -> list[str]:
    """Names of the collectives whose attributes equal ``having`` (all of them by default).

    Example
    -------
    >>> select(rooted=True)
    ['broadcast', 'reduce', 'gather', 'scatter']
    """
    return [c.name for c in _TABLE if all(getattr(c, k) == v for k, v in having.items())]


def canonical(name: str) -> str:
    """The lab's name for a collective: accepts nccl-tests' program names (``alltoall_perf``),
    any case, ``-`` for ``_`` and the aliases; ValueError naming the choices otherwise."""
    key = str(name).lower().replace("-", "_").removesuffix("_mpi").removesuffix("_perf")
    if key not in _ALIASES:
        raise ValueError(f"unknown collective {name!r}; choose one of: {', '.join(COLLECTIVES)}")
    return _ALIASES[key]


def describe(name: str) -> Collective:
    """The :class:`Collective` called ``name`` (or one of its aliases)."""
    return COLLECTIVES[canonical(name)]
