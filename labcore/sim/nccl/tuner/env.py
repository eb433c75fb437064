"""``NCCL_ALGO`` and ``NCCL_PROTO`` as NCCL reads them (tuning.cc ``parseList``, NCCL 2.30.7).

A value is a list of names, optionally negated with ``^``, optionally per collective:
``"Ring,Tree"`` allows only those two everywhere; ``"^LL128"`` allows all but LL128;
``"^LL128;allreduce:LL128"`` all but LL128, and only LL128 for all-reduce. Entries are
``;``-separated, the first may omit its ``function:`` prefix, names are case-insensitive.
Naming a collective resets its whole row, so ``NCCL_PROTO=^LL`` turns LL128 *on* even
where NCCL would leave it off by default.

Example
-------
>>> from labcore.sim.nccl.tuner.constants import ALGORITHMS
>>> m = enable_matrix("allreduce:^tree", ALGORITHMS, {})
>>> m["AllReduce"]["Tree"], m["AllReduce"]["Ring"], m["Broadcast"]["Tree"]
(0, 1, 1)
"""
from __future__ import annotations

from labcore.sim.nccl.tuner.constants import ALGORITHMS, FUNCTIONS

__all__ = ["enable_matrix"]


def enable_matrix(text: str | None, names: tuple[str, ...], defaults: dict[str, int]) -> dict[str, dict[str, int]]:
    """function -> name -> 0 (off), 1 (on) or 2 (NCCL decides: LL128's default).

    Parameters
    ----------
    text : the variable's value, or None when it is not set.
    names : ALGORITHMS or PROTOCOLS.
    defaults : the value of each name before the variable is read (missing names: 1).
    """
    table = {f: {n: defaults.get(n, 1) for n in names} for f in FUNCTIONS}
    if text is None:
        return table
    what = "NCCL_ALGO" if names == ALGORITHMS else "NCCL_PROTO"
    lower = {n.lower(): n for n in names}
    for i, token in enumerate(t for t in text.split(";") if t):
        prefix, _, elems = token.partition(":")
        if not _:
            if i:
                raise ValueError(f"{what}={text!r}: every entry after the first needs a prefix "
                                 "such as 'allreduce:'")
            prefix, elems = None, token
        on, off = (0, 1) if elems.startswith("^") else (1, 0)
        elems = elems.lstrip("^")
        funcs = [f for f in FUNCTIONS if prefix is None or f.lower() == prefix.lower()]
        if not funcs:
            raise ValueError(f"{what}={text!r}: unknown collective {prefix!r}; use one of "
                             f"{', '.join(f.lower() for f in FUNCTIONS)}")
        chosen = [e for e in elems.split(",") if e]
        for e in chosen:
            if e.lower() not in lower:
                raise ValueError(f"{what}={text!r}: unknown name {e!r}; use one of {', '.join(names)}")
        for f in funcs:
            table[f] = {n: off for n in names}
            for e in chosen:
                table[f][lower[e.lower()]] = on
    return table
