"""What :mod:`labcore.exercises.core` calls into: the course setting and progress recording.

Kept in one small module so that the exercise framework needs one import and three calls:
``visible_hints`` and ``last_hint_note`` (hint), ``solution_text`` (solution) and ``note_attempt`` (check).
"""
from __future__ import annotations

from labcore.course.setting import SOLUTION_OFF, student_mode, visible_hints

__all__ = ["visible_hints", "last_hint_note", "solution_text", "note_attempt"]


def last_hint_note() -> str:
    """What follows the last hint's heading."""
    return " (that was the last hint)" if student_mode() else " (that was the last hint; solution() shows the answer)"


def solution_text(title: str, solution: str) -> str:
    """What ``solution()`` prints: the worked solution, or one line saying it is off."""
    if student_mode():
        return f"{title}: {SOLUTION_OFF}"
    return f"{title}, solution:\n{solution}"


def note_attempt(exercise, result) -> None:
    """Append the attempt to the learner's progress file; never raises (a check must not break)."""
    try:
        from labcore.course.tracking import record_attempt

        record_attempt(exercise, result)
    except Exception:           # a full disk, a read-only home, a broken file: the check still prints
        pass
