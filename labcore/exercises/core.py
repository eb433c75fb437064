"""Exercises that answer back: ``q.check()``, ``q.hint()``, ``q.solution()``.

The pattern follows Kaggle's learntools: an exercise is an object the notebook
imports; the learner writes an answer in a cell and calls ``q.check(answer)``.
Starter cells hold the placeholder ``____`` (or a function that still raises
``NotImplementedError``), and checking such an answer prints "not attempted
yet" instead of raising, so a notebook runs top to bottom before anyone has
solved anything.

Three kinds cover most questions:

- :class:`ValueExercise`: a number (or array) compared with a tolerance;
  known mistakes (e.g. algbw given instead of busbw) get a targeted message.
- :class:`FunctionExercise`: the learner's function is run on test cases and
  compared with a reference function; the first failing case is shown.
- :class:`CustomExercise`: any check written as a function that raises
  :class:`Incorrect` with a message saying what is wrong.

Example
-------
>>> from labcore.exercises import ValueExercise, ____
>>> q = ValueExercise("Bus bandwidth factor", "busbw/algbw for all_reduce on 4 ranks?",
...                   expected=1.5, hints=["2(n-1)/n"], solution="2*(4-1)/4 = 1.5")
>>> q.check(____)
Bus bandwidth factor: not attempted yet. Replace ____ with your answer, then run q.check(answer).
>>> q.check(1.5)
Bus bandwidth factor: correct!
>>> q.evaluate(2.0).status
'incorrect'
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from labcore import events
from labcore.exercises import checker, own, setting
from labcore.exercises.blank import ____, Blank
from labcore.exercises.answers import (
    as_array, as_text, as_whole, describe_answer, equal, holds_text, is_plain, safe_repr, safe_str, type_name,
)
from labcore.exercises.answers import close_number as close_number
from labcore.exercises.timing import OutOfTime, learner_code, limit

__all__ = [
    "____", "Blank", "Incorrect", "NotAttempted", "CheckCouldNotRun", "Result", "Exercise",
    "ValueExercise", "FunctionExercise", "CustomExercise", "STATUSES",
]


_NOTHING = object()  # "no argument given", distinct from a learner's None


class Incorrect(Exception):
    """Raised by a check to say what is wrong with an answer (the message is shown)."""


class NotAttempted(Exception):
    """Raised by a check when the answer is still the starter code."""


class CheckCouldNotRun(Exception):
    """Raised by a check when the lab's own part of it failed (not the answer): the message says so."""


# what the modules of the exercises import from here (the readers live in answers.py, the limits in timing.py)
_OutOfTime = OutOfTime
_describe_answer = describe_answer
_holds_text = holds_text
_equal = equal
_fmt = safe_repr


def _not_finite(answer: Any) -> bool:
    return issubclass(type(answer), float) and not math.isfinite(float.__float__(answer))


@dataclass(frozen=True)
class Result:
    """The outcome of one check: ``status`` is "correct", "incorrect", "not attempted", or "not checked"
    (a copy of the lab without the exercise's check: a graded run's, whose grader checks the answer)."""

    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == "correct"

    def __str__(self) -> str:
        return self.message


def _is_blank(answer: Any) -> bool:
    return answer is _NOTHING or type(answer) is Blank or answer is Ellipsis


