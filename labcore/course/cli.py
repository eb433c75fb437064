"""``python -m labcore course {build,progress,assignment,grades}``: the instructor's commands.

- ``build OUT [--python EXE ...]``: the student release (see :mod:`labcore.course.release`);
- ``progress FILE [FILE ...] [--plot HTML]``: the class view of learners' progress files;
- ``assignment COURSE [--notebooks 01 03] [--name lab]``: an nbgrader course folder whose
  autograded cells are the lab's checks (then ``nbgrader generate_assignment``, ``autograde``);
- ``grades COURSE [--name lab]``: the gradebook, one row per student and exercise.

A bad input gets one line naming the fix and exit status 2.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m labcore course", description="Run the lab as a course.")
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
            figure.write_html(args.plot, include_plotlyjs="cdn")
            print(f"plot written to {args.plot}")
    elif args.command == "assignment":
        from labcore.course.grading import make_assignment

        source = make_assignment(args.course, args.notebooks, name=args.name)
        print(f"nbgrader source written to {source}; next: cd {args.course} && nbgrader generate_assignment {args.name}")
    else:
        from labcore.course.grading import read_grades

        with pd.option_context("display.width", 200):
            print(read_grades(args.course, args.name).to_string(index=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, OSError) as err:
        print(f"labcore course {args.command}: {err}", file=sys.stderr)
        return 2
