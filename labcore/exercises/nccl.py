"""Exercises for notebook 08, inside NCCL: reading real INFO logs, protocols and channels.

- :data:`q_channels`: how many channels a 2-node H20 job runs on (NVIDIA/nccl#1189's log);
- :data:`q_transports`: which transport carries each hop of that job;
- :data:`q_slowest_hop`: which hop limits a ring across two H100 nodes (NVIDIA/nccl#1357);
- :data:`q_p2p_disable`: what ``NCCL_P2P_DISABLE=1`` would change in the H20 job;
- :data:`q_payload`: the share of an LL line and of an LL128 line that is data;
- :data:`q_small_channels`: how many channels NCCL launches for a small all-reduce.

The right answers are read from the logs (:func:`labcore.readers.nccl_log.recorded`) and from
the lab's port of NCCL's tuner, so the exercise and the cells beside it always agree.

Example
-------
>>> q_payload.check((0.5, 120 / 128))
LL and LL128 payload: correct!
"""
from __future__ import annotations

import math
from functools import lru_cache

from labcore.exercises.answers import as_items, as_mapping, as_number, as_text, holds_text, as_whole
from labcore.exercises.core import CustomExercise, Incorrect

__all__ = ["q_channels", "q_transports", "q_slowest_hop", "q_p2p_disable", "q_payload", "q_small_channels",
           "H20_LOG", "H100_2NODE_LOG"]

H20_LOG = "nccl_info_2node_h20.log"           # NVIDIA/nccl#1189: 2 nodes x 2 H20, 4 ranks
H100_2NODE_LOG = "nccl_info_2node_ib.log"     # NVIDIA/nccl#1357: 2 nodes x 8 H100, 16 ranks
TRANSPORTS = ("P2P", "SHM", "NET")


@lru_cache(maxsize=None)
def _log(name):
    from labcore.readers.nccl_log import recorded

    return recorded(name)


def _whole(answer, what):
    n = as_whole(answer)
    if n is None:
        raise Incorrect(f"give {what} as a whole number.")
    return n


# --- how many channels --------------------------------------------------------------------------
def _check_channels(answer):
    n = _whole(answer, "the number of channels")
    log = _log(H20_LOG)
    if n == log.channels:
        return None
    if n == int(log.graphs.iloc[0]["channels"]):
        raise Incorrect("that is the number of rings the topology search found (the 'Pattern 4' line). "
                        "NCCL connects each of them more than once; another line says how many channels it runs.")
    if n == 2:
        raise Incorrect("2 is the 'p2p channels per peer' of the log: channels for send/recv, not collectives.")
    if n == log.nvls_channels:
        raise Incorrect("that is the NVLS channel count; this job has no NVLink SHARP.")
    raise Incorrect("look for the line that ends '... coll channels, ... nvls channels, ... p2p channels'.")


q_channels = CustomExercise(
    "Channels in the log",
    "In the log of a 2-node job on H20 GPUs (tests/data/nccl_info_2node_h20.log, from NVIDIA/nccl#1189), "
    "how many channels does NCCL run collectives on?",
    checker=_check_channels,
    hints=["Parse it: log = recorded('nccl_info_2node_h20.log'); then look at log.summary().",
           "The 'Pattern 4' line is the search's result; the 'N coll channels' line is what NCCL runs."],
    solution="recorded('nccl_info_2node_h20.log').channels   # 8: the 4 rings of the search, each connected twice",
    correct_example=8, wrong_examples=[4, 2, 0, 16, "eight"],
)


# --- which transport each hop uses ---------------------------------------------------------------
HOPS = ((1, 0), (1, 3), (0, 2))


def _hop(key):
    """A dict key as the lab's own (src, dst) pair of ints, or None."""
    items = as_items(key)
    pair = tuple(as_whole(v) for v in items) if items is not None and len(items) == 2 else (None,)
    return None if None in pair else pair


def _norm(answer, hops):
    pairs = as_mapping(answer)
    if pairs is None:
        raise Incorrect("give a dict {(src, dst): 'P2P' | 'SHM' | 'NET'}.")
    given = {}
    for key, value in pairs:
        hop = _hop(key)
        if hop is not None:
            given[hop] = value
    got = {}
    for hop in hops:
        value = given.get(hop)
        if value is None:
            raise Incorrect(f"your dict has no transport for hop {hop}; give one for each of {list(hops)}.")
        text = as_text(value)
        if text is None:
            raise Incorrect(f"the transport for hop {hop} is not a name: give 'P2P', 'SHM' or 'NET' (text).")
        text = text.strip().upper().split("/")[0]        # "NET/IB" as the log prints it is NET
        if text not in TRANSPORTS:
            raise Incorrect(f"{text!r} for hop {hop} is not one of P2P, SHM, NET.")
        got[hop] = text
    return got


