"""Which notebook each exercise module belongs to, and every exercise of the lab by notebook.

An exercise is named ``<module>.<variable>`` (``operations.q_all_reduce``), where ``<module>``
is the module (or package) under ``labcore.exercises`` that defines it; the notebook is the one
that imports that module (``tests/test_course_progress.py`` checks this map against the notebooks).

Example
-------
>>> notebook_of("labcore.exercises.ring")
'02'
>>> notebook_of("labcore.exercises.ring.checks")      # a module split into a package
'02'
"""
from __future__ import annotations

import importlib
import sys

# module under labcore.exercises -> the notebook that asks its questions
NOTEBOOK_OF = {
    "operations": "01", "ring": "02", "trees": "03", "measuring": "04", "data_parallel": "05",
    "sharding": "06", "scaling": "07", "nccl": "08", "hangs": "09", "evidence": "10", "operating": "11",
}
NOTEBOOK_TITLES = {
    "00": "welcome", "01": "collectives", "02": "ring all-reduce", "03": "cost models", "04": "measuring",
    "05": "data parallel", "06": "sharded and tensor parallel", "07": "scaling out", "08": "inside NCCL",
    "09": "when collectives hang", "10": "evidence under load", "11": "the operating model",
}
PREFIX = "labcore.exercises."

__all__ = ["NOTEBOOK_OF", "NOTEBOOK_TITLES", "notebook_of", "exercise_name", "all_exercises"]


def notebook_of(module: str) -> str:
    """The notebook ("01".."11") whose questions ``module`` holds, or "" for an exercise of no notebook."""
    if not module.startswith(PREFIX):
        return ""
    return NOTEBOOK_OF.get(module[len(PREFIX):].split(".")[0], "")


_NAMES: dict[int, tuple[str, str]] = {}


def exercise_name(exercise) -> tuple[str, str]:
    """``("operations.q_all_reduce", "01")`` for an exercise of the lab; ``(title, "")`` for any other.

    Found by looking the object up in the loaded ``labcore.exercises`` modules (cached by id).
    """
    key = id(exercise)
    if key not in _NAMES:
        from labcore.exercises.core import Exercise

        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith(PREFIX) or module is None:
                continue
            for var, value in _public_exercises(module, Exercise):
                if value is exercise:
                    short = module_name[len(PREFIX):].split(".")[0]
                    _NAMES[key] = (f"{short}.{var}", notebook_of(module_name))
                    return _NAMES[key]
        return (str(getattr(exercise, "title", "exercise")), "")
    return _NAMES[key]


def all_exercises() -> dict[str, tuple[str, object]]:
    """``{"operations.q_all_reduce": ("01", exercise), ...}`` for every exercise of every notebook."""
    from labcore.exercises.core import Exercise

    found = {}
    for short, notebook in NOTEBOOK_OF.items():
        try:
            module = importlib.import_module(PREFIX + short)
        except ModuleNotFoundError as err:
            if err.name != PREFIX + short:
                raise
            continue                        # a notebook whose exercises this build leaves out
        for name, value in _public_exercises(module, Exercise):
            found[f"{short}.{name}"] = (notebook, value)
    return found


def _public_exercises(module, kind):
    """(name, exercise) for the q_ names a module (or the package's modules) defines; an alias of an
    exercise (an old name kept for one release) is left out, the name in ``__all__`` order first."""
    names = list(getattr(module, "__all__", ())) + list(vars(module))
    seen, ids = [], set()
    for name in dict.fromkeys(names):
        value = getattr(module, name, None)
        if name.startswith("q_") and isinstance(value, kind) and id(value) not in ids:
            seen.append((name, value))
            ids.add(id(value))
    return seen
