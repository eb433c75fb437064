"""A check of the learner's code runs apart, in a child process killed at its deadline: whatever the code
does (swallow the alarm, ignore SIGALRM, exit, crash, start processes) the check gives a verdict and the
session goes on; Ctrl-C still stops a check; the lab's own answer is refused handed in; hint() takes anything."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from labcore.exercises import FunctionExercise, ValueExercise, checker
from labcore.exercises.operations import q_all_to_all
from labcore.exercises.trees import q_tree_parent

pytestmark = pytest.mark.live

LIMIT = 1.0


def _q():
    return FunctionExercise("steps", "2(n-1)?", reference=lambda n: 2 * (n - 1), cases=[(2,), (4,)],
                            time_limit=LIMIT)


def _swallows_the_alarm(n):
    while True:                        # a retry loop with a bare except, as a learner writes one
        try:
            time.sleep(60)
        except:                        # noqa: E722 (the point: it swallows the stop too)
            continue


def _ignores_sigalrm(n):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        pass


def _blocks_sigalrm(n):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        time.sleep(0.01)


def _exits(n):
    raise SystemExit(3)


def _interrupts(n):
    raise KeyboardInterrupt


def _generator_exit(n):
    raise GeneratorExit


def _os_exit(n):
    os._exit(4)


def _crashes(n):
    import ctypes

    return ctypes.string_at(0)


def _kills_itself(n):
    os.kill(os.getpid(), signal.SIGKILL)


def _starts_a_sleeper(n):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=False)
    return 2 * (n - 1)


@pytest.mark.timeout(180, method="thread")       # code that never returns must not hang the suite where it is not stopped
@pytest.mark.parametrize("answer, says", [
    (_swallows_the_alarm, f"did not return within {LIMIT:g} s"),
    (_ignores_sigalrm, f"did not return within {LIMIT:g} s"),
    (_blocks_sigalrm, f"did not return within {LIMIT:g} s"),
    (_exits, "raised SystemExit: 3"),
    (_interrupts, "raised KeyboardInterrupt"),
    (_generator_exit, "raised GeneratorExit"),
    (_os_exit, "exited with status 4"),
    (_crashes, "killed by SIGSEGV"),
    (_kills_itself, "killed by SIGKILL"),
], ids=lambda v: getattr(v, "__name__", "says"))
def test_every_way_the_code_can_end_gets_a_verdict_in_time(answer, says):
    start = time.monotonic()
    result = _q().evaluate(answer)
    assert time.monotonic() - start < LIMIT + checker.GRACE_S + 10
    assert result.status == "incorrect" and says in result.message, result.message
    assert _q().evaluate(lambda n: 2 * (n - 1)).status == "correct"          # the session goes on


def test_what_the_code_started_goes_with_its_check():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert _q().evaluate(_starts_a_sleeper).status == "correct"
    time.sleep(0.5)
    assert _sleepers(before) == []


def _sleepers(before: set) -> list:
    """Descendants started since ``before`` that still run the sleeper (a zombie waits to be reaped: it runs nothing)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE and "time.sleep(300)" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def test_the_checks_process_is_spawned_not_forked_from_the_notebook():
    checker.start()
    template = checker._TEMPLATE["proc"]
    command = " ".join(psutil.Process(template.pid).cmdline())
    assert "from labcore.exercises.checker import _serve" in command           # a fresh interpreter
    assert os.getsid(template.pid) != os.getsid(0)                             # Ctrl-C of the notebook misses it


@pytest.mark.timeout(180, method="thread")
def test_ctrl_c_stops_a_check_and_leaves_nothing_running(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent("""
        import sys
        from labcore.exercises import FunctionExercise

        def forever(n):
            while True:
                try:
                    pass
                except BaseException:
                    pass

        q = FunctionExercise("steps", "?", reference=lambda n: n, cases=[(2,)], time_limit=300)
        print("checking", flush=True)
        q.check(forever)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "checking"
    time.sleep(2.0)
    family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                              for p in family):
        time.sleep(0.1)
    assert not [p for p in family if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def _reference_copy(rank, n):
    return -1 if rank == 0 else (rank - 1) // 2


def test_the_labs_own_answer_is_refused_handed_in_copied_or_called():
    from labcore.exercises.ring import q_ring_schedule, ring_steps
    from labcore.exercises.ring import reference

    scope = {}
    exec(compile(textwrap.dedent(__import__("inspect").getsource(ring_steps)).replace("def ring_steps", "def mine"),
                 "<copied from the lab>", "exec"), vars(reference).copy() | scope, scope)
    for answer in (ring_steps, scope["mine"], lambda n: ring_steps(n)):
        result = q_ring_schedule.evaluate(answer)
        assert result.status == "incorrect" and "the lab's own ring_steps" in result.message, result.message
    assert q_ring_schedule.self_test(ring_steps).status == "correct"           # the lab's tests still check it


def test_a_short_answer_written_as_the_lab_writes_it_is_not_refused():
    q = q_tree_parent
    assert q.evaluate(q.reference).status == "incorrect"                          # the object itself
    result = q.evaluate(lambda rank, n: -1 if rank == 0 else (rank - 1) // 2)
    assert "lab's own" not in result.message


@pytest.mark.parametrize("level", [float("nan"), float("inf"), -1, 0, "2", None, 10 ** 100, 2.5, [1], object()])
def test_hint_takes_any_level_without_raising(level, capsys):
    q_all_to_all.hint(level)
    out = capsys.readouterr().out
    assert "hint 1 of" in out or "hint 2 of" in out or "hint" in out


class _ReprLoops:
    def __repr__(self):
        while True:
            try:
                time.sleep(0.01)
            except BaseException:
                pass


class _ReprExits:
    def __repr__(self):
        raise SystemExit("no")


@pytest.mark.timeout(180, method="thread")
@pytest.mark.parametrize("answer", [_ReprLoops(), _ReprExits(), [_ReprLoops()], {"k": _ReprExits()}],
                         ids=["repr-loops", "repr-exits", "in-a-list", "in-a-dict"])
def test_an_object_of_the_learners_is_checked_apart(answer):
    q = ValueExercise("number", "?", expected=2.0, time_limit=LIMIT)
    start = time.monotonic()
    result = q.evaluate(answer)
    assert time.monotonic() - start < LIMIT + checker.GRACE_S + 10
    assert result.status == "incorrect", result.message


def test_plain_values_are_checked_in_the_notebook_without_a_process():
    q = ValueExercise("number", "?", expected=2.0)
    before = checker._TEMPLATE.get("proc")
    assert q.evaluate(2.0).status == "correct" and q.evaluate(math.pi).status == "incorrect"
    assert checker._TEMPLATE.get("proc") is before
