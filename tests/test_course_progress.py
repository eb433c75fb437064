"""Learners' progress: every check() is recorded in a small local file; a learner's table; the class view."""
from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest

import labcore as lc
from labcore.course import cli, tracking
from labcore.course.catalog import NOTEBOOK_OF, all_exercises, exercise_name, notebook_of
from labcore.exercises import ValueExercise
from labcore.exercises.operations import q_all_reduce, q_which
from labcore.exercises.trees import q_tree_vs_ring

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def learner_file(tmp_path, monkeypatch):
    path = tmp_path / "alice" / "progress.jsonl"
    monkeypatch.setenv(tracking.ENV, str(path))
    return path


def test_the_suite_never_records_into_the_real_home():
    path = tracking.progress_path()
    assert path is not None and Path.home() / ".labcore" not in path.parents
    assert ROOT not in path.resolve().parents


def test_the_default_file_is_in_the_home_and_never_in_the_repository(monkeypatch):
    monkeypatch.delenv(tracking.ENV)
    assert tracking.progress_path() == Path.home() / ".labcore" / "progress.jsonl"
    monkeypatch.setenv(tracking.ENV, "off")
    assert tracking.progress_path() is None


def test_every_check_records_exercise_notebook_status_and_time(learner_file, capsys):
    q_all_reduce.check(3)
    q_all_reduce.check(10)
    q_which.check("reduce_scatter")
    q_which.check()                          # not attempted: no attempt to record
    q_which.evaluate("all_reduce")           # evaluate() is for tools (the grader): not recorded
    rows = [json.loads(line) for line in learner_file.read_text().splitlines()]
    assert [(r["exercise"], r["notebook"], r["status"]) for r in rows] == [
        ("operations.q_all_reduce", "01", "incorrect"), ("operations.q_all_reduce", "01", "correct"),
        ("operations.q_which", "01", "correct")]
    for r in rows:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", r["time"]) and r["title"]
    assert "correct!" in capsys.readouterr().out
    assert list(learner_file.parent.iterdir()) == [learner_file]      # no temporary file left beside it


def test_off_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(tracking.ENV, "off")
    q_all_reduce.check(10)
    assert tracking.attempts() == [] and not list(tmp_path.iterdir())


def test_a_full_file_keeps_its_history_and_records_no_more(learner_file, monkeypatch, capsys):
    for answer in range(3):
        q_all_reduce.check(answer)
    size = learner_file.stat().st_size
    monkeypatch.setattr(tracking, "MAX_FILE_BYTES", size + 10)
    with pytest.warns(tracking.ProgressWarning, match="no more are recorded"):
        q_all_reduce.check(10)
    assert learner_file.stat().st_size == size and len(tracking.attempts()) == 3      # nothing rewritten or cut


