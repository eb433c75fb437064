"""ruff over the whole checkout, with the rules set in pyproject.toml (pyflakes, bugbear, simplify, McCabe 15)."""
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.live

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed: it comes with the test extra (pip install -e '.[test]')")
    out = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
