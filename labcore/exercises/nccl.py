"""Exercises for notebook 08, inside NCCL: reading real INFO logs, protocols and channels.

- :data:`q_channels`: how many channels a 2-node H20 job runs on (NVIDIA/nccl#1189's log);
- :data:`q_transports`: which transport carries each hop of that job;
- :data:`q_slowest_hop`: which hop limits a ring across two H100 nodes (NVIDIA/nccl#1357);
- :data:`q_p2p_disable`: what ``NCCL_P2P_DISABLE=1`` would change in the H20 job;
- :data:`q_payload`: the share of an LL line and of an LL128 line that is data;
- :data:`q_small_channels`: how many channels NCCL launches for a small all-reduce;
- :data:`q_nccl_picks`: the algorithm and protocol NCCL's tuner picks, by size, on one node and on four.

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

import re

from labcore.exercises.answers import as_items, as_number, as_one_number, as_pairs, as_text, holds_text, as_whole
from labcore.exercises.core import CustomExercise, Incorrect

__all__ = ["q_channels", "q_transports", "q_slowest_hop", "q_p2p_disable", "q_payload", "q_small_channels",
           "q_nccl_picks", "H20_LOG", "H100_2NODE_LOG", "PICK_CASES"]

H20_LOG = "nccl_info_2node_h20.log"           # NVIDIA/nccl#1189: 2 nodes x 2 H20, 4 ranks
H100_2NODE_LOG = "nccl_info_2node_ib.log"     # NVIDIA/nccl#1357: 2 nodes x 8 H100, 16 ranks
TRANSPORTS = ("P2P", "SHM", "NET")


@lru_cache(maxsize=None)
def _log(name):
    from labcore.readers.nccl_log import recorded

    return recorded(name)


def _whole(answer, what):
    number = as_one_number(answer)
    n = None if number is None else as_whole(number)
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


_ARROW = re.compile(r"^\s*\(?\s*(\d+)\s*(?:->|→|,)\s*(\d+)\s*\)?\s*$")


def _hop(key):
    """A hop as the lab's own (src, dst) pair of ints: a pair of whole numbers, or text such as
    "1->0" or "1 -> 0"; None for anything else."""
    text = as_text(key)
    if text is not None:
        found = _ARROW.match(text)
        return (int(found[1]), int(found[2])) if found else None
    items = as_items(key) if issubclass(type(key), (tuple, list)) else None
    pair = tuple(as_whole(v) for v in items) if items is not None and len(items) == 2 else (None,)
    return None if None in pair else pair


_HOP_FORM = ("a dict {(src, dst): 'P2P' | 'SHM' | 'NET'} (or a list of (hop, transport) pairs; hops as (1, 0) "
             "or '1->0', transports in any case)")


def _norm(answer, hops):
    """Every hop the answer names, with its transport read as P2P, SHM or NET; the asked ``hops`` must be
    among them. Hops beyond those are claims too, and are returned to be checked."""
    pairs = as_pairs(answer)
    if pairs is None:
        raise Incorrect(f"give {_HOP_FORM}.")
    got = {}
    for key, value in pairs:
        hop = _hop(key)
        if hop is None:
            raise Incorrect(f"a hop of your answer is not a pair of ranks (src, dst); give {_HOP_FORM}.")
        text = as_text(value)
        if text is None:
            raise Incorrect(f"the transport for hop {hop} is not a name: give 'P2P', 'SHM' or 'NET' (text).")
        text = text.strip().upper().split("/")[0]        # "NET/IB" as the log prints it is NET
        if text not in TRANSPORTS:
            raise Incorrect(f"{text!r} for hop {hop} is not one of P2P, SHM, NET.")
        got[hop] = text
    for hop in hops:
        if hop not in got:
            raise Incorrect(f"your answer has no transport for hop {hop}; give one for each of {list(hops)}.")
    return got


def _in_log(log, hop) -> bool:
    return bool(((log.peer_table()["src"] == hop[0]) & (log.peer_table()["dst"] == hop[1])).any())


def _unknown_hops(log, got: dict, hops) -> None:
    """Refuse a claim about a hop the log never connected (nothing in it can support the claim)."""
    absent = [hop for hop in got if hop not in hops and not _in_log(log, hop)]
    if absent:
        raise Incorrect(f"the log shows no connection for {', '.join(f'{a} -> {b}' for a, b in absent)}, so nothing "
                        "supports what your answer says about it: answer for the asked hops (and, if you like, "
                        "other hops the log connects).")


def _host(log, rank):
    return log.ranks.set_index("rank").loc[rank, "host"]


def _check_transports(answer):
    log = _log(H20_LOG)
    got = _norm(answer, HOPS)
    _unknown_hops(log, got, HOPS)
    for (src, dst), value in sorted(got.items(), key=lambda kv: (kv[0] not in HOPS, kv[0])):
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
    "{(1, 0): ..., (1, 3): ..., (0, 2): ...} (a list of (hop, transport) pairs will do; any case). Every hop "
    "you name is checked, also ones beyond these three.",
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
    hop = _hop(answer)
    if hop is None:
        raise Incorrect("give the hop as a pair of rank numbers (src, dst), or as text such as '14->13'.")
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
    correct_example=(12, 4), wrong_examples=[(14, 13), (15, 13), (11, 9), (4, 12), "12 to 4"],
)


# --- what NCCL_P2P_DISABLE=1 changes ------------------------------------------------------------
def _check_p2p_disable(answer):
    log = _log(H20_LOG)
    got = _norm(answer, ((1, 0), (1, 3)))
    _unknown_hops(log, got, ((1, 0), (1, 3)))
    for (src, dst), value in got.items():          # a hop beyond the two asked: checked by the same rule
        if (src, dst) in ((1, 0), (1, 3)):
            continue
        same = _host(log, src) == _host(log, dst)
        if value == "P2P" or (same and value == "NET") or (not same and value != "NET"):
            raise Incorrect(f"hop {src} -> {dst} would not be {value} with NCCL_P2P_DISABLE=1: apply the same "
                            "reasoning as for the two asked hops (which host each rank runs on, and what the "
                            "setting switches off).")
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
    "which transport would carry each? Answer {(1, 0): ..., (1, 3): ...} (or a list of (hop, transport) "
    "pairs; any case).",
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


# --- what NCCL picks, by size and machine ---------------------------------------------------------------
# (nodes, bytes): one DGX H100 (8 GPUs on NVSwitch) and four of them joined by 8 x 400 Gb/s InfiniBand
PICK_CASES = ((1, 8 << 10), (1, 1 << 20), (1, 1 << 30), (4, 8 << 10), (4, 1 << 20), (4, 1 << 30))
_PICK_MACHINES = {1: "dgx_h100", 4: "dgx_h100_ib"}


@lru_cache(maxsize=None)
def _pick(nodes: int, nbytes: int) -> tuple[str, str]:
    """(algorithm, protocol) NCCL's tuner picks for an all_reduce of ``nbytes`` on ``nodes`` DGX H100 nodes."""
    from labcore.sim import tuner

    machine = tuner.MACHINES[_PICK_MACHINES[nodes]].with_ranks(8 * nodes, nodes)
    choice = tuner.predict("all_reduce", nbytes, machine)
    return choice.algorithm, choice.protocol