class Exercise:
    """One question with a check, hints in increasing detail and a worked solution.

    Subclasses implement ``_check(answer, **context)``: return ``None`` (or a
    short remark to add to "correct!") when the answer is right, raise
    :class:`Incorrect` with a message saying what is wrong, or raise
    :class:`NotAttempted` for starter code.

    Parameters
    ----------
    title
        Short name shown in every message.
    prompt
        The question, shown by ``repr(q)`` and ``q.question()``.
    hints
        Hints from gentle to explicit; ``hint(level)`` shows one.
    solution
        The worked solution (text or code) shown by ``solution()``.
    var
        Optional name of a notebook variable: ``q.check()`` with no argument
        then reads that variable from the caller's globals (learntools style).
    correct_example, wrong_examples
        A right answer and some wrong ones; the test suite checks that each
        exercise accepts the first and rejects the others.
    expects
        What kind of answer the question takes ("a number", "a function of
        (rank, step, n)", ...), named when an answer is of another kind.
    time_limit
        Seconds the learner's code may run in one check (their function, and any
        method of their answer the check calls): one that never returns is stopped
        and reported. The lab's own code (imports, references, simulations) is not
        counted. None for no limit.

    Example
    -------
    >>> class Even(Exercise):
    ...     def _check(self, answer):
    ...         if answer % 2:
    ...             raise Incorrect(f"{answer} is odd.")
    >>> q = Even("Even", "Give an even number.", hints=["2 works"], solution="2")
    >>> q.check(3)
    Even: not quite. 3 is odd.
    """

    expects = "the kind of answer the question asks for"

    def __init__(self, title: str, prompt: str, *, hints: Sequence[str] = (),
                 solution: str = "", var: str | None = None,
                 correct_example: Any = _NOTHING, wrong_examples: Iterable[Any] = (),
                 expects: str | None = None, time_limit: float | None = 10.0):
        if expects is not None:
            self.expects = expects
        self.time_limit = time_limit
        self.title = title
        self.prompt = prompt
        self.hints = list(hints)
        self._solution = solution
        self.var = var
        self.correct_example = correct_example
        self.wrong_examples = list(wrong_examples)

    # -- what a learner calls -------------------------------------------------
    def check(self, answer: Any = _NOTHING, **context: Any) -> None:
        """Check ``answer`` and print what is right or wrong; the attempt is recorded.

        Never raises for anything the answer does (its code runs apart, see
        :mod:`labcore.exercises.checker`); Ctrl-C still stops it."""
        result = self._evaluate(answer, context, caller_depth=2)
        print(result)
        events.announce("attempt", exercise=self, result=result)

    def evaluate(self, answer: Any = _NOTHING, **context: Any) -> Result:
        """Like :meth:`check` but return the :class:`Result` instead of printing it."""
        return self._evaluate(answer, context, caller_depth=2)

    def self_test(self, answer: Any, **context: Any) -> Result:
        """:meth:`evaluate` for the lab's own tests: the lab's answers are checked like any other, where a
        learner's check refuses them (:mod:`labcore.exercises.own`)."""
        return self._evaluate(answer, context, caller_depth=2, refuse_own=False)

    def hint(self, level: Any = 1) -> None:
        """Print hint number ``level`` (1 = gentlest); in a course's student mode the last hint is off.

        A level that is not a whole number from 1 (``nan``, ``"2"``, ``-1``) shows the first hint and says so."""
        hints = setting.visible_hints(self.hints)
        if not hints:
            print(f"{self.title}: no hints for this one" + ("." if setting.student_mode() else "; try solution()."))
            return
        asked = as_whole(level)
        if asked is None or asked < 1:
            print(f"(hint takes a whole number from 1, not {safe_repr(level)}: here is hint 1)")
            asked = 1
        level = asked
        text = hints[min(level, len(hints)) - 1]
        more = (f" (hint({level + 1}) says more)" if level < len(hints)
                else setting.last_hint_note())
        print(f"{self.title}, hint {min(level, len(hints))} of {len(hints)}{more}:\n{text}")

    def solution(self) -> None:
        """Print the worked solution (in a course's student mode, a line saying it is off)."""
        print(setting.solution_text(self.title, self._solution))

    def question(self) -> None:
        """Print the question."""
        print(self)

    def __repr__(self) -> str:
        return f"{self.title}\n{self._prompt_text()}"

    def _prompt_text(self) -> str:
        return self.prompt

    # -- for subclasses ---------------------------------------------------------
    def _check(self, answer: Any, **context: Any) -> str | None:
        raise NotImplementedError("an Exercise subclass implements _check(answer, **context)")

    def _given(self, answer: Any, caller_depth: int) -> Any:
        """The answer to check: the one passed, or else the notebook's variable ``var`` (read in the frame
        ``caller_depth`` above the caller's)."""
        if answer is _NOTHING and self.var is not None:
            answer = sys._getframe(caller_depth + 1).f_globals.get(self.var, _NOTHING)
        return answer

    def _evaluate(self, answer: Any, context: dict, caller_depth: int, refuse_own: bool = True) -> Result:
        answer = self._given(answer, caller_depth)
        early = self._early(answer)
        if early is not None:
            return early
        if self._runs_apart(answer):
            name = own.refused(answer, own.lab_answers(self)) if refuse_own else None   # read, not run: here
            if name is not None:
                return Result("incorrect", f"{self.title}: not quite. {own.refusal(name)}")
            return self._outcome(checker.check_apart(self, answer, context, time_limit=self.time_limit,
                                                     preload=self._preload(), refuse_own=refuse_own), answer)
        return self._judge_here(answer, context, refuse_own)

    def _judge_here(self, answer: Any, context: dict, refuse_own: bool = True) -> Result:
        """Refuse the lab's own answer (see :mod:`labcore.exercises.own`), else check in this process."""
        if refuse_own:
            name = own.refused(answer, own.lab_answers(self))
            if name is not None:
                return Result("incorrect", f"{self.title}: not quite. {own.refusal(name)}")
        return self._evaluate_here(answer, context)

    def _early(self, answer: Any) -> Result | None:
        """The verdicts that need no check: starter code, None, nan and inf."""
        how = f"q.check({self.var or 'answer'})"
        if _is_blank(answer):
            return Result("not attempted", f"{self.title}: not attempted yet. "
                          f"Replace ____ with your answer, then run {how}.")
        if answer is None or _not_finite(answer):
            why = ("None: nothing was computed (a function or cell without a return value?)"
                   if answer is None else f"{answer}: some step divided by zero or overflowed")
            return Result("incorrect", f"{self.title}: not quite. Your answer is {why}. "
                          f"This question takes {self.expects}.")
        return None

    def _runs_apart(self, answer: Any) -> bool:
        """Whether the check runs in a child process: the answer holds the learner's code."""
        return not is_plain(answer)

    def _preload(self) -> list[str]:
        """The lab's modules a check of this exercise imports (the child imports them once)."""
        names = {type(self).__module__}
        for value in vars(self).values():
            module = getattr(value, "__module__", None) if callable(value) else None
            if isinstance(module, str):
                names.add(module)
        return sorted(n for n in names if n.startswith("labcore."))

    def _outcome(self, outcome: checker.Outcome, answer: Any = None) -> Result:
        """The Result of a check run apart (see :class:`labcore.exercises.checker.Outcome`)."""
        kind, status, message = outcome
        wrong = f"{self.title}: not quite. "
        if kind == "verdict" and status in STATUSES:
            return Result(status, message)
        if kind == "verdict" and status == "raised":
            return Result("incorrect", wrong + f"Checking your answer raised {message}")
        if kind == "verdict" and status == "no check":
            return Result("not checked", f"{self.title}: this copy of the lab holds no check for this question "
                          "(a graded run's copy): the grader checks your answer.")
        if kind == "verdict" and status == "opaque":
            return Result("incorrect", wrong + f"Your answer is a {type_name(answer)}, which cannot be copied to "
                          f"where answers are checked; this question takes {self.expects}.")
        if kind == "timeout":
            return Result("incorrect", wrong + self._out_of_time())
        if kind in ("died", "unpicklable") or kind == "verdict":
            what = ("the process that checked it ended: " if kind == "died" else
                    "it cannot be sent to the process that checks it: " if kind == "unpicklable" else "")
            return Result("incorrect", wrong + f"Your answer could not be checked: {what}{safe_str(message)}.")
        return Result("incorrect", f"{self.title}: the check could not run ({message}); run the check again.")

    def _out_of_time(self) -> str:
        within = f"within {self.time_limit:g} s" if self.time_limit else "in time"
        return (f"Your code did not return {within}, so it was stopped: an endless loop, or a wait for something "
                "that never comes?")

    def _evaluate_here(self, answer: Any, context: dict) -> Result:
        """Run the check in this process (the checker's child process runs this one)."""
        try:
            with limit(self.time_limit):
                remark = self._check(answer, **context)
        except NotAttempted:
            return self._early(____)
        except Incorrect as wrong:
            return Result("incorrect", f"{self.title}: not quite. {safe_str(wrong, 4000)}")
        except OutOfTime:
            return Result("incorrect", f"{self.title}: not quite. {self._out_of_time()}")
        except (ImportError, CheckCouldNotRun) as err:      # the lab's own code, not the answer: say so
            return Result("incorrect", f"{self.title}: the check could not run ({type_name(err)}: "
                          f"{safe_str(err, 4000)}); restart the kernel and run the notebook's first cells again.")
        except KeyboardInterrupt:                            # Ctrl-C: the check stops, as any cell does
            raise
        except BaseException as err:                         # SystemExit, GeneratorExit, ...: still a verdict
            if callable(answer) or not isinstance(err, Exception):
                return Result("incorrect", f"{self.title}: not quite. Checking your answer raised "
                              f"{type_name(err)}: {safe_str(err)}")
            return Result("incorrect", f"{self.title}: not quite. Your answer, {describe_answer(answer)}, "
                          f"is not {self.expects}.")
        return Result("correct", f"{self.title}: correct!" + (f" {remark}" if remark else ""))


