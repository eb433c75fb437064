"""NCCL's point-to-point path: how it runs grouped send/recv (alltoall, sendrecv) outside its tuner.

An alltoall is one group of ``ncclSend``/``ncclRecv`` to every peer (nccl-tests src/alltoall.cu); NCCL
prices no algorithm for it, but plans it on its p2p channels, every peer at once, each peer's transfer
striped over a few channels, in LL or Simple by its size. From NVIDIA/nccl 2.30.7 (commit 5067397):

* channels: ``p2pnChannels`` is ``comm->nChannels`` rounded up to a power of two (src/graph/paths.cc:978-991);
  a peer on NVLink is worth ``2 x max(1, path bw / NVLink bw)`` channels, a peer across the network
  ``max(NICs, ceil(NIC bw / 14 GB/s))`` (NCCL_NCHANNELS_PER_NET_PEER, else NCCL_P2P_PER_CHANNEL_NET_BW 14,
  paths.cc:918-952), ``p2pnChannelsPerPeer`` the fewest over all peers, rounded up to a power of two and,
  across nodes, halved while ``perPeer x ceil(nRanks / 8)`` exceeds ``p2pnChannels`` (paths.cc:960-1003;
  8 = NCCL_MAX_DEV_WORK_P2P_PER_BATCH, src/include/device.h:391); a call starts from ``nChannelsMin``,
  ``perPeer`` halved while ``nChannelsMin x nRanks > p2pnChannels`` (src/enqueue.cc:1143-1146);
* one peer's transfer of ``b`` bytes: ``min(nChannelsMin, ceil(b / minPart))`` channels, doubled while a
  part is above ``maxPart`` (up to ``perPeer``); ``minPart`` is half a p2p chunk across nodes, an eighth
  on one node, ``maxPart`` a chunk or 32 (src/enqueue.cc:917-927);
* protocol: LL while ``b <= channels x NCCL_P2P_LL_THRESHOLD`` (16 KiB, enqueue.cc:859, 931-933), else
  Simple; never LL128;
* chunk: ``p2pChunkSize``, NCCL_P2P_NET_CHUNKSIZE 128 KiB across nodes (twice on ARM Blackwell hosts),
  NCCL_P2P_NVL_CHUNKSIZE 512 KiB on one NVLink node (src/init.cc:818-838); across the network a Simple
  transfer smaller than a chunk moves a quarter chunk, one under 8 chunks half (enqueue.cc:940-943).

The simulator plays it as the ``p2p`` all_to_all (:mod:`labcore.sim.core.schedules.p2p`): every block in
one step, the ports and NICs shared, in the protocol :func:`protocol` names. NCCL's model gives p2p no
latency of its own; the simulator charges the ring's base and per-hop latencies of that protocol (the
same kernel launch and the same transports).

Example
-------
>>> from labcore.sim.nccl.tuner import MACHINES
>>> m = MACHINES["dgx_h100"]
>>> p2p_channels(m), channels(64 << 10, m), protocol(64 << 10, m), transfer_chunk(64 << 10, m)
((32, 32, 4), 1, 'Simple', 524288)
"""
from __future__ import annotations

import math

from labcore.sim.nccl.tuner import constants as C

P2P_LL_THRESHOLD = 16384              # NCCL_P2P_LL_THRESHOLD, src/enqueue.cc:859
P2P_NET_CHUNK_BYTES = 1 << 17         # NCCL_P2P_NET_CHUNKSIZE, src/init.cc:818
P2P_NVL_CHUNK_BYTES = 1 << 19         # NCCL_P2P_NVL_CHUNKSIZE, src/init.cc:820
P2P_PER_CHANNEL_NET_BW = 14.0         # GB/s, NCCL_P2P_PER_CHANNEL_NET_BW, src/graph/paths.cc:918
MAX_DEV_WORK_P2P_PER_BATCH = 8        # src/include/device.h:391
NVLINKS_PER_GPU = {"ampere": 12, "hopper": 18, "blackwell": 18}   # NVSwitch GPUs' links (datasheets)

__all__ = ["p2p_channels", "channels", "protocol", "transfer_chunk", "P2P_LL_THRESHOLD"]


def _pow2_up(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _net_channels(machine) -> int:
    """Channels a peer across the network is worth (paths.cc:943-950): a channel a NIC, and one per
    14 GB/s of the GPU's NICs; the GPU's NIC bandwidth is what NCCL's ring graph gives a GPU."""
    ring = machine.ring
    nic_bw = ring.bw_inter * ring.channels / machine.local_ranks
    nics = max(1, ring.channels // machine.local_ranks)
    return max(nics, math.ceil(nic_bw / P2P_PER_CHANNEL_NET_BW))


def p2p_channels(machine) -> tuple[int, int, int]:
    """(``p2pnChannels``, ``p2pnChannelsPerPeer``, ``nChannelsMin``) of ``machine`` (module docstring)."""
    total = _pow2_up(machine.comm_channels)
    links = NVLINKS_PER_GPU.get(machine.arch, 1) if machine.nvswitch else 1
    per_peer = 2 * links if machine.local_ranks > 1 else total
    if machine.nodes > 1:
        per_peer = min(per_peer, _net_channels(machine))
    per_peer = _pow2_up(per_peer)
    if machine.nodes > 1:
        while per_peer * math.ceil(machine.ranks / MAX_DEV_WORK_P2P_PER_BATCH) > total and per_peer > 1:
            per_peer //= 2
    else:
        per_peer = min(total, per_peer)
    least = per_peer
    while least * machine.ranks > total and least > 1:
        least //= 2
    return total, per_peer, least


def _chunk_step(machine) -> int:
    """``p2pChunkSize`` (init.cc:829-838): the network's across nodes (twice on ARM Blackwell hosts),
    NVLink's on one node."""
    if machine.nodes > 1:
        return P2P_NET_CHUNK_BYTES * (2 if machine.cpu_arch == "arm" and machine.compcap >= 100 else 1)
    return P2P_NVL_CHUNK_BYTES


def channels(nbytes: int, machine) -> int:
    """Channels one peer's transfer of ``nbytes`` runs on (enqueue.cc:917-927)."""
    _, per_peer, least = p2p_channels(machine)
    if nbytes <= 0:
        return 1
    step = _chunk_step(machine)
    lo, hi = (step // 2, step) if machine.nodes > 1 else (step // 8, step * 32)
    nc = min(least, math.ceil(nbytes / lo))
    part = max(lo, math.ceil(nbytes / nc))
    while part > hi and nc <= per_peer // 2:
        nc *= 2
        part = math.ceil(nbytes / nc)
    return nc


def protocol(nbytes: int, machine) -> str:
    """"LL" or "Simple": the protocol of one peer's transfer of ``nbytes`` (enqueue.cc:931-933)."""
    return "LL" if nbytes <= channels(nbytes, machine) * P2P_LL_THRESHOLD else "Simple"


def transfer_chunk(nbytes: int, machine) -> int:
    """The chunk one peer's transfer moves a step (enqueue.cc:934-950): the p2p chunk (LL: its
    buffer's step, half of it data), cut for small transfers across the network."""
    if protocol(nbytes, machine) == "LL":
        return C.LL_BUFFSIZE // C.NCCL_STEPS // 2
    step = _chunk_step(machine)
    if machine.nodes > 1:
        if nbytes < step:
            return step // 4
        if nbytes < 8 * step:
            return step // 2
    return step
