"""Exercises for notebook 04, measuring collectives like nccl-tests.

- :data:`q_size`: nccl-tests' "size" column from its "count" column, for each collective;
- :data:`q_algbw`: from a published busbw back to the algbw one GPU sees;
- :data:`q_regressions`: read the evidence gate's verdict from a comparison table.

Feedback says what is wrong (which buffer, which factor, which sizes are not in the
table) without giving the number away.

Example
-------
>>> q_algbw.check(370 * 8 / 14)
algbw from busbw: correct!
"""
from __future__ import annotations

import math

from labcore.collectives import describe
from labcore.exercises.answers import as_items, as_number, as_one_number, as_text, equal, holds_text, safe_repr
from labcore.exercises.answers import as_whole, safe_str, type_name
from labcore.exercises.core import Exercise, Incorrect, NotAttempted, _is_blank
from labcore.exercises.timing import learner_code
from labcore.exercises.values import StatedValue

__all__ = ["q_size", "q_algbw", "q_regressions", "nccl_tests_size"]

CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")
SIZE_CASES = [("all_reduce", 256, 4, 4), ("broadcast", 100, 8, 2), ("all_gather", 256, 4, 4),
              ("reduce_scatter", 256, 4, 4), ("all_to_all", 10, 3, 8), ("all_gather", 1, 8, 1),
              ("reduce_scatter", 16, 2, 2)]


def nccl_tests_size(op: str, count: int, nranks: int, itemsize: int) -> int:
    """nccl-tests' "size" (bytes) for ``op`` when its "count" column shows ``count``.

    ``count`` is what the NCCL call is given: all of one rank's buffer for all_reduce and
    broadcast, and one rank's share for all_gather (what it sends), reduce_scatter (what it
    receives) and all_to_all (what it sends to each peer). ``size`` is the larger of one
    rank's send and receive buffers, so that algbw = size / time (nccl-tests doc/PERFORMANCE.md).

    >>> nccl_tests_size("all_gather", 1024, 4, 4)
    16384
    """
    from labcore.bench.ops import op_name

    return count * itemsize * (nranks if describe(op_name(op)).chunked else 1)


class _SizeExercise(Exercise):
    """The learner's size(op, count, nranks, itemsize), run on cases, with feedback by mistake."""

    def _check(self, answer, **context):
        if not callable(answer):
            raise Incorrect(f"expected a function size(op, count, nranks, itemsize), got {type_name(answer)}.")
        for op, count, n, item in SIZE_CASES:
            case = f"op={op!r}, count={count}, nranks={n}, itemsize={item}"
            try:
                got = learner_code(answer, op, count, n, item)
            except NotImplementedError:
                raise NotAttempted()
            except Exception as err:
                raise Incorrect(f"for {case} your function raised {type_name(err)}: {safe_str(err)}")
            if _is_blank(got):
                raise NotAttempted()
            want = nccl_tests_size(op, count, n, item)
            if equal(got, want):
                continue
            raise Incorrect(f"for {case} {_size_mistake(op, count, n, item, got)}")
        return f"({len(SIZE_CASES)} cases passed)"


def _size_mistake(op, count, n, item, answer) -> str:
    """What a wrong size shows, without the right number."""
    got = as_number(answer)
    if got is None or not math.isfinite(got):
        return f"your function returned {safe_repr(answer)}: return a number of bytes."
    if op in CHUNKED and got == count * item:
        side = {"all_gather": "the gathered output", "reduce_scatter": "the input to be reduced",
                "all_to_all": "the buffer with one share per peer"}[op]
        return (f"your size is one rank's share; nccl-tests counts the larger buffer, {side}, "
                f"which holds a share from every rank.")
    if op not in CHUNKED and got == count * item * n:
        return "your size grows with the rank count, but every rank's buffer holds just `count` elements here."
    if got in (count, count * n):
        return "your size counts elements; nccl-tests' size is in bytes."
    return "your size is not the larger of one rank's send and receive buffers, in bytes."


