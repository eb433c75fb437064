"""The exercise framework: statuses, feedback, hints, placeholders."""
import numpy as np
import pytest

from labcore.exercises import (
    ____, CustomExercise, Exercise, FunctionExercise, Incorrect, NotAttempted, ValueExercise,
)


def busbw_question():
    return ValueExercise(
        "busbw", "busbw?", expected=lambda nbytes, n, t: nbytes / t / 1e9 * 2 * (n - 1) / n,
        given=dict(nbytes=4e9, n=4, t=2.0), unit="GB/s",
        mistakes=[(lambda nbytes, n, t: nbytes / t / 1e9, "That is algbw.")],
        hints=["first", "second"], solution="the answer")


def test_untouched_exercise_says_not_attempted_and_does_not_raise(capsys):
    q = busbw_question()
    for blank in (____, ...):
        q.check(blank)
        assert "not attempted yet" in capsys.readouterr().out
    assert q.evaluate().status == "not attempted"


def test_value_exercise_right_wrong_and_known_mistake():
    q = busbw_question()
    assert q.expected_value() == pytest.approx(3.0)
    assert q.evaluate(3.0).status == "correct"
    assert q.evaluate(3.01).status == "correct"          # within the 1% tolerance
    mistake = q.evaluate(2.0)
    assert mistake.status == "incorrect" and "algbw" in mistake.message
    off = q.evaluate(6.0)
    assert off.status == "incorrect" and "not within 1% of the right value" in off.message
    assert "6" in off.message and "2x" not in off.message and "3" not in off.message  # no ratio, no answer
    assert "too" not in off.message  # no direction either: a learner could bisect on it
    units = q.evaluate(3000.0)
    assert "units" in units.message
    assert "wrong sign" in q.evaluate(-3.0).message
    assert "the text 'three'" in q.evaluate("three").message
    assert "the text '3'" in q.evaluate("3").message  # a number in quotes is not accepted silently
    assert "yes/no" in q.evaluate(True).message


def test_value_exercise_uses_given_values():
    q = busbw_question().given_values(t=4.0)
    assert q.evaluate(1.5) and not q.evaluate(3.0)


def test_value_exercise_arrays():
    q = ValueExercise("arr", "?", expected=np.arange(3.0))
    assert q.evaluate([0, 1, 2]) and not q.evaluate([0, 1, 3]) and not q.evaluate([0, 1])


def test_function_exercise_names_the_failing_case():
    q = FunctionExercise("steps", "?", reference=lambda n: 2 * (n - 1), cases=[(2,), (4,)])
    assert q.evaluate(lambda n: 2 * n - 2).status == "correct"
    wrong = q.evaluate(lambda n: 2 if n == 2 else 0)
    assert wrong.status == "incorrect" and "For n=4 you return 0" in wrong.message
    assert "6" not in wrong.message                                  # the right result stays unsaid

    def starter(n):
        raise NotImplementedError

    assert q.evaluate(starter).status == "not attempted"
    assert q.evaluate(lambda n: ____).status == "not attempted"
    crash = q.evaluate(lambda n: 1 / 0)
    assert crash.status == "incorrect" and "ZeroDivisionError" in crash.message
    assert "is not a function" in q.evaluate(3).message


def test_custom_exercise_messages():
    def checker(answer, *, limit=10):
        if answer == "skip":
            raise NotAttempted()
        if answer > limit:
            raise Incorrect(f"{answer} is above {limit}.")
        return "Well done."

    q = CustomExercise("small", "?", checker=checker)
    assert q.evaluate(3).message == "small: correct! Well done."
    assert "above 10" in q.evaluate(11).message
    assert q.evaluate(11, limit=20)
    assert q.evaluate("skip").status == "not attempted"


def test_check_prints_and_reads_a_named_variable(capsys):
    q = ValueExercise("named", "?", expected=7, var="my_answer")
    q.check()
    assert "not attempted" in capsys.readouterr().out
    globals()["my_answer"] = 7
    try:
        q.check()
        assert "correct!" in capsys.readouterr().out
    finally:
        del globals()["my_answer"]


def test_hints_and_solution(capsys):
    q = busbw_question()
    q.hint()
    out = capsys.readouterr().out
    assert "hint 1 of 2" in out and "first" in out
    q.hint(5)
    out = capsys.readouterr().out
    assert "second" in out and "last hint" in out
    q.solution()
    assert "the answer" in capsys.readouterr().out
    Exercise("bare", "?").hint()
    assert "no hints" in capsys.readouterr().out


