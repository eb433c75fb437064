"""Every exercise in labcore.exercises accepts its correct example and rejects each of its wrong ones
with feedback: the one place where each exercise's examples are checked (the live ones too, on
the ranks, with the message each mistake must get)."""
import importlib
import os
import pkgutil
import re
import subprocess
import sys

import numpy as np
import pytest

import labcore.exercises as package
from labcore.exercises import Exercise, ValueExercise
from labcore.exercises.answers import safe_repr
from labcore.exercises import data_parallel as dp
from labcore.exercises import ring
from labcore.exercises import sharding as sh
from labcore.exercises.core import _NOTHING
from labcore.exercises.live import LiveExercise
from labcore.exercises.data_parallel import mistakes as dpm
from labcore.exercises.ring import mistakes as rgm
from labcore.exercises.sharding import mistakes as shm
from labcore.live import magic

pytestmark = [pytest.mark.live, pytest.mark.slow]


def all_exercises():
    found, seen = [], set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "core":
            continue
        module = importlib.import_module(f"labcore.exercises.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Exercise) and id(obj) not in seen:      # a question under two names counts once
                seen.add(id(obj))
                found.append(pytest.param(obj, id=f"{info.name}.{name}"))
    return found


EXERCISES = all_exercises()


@pytest.fixture(scope="module", autouse=True)
def clusters():
    yield                                # the live checks start the clusters they use (magic.get_cluster)
    magic.close_all()


# What the live checks say about their examples: the right answer's remark, and each mistake's own message.
FEEDBACK = [
    (dp.q_start, dp.broadcast_start, "All 4 ranks hold rank 0's 6 parameters and 3 buffers, bit for bit, sent in 9 "
                                     "broadcast(s) from rank 0 (7496 bytes). The same on 3 and 5 ranks."),
    (dp.q_start, dpm._start_parameters_only, "the buffers 1.running_mean, 1.running_var, 1.num_batches_tracked still "
                                             "differ"),
    (dp.q_start, dpm._start_averaged, "the mean of all ranks' starting values"),
    (dp.q_start, dpm._start_own_source, "different sources for the same broadcast (rank 0 src=0, rank 1 src=1"),
    (dp.q_start, dpm._start_from_last, "every rank holds rank 3's starting parameters"),
    (dp.q_start, dpm._start_into_copies, "ranks 1, 2, 3 still hold the parameters they started with"),
    (dp.q_start, dpm._start_reseeded, "made anew or changed on every rank, rank 0 included"),
    (dp.q_average, dp.allreduce_per_parameter, "match single-process training"),
    (dp.q_average, dpm._no_divide, "4 times too large"),
    (dp.q_average, dpm._params_not_grads, "What has to agree before the optimizer step is the gradient"),
    (dp.q_average, dpm._divide_by_n_minus_1, "divided by something other than the number of ranks"),
    (dp.q_average, dpm._divide_by_four, "passed on 4 ranks, but on 3 ranks: every rank ends with the same parameters, "
                                        "but each update had the wrong size"),
    (dp.q_average, dpm._one_flat_all_reduce, "counted 1 all-reduce(s) in a step for the model's 6 parameters"),
    (dp.q_buckets, dp.allreduce_buckets, "match single-process training"),
    (dp.q_buckets, dpm._drop_last_bucket, "left over after the last full bucket were never averaged"),
    (dp.q_buckets, dpm._bucket_no_divide, "4 times too large"),
    (dp.q_buckets, dpm._bucket_per_parameter, "one per parameter"),
    (dp.q_buckets, dpm._one_bucket, "hold more than bucket_bytes"),               # bucket_bytes ignored
    (dp.q_buckets, dpm._buckets_first_to_last, "filled first layer first"),
    (dp.q_buckets, dpm._bucket_float32, "buckets all-reduced as float (7456 bytes in a step), but the gradients "
                                        "are float64"),
    (dp.q_buckets, dpm._bucket_reduce_scatter_all_gather, "no all-reduce in a step, but all_gather, reduce_scatter"),
    (dp.q_buckets, dpm._buckets_divide_by_four, "passed on 4 ranks, but on 3 ranks: every rank ends with the same "
                                                "parameters, but each update had the wrong size"),
    (dp.q_buckets, dpm._buckets_closed_past_cap, "with bucket_bytes = 2112 your buckets (the recorder saw all-reduces "
                                                 "of [2368, 8192, 4352] bytes) closed only once they held more"),
    (dp.q_buckets, dpm._buckets_never_over_cap, "with bucket_bytes = 6000 your buckets (the recorder saw all-reduces "
                                                "of [2368, 8192, 4352] bytes) never grew past bucket_bytes"),
    (dp.q_overlap, (dp._launch_async, dp._finish_wait), "match single-process training"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_no_wait), "never waited on before the optimizer step"),
    (dp.q_overlap, (dpm._launch_blocking, dp._finish_wait), "launch returned no handle"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_no_divide), "4 times too large"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_divide_first), "in place before waiting"),
    (dp.q_overlap, (dpm._launch_waits, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_overlap, (dpm._launch_waits_walrus, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_overlap, (dpm._launch_blocking_handle, dp._finish_wait), "launch ran a blocking all-reduce"),
    (dp.q_overlap, (dpm._launch_waits_on_future, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_divide_by_four), "passed on 4 ranks, but on 3 ranks: every rank ends "
                                                                  "with the same parameters, but each update had"),
    (dp.q_accumulate, dp._accumulate, "match single-process training"),
    (dp.q_accumulate, dpm._accumulate_every, "synchronised after every micro-batch"),
    (dp.q_accumulate, dpm._accumulate_never, "never synchronised"),
    (dp.q_accumulate, dpm._accumulate_unscaled, "with 2 micro-batches the gradients added up to 2 times the whole "
                                                "batch's"),
    (dp.q_accumulate, dpm._accumulate_sync_first, "ran in a backward before the last"),
    (dp.q_accumulate, dpm._accumulate_concatenated, "the micro-batches were put back together"),
    (dp.q_accumulate, dpm._accumulate_one_backward, "kept until one backward at the end"),
    (dp.q_accumulate, dpm._accumulate_by_hand, "the gradients crossed once, but piece by piece"),
    (dp.q_accumulate, dpm._accumulate_halves, "passed on 4 ranks, but on 3 ranks: with 4 micro-batches the gradients "
                                              "added up to 2 times the whole batch's"),
    (sh.q_sharded_step, sh._zero_step, "match unsharded Adam"),
    (sh.q_sharded_step, shm._zero_step_allreduce, "counted all-reduces"),
    (sh.q_sharded_step, shm._zero_step_no_gather, "every rank needs all the updated parameters"),
    (sh.q_sharded_step, shm._zero_step_summed, "the sum of the ranks' gradients, not their mean"),
    (sh.q_sharded_step, shm._zero_step_gather_gradients, "all-gathers moving 223680 bytes over 3 steps, 5 times"),
    (sh.q_sharded_step, shm._zero_step_divide_by_four, "passed on 4 ranks, but on 3 ranks: rank 0's parameters are "
                                                       "close to unsharded Adam's but not equal"),
    (sh.q_sharded_step, shm._zero_step_no_padding, "passed on 4 ranks, but on 3 ranks: a rank raised while running"),
    (sh.q_zero3_layer, sh.Zero3LinearFn, "shards match unsharded Adam"),
    (sh.q_zero3_layer, shm._KeepsWeights, "backward used weights kept from forward"),
    (sh.q_zero3_layer, shm._LocalGradients, "saw no reduce-scatter"),
    (sh.q_zero3_layer, shm._SummedGradients, "the sum of the ranks' gradients, not their mean"),
    (sh.q_zero3_layer, shm._GathersTwiceInForward, "backward used weights kept from forward"),
    (sh.q_zero3_layer, shm._KeepsWeightsOnCtx, "saved for backward or put on ctx"),
    (sh.q_zero3_layer, shm._NeverGathersInBackward, "the recorder saw backward all-gather 0 bytes"),
    (sh.q_zero3_layer, shm._AllReducedGradients, "an all-reduce delivers every rank the whole of it"),
    (sh.q_zero3_layer, shm._Zero3DivideByFour, "passed on 4 ranks, but on 3 ranks: rank 0's parameters are close to "
                                               "unsharded Adam's but not equal"),
    (sh.q_zero3_layer, shm._Zero3NoPadding, "passed on 4 ranks, but on 3 ranks: a rank raised while running"),
    (sh.q_row_parallel, sh.row_parallel, "match the unsharded MLP"),
    (sh.q_row_parallel, shm._row_all_gather, "put side by side"),
    (sh.q_row_parallel, shm._row_bias_everywhere, "every rank added b2 before the reduction"),
    (sh.q_row_parallel, shm._row_no_reduce, "never combined"),
    (sh.q_row_parallel, shm._row_bias_split, "gradient of b2 is 0.25 times the unsharded MLP's"),
    (sh.q_row_parallel, shm._row_bias_rank0, "rank 1's bias b2 got no gradient"),
    (sh.q_row_parallel, shm._row_bias_detached, "rank 0's bias b2 got no gradient"),
    (sh.q_row_parallel, shm._row_in_place_all_reduce, "rank 0 called all_reduce outside any autograd Function"),
    (ring.q_ring_live, ring.ring_all_reduce, "sent 2(n-1)/n x S = 144 bytes. The same on 3 ranks (25 elements) and on "
                                             "5 ranks (6 elements)"),
    (ring.q_ring_live, rgm._reduce_scatter_only, "but dist.all_reduce gives"),
    (ring.q_ring_live, rgm._uses_all_reduce, "rank 0 called the collective all_reduce"),
    (ring.q_ring_live, rgm._ring_for_four_ranks, "passed on 4 ranks, but on 3 ranks: with a buffer of 25 elements"),
    (ring.q_ring_live, rgm._ring_even_chunks, "passed on 4 ranks, but on 3 ranks: with a buffer of 25 elements: "
                                              "rank 0, element 24"),
    (ring.q_ring_live, rgm._ring_torch_chunk, "passed on 4 and 3 ranks, but on 5 ranks: with a buffer of 6 elements"),
]
_SAYS = {(q.title, answer): words for q, answer, words in FEEDBACK}


def _examples():
    for param in EXERCISES:
        q = param.values[0]
        yield pytest.param(q, "right", q.correct_example, id=f"{param.id}-right")
        for i, wrong in enumerate(q.wrong_examples):
            yield pytest.param(q, "wrong", wrong, id=f"{param.id}-wrong{i}")


def _says(q, answer):
    try:
        return _SAYS.get((q.title, answer))
    except TypeError:                       # an unhashable answer (a list): no message of its own listed
        return None


PER_CORE = 4        # busy processes a core: a load of about 8 on the lab's 2-core machine


@pytest.fixture(scope="class")
def load():
    """Busy loops beside the checks for as long as the class's tests run, so that the machine's load is
    about PER_CORE a core (those already running count); stopped at the end. Yields their number."""
    cores = len(os.sched_getaffinity(0))
    n = max(cores, PER_CORE * cores - round(os.getloadavg()[0]))
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for p in loops:
            p.kill()
        for p in loops:
            p.wait(timeout=60)
        print(f"\n{n} busy loops on {cores} cores; load average at the end {os.getloadavg()[0]:.1f}")


def _gets_its_verdict(exercise, kind, answer):
    assert answer is not _NOTHING, f"{exercise.title!r} needs a correct_example so the suite can check it"
    result = exercise.self_test(answer)              # the lab's own examples: a learner's check refuses its answers
    assert result.status == ("correct" if kind == "right" else "incorrect"), (answer, result.message)
    assert len(result.message) > len(exercise.title) + (0 if kind == "right" else 15), result.message
    words = _says(exercise, answer)
    if words is not None:
        assert words in result.message, result.message


@pytest.mark.parametrize("exercise, kind, answer", list(_examples()))
def test_each_example_gets_its_verdict_and_feedback(exercise, kind, answer):
    """Every example of every exercise, the right answers and the mistakes: no right answer is refused, no
    mistake passes, and each mistake listed with its feedback gets it."""
    _gets_its_verdict(exercise, kind, answer)


@pytest.mark.usefixtures("load")
class TestUnderLoad:
    """The right answers of the exercises that run code on ranks, checked while the cores are busy: a loaded
    machine refuses no right answer (a mistake is refused whatever the load: the time limits can only refuse)."""

    @pytest.mark.parametrize("exercise, kind, answer", [p for p in _examples() if p.values[1] == "right"
                                                         and isinstance(p.values[0], LiveExercise)])
    def test_a_right_answer_passes(self, exercise, kind, answer):
        _gets_its_verdict(exercise, kind, answer)


def test_every_live_example_has_its_feedback_listed():
    listed = {(title, answer) for title, answer in _SAYS}
    for q in {q for q, _, _ in FEEDBACK}:
        for answer in [q.correct_example, *q.wrong_examples]:
            assert (q.title, answer) in listed, (q.title, answer)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_exercise_has_examples_hints_and_a_solution(exercise):
    assert exercise.correct_example is not _NOTHING, (
        f"{exercise.title!r} needs a correct_example so the suite can check it")
    assert exercise.wrong_examples, f"{exercise.title!r} needs wrong_examples"
    assert exercise.hints and exercise._solution, f"{exercise.title!r} needs hints and a solution"
    # the student release leaves the last hint out: a learner there still gets one
    assert len(exercise.hints) >= 2, f"{exercise.title!r} needs two hints (the release keeps all but the last)"


@pytest.mark.parametrize("exercise", EXERCISES)
def test_untouched_is_not_attempted(exercise):
    assert exercise.evaluate().status == "not attempted"


def test_at_least_eight_exercises_across_the_notebooks():
    assert len(EXERCISES) >= 8, [p.id for p in EXERCISES]


def _never_returns(*args, **kwargs):
    import time
    while True:
        time.sleep(0.01)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_an_answer_that_never_returns_is_stopped(exercise, monkeypatch):
    monkeypatch.setattr(exercise, "time_limit", 2.0)
    result = exercise.evaluate(_never_returns)
    assert result.status == "incorrect", result.message
    for internal in ("Error", "Traceback"):  # a question that takes no function says what it takes
        assert internal not in result.message, result.message


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), "some words"], ids=repr)
@pytest.mark.parametrize("exercise", EXERCISES)
def test_strange_answers_get_a_message_about_the_answer(exercise, bad):
    result = exercise.evaluate(bad)
    assert result.status == "incorrect", result.message
    for internal in ("Error", "Traceback", "wrong sign", "raised"):
        assert internal not in result.message, result.message


