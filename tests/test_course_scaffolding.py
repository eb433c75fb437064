"""Course scaffolding: objectives, prerequisites and times; 00's map; core and optional parts; the
explorer's size; the coverage table of the brief's 25 points."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _text(cell) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_opens_with_objectives_prerequisites_and_a_measured_time(path):
    cells = _cells(path)
    assert _text(cells[0]).startswith(f"# {path.name[:2]} ")
    first = cells[1]
    assert "objectives" in first["metadata"].get("tags", []), "cell 1 is the objectives cell"
    text = _text(first)
    assert text.startswith("**In this notebook** you will\n- ")
    assert "**Before you start:**" in text
    assert re.search(r"\*\*Time:\*\* about \d+ minutes? to run; about \d+ minutes to work through\.", text), text


def test_the_welcome_notebook_maps_every_notebook_as_required_or_optional():
    text = _text(_cells(ROOT / "notebooks" / "00_welcome.ipynb")[0])
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\d\d) .*\|$", text, re.M)}
    assert sorted(rows) == [p.name[:2] for p in NOTEBOOKS]
    for row in rows.values():
        assert ("required" in row) != ("optional" in row), row
        assert re.search(r"\d+ min", row), row


def _defined_and_used(source: str):
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    defined, used = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return defined, used


def _optional_ranges(cells):
    """Cell index ranges marked going deeper: from such a heading to the next core heading or a heading at its level."""
    ranges, start, level = [], None, None
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for line in _text(cell).splitlines():
            m = re.match(r"(#+) (.*)", line)
            if not m:
                continue
            depth, title = len(m.group(1)), m.group(2)
            if start is not None and depth <= level and "Going deeper (optional)" not in title:
                ranges.append((start, i))
                start = None
            if "Going deeper (optional)" in title and start is None:
                start, level = i, depth
    if start is not None:
        ranges.append((start, len(cells)))
    return ranges


@pytest.mark.parametrize("number", ["03", "07"])
def test_the_long_notebooks_split_core_from_optional_depth_and_the_core_needs_nothing_optional(number):
    path = next((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
    cells = _cells(path)
    headings = [line for c in cells if c["cell_type"] == "markdown" for line in _text(c).splitlines()
                if line.startswith("#")]
    assert "# Core" in headings and any("Going deeper (optional)" in h for h in headings)
    exercises = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and re.search(r"q_\w+\.check\(", _text(c))]
    ranges = _optional_ranges(cells)
    assert ranges and exercises
    optional = {i for a, b in ranges for i in range(a, b)}
    assert not optional & set(exercises), "every exercise is in the core"
    core_defined = set()
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        defined, used = _defined_and_used(_text(cell))
        if i in optional:
            continue
        needs = used - core_defined - set(dir(__builtins__)) - {"display", "get_ipython", "__builtins__"}
        optional_only = set()
        for j in sorted(optional):
            if j < i and cells[j]["cell_type"] == "code":
                optional_only |= _defined_and_used(_text(cells[j]))[0]
        assert not (needs & optional_only - core_defined), (i, needs & optional_only)
        core_defined |= defined


def test_the_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert f"| `{path.stem}` |" in readme, path.stem


@pytest.mark.parametrize("ranks, topology", [(8, "nvswitch8"), (32, "uniform"), (4, "ring")])
def test_the_explorer_fits_an_800_pixel_window(ranks, topology):
    from labcore.viz.explorer import FLOW_HEIGHT, TIMELINE_HEIGHT, Explorer

    ex = Explorer(ranks=ranks, nbytes=1 << 20, topology=topology)
    band, message, flow, timeline = ex.widget().children
    assert flow is ex.figure and timeline is ex.timeline
    assert ex.figure.layout.height == FLOW_HEIGHT and ex.timeline.layout.height <= TIMELINE_HEIGHT
    rows = band.children[0].children
    assert len(rows) == 3 and all(len(r.children) == 2 for r in rows)
    assert band.children[1] is ex.numbers and "font-size:85%" in ex.numbers.value   # beside the controls, small
    # the numbers (7 rows of ~17 px) beside the controls, then both figures: under 800 px (1,430 before)
    assert max(3 * 34, 7 * 17) + ex.figure.layout.height + ex.timeline.layout.height <= 800
    font = ex.timeline.layout.yaxis.tickfont.size
    rows_px = (ex.timeline.layout.height - 100) / len(ex.timeline.layout.yaxis.ticktext)
    assert font <= rows_px or ex.timeline.layout.yaxis.showticklabels is False   # labels never overlap


def test_the_coverage_table_covers_the_briefs_25_points_with_real_notebooks_and_exercises():
    from labcore.course.catalog import all_exercises

    names = {name.split(".")[1] for name in all_exercises()}
    text = (ROOT / "docs" / "instructors.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.+?) \| (.+?) \| (.+?) \|$", text, re.M)
    assert [int(r[0]) for r in rows] == list(range(1, 26))
    numbers = {p.name[:2] for p in NOTEBOOKS}
    for number, _, taught, checked in rows:
        assert set(re.findall(r"\b(\d\d)\b", taught)) <= numbers and re.search(r"\b\d\d\b", taught), number
        named = set(re.findall(r"`(q_\w+)`", checked))
        assert named and named <= names, (number, named - names)
