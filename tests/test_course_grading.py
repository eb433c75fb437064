"""nbgrader assignments of the lab's notebooks: each exercise cell followed by a locked cell that hands its
answer in (the judging and the round itself: tests/test_course_autograde.py), and the gradebook read back,
a damaged one in one line."""
from __future__ import annotations

import sqlite3
from contextlib import nullcontext
from pathlib import Path

import nbformat
import pytest

from labcore.course import cli
from labcore.course.grading import CONFIG, _check_calls, exercise_cells, make_assignment, read_grades
from labcore.course.release import ReleaseError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("01", "03")


@pytest.fixture
def release(tmp_path):
    """A stand-in student release (what make_assignment copies in; the real one: tests/test_course_release.py)."""
    folder = tmp_path / "release"
    (folder / "labcore" / "exercises").mkdir(parents=True)
    (folder / "labcore" / "exercises" / "STUDENT").write_text("student release\n")
    return folder


def test_each_exercise_cell_is_followed_by_a_locked_one_point_cell_that_hands_its_answer_in(tmp_path, release):
    source = make_assignment(tmp_path / "course", NOTEBOOKS, release=release)
    course = tmp_path / "course"
    assert (course / "nbgrader_config.py").read_text() == CONFIG and (course / "lab_release" / "labcore").is_dir()
    assert oct(course.stat().st_mode & 0o777) == "0o700"
    for number in NOTEBOOKS:
        original = nbformat.read(next((ROOT / "notebooks").glob(f"{number}_*.ipynb")), as_version=4)
        graded = nbformat.read(next(source.glob(f"{number}_*.ipynb")), as_version=4)
        wanted = [name for _, name in exercise_cells(original)]
        assert wanted and [name for _, name in exercise_cells(graded)] == wanted
        tests = [(i, c) for i, c in enumerate(graded.cells) if c.metadata.get("nbgrader", {}).get("grade")]
        assert [c.metadata["nbgrader"]["grade_id"] for _, c in tests] == wanted
        for (i, cell), name in zip(tests, wanted):
            meta = cell.metadata["nbgrader"]
            assert meta["locked"] and meta["points"] == 1 and not meta["solution"]
            assert "from labcore.course.handin import hand_in" in cell.source and f'.{name}", ' in cell.source
            assert "assert" not in cell.source                   # the cell decides nothing
            assert _check_calls(graded.cells[i - 1].source)[0].func.value.id == name   # right after its exercise
        assert len(graded.cells) == len(original.cells) + len(wanted)


def test_the_config_confines_each_notebook_and_judges_each_hand_in():
    assert "JailedExecute, JudgeHandIns" in CONFIG and 'isolation = "required"' in CONFIG
    assert "autograde_preprocessors" in CONFIG and "SaveAutoGrades" in CONFIG


def test_a_check_of_a_blank_gets_a_named_answer_the_test_cell_can_see(tmp_path, release):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\nq_algbw.check(____)")])
    (tmp_path / "lab" / "notebooks").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "lab" / "notebooks" / "04_measuring.ipynb")
    source = make_assignment(tmp_path / "course", ["04"], root=tmp_path / "lab", release=release)
    cells = nbformat.read(source / "04_measuring.ipynb", as_version=4).cells
    assert cells[0].source == "x = 1\nanswer_q_algbw = ____\nq_algbw.check(answer_q_algbw)"
    assert cells[1].source.endswith('hand_in("measuring.q_algbw", answer_q_algbw)')


@pytest.mark.parametrize("kwargs, says", [(dict(notebooks=["42"]), "no notebook 42"),
                                          (dict(notebooks=[]), "at least one notebook"),
                                          (dict(notebooks=["00"]), "no exercise cell"),
                                          (dict(name="a b"), "letters, digits")])
def test_bad_assignment_inputs_are_refused_with_the_fix(tmp_path, release, kwargs, says):
    with pytest.raises(ReleaseError, match=says):
        make_assignment(tmp_path / "course", **{"notebooks": NOTEBOOKS, "release": release, **kwargs})


def test_a_release_that_is_not_one_is_refused(tmp_path):
    with pytest.raises(ReleaseError, match="not a student release"):
        make_assignment(tmp_path / "course", NOTEBOOKS, release=tmp_path)


@pytest.mark.parametrize("damage", ["text", "truncated", "other database", "link"])
def test_a_damaged_gradebook_is_one_line(tmp_path, capsys, damage):
    db = tmp_path / "gradebook.db"
    if damage == "text":
        db.write_text("not a database at all")
    elif damage == "truncated":
        with sqlite3.connect(db) as conn:
            conn.execute("create table t (x)")
            conn.executemany("insert into t values (?)", [("x" * 1000,)] * 200)
        db.write_bytes(db.read_bytes()[:5000])
    elif damage == "other database":
        with sqlite3.connect(db) as conn:
            conn.execute("create table assignment (id text)")
    else:
        db.symlink_to("/etc/passwd")
    before = db.read_bytes() if not db.is_symlink() else None
    with pytest.raises(ReleaseError):
        read_grades(tmp_path)
    assert db.is_symlink() or db.read_bytes() == before          # read, never written
    assert cli.main(["grades", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "gradebook" in err, err


def test_every_course_command_error_is_one_line(tmp_path, capsys):
    for argv in (["grades"], ["progress"], ["assignment", str(tmp_path), "--notebooks", "99"],
                 ["autograde", str(tmp_path)], ["build", str(ROOT)], ["nonsense"],
                 ["progress", "/dev/zero"], ["progress", str(tmp_path)]):
        with pytest.raises(SystemExit) if argv in (["grades"], ["progress"], ["nonsense"]) else nullcontext():
            assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)
