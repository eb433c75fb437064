"""What each collective starts from and must end with, in the simulator's chunk terms.

``nbytes`` is the size nccl-tests prints for the collective (and the ``n`` of
the closed forms): the whole vector for all_reduce, reduce_scatter's input,
all_gather's output, broadcast/reduce's buffer, all_to_all's per-rank buffer.
The collectives, their roles (whose input each chunk starts from, who must end
with it) and busbw factors are described once, in :mod:`labcore.collectives`;
this module turns the roles into the buffer states the engine checks.

Example
-------
>>> busbw_factor("all_reduce", 8)
1.75
>>> chunk_bytes("all_to_all", 4, 1024, 16)     # 16 blocks of 1024/4 bytes
256.0
"""
from __future__ import annotations

import numpy as np

from labcore import collectives as _spec

SIMULATED = tuple(c.name for c in _spec.COLLECTIVES.values() if c.sim)
"""The collectives the simulator plays (those with a default algorithm)."""
REDUCE_OPS = ("sum", "max", "min", "prod")

_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
_IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}


def _blocked(collective: str) -> bool:
    """all_to_all-like: chunks are blocks from one rank to another (ranks**2 of them)."""
    return _spec.COLLECTIVES[collective].sources == "sender"


def _sliced(collective: str) -> bool:
    """Chunks belong to the rank whose slice they are (a multiple of ranks of them)."""
    spec = _spec.COLLECTIVES[collective]
    return "owner" in (spec.sources, spec.sinks)


def check_layout(collective: str, ranks: int, chunks: int, root: int = 0) -> None:
    """Raise ValueError with the fix when the collective/ranks/chunks combination is impossible."""
    if collective not in SIMULATED:
        raise ValueError(f"unknown collective {collective!r}; choose one of {', '.join(SIMULATED)}")
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if _sliced(collective) and chunks % ranks:
        raise ValueError(f"{collective} needs chunks to be a multiple of ranks ({ranks}), got {chunks}")
    if _blocked(collective) and chunks % (ranks * ranks):
        raise ValueError(f"{collective} needs chunks to be a multiple of ranks**2 ({ranks * ranks}), got {chunks}")
    if not 0 <= root < ranks:
        raise ValueError(f"root must be a rank in 0..{ranks - 1}, got {root}")


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw/algbw factor (doc/PERFORMANCE.md), from :mod:`labcore.collectives`."""
    return _spec.COLLECTIVES[collective].busbw_factor(ranks)


def chunk_bytes(collective: str, ranks: int, nbytes: float, chunks: int) -> float:
    """Bytes in one chunk."""
    if _blocked(collective):
        return nbytes * ranks / chunks
    return nbytes / chunks


def owner(ranks: int, chunks: int) -> np.ndarray:
    """For gather/scatter-like collectives, the rank whose slice each chunk is (chunk -> rank)."""
    return np.arange(chunks) * ranks // chunks


def _blocks(ranks: int, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """all_to_all: (source, destination) rank of every chunk."""
    block = np.arange(chunks) // (chunks // (ranks * ranks))
    return block // ranks, block % ranks


def _role(role: str, ranks: int, chunks: int, root: int) -> np.ndarray | None:
    """(ranks, chunks) bool: which ranks play ``role`` for every chunk; None for "all"."""
    if role == "all":
        return None
    if role == "owner":
        rank_of = owner(ranks, chunks)
    elif role == "root":
        rank_of = np.full(chunks, root)
    else:                                  # "sender" / "receiver": all_to_all's blocks
        rank_of = _blocks(ranks, chunks)[0 if role == "sender" else 1]
    return rank_of[None, :] == np.arange(ranks)[:, None]


def initial(collective: str, ranks: int, chunks: int, root: int = 0) -> np.ndarray:
    """(ranks, chunks, ranks) bool: whose contribution each rank's chunk holds before the first step:
    every source of a chunk holds its own contribution in it."""
    spec = _spec.COLLECTIVES[collective]
    sources = _role(spec.sources, ranks, chunks, root)
    holds = np.zeros((ranks, chunks, ranks), dtype=bool)
    r = np.arange(ranks)
    if sources is None:
        holds[r, :, r] = True
    else:
        k, c = np.nonzero(sources)
        holds[k, c, k] = True
    return holds


def target(collective: str, ranks: int, chunks: int, root: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(want, care): ``want[r, c]`` the contributions rank r's chunk c must end with (every source of
    chunk c); ``care[r, c]`` whether rank r must end with chunk c (it is a sink of it; False = any)."""
    spec = _spec.COLLECTIVES[collective]
    sources = _role(spec.sources, ranks, chunks, root)
    sinks = _role(spec.sinks, ranks, chunks, root)
    care = np.ones((ranks, chunks), dtype=bool) if sinks is None else sinks
    contributors = np.ones((chunks, ranks), dtype=bool) if sources is None else sources.T
    want = care[:, :, None] & contributors[None, :, :]
    return want, care


def identity(reduce_op: str) -> float:
    """The value an empty chunk holds, so that reducing into it is a copy."""
    if reduce_op not in _UFUNC:
        raise ValueError(f"unknown reduce_op {reduce_op!r}; choose one of {', '.join(REDUCE_OPS)}")
    return _IDENTITY[reduce_op]


def ufunc(reduce_op: str) -> np.ufunc:
    identity(reduce_op)
    return _UFUNC[reduce_op]


def make_inputs(reduce_op: str, ranks: int, chunks: int, elements: int, seed: int = 0) -> np.ndarray:
    """Every rank's input, (ranks, chunks, elements) float64 small integers so every order of
    reduction gives bit-identical results (products use +-1 and +-2: exact powers of two)."""
    rng = np.random.default_rng(seed)
    shape = (ranks, chunks, elements)
    if reduce_op == "prod":
        return rng.choice(np.array([-2.0, -1.0, 1.0, 2.0]), size=shape)
    return rng.integers(-99, 100, size=shape).astype(np.float64)


def expected_values(inputs: np.ndarray, want: np.ndarray, reduce_op: str) -> np.ndarray:
    """numpy's answer: (ranks, chunks, elements) reduction of ``inputs`` over the ranks in ``want``."""
    f, e = ufunc(reduce_op), identity(reduce_op)
    # inputs (k, c, e) -> (1, c, k, e); want (r, c, k) -> pick or identity, then reduce over k
    x = np.moveaxis(inputs, 0, 1)[None]
    picked = np.where(want[..., None], x, e)
    return f.reduce(picked, axis=2)
