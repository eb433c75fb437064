"""Handing an answer in: what a graded notebook's locked test cell does.

The test cell after each exercise cell calls ``hand_in("operations.q_all_reduce", answer)``. It
checks nothing and decides nothing: it turns the answer into data (:mod:`labcore.exercises.codec`:
values as values, functions and classes as their source), with the question's numbers the notebook
set (``given_values``, ``about``), and shows that as the cell's output, a JSON document of its own
type (:data:`MIME`). After the notebook has run, the grader (:mod:`labcore.course.autograde`) reads it
from the cell's output and has it judged out of the notebook's reach (:mod:`labcore.course.judge`).

Whatever a notebook does to this module, its patched copy can only hand in some answer, which the
judge then checks; it cannot reach the judge, the references or the grade.

Example
-------
>>> data = json.loads(payload("operations.q_all_reduce", 10))
>>> data["exercise"], data["answer"]
('operations.q_all_reduce', 10)
"""
from __future__ import annotations

import importlib
import json

from labcore.exercises import codec

__all__ = ["hand_in", "payload", "MIME"]

MIME = "application/vnd.labcore.handin+json"


def _question_state(name: str) -> dict:
    """What the notebook set on the question: its numbers, and the table it is about."""
    short, var = name.split(".", 1)
    try:
        q = getattr(importlib.import_module(f"labcore.exercises.{short}"), var)
    except (ImportError, AttributeError):
        return {}
    if hasattr(q, "state"):                        # a student release's question
        return q.state()
    state = {"given": getattr(q, "given", None), "result": getattr(q, "result", None)}
    return {k: v for k, v in state.items() if v is not None}


def payload(name: str, answer, **context) -> str:
    """The hand-in of ``answer`` to exercise ``name`` (catalog name), as JSON text."""
    data = {"labcore_handin": 1, "exercise": name, "answer": codec.encode(answer),
            "context": {k: codec.encode(v) for k, v in context.items()},
            "state": {k: codec.encode(v) for k, v in _question_state(name).items()}}
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    if len(text) > codec.MAX_BYTES:
        raise ValueError(f"the answer to {name} is {len(text) >> 20} MiB as data, over the "
                         f"{codec.MAX_BYTES >> 20} MiB the grader reads: hand in something smaller")
    return text


def hand_in(name: str, answer, **context) -> None:
    """Show the hand-in of ``answer`` as this cell's output (for the grader to read after the run)."""
    from IPython.display import display

    display({MIME: json.loads(payload(name, answer, **context)),
             "text/plain": f"{name}: handed in; the grader checks it"}, raw=True)
