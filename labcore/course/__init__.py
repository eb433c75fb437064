"""Running the lab as a course: the student setting, the student release, grading and progress.

- the course setting (:mod:`labcore.exercises.setting`): ``LABCORE_COURSE=student``, or a student release,
  turns ``solution()`` and each exercise's last hint off; checks work as before;
- :func:`build_release`: the student release (``python -m labcore course build OUT``);
- :func:`make_assignment`, :func:`read_grades`: nbgrader assignments whose test cells hand each answer
  in, judged by the lab's own checks out of the submission's reach (:mod:`labcore.course.judge`), each
  submission confined while it runs (:mod:`labcore.course.autograde`, :mod:`labcore.course.jail`);
- :func:`progress`, :func:`class_view`: every ``check()`` is recorded; a learner's table per
  notebook, and the class's table and plot for the instructor.

Example
-------
>>> import labcore as lc
>>> lc.course.mode() in ("student", "instructor")
True
"""
from __future__ import annotations

import importlib

_NAMES = {
    "mode": "labcore.exercises.setting", "student_mode": "labcore.exercises.setting",
    "progress": "labcore.course.tracking", "class_view": "labcore.course.tracking",
    "class_table": "labcore.course.tracking", "class_plot": "labcore.course.tracking",
    "attempts": "labcore.course.tracking", "progress_path": "labcore.course.tracking",
    "build_release": "labcore.course.release",
    "make_assignment": "labcore.course.grading", "read_grades": "labcore.course.grading",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'labcore.course' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