@pytest.mark.parametrize("bad, says", [(None, "None: nothing was computed"), (float("nan"), "nan"),
                                       (float("inf"), "inf"), ([1.0, float("nan")], "nan or inf")])
def test_none_nan_and_inf_are_described_not_crashed_on(bad, says):
    for q in (busbw_question(), FunctionExercise("f", "?", reference=lambda n: n, cases=[(1,)]),
              CustomExercise("c", "?", checker=lambda a: None if a == 1 else _raise())):
        result = q.evaluate(bad)
        if isinstance(q, ValueExercise) or not isinstance(bad, list):
            assert result.status == "incorrect" and says in result.message, result.message
        assert "Error" not in result.message and "sign" not in result.message


def _raise():
    raise Incorrect("no")


def test_a_custom_check_that_trips_on_a_strange_answer_talks_about_the_answer():
    q = CustomExercise("pairs", "?", checker=lambda a: None if sum(x for x, _ in a) == 3 else _raise(),
                       expects="a list of (rank, bytes) pairs")
    result = q.evaluate("abc")
    assert result.status == "incorrect"
    assert "'abc' (a str), is not a list of (rank, bytes) pairs" in result.message
    assert "Error" not in result.message


@pytest.mark.parametrize("returns_none", [True, False])
def test_function_answers_that_return_none_or_nan(returns_none):
    q = FunctionExercise("steps", "?", reference=lambda n: 2.0 * (n - 1), cases=[(2,)])
    result = q.evaluate(lambda n: None if returns_none else float("nan"))
    assert result.status == "incorrect"
    assert ("is a `return` missing" if returns_none else "divided by zero") in result.message


def test_a_function_that_never_returns_is_stopped():
    import time

    def forever(n):
        while True:
            try:
                time.sleep(0.01)
            except Exception:  # a learner's blanket except must not swallow the stop
                pass

    q = FunctionExercise("steps", "?", reference=lambda n: n, cases=[(2,)], time_limit=1.0)
    start = time.monotonic()
    result = q.evaluate(forever)
    assert time.monotonic() - start < 10
    assert result.status == "incorrect" and "did not return within 1 s" in result.message
    assert q.evaluate(lambda n: n).status == "correct"  # the alarm is gone afterwards
    time.sleep(1.2)


def test_an_outer_timer_keeps_running_after_a_check():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    signal.setitimer(signal.ITIMER_REAL, 0.8)
    try:
        q = FunctionExercise("steps", "?", reference=lambda n: n, cases=[(2,)], time_limit=5.0)
        assert q.evaluate(lambda n: n).status == "correct"
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 0.8
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_numbers_in_text_or_in_a_set_are_not_taken_for_numbers():
    q = ValueExercise("pair", "two numbers?", expected=[1.0, 2.0])
    for answer, says in ((["1", "2"], "holds text"), (("1.0", 2.0), "holds text"), ({1.0, 2.0}, "keeps no order")):
        result = q.evaluate(answer)
        assert result.status == "incorrect" and says in result.message, result.message
    assert q.evaluate((1.0, 2.0)).status == "correct"


def test_a_function_that_returns_text_or_a_float32_number():
    import torch

    q = FunctionExercise("bytes", "bytes?", reference=lambda n: 2 * (n - 1) / n * 1e9, cases=[(3,), (16,)])
    assert q.evaluate(lambda n: np.float32(2 * (n - 1) / n * 1e9)).status == "correct"      # float32 precision
    assert q.evaluate(lambda n: torch.tensor(2 * (n - 1) / n * 1e9)).status == "correct"
    assert "not a string" in q.evaluate(lambda n: str(2 * (n - 1) / n * 1e9)).message
    assert q.evaluate(lambda n: 2 * (n - 1) / n * 1e9 * (1 + 1e-5)).status == "incorrect"
    assert q.evaluate(lambda n: [2 * (n - 1) / n * 1e9]).status == "incorrect"


@pytest.mark.parametrize("name", ["core", "answers", "timing", "live", "values"])
def test_docstring_examples_run(name):
    import doctest
    import importlib

    module = importlib.import_module(f"labcore.exercises.{name}")
    assert doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