q_size = _SizeExercise(
    "nccl-tests size",
    "Write size(op, count, nranks, itemsize): the bytes nccl-tests prints in its 'size' column "
    "when its 'count' column shows `count`. `count` is what the NCCL call is given: the whole "
    "buffer for all_reduce and broadcast; one rank's share for all_gather (what it sends), "
    "reduce_scatter (what it receives) and all_to_all (what it sends to each peer).",
    hints=["size is the larger of one rank's send and receive buffers, in bytes.",
           "all_gather: the output holds one `count` share per rank. reduce_scatter is its mirror "
           "image: the input holds them. all_to_all: both buffers do.",
           "size = count * itemsize, times nranks for all_gather, reduce_scatter and all_to_all."],
    solution="def size(op, count, nranks, itemsize):\n"
             "    shares = nranks if op in ('all_gather', 'reduce_scatter', 'all_to_all') else 1\n"
             "    return count * shares * itemsize",
    correct_example=nccl_tests_size,
    wrong_examples=[lambda op, count, nranks, itemsize: count * itemsize,
                    lambda op, count, nranks, itemsize: count * nranks * itemsize,
                    lambda op, count, nranks, itemsize: count * (nranks if op == "all_gather" else 1) * itemsize],
)


class _AlgbwExercise(StatedValue):
    """algbw from busbw, with feedback that says which way the answer is off, never by how much."""

    def _check(self, answer, **context):
        if as_text(answer) is not None or issubclass(type(answer), bytes):
            raise Incorrect(f"answer with a number of GB/s, not the text {safe_repr(answer)}.")
        value = as_one_number(answer)
        if value is None:
            raise Incorrect(f"answer with a number of GB/s, not {type_name(answer)} {safe_repr(answer)}.")
        value = float(value)
        if not math.isfinite(value) or value <= 0:
            raise Incorrect(f"{safe_repr(answer)} cannot be a bandwidth: answer with a positive number of GB/s.")
        try:
            return super()._check(value, **context)
        except Incorrect as wrong:
            if "the right value" not in str(wrong):
                raise
        busbw, n = self.given["busbw"], self.given["n"]
        if value > busbw:
            raise Incorrect("algbw cannot exceed busbw here: all_reduce's factor 2(n-1)/n is above 1 "
                            f"for n = {n}, and busbw = algbw x that factor.")
        if value < busbw / 2:
            raise Incorrect("too small: all_reduce's factor 2(n-1)/n stays below 2, so algbw is more "
                            "than half of busbw.")
        raise Incorrect(f"between busbw / 2 and busbw, but not the right value for n = {n}: work out "
                        "all_reduce's factor for this n again.")


q_algbw = _AlgbwExercise(
    "algbw from busbw",
    "NVIDIA quotes about {busbw} GB/s of nccl-tests all_reduce busbw on {n} H100 GPUs "
    "(GTC24 S62129). What algbw (GB/s) does that mean, i.e. bytes of the buffer per second?",
    expected=lambda busbw, n: busbw / (2 * (n - 1) / n),
    given=dict(busbw=370.0, n=8), unit="GB/s",
    # mistakes are matched to 0.1%: the factor for 16 ranks and the GiB/s slip land 0.2% apart
    mistake_rtol=1e-3,
    mistakes=[(lambda busbw, n: busbw, "That is the busbw itself: all_reduce's busbw is algbw x 2(n-1)/n."),
              (lambda busbw, n: busbw * 2 * (n - 1) / n,
               "You applied all_reduce's factor the wrong way round: busbw is the larger of the two."),
              *[(lambda busbw, n, m=m: busbw / (2 * (m - 1) / m),
                 f"That divides by all_reduce's factor 2(n-1)/n for n = {m} ranks; the quote is for the question's "
                 "n, so work the factor out for that n.") for m in (2, 4, 16, 32, 64)],
              (lambda busbw, n: busbw / (2 * (n - 1) / n) * 1e9 / 2 ** 30,
               "That is in GiB/s (2^30 bytes a second); the question asks GB/s (10^9 bytes)."),
              (lambda busbw, n: busbw / (n - 1) * n, "That factor, n/(n-1), belongs to all_gather; "
               "all_reduce moves every byte twice (reduce-scatter, then all-gather).")],
    hints=["busbw = algbw x a factor that depends only on the collective and n.",
           "For all_reduce the factor is 2(n-1)/n = 1.75 on 8 ranks."],
    solution="algbw = busbw / (2 * (n - 1) / n) = 370 / 1.75 = 211 GB/s: a 1 GB all_reduce "
             "takes about 4.7 ms.",
    correct_example=370 / 1.75, wrong_examples=[370.0, 370 * 1.75, 100.0, 300.0, float("nan"), "fast"],
)


