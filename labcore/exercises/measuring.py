"""Exercises for notebook 04, measuring collectives like nccl-tests.

- :data:`q_size`: nccl-tests' "size" column for each collective (which buffer it counts);
- :data:`q_algbw`: from a published busbw back to the algbw one GPU sees;
- :data:`q_regressions`: read the evidence gate's verdict from a comparison table.

Example
-------
>>> q_algbw.check(370 * 8 / 14)
algbw from busbw: correct!
"""
from __future__ import annotations

from labcore.exercises.core import Exercise, FunctionExercise, Incorrect, NotAttempted, ValueExercise
from labcore.exercises.core import _is_blank

__all__ = ["q_size", "q_algbw", "q_regressions", "nccl_tests_size"]


def nccl_tests_size(op: str, count: int, nranks: int, itemsize: int) -> int:
    """nccl-tests' "size" (bytes) for ``op`` called with ``count`` elements per rank.

    It is the larger of one rank's send and receive buffers, so that algbw =
    size / time for every collective (nccl-tests doc/PERFORMANCE.md).

    >>> nccl_tests_size("all_gather", 1024, 4, 4)
    16384
    """
    from labcore.live.bench.ops import OPS, canonical

    spec = OPS[canonical(op)]
    if not spec.chunked:
        return count * itemsize
    return count * nranks * itemsize


q_size = FunctionExercise(
    "nccl-tests size",
    "Write size(op, count, nranks, itemsize): the bytes nccl-tests prints in its 'size' column "
    "when each rank passes `count` elements to `op` (all_reduce, all_gather, reduce_scatter, "
    "broadcast, all_to_all).",
    reference=nccl_tests_size,
    cases=[("all_reduce", 256, 4, 4), ("broadcast", 100, 8, 2), ("all_gather", 256, 4, 4),
           ("reduce_scatter", 256, 4, 4), ("all_to_all", 10, 3, 8), ("all_gather", 1, 8, 1)],
    hints=["all_reduce and broadcast: every rank's buffer holds `count` elements.",
           "all_gather: `count` is what each rank contributes; the output holds one such chunk per "
           "rank. reduce_scatter is the mirror image (the input holds n chunks).",
           "size = count * itemsize, times nranks for all_gather, reduce_scatter and all_to_all."],
    solution="def size(op, count, nranks, itemsize):\n"
             "    per_rank_chunks = nranks if op in ('all_gather', 'reduce_scatter', 'all_to_all') else 1\n"
             "    return count * per_rank_chunks * itemsize",
    wrong_examples=[lambda op, count, nranks, itemsize: count * itemsize,
                    lambda op, count, nranks, itemsize: count * nranks * itemsize],
)

q_algbw = ValueExercise(
    "algbw from busbw",
    "NVIDIA quotes about {busbw} GB/s of nccl-tests all_reduce busbw on {n} H100 GPUs "
    "(GTC24 S62129). What algbw (GB/s) does that mean, i.e. bytes of the buffer per second?",
    expected=lambda busbw, n: busbw / (2 * (n - 1) / n),
    given=dict(busbw=370.0, n=8), unit="GB/s",
    mistakes=[(lambda busbw, n: busbw, "That is the busbw itself: all_reduce's busbw is algbw x 2(n-1)/n."),
              (lambda busbw, n: busbw * 2 * (n - 1) / n,
               "You multiplied by 2(n-1)/n; go the other way: algbw = busbw / (2(n-1)/n)."),
              (lambda busbw, n: busbw / (n - 1) * n, "That factor, n/(n-1), belongs to all_gather; "
               "all_reduce moves every byte twice (reduce-scatter, then all-gather).")],
    hints=["busbw = algbw x a factor that depends only on the collective and n.",
           "For all_reduce the factor is 2(n-1)/n = 1.75 on 8 ranks."],
    solution="algbw = busbw / (2 * (n - 1) / n) = 370 / 1.75 = 211 GB/s: a 1 GB all_reduce "
             "takes about 4.7 ms.",
    correct_example=370 / 1.75, wrong_examples=[370.0, 370 * 1.75],
)


def _example_gate():
    import pandas as pd

    sizes = [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    base = [5000.0, 12000.0, 40000.0, 150000.0]
    now = [5200.0, 19000.0, 41000.0, 260000.0]
    gate = pd.DataFrame(dict(op="all_reduce", size=sizes, placement="in-place",
                             baseline_us=base, current_us=now))
    gate["ratio"] = gate["baseline_us"] / gate["current_us"]
    gate["status"] = ["pass" if r >= 0.8 else "regression" for r in gate["ratio"]]
    return gate


class _GateExercise(Exercise):
    """Which sizes of one comparison table regressed: the example table until :meth:`about` names another."""

    def __init__(self, *args, result, **kwargs):
        super().__init__(*args, **kwargs)
        self.result = result

    def about(self, result) -> "_GateExercise":
        """Ask about ``result`` (the output of ``lc.bench.compare``); returns self."""
        self.result = result
        return self

    def _check(self, answer, **context):
        if _is_blank(answer):
            raise NotAttempted()
        table = self.result
        want = sorted(int(s) for s in table.loc[table["status"] == "regression", "size"].unique())
        try:
            got = sorted(int(s) for s in answer)
        except (TypeError, ValueError):
            raise Incorrect(f"answer with a list of sizes in bytes, e.g. [1048576, 4194304]; got {answer!r}.")
        if got == want:
            return None
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        parts = []
        if extra:
            parts.append(f"{extra} passed the gate (ratio >= 1 - tolerance)")
        if missing:
            parts.append(f"{len(missing)} regressed size(s) are missing")
        raise Incorrect("; ".join(parts) + ".")


q_regressions = _GateExercise(
    "Which sizes regressed?",
    "List the sizes (bytes) that the evidence gate's table marks as a regression. In the "
    "notebook, q_regressions.about(gate) points the question at your own comparison `gate`.",
    hints=["A row regresses when ratio = baseline time / current time < 1 - tolerance.",
           "gate.loc[gate.status == 'regression', 'size']"],
    solution="sorted(gate.loc[gate.status == 'regression', 'size'].unique().tolist())",
    correct_example=[4 << 20, 64 << 20], wrong_examples=[[], [1 << 20, 4 << 20, 16 << 20, 64 << 20]],
    result=_example_gate(),
)