STATUSES = ("correct", "incorrect", "not attempted", "not checked")


class ValueExercise(Exercise):
    """A number (or array) compared with ``expected`` within a relative tolerance.

    Parameters
    ----------
    expected
        The right value, or a function of the exercise's ``given`` numbers
        (``expected(**given)``), so a question can use the learner's own
        measurement (see :meth:`given_values`).
    rtol, atol
        Accepted error: ``|answer - expected| <= atol + rtol * |expected|``.
    unit
        Shown after numbers in feedback, e.g. "GB/s".
    mistakes
        ``[(value_or_function, message), ...]``: answers that match a known
        mistake get that message instead of the generic one.
    given
        Numbers the question is about, passed to callable ``expected`` and
        ``mistakes`` entries; the prompt may show them as ``{name}`` fields.

    Example
    -------
    >>> q = ValueExercise("busbw", "busbw of 1 GB all_reduce on 4 ranks in 1 s?",
    ...                   expected=lambda nbytes, n, t: nbytes / t / 1e9 * 2 * (n - 1) / n,
    ...                   given=dict(nbytes=1e9, n=4, t=1.0), unit="GB/s",
    ...                   mistakes=[(lambda nbytes, n, t: nbytes / t / 1e9,
    ...                              "That is algbw; multiply by 2(n-1)/n.")])
    >>> q.check(1.0)
    busbw: not quite. That is algbw; multiply by 2(n-1)/n.
    """

    expects = "a number"

    def __init__(self, title: str, prompt: str, *, expected: Any, rtol: float = 1e-2,
                 atol: float = 0.0, unit: str = "", mistakes: Sequence[tuple[Any, str]] = (),
                 given: dict | None = None, **kwargs: Any):
        super().__init__(title, prompt, **kwargs)
        self.expected = expected
        self.rtol, self.atol, self.unit = rtol, atol, unit
        self.mistakes = list(mistakes)
        self.given = dict(given or {})

    def given_values(self, **given: Any) -> "ValueExercise":
        """Set the numbers the question is about (e.g. a measured time); returns self."""
        self.given.update(given)
        return self

    def _prompt_text(self) -> str:
        # a prompt may name the given numbers, e.g. "{time_us:.1f} us"
        return self.prompt.format(**self.given) if self.given else self.prompt

    def expected_value(self) -> Any:
        """The right answer for the current ``given`` numbers."""
        return self._value(self.expected)

    def _value(self, v: Any) -> Any:
        return v(**self.given) if callable(v) else v

    def _close(self, a: np.ndarray, b: Any) -> bool:
        """Whether the learner's values ``a`` (read by :func:`read_values`) match the lab's ``b``."""
        b = np.asarray(b, dtype=float)
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=self.rtol, atol=self.atol))

    def read_values(self, answer: Any) -> np.ndarray:
        """The answer as a float64 array (the lab's own reading of it), or :class:`Incorrect` saying
        what it is instead: text, an unordered set, a yes/no, or no number at all."""
        text = as_text(answer)
        if text is not None or issubclass(type(answer), bytes):
            shown = repr(text) if text is not None else safe_repr(answer)
            raise Incorrect(f"your answer is the text {shown}; give {self.expects} (no quotes).")
        if _holds_text(answer):
            raise Incorrect(f"your answer holds text ({_describe_answer(answer)}); give numbers, without quotes.")
        if issubclass(type(answer), (set, frozenset, dict)):
            raise Incorrect(f"your answer is a {type_name(answer)}, which keeps no order; give the "
                            "numbers in a list or a tuple, in the order asked.")
        if type(answer) in (bool, np.bool_):
            raise Incorrect(f"your answer is {bool(answer)}, a yes/no; give {self.expects}.")
        values = as_array(answer)
        if values is None:
            raise Incorrect(f"your answer, {_describe_answer(answer)}, is not {self.expects}.")
        if not np.isfinite(values).all():
            raise Incorrect("your answer holds nan or inf: some step divided by zero or overflowed.")
        return values

    def _check(self, answer: Any, **context: Any) -> str | None:
        values = self.read_values(answer)
        want = self.expected_value()
        if self._close(values, want):
            return None
        for value, message in self.mistakes:
            if self._close(values, self._value(value)):
                raise Incorrect(message)
        unit = f" {self.unit}" if self.unit else ""
        near = f"within {self.rtol:.0%} of " if self.rtol >= 0.005 else ""      # "within 0%" says nothing
        # how far off stays unsaid (a ratio would give the answer away); only a units slip is named
        hint = ""
        if np.ndim(want) == 0 and values.ndim == 0 and float(want) != 0 and float(values) != 0:
            ratio = float(values) / float(want)
            hint = (" It has the wrong sign." if ratio < 0 else
                    " It is off by a power of ten: check the units." if _power_of_ten(ratio) else "")
        raise Incorrect(f"you gave {_fmt(answer)}{unit}; that is not {near}the right value.{hint}")


