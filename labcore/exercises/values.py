"""Numbers asked for with their form and tolerance said up front: :class:`StatedValue`.

:class:`~labcore.exercises.core.ValueExercise` compares an answer with the right value within a
tolerance. A learner should not have to guess either: the prompt of a :class:`StatedValue` ends
with what the answer is (a number, its unit) and how close counts as right, and its feedback says
the same tolerance (0.5% as "0.5%", not rounded to "0%"). It also reads the answer the way a
learner printed it: a one-element list, array or tensor (``tensor([10.])``) is that number.

Known mistakes are matched more tightly than the answer (``mistake_rtol``): two slips that land
0.2% apart (all_reduce's factor for 16 ranks instead of 8, and GiB/s instead of GB/s) each get
their own message, while a rounded right answer is still right.

Example
-------
>>> q = StatedValue("Double", "Twice {x}?", expected=lambda x: 2 * x, given={"x": 3}, rtol=0.005,
...                 unit="bytes", hints=["x + x"], solution="6")
>>> print(q._prompt_text())
Twice 3?
(Answer with a number of bytes; within 0.5% of the right value counts as right.)
>>> q.check([6.01])
Double: correct!
>>> q.check(7)
Double: not quite. you gave 7 bytes; that is not within 0.5% of the right value.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from labcore.exercises.core import Incorrect, ValueExercise, _fmt, _power_of_ten

__all__ = ["StatedValue", "tolerance_text"]


def tolerance_text(rtol: float, atol: float = 0.0) -> str:
    """How close counts as right, in words: "exactly", "within 1%", "within 0.5%", "within 0.1%"."""
    if rtol == 0 and atol == 0:
        return "exactly"
    if rtol == 0:
        return f"within {atol:g}"
    return f"within {100 * rtol:.2g}%"


class StatedValue(ValueExercise):
    """A :class:`ValueExercise` that states its form and tolerance, reads one-element answers as their
    number, and matches known mistakes within ``mistake_rtol`` (default: the answer's own ``rtol``).

    Parameters
    ----------
    form
        What the answer is, for the prompt and feedback: "a number of bytes", "a whole number", ...
        (default "a number", with the unit if there is one).
    mistake_rtol
        Relative tolerance for matching ``mistakes``.
    """

    def __init__(self, title: str, prompt: str, *, form: str | None = None, mistake_rtol: float | None = None,
                 **kwargs: Any):
        super().__init__(title, prompt, **kwargs)
        self.form = form or (f"a number of {self.unit}" if self.unit else "a number")
        self.expects = self.form
        self.mistake_rtol = self.rtol if mistake_rtol is None else mistake_rtol

    def _prompt_text(self) -> str:
        how = tolerance_text(self.rtol, self.atol)
        said = ("it must be exact" if how == "exactly" else f"{how} of the right value counts as right")
        return f"{super()._prompt_text()}\n(Answer with {self.form}; {said}.)"

    def _one(self, values: np.ndarray, want: Any) -> np.ndarray:
        """A one-element answer to a one-number question is that number (``[10]``, ``tensor([10.])``)."""
        return values.reshape(()) if np.ndim(want) == 0 and values.size == 1 else values

    def _check(self, answer: Any, **context: Any) -> str | None:
        want = self.expected_value()
        values = self._one(self.read_values(answer), want)
        if self._close(values, want):
            return None
        for value, message in self.mistakes:
            mistake = np.asarray(self._value(value), dtype=float)
            if values.shape == mistake.shape and np.allclose(values, mistake, rtol=self.mistake_rtol, atol=self.atol):
                raise Incorrect(message)
        unit = f" {self.unit}" if self.unit else ""
        how = tolerance_text(self.rtol, self.atol)
        near = "" if how == "exactly" else f"{how} of "
        # how far off stays unsaid (a ratio would give the answer away); only a units slip is named
        hint = ""
        if np.ndim(want) == 0 and values.ndim == 0 and float(want) != 0 and float(values) != 0:
            ratio = float(values) / float(want)
            hint = (" It has the wrong sign." if ratio < 0 else
                    " It is off by a power of ten: check the units." if _power_of_ten(ratio) else "")
        raise Incorrect(f"you gave {_fmt(answer)}{unit}; that is not {near}the right value.{hint}")
