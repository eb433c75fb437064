"""Issue 32's mutants (tests/mutants.py), each through the real check in this process: no wrong answer
accepted, no valid variant refused, every refusal saying what its mutant needs and none giving a number's
right answer away. The live ones run in test_exercises_mutants_live.py."""
from collections import Counter

import numpy as np
import pytest

import mutants
from labcore.exercises.answers import safe_repr
from labcore.exercises.values import StatedValue


def _ids(rows):
    seen = Counter()
    out = []
    for q, kind, *_ in rows:
        seen[q.title, kind] += 1
        out.append(f"{q.title}-{kind}-{seen[q.title, kind]}")
    return out


def _shown(value) -> list[str]:
    """How a right number could appear in a message."""
    v = float(value)
    if v == int(v) and abs(v) < 100:
        return []                              # small whole numbers are everywhere in prose
    return [f"{v:.4g}", f"{v:.3g}"] + ([f"{int(v):,}", str(int(v))] if v == int(v) else [])


@pytest.mark.parametrize("exercise, kind, answer, says", mutants.WRONG, ids=_ids(mutants.WRONG))
def test_a_wrong_answer_is_refused(exercise, kind, answer, says):
    result = exercise.evaluate(answer)
    assert result.status == "incorrect", (kind, safe_repr(answer), result.message)
    assert len(result.message) > len(exercise.title) + 15, result.message
    if says is not None:
        assert says in result.message, result.message
    if isinstance(exercise, StatedValue) and np.ndim(exercise.expected_value()) == 0:
        mine = safe_repr(answer)
        for text in _shown(exercise.expected_value()):
            assert text in mine or text not in result.message, (text, result.message)


@pytest.mark.parametrize("exercise, kind, answer", mutants.VALID, ids=_ids(mutants.VALID))
def test_a_valid_variant_is_accepted(exercise, kind, answer):
    result = exercise.evaluate(answer)
    assert result.status == "correct", (kind, safe_repr(answer), result.message)


def test_every_class_has_its_mutants_and_there_are_enough():
    wrong = Counter(kind for _, kind, *_ in mutants.WRONG + mutants.LIVE_WRONG)
    valid = Counter(kind for _, kind, *_ in mutants.VALID + mutants.LIVE_VALID)
    assert set(wrong) == set(mutants.WRONG_KINDS) and set(valid) == set(mutants.VALID_KINDS)
    assert sum(wrong.values()) >= 300 and sum(valid.values()) >= 100, (wrong, valid)
    # every live class of flaw has live members too: the ones a recorder or a detector must catch
    live = Counter(kind for _, kind, *_ in mutants.LIVE_WRONG)
    assert {"wrapper", "sent", "threshold", "inputs", "part"} <= set(live), live


def test_the_mutants_are_not_the_exercises_own_examples():
    repeated = []
    for q, _, answer, *_ in mutants.WRONG + mutants.VALID:
        own = [q.correct_example, *q.wrong_examples]
        if any(answer is e or (type(answer) in (int, float, str) and type(e) is type(answer) and answer == e)
               for e in own):
            repeated.append((q.title, safe_repr(answer)))
    assert not repeated, repeated
