"""Every notebook, as nbval has just run it, opened in JupyterLab in headless Chromium.

nbval runs a notebook's cells in a kernel and keeps each cell's outputs (``IPyNbCell.test_outputs``).
tests/conftest.py appends one more item to each notebook's cells, :class:`NotebookRender`: it writes the
notebook with those outputs, opens it in a 1280 x 800 window with the file browser open (every cell laid
out: no windowing) and checks what a learner would see: no cell's output is an error, every plotly figure
the notebook displayed is drawn by plotly.js, and every figure, with its legend, sliders and colour bar,
fits inside the notebook's width, its axis titles drawn. Widgets need a live kernel and are left to
tests/test_browser_notebook.py, which runs notebook 02 in the browser.

This module is a pytest plugin (pyproject.toml: ``-p notebook_render``, with tests/ on the path), so that a
notebook run on its own (``pytest notebooks/04_measuring.ipynb``) is rendered too. The item runs in the same
xdist worker as its notebook's cells (they share the file, and --dist loadfile
keeps a file together); one JupyterLab server and one browser serve every notebook of a worker, started
with its first and closed when the worker goes on to something else than a notebook. Nothing here executes a notebook
again, so the suite pays a page load per notebook, not a second run.
"""
from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest

from browser import (HEIGHT, MISSING, MISSING_TITLES, OVERFLOWS, START_S, WIDTH, answers, start_lab, stop_lab,
                     sync_playwright, wait_for, CHROMIUM)

PLOTLY = "application/vnd.plotly.v1+json"
RENDER_S = 120          # the page showing the notebook and plotly.js drawing its figures, on a loaded machine
_LAB: dict = {}         # this worker's server, browser and folders, once started


