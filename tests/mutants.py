"""Wrong answers and valid variants of the lab's exercises, none of them an exercise's own example,
grouped by the flaw of a check each one probes (the classes of issue 32):

- ``wrapper``: a detector a wrapper hides (``torch.no_grad()``, ``.data``, a view, a helper; a wrong
  number inside a container the check reads leniently);
- ``sent``: the result checked, not what was sent (a right result by the wrong traffic, or none);
- ``threshold``: a threshold that fires only at the extreme (just past a tolerance, one wasted step);
- ``inputs``: test inputs whose structure a wrong answer exploits (sorted items, whole numbers, sizes that
  divide, 4 ranks, the listing order);
- ``part``: part of an answer ignored (an extra hop, key, letter, size or item);
- ``feedback``: a wrong answer whose message must name its own mistake (the words listed with it).

Valid variants are ``form`` (another type or spelling of the right answer, as the prompt says it may be)
and ``method`` (another right way to compute it).

``WRONG``/``VALID`` run in the test process (tests/test_exercises_mutants.py); ``LIVE_WRONG``/``LIVE_VALID``
are functions for the ranks (tests/test_exercises_mutants_live.py). This module travels to the ranks by
value (cloudpickle), so the ranks need not import it.
"""
from __future__ import annotations

import contextlib
import decimal
import fractions
import math
import sys
from collections import OrderedDict

import cloudpickle
import numpy as np
import pandas as pd
import torch

from labcore.exercises import data_parallel as dp
from labcore.exercises import evidence as ev
from labcore.exercises import hangs
from labcore.exercises import measuring as me
from labcore.exercises import nccl as nc
from labcore.exercises import operating as op
from labcore.exercises import operations as ops
from labcore.exercises import ring
from labcore.exercises import scaling as sc
from labcore.exercises import sharding as sh
from labcore.exercises import trees as tr
from labcore.exercises.values import StatedValue

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WRONG_KINDS = ("wrapper", "sent", "threshold", "inputs", "part", "feedback")
VALID_KINDS = ("form", "method")

WRONG: list[tuple] = []     # (exercise, kind, answer, words its message must hold or None)
VALID: list[tuple] = []     # (exercise, kind, answer)


def wrong(q, kind, *answers, says=None):
    assert kind in WRONG_KINDS, kind
    WRONG.extend((q, kind, a, says) for a in answers)


def valid(q, kind, *answers):
    assert kind in VALID_KINDS, kind
    VALID.extend((q, kind, a) for a in answers)


# -- every number asked with a stated tolerance: just past it is wrong, well inside it and other types are right --
STATED = [ops.q_all_reduce, ring.q_busbw, tr.q_double_tree_interior, tr.q_tree_vs_ring, me.q_algbw,
          sh.q_zero3_volume, sc.q_hierarchical_bytes, sc.q_sharp_bytes, sc.q_nic_gbytes, sc.q_sharp_gain,
          sc.q_nic_per_gpu, ev.q_outlier, ev.q_gib, op.q_workload]
for q in STATED:
    assert isinstance(q, StatedValue), q.title
    right = float(q.expected_value())
    if q.rtol == 0:
        wrong(q, "threshold", right + 1, right - 1 if right >= 1 else right + 2, right + 0.5)
        valid(q, "form", float(right), np.int64(int(right)), torch.tensor([right]), [right], np.array([[right]]))
    else:
        wrong(q, "threshold", right * (1 + 1.6 * q.rtol), right * (1 - 1.6 * q.rtol))
        valid(q, "form", right * (1 + q.rtol / 3), right * (1 - q.rtol / 3), np.float32(right), torch.tensor([right]),
              [right])
    # a container of two numbers, the right one among them, is not one number
    wrong(q, "wrapper", [right, right + 1], torch.tensor([right, 2 * right + 1]), (right, 0.0))

# -- 01: collectives -------------------------------------------------------------------------------------
wrong(ops.q_all_reduce, "wrapper", torch.tensor([[9.0]]), np.array([11]), [[10, 10]], {"rank 2": 10})
valid(ops.q_all_reduce, "form", torch.tensor(10), np.float32(10), fractions.Fraction(10),
      decimal.Decimal("10"), (10,))
wrong(ops.q_all_reduce, "feedback", fractions.Fraction(5, 2), says="the average")


def _a2a_sorted(inputs):                 # ordered by value, not by source
    n = len(inputs)
    return [sorted((inputs[j][r] for j in range(n)), key=str) for r in range(n)]


def _a2a_sorted_numbers(inputs):
    n = len(inputs)
    got = [[inputs[j][r] for j in range(n)] for r in range(n)]
    return [sorted(row) if all(isinstance(v, float) for v in row) else row for row in got]


def _a2a_by_tag(inputs):                 # reads the sender off the item's name: fine for "a0", not for 7.5
    n = len(inputs)
    out = []
    for r in range(n):
        items = [inputs[j][r] for j in range(n)]
        out.append(sorted(items, key=lambda v: str(v)[0]) if isinstance(items[0], str) else items[::-1])
    return out


def _a2a_rotated(inputs):
    n = len(inputs)
    return [[inputs[(r + j) % n][r] for j in range(n)] for r in range(n)]


def _a2a_two_ranks(inputs):
    return [[inputs[0][r], inputs[1][r]] for r in range(len(inputs))]


def _a2a_own_row_first(inputs):
    n = len(inputs)
    return [[inputs[r][r]] + [inputs[j][r] for j in range(n) if j != r] for r in range(n)]


def _a2a_column_of_sender(inputs):
    n = len(inputs)
    return [[inputs[r][j] for j in range(n)][::-1] for r in range(n)]


def _a2a_square_only(inputs):
    n = len(inputs)
    if n == 4:
        return inputs
    return [[inputs[j][r] for j in range(n)] for r in range(n)]


wrong(ops.q_all_to_all, "inputs", _a2a_sorted, _a2a_sorted_numbers, _a2a_by_tag, _a2a_rotated, _a2a_two_ranks,
      _a2a_own_row_first, _a2a_column_of_sender, _a2a_square_only)
wrong(ops.q_all_to_all, "part", lambda inputs: [[inputs[j][r] for j in range(len(inputs))] + [None]
                                                for r in range(len(inputs))],
      lambda inputs: [[inputs[j][r] for j in range(len(inputs))] for r in range(len(inputs))] + [[]])
valid(ops.q_all_to_all, "method", lambda inputs: list(zip(*inputs)),
      lambda inputs: np.array(inputs, dtype=object).T,
      lambda inputs: [tuple(row[r] for row in inputs) for r in range(len(inputs))],
      lambda inputs: [list(col) for col in zip(*inputs)])
