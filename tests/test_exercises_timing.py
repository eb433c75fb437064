"""Time limits count only the learner's code: never torch's import, the lab's references or the ranks'
start-up; an alarm never cuts an import in half, and a check that timed out leaves the session healthy."""
import subprocess
import sys
import textwrap
import time

import pytest

import labcore as lc
from labcore.live import magic
from labcore.exercises import CustomExercise, FunctionExercise
from labcore.exercises.evidence import q_repeats
from labcore.exercises.ring import q_ring_live, ring_all_reduce
from labcore.exercises.timing import OutOfTime, learner_code, limit

pytestmark = pytest.mark.live


def test_the_labs_own_work_around_the_answer_is_not_timed():
    def checker(answer):
        time.sleep(1.2)                         # the lab's own work: a reference, an import, a simulation
        if learner_code(answer) != 2:
            raise AssertionError("wrong")

    q = CustomExercise("slow lab", "?", checker=checker, time_limit=0.5)
    assert q.evaluate(lambda: 2).status == "correct"


def test_the_limit_is_shared_by_all_the_learners_calls():
    def slow(n):
        time.sleep(0.3)
        return n

    q = FunctionExercise("steps", "?", reference=lambda n: n, cases=[(k,) for k in range(8)], time_limit=1.0)
    result = q.evaluate(slow)
    assert result.status == "incorrect" and "did not return within 1 s" in result.message


def test_an_alarm_during_an_import_waits_for_the_import(tmp_path, monkeypatch):
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(1.0)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def imports_then_loops():
        import slow_to_import  # noqa: F401
        while True:
            time.sleep(0.01)

    with limit(0.2), pytest.raises(OutOfTime):
        learner_code(imports_then_loops)
    assert sys.modules["slow_to_import"].DONE          # imported whole, not cut at the alarm
    monkeypatch.delitem(sys.modules, "slow_to_import")


def test_a_check_after_a_timeout_reads_a_whole_number_as_one():
    q = FunctionExercise("never", "?", reference=lambda n: n, cases=[(1,)], time_limit=0.2)
    assert "did not return" in q.evaluate(lambda n: time.sleep(5)).message
    message = q_repeats.evaluate(4).message
    assert "whole number" not in message and "smallest p-value" in message, message


def test_a_timeout_in_a_fresh_session_leaves_torch_whole(tmp_path):
    """q_size in a new interpreter: the learner's function imports torch and loops, cut off after 0.2 s (the
    script is a file, as a notebook's cells are: the check receives a function's source)."""
    script = textwrap.dedent("""
        import sys
        from labcore.exercises.evidence import q_repeats
        from labcore.exercises.measuring import nccl_tests_size, q_size
        assert "torch" not in sys.modules

        def slow(op, count, nranks, itemsize):
            import torch            # the learner's own import, inside the limit
            while True:
                pass

        q_size.time_limit = 0.2
        print(q_size.evaluate(slow).message)
        import torch
        print(torch.linspace(0, 1, 3).tolist())
        q_size.time_limit = 10.0
        print(q_size.self_test(nccl_tests_size).status)
        print(q_repeats.evaluate(4).message)
    """)
    (tmp_path / "session.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "session.py")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert "did not return within 0.2 s" in lines[0], lines
    assert lines[1] == "[0.0, 0.5, 1.0]" and lines[2] == "correct", lines
    assert "whole number" not in lines[3] and "smallest p-value" in lines[3], lines


@pytest.fixture(scope="module")
def fresh_ranks():
    clusters = []

    def start(n):
        clusters.append(lc.Cluster(n, backend="gloo", show_output=False, timeout=60))
        return clusters[-1]

    yield start
    for cl in clusters:
        cl.close()
    magic.close_all()


def _recording_calls(monkeypatch, cl):
    calls = []
    real = cl.call

    def call(fn, args=(), kwargs=None, timeout=None):
        start = time.monotonic()
        try:
            return real(fn, args, kwargs, timeout=timeout)
        finally:
            calls.append((args[0] if args else None, timeout, time.monotonic() - start))

    monkeypatch.setattr(cl, "call", call)
    return calls


def test_fresh_ranks_run_the_labs_answer_first_and_the_learners_under_its_own_limit(fresh_ranks, monkeypatch):
    cl = fresh_ranks(4)
    calls = _recording_calls(monkeypatch, cl)

    def my_ring(tensor):
        return ring_all_reduce(tensor)

    result = q_ring_live.self_test(my_ring, cluster=cl)
    assert result.status == "correct", result.message
    (first, first_timeout, _), (second, second_timeout, _) = calls
    assert first is ring_all_reduce and first_timeout > q_ring_live.time_limit      # the lab's own, first
    assert second is my_ring and second_timeout == q_ring_live.time_limit == 30     # then the learner's, 30 s
    calls.clear()
    assert q_ring_live.self_test(my_ring, cluster=cl).status == "correct"
    assert [answer for answer, _, _ in calls] == [my_ring]                           # warm ranks: no second set-up


def test_notebook_02s_deadlock_promise_is_the_checks_limit():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parent.parent / "notebooks" / "02_ring_allreduce.ipynb").read_text())
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert f"reported after {q_ring_live.time_limit:g} s" in text