def _power_of_ten(ratio: float) -> bool:
    exponent = math.log10(abs(ratio))
    return abs(exponent) >= 2.5 and abs(exponent - round(exponent)) < 0.05


class FunctionExercise(Exercise):
    """The learner's function, run on test cases and compared with a reference.

    Parameters
    ----------
    reference
        The correct function.
    cases
        Argument tuples (or ``(args, kwargs)`` pairs) to call both functions with.
    compare
        ``compare(got, want)`` -> True when equal enough; default: exact equality
        for plain values, ``numpy.allclose`` for arrays and tensors.
    describe
        ``describe(args, kwargs)`` -> text naming a case in feedback; by
        default the reference's parameter names with the case's values
        ("nbytes=1024, ranks=2"). Feedback names the failing case and what the
        learner's function returned, never the right result.

    Example
    -------
    >>> q = FunctionExercise("Ring steps", "Steps of a ring all_reduce on n ranks?",
    ...                      reference=lambda n: 2 * (n - 1), cases=[(2,), (4,), (8,)])
    >>> q.check(lambda n: n - 1)
    Ring steps: not quite. For n=2 you return 1, which is not right (hint() helps).
    """

    def __init__(self, title: str, prompt: str, *, reference: Callable, cases: Sequence[Any],
                 compare: Callable[[Any, Any], bool] | None = None,
                 describe: Callable[[tuple, dict], str] | None = None, **kwargs: Any):
        kwargs.setdefault("correct_example", reference)
        kwargs.setdefault("expects", "a function")
        super().__init__(title, prompt, **kwargs)
        self.reference = reference
        self.cases = [c if (len(c) == 2 and isinstance(c[1], dict)) else (tuple(c), {})
                      for c in cases]
        self.compare = compare or _equal
        self.describe = describe or _case_namer(reference)

    def _check(self, answer: Any, **context: Any) -> str | None:
        if not callable(answer):
            raise Incorrect(f"your answer, {_describe_answer(answer)}, is not {self.expects}.")
        for args, kwargs in self.cases:
            try:
                got = learner_code(answer, *args, **kwargs)
            except NotImplementedError:
                raise NotAttempted()
            except Exception as err:
                raise Incorrect(f"For {self.describe(args, kwargs)} your function raised "
                                f"{type_name(err)}: {safe_str(err)}")
            if _is_blank(got):
                raise NotAttempted()
            if got is None:
                raise Incorrect(f"For {self.describe(args, kwargs)} your function returned None: "
                                "is a `return` missing?")
            if _not_finite(got):
                raise Incorrect(f"For {self.describe(args, kwargs)} your function returned {_fmt(got)}: "
                                "some step divided by zero or overflowed.")
            want = self.reference(*args, **kwargs)
            if issubclass(type(got), (str, bytes)) and not issubclass(type(want), (str, bytes)):
                raise Incorrect(f"For {self.describe(args, kwargs)} your function returned the text {_fmt(got)}: "
                                "return the number itself, not a string.")
            if not self.compare(got, want):
                raise Incorrect(f"For {self.describe(args, kwargs)} you return {_fmt(got)}, "
                                "which is not right (hint() helps).")
        return f"({len(self.cases)} cases passed)" if len(self.cases) > 1 else None