_PICK_FORM = ("a dict {(nodes, bytes): 'Algorithm/Protocol'} with an entry for each of PICK_CASES (or a list of "
              "pairs; 'Tree/Simple', 'tree simple' and ('Tree', 'Simple') all do)")


def _algorithms_and_protocols():
    from labcore.sim import tuner

    return {a.lower(): a for a in tuner.ALGORITHMS}, {p.lower(): p for p in tuner.PROTOCOLS}


def _read_pick(value, case) -> tuple[str, str]:
    algorithms, protocols = _algorithms_and_protocols()
    items = as_items(value) if issubclass(type(value), (tuple, list)) else None
    text = as_text(value)
    if items is not None and len(items) == 2 and not [i for i in items if as_text(i) is None]:
        words = [as_text(i) for i in items]
    elif text is not None:
        words = re.split(r"[\s/,:+]+", text.strip())
    else:
        words = []
    words = [w.lower() for w in words if w]
    if len(words) != 2 or words[0] not in algorithms or words[1] not in protocols:
        raise Incorrect(f"the pick for {case} is not an algorithm and a protocol of NCCL's: give "
                        f"'Algorithm/Protocol' with an algorithm of {sorted(algorithms.values())} and a protocol of "
                        f"{sorted(protocols.values())}.")
    return algorithms[words[0]], protocols[words[1]]


