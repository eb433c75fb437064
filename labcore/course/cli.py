"""``python -m labcore course {build,progress,assignment,autograde,grades}``: the instructor's commands.

- ``build OUT [--python EXE ...]``: the student release (see :mod:`labcore.course.release`);
- ``progress FILE [FILE ...] [--plot HTML]``: the class view of learners' progress files;
- ``assignment COURSE [--notebooks 01 03] [--name lab]``: an nbgrader course folder whose test cells
  hand the answers in (then ``nbgrader generate_assignment``);
- ``autograde COURSE [--name lab] [--student S ...]``: ``nbgrader autograde``, each notebook confined
  and each answer judged out of its reach (:mod:`labcore.course.autograde`);
- ``grades COURSE [--name lab]``: the gradebook, one row per student and exercise.

Every error is one line on stderr, naming the fix, and exit status 2; a warning (a progress file's
skipped lines) is one line too.
"""
from __future__ import annotations

import argparse
import sys
import warnings

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option as one line (not the usage and the error on two)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see -h)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m labcore course", description="Run the lab as a course.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the student release (notebooks, labcore without solutions)")
    b.add_argument("out", help="a new (or empty) folder")
    b.add_argument("--python", action="append", default=[], metavar="EXE",
                   help="also compile the sealed exercises for this interpreter (repeat for each Python version)")
    g = sub.add_parser("progress", help="merge learners' progress files into one table (and a plot)")
    g.add_argument("files", nargs="+", help="progress.jsonl files, one per learner")
    g.add_argument("--plot", metavar="HTML", help="also write the class's plot to this HTML file")
    a = sub.add_parser("assignment", help="an nbgrader course folder whose autograded cells are the lab's checks")
    a.add_argument("course", help="the nbgrader course folder to write (new or empty)")
    a.add_argument("--notebooks", nargs="+", default=["01", "03"], metavar="NN", help="notebook numbers (default: 01 03)")
    a.add_argument("--name", default="lab", help="the assignment's name (default: lab)")
    a.add_argument("--release", metavar="DIR", help="a student release built already (course build), copied in; "
                                                    "default: build one")
    t = sub.add_parser("autograde", help="nbgrader autograde, each notebook confined and each answer judged apart")
    t.add_argument("course", help="the nbgrader course folder (written by course assignment)")
    t.add_argument("--name", default="lab", help="the assignment's name (default: lab)")
    t.add_argument("--student", action="append", default=[], help="grade this student only (repeat for more)")
    r = sub.add_parser("grades", help="the gradebook of an nbgrader course folder, per student and exercise")
    r.add_argument("course", help="the nbgrader course folder")
    r.add_argument("--name", default="lab", help="the assignment's name (default: lab)")
    return p


def _run(args) -> int:
    import pandas as pd

    if args.command == "build":
        from labcore.course.release import build_release

        out = build_release(args.out, pythons=args.python)
        print(f"student release written to {out} (see {out / 'RELEASE.md'})")
    elif args.command == "progress":
        from labcore.course.tracking import class_view

        table, figure = class_view(args.files)
        with pd.option_context("display.width", 200, "display.max_columns", 30):
            print(table.to_string())
        if args.plot:
            figure.write_html(args.plot, include_plotlyjs=True)     # plotly inside the file: it opens offline
            print(f"plot written to {args.plot}")
    elif args.command == "assignment":
        from labcore.course.grading import make_assignment

        source = make_assignment(args.course, args.notebooks, name=args.name, release=args.release)
        print(f"nbgrader source written to {source}; next: cd {args.course} && nbgrader generate_assignment {args.name}")
    elif args.command == "autograde":
        from labcore.course.autograde import autograde, describe_protection

        print(f"grading each notebook confined: {describe_protection()}")
        grades = autograde(args.course, args.name, args.student)
        with pd.option_context("display.width", 200):
            print(grades.groupby("student")[["score", "max_score"]].sum().to_string())
    else:
        from labcore.course.grading import read_grades

        with pd.option_context("display.width", 200):
            print(read_grades(args.course, args.name).to_string(index=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def one_line(message, category, filename, lineno, file=None, line=None):
        print(f"labcore course {args.command}: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = one_line
            return _run(args)
    except (ValueError, OSError, RuntimeError) as err:
        print(f"labcore course {args.command}: {_first_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:                    # the lab's own failure: still one line, naming what broke
        print(f"labcore course {args.command}: {type(err).__name__}: {_first_line(err)}", file=sys.stderr)
        return 2


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
