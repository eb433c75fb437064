"""JupyterLab in headless Chromium for the browser tests: a server on loopback with nothing that reaches the
internet, the page's JavaScript probes (kernel idle, errors in outputs, figures that overflow the notebook's
width, axis titles not drawn), and polling waits (the machine may be loaded; nothing is timed).

Used by tests/test_browser_notebook.py (notebook 02 run in the browser) and tests/notebook_render.py (every
notebook, as nbval ran it, rendered)."""
from __future__ import annotations

import contextlib
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

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

try:
    from playwright.sync_api import sync_playwright
except ImportError:                              # the test extra brings it
    sync_playwright = None
try:
    import jupyterlab  # noqa: F401
except ImportError:
    jupyterlab = None

# why a browser test cannot run here, or None
MISSING = ("no Chromium on this machine: `apt-get install chromium` to open the notebooks in a real browser"
           if CHROMIUM is None else "playwright is not installed (pip install -e '.[test]')" if sync_playwright is None
           else "jupyterlab is not installed (pip install -e '.[test]')" if jupyterlab is None else None)

WIDTH, HEIGHT = 1280, 800
START_S = 90            # the server answering, and the page showing the notebook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str, every_s: float = 0.5):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}")
        time.sleep(every_s)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def start_lab(root: Path, home: Path, render_all: bool = False) -> tuple[subprocess.Popen, int]:
    """JupyterLab on 127.0.0.1 with no token, its settings, runtime files and workspaces in ``home``;
    ``render_all`` lays out every cell of a notebook at once (no windowing), so that every output renders
    without scrolling to it."""
    port = free_port()
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
    if render_all:
        notebook = home / "settings" / "@jupyterlab" / "notebook-extension"
        notebook.mkdir(parents=True)
        (notebook / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    with open(home / "jupyter.log", "w") as log:
        # its own process group, so that the kernel goes with it at the end
        server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    return server, port


def stop_lab(server: subprocess.Popen) -> None:
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


@contextlib.contextmanager
def notebook_page(root: Path, home: Path, notebook: str):
    """JupyterLab serving ``root`` (its settings in ``home``), and Chromium at ``notebook`` in a WIDTH x HEIGHT
    window once its kernel is idle: yields the page; the browser and the server stop at the end."""
    server, port = start_lab(root, home)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is not None or answers(f"{base}/api/status"), START_S,
                 "the JupyterLab server to answer")
        assert server.poll() is None, (home / "jupyter.log").read_text()[-3000:]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                page.set_default_timeout(START_S * 1000)
                page.goto(f"{base}/lab/tree/{notebook}")
                page.wait_for_function(KERNEL_IDLE, timeout=START_S * 1000, polling=500)
                yield page
            finally:
                browser.close()
    finally:
        stop_lab(server)


# JavaScript run in the page; `window.jupyterapp` is there because of expose_app_in_browser.
PANEL = "window.jupyterapp?.shell?.currentWidget"
KERNEL_IDLE = f"() => {PANEL}?.sessionContext?.session?.kernel?.status === 'idle'"
ALL_RUN = f"""() => {{
  const panel = {PANEL};
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return panel.sessionContext.session.kernel.status === 'idle'
         && cells.every(c => c.model.executionCount !== null && c.promptNode.textContent.indexOf('*') < 0);
}}"""
ERRORS = f"""() => {PANEL}.content.widgets.filter(c => c.model.type === 'code').flatMap((c, i) =>
  c.model.outputs.toJSON().filter(o => o.output_type === 'error').map(o => `cell ${{i}}: ${{o.ename}}: ${{o.evalue}}`))"""
CAPTION = "gd => gd._fullData[gd._fullData.length - 1].text[0]"
# a plotly figure and its parts against the notebook's output area: [[part, overflow in px], ...]
OVERFLOWS = """gd => {
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
MISSING_TITLES = """gd => {
  const want = Object.entries(gd.layout).filter(([k, v]) => /^[xy]axis[0-9]*$/.test(k) && v && v.title)
    .map(([k, v]) => typeof v.title === 'string' ? v.title : v.title.text).filter(Boolean);
  const drawn = Array.from(gd.querySelectorAll('text[class$="title"]')).map(t => t.textContent);
  return want.filter(t => !drawn.includes(t));
}"""
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
