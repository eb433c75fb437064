"""What the exercises show: everything (instructor) or no solutions and no last hints (student).

Student mode is on when the environment says ``LABCORE_COURSE=student`` or when the package
is a student release (``python -m labcore course build`` leaves a ``STUDENT`` file beside this
module). The course (:mod:`labcore.course`) sets it; the exercises read it. ``LABCORE_COURSE=instructor`` turns it off again; any other value turns it on, so a
typo never shows solutions. Checks work the same in both modes.

Example
-------
>>> import os
>>> os.environ["LABCORE_COURSE"] = "student"
>>> student_mode()
True
>>> os.environ["LABCORE_COURSE"] = "instructor"
>>> student_mode()
False
>>> del os.environ["LABCORE_COURSE"]
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "LABCORE_COURSE"
MARKER = Path(__file__).with_name("STUDENT")
SOLUTION_OFF = "solutions are off in this course: ask your instructor, or compare notes after the deadline."
LAST_HINT_OFF = "the last hint is off in this course"

__all__ = ["ENV", "mode", "student_mode", "visible_hints", "last_hint_note", "solution_text", "SOLUTION_OFF"]


def mode() -> str:
    """"student" or "instructor" (see the module docstring)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value == "instructor":
        return "instructor"
    if value or MARKER.exists():
        return "student"
    return "instructor"


def student_mode() -> bool:
    """Whether solutions and last hints are off."""
    return mode() == "student"


def visible_hints(hints: list[str]) -> list[str]:
    """The hints a learner may see: all of them, or all but the last in student mode.

    A student release has its last hints taken out already (it ships without them).
    """
    if MARKER.exists() or not student_mode():
        return list(hints)
    return list(hints[:-1])


def last_hint_note() -> str:
    """What follows the last hint's heading."""
    return " (that was the last hint)" if student_mode() else " (that was the last hint; solution() shows the answer)"


def solution_text(title: str, solution: str) -> str:
    """What ``solution()`` prints: the worked solution, or one line saying it is off."""
    if student_mode():
        return f"{title}: {SOLUTION_OFF}"
    return f"{title}, solution:\n{solution}"
