"""Every exercise in labcore.exercises accepts its correct example and rejects each of its wrong ones
with feedback: the one place where each exercise's examples are checked (the live ones too, on
the ranks, with the message each mistake must get)."""
import importlib
import pkgutil

import pytest

import labcore.exercises as package
from labcore.exercises import Exercise
from labcore.exercises import data_parallel as dp
from labcore.exercises import sharding as sh
from labcore.exercises.core import _NOTHING
from labcore.exercises.data_parallel import mistakes as dpm
from labcore.exercises.sharding import mistakes as shm
from labcore.live import magic


def all_exercises():
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "core":
            continue
        module = importlib.import_module(f"labcore.exercises.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Exercise):
                found.append(pytest.param(obj, id=f"{info.name}.{name}"))
    return found


EXERCISES = all_exercises()


@pytest.fixture(scope="module", autouse=True)
def clusters():
    yield                                # the live checks start the clusters they use (magic.get_cluster)
    magic.close_all()


# What the live checks say about their examples: the right answer's remark, and each mistake's own message.
FEEDBACK = [
    (dp.q_average, dp.allreduce_per_parameter, "match single-process training"),
    (dp.q_average, dpm._no_divide, "4 times too large"),
    (dp.q_average, dpm._params_not_grads, "What has to agree before the optimizer step is the gradient"),
    (dp.q_average, dpm._divide_by_n_minus_1, "divided by something other than the number of ranks"),
    (dp.q_buckets, dp.allreduce_buckets, "match single-process training"),
    (dp.q_buckets, dpm._drop_last_bucket, "left over after the last full bucket were never averaged"),
    (dp.q_buckets, dpm._bucket_no_divide, "4 times too large"),
    (dp.q_buckets, dpm._bucket_per_parameter, "one per parameter"),
    (dp.q_buckets, dpm._one_bucket, "hold more than bucket_bytes"),               # bucket_bytes ignored
    (dp.q_buckets, dpm._buckets_first_to_last, "filled first layer first"),
    (dp.q_buckets, dpm._bucket_float32, "buckets all-reduced as float (7456 bytes in a step), but the gradients "
                                        "are float64"),
    (dp.q_buckets, dpm._bucket_reduce_scatter_all_gather, "no all-reduce in a step, but all_gather, reduce_scatter"),
    (dp.q_overlap, (dp._launch_async, dp._finish_wait), "match single-process training"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_no_wait), "never waited on before the optimizer step"),
    (dp.q_overlap, (dpm._launch_blocking, dp._finish_wait), "launch returned no handle"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_no_divide), "4 times too large"),
    (dp.q_overlap, (dp._launch_async, dpm._finish_divide_first), "in place before waiting"),
    (dp.q_overlap, (dpm._launch_waits, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_overlap, (dpm._launch_waits_walrus, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_overlap, (dpm._launch_blocking_handle, dp._finish_wait), "launch ran a blocking all-reduce"),
    (dp.q_overlap, (dpm._launch_waits_on_future, dp._finish_wait), "launch waited for its all-reduce before returning"),
    (dp.q_accumulate, dp._accumulate, "match single-process training"),
    (dp.q_accumulate, dpm._accumulate_every, "synchronised after every micro-batch"),
    (dp.q_accumulate, dpm._accumulate_never, "never synchronised"),
    (dp.q_accumulate, dpm._accumulate_unscaled, "differ from single-process training"),
    (dp.q_accumulate, dpm._accumulate_sync_first, "ran in a backward before the last"),
    (dp.q_accumulate, dpm._accumulate_concatenated, "the micro-batches were put back together"),
    (dp.q_accumulate, dpm._accumulate_one_backward, "kept until one backward at the end"),
    (dp.q_accumulate, dpm._accumulate_by_hand, "the gradients crossed once, but piece by piece"),
    (sh.q_sharded_step, sh._zero_step, "match unsharded Adam"),
    (sh.q_sharded_step, shm._zero_step_allreduce, "counted all-reduces"),
    (sh.q_sharded_step, shm._zero_step_no_gather, "every rank needs all the updated parameters"),
    (sh.q_sharded_step, shm._zero_step_summed, "the sum of the ranks' gradients, not their mean"),
    (sh.q_sharded_step, shm._zero_step_gather_gradients, "all-gathers moving 223680 bytes over 3 steps, 5 times"),
    (sh.q_zero3_layer, sh.Zero3LinearFn, "shards match unsharded Adam"),
    (sh.q_zero3_layer, shm._KeepsWeights, "backward used weights kept from forward"),
    (sh.q_zero3_layer, shm._LocalGradients, "saw no reduce-scatter"),
    (sh.q_zero3_layer, shm._SummedGradients, "the sum of the ranks' gradients, not their mean"),
    (sh.q_zero3_layer, shm._GathersTwiceInForward, "backward used weights kept from forward"),
    (sh.q_zero3_layer, shm._KeepsWeightsOnCtx, "saved for backward or put on ctx"),
    (sh.q_zero3_layer, shm._NeverGathersInBackward, "the recorder saw backward all-gather 0 bytes"),
    (sh.q_zero3_layer, shm._AllReducedGradients, "an all-reduce delivers every rank the whole of it"),
    (sh.q_row_parallel, sh.row_parallel, "match the unsharded MLP"),
    (sh.q_row_parallel, shm._row_all_gather, "put side by side"),
    (sh.q_row_parallel, shm._row_bias_everywhere, "every rank added b2 before the reduction"),
    (sh.q_row_parallel, shm._row_no_reduce, "never combined"),
    (sh.q_row_parallel, shm._row_bias_split, "gradient of b2 is 0.25 times the unsharded MLP's"),
    (sh.q_row_parallel, shm._row_bias_rank0, "rank 1's bias b2 got no gradient"),
    (sh.q_row_parallel, shm._row_bias_detached, "rank 0's bias b2 got no gradient"),
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


@pytest.mark.parametrize("exercise, kind, answer", list(_examples()))
def test_each_example_gets_its_verdict_and_feedback(exercise, kind, answer):
    assert answer is not _NOTHING, f"{exercise.title!r} needs a correct_example so the suite can check it"
    result = exercise.evaluate(answer)
    assert result.status == ("correct" if kind == "right" else "incorrect"), (answer, result.message)
    assert len(result.message) > len(exercise.title) + (0 if kind == "right" else 15), result.message
    words = _says(exercise, answer)
    if words is not None:
        assert words in result.message, result.message


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
