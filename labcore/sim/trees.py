"""Deprecated (kept for one release): the tree shapes are :mod:`labcore.sim.tree_shapes`, apart
from the tree schedules (:mod:`labcore.sim.schedules.tree`). Every name here warns and forwards."""
from __future__ import annotations

import warnings

from labcore.sim import tree_shapes

__all__: list[str] = []


def __getattr__(name: str):
    if name not in tree_shapes.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"labcore.sim.trees.{name} is deprecated: use labcore.sim.tree_shapes.{name}", DeprecationWarning,
                  stacklevel=2)
    return getattr(tree_shapes, name)
