"""The README's commands are the ones CI runs."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _commands():
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in _commands() if "pytest" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_lab_command_starts_jupyterlab_on_the_notebooks():
    assert any(c.endswith("jupyter lab notebooks/") for c in _commands())
