"""labcore's imports run one way: no circle between its modules, and no import up the layers.

Every import is read from the source, the lazy ones included: ``import``/``from ... import`` at any
depth (inside functions too) and the modules a lazy ``__getattr__`` loads with ``importlib`` (any
string in such a module that names a labcore module). An edge to a package is an edge to its
``__init__``. The layers are the design's (docs/architecture.md, "The layers"): each room lists the
rooms it may import from; a room may import its own modules, but never in a circle.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "labcore"

BASE = ("labcore.collectives", "labcore.validate", "labcore.files", "labcore.events")
SIM = ("labcore.sim.core", "labcore.sim.nccl", "labcore.sim.machines", "labcore.sim.simulation",
       "labcore.sim.apps")
# room -> the rooms it may import (besides itself); the longest matching prefix names a module's room
ROOMS = {
    "base": (),
    "labcore.readers": ("base",),
    "labcore.sim.core": ("base",),
    "labcore.sim.nccl": ("base", "labcore.sim.core"),
    "labcore.sim.machines": ("base", "labcore.sim.core", "labcore.sim.nccl"),
    "labcore.sim.simulation": ("base", "labcore.sim.core", "labcore.sim.nccl", "labcore.sim.machines"),
    "labcore.sim.apps": ("base", "labcore.readers", *SIM[:4]),
    "labcore.sim": ("base", "labcore.readers", *SIM),
    "labcore.live": ("base", "labcore.readers"),
    "labcore.bench": ("base", "labcore.readers", "labcore.live"),
    "labcore.evidence": ("base", "labcore.readers", "labcore.live", "labcore.bench"),
    "labcore.viz": ("base", "labcore.readers", "labcore.sim", *SIM),
    "labcore.exercises": ("base", "labcore.readers", "labcore.sim", *SIM, "labcore.live", "labcore.bench",
                          "labcore.evidence", "labcore.viz"),
    "labcore.course": ("base", "labcore.readers", "labcore.exercises"),
    "labcore": ("*",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The labcore module ``name`` loads: itself, or the package it is an attribute of."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str) -> set[str]:
    """The labcore modules ``name`` imports, at module level or inside functions."""
    path = modules()[name]
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            found.update(f"{base}.{a.name}" for a in node.names)    # a module, or a name of ``base``
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            dynamic = True
    if dynamic:         # a lazy loader: the labcore modules its strings name
        found.update(s.value for s in ast.walk(tree) if isinstance(s, ast.Constant) and isinstance(s.value, str)
                     and s.value.startswith("labcore.") and s.value in modules())
    out = {_resolve(f) for f in found if f == "labcore" or f.startswith("labcore.")}
    return {m for m in out if m and m != name}


@lru_cache(maxsize=None)
def graph() -> dict[str, frozenset]:
    return {name: frozenset(imports_of(name)) for name in modules()}


def circles(edges: dict) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def room_of(name: str) -> str:
    if name in BASE:
        return "base"
    best = max((r for r in ROOMS if name == r or name.startswith(r + ".")), key=len)
    return best


def upward(edges: dict) -> list[str]:
    """Every import from a room to one it may not import."""
    bad = []
    for src, targets in sorted(edges.items()):
        room = room_of(src)
        allowed = ROOMS[room]
        for dst in sorted(targets):
            there = room_of(dst)
            if there != room and "*" not in allowed and there not in allowed:
                bad.append(f"{src} -> {dst} ({room} may import {', '.join(allowed) or 'nothing of the lab'})")
    return bad


def test_the_graph_reads_every_kind_of_import():
    edges = graph()
    assert "labcore.live.cluster" in edges["labcore.live.magic"]          # a module-level import
    assert "labcore.course" in edges["labcore"]                           # a lazy one, inside a function
    assert "labcore.live.cluster" in edges["labcore.live"]                # importlib, by a string


def test_no_import_circle_inside_labcore():
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checker_finds_a_circle_and_an_upward_import():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward({"labcore.sim.core.engine": {"labcore.sim.machines.topologies"}})
    assert not upward({"labcore.sim.machines.topologies": {"labcore.sim.core.engine"}})


def test_nothing_imports_up_the_layers():
    bad = upward(graph())
    assert not bad, "imports up the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(modules()))
def test_every_module_has_a_room(name):
    assert room_of(name) in ROOMS


@pytest.mark.live
def test_readers_import_no_torch_and_a_rank_imports_no_reader():
    import subprocess
    import sys

    readers = [m for m in modules() if m.startswith("labcore.readers")]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in readers)
            + "assert 'torch' not in sys.modules, 'a reader imported torch'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # what every rank imports before it runs anything: the worker, without pandas or the parsers
    code = ("import sys, labcore.live.worker\n"
            "loaded = {m for m in sys.modules if m == 'pandas' or m.startswith(('labcore.readers.nccl', "
            "'labcore.readers.profiler', 'labcore.sim'))}\n"
            "assert not loaded, sorted(loaded)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
