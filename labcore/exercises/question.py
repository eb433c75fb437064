"""A question as a student release ships it: a title, a prompt and the hints a learner may see.

In a student release (:mod:`labcore.exercises.sealed`) every question a notebook imports is a
:class:`Question`: nothing on it holds a solution, an expected value, a reference or a known
mistake, so no call on it answers it. Its :meth:`check` hands the answer to the exercise's check,
which lives apart:

- a question whose answer is checked without ranks runs its check in the checker's child process
  (:mod:`labcore.exercises.checker`), which loads the release's compiled checks; the notebook's
  process never does;
- a live question (its check runs the learner's code on the learner's ranks) loads its check
  in the notebook, where the learner's cluster is;
- a copy of the release without checks (a graded run's) says the grader checks the answer.

The numbers a question is about (:meth:`given_values`, :meth:`about`) travel with the answer.

Example
-------
>>> q = Question("demo.q_two", "labcore.exercises._full.demo", "Two", "1 + 1?", hints=["add"])
>>> q.hint()
Two, hint 1 of 1 (that was the last hint; solution() shows the answer):
add
"""
from __future__ import annotations

import copy
import importlib
from typing import Any

from labcore.exercises import checker, sealed, setting
from labcore.exercises.core import Exercise, Result

__all__ = ["Question"]


class Question(Exercise):
    """The face of exercise ``name`` (``"ring.q_send_chunk"``), whose check is ``full``'s attribute of that
    name (``"labcore.exercises._full.ring"``).

    Parameters
    ----------
    name, full : the exercise's name in the course catalog, and the module its check loads from.
    title, prompt, hints, expects, var, time_limit : as :class:`~labcore.exercises.core.Exercise`'s.
    given : the numbers the prompt names (``{busbw}``), as the exercise starts with them.
    live : whether its check runs on the learner's ranks (then it loads in this process).
    """

    def __init__(self, name: str, full: str, title: str, prompt: str, *, given: dict | None = None,
                 live: bool = False, **kwargs: Any):
        super().__init__(title, prompt, **kwargs)
        del self.correct_example, self.wrong_examples, self._solution      # a face holds no answer, not even empty
        self.name, self.full, self.live = name, full, live
        self.given = dict(given or {})
        self._state: dict = {}

    def solution(self) -> None:
        """A student release has no solutions: one line saying so."""
        print(f"{self.title}: {setting.SOLUTION_OFF}")

    def given_values(self, **given: Any) -> "Question":
        """Set the numbers the question is about (e.g. a measured time); returns self."""
        self.given.update(given)
        self._state["given"] = dict(self.given)
        return self

    def about(self, result) -> "Question":
        """Point the question at ``result`` (e.g. the notebook's own comparison table); returns self."""
        self._state["result"] = result
        return self

    def state(self) -> dict:
        """What the notebook set on this question (its numbers, what it is about), for its check."""
        return dict(self._state)

    def _prompt_text(self) -> str:
        return self.prompt.format(**self.given) if self.given else self.prompt

    def _evaluate(self, answer: Any, context: dict, caller_depth: int, refuse_own: bool = True) -> Result:
        answer = self._given(answer, caller_depth)
        early = self._early(answer)
        if early is not None:
            return early
        attribute = self.name.rsplit(".", 1)[-1]
        if not sealed.have_checks():
            return self._outcome(checker.Outcome(("verdict", "no check", "")))
        if self.live:
            sealed.install_checks()
            full = copy.copy(getattr(importlib.import_module(self.full), attribute))
            for key, value in self._state.items():
                setattr(full, key, value)
            return full._judge_here(answer, context, refuse_own)
        return self._outcome(checker.check_apart((self.full, attribute, self._state), answer, context,
                                                 time_limit=self.time_limit, preload=[self.full],
                                                 refuse_own=refuse_own), answer)
