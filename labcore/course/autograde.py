"""Autograding with nbgrader, each submission confined and each answer judged out of its reach.

Two nbgrader preprocessors, which ``nbgrader_config.py`` (:mod:`labcore.course.grading`) puts in
``nbgrader autograde``'s pipeline in place of its ``Execute``:

- :class:`JailedExecute` runs each submitted notebook as nbgrader's ``Execute`` does, but its kernel
  runs in a jail (:mod:`labcore.course.jail`) made for that notebook: a temporary copy of the
  submission's folder, a private HOME and TMPDIR, the student release without its checks on its
  path (:func:`labcore.course.release.graded_copy`), another user when root, Landlock where the
  kernel has it. Other submissions, the gradebook, the course folder and the instructor's source are
  out of its reach; every process it leaves is ended when the notebook is done. A notebook that ends
  its own kernel is graded on the cells that ran (nbgrader alone would drop the whole submission);
- :class:`JudgeHandIns` then reads each locked test cell's hand-in from its output and replaces
  that output with the verdict of :func:`labcore.course.judge.judge_answer`: a stream for a right answer, an
  error for anything else, which nbgrader's ``SaveAutoGrades`` turns into the cell's points.
  Whatever the notebook printed in that cell, it is not what is graded.

:func:`autograde` is ``python -m labcore course autograde``: it says what this machine protects, refuses
where it protects nothing, and runs ``nbgrader autograde`` in the course folder.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from traitlets import Enum, Unicode

from nbgrader.preprocessors import Execute, NbGraderPreprocessor

from labcore.course import jail as jails
from labcore.course.handin import MIME
from labcore.course.judge import judge_answer
from labcore.course.release import graded_copy

__all__ = ["JailedExecute", "JudgeHandIns", "JailedKernelManager", "autograde", "describe_protection", "HAND_IN"]

HAND_IN = re.compile(r'^hand_in\("([A-Za-z_][\w]*\.q_\w+)"', re.MULTILINE)
ERROR_NAMES = {"incorrect": "Incorrect", "not attempted": "NotAttempted", "not checked": "NotChecked",
               "error": "GraderError"}


def _notebook_jail(release: str, isolation: str, files: Path | None = None) -> jails.Jail:
    """A jail for one notebook: the graded copy of the release on its path, the notebook's files in it."""
    jail = jails.Jail.fresh(confine=isolation == "required")
    lab = graded_copy(release, jail.work / "lab")
    jail.pythonpath = [str(lab)]
    if files is not None and files.is_dir():
        shutil.copytree(files, jail.work / "work", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        jail.give(jail.work / "work")
    return jail


class JailedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel starts in ``jail`` (its connection file copied in for it)."""

    def __init__(self, jail: jails.Jail, **kwargs):
        super().__init__(**kwargs)
        self.jail = jail

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        outside = os.path.realpath(self.connection_file)
        inside = str(self.jail.work / "home" / "kernel.json")
        return self.jail.prefix(copies={outside: inside}) + [inside if a == outside else a for a in cmd]


class JailedExecute(Execute):
    """nbgrader's Execute with the kernel in a jail of its own (see the module docstring)."""

    release = Unicode("lab_release", help="the student release the notebooks import (python -m labcore course "
                                          "build; course assignment writes one)").tag(config=True)
    isolation = Enum(["required", "off"], "required",
                     help="'required': refuse where the machine can confine nothing; 'off': no jail "
                          "(trusted notebooks only)").tag(config=True)

    def preprocess(self, nb, resources, km=None):
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        jail = _notebook_jail(self.release, self.isolation, folder)
        kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
        manager = JailedKernelManager(jail, kernel_name=kernel, config=self.config)
        try:
            return super().preprocess(nb, resources, km=manager)
        except DeadKernelError:                      # the notebook ended its kernel: graded on the cells that ran
            self.log.warning("the kernel died while running %s; the cells after it did not run", folder)
            return self.nb, self.resources
        finally:
            if manager.has_kernel:                   # a manager handed in is ours to shut down, not nbclient's
                run_sync(manager.shutdown_kernel)(now=True)
            jail.close()


class JudgeHandIns(NbGraderPreprocessor):
    """Replace each locked test cell's output by the judge's verdict on the answer it handed in."""

    release = Unicode("lab_release", help="the student release (the sandbox imports its package)").tag(config=True)
    isolation = Enum(["required", "off"], "required", help="as JailedExecute's").tag(config=True)

    def preprocess(self, nb, resources):
        jail = _notebook_jail(self.release, self.isolation)
        try:
            for cell in nb.cells:
                found = HAND_IN.search(cell.source) if cell.cell_type == "code" else None
                if found and cell.metadata.get("nbgrader", {}).get("grade"):
                    self._judge_cell(cell, found.group(1), jail)
        finally:
            jail.close()
        return nb, resources

    def _judge_cell(self, cell, name: str, jail: jails.Jail) -> None:
        handed = [o for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")
                  and MIME in o.get("data", {})]
        if len(handed) != 1:
            why = "no answer was handed in (the cell did not run to its end)" if not handed else \
                "the cell handed in more than one answer"
            status, message = "incorrect", f"{name}: {why}"
        else:
            import json

            verdict = judge_answer(json.dumps(handed[0]["data"][MIME]), expected=name, jail=jail,
                            release=str(jail.work / "lab"))
            status, message = verdict
        self.log.info("%s: %s", name, status)
        if status == "correct":
            cell.outputs = [new_output("stream", name="stdout", text=message + "\n")]
        else:
            ename = ERROR_NAMES.get(status, "Incorrect")
            cell.outputs = [new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])]