wrong(ops.q_which, "feedback", "allreduce", says="not one slice")
wrong(ops.q_which, "part", "reduce_scatter and all_gather", "reduce_scatter, then all_gather")
wrong(ops.q_which, "inputs", "scatter_reduce", "reduce_scatter_v", "gather_scatter")
valid(ops.q_which, "form", "ReduceScatter", "Reduce-Scatter", "reduce scatter", "dist.reduce_scatter",
      "torch.distributed.reduce_scatter_tensor", " REDUCE_SCATTER ", "reduce_scatter()")

# -- 02: the ring ---------------------------------------------------------------------------------------------
wrong(ring.q_ring_bytes, "inputs", lambda nbytes, ranks: 1.5 * nbytes,
      lambda nbytes, ranks: 2 * math.log2(ranks) / ranks * nbytes,
      lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes if ranks < 16 else 2 * nbytes,
      lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes if nbytes < 1e9 else nbytes)
wrong(ring.q_ring_bytes, "threshold", lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes + 1,
      lambda nbytes, ranks: 2 * (ranks - 1) / ranks * nbytes * 1.001)
valid(ring.q_ring_bytes, "method", lambda nbytes, ranks: nbytes * 2 * (ranks - 1) / ranks,
      lambda nbytes, ranks: 2 * nbytes - 2 * nbytes / ranks,
      lambda nbytes, ranks: (ranks - 1) * 2 * (nbytes / ranks),
      lambda nbytes, ranks: np.float64(2 * (ranks - 1) * nbytes / ranks),
      lambda nbytes, ranks: int(2 * (ranks - 1) * nbytes) // ranks)

wrong(ring.q_send_chunk, "inputs", lambda rank, step, ranks: (rank - 1 - step) % 4,
      lambda rank, step, ranks: (rank - 1 - step) % ranks if ranks < 8 else rank % ranks,
      lambda rank, step, ranks: (rank - 1 - step) % ranks if ranks != 3 else (rank + step) % ranks,
      lambda rank, step, ranks: (rank + 1 + step) % ranks,
      lambda rank, step, ranks: (rank - 2 * step) % ranks)
valid(ring.q_send_chunk, "method", lambda rank, step, ranks: (rank + ranks - 1 - step) % ranks,
      lambda rank, step, ranks: (rank - step) % ranks,
      lambda rank, step, ranks: (rank - step + 5) % ranks,
      lambda rank, step, ranks: np.int64((rank - 1 - step) % ranks),
      lambda rank, step, ranks: float((rank - 1 - step) % ranks))


def _rs(n, chunk=lambda r, s, n: (r - 1 - s) % n, op="reduce", hop=1):
    return [[(r, (r + hop) % n, chunk(r, s, n), op) for r in range(n)] for s in range(n - 1)]


def _ag(n, chunk=lambda r, s, n: (r - s) % n, op="copy", hop=1):
    return [[(r, (r + hop) % n, chunk(r, s, n), op) for r in range(n)] for s in range(n - 1)]


wrong(ring.q_ring_schedule, "sent", lambda n: _rs(n) + _ag(n) + [_ag(n)[-1]],           # one step too many
      lambda n: _rs(n) + _ag(n) + [[(0, 1 % n, 0, "copy")]],
      lambda n: _rs(n) + [step + [(0, 1 % n, (0 - s) % n, "copy")] for s, step in enumerate(_ag(n))],
      lambda n: _rs(n, hop=-1) + _ag(n, hop=-1))
wrong(ring.q_ring_schedule, "inputs", lambda n: _rs(n) + _ag(n) if n <= 3 else _rs(n),
      lambda n: _rs(4) + _ag(4),
      lambda n: _ag(n) + _rs(n))
wrong(ring.q_ring_schedule, "threshold", lambda n: _rs(n)[:-1] + _ag(n), lambda n: _rs(n) + _ag(n)[:-1])
wrong(ring.q_ring_schedule, "sent",
      lambda n: [step + [(0, 1 % n, (0 - 1 - s) % n, "reduce")] for s, step in enumerate(_rs(n))] + _ag(n),
      lambda n: _rs(n) + [[(r, (r + 1) % n, (r - s) % n, "reduce" if r == 0 else "copy") for r in range(n)]
                          for s in range(n - 1)],
      lambda n: [[(r, (r + 1) % n, c, op_) for r, _, c, op_ in step] for step in _rs(n) + _ag(n)][::-1])
valid(ring.q_ring_schedule, "method",
      lambda n: _rs(n, chunk=lambda r, s, n: (r - s) % n) + _ag(n, chunk=lambda r, s, n: (r + 1 - s) % n),
      lambda n: [tuple(step) for step in _rs(n) + _ag(n)],
      lambda n: [[list(t) for t in step] for step in _rs(n) + _ag(n)])

wrong(ring.q_busbw, "feedback", [(64 << 20) / 1000.0 / 1e3], says="algbw")
wrong(ring.q_busbw, "feedback", (64 << 20) / 1000.0 / 1e3 * 2 * 3 / 4, says="not within 1%")     # 4 ranks' factor

# -- 03: trees ---------------------------------------------------------------------------------------------
wrong(tr.q_binomial_rounds, "inputs", lambda n: int(math.log2(n)), lambda n: n.bit_length(),
      lambda n: math.ceil(math.log2(n + 1)), lambda n: (n - 1) // 2, lambda n: math.floor(math.log2(n)) + 1,
      lambda n: {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}.get(n, n // 2))
wrong(tr.q_binomial_rounds, "threshold", lambda n: (n - 1).bit_length() if n < 1000 else 11,
      lambda n: (n - 1).bit_length() if n != 17 else 4, lambda n: (n - 1).bit_length() + (n == 1))
valid(tr.q_binomial_rounds, "method", lambda n: math.ceil(math.log2(n)) if n > 1 else 0,
      lambda n: int(np.ceil(np.log2(n))) if n > 1 else 0,
      lambda n: next(k for k in range(64) if 2 ** k >= n), lambda n: float((n - 1).bit_length()))


def _parent_loop(rank, n):
    if rank == 0:
        return -1
    low = rank & -rank
    up = (rank ^ low) | (low << 1)
    return up if up < n else rank ^ low


wrong(tr.q_tree_parent, "inputs", lambda rank, n: -1 if rank == 0 else rank // 2,
      lambda rank, n: -1 if rank == 0 else rank ^ (rank & -rank),
      lambda rank, n: -1 if rank == 0 else (rank ^ (rank & -rank)) | ((rank & -rank) << 1) if n == 8 else 0,
      lambda rank, n: -1 if rank == 0 else max(0, rank - 1))
valid(tr.q_tree_parent, "method", _parent_loop, lambda rank, n: np.int64(_parent_loop(rank, n)))
wrong(tr.q_double_tree_interior, "feedback", [4], says="how many of them are the same ranks")
wrong(tr.q_tree_vs_ring, "feedback", "64 KiB", "262144", says="no quotes")

# -- 04: measuring ---------------------------------------------------------------------------------------------
wrong(me.q_size, "inputs", lambda op, count, nranks, itemsize: count * itemsize * (nranks if op != "broadcast" else 1),
      lambda op, count, nranks, itemsize: count * itemsize * (nranks if op.startswith("all") else 1),
      lambda op, count, nranks, itemsize: count * itemsize * (nranks if "gather" in op else 1),
      lambda op, count, nranks, itemsize: count * 4 * (nranks if op in me.CHUNKED else 1),
      lambda op, count, nranks, itemsize: count * itemsize * (4 if op in me.CHUNKED else 1),
      lambda op, count, nranks, itemsize: count * itemsize * (nranks if op in ("all_gather", "all_to_all") else 1))
wrong(me.q_size, "part", lambda op, count, nranks, itemsize: (me.nccl_tests_size(op, count, nranks, itemsize), "bytes"),
      lambda op, count, nranks, itemsize: [me.nccl_tests_size(op, count, nranks, itemsize)] * 2,
      lambda op, count, nranks, itemsize: str(me.nccl_tests_size(op, count, nranks, itemsize)))
valid(me.q_size, "method", lambda op, count, nranks, itemsize: count * itemsize * {"all_gather": nranks,
                                                                                 "reduce_scatter": nranks,
                                                                                 "all_to_all": nranks}.get(op, 1),
      lambda op, count, nranks, itemsize: float(count * itemsize * (nranks if op in me.CHUNKED else 1)),
      lambda op, count, nranks, itemsize: np.int64(count) * itemsize * (nranks if op in me.CHUNKED else 1),
      lambda op, count, nranks, itemsize: max(count * itemsize, count * itemsize * nranks * (op in me.CHUNKED)))
wrong(me.q_algbw, "feedback", 370 / (2 * 15 / 16), says="n = 16")
wrong(me.q_algbw, "feedback", 370 / 1.75 * 1e9 / 2 ** 30, says="GiB/s")
valid(me.q_algbw, "form", 211, 211.4, 211.43)
_GATE = me._example_gate()
_REGRESSED = _GATE.loc[_GATE.status == "regression", "size"]
wrong(me.q_regressions, "part", [4 << 20, 64 << 20, 1 << 20], [4 << 20], [4 << 20, 64 << 20, 999],
      [4 << 20, 16 << 20, 64 << 20], _GATE["size"], [64 << 20])
wrong(me.q_regressions, "feedback", ["4194304", "67108864"], "4194304, 67108864", says="whole numbers of bytes")
wrong(me.q_regressions, "feedback", [4.0, 64.0], says="not a size in this table")
valid(me.q_regressions, "form", _REGRESSED, _REGRESSED.to_numpy(), pd.Index(_REGRESSED), set(_REGRESSED),
      tuple(_REGRESSED), [64 << 20, 4 << 20], [4 << 20, 4 << 20, 64 << 20], [4194304.0, 67108864.0],
      _REGRESSED.unique(), _REGRESSED.tolist(), frozenset(_REGRESSED))

# -- 05: bytes per DDP step (the live questions are in LIVE_*) ------------------------------------------------
_DDP = 2 * 3 / 4 * dp.DEEP_GRAD_BYTES
wrong(dp.q_ddp_bytes, "threshold", _DDP * 1.002, _DDP * 0.998, _DDP + 1000)
wrong(dp.q_ddp_bytes, "wrapper", [_DDP, _DDP], torch.tensor([_DDP, 0.0]), np.array([[_DDP, 1.0]]))
wrong(dp.q_ddp_bytes, "feedback", 2 * 2 / 3 * dp.DEEP_GRAD_BYTES, says="not within 0.1%")
valid(dp.q_ddp_bytes, "form", int(_DDP), [_DDP], torch.tensor([_DDP]), np.float32(_DDP), _DDP * 1.0004)

# -- 06: sharding (the live questions are in LIVE_*) ----------------------------------------------------------


def _my_shard(flat, rank, n):                      # right; the wrong ones below change what it is given
    k = -(-flat.numel() // n)
    return torch.cat([flat, flat.new_zeros(k * n - flat.numel())])[rank * k:(rank + 1) * k]


def _shard_from_indices(flat, rank, n):            # builds the shard from its positions, not from the tensor
    k = -(-flat.numel() // n)
    idx = torch.arange(rank * k, (rank + 1) * k, dtype=flat.dtype) + 1
    return torch.where(idx <= flat.numel(), idx, torch.zeros_like(idx))


def _shard_sorted(flat, rank, n):
    return _my_shard(flat.sort().values, rank, n)


def _shard_reversed(flat, rank, n):
    return _my_shard(flat.flip(0), rank, n)


def _shard_pad_mean(flat, rank, n):
    k = -(-flat.numel() // n)
    padded = torch.cat([flat, flat.mean().repeat(k * n - flat.numel())])
    return padded[rank * k:(rank + 1) * k]


def _shard_pad_wrap(flat, rank, n):
    k = -(-flat.numel() // n)
    padded = torch.cat([flat, flat[:k * n - flat.numel()]])
    return padded[rank * k:(rank + 1) * k]


def _shard_abs(flat, rank, n):                     # right only for positive values
    return _my_shard(flat.abs(), rank, n)


def _shard_float32(flat, rank, n):
    return _my_shard(flat.float().half().double(), rank, n)


wrong(sh.q_padding, "inputs", _shard_from_indices, _shard_sorted, _shard_reversed, _shard_abs, _shard_float32)
wrong(sh.q_padding, "threshold", _shard_pad_mean, _shard_pad_wrap,
      lambda flat, rank, n: _my_shard(torch.cat([flat, flat.new_zeros(n)]), rank, n))


def _shard_pad_fn(flat, rank, n):
    k = -(-flat.numel() // n)
    return torch.nn.functional.pad(flat, (0, k * n - flat.numel()))[rank * k:(rank + 1) * k]


def _shard_split(flat, rank, n):
    k = math.ceil(flat.numel() / n)
    return list(torch.cat([flat, torch.zeros(k * n - flat.numel(), dtype=flat.dtype)]).split(k))[rank]


valid(sh.q_padding, "method", _shard_pad_fn, _shard_split,
      lambda flat, rank, n: _shard_pad_fn(flat, rank, n).numpy(),
      lambda flat, rank, n: _shard_split(flat, rank, n).tolist())
# the lab's own shard_of, which the notebook shows, wrapped: not the learner's code (a check asks for their own)
wrong(sh.q_padding, "wrapper", lambda flat, rank, n: sh.shard_of(flat, rank, n).numpy(),
      lambda flat, rank, n: sh.shard_of(flat, rank, n).tolist(), says="you wrote yourself")
wrong(sh.q_zero3_volume, "feedback", sh.questions._zero3_gb(7e9, 2, 64) * 1.006, says="within 0.5%")

# -- 07: scaling out -------------------------------------------------------------------------------------------
wrong(sc.q_small_message, "feedback", "Ring", "FLAT RING", says="not the fastest")
wrong(sc.q_small_message, "feedback", "tree ring", "binomial", "double", "nvls", says="is not one of")
wrong(sc.q_small_message, "feedback", 2, says="answer with text")
valid(sc.q_small_message, "form", "tree", "Double Tree", "double-binary-tree", "DOUBLE_TREE", "double binary tree.",
      "'double_tree'")
valid(sc.q_hierarchical_bytes, "form", 2.013e8, 2.0133e8, 201326592)
wrong(sc.q_hierarchical_bytes, "threshold", 2.0e8, 2.02e8)
wrong(sc.q_nic_gbytes, "feedback", torch.tensor([400 * 0.8]), says="gigabits")

# -- 08: inside NCCL -------------------------------------------------------------------------------------------
_T = {(1, 0): "P2P", (1, 3): "NET", (0, 2): "NET"}
wrong(nc.q_transports, "part", {**_T, (3, 2): "NET"}, {**_T, (3, 1): "P2P"}, {**_T, (0, 1): "P2P"},
      {**_T, (2, 0): "SHM"}, {**_T, (3, 2): "SHM"})
wrong(nc.q_transports, "wrapper", OrderedDict([((1, 0), "P2P"), ((1, 3), "P2P"), ((0, 2), "NET")]),
      [((1, 0), "SHM"), ((1, 3), "NET"), ((0, 2), "NET")], {"1->0": "P2P", "1->3": "SHM", "0->2": "NET"})
valid(nc.q_transports, "form", {k: v.lower() for k, v in _T.items()}, list(_T.items()),
      {"1->0": "P2P", "1 -> 3": "NET", "(0, 2)": "NET"}, {(1, 0): "P2P/CUMEM", (1, 3): "NET/IB", (0, 2): "net"},
      {**_T, (3, 2): "P2P"}, {**_T, (3, 1): "NET"}, OrderedDict(_T))
wrong(nc.q_p2p_disable, "part", {(1, 0): "SHM", (1, 3): "NET", (3, 2): "P2P"},
      {(1, 0): "SHM", (1, 3): "NET", (0, 2): "SHM"}, {(1, 0): "SHM", (1, 3): "NET", (3, 1): "SHM"},
      {(1, 0): "SHM", (1, 3): "NET", (2, 3): "SHM"})
wrong(nc.q_p2p_disable, "feedback", {(1, 0): "P2P", (1, 3): "NET"}, says="cannot stay on P2P")
wrong(nc.q_p2p_disable, "feedback", {(1, 0): "NET", (1, 3): "NET"}, says="network only when")
valid(nc.q_p2p_disable, "form", {(1, 0): "shm", (1, 3): "net"}, [((1, 0), "SHM"), ((1, 3), "NET")],
      {(1, 0): "SHM", (1, 3): "NET", (3, 2): "SHM", (0, 2): "NET"})
wrong(nc.q_slowest_hop, "feedback", "from 12 to 4", (12, 4, 0), [[12, 4]], says="pair of rank numbers")
valid(nc.q_slowest_hop, "form", "12->4", "12 -> 4", [12, 4], (12.0, 4.0), "(12, 4)", (np.int64(12), np.int64(4)))
wrong(nc.q_payload, "part", (0.5, 0.9375, 1.0), (0.5,), (0.5, 0.9375, 0.5))
wrong(nc.q_payload, "threshold", (0.5, 0.9), (0.52, 0.9375), (0.5, 0.95))
valid(nc.q_payload, "form", [0.5, 0.9375], (1 / 2, 15 / 16), (0.5, 0.94), (np.float64(0.5), np.float32(0.9375)))
wrong(nc.q_channels, "wrapper", [8, 8], 8.5, [4])
valid(nc.q_channels, "form", 8.0, [8], np.int64(8), torch.tensor(8))
wrong(nc.q_small_channels, "threshold", 4, 6)
valid(nc.q_small_channels, "form", 2.0, [2], np.int32(2))
_PICKS = dict(nc.q_nccl_picks.correct_example)
wrong(nc.q_nccl_picks, "feedback", {c: "Ring/LL" for c in nc.PICK_CASES}, says="no fixed algorithm")
wrong(nc.q_nccl_picks, "inputs", {c: ("Ring/LL" if c[1] < 1 << 30 else "NVLS/Simple") for c in nc.PICK_CASES},
      {c: ("Tree/LL" if c[1] < 1 << 20 else "Ring/Simple") for c in nc.PICK_CASES},
      {c: "/".join(nc._pick(4, c[1])) for c in nc.PICK_CASES})
wrong(nc.q_nccl_picks, "part", {**_PICKS, (2, 8 << 10): "Tree/LL"}, {**_PICKS, (1, 1 << 30): "NVLS/Simple/extra"},
      {**_PICKS, (4, 1 << 30): "NVLSTree/LL"})
valid(nc.q_nccl_picks, "form", {c: v.lower().replace("/", " ") for c, v in _PICKS.items()},
      {c: tuple(v.split("/")) for c, v in _PICKS.items()}, list(_PICKS.items()),
      {c: v.upper() for c, v in _PICKS.items()})

# -- 09: the hang clinic (its default cases; run() points them at a live one) ------------------------------
wrong(hangs.q_case_1, "part", (3, "mismatched shapes", "rank 0 too"), (3,), ((3, 0), "mismatched shapes"))
wrong(hangs.q_case_1, "feedback", (3, "mismatched ops"), says="right rank, wrong cause")
wrong(hangs.q_case_2, "feedback", (None, "skipped collective"), says="something does hang")
wrong(hangs.q_case_3, "feedback", (3, "crashed"), says="slow, not stuck")
wrong(hangs.q_case_3, "part", (None, "straggler", 3), [None])
wrong(hangs.q_case_1, "inputs", (1, "mismatched shapes"), (2, "mismatched shapes"), (0, "mismatched ops"))
wrong(hangs.q_case_2, "inputs", (1, "skipped collective"), (3, "skipped collective"), (2, "wrong order"))
valid(hangs.q_case_1, "form", (3, "Mismatched-Shapes"), (3, "mismatched shape"), [3, "mismatched_shapes"],
      (np.int64(3), "MISMATCHED SHAPES"), (3.0, "mismatchedshapes"))
valid(hangs.q_case_2, "form", (2, "skipped collectives"), (2, "Skipped-Collective"))
valid(hangs.q_case_3, "form", (None, "Straggler"), [None, "stragglers"])

# -- 10: evidence under load -------------------------------------------------------------------------------------
wrong(ev.q_repeats, "threshold", 8, 12)
wrong(ev.q_repeats, "wrapper", [9], [10, 10], np.array([9.5]))
valid(ev.q_repeats, "form", 10.0, [10], np.int64(10), torch.tensor(10))
wrong(ev.q_outlier, "feedback", [float(np.mean(ev.OUTLIER_REPEATS_US))], says="mean")
wrong(ev.q_outlier, "feedback", float(np.mean(sorted(ev.OUTLIER_REPEATS_US)[:-2])), says="by hand")
valid(ev.q_outlier, "method", np.median(ev.OUTLIER_REPEATS_US),
      pd.Series(ev.OUTLIER_REPEATS_US).median())
_ROWS = ["regression", "pass", "inconclusive", "inconclusive"]
wrong(ev.q_interval, "part", _ROWS + ["pass"], {**dict(zip("ABCD", _ROWS)), "E": "pass"},
      dict(zip("ABC", _ROWS)))
wrong(ev.q_interval, "feedback", ["regression", "pass", "pass", "pass"], says="'not flagged' is not 'pass'")
wrong(ev.q_interval, "inputs", ["regression", "pass", "pass", "regression"][::-1], ["pass"] * 4,
      ["regression", "regression", "inconclusive", "inconclusive"])
valid(ev.q_interval, "form", dict(zip("ABCD", _ROWS)), list(zip("abcd", _ROWS)), [w.upper() for w in _ROWS],
      ("Regression", "within tolerance", "Inconclusive", "inconclusive"), dict(zip("DCBA", _ROWS[::-1])))
_LOAD = dict(ev.q_under_load.correct_example)
wrong(ev.q_under_load, "part", {**_LOAD, "1KiB_9ms": "met"}, {**_LOAD, "32KiB_10ms": "missed"})
wrong(ev.q_under_load, "inputs", {k: "missed" for k in _LOAD}, {k: "inconclusive" for k in _LOAD})
valid(ev.q_under_load, "form", {k: v.upper() for k, v in _LOAD.items()}, list(_LOAD.items()),
      {**_LOAD, "1KiB_5ms": "not met"}, {**_LOAD, "32KiB_10ms": "Measure more"})

# -- 11: the operating model ----------------------------------------------------------------------------------
_SIDES = dict(op.q_reliable.correct_example)
wrong(op.q_reliable, "part", {**_SIDES, "extra": "system"}, {**_SIDES, "cpu_to_gpu": "judgement and system"})
wrong(op.q_reliable, "inputs", {k: ("system" if i % 2 == 0 else "judgement") for i, k in enumerate(_SIDES)},
      {k: ("judgement" if v == "system" else "system") for k, v in _SIDES.items()})
valid(op.q_reliable, "form", {k: v.replace("judgement", "judgment") for k, v in _SIDES.items()},
      {k: v.upper() for k, v in _SIDES.items()}, list(_SIDES.items()),
      {k.replace("_", " "): v.capitalize() for k, v in _SIDES.items()})
_HARM = dict(op.q_exposure.correct_example)
wrong(op.q_exposure, "inputs", dict(zip(op.GAPS, "ABCD")), dict(zip(op.GAPS, "DCBA")),
      dict(zip(op.GAPS, "BADC")))
wrong(op.q_exposure, "part", {**_HARM, "open_port": "C"})
valid(op.q_exposure, "form", {k: v.lower() for k, v in _HARM.items()}, list(_HARM.items()),
      {k.upper(): v for k, v in _HARM.items()})
wrong(op.q_rules, "part", ["p99_latency", "rollback", "errors", "busbw"], ["p99_latency", "rollback", "errors", "nope"])
valid(op.q_rules, "form", ("errors", "rollback", "p99_latency"), {"p99_latency", "rollback", "errors"},
      frozenset({"p99_latency", "rollback", "errors"}))
valid(op.q_rules, "method", [k for k, r in op.CANDIDATE_RULES.items() if r.operable()])
wrong(op.q_incident, "part", ["B", "D", "F", "A"], ["B", "D", "F", "H"], ["B", "D", "F", "B", "C"])
wrong(op.q_incident, "threshold", ["D", "F"], ["B", "F"], ["F"])
wrong(op.q_incident, "inputs", ["A", "B", "C"], list("ABCDEF")[::2], list("ABCDEF")[1::2] + ["A"])
valid(op.q_incident, "form", ["b", "d", "f"], ("F", "B", "D"), {"B", "D", "F"}, ["B", "D", "F", "B"])


def _stage_skip_pilot(stage, verdict):
    return op._next_stage("10%" if stage == "pilot" else stage, verdict)


wrong(op.q_next_stage, "inputs", _stage_skip_pilot,
      lambda stage, verdict: "pilot" if verdict == "regression" and stage == "pilot" else op._next_stage(stage, verdict),
      lambda stage, verdict: op._next_stage(stage, verdict) if stage != "100%" else "100%",
      lambda stage, verdict: op.STAGES[(op.STAGES.index(stage) + 1) % 4] if verdict == "pass" else
      op._next_stage(stage, verdict))


def _stage_table(stage, verdict):
    table = {"regression": "off", "inconclusive": stage}
    order = ["pilot", "10%", "50%", "100%", "100%"]
    return table.get(verdict, order[order.index(stage) + 1])


wrong(op.q_next_stage, "threshold", lambda stage, verdict: "off" if verdict != "pass" else op._next_stage(stage, verdict),
      lambda stage, verdict: op._next_stage(stage, "pass") if stage == "pilot" and verdict == "inconclusive" else
      op._next_stage(stage, verdict),
      lambda stage, verdict: "100%" if stage == "50%" and verdict == "inconclusive" else op._next_stage(stage, verdict))
wrong(op.q_next_stage, "part", lambda stage, verdict: (op._next_stage(stage, verdict), verdict),
      lambda stage, verdict: [op._next_stage(stage, verdict)], lambda stage, verdict: op._next_stage(stage, verdict) + " ")
valid(op.q_next_stage, "method", _stage_table,
      lambda stage, verdict: {"pass": op.STAGES[min(op.STAGES.index(stage) + 1, 3)], "inconclusive": stage,
                              "regression": "off"}[verdict])


def _choose_sorted(stacks):
    passing = sorted((s["step_ms"], k) for k, s in stacks.items() if s["gate"] == "pass")
    return passing[0][1] if passing else "running"


wrong(op.q_stack, "inputs", lambda stacks: min(stacks, key=lambda k: stacks[k]["step_ms"] if stacks[k]["gate"] else 1e9),
      lambda stacks: "patch" if "patch" in stacks else "running",
      lambda stacks: sorted(k for k, s in stacks.items() if s["gate"] == "pass")[0] if any(
          s["gate"] == "pass" for s in stacks.values()) else "running",
      lambda stacks: min((k for k, s in stacks.items() if s["gate"] != "regression"),
                         key=lambda k: stacks[k]["version"]))
wrong(op.q_stack, "part", lambda stacks: [op._choose_stack(stacks)], lambda stacks: (op._choose_stack(stacks), 0.0),
      lambda stacks: stacks[op._choose_stack(stacks)])
wrong(op.q_stack, "inputs", lambda stacks: min([k for k, s in stacks.items() if s["gate"] == "pass"] or ["running"],
                                              key=lambda k: stacks[k]["version"]),
      lambda stacks: max([k for k, s in stacks.items() if s["gate"] == "pass"] or ["running"],
                         key=lambda k: stacks[k]["step_ms"]))
valid(op.q_stack, "method", _choose_sorted,
      lambda stacks: min([k for k, s in stacks.items() if s["gate"] == "pass"] or ["running"],
                         key=lambda k: stacks[k]["step_ms"]))
wrong(op.q_workload, "feedback", [1 / op.q_workload.expected_value()], says="running / candidate")
wrong(op.q_workload, "feedback", op.q_workload.given["candidate"][25 << 20] / op.q_workload.given["running"][25 << 20],
      says="not within 1%")


# -- live: functions for the ranks ------------------------------------------------------------------------------
LIVE_WRONG: list[tuple] = []
LIVE_VALID: list[tuple] = []


def _ring(chunks, rank, n):
    """The reference ring's 2(n-1) steps over ``chunks`` (views of one buffer)."""
    import torch.distributed as dist

    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        incoming = torch.empty_like(chunks[(rank - 2 - s) % n])
        for req in (dist.isend(chunks[(rank - 1 - s) % n], right), dist.irecv(incoming, left)):
            req.wait()
        chunks[(rank - 2 - s) % n] += incoming
    for s in range(n - 1):
        for req in (dist.isend(chunks[(rank - s) % n], right), dist.irecv(chunks[(rank - 1 - s) % n], left)):
            req.wait()


def _ring_in(dtype):
    def ring_in(tensor):
        import torch.distributed as dist

        work = tensor.to(dtype)
        _ring(list(torch.tensor_split(work.view(-1), dist.get_world_size())), dist.get_rank(), dist.get_world_size())
        tensor.copy_(work)
        return tensor
    return ring_in


def _ring_star(tensor):                       # every rank sends its whole buffer to every other: right sum, no ring
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    theirs = [torch.empty_like(tensor) for _ in range(n)]
    reqs = [dist.isend(tensor, p) for p in range(n) if p != rank] + \
           [dist.irecv(theirs[p], p) for p in range(n) if p != rank]
    for r in reqs:
        r.wait()
    total = tensor.clone()
    for p in range(n):
        if p != rank:
            total += theirs[p]
    return total


def _ring_whole_buffers(tensor):              # neighbours only, but whole buffers n-1 times round
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    passing, total = tensor.clone(), tensor.clone()
    for _ in range(n - 1):
        incoming = torch.empty_like(passing)
        for req in (dist.isend(passing, (rank + 1) % n), dist.irecv(incoming, (rank - 1) % n)):
            req.wait()
        total += incoming
        passing = incoming
    return total


def _ring_one_step_more(tensor):              # the ring, then one chunk sent once more
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    _ring(chunks, rank, n)
    extra = torch.empty_like(chunks[(rank - 1) % n])
    for req in (dist.isend(chunks[rank], (rank + 1) % n), dist.irecv(extra, (rank - 1) % n)):
        req.wait()
    return tensor


def _ring_functional(tensor):
    import torch.distributed._functional_collectives as funcol
    import torch.distributed as dist

    return funcol.all_reduce(tensor, "sum", dist.group.WORLD)


def _ring_process_group(tensor):
    import torch.distributed as dist

    dist.distributed_c10d._get_default_group().allreduce([tensor]).wait()
    return tensor


def _ring_returns_copy(tensor):
    import torch.distributed as dist

    out = tensor.clone()
    _ring(list(torch.tensor_split(out.view(-1), dist.get_world_size())), dist.get_rank(), dist.get_world_size())
    return out


def _ring_batched(tensor):
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        incoming = torch.empty_like(chunks[(rank - 2 - s) % n])
        ops_ = [dist.P2POp(dist.isend, chunks[(rank - 1 - s) % n], right), dist.P2POp(dist.irecv, incoming, left)]
        for req in dist.batch_isend_irecv(ops_):
            req.wait()
        chunks[(rank - 2 - s) % n] += incoming
    for s in range(n - 1):
        ops_ = [dist.P2POp(dist.isend, chunks[(rank - s) % n], right),
                dist.P2POp(dist.irecv, chunks[(rank - 1 - s) % n], left)]
        for req in dist.batch_isend_irecv(ops_):
            req.wait()
    return tensor


def _ring_float64(tensor):                    # summed in float64: every element travels in twice the bytes
    import torch.distributed as dist

    work = tensor.double()
    _ring(list(torch.tensor_split(work.view(-1), dist.get_world_size())), dist.get_rank(), dist.get_world_size())
    tensor.copy_(work)


def _ring_adds_in_float64(tensor):            # sends float32, adds each received chunk in float64
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        mine = chunks[(rank - 2 - s) % n]
        incoming = torch.empty_like(mine)
        for req in (dist.isend(chunks[(rank - 1 - s) % n], right), dist.irecv(incoming, left)):
            req.wait()
        mine.copy_(mine.double() + incoming.double())
    for s in range(n - 1):
        for req in (dist.isend(chunks[(rank - s) % n], right), dist.irecv(chunks[(rank - 1 - s) % n], left)):
            req.wait()
    return tensor


def _ring_blocking_by_parity(tensor):         # blocking send/recv, even ranks send first
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    right, left = (rank + 1) % n, (rank - 1) % n

    def swap(out, into):
        if rank % 2 == 0:
            dist.send(out, right)
            dist.recv(into, left)
        else:
            dist.recv(into, left)
            dist.send(out, right)

    for s in range(n - 1):
        incoming = torch.empty_like(chunks[(rank - 2 - s) % n])
        swap(chunks[(rank - 1 - s) % n].clone(), incoming)
        chunks[(rank - 2 - s) % n] += incoming
    for s in range(n - 1):
        swap(chunks[(rank - s) % n].clone(), chunks[(rank - 1 - s) % n])
    return tensor


LIVE_WRONG += [(ring.q_ring_live, "inputs", _ring_in(torch.int32), "beyond float32 rounding"),
               (ring.q_ring_live, "inputs", _ring_in(torch.float16), "beyond float32 rounding"),
               (ring.q_ring_live, "sent", _ring_star, "not one of its ring neighbours"),
               (ring.q_ring_live, "sent", _ring_whole_buffers, "Yours sends more"),
               (ring.q_ring_live, "threshold", _ring_one_step_more, "Yours sends more"),
               (ring.q_ring_live, "threshold", _ring_float64, "8-byte elements for a buffer of 4-byte ones"),
               (ring.q_ring_live, "wrapper", _ring_functional, "functional collective"),
               (ring.q_ring_live, "wrapper", _ring_process_group, "called the collective all_reduce")]
LIVE_VALID += [(ring.q_ring_live, "method", f) for f in (_ring_returns_copy, _ring_batched, _ring_adds_in_float64,
                                                         _ring_blocking_by_parity)]


def _start_seeded(model):                     # every rank rebuilds the model from one seed: nothing sent
    model.load_state_dict(dp.start_model(0).state_dict())


def _start_masked_all_reduce(model):
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if dist.get_rank() != 0:
                t.zero_()
            dist.all_reduce(t)


def _start_all_gather(model):
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            every = [torch.empty_like(t) for _ in range(dist.get_world_size())]
            dist.all_gather(every, t)
            t.copy_(every[0])


# A learner's own code throughout: a check refuses the lab's reference functions (or calls of them) handed in,
# whatever they add, so each mutant below writes out what it sends.
def _my_broadcast(model):
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t, src=0)


def _start_twice(model):
    _my_broadcast(model)
    _my_broadcast(model)


def _start_first_weight_again(model):
    import torch.distributed as dist

    _my_broadcast(model)
    with torch.no_grad():
        dist.broadcast(next(model.parameters()), src=0)


def _start_into_data_clones(model):
    import torch.distributed as dist

    for t in [*model.parameters(), *model.buffers()]:
        dist.broadcast(t.data.clone(), src=0)


def _start_no_running_var(model):
    import torch.distributed as dist

    with torch.no_grad():
        for name, t in model.state_dict().items():
            if "running_var" not in name and "num_batches" not in name:
                dist.broadcast(t, src=0)


def _start_data(model):
    import torch.distributed as dist

    for t in [*model.parameters(), *model.buffers()]:
        dist.broadcast(t.data, src=0)


def _start_flat(model):                       # the floating-point state in one broadcast, the count in another
    import torch.distributed as dist

    with torch.no_grad():
        floats = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
        flat = torch.cat([t.reshape(-1) for t in floats])
        dist.broadcast(flat, src=0)
        offset = 0
        for t in floats:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
        for t in model.buffers():
            if not t.is_floating_point():
                dist.broadcast(t, src=0)


def _start_group_src(model):
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t, group=dist.group.WORLD, group_src=0)


LIVE_WRONG += [(dp.q_start, "sent", _start_seeded, "made anew or changed on every rank"),
               (dp.q_start, "sent", _start_masked_all_reduce, "no broadcast carried them"),
               (dp.q_start, "sent", _start_all_gather, "no broadcast carried them"),
               (dp.q_start, "threshold", _start_twice, "sent more than once"),
               (dp.q_start, "threshold", _start_first_weight_again, "sent more than once"),
               (dp.q_start, "wrapper", _start_into_data_clones, "did not write into the model's own tensors"),
               (dp.q_start, "part", _start_no_running_var, "1.running_var, 1.num_batches_tracked still differ")]
LIVE_VALID += [(dp.q_start, "method", f) for f in (_start_data, _start_flat, _start_group_src)]


def _accumulate_with(synced):
    """Gradient accumulation that lets DDP synchronise on the micro-batches ``synced(i, n)`` says."""
    def step(ddp, micro_batches):
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            with (contextlib.nullcontext() if synced(i, n) else ddp.no_sync()):
                (dp.loss_fn(ddp(x), y) / n).backward()
    return step


def _accumulate_then_extra(ddp, micro_batches):   # right, then one all-reduce more that changes nothing
    import torch.distributed as dist

    _accumulate_with(lambda i, n: i == n - 1)(ddp, micro_batches)
    g = next(ddp.parameters()).grad
    dist.all_reduce(g)
    g /= dist.get_world_size()


def _accumulate_flag_off(ddp, micro_batches):
    ddp.require_backward_grad_sync = False
    for x, y in micro_batches:
        (dp.loss_fn(ddp(x), y) / len(micro_batches)).backward()
    ddp.require_backward_grad_sync = True


def _accumulate_first_two(ddp, micro_batches):     # the notebook's 2 micro-batches, built in
    _accumulate_with(lambda i, n: i == n - 1)(ddp, micro_batches[:2])


def _accumulate_flag(ddp, micro_batches):
    last = len(micro_batches) - 1
    for i, (x, y) in enumerate(micro_batches):
        ddp.require_backward_grad_sync = i == last
        (dp.loss_fn(ddp(x), y) / len(micro_batches)).backward()
    ddp.require_backward_grad_sync = True


def _accumulate_exit_stack(ddp, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.ExitStack() as stack:
            if i < len(micro_batches) - 1:
                stack.enter_context(ddp.no_sync())
            loss = dp.loss_fn(ddp(x), y) * (1 / len(micro_batches))
            loss.backward()


LIVE_WRONG += [(dp.q_accumulate, "threshold", _accumulate_with(lambda i, n: i > 0), "after 3 of the 4 micro-batches"),
               (dp.q_accumulate, "threshold", _accumulate_with(lambda i, n: i >= n - 2), "synchronised"),
               (dp.q_accumulate, "threshold", _accumulate_then_extra, "all-reduces in a step"),
               (dp.q_accumulate, "wrapper", _accumulate_flag_off, "never synchronised"),
               (dp.q_accumulate, "inputs", _accumulate_first_two, "with 4 micro-batches")]
LIVE_VALID += [(dp.q_accumulate, "method", f) for f in (_accumulate_flag, _accumulate_exit_stack)]


def _launch(bucket):
    import torch.distributed as dist

    return dist.all_reduce(bucket, async_op=True)


def _finish_view_first(handle, bucket):
    import torch.distributed as dist

    bucket[:] /= dist.get_world_size()
    handle.wait()


def _finish_data_first(handle, bucket):
    import torch.distributed as dist

    bucket.data.div_(dist.get_world_size())
    handle.wait()


def _finish_out_first(handle, bucket):
    import torch.distributed as dist

    torch.div(bucket, dist.get_world_size(), out=bucket)
    handle.wait()


def _wait_for(work):
    work.wait()
    return work


def _launch_waits_in_a_helper(bucket):
    import torch.distributed as dist

    return _wait_for(dist.all_reduce(bucket, async_op=True))


def _launch_then_divides(bucket):
    import torch.distributed as dist

    work = dist.all_reduce(bucket, async_op=True)
    bucket /= dist.get_world_size()
    return work


def _finish_wait_only(handle, bucket):
    handle.wait()


def _finish_divide(handle, bucket):
    import torch.distributed as dist

    handle.wait()
    bucket /= dist.get_world_size()


def _launch_average(bucket):
    import torch.distributed as dist

    return dist.all_reduce(bucket, op=dist.ReduceOp.AVG, async_op=True)


def _launch_then_callback(bucket):
    import torch.distributed as dist

    n = dist.get_world_size()
    return dist.all_reduce(bucket, async_op=True).get_future().then(lambda fut: fut.value()[0].div_(n))


def _finish_multiply(handle, bucket):
    import torch.distributed as dist

    handle.wait()
    bucket.mul_(1 / dist.get_world_size())


def _finish_future(handle, bucket):
    import torch.distributed as dist

    handle.get_future().wait()
    bucket.div_(dist.get_world_size())


LIVE_WRONG += [(dp.q_overlap, "wrapper", (_launch, _finish_view_first), "changed in place before waiting"),
               (dp.q_overlap, "wrapper", (_launch, _finish_data_first), "changed in place before waiting"),
               (dp.q_overlap, "wrapper", (_launch, _finish_out_first), "changed in place before waiting"),
               (dp.q_overlap, "wrapper", (_launch_waits_in_a_helper, _finish_divide), "launch waited"),
               (dp.q_overlap, "threshold", (_launch_then_divides, _finish_wait_only), "changed in place before")]
LIVE_VALID += [(dp.q_overlap, "method", pair) for pair in ((_launch_average, _finish_wait_only),
                                                          (_launch_then_callback, _finish_wait_only),
                                                          (_launch, _finish_multiply), (_launch, _finish_future))]


def _row_under_no_grad(h_shard, w2_shard, b2):
    import torch.distributed as dist

    part = h_shard @ w2_shard.T
    with torch.no_grad():
        dist.all_reduce(part)
    return part + b2


def _row_through_data(h_shard, w2_shard, b2):
    import torch.distributed as dist

    part = h_shard @ w2_shard.T
    dist.all_reduce(part.data)
    return part + b2


def _row_through_detach(h_shard, w2_shard, b2):
    import torch.distributed as dist

    part = h_shard @ w2_shard.T
    dist.all_reduce(part.detach())
    return part + b2


@torch.no_grad()
def _reduce_quietly(t):
    import torch.distributed as dist

    dist.all_reduce(t)


def _row_in_a_no_grad_helper(h_shard, w2_shard, b2):
    part = h_shard @ w2_shard.T
    _reduce_quietly(part)
    return part + b2


class _G:
    """Megatron's g written out: all-reduce in forward (on a copy), identity in backward."""

    @staticmethod
    def forward(ctx, t):
        import torch.distributed as dist

        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad


def _row_own_function(h_shard, w2_shard, b2):
    g = type("G", (torch.autograd.Function,), {"forward": staticmethod(_G.forward),
                                                "backward": staticmethod(_G.backward)})
    return g.apply(h_shard @ w2_shard.T) + b2


LIVE_WRONG += [(sh.q_row_parallel, "wrapper", f, "outside any autograd Function")
               for f in (_row_under_no_grad, _row_through_data, _row_through_detach, _row_in_a_no_grad_helper)]
LIVE_VALID += [(sh.q_row_parallel, "method", _row_own_function)]


class _Zero3GathersThrice:
    """A ZeRO-3 layer that gathers twice in backward (keeping nothing): a third gather a step."""

    forward = staticmethod(sh.Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        k = math.prod(ctx.w_shape) + ctx.w_shape[0]
        sh.gather_full(shard, (k,))
        w, _ = sh.unflatten(sh.gather_full(shard, (k,)), ctx.w_shape)
        return grad_y @ w, sh.reduce_scatter_mean(sh.flatten(grad_y.T @ x, grad_y.sum(0))), None


class _Zero3ScattersTwice:
    """A ZeRO-3 layer that reduce-scatters its gradient twice and keeps the second."""

    forward = staticmethod(sh.Zero3LinearFn.forward)

    @staticmethod
    def backward(ctx, grad_y):
        x, shard = ctx.saved_tensors
        k = math.prod(ctx.w_shape) + ctx.w_shape[0]
        w, _ = sh.unflatten(sh.gather_full(shard, (k,)), ctx.w_shape)
        flat = sh.flatten(grad_y.T @ x, grad_y.sum(0))
        sh.reduce_scatter_mean(flat)
        return grad_y @ w, sh.reduce_scatter_mean(flat), None


def _zero_step_gathers_twice(params, shards, opt):
    for p, s in zip(params, shards):
        s.grad = sh.reduce_scatter_mean(p.grad)
    opt.step()
    with torch.no_grad():
        for p, s in zip(params, shards):
            sh.gather_full(s, p.shape)
            p.copy_(sh.gather_full(s, p.shape))


def _average_one_twice(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    g = next(model.parameters()).grad
    dist.all_reduce(g)
    g /= dist.get_world_size()


LIVE_WRONG += [(sh.q_zero3_layer, "threshold", _Zero3GathersThrice, "traffic stage 3 pays for nothing"),
               (sh.q_zero3_layer, "threshold", _Zero3ScattersTwice, "reduce-scatters moving"),
               (sh.q_sharded_step, "threshold", _zero_step_gathers_twice, "anything more is traffic"),
               (dp.q_average, "threshold", _average_one_twice, "all-reduced more than once")]
