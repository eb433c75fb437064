"""Notebook 02 in a real JupyterLab, in headless Chromium, as a learner sees it; and the student release's
first notebook there, on the release's own package.

A JupyterLab server (loopback only, a free port, no token, a temporary root with a copy of the
notebook) serves notebook 02; Chromium, driven by playwright with the system's Chromium (no
browser download), opens it in a 1280 x 800 window with the file browser open, runs all cells,
presses play on the ring animation and checks that its frames change, that the explorer's widgets
render, that no cell's output is an error, and that every figure fits inside the notebook's width.
Screenshots go to the test's temporary folder.

Waits are generous and poll for a state (the machine may be loaded); nothing is timed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import labcore.sim as sim
from browser import (MISSING, PANEL, ALL_RUN, CAPTION, ERRORS, MISSING_TITLES, OVERFLOWS, PAINTED, notebook_page,
                     wait_for)
from labcore.course.release import build_release
from labcore.exercises import setting
from labcore.viz import captions

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_ring_allreduce.ipynb"

pytestmark = [pytest.mark.live, pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

RUN_ALL_S = 240         # every cell run (about 15 s on an idle 2-core machine)


def _screenshot(page, path: Path, locator=None) -> None:
    (locator or page).screenshot(path=str(path))


@pytest.mark.timeout(600)
def test_notebook_02_runs_plays_and_fits_in_a_browser(tmp_path):
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    with notebook_page(root, home, NOTEBOOK.name) as page:
        if not page.locator(".jp-FileBrowser").is_visible():   # the learner's usual layout
            page.evaluate("window.jupyterapp.commands.execute('filebrowser:activate')")
        page.wait_for_selector(".jp-FileBrowser", state="visible")
        _run_all_and_check(page, tmp_path)


def _run_all_and_check(page, shots: Path) -> None:
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(ALL_RUN, timeout=RUN_ALL_S * 1000, polling=1000)
    errors = page.evaluate(ERRORS)
    assert not errors, errors
    _screenshot(page, shots / "02_after_run_all.png")

    # the 4-rank ring animation: the first plotly figure with a play button
    flow = page.locator(".jp-Notebook .js-plotly-plot").filter(has=page.locator(".updatemenu-button")).first
    flow.scroll_into_view_if_needed()
    wait_for(lambda: flow.evaluate(CAPTION).startswith("before step 0"), 60, "the animation's first caption")
    _screenshot(page, shots / "02_chunk_flow_before.png", flow)
    flow.locator(".updatemenu-button").first.click()                     # ▶ play
    seen = set()

    def played_to_the_end():
        seen.add(flow.evaluate(CAPTION).replace("<br>", " "))
        return any(c.startswith("step 5 of 0–5") for c in seen)
    wait_for(played_to_the_end, 90, "the animation to play from the start to its last step", every_s=0.2)
    # each frame shown is one of the simulated run's steps, with its caption
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
    steps = [c for c in seen if not c.startswith("before")]
    assert all(any(c.startswith(cap) for cap in captions(trace)) for c in steps), (steps, captions(trace))
    _screenshot(page, shots / "02_chunk_flow_playing.png", flow)

    # the explorer: its ipywidgets and its FigureWidget render (no "Error displaying widget")
    explorer = page.locator(".jp-Notebook .jp-Cell").filter(has_text="lc.viz.explore(").last.locator(".jp-OutputArea")
    explorer.scroll_into_view_if_needed()
    wait_for(lambda: explorer.locator(".widget-dropdown").count() >= 2 and explorer.locator(".widget-slider").count() >= 3
              and explorer.locator(".js-plotly-plot").count() >= 2, 60,
              "the explorer's dropdowns, sliders and figures (chunk flow, link timeline) to render")
    assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
    explorer.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    _screenshot(page, shots / "02_explorer.png")

    # every figure, legend, slider and colour bar inside the notebook's width (the file browser is open),
    # and every axis title drawn;
    # JupyterLab lays out a cell's output only once it is on screen, so each figure is looked at there
    overflows, measured = {}, 0
    for k, gd in enumerate(page.locator(".jp-Notebook .js-plotly-plot").all()):
        gd.scroll_into_view_if_needed()
        gd.wait_for(state="visible")
        page.evaluate(PAINTED)
        _screenshot(page, shots / f"02_figure_{k}.png")
        title = gd.evaluate("gd => gd._fullLayout?.title?.text || 'untitled'")
        parts = gd.evaluate(OVERFLOWS) + [["axis title not drawn", t] for t in gd.evaluate(MISSING_TITLES)]
        measured += 1
        if parts:
            overflows[f"figure {k} ({title})"] = parts
    assert measured >= 6 and not overflows, overflows
    assert page.locator(".jp-FileBrowser").is_visible()
    report = {"figures": page.locator(".jp-Notebook .js-plotly-plot").count(), "captions seen": sorted(steps),
              "notebook width": page.locator(".jp-NotebookPanel").bounding_box()["width"]}
    (shots / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))


# code run in the page's kernel as a learner's new cell would run; returns what it printed (and any error)
_KERNEL_RUN = f"""async code => {{
  const future = {PANEL}.sessionContext.session.kernel.requestExecute({{code}});
  let out = '';
  future.onIOPub = msg => {{
    if (msg.header.msg_type === 'stream') out += msg.content.text;
    if (msg.header.msg_type === 'error') out += msg.content.ename + ': ' + msg.content.evalue;
  }};
  await future.done;
  return out;
}}"""

_PROBE = """import labcore, labcore.exercises.setting as setting
print("labcore from", labcore.__file__, "student:", setting.student_mode())
from labcore.exercises.scaling import q_sharp_gain
q_sharp_gain.check(2.0)
q_sharp_gain.hint()
q_sharp_gain.solution()
"""


@pytest.mark.timeout(600)
def test_the_student_releases_first_notebook_runs_in_a_browser_on_the_releases_labcore(tmp_path, monkeypatch):
    release = build_release(tmp_path / "release")
    first = sorted((release / "notebooks").glob("*.ipynb"))[0]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(release))          # the kernel imports the release's labcore, as a student's
    monkeypatch.delenv(setting.ENV, raising=False)
    with notebook_page(release / "notebooks", home, first.name) as page:
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(ALL_RUN, timeout=RUN_ALL_S * 1000, polling=1000)
        assert page.evaluate(ERRORS) == []
        overflows = {}
        for k, gd in enumerate(page.locator(".jp-Notebook .js-plotly-plot").all()):
            gd.scroll_into_view_if_needed()
            page.evaluate(PAINTED)
            parts = gd.evaluate(OVERFLOWS)
            if parts:
                overflows[k] = parts
        assert overflows == {}
        _screenshot(page, tmp_path / f"release_{first.stem}.png")
        probe = page.evaluate(_KERNEL_RUN, _PROBE)
    # the release's package, in the student setting; a check answers from its process apart, one hint is
    # left, and the solution is off
    assert f"labcore from {release / 'labcore' / '__init__.py'} student: True" in probe, probe
    assert "What SHARP bought: not quite." in probe and "hint 1 of 1 (that was the last hint)" in probe, probe
    assert setting.SOLUTION_OFF in probe and "480 / 380" not in probe and "Error" not in probe, probe