def _host(log, rank):
    return log.ranks.set_index("rank").loc[rank, "host"]


def _check_transports(answer):
    log = _log(H20_LOG)
    got = _norm(answer, HOPS)
    for (src, dst), value in got.items():
        want = log.transport(src, dst)
        if value == want:
            continue
        same = _host(log, src) == _host(log, dst)
        if not same and value in ("P2P", "SHM"):
            raise Incorrect(f"ranks {src} and {dst} run on different hosts ({_host(log, src)} and "
                            f"{_host(log, dst)}); {value} only connects GPUs inside one machine.")
        if same and value == "NET":
            raise Incorrect(f"ranks {src} and {dst} share the host {_host(log, src)}; NCCL uses the network "
                            "inside a node only when nothing faster works. Read the 'via' of that hop's line.")
        raise Incorrect(f"hop {src} -> {dst} is not {value}: read the 'via ...' part of its 'Channel' lines "
                        "again.")
    return None


q_transports = CustomExercise(
    "Transport per hop",
    "In the same H20 log, which transport (P2P, SHM or NET) carries each hop? Answer a dict "
    "{(1, 0): ..., (1, 3): ..., (0, 2): ...}.",
    checker=_check_transports,
    hints=["log.peer_table() lists every (src, dst) with the transport NCCL printed after 'via'.",
           "log.ranks shows which host each rank runs on: hops between hosts must go over the network."],
    solution="{(1, 0): 'P2P', (1, 3): 'NET', (0, 2): 'NET'}   # same host: P2P/CUMEM; across hosts: NET/IB",
    correct_example={(1, 0): "P2P", (1, 3): "NET", (0, 2): "NET"},
    wrong_examples=[{(1, 0): "P2P", (1, 3): "P2P", (0, 2): "P2P"},
                    {(1, 0): "SHM", (1, 3): "NET", (0, 2): "NET"},
                    {(1, 0): "NET", (1, 3): "NET", (0, 2): "NET"},
                    {(1, 0): "P2P", (1, 3): "NET"}, "P2P"],
)


# --- which hop is slowest --------------------------------------------------------------------
CANDIDATES = ((14, 13), (12, 4), (15, 13), (11, 9))


def _check_slowest(answer):
    hop = _hop(answer) if issubclass(type(answer), (tuple, list)) else None
    if hop is None:
        raise Incorrect("give the hop as a pair of rank numbers (src, dst).")
    if hop not in CANDIDATES:
        raise Incorrect(f"pick one of the hops {list(CANDIDATES)}.")
    log = _log(H100_2NODE_LOG)
    kind = log.transport(*hop)
    if kind == "NET":
        return None
    raise Incorrect(f"hop {hop[0]} -> {hop[1]} is not the slowest of the four: look up each candidate's "
                    "transport in the log (log.transport(src, dst)) and compare what each transport moves a second.")


q_slowest_hop = CustomExercise(
    "Slowest hop",
    "In the 2-node H100 log (tests/data/nccl_info_2node_ib.log, from NVIDIA/nccl#1357), which of the hops "
    f"{list(CANDIDATES)} limits the speed of a ring through it?",
    checker=_check_slowest,
    hints=["A ring runs at the speed of its slowest hop. Look up each hop's transport with log.transport(src, dst).",
           "NVLink (P2P) gives an H100 hundreds of GB/s; one 400 Gb/s NIC gives 50 GB/s."],
    solution="(12, 4)   # NET/IBext: it crosses from one node to the other over InfiniBand",
    correct_example=(12, 4), wrong_examples=[(14, 13), (15, 13), (11, 9), (4, 12), "12->4"],
)


# --- what NCCL_P2P_DISABLE=1 changes ------------------------------------------------------------
def _check_p2p_disable(answer):
    got = _norm(answer, ((1, 0), (1, 3)))
    if got[1, 0] == "P2P":
        raise Incorrect("NCCL_P2P_DISABLE=1 switches the P2P transport off, so 1 -> 0 cannot stay on P2P.")
    if got[1, 0] == "NET":
        raise Incorrect("inside a node NCCL uses the network only when no transport that stays in the machine can "
                        "connect the two GPUs; NCCL_P2P_DISABLE switches one of those off, not all of them.")
    if got[1, 3] != "NET":
        raise Incorrect("1 -> 3 crosses from one host to the other: host shared memory cannot reach another "
                        "machine, and the setting does not touch the network.")
    return None