# -- the command ------------------------------------------------------------------------------------------
def describe_protection() -> str:
    """One line: what grading on this machine protects, from :func:`labcore.course.jail.protections`."""
    can = jails.protections()
    parts = []
    if can["user"]:
        parts.append("each notebook as another user")
    elif can["capabilities"]:
        parts.append("as root without capabilities")
    if can["landlock"]:
        parts.append(f"files confined by Landlock (ABI {can['landlock']})")
    return "; ".join(parts) or "nothing"


def _preflight(course: Path) -> None:
    can = jails.protections()
    if not can["user"] and not can["landlock"]:
        raise jails.IsolationError("this machine can neither switch users nor confine files (Landlock): grade in a "
                                   "container per submission, as nbgrader's documentation advises")
    if not can["landlock"]:                        # the grading user is another user: file modes are the guard
        lab = Path(__file__).resolve().parents[2]
        for folder, mask in ((course, 0o007), (lab, 0o004)):
            if stat.S_IMODE(folder.stat().st_mode) & mask:
                raise jails.IsolationError(f"{folder} is open to other users, and without Landlock the grading "
                                           f"user is one: chmod o-rwx {folder}")


def autograde(course, name: str = "lab", students=()):
    """``nbgrader autograde`` for ``course`` (confined, judged); returns the gradebook's table
    (:func:`labcore.course.grading.read_grades`)."""
    course = Path(course)
    if not (course / "nbgrader_config.py").is_file() or not (course / "lab_release").is_dir():
        raise ValueError(f"{course} is not a course folder of the lab: write one with python -m labcore course "
                         "assignment")
    _preflight(course)
    argv = [os.path.join(os.path.dirname(sys.executable), "nbgrader"), "autograde", name, "--force"]
    for student in students:
        argv += ["--student", student]
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryFile("w+") as log:        # a file, not a pipe: nothing left holding it can stall us
        done = subprocess.run(argv, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.seek(0)
        lines = log.read().strip().splitlines() or ["no output"]
    if done.returncode != 0:
        errors = [line for line in lines if "ERROR" in line or "Error" in line] or lines
        raise ValueError(f"nbgrader autograde failed: {errors[-1].strip()[:300]}")
    from labcore.course.grading import read_grades

    return read_grades(course, name)
