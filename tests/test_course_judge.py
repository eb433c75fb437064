"""The grader's judge against hand-ins a hostile notebook could send: each scenario is a hand-in (what a
patched kernel can emit) and the verdict it must get, judged as autograding does (the learner's code in a
confined sandbox with the student release's package, the checks and references in the judge alone).

:data:`SCENARIOS` lists them: only the honest controls score; every other one is refused or wrong.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import time

import pytest

from labcore.course import jail as jails
from labcore.course.handin import payload
from labcore.course.judge import judge_answer
from labcore.course.release import build_release, graded_copy
from labcore.exercises.codec import dumps

pytestmark = [pytest.mark.live, pytest.mark.slow]

GRADEBOOK = "/tmp/labcore-judge-test-gradebook.db"          # stands for the course's files: must stay untouched
SCALE = 3


# -- the learner's code of the scenarios (module-level: the hand-in reads their source) -----------------
def honest_predict(inputs):
    n = len(inputs)
    return [[inputs[s][d] for s in range(n)] for d in range(n)]


def _transpose(rows):
    return [list(r) for r in zip(*rows)]


def helper_predict(inputs):
    return _transpose(inputs) if SCALE == 3 else None


@functools.lru_cache(maxsize=None)
def _cached(n):
    return n


def decorated_predict(inputs):
    return [[inputs[s][d] for s in range(_cached(len(inputs)))] for d in range(len(inputs))]


def opens_the_gradebook(inputs):
    return open(GRADEBOOK, "a").write("hostile")


def sleeps(inputs):
    time.sleep(600)


def forks_a_sleeper(inputs):
    import subprocess
    import sys

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    return inputs


def returns_a_liar(inputs):
    class Liar:
        def __eq__(self, other):
            return True

    return Liar()


def returns_too_much(inputs):
    return list(range(12_000_000))


def recurses(inputs):
    return recurses(inputs)


def reads_the_judge(inputs):
    import os

    return open(f"/proc/{os.getppid()}/cmdline").read()


def reaches_the_lab(inputs):
    import labcore.exercises.operations as ops

    return ops.q_all_to_all.reference(inputs)


def patches_the_lab(inputs):
    import labcore.exercises.answers as answers

    answers.equal = lambda got, want, _depth=0: True
    return 0


def prints_a_lot(inputs):
    print("x" * 50_000_000)
    return honest_predict(inputs)


def raises_own(inputs):
    class Sneaky(Exception):
        def __str__(self):
            return "correct!"

    raise Sneaky()


def exits(inputs):
    raise SystemExit(0)


def copied_ring_steps(n):                  # the lab's ring_steps, copied and renamed
    rs = [[(r, (r + 1) % n, (r - 1 - s) % n, "reduce") for r in range(n)]
          for s in range(n - 1)]
    ag = [[(r, (r + 1) % n, (r - s) % n, "copy") for r in range(n)] for s in range(n - 1)]
    return rs + ag


def calls_ring_steps(n):
    from labcore.exercises.ring import ring_steps

    return ring_steps(n)


def _closure():
    from labcore.exercises.ring import ring_steps

    def inner(n):
        return ring_steps(n)
    return inner


# -- hand-ins: (exercise, payload text) ----------------------------------------------------------------------
def _hand(name, answer, **context):
    return name, payload(name, answer, **context)


def _raw(name, answer_data, **extra):
    return name, json.dumps({"labcore_handin": 1, "exercise": name, "answer": answer_data, "context": {},
                             "state": {}, **extra})


def _nested(name, depth):
    """A hand-in whose answer nests ``depth`` lists deep, written as text (json.dumps would not go that deep)."""
    answer = '{"list": [' * depth + "1" + "]}" * depth
    return name, f'{{"labcore_handin": 1, "exercise": "{name}", "answer": {answer}}}'


A2A, REDUCE, WHICH, SCHEDULE = ("operations.q_all_to_all", "operations.q_all_reduce", "operations.q_which",
                                "ring.q_ring_schedule")

# scenario -> (hand-in, the status it must get, words its message holds)
SCENARIOS = {
    # honest controls: the judge grades right answers right
    "honest value": (_hand(REDUCE, 10), "correct", "correct!"),
    "honest text": (_hand(WHICH, "reduce_scatter"), "correct", "correct!"),
    "honest function": (_hand(A2A, honest_predict), "correct", "4 cases passed"),
    "honest function with a helper and a constant": (_hand(A2A, helper_predict), "correct", ""),
    "honest function with a decorator": (_hand(A2A, decorated_predict), "correct", ""),
    "honest lambda": (_hand(A2A, lambda inputs: [list(r) for r in zip(*inputs)]), "correct", ""),
    "honest tensor": (_hand(REDUCE, __import__("torch").tensor(10.0)), "correct", ""),
    "honest function printing 50 MB": (_hand(A2A, prints_a_lot), "correct", ""),
    "honest dict with tuple keys": (_hand("nccl.q_transports", {(1, 0): "P2P", (1, 3): "NET", (0, 2): "NET"}),
                                    "correct", ""),
    # what a patched notebook can send instead of an answer
    "an answer to another exercise than its cell's": (("operations.q_which", payload(REDUCE, 10)), "incorrect",
                                                      "not to 'operations.q_which'"),
    "text that is not JSON": ((REDUCE, "correct!"), "incorrect", "could not be read"),
    "JSON that is not a hand-in": ((REDUCE, json.dumps({"verdict": "correct"})), "incorrect", "could not be read"),
    "a verdict field beside a wrong answer": (_raw(REDUCE, 3, verdict="correct", status="correct"), "incorrect",
                                              "rank 2 started with"),
    "a pickle of os.system as bytes": (_raw(REDUCE, {"bytes": base64.b64encode(pickle.dumps(os.system)).decode()}),
                                       "incorrect", "text"),
    "an exercise that is not the lab's": (_raw("operations.q_secret", 1), "error", "not an exercise of the lab"),
    "nesting 10,000 deep": (_nested(REDUCE, 10_000), "incorrect", "could not be read"),
    "3 million values": ((REDUCE, '{"labcore_handin": 1, "exercise": "operations.q_all_reduce", "answer": {"list": ['
                          + ",".join(["1"] * 3_000_000) + "]}}"), "incorrect", "could not be read"),
    "a 5,000-digit integer": (_raw(REDUCE, {"int": "9" * 5000}), "incorrect", "could not be read"),
    "nan": (_raw(REDUCE, {"float": "nan"}), "incorrect", "divided by zero"),
    "an array of objects": (_raw(REDUCE, {"ndarray": ["|O", [1], base64.b64encode(b"\0" * 8).decode()]}),
                            "incorrect", "could not be read"),
    "an array whose data does not fit its shape": (_raw(REDUCE, {"ndarray": ["<f8", [3], "AAAA"]}), "incorrect",
                                                   "could not be read"),
    "source that does not parse": (_raw(A2A, {"function": {"name": "f", "source": "def f(:", "globals": {}}}),
                                   "incorrect", "raised"),
    "source defining another name than it claims": (_raw(A2A, {"function": {"name": "f", "source":
                                                               "def g(x):\n    return x", "globals": {}}}),
                                                    "incorrect", "raised"),
    "os.system handed in as the function": (_raw(A2A, {"import": ["os", "system"]}), "incorrect", ""),
    "blank": (_hand(REDUCE, __import__("labcore.exercises", fromlist=["____"]).____), "not attempted", ""),
    "None": (_hand(REDUCE, None), "incorrect", "None"),
    "an object the grader cannot receive": (_hand(REDUCE, object()), "incorrect", "cannot receive"),
    "reserved context: cluster, timeout, world_size": (_hand(A2A, sleeps, timeout=10_000, world_size=1), "incorrect",
                                                       "did not return within 10 s"),
    # the learner's code trying the judge, the course or the machine from the sandbox
    "a function writing the course's files": (_hand(A2A, opens_the_gradebook), "incorrect", "PermissionError"),
    "a function that sleeps past its limit": (_hand(A2A, sleeps), "incorrect", "did not return within 10 s"),
    "a function that leaves a process behind": (_hand(A2A, forks_a_sleeper), "incorrect", ""),
    "a function returning an always-equal object": (_hand(A2A, returns_a_liar), "incorrect", ""),
    "a function returning 12 million values": (_hand(A2A, returns_too_much), "incorrect", ""),
    "a function that recurses forever": (_hand(A2A, recurses), "incorrect", "RecursionError"),
    "a function reading the judge's process": (_hand(A2A, reads_the_judge), "incorrect", ""),
    "a function reaching for the lab's reference": (_hand(A2A, reaches_the_lab), "incorrect", "raised"),
    "a function patching the lab's comparison": (_hand(A2A, patches_the_lab), "incorrect", "you return 0"),
    "a function raising an exception that says correct": (_hand(A2A, raises_own), "incorrect", "Sneaky"),
    "a function raising SystemExit": (_hand(A2A, exits), "incorrect", "SystemExit"),
    # the lab's own answers, however handed in
    "the lab's reference by its import path": (_raw(A2A, {"import": ["labcore.exercises.operations", "_all_to_all"]}),
                                               "incorrect", "lab's own _all_to_all"),
    "a copy of the lab's ring_steps": (_hand(SCHEDULE, copied_ring_steps), "incorrect", "lab's own ring_steps"),
    "a call of the lab's ring_steps": (_hand(SCHEDULE, calls_ring_steps), "incorrect", "lab's own ring_steps"),
    "the lab's ring_steps in a closure": (_hand(SCHEDULE, _closure()), "incorrect", "lab's own ring_steps"),
    "the lab's Zero3LinearFn for the live layer": (_raw("sharding.q_zero3_layer", {"import": [
        "labcore.exercises.sharding.reference", "Zero3LinearFn"]}), "incorrect", "lab's own Zero3LinearFn"),
    "the lab's ring_all_reduce for the live ring": (_raw("ring.q_ring_live", {"import": [
        "labcore.exercises.ring.reference", "ring_all_reduce"]}), "incorrect", "lab's own ring_all_reduce"),
    "an opaque answer to a live question": (_raw("ring.q_ring_live", {"opaque": ["socket", "<socket>", "x"]}),
                                            "incorrect", "cannot receive"),
}


@pytest.fixture(scope="module")
def confined(tmp_path_factory):
    if not any(jails.protections()[k] for k in ("user", "landlock")):
        pytest.skip("this machine can neither switch users nor confine files: nbgrader's advice, a container")
    base = tmp_path_factory.mktemp("judge")
    release = build_release(base / "release")
    jail = jails.Jail.fresh()
    lab = graded_copy(release, jail.work / "lab")
    with open(GRADEBOOK, "w") as f:
        f.write("gradebook")
    yield jail, str(lab)
    jail.close()
    with open(GRADEBOOK) as f:
        assert f.read() == "gradebook"
    os.unlink(GRADEBOOK)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_hand_in_gets_the_verdict_it_should(confined, scenario):
    jail, lab = confined
    (name, text), status, words = SCENARIOS[scenario]
    verdict = judge_answer(text, expected=name, jail=jail, release=lab, timeout=120)
    assert verdict.status == status and words in verdict.message, (scenario, verdict)


def test_only_the_honest_controls_score():
    scoring = sorted(s for s, (_, status, _) in SCENARIOS.items() if status == "correct")
    assert all(s.startswith("honest") for s in scoring) and len(SCENARIOS) - len(scoring) >= 35


def test_a_hand_in_is_data_the_judge_reads_without_running_it():
    text = dumps(honest_predict)
    assert "def honest_predict" in text and "pickle" not in text