q_p2p_disable = CustomExercise(
    "NCCL_P2P_DISABLE=1",
    "The H20 job's hop 1 -> 0 uses P2P and 1 -> 3 uses NET. If the job ran again with NCCL_P2P_DISABLE=1, "
    "which transport would carry each? Answer {(1, 0): ..., (1, 3): ...}.",
    checker=_check_p2p_disable,
    hints=["NCCL's user guide: SHM 'is used between devices when peer-to-peer cannot happen'.",
           "Only hops that used P2P change; a hop between two machines was never P2P."],
    solution="{(1, 0): 'SHM', (1, 3): 'NET'}   # P2P off: same-node hops go through host memory",
    correct_example={(1, 0): "SHM", (1, 3): "NET"},
    wrong_examples=[{(1, 0): "P2P", (1, 3): "NET"}, {(1, 0): "NET", (1, 3): "NET"},
                    {(1, 0): "SHM", (1, 3): "SHM"}, {(1, 0): "SHM"}],
)


# --- payload efficiency ------------------------------------------------------------------------
def _check_payload(answer):
    items = as_items(answer) if issubclass(type(answer), (tuple, list)) else None
    values = [as_number(x) for x in items] if items is not None and len(items) == 2 and not holds_text(items) else []
    if len(values) != 2 or None in values:
        raise Incorrect("give two fractions in a tuple, in this order: (LL, LL128), e.g. (0.3, 0.8).")
    ll, ll128 = (float(v) for v in values)
    close = lambda a, b: math.isclose(a, b, rel_tol=5e-3)    # 0.94 is 120/128 rounded
    if close(ll, 0.5) and close(ll128, 120 / 128):
        return None
    if close(ll, 120 / 128) and close(ll128, 0.5):
        raise Incorrect("you have the two the wrong way round.")
    if ll > 1 or ll128 > 1:
        raise Incorrect("a share is a fraction between 0 and 1 (25% is 0.25), not a percentage.")
    if math.isclose(ll, 1.0):
        raise Incorrect("LL is not 100% efficient: its lines carry flags as well as data. Count how many of "
                        "the 16 bytes of one LL line are flags.")
    if not close(ll, 0.5):
        raise Incorrect("the LL share is off: one LL line is 16 bytes; count the bytes that are data.")
    if math.isclose(ll128, 1.0):
        raise Incorrect("LL128 is not 100% efficient either: part of every 128-byte line is a flag.")
    raise Incorrect("the LL128 share is off: one line is 128 bytes; how many of them are the flag?")


q_payload = CustomExercise(
    "LL and LL128 payload",
    "What share of the bytes NCCL writes is data in an LL line, and in an LL128 line? Answer (LL, LL128).",
    checker=_check_payload,
    hints=["The figure above draws one line of each; red is the flag.",
           "LL: 8 of 16 bytes are flags. LL128: 8 of 128."],
    solution="(0.5, 120 / 128)   # LL: 8 data + 8 flag bytes; LL128: 120 data + 8 flag bytes",
    correct_example=(0.5, 0.9375), wrong_examples=[(1.0, 1.0), (0.5, 1.0), (0.9375, 0.5), (0.5, 0.5), 0.5,
                                                    (50, 93.75)],
)


# --- more channels is not always faster -----------------------------------------------------------
def _small_channels() -> int:
    from labcore.sim import tuner

    return tuner.launch("all_reduce", 64 << 10, tuner.MACHINES["dgx_h100"])["channels"]


def _check_small_channels(answer):
    n = _whole(answer, "the number of channels")
    if n == _small_channels():
        return None
    from labcore.sim import tuner

    m = tuner.MACHINES["dgx_h100"]
    if n >= m.comm_channels:
        raise Incorrect("more channels is not always faster: every channel pays the same latency, so for a small "
                        "message NCCL launches fewer of them until each thread has enough bytes to move.")
    if n == m.nvls_ctas:
        raise Incorrect("that is how many CTAs NVLS uses; at 64 KiB NCCL picks Ring/LL.")
    raise Incorrect("NCCL removes one channel at a time while nbytes < channels x threads x threshold, and stops "
                    "as soon as that is false. Try the inequality channel count by channel count.")


q_small_channels = CustomExercise(
    "Channels for a small message",
    "A DGX H100 communicator has 24 channels. For a 64 KiB all_reduce NCCL picks Ring/LL (512 threads a "
    "channel; LL's threshold is 8 bytes a thread per rank, 8 ranks). NCCL drops channels while "
    "nbytes < channels x threads x threshold. How many channels does it launch?",
    checker=_check_small_channels,
    hints=["threads x threshold = 512 x (8 x 8) = 32768 bytes a channel.",
           "Find the first channel count c, going down from 24, for which 65536 < c x 32768 is false. "
           "lc.sim.tuner.launch('all_reduce', 64 << 10, lc.sim.tuner.MACHINES['dgx_h100']) checks it."],
    solution="2   # 65536 < 2 x 512 x 64 is false, so NCCL stops at 2 channels",
    correct_example=2, wrong_examples=[24, 32, 16, 1, 3],
)