class NotebookRender(pytest.Item):
    """The notebook's outputs, as nbval's cells produced them, rendered in JupyterLab."""

    def runtest(self):
        if MISSING is not None:
            pytest.skip(MISSING)
        cells = [item for item in self.session.items if item.parent is self.parent and item is not self]
        outputs = [getattr(cell, "test_outputs", None) for cell in cells]
        if not cells or any(o is None for o in outputs):
            pytest.skip("not every cell of the notebook ran in this session (deselected, skipped or failed)")
        nb = copy.deepcopy(self.parent.nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert len(code) == len(outputs), (len(code), len(outputs))
        for k, (cell, outs) in enumerate(zip(code, outputs), start=1):
            cell.outputs = [dict(o) for o in outs]
            cell.execution_count = k
            for o in cell.outputs:
                if o.get("output_type") == "execute_result":
                    o["execution_count"] = k
        errors = [f"cell {k}: {o.get('ename')}: {o.get('evalue')}" for k, c in enumerate(code)
                  for o in c.outputs if o.get("output_type") == "error"]
        assert not errors, errors
        figures = sum(PLOTLY in o.get("data", {}) for c in code for o in c.outputs)
        report = _render(Path(str(self.parent.fspath)).name, nb, figures)
        print(f"{self.parent.name}: {figures} plotly figures displayed, {report['drawn']} drawn, none overflowing")
        assert not report["overflows"], report["overflows"]
        assert report["drawn"] >= figures, f"plotly.js drew {report['drawn']} of the {figures} figures"

    def reportinfo(self):
        return self.parent.fspath, None, f"{self.parent.name}: rendered in JupyterLab"


def pytest_collection_modifyitems(items: list) -> None:
    """After the last cell of each notebook nbval collected, its :class:`NotebookRender` item."""
    last = {}
    for k, item in enumerate(items):
        if str(item.fspath).endswith(".ipynb"):
            last[item.parent] = k
    for parent, k in sorted(last.items(), key=lambda pk: -pk[1]):
        render = NotebookRender.from_parent(parent, name="rendered in JupyterLab")
        for mark in ("live", "notebook", "browser", "slow"):
            render.add_marker(mark)
        render.add_marker(pytest.mark.timeout(START_S + RENDER_S + 60))
        items.insert(k + 1, render)


def _lab():
    """This worker's JupyterLab server, Chromium and one page with JupyterLab loaded (the file browser open, as
    a learner has it), started on first use."""
    if not _LAB:
        folder = Path(tempfile.mkdtemp(prefix="labcore-render-"))
        root, home = folder / "root", folder / "home"
        root.mkdir()
        home.mkdir()
        server, port = start_lab(root, home, render_all=True)
        base = f"http://127.0.0.1:{port}"
        pw = browser = None
        try:
            wait_for(lambda: server.poll() is not None or answers(f"{base}/api/status"), START_S,
                     "the JupyterLab server to answer")
            assert server.poll() is None, (home / "jupyter.log").read_text()[-3000:]
            pw = sync_playwright().start()
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.set_default_timeout(RENDER_S * 1000)
            page.goto(f"{base}/lab")
            page.wait_for_function("() => window.jupyterapp?.shell", timeout=START_S * 1000, polling=500)
            # wait for the layout's restore by a flag the page sets, not by awaiting the promise in evaluate():
            # playwright fails such a call if the page collects its promise first ("Resulting promise was
            # garbage collected"), which a loaded machine made happen
            page.evaluate("() => { window.jupyterapp.restored.then(() => { window.labRestored = true; }); }")
            page.wait_for_function("() => window.labRestored === true", timeout=START_S * 1000, polling=500)
            page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
        except BaseException:
            _close(pw, browser, server, folder)
            raise
        _LAB.update(folder=folder, root=root, server=server, playwright=pw, browser=browser, page=page)
    return _LAB


# the notebook's panel is kept on the page as window.rendered while it is looked at
_OPEN = """async path => {
  const app = window.jupyterapp;
  window.rendered = await app.commands.execute('docmanager:open', {path, activate: true});
  await window.rendered.context.ready;
  await window.rendered.revealed;
  return window.rendered.context.path;
}"""
_PANEL_PLOTS = "() => window.rendered.node.querySelectorAll('.js-plotly-plot').length"
_CLOSE = """async () => {
  await window.rendered?.close();
  window.rendered = null;
  // the kernel JupyterLab started for the notebook: nothing runs in it
  await window.jupyterapp.serviceManager.sessions.shutdownAll();
}"""


def _render(name: str, nb, figures: int) -> dict:
    """Open ``nb`` (outputs included) in JupyterLab; what plotly.js drew and what overflows the notebook."""
    lab = _lab()
    (lab["root"] / name).write_text(json.dumps(nb, ensure_ascii=False))
    page = lab["page"]
    try:
        assert page.evaluate(_OPEN, name) == name
        wait_for(lambda: page.evaluate(_PANEL_PLOTS) >= figures, RENDER_S,
                 f"plotly.js to draw the {figures} figures of {name}")
        plots = page.locator(f".jp-NotebookPanel[id='{page.evaluate('() => window.rendered.id')}'] .js-plotly-plot")
        overflows = {}
        for k, gd in enumerate(plots.all()):
            title = gd.evaluate("gd => gd._fullLayout?.title?.text || 'untitled'")
            parts = gd.evaluate(OVERFLOWS) + [["axis title not drawn", t] for t in gd.evaluate(MISSING_TITLES)]
            if parts:
                overflows[f"{name} figure {k} ({title})"] = parts
        return {"drawn": page.evaluate(_PANEL_PLOTS), "overflows": overflows}
    finally:
        page.evaluate(_CLOSE)


def _close(pw, browser, server, folder) -> None:
    import shutil

    try:
        if browser is not None:
            browser.close()
        if pw is not None:
            pw.stop()
    finally:
        stop_lab(server)
        shutil.rmtree(folder, ignore_errors=True)


def pytest_runtest_teardown(item, nextitem) -> None:
    """Close the lab once the worker moves on from notebooks: a test after it may count this process's
    children, and the next browser test needs the thread free of Playwright's event loop."""
    if isinstance(item, NotebookRender) and (nextitem is None or not str(nextitem.fspath).endswith(".ipynb")):
        _stop()


def _stop() -> None:
    if _LAB:
        lab = dict(_LAB)
        _LAB.clear()
        _close(lab["playwright"], lab["browser"], lab["server"], lab["folder"])


def pytest_sessionfinish(session, exitstatus) -> None:
    """Close this worker's browser and server, if a notebook was rendered and they are still open."""
    _stop()
