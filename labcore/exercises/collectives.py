"""Exercises for notebook 01: what each collective leaves on each rank.

>>> from labcore.exercises.collectives import q_all_reduce
>>> q_all_reduce.check(10)
All-reduce by hand: correct!
"""
from __future__ import annotations

from labcore.exercises.core import CustomExercise, FunctionExercise, Incorrect, ValueExercise

q_all_reduce = ValueExercise(
    "All-reduce by hand",
    "Four ranks each hold one number: rank r holds r + 1. After dist.all_reduce with "
    "ReduceOp.SUM, what number does rank 2 hold?",
    expected=10,
    rtol=0,
    mistakes=[(3, "3 is what rank 2 started with: all_reduce replaces it with the combined value."),
              (4, "4 is the number of ranks; all_reduce adds the ranks' values."),
              (2.5, "That is the average (ReduceOp.AVG); the question asks for SUM.")],
    hints=["Every rank ends with the same value.",
           "The value is the sum over ranks of what each rank held before: 1 + 2 + 3 + 4."],
    solution="1 + 2 + 3 + 4 = 10, on every rank (all_reduce = reduce + broadcast).",
    correct_example=10,
    wrong_examples=[3, 4, 2.5, 24],
)


def _all_to_all(inputs: list[list]) -> list[list]:
    return [[inputs[src][dst] for src in range(len(inputs))] for dst in range(len(inputs))]


q_all_to_all = FunctionExercise(
    "Predict all-to-all",
    "Write predict(inputs): inputs[r][j] is the item rank r sends to rank j. Return outputs, "
    "where outputs[r] is the list rank r holds after dist.all_to_all (item j came from rank j).",
    reference=_all_to_all,
    cases=[([["a0", "a1"], ["b0", "b1"]],),
           ([[0, 1, 2], [10, 11, 12], [20, 21, 22]],),
           ([[f"{r}->{j}" for j in range(4)] for r in range(4)],)],
    hints=["Rank r receives one item from every rank j: the one rank j addressed to r.",
           "That item is inputs[j][r]: all-to-all transposes the matrix of items."],
    solution="def predict(inputs):\n"
             "    n = len(inputs)\n"
             "    return [[inputs[j][r] for j in range(n)] for r in range(n)]",
    wrong_examples=[lambda inputs: inputs, lambda inputs: [row[::-1] for row in inputs]],
)

_NAMES = {
    "reduce_scatter": None,
    "all_reduce": "all_reduce leaves every rank with the whole reduced tensor, not one slice.",
    "scatter": "scatter hands out slices of one rank's tensor; nothing is added up.",
    "reduce": "reduce leaves the whole sum on one rank only.",
    "all_gather": "all_gather concatenates the ranks' tensors; nothing is added up.",
}


def _which(answer) -> None:
    name = str(answer).strip().lower().replace("-", "_").replace(" ", "_")
    name = name.removeprefix("dist.").replace("reduce_scatter_tensor", "reduce_scatter")
    if name not in _NAMES:
        raise Incorrect(f"{answer!r} is not one of the collectives in this notebook; "
                        "answer with a name such as 'all_gather'.")
    if _NAMES[name]:
        raise Incorrect(_NAMES[name])


q_which = CustomExercise(
    "Name that collective",
    "After this collective, rank r holds only slice r of the element-wise sum of every rank's "
    "tensor. Which collective is it? Answer with its torch.distributed name as a string.",
    checker=_which,
    hints=["It combines (adds) like all_reduce, but each rank keeps a different part.",
           "Its name says what it does: first reduce, then scatter the result."],
    solution="'reduce_scatter': an all_reduce is a reduce_scatter followed by an all_gather.",
    correct_example="reduce_scatter",
    wrong_examples=["all_reduce", "scatter", "broadcast"],
)

__all__ = ["q_all_reduce", "q_all_to_all", "q_which"]
