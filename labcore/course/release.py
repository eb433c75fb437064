"""The student release: the notebooks and a labcore whose exercises hold no answer.

``python -m labcore course build OUT`` (or :func:`build_release`) writes, into a new folder:

- ``notebooks/``: the lab's notebooks, outputs cleared;
- ``labcore/``: the package with the course setting on (a ``STUDENT`` file, see
  :mod:`labcore.exercises.setting`). Each notebook's exercise module ships compiled, in two parts
  (:mod:`labcore.exercises.sealed`, :mod:`labcore.course.faces`): its **face** (the code its
  notebook runs, and each question as a title, a prompt and every hint but the last) is what the
  notebook imports; its **checks** (no solutions, examples, docstrings or known mistakes) load only
  where a check runs: in the checker's child process, or for a live check beside the learner's ranks.
  Nothing a learner can reach from a question holds its answer; the lab's reference code that a
  notebook demonstrates runs, and a check refuses it handed in;
- ``tests/data/`` (the recorded logs and runs the notebooks read), the lab's files the notebooks name
  (:data:`LINKED`), ``binder/`` and ``environment.yml``; ``pyproject.toml`` without the developers'
  test and lint settings; a ``README.md`` for students (how to start, the notebooks) and ``RELEASE.md``
  saying what was withheld.

Bytecode is specific to a Python version: the release holds code for the Python that builds
it and for each ``--python`` interpreter given. A student who disassembles the checks on their own
machine can find what they compare with, as with any check that answers on the student's machine;
the grade is computed elsewhere (:mod:`labcore.course.grading`), and a graded run's copy of the
release (:func:`graded_copy`) holds no checks at all.

Example
-------
>>> out = build_release("/tmp/student-release")          # doctest: +SKIP
"""
from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from labcore.course.faces import FaceError, checks_source, faces, sealed_module
from labcore.exercises.setting import MARKER

STUB = ('"""Exercises of the Collective Communication Lab (student release: compiled, without answers)."""\n'
        "from labcore.exercises.sealed import load as _load\n\n_load(globals())\n")
CHECKS_PACKAGE = ('"""The student release\'s checks, loaded from compiled code (labcore.exercises.sealed)."""\n'
                  "from labcore.exercises.sealed import install_checks\n\ninstall_checks()\n")
BLOBS = ("faces", "checks")

__all__ = ["build_release", "graded_copy", "ReleaseError"]


class ReleaseError(ValueError):
    """The release cannot be built as asked (the message names the fix)."""


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{out} exists and is not an empty folder: give a new folder for the release")
    if MARKER.exists():
        raise ReleaseError("this labcore is a student release already: build from the lab's repository")


# -- compiling for each Python ----------------------------------------------------------------------
_COMPILER = r"""
import json, marshal, sys
parts = json.load(sys.stdin)
for kind, sources in parts.items():
    code = {name: marshal.dumps(compile(text, f"<{name}: compiled in the student release>", "exec", dont_inherit=True))
            for name, text in sources.items()}
    with open(sys.argv[1] + "." + kind, "wb") as out:
        out.write(marshal.dumps(code))
print("%d.%d" % sys.version_info[:2])
"""


