"""Issue 32's live mutants (tests/mutants.py): answers that run on the ranks, each through the real check on
4, 3 and 5 ranks, sharing the clusters of this module. No wrong answer passes, no valid one is refused, and
each refusal names what its mutant did."""
import pytest

import mutants
from labcore.exercises.answers import safe_repr
from labcore.live import magic
from test_exercises_mutants import _ids

pytestmark = [pytest.mark.live, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def clusters():
    yield                                # the checks start the clusters they share (magic.get_cluster)
    magic.close_all()


@pytest.mark.parametrize("exercise, kind, answer, says", mutants.LIVE_WRONG, ids=_ids(mutants.LIVE_WRONG))
def test_a_wrong_answer_is_refused_on_the_ranks(exercise, kind, answer, says):
    result = exercise.evaluate(answer)
    assert result.status == "incorrect", (kind, safe_repr(answer), result.message)
    assert says in result.message, result.message


@pytest.mark.parametrize("exercise, kind, answer", mutants.LIVE_VALID, ids=_ids(mutants.LIVE_VALID))
def test_a_valid_variant_is_accepted_on_the_ranks(exercise, kind, answer):
    result = exercise.evaluate(answer)
    assert result.status == "correct", (kind, safe_repr(answer), result.message)
