"""What each collective starts from and must end with, in the simulator's chunk terms.

``nbytes`` is the size nccl-tests prints for the collective (and the ``n`` of
the closed forms): the whole vector for all_reduce, reduce_scatter's input,
all_gather's output, broadcast/reduce's buffer, all_to_all's per-rank buffer.
busbw factors follow nccl-tests doc/PERFORMANCE.md.

Example
-------
>>> busbw_factor("all_reduce", 8)
1.75
>>> chunk_bytes("all_to_all", 4, 1024, 16)     # 16 blocks of 1024/4 bytes
256.0
"""
from __future__ import annotations

import numpy as np

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")
REDUCE_OPS = ("sum", "max", "min", "prod")

_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
_IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}


def check(collective: str, ranks: int, chunks: int, root: int = 0) -> None:
    """Raise ValueError with the fix when the collective/ranks/chunks combination is impossible."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if collective in ("all_gather", "reduce_scatter") and chunks % ranks:
        raise ValueError(f"{collective} needs chunks to be a multiple of ranks ({ranks}), got {chunks}")
    if collective == "all_to_all" and chunks % (ranks * ranks):
        raise ValueError(f"all_to_all needs chunks to be a multiple of ranks**2 ({ranks * ranks}), got {chunks}")
    if not 0 <= root < ranks:
        raise ValueError(f"root must be a rank in 0..{ranks - 1}, got {root}")


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw/algbw factor (doc/PERFORMANCE.md)."""
    n = ranks
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def chunk_bytes(collective: str, ranks: int, nbytes: float, chunks: int) -> float:
    """Bytes in one chunk."""
    if collective == "all_to_all":
        return nbytes * ranks / chunks
    return nbytes / chunks


def owner(ranks: int, chunks: int) -> np.ndarray:
    """For gather/scatter-like collectives, the rank whose slice each chunk is (chunk -> rank)."""
    return np.arange(chunks) * ranks // chunks


def _blocks(ranks: int, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """all_to_all: (source, destination) rank of every chunk."""
    block = np.arange(chunks) // (chunks // (ranks * ranks))
    return block // ranks, block % ranks


def initial(collective: str, ranks: int, chunks: int, root: int = 0) -> np.ndarray:
    """(ranks, chunks, ranks) bool: whose contribution each rank's chunk holds before the first step."""
    P, C = ranks, chunks
    holds = np.zeros((P, C, P), dtype=bool)
    r = np.arange(P)
    if collective in ("all_reduce", "reduce_scatter", "reduce"):
        holds[r, :, r] = True
    elif collective == "all_gather":
        own = owner(P, C)
        holds[own, np.arange(C), own] = True
    elif collective == "broadcast":
        holds[root, :, root] = True
    elif collective == "all_to_all":
        src, _ = _blocks(P, C)
        holds[src, np.arange(C), src] = True
    return holds


def target(collective: str, ranks: int, chunks: int, root: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(want, care): ``want[r, c]`` the contributions rank r's chunk c must end with; ``care[r, c]`` False = any."""
    P, C = ranks, chunks
    want = np.zeros((P, C, P), dtype=bool)
    care = np.ones((P, C), dtype=bool)
    if collective == "all_reduce":
        want[:] = True
    elif collective == "reduce_scatter":
        own = owner(P, C)
        care = own[None, :] == np.arange(P)[:, None]
        want[care] = True
    elif collective == "all_gather":
        own = owner(P, C)
        want[:, np.arange(C), own] = True
    elif collective == "broadcast":
        want[:, :, root] = True
    elif collective == "reduce":
        care[:] = False
        care[root] = True
        want[root] = True
    elif collective == "all_to_all":
        src, dst = _blocks(P, C)
        care = dst[None, :] == np.arange(P)[:, None]
        want[dst, np.arange(C), src] = True
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
