"""Checked exercises for the lab's notebooks (learntools style).

Each notebook's questions live in their own module (``labcore.exercises.ring``
for notebook 02, ``labcore.exercises.trees`` for the tree part of 03, ...); the
largest (``ring``, ``data_parallel``, ``sharding``) are packages split by audience:
``reference`` (the code a learner reads), ``checks``, ``questions`` and
``mistakes`` (the wrong answers the tests run). The framework they share is
:mod:`labcore.exercises.core`, with :mod:`~labcore.exercises.answers` (an answer
read with the lab's own types, never its own methods), :mod:`~labcore.exercises.timing`
(time limits that count only the learner's code), :mod:`~labcore.exercises.live`
(checks on live ranks of several world sizes), :mod:`~labcore.exercises.checker` (a check of the
learner's code in a child process killed at its deadline), :mod:`~labcore.exercises.codec` (an
answer as data, its functions as source), :mod:`~labcore.exercises.own` (the lab's own answers
refused) and, for a student release, :mod:`~labcore.exercises.question` and
:mod:`~labcore.exercises.sealed` (questions without answers, checks compiled apart).

Example
-------
>>> from labcore.exercises import ValueExercise, ____
>>> q = ValueExercise("Two", "1 + 1?", expected=2)
>>> q.check(____)
Two: not attempted yet. Replace ____ with your answer, then run q.check(answer).
"""
from labcore.exercises.core import (
    ____, Blank, CustomExercise, Exercise, FunctionExercise, Incorrect, NotAttempted, Result,
    ValueExercise,
)

__all__ = [
    "____", "Blank", "CustomExercise", "Exercise", "FunctionExercise", "Incorrect",
    "NotAttempted", "Result", "ValueExercise",
]


def __dir__() -> list[str]:
    return sorted(__all__)