# -- answers whose own methods would decide or escape: the lab reads them with its own types --------------
CALLED: list[str] = []          # the dunder methods of the hostile answers the lab called


class AlwaysEqual:
    """Equal to everything, true, and as long as anyone asks."""

    def __eq__(self, other):
        CALLED.append("__eq__")
        return True

    def __ne__(self, other):
        CALLED.append("__ne__")
        return False

    def __hash__(self):
        return 0

    def __bool__(self):
        CALLED.append("__bool__")
        return True

    def __len__(self):
        CALLED.append("__len__")
        return 2

    def __float__(self):
        CALLED.append("__float__")
        return 0.0


class RaisingRepr:
    """A repr and a str that raise."""

    def __repr__(self):
        raise ValueError("no repr for you")

    __str__ = __repr__


def _raises(name):
    def method(self, *args, **kwargs):
        CALLED.append(name)
        raise RuntimeError(f"{name} of a hostile answer")
    return method


class Hostile:
    """Every method the lab might call raises, and its class claims to be a float."""

    @property
    def __class__(self):
        CALLED.append("__class__")
        return float

    def __getattr__(self, name):
        CALLED.append(f"getattr {name}")
        raise RuntimeError("no attributes")


for _name in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__iter__",
              "__getitem__", "__contains__", "__float__", "__int__", "__index__", "__array__", "__hash__",
              "__repr__", "__str__", "__format__", "__reduce_ex__", "__getstate__", "__fspath__"):
    setattr(Hostile, _name, _raises(_name))


