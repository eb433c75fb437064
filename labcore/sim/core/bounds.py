"""What no algorithm can beat: the bytes that must cross a cut of the ranks, and the least time.

The bytes a collective must move follow from its roles (:mod:`labcore.collectives`: whose input each
chunk starts from, who must end with it), so a new collective with known roles needs nothing here.

Example
-------
>>> cut_bytes("all_reduce", 32, 8, 1000)        # one node of four
(1500.0, 1500.0)
>>> round(lower_bound("all_reduce", 4, 1000, beta=1e-9) * 1e9, 6)
1500.0
"""
from __future__ import annotations

import math

from labcore import collectives as _spec
from labcore.sim.core.network import Cut

__all__ = ["cut_bytes", "lower_bound", "CUT_RULES"]


def _reduce_everywhere(p, s, N, n, in_network):
    need = 2 * (N - 1) / N * n                  # Patarasuk and Yuan's bound per party
    need = min(need, n) if in_network else need   # a reducing switch: send S once, receive the result once
    return need, need


CUT_RULES = {
    ("all", "all"): _reduce_everywhere,
    ("all", "owner"): lambda p, s, N, n, _: ((N - 1) / N * n, (N - 1) / N * n),
    ("owner", "all"): lambda p, s, N, n, _: (n / N, (N - 1) / N * n),
    ("owner", "root"): lambda p, s, N, n, _: (n / N, (N - 1) / N * n),
    ("root", "owner"): lambda p, s, N, n, _: ((N - 1) / N * n, n / N),
    ("sender", "receiver"): lambda p, s, N, n, _: (s * (p - s) / p * n, s * (p - s) / p * n),
    ("root", "all"): lambda p, s, N, n, _: (n, n),     # the root's side sends n, every other side receives n
    ("all", "root"): lambda p, s, N, n, _: (n, n),
}
"""(sources, sinks) -> the bytes a set of ranks must send and receive, whatever the algorithm."""


def cut_bytes(collective: str, ranks: int, members: int, nbytes: float, in_network: bool = False) -> tuple:
    """Bytes that must leave and enter a set of ``members`` of ``ranks`` ranks, in any algorithm.

    For a single rank these are Patarasuk and Yuan's bounds (JPDC 69(2), 2009: an all-reduce that
    reduces at the ranks must send and receive 2(n-1)/n S per rank, n ranks, S bytes); a set of
    ranks of which the ranks are 1/N acts as one party of an N-party collective (whatever its
    members do inside). A reducing switch lets an all-reduce party send its S once and receive the
    result once.
    """
    p, s, n = ranks, members, float(nbytes)
    if s >= p:
        return (0.0, 0.0)
    spec = _spec.describe(collective)
    rule = CUT_RULES.get((spec.sources, spec.sinks))
    if rule is None:
        raise ValueError(f"{collective} has no rule for the bytes it must move (roles {spec.sources}, {spec.sinks})")
    return tuple(float(x) for x in rule(p, s, p / s, n, in_network))


def lower_bound(collective: str, ranks: int, nbytes: float, beta: float | None = None, alpha: float = 0.0,
                in_network: bool = False, cuts=None, ports: str = "single") -> float:
    """Least time of any algorithm: the larger of a bandwidth and a latency floor.

    Bandwidth: for every cut (a set of ranks with the bandwidth of the links out of and into it:
    ``topology.cuts()``), the bytes that must cross it (:func:`cut_bytes`) over its bandwidth.
    Without ``cuts``, one port of 1/``beta`` bytes/s per rank (busbw can never exceed the link
    bandwidth, nccl-tests doc/PERFORMANCE.md). Latency: with one port a rank (``ports="single"``),
    ceil(log2 n) rounds of ``alpha`` (a value can at most double its reach per round); where a rank
    messages all its peers at once (``ports="multi"``, NVSwitch) or through a reducing switch, one.
    """
    if ranks == 1:
        return 0.0
    if cuts is None:
        cuts = [Cut(1, 1.0 / beta, 1.0 / beta, "one port")]
    wire = 0.0
    for cut in cuts:
        if ranks % cut.ranks:
            continue
        out, into = cut_bytes(collective, ranks, cut.ranks, nbytes, in_network)
        wire = max(wire, out / cut.out_bandwidth if out else 0.0, into / cut.in_bandwidth if into else 0.0)
    rounds = 1 if in_network or ports == "multi" else math.ceil(math.log2(ranks))
    return max(wire, rounds * alpha)