def test_a_failure_to_write_never_breaks_a_check(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(tracking.ENV, str(blocker / "progress.jsonl"))       # its folder cannot be made
    q_all_reduce.check(10)
    assert capsys.readouterr().out.strip() == "All-reduce by hand: correct!"


def test_a_corrupt_or_foreign_file_is_read_around_and_its_bad_lines_named(learner_file, capsys):
    learner_file.parent.mkdir(parents=True)
    learner_file.write_text('not json\n{"status": "correct"}\n[1, 2]\n')
    q_all_reduce.check(10)
    with pytest.warns(tracking.ProgressWarning, match=r"line 1 \(not JSON\), line 2 .*, line 3 \(not an attempt\)"):
        assert [r["exercise"] for r in tracking.attempts()] == ["operations.q_all_reduce"]


def test_writers_at_once_lose_no_attempt(learner_file, capsys):
    def answer_many():
        for _ in range(25):
            q_all_reduce.check(10)

    threads = [threading.Thread(target=answer_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(tracking.attempts()) == 100


def test_an_exercise_of_no_notebook_is_not_recorded(learner_file, capsys):
    ValueExercise("Made up here", "1 + 1?", expected=2).check(2)
    assert tracking.attempts() == [] and not learner_file.exists()


def test_the_learners_table_has_a_row_per_notebook(learner_file, capsys):
    q_all_reduce.check(3)
    q_all_reduce.check(10)
    q_which.check("all_reduce")
    q_tree_vs_ring.check(q_tree_vs_ring.correct_example)
    table = lc.progress()
    totals = {}
    for notebook, _ in all_exercises().values():
        totals[notebook] = totals.get(notebook, 0) + 1
    assert table["exercises"].to_dict() == totals
    assert table.loc["01", ["attempted", "passed", "attempts"]].tolist() == [2, 1, 3]
    assert table.loc["03", ["attempted", "passed", "attempts"]].tolist() == [1, 1, 1]
    assert table.loc["02", ["attempted", "passed", "attempts"]].tolist() == [0, 0, 0]
    assert table.loc["01", "title"] == "collectives"


def _learner(tmp_path, name, answers) -> Path:
    path = tmp_path / name / "progress.jsonl"
    rows = [dict(time="2026-12-01T10:00:00+00:00", notebook=nb, exercise=ex, title=ex, status=st, learner=name)
            for nb, ex, st in answers]
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_class_view_merges_learners_files_into_a_table_and_a_plot(tmp_path):
    files = [_learner(tmp_path, "ana", [("01", "operations.q_all_reduce", "correct"),
                                        ("01", "operations.q_which", "incorrect"),
                                        ("01", "operations.q_which", "correct")]),
             _learner(tmp_path, "ben", [("01", "operations.q_which", "incorrect"),
                                        ("03", "trees.q_tree_vs_ring", "correct")]),
             _learner(tmp_path, "cy", [])]
    table, fig = lc.course.class_view(files)
    assert list(table.index) == ["ana", "ben", "cy"]
    assert table.loc["ana", "01"] == 2 and table.loc["ben", "01"] == 0 and table.loc["ben", "03"] == 1
    assert table["passed"].tolist() == [2, 1, 0] and table["attempts"].tolist() == [3, 2, 0]
    heat = fig.data[0]
    assert list(heat.y) == ["ana", "ben", "cy"] and heat.z[0][0] == pytest.approx(2 / table.attrs["exercises"]["01"])
    assert fig.layout.height <= 800 and fig.layout.width is None          # fits 1280 x 800, takes the page width


def test_forty_learners_still_fit_the_window(tmp_path):
    files = {f"learner {i:02d}": _learner(tmp_path, f"l{i}", [("01", "operations.q_which", "correct")])
             for i in range(40)}
    table, fig = lc.course.class_view(files)
    assert len(table) == 40 and fig.layout.height <= 700


def test_the_class_view_refuses_what_is_not_a_progress_file(tmp_path):
    with pytest.raises(ValueError, match="no progress file at"):
        lc.course.class_view([tmp_path / "missing.jsonl"])
    with pytest.raises(ValueError, match="one or more"):
        lc.course.class_view([])


def test_the_command_line_prints_the_class_table_and_writes_the_plot(tmp_path, capsys):
    files = [str(_learner(tmp_path, n, [("01", "operations.q_which", "correct")])) for n in ("ana", "ben")]
    assert cli.main(["progress", *files, "--plot", str(tmp_path / "class.html")]) == 0
    out = capsys.readouterr().out
    assert "ana" in out and "ben" in out
    page = (tmp_path / "class.html").read_text()
    # self-contained: plotly's own code is in the page, nothing loads from a CDN (it opens offline)
    assert 'src="https://cdn.plot.ly' not in page and len(page) > 1_000_000
    assert cli.main(["progress", str(tmp_path / "nobody.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_each_exercise_module_belongs_to_the_notebook_that_imports_it():
    seen = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for module in re.findall(r"from labcore\.exercises\.(\w+) import q_", "".join(cell["source"])):
                seen[module] = path.name[:2]
    assert seen and all(NOTEBOOK_OF.get(m) == nb for m, nb in seen.items()), seen
    for name, (notebook, q) in all_exercises().items():
        assert exercise_name(q) == (name, notebook) and notebook == notebook_of("labcore.exercises." + name.split(".")[0])


# -- a progress path that is not a progress file of this user's: left as it is ------------------------------
def _check_at(path, monkeypatch, capsys) -> str:
    monkeypatch.setenv(tracking.ENV, str(path))
    q_all_reduce.check(10)
    return capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a device node of its own")
def test_a_device_is_never_written_or_replaced(tmp_path, monkeypatch, capsys):
    # a null device of the test's own: a recorder that replaced devices must not take the system's /dev/null with it
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    before = os.stat(null)
    assert _check_at(null, monkeypatch, capsys).strip() == "All-reduce by hand: correct!"
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_a_fifo_a_folder_or_a_link_is_left_alone_without_waiting(tmp_path, monkeypatch, capsys):
    fifo, folder, target = tmp_path / "fifo", tmp_path / "folder", tmp_path / "elsewhere.txt"
    os.mkfifo(fifo)
    folder.mkdir()
    target.write_text("keep me\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    for path in (fifo, folder, link):
        start = time.monotonic()
        assert "correct!" in _check_at(path, monkeypatch, capsys)
        assert time.monotonic() - start < 5
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir() and list(folder.iterdir()) == []
    assert target.read_text() == "keep me\n" and link.is_symlink()


def test_a_hard_link_to_another_file_is_left_alone(tmp_path, monkeypatch, capsys):
    other = tmp_path / "other.txt"
    other.write_text("keep me\n")
    os.link(other, tmp_path / "progress.jsonl")
    _check_at(tmp_path / "progress.jsonl", monkeypatch, capsys)
    assert other.read_text() == "keep me\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_another_users_file_is_left_alone(tmp_path, monkeypatch, capsys):
    theirs = tmp_path / "progress.jsonl"
    theirs.write_text("")
    os.chown(theirs, 12345, 12345)
    _check_at(theirs, monkeypatch, capsys)
    assert theirs.read_text() == ""


def test_a_held_lock_costs_at_most_the_wait_and_the_attempt(learner_file, monkeypatch, capsys):
    import fcntl

    q_all_reduce.check(3)
    monkeypatch.setattr(tracking, "LOCK_WAIT_S", 0.3)
    with open(learner_file) as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        start = time.monotonic()
        q_all_reduce.check(10)
        assert time.monotonic() - start < 3
    assert [r["status"] for r in tracking.attempts()] == ["incorrect"]
    assert "correct!" in capsys.readouterr().out


def test_a_large_file_is_appended_to_never_rewritten(learner_file, capsys):
    learner_file.parent.mkdir(parents=True)
    line = json.dumps(dict(time="2026-12-01T10:00:00+00:00", notebook="01", exercise="operations.q_all_reduce",
                           title="t", status="incorrect", learner="a")) + "\n"
    learner_file.write_text(line * 40_000)                              # 5 MiB: more than the old 4 MiB rewrite
    q_all_reduce.check(10)
    rows = tracking.attempts()
    assert len(rows) == 40_001 and rows[-1]["status"] == "correct"


def test_the_class_view_counts_only_the_labs_exercises(tmp_path):
    path = _learner(tmp_path, "ana", [("01", "operations.q_all_reduce", "correct"),
                                      ("01", "operations.q_made_up", "correct"),
                                      ("02", "operations.q_which", "correct")])      # 02: the line lies about it
    with pytest.warns(tracking.ProgressWarning, match=r"line 2 \('operations.q_made_up' is not an exercise"):
        table, _ = lc.course.class_view([path])
    assert table.loc["ana", "01"] == 2 and table.loc["ana", "02"] == 0 and table.loc["ana", "passed"] == 2
    assert set(table.attrs["exercises"]) == set(NOTEBOOK_OF.values())


def test_a_learners_file_that_leads_out_of_the_class_folder_is_refused(tmp_path):
    good = _learner(tmp_path / "learners", "ana", [("01", "operations.q_which", "correct")])
    (tmp_path / "learners" / "ben").symlink_to(tmp_path / "secret", target_is_directory=True)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "progress.jsonl").write_text("")
    with pytest.raises(ValueError, match="leads out of"):
        lc.course.class_view([good, tmp_path / "learners" / "ben" / "progress.jsonl"])
    (tmp_path / "learners" / "cy.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="leads out of"):
        lc.course.class_view([good, tmp_path / "learners" / "cy.jsonl"])
    (tmp_path / "learners" / "dee.jsonl").symlink_to(good)                     # a link, even inside: not read
    with pytest.raises(ValueError, match="is a link"):
        tracking.read_progress(tmp_path / "learners" / "dee.jsonl")


@pytest.mark.parametrize("bad", ["/dev/zero", "fifo", "folder", "bad lines"])
def test_the_class_command_says_each_problem_in_one_line(tmp_path, capsys, bad):
    good = _learner(tmp_path, "ana", [("01", "operations.q_which", "correct")])
    path = tmp_path / bad
    if bad == "fifo":
        os.mkfifo(path)
    elif bad == "folder":
        path.mkdir()
    elif bad == "bad lines":
        path.write_text('{"status": 3}\nnot json\n')
    else:
        path = Path(bad)
    code = cli.main(["progress", str(good), str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(line.startswith("labcore course progress: ") for line in err.splitlines())
    assert (code, err.count("\n")) == ((0, 1) if bad == "bad lines" else (2, 1)), err
