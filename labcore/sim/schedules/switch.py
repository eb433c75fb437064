"""In-network reduction: a switch adds the ranks' data (InfiniBand SHARP, NVLink SHARP / NVLS).

* ``in_network`` (SHARP-style): every rank sends piece j of its buffer up to the
  switch, which reduces the p copies and multicasts the sum back down: k+1 steps
  of S/k bytes, each rank sending S and receiving S in all (instead of the
  ring's 2(n-1)/n S each way, n ranks). busbw can exceed the link bandwidth.
* ``nvls`` (NVLink SHARP on an NVSwitch, as NCCL drives it): piece j is split in
  p segments; every rank pushes its piece to the switch, which reduces (the
  multimem load-reduce), each rank fetches its reduced segment and stores it
  back to the switch, which multicasts it to the other ranks (the multimem
  store). Per rank S(1+1/n) bytes go up and S down, so algbw tends to
  bandwidth x n/(n+1): the relation algbw = busbw-related n/(n+1) that
  nccl-tests' maintainers give for NVLS (nccl-tests issue 239).

The switch is agent ``ranks`` (its buffer starts empty).

Example
-------
>>> in_network_all_reduce(4, 400, pipeline=2).n_steps
3
"""
from __future__ import annotations

import numpy as np

from labcore.sim.cost import default_pipeline
from labcore.sim.schedules._parts import Parts
from labcore.sim.trace import Layout, Schedule


def in_network_all_reduce(ranks: int, nbytes: float, pipeline: int | None = None) -> Schedule:
    """SHARP-style all-reduce through one reducing switch, pipelined in k = ``pipeline`` pieces."""
    k = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline))
    sw = ranks
    r = np.arange(ranks)[None]
    j = np.arange(k)[:, None]
    parts = Parts()
    if ranks > 1:
        parts.add(j, r, sw, j, True, label="up: switch reduces")
        parts.add(j + 1, sw, r, j, False, label="down: switch multicasts")
    return parts.schedule("all_reduce", "in_network", ranks, nbytes, k, switches=1,
                          layout=Layout("switch", switches=1), params={"pipeline": k})


def nvls_all_reduce(ranks: int, nbytes: float, pipeline: int | None = None) -> Schedule:
    """NVLS all-reduce (reduce at the switch, fetch own segment, multicast it); chunk j*p + c is
    segment c of piece j."""
    k, p = default_pipeline(nbytes) if pipeline is None else max(1, int(pipeline)), ranks
    sw = ranks
    parts = Parts()
    if p > 1:
        j = np.arange(k)[:, None, None]
        r = np.arange(p)[None, :, None]
        c = np.arange(p)[None, None, :]
        parts.add(j, r, sw, j * p + c, True, label="push: switch reduces")
        jj, cc = np.arange(k)[:, None], np.arange(p)[None]
        # fetch and store use a second channel: they overlap the next pushes and multicasts
        parts.add(jj + 1, sw, cc, jj * p + cc, False, channel=1, label="load-reduce: fetch own segment")
        parts.add(jj + 2, cc, sw, jj * p + cc, False, channel=1, label="store: segment back to switch")
        others = (np.arange(p)[:, None] + 1 + np.arange(p - 1)[None]) % p      # (segment c, every rank but c)
        parts.add(j + 3, sw, others[None], j * p + np.arange(p)[None, :, None], False, label="multicast")
    return parts.schedule("all_reduce", "nvls", ranks, nbytes, k * p, switches=1,
                          layout=Layout("switch", switches=1), params={"pipeline": k})