class FloatLiar(float):
    """A float (12345.678) that says it equals everything, with a repr that raises."""

    def __eq__(self, other):
        CALLED.append("__eq__")
        return True

    def __ne__(self, other):
        CALLED.append("__ne__")
        return False

    __hash__ = float.__hash__

    def __float__(self):
        CALLED.append("__float__")
        return 3.0

    def __repr__(self):
        raise ValueError("no repr")


class ListLiar(list):
    """A list of two nonsense items that lies about its length and items."""

    def __len__(self):
        CALLED.append("__len__")
        return 4

    def __iter__(self):
        CALLED.append("__iter__")
        return iter(["regression", "pass", "inconclusive", "inconclusive"])

    def __getitem__(self, i):
        CALLED.append("__getitem__")
        return 0

    def __eq__(self, other):
        CALLED.append("__eq__")
        return True

    __hash__ = None


class TextLiar(str):
    """Text ('zzz') that claims to equal every other text."""

    def __eq__(self, other):
        CALLED.append("__eq__")
        return True

    def __ne__(self, other):
        return False

    __hash__ = str.__hash__

    def strip(self, *args):
        CALLED.append("strip")
        return "reduce_scatter"


def _hostile_answers():
    return [AlwaysEqual(), RaisingRepr(), Hostile(), FloatLiar(12345.678), ListLiar([7, 7]), TextLiar("zzz"),
            {AlwaysEqual(): AlwaysEqual()}, (AlwaysEqual(), AlwaysEqual()), [Hostile(), Hostile()]]


