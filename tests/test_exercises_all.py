"""Every exercise in labcore.exercises accepts its correct example and rejects its wrong ones."""
import importlib
import pkgutil

import pytest

import labcore.exercises as package
from labcore.exercises import Exercise
from labcore.exercises.core import _NOTHING


def all_exercises():
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "core":
            continue
        module = importlib.import_module(f"labcore.exercises.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Exercise):
                found.append(pytest.param(obj, id=f"{info.name}.{name}"))
    return found


EXERCISES = all_exercises()


@pytest.mark.parametrize("exercise", EXERCISES)
def test_correct_example_passes(exercise):
    assert exercise.correct_example is not _NOTHING, (
        f"{exercise.title!r} needs a correct_example so the suite can check it")
    result = exercise.evaluate(exercise.correct_example)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("exercise", EXERCISES)
def test_wrong_examples_fail_with_feedback(exercise):
    assert exercise.wrong_examples, f"{exercise.title!r} needs wrong_examples"
    for wrong in exercise.wrong_examples:
        result = exercise.evaluate(wrong)
        assert result.status == "incorrect", (wrong, result.message)
        assert len(result.message) > len(exercise.title) + 15, result.message


@pytest.mark.parametrize("exercise", EXERCISES)
def test_untouched_is_not_attempted(exercise):
    assert exercise.evaluate().status == "not attempted"
    assert exercise.hints and exercise._solution, f"{exercise.title!r} needs hints and a solution"


def test_at_least_eight_exercises_across_the_notebooks():
    assert len(EXERCISES) >= 8, [p.id for p in EXERCISES]


def _never_returns(*args, **kwargs):
    import time
    while True:
        time.sleep(0.01)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_an_answer_that_never_returns_is_stopped(exercise, monkeypatch):
    monkeypatch.setattr(exercise, "time_limit", 2.0)
    result = exercise.evaluate(_never_returns)
    assert result.status == "incorrect", result.message
    for internal in ("Error", "Traceback"):  # a question that takes no function says what it takes
        assert internal not in result.message, result.message


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), "some words"], ids=repr)
@pytest.mark.parametrize("exercise", EXERCISES)
def test_strange_answers_get_a_message_about_the_answer(exercise, bad):
    result = exercise.evaluate(bad)
    assert result.status == "incorrect", result.message
    for internal in ("Error", "Traceback", "wrong sign", "raised"):
        assert internal not in result.message, result.message
