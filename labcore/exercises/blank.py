"""The placeholder ``____`` a starter cell holds until the learner answers.

Apart from the framework (:mod:`labcore.exercises.core`) so that the modules that read answers
(:mod:`~labcore.exercises.answers`, :mod:`~labcore.exercises.codec`) know it without importing the checks.

Example
-------
>>> ____
____
>>> Blank() is ____
True
"""
from __future__ import annotations

__all__ = ["Blank", "____"]


class Blank:
    """The placeholder a starter cell holds until the learner answers (``____``)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "____"


____ = Blank()