def _returns(hostile):
    def answer(*args, **kwargs):
        return hostile
    return answer


HOSTILE_IDS = ["always-equal", "raising-repr", "hostile", "float-liar", "list-liar", "text-liar", "dict-of-liars",
               "pair-of-liars", "list-of-hostiles"]
# the exercises whose checks run the learner's code on live ranks
LIVE = {p.values[0].title for p in EXERCISES if isinstance(p.values[0], LiveExercise)}


def _hostile_verdict(exercise, answer):
    CALLED.clear()
    result = exercise.evaluate(answer)          # never raises
    assert result.status == "incorrect", result.message
    assert "correct!" not in result.message and "Traceback" not in result.message, result.message
    assert len(result.message) > len(exercise.title) + 15, result.message
    assert set(CALLED) <= {"__repr__", "__str__"}, (CALLED, result.message)     # no method of the answer decided
    return result


@pytest.mark.parametrize("which", range(len(HOSTILE_IDS)), ids=HOSTILE_IDS)
@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_hostile_answer_is_refused_and_described(exercise, which):
    _hostile_verdict(exercise, _hostile_answers()[which])


@pytest.mark.parametrize("which", range(len(HOSTILE_IDS)), ids=HOSTILE_IDS)
@pytest.mark.parametrize("exercise", [p for p in EXERCISES if p.values[0].title not in LIVE])
def test_a_function_that_returns_a_hostile_answer_is_refused(exercise, which):
    _hostile_verdict(exercise, _returns(_hostile_answers()[which]))