def _compile_for(python: str, parts: dict[str, dict[str, str]], folder: Path) -> str:
    """Compile each part's sources with interpreter ``python`` into ``<part>-<version>.bin``; returns the version."""
    tmp = tempfile.mkdtemp(dir=folder)
    try:
        try:
            done = subprocess.run([python, "-I", "-c", _COMPILER, os.path.join(tmp, "code")], input=json.dumps(parts),
                                  text=True, capture_output=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ReleaseError(f"--python {python}: cannot run it ({err}); give the path of a Python interpreter")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ReleaseError(f"--python {python} could not compile the exercises: {last}")
        version = done.stdout.strip()
        for kind in parts:
            os.replace(os.path.join(tmp, f"code.{kind}"), folder / f"{kind}-{version}.bin")
        return version
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the release ------------------------------------------------------------------------------------------
def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _notebook_code(root: Path) -> str:
    import nbformat

    cells = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells += [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return "\n".join(cells)


def _questions() -> dict[str, list]:
    """{notebook's module: [(var, catalog name, exercise, hints a learner sees)]}: each exercise under its
    catalog name first, then any other name the module gives it."""
    from labcore.course.catalog import PREFIX, all_exercises

    found: dict[str, list] = {}
    for name, (_, q) in all_exercises().items():
        short, var = name.split(".")
        module = importlib.import_module(PREFIX + short)
        entries = found.setdefault(module.__name__, [])
        entries.append((var, name, q, q.hints[:-1]))
        entries += [(other, name, q, q.hints[:-1]) for other, value in vars(module).items()
                    if value is q and other != var and other.startswith("q_")]
    return found


def _copy_package(root: Path, out: Path) -> dict[str, dict[str, str]]:
    """Copy labcore/ into ``out`` with each notebook's exercise module split in face and checks (as
    stubs and a package for the checks); returns {"faces": {module: source}, "checks": {...}}."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "STUDENT", "*.bin")
    shutil.copytree(root / "labcore", out / "labcore", ignore=ignore)
    sources, namespaces = {}, {}
    for path in sorted((root / "labcore" / "exercises").rglob("*.py")):
        name = _module_name(root, path)
        if sealed_module(name):
            sources[name] = path.read_text(encoding="utf-8")
            namespaces[name] = vars(importlib.import_module(name))
            (out / path.relative_to(root)).unlink()
    try:
        face = faces(sources, namespaces, _questions(), _notebook_code(root))
        checks = {name: checks_source(text, name, namespaces[name]) for name, text in sources.items()
                  if name.rsplit(".", 1)[-1] != "mistakes"}
    except FaceError as err:
        raise ReleaseError(str(err)) from None
    if not face:
        raise ReleaseError("found no exercise module under labcore/exercises: nothing to seal")
    for name in face:
        parts = name.split(".")
        path = out.joinpath(*parts).with_suffix(".py")
        if (root.joinpath(*parts) / "__init__.py").exists():
            path = out.joinpath(*parts, "__init__.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STUB, encoding="utf-8")
    (out / "labcore" / "exercises" / "_full").mkdir()
    (out / "labcore" / "exercises" / "_full" / "__init__.py").write_text(CHECKS_PACKAGE, encoding="utf-8")
    return {"faces": face, "checks": checks}


def _copy_notebooks(root: Path, out: Path) -> list[str]:
    import nbformat

    (out / "notebooks").mkdir()
    names = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, out / "notebooks" / path.name)
        names.append(path.name)
    if not names:
        raise ReleaseError(f"no notebooks in {root / 'notebooks'}: build from the lab's repository")
    return names


_PACKAGE_DATA = '\n[tool.setuptools.package-data]\nlabcore = ["exercises/STUDENT", "exercises/*.bin"]\n'

# The lab's files that the notebooks name and run (their scripts' own imports included): a release
# ships them so that every path a notebook gives exists there (tests/test_course_release.py checks it)
LINKED = ("docs/slurm.md", "docs/slurm_bench.sbatch", "benchmarks/fidelity_report.py", "benchmarks/bench_gate.py",
          "tests/published.py")

# Settings for the lab's developers (its test suite, its linter), which the release does not ship
_DEVELOPERS = re.compile(r"^\[tool\.(?:pytest|ruff)[^\]]*\]\n.*?(?=^\[|\Z)", re.M | re.S)


def _copy_extras(root: Path, out: Path) -> None:
    if (root / "environment.yml").exists():
        shutil.copy2(root / "environment.yml", out / "environment.yml")
    if (root / "binder").is_dir():
        shutil.copytree(root / "binder", out / "binder")
    if (root / "tests" / "data").is_dir():
        shutil.copytree(root / "tests" / "data", out / "tests" / "data")
    for name in LINKED:
        if (root / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, out / name)
    text = _DEVELOPERS.sub("", (root / "pyproject.toml").read_text(encoding="utf-8"))
    if "[tool.setuptools.package-data]" not in text:
        text += _PACKAGE_DATA
    (out / "pyproject.toml").write_text(text, encoding="utf-8")


_START = 'python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e ".[lab]" && .venv/bin/jupyter lab notebooks/'


def _student_readme(out: Path, notebooks: list[str]) -> None:
    """The release's README: what the lab is, how to start it, the notebooks and how the exercises answer."""
    from labcore.course.catalog import all_exercises

    lines = ["# Collective Communication Lab (student release)", "",
             "Notebooks on how GPUs exchange and combine data (all-reduce, all-gather, reduce-scatter, ...) and "
             "how NCCL does it: real collectives on this machine's ranks (gloo on CPU, NCCL on GPUs), the same "
             "algorithms stepped chunk by chunk in a simulator, and exercises that check your answers.", "",
             "## Start", "", "From this folder, on Linux or macOS with Python 3.10-3.12 (everything goes into "
             "`./.venv`):", "", "```bash", _START, "```", "",
             "Add `--allow-root` at the end where you are root (many containers). No GPU is needed: on a CPU the "
             "ranks use gloo and every notebook runs.", "", "## Notebooks (in order)", ""]
    lines += [f"- `notebooks/{n}`" for n in notebooks]
    lines += ["", "## Exercises", "",
              f"{len(all_exercises())} exercises, each a `q_...` object in its notebook: `q.check(answer)` says "
              "whether your answer is right and, where it is not, what is wrong without giving the answer; "
              "`q.hint()`, `q.hint(2)`, ... give its hints, gentlest first. In this release `solution()` and each "
              "exercise's last hint are off, and the checks run in a process apart from your notebook. "
              "`lc.progress()` lists what you have attempted and passed, notebook by notebook.", "",
              "`RELEASE.md` says what this release holds and what it leaves out."]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _git_commit(root: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30)
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _release_notes(out: Path, notebooks: list[str], parts: dict, versions: list[str], commit: str) -> None:
    from labcore.course.catalog import all_exercises

    lines = ["# Student release of the Collective Communication Lab", "",
             f"Built from commit {commit} for Python {', '.join(versions)}. The course setting is on (student):",
             "`solution()` and each exercise's last hint are off. README.md says how to start the lab.", "",
             f"{len(notebooks)} notebooks; the developers' tests, documentation and benchmarks are not here, except "
             f"the files the notebooks name: {', '.join(LINKED)}.", "",
             "## What the notebooks import (compiled: `labcore/exercises/faces-*.bin`)", "",
              "Each notebook's questions (a title, a prompt, every hint but the last) and the code its notebooks "
              "run:", ""]
    for name, text in sorted(parts["faces"].items()):
        exported = text.rsplit("__all__ = ", 1)[1].strip()
        lines.append(f"- {name}: {', '.join(json.loads(exported.replace(chr(39), chr(34)))) or '(code only)'}")
    lines += ["", "## The checks (compiled apart: `labcore/exercises/checks-*.bin`)", "",
              "Loaded only where a check runs (the checker's child process, a live check); a graded run's copy of "
              "this release leaves them out:", ""]
    lines += [f"- {name}" for name in sorted(parts["checks"])]
    lines += ["", f"{len(all_exercises())} exercises: their solutions, last hints, example answers and known "
              "mistakes are not in this release."]
    (out / "RELEASE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_release(out, *, pythons=(), root=None) -> Path:
    """Write the student release into ``out`` (a new or empty folder); returns its path.

    Parameters
    ----------
    out : the folder to write.
    pythons : more interpreters to compile the exercises for (one per Python version the students
        use); the running one is always included.
    root : the lab's repository (default: the one this labcore was imported from).
    """
    root = Path(root) if root is not None else _repo_root()
    out = Path(out)
    _check_out(out)
    if not (root / "labcore" / "exercises").is_dir() or not (root / "pyproject.toml").is_file():
        raise ReleaseError(f"{root} is not the lab's repository (no labcore/exercises, no pyproject.toml)")
    out.mkdir(parents=True, exist_ok=True)
    try:
        parts = _copy_package(root, out)
        notebooks = _copy_notebooks(root, out)
        _copy_extras(root, out)
        folder = out / "labcore" / "exercises"
        versions = sorted({_compile_for(p, parts, folder) for p in (sys.executable, *pythons)})
        commit = _git_commit(root)
        (folder / MARKER.name).write_text(f"student release, commit {commit}\n", encoding="utf-8")
        _release_notes(out, notebooks, parts, versions, commit)
        _student_readme(out, notebooks)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def graded_copy(release, out) -> Path:
    """Copy the release's package and data into ``out`` without its checks: what a graded run's notebook
    sees (every question there says that the grader checks it). Returns ``out``."""
    release, out = Path(release), Path(out)
    if not (release / "labcore" / "exercises" / MARKER.name).exists():
        raise ReleaseError(f"{release} is not a student release: build one with python -m labcore course build")
    shutil.copytree(release / "labcore", out / "labcore",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "checks-*.bin"))
    if (release / "tests" / "data").is_dir():
        shutil.copytree(release / "tests" / "data", out / "tests" / "data")
    return out
