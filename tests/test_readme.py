"""The README's commands are the ones CI runs."""
import os
import pathlib
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
import pytest

pytestmark = pytest.mark.live

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _commands():
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in _commands() if "pytest" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text()


def _lab_command():
    return next(c for c in _commands() if "jupyter lab" in c)


def test_lab_command_starts_jupyterlab_on_the_notebooks():
    assert _lab_command().endswith("notebooks/")


def test_lab_command_starts_even_as_root(tmp_path):
    """The command's own JupyterLab arguments, run here (CI runs as root), serve the lab."""
    args = shlex.split(_lab_command().split("&&")[-1])
    assert args[0] == ".venv/bin/jupyter" and args[1] == "lab"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jupyter = pathlib.Path(sys.executable).with_name("jupyter")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    proc = subprocess.Popen([str(jupyter), *args[1:], "--no-browser", f"--port={port}",
                             "--ServerApp.port_retries=0", "--ServerApp.token=", "--ServerApp.password="],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/tree/00_welcome.ipynb", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