def test_an_always_equal_result_is_not_21_cases_passed():
    from labcore.exercises.trees import q_binomial_rounds

    result = q_binomial_rounds.evaluate(_returns(AlwaysEqual()))
    assert result.status == "incorrect" and "21 cases passed" not in result.message
    assert "For n=1 you return" in result.message, result.message


def test_a_raising_repr_is_named_not_raised():
    from labcore.exercises.operations import q_all_reduce

    result = q_all_reduce.evaluate(RaisingRepr())          # an object of the learner's: named by its class, not run
    assert result.status == "incorrect" and "a RaisingRepr" in result.message, result.message


# -- feedback gives nothing away: no wrong answer's message holds the right one, or narrows a small choice ----
def _numbers(value) -> list[str]:
    """How a right number could appear in a message (small whole numbers are too common to look for)."""
    v = float(value)
    if v == int(v):
        return [] if abs(v) < 3 else [rf"(?<![\w.^]){int(v)}(?![\w^]|\.\d)", f"{int(v):,}"]
    return [rf"(?<![\d.]){re.escape(f'{v:{f}}')}(?!\d)" for f in (".4g", ".3g")] + (
        [rf"(?<![\d.]){round(v)}(?![\d.])"] if abs(v) >= 100 else [])


def _spellings(text: str) -> list[str]:
    words = text.lower().replace("-", "_").replace(" ", "_")
    return [re.escape(words.replace("_", sep)) for sep in ("_", " ", "-")]