def _check_picks(answer):
    pairs = as_pairs(answer)
    if pairs is None:
        raise Incorrect(f"give {_PICK_FORM}.")
    got = {}
    for key, value in pairs:
        items = as_items(key) if issubclass(type(key), (tuple, list)) else None
        case = tuple(as_whole(v) for v in items) if items is not None and len(items) == 2 else None
        if case is None or None in case:
            raise Incorrect(f"a key of your answer is not a pair (nodes, bytes); give {_PICK_FORM}.")
        if case not in PICK_CASES:
            raise Incorrect(f"{case} is not one of PICK_CASES {list(PICK_CASES)}: answer for those.")
        got[case] = _read_pick(value, case)
    missing = [c for c in PICK_CASES if c not in got]
    if missing:
        raise Incorrect(f"your answer has no pick for {missing}; give one for each of PICK_CASES.")
    wrong = [c for c in PICK_CASES if got[c] != _pick(*c)]
    if not wrong:
        return "NCCL decides per call, from the size and the topology it detected."
    if len(set(got.values())) == 1:
        raise Incorrect("you give the same algorithm and protocol everywhere, but NCCL has no fixed algorithm: for "
                        "every call it prices each algorithm and protocol the topology it detected allows, at that "
                        "call's size, and takes the fastest (tuner.cost_table shows the prices).")
    if all(got[(1, size)] == got[(4, size)] for _, size in PICK_CASES):
        raise Incorrect("your picks depend on the size only: NCCL detects the topology too, and on 4 nodes, where "
                        "every step crosses InfiniBand, some of its choices are not the one-node ones.")
    if all(len({got[(n, size)][1] for _, size in PICK_CASES}) == 1 for n in (1, 4)):
        raise Incorrect("you give one protocol for every size on a machine: small messages pay mostly latency and "
                        "large ones mostly bandwidth, and NCCL's protocols trade one for the other.")
    shown = ", ".join(f"{n} node{'s' if n > 1 else ''} at {size} bytes" for n, size in wrong)
    raise Incorrect(f"{len(wrong)} of the {len(PICK_CASES)} picks are not NCCL's ({shown}): for each, find the "
                    "fastest available row of tuner.cost_table('all_reduce', bytes, machine).")


q_nccl_picks = CustomExercise(
    "What NCCL picks",
    "NCCL detects the machine it runs on and picks an algorithm and a protocol for every call. With the "
    "lab's port of its tuner (tuner.MACHINES['dgx_h100'] is one DGX H100 node; "
    "tuner.MACHINES['dgx_h100_ib'] is four of them, 8 x 400 Gb/s InfiniBand each), which algorithm and "
    "protocol does NCCL pick for an all_reduce of each size in PICK_CASES, (nodes, bytes)? Answer with "
    + _PICK_FORM + ".",
    checker=_check_picks,
    hints=["tuner.cost_table('all_reduce', nbytes, machine) prices every algorithm and protocol; NCCL takes the "
           "fastest that is available (the 'chosen' column).",
           "tuner.predict('all_reduce', nbytes, machine).name gives the pick directly: compare the one-node and "
           "four-node machines at each size."],
    solution="{case: tuner.predict('all_reduce', case[1], tuner.MACHINES['dgx_h100' if case[0] == 1 else "
             "'dgx_h100_ib']).name for case in PICK_CASES}\n"
             "# one node: Ring/LL, Ring/LL, NVLS/Simple; four nodes: Tree/LL, Tree/LL128, NVLSTree/Simple",
    correct_example={c: "/".join(_pick(*c)) for c in PICK_CASES},
    wrong_examples=[{c: "Ring/Simple" for c in PICK_CASES},
                    {c: "/".join(_pick(1, c[1])) for c in PICK_CASES},
                    {c: "/".join(_pick(*c)) for c in PICK_CASES[:5]},
                    {**{c: "/".join(_pick(*c)) for c in PICK_CASES}, (4, 1 << 20): "Tree/LL"},
                    {c: ("NVLS/Simple" if c[0] == 1 else "NVLSTree/Simple") for c in PICK_CASES},
                    "Ring/LL"],
    expects="a dict {(nodes, bytes): 'Algorithm/Protocol'}",
)