def _case_namer(reference: Callable) -> Callable[[tuple, dict], str]:
    """``describe`` for a reference function: its parameter names beside a case's values."""
    import inspect

    try:
        names = [p.name for p in inspect.signature(reference).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):      # a builtin without a signature
        names = []

    def describe(args: tuple, kwargs: dict) -> str:
        parts = [f"{names[i]}={_fmt(a)}" if i < len(names) else _fmt(a) for i, a in enumerate(args)]
        return ", ".join(parts + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]) or "no arguments"
    return describe


class CustomExercise(Exercise):
    """An exercise whose check is any function.

    Parameters
    ----------
    checker
        ``checker(answer, **context)``: return ``None`` or a remark when right,
        raise :class:`Incorrect` saying what is wrong, or :class:`NotAttempted`.

    Example
    -------
    >>> def sorted_ranks(answer):
    ...     if list(answer) != sorted(answer):
    ...         raise Incorrect("the ranks are not in order.")
    >>> q = CustomExercise("Order", "List ranks 0..3 in order.", checker=sorted_ranks)
    >>> q.check([0, 2, 1, 3])
    Order: not quite. the ranks are not in order.
    """

    def __init__(self, title: str, prompt: str, *, checker: Callable[..., str | None],
                 **kwargs: Any):
        super().__init__(title, prompt, **kwargs)
        self.checker = checker

    def _check(self, answer: Any, **context: Any) -> str | None:
        return self.checker(answer, **context)