def _right(q, wrong=None) -> list[str]:
    """Patterns (regular expressions, case-insensitive) that would give ``q``'s right answer away to one who
    answered ``wrong`` (what the learner named themselves is no news to them)."""
    right = q.expected_value() if isinstance(q, ValueExercise) else q.correct_example
    if isinstance(right, str):
        return _spellings(right) + (["tree"] if right == "double_tree" else [])
    if isinstance(right, (int, float, np.number)) and not isinstance(right, bool):
        return _numbers(right)
    if isinstance(right, tuple) and len(right) == 2 and isinstance(right[1], str):          # (rank, cause)
        mine = wrong if isinstance(wrong, tuple) and len(wrong) == 2 else (object(), object())
        return ((_spellings(right[1]) if mine[1] != right[1] else [])
                + ([rf"rank {right[0]}\b"] if right[0] is not None and mine[0] != right[0] else []))
    if isinstance(right, tuple) and all(isinstance(v, int) for v in right):                # a hop
        a, b = right
        return [rf"\b{a} ?-> ?{b}\b", rf"\({a}, {b}\)"]
    if isinstance(right, tuple):
        return [p for v in right for p in _numbers(v)]
    return []


SMALL_CHOICES = {          # questions of a few options: a wrong answer's message names no other option
    "8 KiB on 64 nodes": ["ring", "hierarch", "tree"],
    "Slowest hop": [rf"\b{a} ?-> ?{b}\b|\({a}, {b}\)" for a, b in ((14, 13), (12, 4), (15, 13), (11, 9))],
}


def _wrong_answers():
    for param in EXERCISES:
        q = param.values[0]
        if q.title in LIVE or not _right(q) and q.title not in SMALL_CHOICES:
            continue
        for i, wrong in enumerate(q.wrong_examples):
            yield pytest.param(q, wrong, id=f"{param.id}-wrong{i}")


@pytest.mark.parametrize("exercise, wrong", list(_wrong_answers()))
def test_no_feedback_gives_the_answer_away(exercise, wrong):
    from labcore.exercises.nccl import CANDIDATES

    # what the learner gave is theirs to see again, and so is the question's own list of options
    message = exercise.self_test(wrong).message.lower().replace(str(list(CANDIDATES)), "")
    mine = safe_repr(wrong).lower()
    for pattern in _right(exercise, wrong):
        if not re.search(pattern, mine, flags=re.I):
            assert not re.search(pattern, message, flags=re.I), (pattern, message)
    options = SMALL_CHOICES.get(exercise.title, [])
    if any(re.search(pattern, mine, flags=re.I) for pattern in options):     # one of the options, and wrong
        for pattern in options:
            if not re.search(pattern, mine, flags=re.I):                      # another option than the learner's own
                assert not re.search(pattern, message, flags=re.I), (pattern, message)


def test_the_right_transport_of_a_hop_is_not_named_for_it():
    from labcore.exercises.nccl import q_p2p_disable, q_transports

    for q in (q_transports, q_p2p_disable):
        for wrong in q.wrong_examples:
            if not isinstance(wrong, dict):
                continue
            message = q.self_test(wrong).message
            named = [w for w in ("P2P", "SHM", "NET") if w in message]
            right = {hop: v for hop, v in q.correct_example.items() if wrong.get(hop) != v}
            assert not set(named) & set(right.values()) - set(wrong.values()), (wrong, message)


def test_the_hang_clinics_questions_do_not_name_their_cause():
    from labcore.exercises import hangs

    for name in ("q_case_1", "q_case_2", "q_case_3"):
        q = getattr(hangs, name)
        for text in (name, q.title, q.prompt):
            for cause in hangs.CAUSES:
                assert not any(re.search(s, text, flags=re.I) for s in _spellings(cause) if cause != "straggler"), text
        assert "straggler" not in q.title.lower() and "shape" not in q.title.lower()
