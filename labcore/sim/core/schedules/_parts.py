"""Assembling a Schedule from vectorised pieces (shared by the builders)."""
from __future__ import annotations

import numpy as np

from labcore.sim.core import buffers
from labcore.sim.core.trace import Layout, Schedule


class Parts:
    """Collects columns of transfers, then makes a Schedule.

    Example
    -------
    >>> p = Parts()
    >>> p.add(step=0, src=[0, 1], dst=[1, 0], chunk=0, reduce=True)
    >>> p.schedule("all_reduce", "pairwise", 2, 8, 1).n_transfers
    2
    """

    def __init__(self) -> None:
        self.cols: list[tuple] = []
        self.labels: dict[int, list[str]] = {}

    def add(self, step, src, dst, chunk, reduce: bool, channel=0, size=None, label: str = "", span=1) -> None:
        """Add transfers; arguments broadcast against each other. ``size`` None = the chunks' size;
        ``span`` chunks from ``chunk`` on move together."""
        arrays = np.broadcast_arrays(np.asarray(step), np.asarray(src), np.asarray(dst), np.asarray(chunk),
                                     np.asarray(channel), np.asarray(np.nan if size is None else size, dtype=float),
                                     np.asarray(span))
        flat = [a.ravel() for a in arrays]
        if flat[0].size:
            self.cols.append((*flat[:6], np.full(flat[0].size, bool(reduce)), flat[6]))
            if label:
                for s in np.unique(flat[0]).tolist():
                    names = self.labels.setdefault(int(s), [])
                    if label not in names:
                        names.append(label)

    def schedule(self, collective: str, algorithm: str, ranks: int, nbytes: float, chunks: int, root: int = 0,
                 switches: int = 0, layout: Layout | None = None, params: dict | None = None,
                 distinct: bool = False) -> Schedule:
        """The Schedule; ``distinct``: the caller promises one transfer per message (see Schedule)."""
        cb = buffers.chunk_bytes(collective, ranks, nbytes, chunks)
        if self.cols:
            step, src, dst, chunk, channel, size, red, span = (np.concatenate(c) for c in zip(*self.cols))
        else:
            step = src = dst = chunk = channel = span = np.zeros(0, dtype=np.int64)
            size, red = np.zeros(0), np.zeros(0, dtype=bool)
        size = np.where(np.isnan(size), cb * span, size)
        n_steps = int(step.max()) + 1 if step.size else 0
        cols = [step, src, dst, chunk, size, red, channel, span]
        if np.any(step[1:] < step[:-1]):
            order = np.argsort(step, kind="stable")
            cols = [c[order] for c in cols]
        return Schedule(collective, algorithm, ranks, nbytes, chunks, *cols[:6], n_steps=n_steps, root=root,
                        switches=switches, layout=layout or Layout(switches=switches),
                        phases=tuple(" + ".join(self.labels.get(s, [])) for s in range(n_steps)), params=params or {},
                        channel=cols[6], span=cols[7], distinct=distinct)


def ring_phase(parts: Parts, rings: np.ndarray, blocks: np.ndarray, first_step: int, offset: int, reduce: bool,
               label: str, channel=0, span: int = 1) -> int:
    """q-1 ring steps on R rings at once; returns the next free step.

    ``rings`` (R, q): the ranks of each ring in order. ``blocks`` (R, q, m): the first chunk id
    of block b of ring r, each moving ``span`` chunks. In step s position i sends block
    (i + offset - s) mod q to i+1 (offset -1: reduce-scatter, rank at position i ends with
    block i; offset 0: all-gather). ``channel``: one per ring (R,) or one for all.
    """
    R, q = rings.shape
    if q < 2:
        return first_step
    m = blocks.shape[2]
    s = np.arange(q - 1)[:, None, None, None]
    r = np.arange(R)[None, :, None, None]
    i = np.arange(q)[None, None, :, None]
    e = np.arange(m)[None, None, None, :]
    ch = np.broadcast_to(np.asarray(channel), (R,))[r]
    parts.add(first_step + s, rings[r, i], rings[r, (i + 1) % q], blocks[r, (i + offset - s) % q, e], reduce,
              channel=ch, label=label, span=span)
    return first_step + q - 1
