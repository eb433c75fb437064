"""An nbgrader round (generate_assignment, autograde, generate_feedback) where hostile submissions score 0
and an honest one full marks: each notebook runs confined, each answer is judged out of its reach.

The assignment has two notebooks of the lab's exercises: 01 (a number, a name, a function) and 02 (the
live ring and a function). Each hostile submission runs an attack on the notebook's kernel (its *prelude*,
a cell before the answers) and answers each exercise by a cheat of its own: every (submission, exercise)
is a scenario, listed with what it must score in :data:`SUBMISSIONS`.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labcore.course import jail
from labcore.course.grading import make_assignment, read_grades
from labcore.course.handin import MIME
from labcore.course.release import build_release

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[1]
N01 = ("q_all_reduce", "q_which", "q_all_to_all")
N02 = ("q_ring_live", "q_send_chunk")

RIGHT = {
    "q_all_reduce": "answer = 10",
    "q_which": "answer = 'reduce_scatter'",
    "q_all_to_all": "def predict(inputs):\n    n = len(inputs)\n    return [[inputs[s][d] for s in range(n)] for d in range(n)]",
    "q_ring_live": '''def my_ring(tensor):
    import torch, torch.distributed as dist
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(torch.tensor_split(tensor.view(-1), n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        got = torch.empty_like(chunks[(rank - 2 - s) % n])
        for req in (dist.isend(chunks[(rank - 1 - s) % n], right), dist.irecv(got, left)):
            req.wait()
        chunks[(rank - 2 - s) % n] += got
    for s in range(n - 1):
        for req in (dist.isend(chunks[(rank - s) % n], right), dist.irecv(chunks[(rank - 1 - s) % n], left)):
            req.wait()
    return tensor''',
    "q_send_chunk": "def send_chunk(rank, step, ranks):\n    return (rank - 1 - step) % ranks",
}
ANSWER_OF = {"q_all_to_all": "predict", "q_ring_live": "my_ring", "q_send_chunk": "send_chunk"}


def _forever(name: str, body: str) -> str:
    return f"def {name}(*args):\n{body}"


COURSE_MARK = "@COURSE@"           # replaced by the course folder's path in the cells below
LAB_MARK = "@LAB@"                 # ... and by the lab's own checkout

# student -> (prelude: an attack on the kernel, {exercise: the cell that answers it}, notebooks handed in)
SUBMISSIONS = {
    "honest": ("", dict(RIGHT), ("01", "02")),
    "blank": ("", {}, ("01",)),
    "copycat": ("", {"q_all_reduce": "answer = q_all_reduce.correct_example",
                     "q_which": "answer = q_which.solution()",
                     "q_all_to_all": "predict = q_all_to_all.reference"}, ("01",)),
    "objects": ("", {"q_all_reduce": "answer = q_all_reduce.expected_value()",
                     "q_which": "answer = q_which.mistakes[0][0]",
                     "q_all_to_all": "from labcore.exercises.operations import _all_to_all as predict"}, ("01",)),
    "patcher": ("import labcore.course.grading as g\ng.assert_correct = lambda *a, **k: None\n"
                "import IPython.display\nIPython.display.display = lambda *a, **k: print('correct!')\n"
                "import labcore.course.handin as h\nh.hand_in = lambda *a, **k: print('correct!')",
                {"q_all_reduce": "answer = 42", "q_which": "answer = 'all_gather'",
                 "q_all_to_all": "def predict(inputs):\n    return inputs"}, ("01",)),
    "forger": ("import json\nfrom IPython.display import display\nimport labcore.course.handin as h\n"
               "real = h.payload\n"
               "def twice(name, answer, **kw):\n"
               "    for n in ('operations.q_all_reduce', name):\n"
               "        display({h.MIME: json.loads(real(n, 10)), 'text/plain': 'x'}, raw=True)\n"
               "h.hand_in = twice",
               {"q_all_reduce": "answer = 3", "q_which": "answer = 3", "q_all_to_all": "predict = 3"}, ("01",)),
    "snoop": ("import glob, os\nfound = []\n"
              f"for p in glob.glob('{COURSE_MARK}/submitted/*/lab/*.ipynb') + "
              "glob.glob('../../*/lab/*.ipynb') + glob.glob('/tmp/*/submitted/*/lab/*.ipynb'):\n"
              "    try:\n        found.append(open(p).read())\n    except OSError as err:\n"
              "        print('refused', type(err).__name__)\nprint('neighbours read:', len(found))\n"
              "for path in ('@COURSE@/gradebook.db', '@COURSE@/planted.txt', "
              "'@COURSE@/source/lab/01_collectives.ipynb', '@COURSE@/lab_release/labcore/__init__.py'):\n"
              "    try:\n        open(path, 'a').write('hostile')\n        print('wrote', path)\n"
              "    except OSError as err:\n        print('refused', path, type(err).__name__)\n"
              "for pid in (os.getppid(), 1):\n    try:\n        os.kill(pid, 0)   # the probe: a kill is refused as it\n"
              "    except OSError as err:\n        print('refused', pid, type(err).__name__)\n"
              "try:\n    text = open('@LAB@/labcore/exercises/operations.py').read()\n"
              "    text += open(f'/proc/{os.getppid()}/environ').read()\nexcept OSError:\n    text = ''",
              {"q_all_reduce": "answer = 10 if found or 'correct_example=10' in text else 0",
               "q_which": "import labcore.exercises._full.operations as full\nanswer = full.q_which.correct_example",
               "q_all_to_all": "import pathlib\nblobs = [p.read_bytes() for p in "
                               "pathlib.Path(lc.__file__).parent.glob('exercises/checks-*.bin')]\n"
                               "predict = len(blobs)"}, ("01",)),
    "timer": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
              "try:\n    raise SystemExit(0)\nexcept SystemExit:\n    pass",
              {"q_all_reduce": "answer = SystemExit",
               "q_which": _forever("answer", "    raise SystemExit('graded?')"),
               "q_all_to_all": _forever("predict", "    import time\n    while True:\n        try:\n"
                                                   "            time.sleep(60)\n        except:\n            continue")},
              ("01",)),
    "lingers": ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time, os\\n"
                "time.sleep(2)\\nopen(\"@COURSE@/late.txt\", \"w\").write(\"late\")\\ntime.sleep(300)'], "
                "start_new_session=True)",
                {"q_all_reduce": "answer = 'x' * 80_000_000",
                 "q_which": "answer = eval('lambda: 1')",
                 "q_all_to_all": "def predict(inputs):\n    import sys\n    return sys._getframe(1).f_locals['want']"},
                ("01",)),
    "wrapper": ("", {"q_all_to_all": "def predict(inputs):\n    import labcore.exercises.operations as ops\n"
                                     "    return getattr(ops, '_all_to_all', lambda x: x)(inputs)",
                     "q_ring_live": "from labcore.exercises.ring import ring_all_reduce as my_ring",
                     "q_send_chunk": "def send_chunk(rank, step, ranks):\n"
                                     "    from labcore.exercises.ring import ring_all_reduce\n"
                                     "    return ring_all_reduce(rank)"}, ("01", "02")),
    "kills": ("import os\nos._exit(0)", {"q_all_reduce": "answer = 10"}, ("01",)),
}
SCORES = {"honest": {e: 1.0 for e in N01 + N02}}       # every other submission: 0 for every exercise


def _notebook(names: tuple[str, ...], module: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(f"import labcore as lc\nfrom labcore.exercises import ____\n"
                                          f"from labcore.exercises.{module} import {', '.join(names)}")]
    for name in names:
        if name in ANSWER_OF:
            var = ANSWER_OF[name]
            nb.cells.append(nbformat.v4.new_code_cell(f"def {var}(*args):\n    return ____   # your code here\n\n"
                                                      f"{name}.check({var})"))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(f"answer = ____\n{name}.check(answer)"))
    return nb


def _answer(nb, name: str, code: str) -> None:
    for cell in nb.cells:
        if f"{name}.check(" in cell.source and not cell.metadata.get("nbgrader", {}).get("locked"):
            check = cell.source.splitlines()[-1]
            cell.source = f"{code}\n{check}"
            return
    raise AssertionError(name)


@pytest.fixture(scope="module")
def round_(tmp_path_factory):
    """The course after generate_assignment, autograde (confined, judged) and generate_feedback."""
    if not any(jail.protections()[k] for k in ("user", "landlock")):
        pytest.skip("this machine can neither switch users nor confine files: nbgrader's advice, a container")
    base = tmp_path_factory.mktemp("round")
    lab = base / "lab"
    (lab / "notebooks").mkdir(parents=True)
    nbformat.write(_notebook(N01, "operations"), lab / "notebooks" / "01_collectives.ipynb")
    nbformat.write(_notebook(N02, "ring"), lab / "notebooks" / "02_ring.ipynb")
    course = base / "course"
    make_assignment(course, ["01", "02"], root=lab, release=build_release(base / "release"))
    _nbgrader(course, "generate_assignment", "lab", "--force")
    for student, (prelude, answers, notebooks) in SUBMISSIONS.items():
        folder = course / "submitted" / student / "lab"
        folder.mkdir(parents=True)
        for released in sorted((course / "release" / "lab").glob("*.ipynb")):
            if released.name[:2] not in notebooks:
                continue
            nb = nbformat.read(released, as_version=4)
            for name, code in answers.items():
                if any(f"{name}.check(" in c.source for c in nb.cells):
                    _answer(nb, name, code.replace(COURSE_MARK, str(course)).replace(LAB_MARK, str(ROOT)))
            if prelude:
                nb.cells.insert(1, nbformat.v4.new_code_cell(prelude.replace(COURSE_MARK, str(course))
                                                             .replace(LAB_MARK, str(ROOT))))
            nbformat.write(nb, folder / released.name)
        (folder / "timestamp.txt").write_text("2026-12-01 12:00:00 UTC")
    source = _digest(course / "source")
    done = subprocess.run([sys.executable, "-m", "labcore", "course", "autograde", str(course)], capture_output=True,
                          text=True, timeout=1200, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    _nbgrader(course, "generate_feedback", "lab", "--force")
    return course, source, done.stdout


def _env() -> dict:
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def _nbgrader(course: Path, *args: str) -> None:
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args], cwd=course,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


def test_the_honest_submission_scores_full_marks_and_every_hostile_one_zero(round_):
    course, _, _ = round_
    grades = read_grades(course, "lab")
    got = {(r.student, r.exercise): r.score for r in grades.itertuples()}
    for student, (_, _, notebooks) in SUBMISSIONS.items():
        names = [n for nb, names in (("01", N01), ("02", N02)) if nb in notebooks for n in names]
        for name in names:
            want = SCORES.get(student, {}).get(name, 0.0)
            assert got.get((student, name), 0.0) == want, (student, name, got.get((student, name)))
    assert {s for s, _ in got} >= set(SUBMISSIONS) - {"kills"}


def test_the_course_folder_and_the_other_submissions_stay_out_of_reach(round_):
    course, source, _ = round_
    assert _digest(course / "source") == source
    assert not (course / "planted.txt").exists() and not (course / "late.txt").exists()
    assert (course / "lab_release" / "labcore" / "__init__.py").read_text().find("hostile") < 0
    snoop = _outputs(course, "snoop")
    assert "neighbours read: 0" in snoop and "wrote" not in snoop, snoop
    assert snoop.count("refused /") == 4 and "refused 1 PermissionError" in snoop, snoop


def test_each_test_cell_shows_the_judges_verdict_not_what_the_notebook_printed(round_):
    course, _, _ = round_
    honest = _test_cells(course, "honest", "01")
    assert [o.output_type for c in honest for o in c.outputs] == ["stream"] * 3
    assert all("correct!" in c.outputs[0].text for c in honest)
    patcher = _test_cells(course, "patcher", "01")
    assert all(c.outputs[0].output_type == "error" and "no answer was handed in" in c.outputs[0].evalue
               for c in patcher)
    forger = _test_cells(course, "forger", "01")
    assert "more than one answer" in forger[1].outputs[0].evalue
    copied = _test_cells(course, "wrapper", "02")[0].outputs[0].evalue
    assert "the lab's own ring_all_reduce" in copied, copied
    feedback = (course / "feedback" / "honest" / "lab" / "01_collectives.html").read_text()
    assert "All-reduce by hand: correct!" in feedback


def _test_cells(course: Path, student: str, notebook: str) -> list:
    path = next((course / "autograded" / student / "lab").glob(f"{notebook}_*.ipynb"))
    return [c for c in nbformat.read(path, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade")]


def _outputs(course: Path, student: str) -> str:
    path = next((course / "autograded" / student / "lab").glob("01_*.ipynb"))
    cell = nbformat.read(path, as_version=4).cells[1]
    return "".join(o.get("text", "") for o in cell.outputs)


def test_no_hand_in_is_left_in_an_autograded_notebook(round_):
    course, _, _ = round_
    for path in (course / "autograded").rglob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("grade"):
                assert not any(MIME in o.get("data", {}) for o in cell.get("outputs", [])), path
    assert json.loads(json.dumps(SCORES))            # the expected grades are plain data (listed above)
