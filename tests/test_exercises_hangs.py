"""Notebook 09's exercises: run live on 4 gloo ranks, right answers pass, each known mistake fails
with its own message, the truth never leaks into the feedback nor into the evidence shown."""
import numpy as np
import pytest

import labcore as lc
from labcore.exercises import hangs
from labcore.live import flight

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def cl(gloo_cluster):
    return gloo_cluster(4, timeout=5, env=flight.ENV, show_output=False)


@pytest.fixture(autouse=True)
def default_cases():
    """run() points a question at a live case; put the default cases back for other tests."""
    saved = {q: q.mystery for q in (hangs.q_shapes, hangs.q_skip, hangs.q_straggler)}
    yield
    for q, mystery in saved.items():
        q.mystery = mystery


def _status(q, answer):
    return q.evaluate(answer)


@pytest.fixture
def analyses(monkeypatch):
    """The flight analyses a question's run made (the hang report is their ``error.report``)."""
    seen, real = [], flight.capture

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(flight, "capture", spy)
    return seen


def _leaves_the_answer_out(shown: str, fa, culprit) -> None:
    """The evidence has every rank's state but neither verdict: not the hang report's first line
    (which names who diverged), nor the lab's reading of the flight recorder."""
    report = fa.error.report
    if culprit is not None:  # the verdict would have given the answer away
        assert f"rank {culprit}" in report.headline.lower()
    assert report.headline.lower() not in shown.lower()
    assert "culprit" not in shown.lower() and "majority reading" not in shown
    assert f"finished: {report.finished or 'none'}" in shown
    for rank in report.stuck:
        assert f"  rank {rank}: " in shown


def test_shapes_live(cl, capsys, analyses):
    hangs.q_shapes.run(cl, seed=1)
    m = hangs.q_shapes.mystery
    shown = capsys.readouterr().out
    _leaves_the_answer_out(shown, analyses[0], m.culprit)
    assert m.live and "CollectiveTimeout" in shown and "SIZE_OR_SYNTAX_MISMATCH" in shown
    # the evidence is torch's and the hang report's, not the lab's verdict, nor the case's name
    assert "majority reading" not in shown and "mismatched_shapes" not in shown and "train_step" in shown
    # no file or line of the lab's (the notebook printed the cases' code earlier, under their names), and a
    # rerun with more time, as every case has
    assert "hang_cases" not in shown and ", line " not in shown and "Rerun with timeout" in shown
    assert m.finished and m.culprit not in m.finished  # the culprit is the one still waiting
    assert _status(hangs.q_shapes, (m.culprit, "mismatched shapes")).status == "correct"
    first_finished = m.finished[0]
    wrong = _status(hangs.q_shapes, (first_finished, "mismatched shapes"))
    assert wrong.status == "incorrect" and "returned from the call" in wrong.message
    assert f"rank {m.culprit}" not in wrong.message
    assert "did enter the all_reduce" in _status(hangs.q_shapes, (m.culprit, "skipped collective")).message
    assert _status(hangs.q_shapes, (m.culprit, "wrong order")).status == "incorrect"


def test_skip_live(cl, capsys, analyses):
    hangs.q_skip.run(cl, seed=2)
    m = hangs.q_skip.mystery
    shown = capsys.readouterr().out
    _leaves_the_answer_out(shown, analyses[0], m.culprit)
    assert "hang_cases" not in shown and "Rerun with timeout" in shown and "had still not returned" in shown
    assert m.finished == [m.culprit]
    assert _status(hangs.q_skip, (m.culprit, "skipped collective")).status == "correct"
    waiting = next(r for r in range(4) if r != m.culprit)
    assert "victim" in _status(hangs.q_skip, (waiting, "skipped collective")).message
    assert "RankDied" in _status(hangs.q_skip, (m.culprit, "crashed")).message
    assert "More time would not help" in _status(hangs.q_skip, (m.culprit, "straggler")).message


def test_straggler_live(cl, capsys, analyses):
    hangs.q_straggler.run(cl, seed=3)
    m = hangs.q_straggler.mystery
    shown = capsys.readouterr().out
    _leaves_the_answer_out(shown, analyses[0], None)
    assert f"rank {m.slow}" in analyses[0].error.report.headline  # the slow one, which the learner must find
    assert "Rerun with timeout" in shown and "every rank returned" in shown
    assert "majority reading" not in shown and "straggler" not in shown.lower()
    assert m.culprit is None and m.slow in (1, 2, 3)
    assert _status(hangs.q_straggler, (None, "straggler")).status == "correct"
    for cause in ("skipped collective", "straggler", "crashed"):
        wrong = _status(hangs.q_straggler, (m.slow, cause))
        assert wrong.status == "incorrect" and "slow, not stuck" in wrong.message
    other = next(r for r in range(4) if r != m.slow)
    assert "completed in the rerun" in _status(hangs.q_straggler, (other, "mismatched ops")).message
    assert "does not fit together" in _status(hangs.q_straggler, (None, "p2p deadlock")).message


@pytest.mark.parametrize("answer, words", [
    ("rank 3", "pair (rank, cause)"), ((3,), "pair (rank, cause)"), ((3, "deadlock"), "must be one of"),
    (("3", "mismatched shapes"), "must be a whole number"), ((True, "mismatched shapes"), "must be a whole number"),
])
def test_malformed_answers_get_a_message(answer, words):
    result = hangs.q_shapes.evaluate(answer)
    assert result.status == "incorrect" and words in result.message


def test_blanks_are_not_attempted():
    from labcore.exercises import ____
    for q in (hangs.q_shapes, hangs.q_skip, hangs.q_straggler):
        assert q.evaluate(____).status == "not attempted"
        assert q.evaluate((____, "straggler")).status == "not attempted"


def test_run_checks_the_cluster_first():
    with lc.Cluster(2, backend="gloo", timeout=5, env=flight.ENV, show_output=False) as two:
        with pytest.raises(ValueError, match="at least 3 ranks"):
            hangs.q_skip.run(two)
    with lc.Cluster(3, backend="gloo", timeout=5, show_output=False) as plain:
        with pytest.raises(ValueError, match="flight.ENV"):
            hangs.q_skip.run(plain)


@pytest.mark.parametrize("answer", [(3, "Mismatched shapes"), (3, " mismatched_shapes "), (np.int64(3), "mismatched shapes"),
                                    (3.0, "mismatched shapes")])
def test_a_right_answer_in_another_spelling_passes(answer):
    assert hangs.q_shapes.evaluate(answer).status == "correct"


@pytest.mark.parametrize("answer, words", [
    (([3], "mismatched shapes"), "must be a whole number"), (("None", "straggler"), "must be a whole number"),
    ((3.5, "mismatched shapes"), "must be a whole number"),
    ((3, None), "must be one of"), ((3, 3), "must be one of"),
])
def test_more_malformed_answers(answer, words):
    result = hangs.q_shapes.evaluate(answer)
    assert result.status == "incorrect" and words in result.message, result.message


def test_the_prompts_print_no_answer():
    for q in (hangs.q_case_1, hangs.q_case_2, hangs.q_case_3):
        assert "(None, 'straggler')" not in repr(q) and '(None, "straggler")' not in repr(q)


@pytest.mark.parametrize("cause", ["Mismatched-Shapes", "mismatched shape", "MISMATCHED_SHAPES", "mismatchedshapes"])
def test_a_cause_in_another_spelling_is_the_cause(cause):
    assert hangs.q_shapes.evaluate((3, cause)).status == "correct"

