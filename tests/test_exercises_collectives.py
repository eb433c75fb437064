"""Notebook 01's exercises accept their right answers and explain wrong ones."""
import pytest

from labcore.exercises import ____
from labcore.exercises.collectives import q_all_reduce, q_all_to_all, q_which

EXERCISES = [q_all_reduce, q_all_to_all, q_which]


@pytest.mark.parametrize("q", EXERCISES, ids=lambda q: q.title)
def test_right_wrong_and_untouched(q):
    assert q.evaluate(q.correct_example).status == "correct"
    for wrong in q.wrong_examples:
        assert q.evaluate(wrong).status == "incorrect", wrong
    assert q.evaluate(____).status == "not attempted"


def test_feedback_says_what_is_wrong():
    assert "what rank 2 started with" in q_all_reduce.evaluate(3).message
    assert "not one slice" in q_which.evaluate("all-reduce").message
    assert q_which.evaluate("dist.reduce_scatter_tensor").status == "correct"
    assert "For input" in q_all_to_all.evaluate(lambda inputs: inputs).message