def _example_gate():
    """A gate table as ``lc.evidence.compare`` returns it, for the question before the notebook's own."""
    import pandas as pd

    sizes = [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    gate = pd.DataFrame(dict(op="all_reduce", size=sizes, placement="in-place",
                             baseline_us=[5000.0, 12000.0, 40000.0, 150000.0],
                             current_us=[5200.0, 25000.0, 47000.0, 310000.0],
                             status=["pass", "regression", "inconclusive", "regression"]))
    gate["slowdown"] = gate["current_us"] / gate["baseline_us"]
    return gate


class _GateExercise(Exercise):
    """Which sizes of one comparison table regressed: the example table until :meth:`about` names another."""

    def __init__(self, *args, result, **kwargs):
        super().__init__(*args, **kwargs)
        self.result = result

    def about(self, result) -> "_GateExercise":
        """Ask about ``result`` (the output of ``lc.evidence.compare``); returns self."""
        self.result = result
        return self

    def _check(self, answer, **context):
        if _is_blank(answer):
            raise NotAttempted()
        table = self.result
        items = as_items(answer)
        if items is None and issubclass(type(answer), (set, frozenset)):       # sizes in a set are sizes too
            items = list((set if issubclass(type(answer), set) else frozenset).__iter__(answer))
        if items is None:
            raise Incorrect(f"answer with the sizes as whole numbers of bytes, e.g. [1048576, 4194304] (a list, a set, "
                            f"or the table's column of them); got {safe_repr(answer)}.")
        sizes = [as_whole(s) for s in items]
        if None in sizes or holds_text(items):
            raise Incorrect(f"answer with a list of sizes as whole numbers of bytes, e.g. [1048576, 4194304]; "
                            f"got {safe_repr(answer)}.")
        got = sorted(set(sizes))
        status = table.groupby("size")["status"].agg(set)
        want = sorted(int(s) for s, st in status.items() if "regression" in st)
        if got == want:
            return None
        parts = []
        absent = [s for s in got if s not in status.index]
        if absent:
            parts.append(f"{absent} {'is' if len(absent) == 1 else 'are'} not a size in this table "
                         "(sizes are in bytes, as in its size column)")
        for label in ("pass", "inconclusive"):
            named = [s for s in got if s in status.index and s not in want and label in status[s]]
            if named:
                parts.append(f"{named} {'was' if len(named) == 1 else 'were'} marked {label}, not regression")
        missing = len(set(want) - set(got))
        if missing:
            parts.append(f"{missing} regressed size(s) are missing")
        raise Incorrect("; ".join(parts) + ".")


q_regressions = _GateExercise(
    "Which sizes regressed?",
    "List the sizes (bytes) that the evidence gate's table marks as a regression. In the "
    "notebook, q_regressions.about(gate) points the question at your own comparison `gate`. Answer with the "
    "sizes as whole numbers of bytes, in any order: a list, a set, or the table's own column of them.",
    hints=["Look at the status column: regression, pass, or inconclusive (not enough evidence "
           "either way, which is not a regression).",
           "gate.loc[gate.status == 'regression', 'size']"],
    solution="sorted(gate.loc[gate.status == 'regression', 'size'].unique().tolist())",
    correct_example=[4 << 20, 64 << 20],
    wrong_examples=[[], [1 << 20, 4 << 20, 16 << 20, 64 << 20], [4, 64], [4 << 20, 16 << 20, 64 << 20], "4M"],
    result=_example_gate(),
)
