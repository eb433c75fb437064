"""Exercises for notebook 01: what each collective leaves on each rank.

>>> from labcore.exercises.operations import q_all_reduce
>>> q_all_reduce.check(10)
All-reduce by hand: correct!
"""
from __future__ import annotations

from labcore import collectives
from labcore.exercises.answers import as_items, as_text, equal, safe_repr, type_name
from labcore.exercises.core import CustomExercise, Incorrect, NotAttempted, _is_blank
from labcore.exercises.timing import learner_code
from labcore.exercises.values import StatedValue

q_all_reduce = StatedValue(
    "All-reduce by hand",
    "Four ranks each hold one number: rank r holds r + 1. After dist.all_reduce with "
    "ReduceOp.SUM, what number does rank 2 hold?",
    expected=10,
    rtol=0, form="a number (a one-element tensor, as a rank prints it, will do)",
    mistakes=[(3, "3 is what rank 2 started with: all_reduce replaces it with the combined value."),
              (4, "4 is the number of ranks; all_reduce adds the ranks' values."),
              (2.5, "That is the average (ReduceOp.AVG); the question asks for SUM."),
              (24, "24 is the product (ReduceOp.PRODUCT); the question asks for SUM.")],
    hints=["Every rank ends with the same value.",
           "The value is the sum over ranks of what each rank held before: 1 + 2 + 3 + 4."],
    solution="1 + 2 + 3 + 4 = 10, on every rank (all_reduce = reduce + broadcast).",
    correct_example=10,
    wrong_examples=[3, 4, 2.5, 24, 9],
)


def _all_to_all(inputs: list[list]) -> list[list]:
    return [[inputs[src][dst] for src in range(len(inputs))] for dst in range(len(inputs))]


# Items with no order of their own: neither their values nor their names grow with the sending rank, so
# sorting what a rank received cannot stand in for ordering it by source (and sizes 2 to 5, not only 4).
_ALL_TO_ALL_CASES = [
    [["a0", "a1"], ["b0", "b1"]],
    [[7.5, 0.25, 3.0], [1.5, 9.0, 0.5], [4.0, 2.5, 8.25]],
    [[f"{tag}{j}" for j in range(4)] for tag in ("m", "c", "x", "a")],
    [[0.3, 4.4, 2.2, 9.1, 5.5], [8.8, 0.7, 6.6, 1.2, 3.3], [2.9, 7.7, 0.1, 4.8, 6.2],
     [5.1, 1.9, 9.9, 0.4, 7.3], [3.6, 6.4, 1.5, 8.2, 0.9]],
]


def _as_rows(got, n: int, case: list) -> list[list]:
    """The learner's outputs as a list of n lists (lists, tuples or a numpy array, read as such)."""
    rows = as_items(got)
    if rows is None or len(rows) != n:
        raise Incorrect(f"For inputs={case!r} return {n} lists, one per rank; you return {safe_repr(got)}.")
    for r, row in enumerate(rows):
        rows[r] = as_items(row)
        if rows[r] is None or len(rows[r]) != n:
            raise Incorrect(f"For inputs={case!r}, outputs[{r}] should hold {n} items, one from every "
                            f"rank; you return {safe_repr(row)}.")
    return rows


def _check_all_to_all(answer) -> str:
    if not callable(answer):
        raise Incorrect("pass your function, e.g. q_all_to_all.check(predict).")
    for case in _ALL_TO_ALL_CASES:
        n = len(case)
        try:
            got = learner_code(answer, [list(row) for row in case])
        except NotImplementedError:
            raise NotAttempted()
        if _is_blank(got):
            raise NotAttempted()
        rows = _as_rows(got, n, case)
        want = _all_to_all(case)
        for r in range(n):
            for j in range(n):
                if equal(rows[r][j], want[r][j]):
                    continue
                shown = safe_repr(rows[r][j])
                sent = [(s, d) for s in range(n) for d in range(n) if equal(rows[r][j], case[s][d])]
                if sent:
                    s, d = sent[0]
                    why = (f"but rank {s} sent {shown} to rank {d}" if d != r else
                           f"but {shown} came from rank {s}, and outputs[{r}][{j}] holds what came from rank {j}")
                else:
                    why = "an item no rank sent"
                raise Incorrect(f"For inputs={case!r} your outputs[{r}][{j}] is {shown}, {why}.")
    return f"({len(_ALL_TO_ALL_CASES)} cases passed)"


q_all_to_all = CustomExercise(
    "Predict all-to-all",
    "Write predict(inputs): inputs[r][j] is the item rank r sends to rank j. Return outputs, "
    "where outputs[r] is the list rank r holds after dist.all_to_all (item j came from rank j); "
    "lists, tuples or a numpy array all do.",
    checker=_check_all_to_all,
    hints=["Rank r receives one item from every rank j: the one rank j addressed to r.",
           "That item is inputs[j][r]: all-to-all transposes the matrix of items."],
    solution="def predict(inputs):\n"
             "    n = len(inputs)\n"
             "    return [[inputs[j][r] for j in range(n)] for r in range(n)]",
    correct_example=_all_to_all,
    wrong_examples=[lambda inputs: inputs, lambda inputs: [row[::-1] for row in inputs],
                    lambda inputs: [inputs[0]] * len(inputs), lambda inputs: inputs[0]],
)

# Every collective notebook 01 runs, and why it is not the one that leaves rank r with slice r of the sum.
_NAMES = {
    "reduce_scatter": None,
    "all_reduce": "all_reduce leaves every rank with the whole reduced tensor, not one slice.",
    "scatter": "scatter hands out slices of one rank's tensor; nothing is added up.",
    "reduce": "reduce leaves the whole sum on one rank only.",
    "all_gather": "all_gather concatenates the ranks' tensors; nothing is added up.",
    "gather": "gather collects every rank's tensor on one rank; nothing is added up.",
    "broadcast": "broadcast copies one rank's tensor to every rank; nothing is added up.",
    "all_to_all": "all_to_all sends a different piece to every rank, but nothing is added up.",
    "barrier": "a barrier only makes every rank wait for the others (torch's NCCL backend runs it as an "
               "all-reduce of one element): no rank ends with a slice of anyone's data.",
    "send": "send and recv move data between two ranks; a collective involves every rank.",
    "recv": "send and recv move data between two ranks; a collective involves every rank.",
}
def _which(answer) -> None:
    text = as_text(answer)
    if text is None:
        raise Incorrect(f"answer with the collective's name as a string, such as 'all_gather'; "
                        f"you gave {type_name(answer)} {safe_repr(answer)}.")
    name = text.strip().lower().replace("-", "_").replace(" ", "_").removesuffix("()")
    name = name.removeprefix("torch.").removeprefix("distributed.").removeprefix("dist.")
    name = collectives.from_torch(name) or name
    name = {n.replace("_", ""): n for n in _NAMES}.get(name.replace("_", ""), name)   # NCCL's "ReduceScatter" too
    if name not in _NAMES:
        raise Incorrect(f"{text!r} is not the name of a torch.distributed collective; answer with one "
                        "of the names used in this notebook, such as 'all_gather'.")
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
    wrong_examples=["all_reduce", "scatter", "broadcast", "gather", "all_to_all", "barrier",
                    "reduce", "all_gather", "sum", 3],
)

__all__ = ["q_all_reduce", "q_all_to_all", "q_which"]
