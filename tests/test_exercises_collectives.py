"""Notebook 01's exercises accept their right answers and explain wrong ones."""
import numpy as np
import pytest

from labcore.exercises import ____
from labcore.exercises.operations import q_all_reduce, q_all_to_all, q_which

EXERCISES = [q_all_reduce, q_all_to_all, q_which]


@pytest.mark.parametrize("q", EXERCISES, ids=lambda q: q.title)
def test_right_wrong_and_untouched(q):
    assert q.self_test(q.correct_example).status == "correct"
    for wrong in q.wrong_examples:
        assert q.evaluate(wrong).status == "incorrect", wrong
    assert q.evaluate(____).status == "not attempted"


def test_all_reduce_feedback_names_the_mistake_not_the_answer():
    assert "what rank 2 started with" in q_all_reduce.evaluate(3).message
    assert "product" in q_all_reduce.evaluate(24).message
    off = q_all_reduce.evaluate(9).message
    assert "not the right value" in off and "10" not in off and "x the" not in off


@pytest.mark.parametrize("answer", ["broadcast", "gather", "all_to_all", "barrier", "send", "scatter"])
def test_which_explains_every_collective_of_the_notebook(answer):
    message = q_which.evaluate(answer).message
    assert "not the name" not in message and "not one of" not in message, message
    assert answer.split("_")[-1] in message


def test_which_spellings_and_non_names():
    for right in ("reduce_scatter", "dist.reduce_scatter_tensor", "reduce-scatter", "reduce_scatter_single",
                  " Reduce Scatter "):
        assert q_which.evaluate(right).status == "correct", right
    assert "not one slice" in q_which.evaluate("all-reduce").message
    assert "not the name of a torch.distributed collective" in q_which.evaluate("sum").message
    assert "as a string" in q_which.evaluate(3).message


def test_all_to_all_accepts_any_sequences():
    as_tuples = lambda inputs: tuple(tuple(inputs[j][r] for j in range(len(inputs))) for r in range(len(inputs)))
    as_array = lambda inputs: np.array(inputs, dtype=object).T
    generator_rows = lambda inputs: [tuple(col) for col in zip(*inputs)]
    for answer in (as_tuples, as_array, generator_rows):
        assert q_all_to_all.evaluate(answer).status == "correct"


def test_all_to_all_feedback_says_what_went_where():
    unchanged = q_all_to_all.evaluate(lambda inputs: inputs).message
    assert "outputs[0][1] is 'a1', but rank 0 sent 'a1' to rank 1" in unchanged
    # rank r's items in the wrong order: right item set, wrong slot
    shuffled = q_all_to_all.evaluate(lambda inputs: [[inputs[j][r] for j in reversed(range(len(inputs)))]
                                                     for r in range(len(inputs))]).message
    assert "came from rank 1, and outputs[0][0] holds what came from rank 0" in shuffled
    assert "return 2 lists" in q_all_to_all.evaluate(lambda inputs: [1]).message
    assert "should hold 2 items" in q_all_to_all.evaluate(lambda inputs: inputs[0]).message
    assert "pass your function" in q_all_to_all.evaluate([[1]]).message
