"""Notebook 02 in a real JupyterLab, in headless Chromium, as a learner sees it.

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
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import labcore.sim as sim
from labcore.viz import captions

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_ring_allreduce.ipynb"
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

try:
    from playwright.sync_api import sync_playwright
except ImportError:                              # the test extra brings it
    sync_playwright = None
try:
    import jupyterlab  # noqa: F401
except ImportError:
    jupyterlab = None

pytestmark = [
    pytest.mark.live, pytest.mark.browser, pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: `apt-get install chromium` "
                                                "to run notebook 02 in a real browser"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install -e '.[test]')"),
    pytest.mark.skipif(jupyterlab is None, reason="jupyterlab is not installed (pip install -e '.[test]')"),
]

WIDTH, HEIGHT = 1280, 800
START_S = 90            # the server answering, and the page showing the notebook
RUN_ALL_S = 240         # every cell run (about 15 s on an idle 2-core machine)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, timeout_s: float, what: str, every_s: float = 0.5):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(every_s)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def _start_lab(root: Path, home: Path) -> tuple[subprocess.Popen, int]:
    """JupyterLab on 127.0.0.1 with no token, its settings, runtime files and workspaces in ``home``."""
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_DATA_DIR=str(home / "data"), IPYTHONDIR=str(home / "ipython"), JUPYTER_PLATFORM_DIRS="1")
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
               "--ServerApp.password=", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
               f"--LabApp.workspaces_dir={home / 'workspaces'}", f"--LabApp.user_settings_dir={home / 'settings'}",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]             # nothing that reaches the internet
    if os.geteuid() == 0:                                        # CI runs as root
        command.append("--allow-root")
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    with open(home / "jupyter.log", "w") as log:
        # its own process group, so that the kernel goes with it at the end
        server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    return server, port


def _stop_lab(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)    # the server shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(server.pid, signal.SIGKILL)    # anything of the group still running
    except ProcessLookupError:
        pass
    server.wait(timeout=30)


# JavaScript run in the page; `window.jupyterapp` is there because of expose_app_in_browser.
_PANEL = "window.jupyterapp?.shell?.currentWidget"
_KERNEL_IDLE = f"() => {_PANEL}?.sessionContext?.session?.kernel?.status === 'idle'"
_ALL_RUN = f"""() => {{
  const panel = {_PANEL};
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return panel.sessionContext.session.kernel.status === 'idle'
         && cells.every(c => c.model.executionCount !== null && c.promptNode.textContent.indexOf('*') < 0);
}}"""
_ERRORS = f"""() => {_PANEL}.content.widgets.filter(c => c.model.type === 'code').flatMap((c, i) =>
  c.model.outputs.toJSON().filter(o => o.output_type === 'error').map(o => `cell ${{i}}: ${{o.ename}}: ${{o.evalue}}`))"""
_CAPTION = "gd => gd._fullData[gd._fullData.length - 1].text[0]"
# a plotly figure and its parts against the notebook's output area: [[part, overflow in px], ...]
_OVERFLOWS = """gd => {
  const area = gd.closest('.jp-OutputArea-output') || gd.closest('.jp-Cell');
  const limit = area.getBoundingClientRect(), out = [];
  const parts = [['figure', gd], ...['.legend', '.slider-container', '.updatemenu-container', '.colorbar']
    .flatMap(sel => Array.from(gd.querySelectorAll(sel)).map(el => [sel, el]))];
  for (const [name, el] of parts) {
    const box = el.getBoundingClientRect();
    if (box.width === 0) continue;
    const over = Math.max(box.right - limit.right, limit.left - box.left);
    if (over > 1) out.push([name, Math.round(over)]);
  }
  return out;
}"""
# axis titles a figure asks for but plotly.js did not draw (a bare-string title in an unvalidated figure)
_MISSING_TITLES = """gd => {
  const want = Object.entries(gd.layout).filter(([k, v]) => /^[xy]axis[0-9]*$/.test(k) && v && v.title)
    .map(([k, v]) => typeof v.title === 'string' ? v.title : v.title.text).filter(Boolean);
  const drawn = Array.from(gd.querySelectorAll('text[class$="title"]')).map(t => t.textContent);
  return want.filter(t => !drawn.includes(t));
}"""
_PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def _screenshot(page, path: Path, locator=None) -> None:
    (locator or page).screenshot(path=str(path))


@pytest.mark.timeout(600)
def test_notebook_02_runs_plays_and_fits_in_a_browser(tmp_path):
    root, home = tmp_path / "root", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    server, port = _start_lab(root, home)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: server.poll() is not None or _answers(f"{base}/api/status"), START_S,
                  "the JupyterLab server to answer")
        assert server.poll() is None, (home / "jupyter.log").read_text()[-3000:]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                page.set_default_timeout(START_S * 1000)
                page.goto(f"{base}/lab/tree/{NOTEBOOK.name}")
                page.wait_for_function(_KERNEL_IDLE, timeout=START_S * 1000, polling=500)
                if not page.locator(".jp-FileBrowser").is_visible():   # the learner's usual layout
                    page.evaluate("window.jupyterapp.commands.execute('filebrowser:activate')")
                page.wait_for_selector(".jp-FileBrowser", state="visible")
                _run_all_and_check(page, tmp_path)
            finally:
                browser.close()
    finally:
        _stop_lab(server)


def _run_all_and_check(page, shots: Path) -> None:
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(_ALL_RUN, timeout=RUN_ALL_S * 1000, polling=1000)
    errors = page.evaluate(_ERRORS)
    assert not errors, errors
    _screenshot(page, shots / "02_after_run_all.png")

    # the 4-rank ring animation: the first plotly figure with a play button
    flow = page.locator(".jp-Notebook .js-plotly-plot").filter(has=page.locator(".updatemenu-button")).first
    flow.scroll_into_view_if_needed()
    _wait_for(lambda: flow.evaluate(_CAPTION).startswith("before step 0"), 60, "the animation's first caption")
    _screenshot(page, shots / "02_chunk_flow_before.png", flow)
    flow.locator(".updatemenu-button").first.click()                     # ▶ play
    seen = set()

    def played_to_the_end():
        seen.add(flow.evaluate(_CAPTION).replace("<br>", " "))
        return any(c.startswith("step 5 of 0–5") for c in seen)
    _wait_for(played_to_the_end, 90, "the animation to play from the start to its last step", every_s=0.2)
    # each frame shown is one of the simulated run's steps, with its caption
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
    steps = [c for c in seen if not c.startswith("before")]
    assert all(any(c.startswith(cap) for cap in captions(trace)) for c in steps), (steps, captions(trace))
    _screenshot(page, shots / "02_chunk_flow_playing.png", flow)

    # the explorer: its ipywidgets and its FigureWidget render (no "Error displaying widget")
    explorer = page.locator(".jp-Notebook .jp-Cell").filter(has_text="lc.viz.explore(").last.locator(".jp-OutputArea")
    explorer.scroll_into_view_if_needed()
    _wait_for(lambda: explorer.locator(".widget-dropdown").count() >= 2 and explorer.locator(".widget-slider").count() >= 3
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
        page.evaluate(_PAINTED)
        _screenshot(page, shots / f"02_figure_{k}.png")
        title = gd.evaluate("gd => gd._fullLayout?.title?.text || 'untitled'")
        parts = gd.evaluate(_OVERFLOWS) + [["axis title not drawn", t] for t in gd.evaluate(_MISSING_TITLES)]
        measured += 1
        if parts:
            overflows[f"figure {k} ({title})"] = parts
    assert measured >= 6 and not overflows, overflows
    assert page.locator(".jp-FileBrowser").is_visible()
    report = {"figures": page.locator(".jp-Notebook .js-plotly-plot").count(), "captions seen": sorted(steps),
              "notebook width": page.locator(".jp-NotebookPanel").bounding_box()["width"]}
    (shots / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
