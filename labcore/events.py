"""What happened in the lab, for whoever listens: a small, synchronous publish-and-subscribe.

The exercises announce each checked attempt here and import nothing of the course; the course's
progress file listens (``labcore/__init__.py`` wires it at import). A listener that fails never
breaks the code that announced the event: a check must print its verdict whatever a full disk or a
read-only home does to the progress file.

Example
-------
>>> seen = []
>>> listen("attempt", lambda **event: seen.append(event["result"]))
>>> announce("attempt", exercise=None, result="correct")
>>> seen
['correct']
"""
from __future__ import annotations

__all__ = ["listen", "announce", "KINDS"]

KINDS = ("attempt",)
"""The events there are: ``attempt`` (``exercise``, ``result``: an exercise was checked)."""

_LISTENERS: dict[str, list] = {kind: [] for kind in KINDS}   # kind -> callables, in the order added


def listen(kind: str, listener) -> None:
    """Call ``listener(**event)`` on every event of ``kind`` (once, however often it is added)."""
    if kind not in _LISTENERS:
        raise ValueError(f"unknown event {kind!r}; choose one of {', '.join(KINDS)}")
    if listener not in _LISTENERS[kind]:
        _LISTENERS[kind].append(listener)


def announce(kind: str, **event) -> None:
    """Tell every listener of ``kind``; what a listener raises is dropped (see the module docstring)."""
    for listener in list(_LISTENERS[kind]):
        try:
            listener(**event)
        except Exception:           # a full disk, a read-only home, a broken file: the announcer goes on
            pass
