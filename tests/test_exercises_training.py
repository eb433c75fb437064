"""Exercises of notebooks 05 and 06 on live ranks, beyond their examples (each right answer and each
mistake, with its own message, is checked once, in test_exercises_all.py): other right answers,
value questions, starter code, hangs, a broadcast without one source, the bytes question's setup and the
bucket layouts."""
import pytest
import torch.distributed as dist

from labcore.exercises import data_parallel as dp
from labcore.exercises import sharding as sh
from labcore.exercises.data_parallel import mistakes as dpm
from labcore.exercises.sharding import mistakes as shm
from labcore.live import magic

pytestmark = pytest.mark.live


@pytest.fixture(scope="module", autouse=True)
def cluster():
    yield magic.get_cluster(4)          # what the checks use when no cluster is given
    magic.close_all()


def _launch_future(bucket):
    return dist.all_reduce(bucket, async_op=True).get_future()          # a Future is a handle too


def _launch_divide_first(bucket):
    bucket /= dist.get_world_size()                 # before the all-reduce starts: nothing is in flight yet
    return dist.all_reduce(bucket, async_op=True)


def _start_with_ddp(model):
    from torch.nn.parallel import DistributedDataParallel as DDP

    DDP(model)                                      # DDP broadcasts rank 0's parameters and buffers when built


def _start_state_dict(model):
    for t in model.state_dict().values():           # the state dict's tensors are the model's own
        dist.broadcast(t, 0)


def _start_as_objects(model):
    box = [model.state_dict()]
    dist.broadcast_object_list(box, src=0)
    model.load_state_dict(box[0])


OTHER_RIGHT_ANSWERS = [
    (dp.q_overlap, (_launch_future, dp._finish_wait)),
    (dp.q_overlap, (_launch_divide_first, dpm._finish_no_divide)),
    (dp.q_start, _start_with_ddp), (dp.q_start, _start_state_dict), (dp.q_start, _start_as_objects),
]


@pytest.mark.parametrize("exercise, answer", OTHER_RIGHT_ANSWERS,
                         ids=[f"{q.title}-{i}" for i, (q, _) in enumerate(OTHER_RIGHT_ANSWERS)])
def test_other_right_answers_pass(exercise, answer):
    result = exercise.self_test(answer)
    assert result.status == "correct", result.message


VALUES = [
    (dp.q_ddp_bytes, 2 * 3 / 4 * 500776, dict(grad_bytes=500776, ranks=4), "correct!"),
    (dp.q_ddp_bytes, 500776, dict(grad_bytes=500776, ranks=4), "the gradient buffer itself"),
    (dp.q_ddp_bytes, 2 * 500776, dict(grad_bytes=500776, ranks=4), "never sends the chunk it keeps"),
    (dp.q_ddp_bytes, 3 / 4 * 500776, dict(grad_bytes=500776, ranks=4), "one phase of the ring"),
    (dp.q_ddp_bytes, 6 * 500776, dict(grad_bytes=500776, ranks=4), "not the whole buffer"),
    (dp.q_ddp_bytes, 1.0, dict(grad_bytes=500776, ranks=4), "Count the steps"),
    (dp.q_ddp_bytes, 2 * 4 / 3 * 500776, dict(grad_bytes=500776, ranks=4), "upside down"),       # n for n-1
    (dp.q_ddp_bytes, 2 * 3 / 4 * 500776 / 1e9, dict(grad_bytes=500776, ranks=4), "in GB"),
    (dp.q_ddp_bytes, 2 * 3 / 4 * 500776 / 2 ** 20, dict(grad_bytes=500776, ranks=4), "in MiB"),
    (dp.q_ddp_bytes, 8 * 2 * 3 / 4 * 500776, dict(grad_bytes=500776, ranks=4), "in bits"),
    (dp.q_ddp_bytes, 2 * 3 / 4 * 500776, {}, "correct!"),          # the notebook's G and n are the defaults
    (dp.q_ddp_bytes, "751164", {}, "expected a number"),            # the right digits, as text
    (dp.q_ddp_bytes, True, {}, "expected a number"),
    (dp.q_ddp_bytes, "lots", {}, "expected a number"),
    (dp.q_ddp_bytes, "inf", {}, "expected a number"),
    # the check knows the notebook's G and n: other ones are refused, blaming the arguments
    (dp.q_ddp_bytes, 1.5 * 125194, dict(grad_bytes=125194, ranks=4), "grad_bytes=125194, which is not the gradient"),
    (dp.q_ddp_bytes, 500776, dict(grad_bytes=500776, ranks=2), "the check was given ranks=2"),
    (dp.q_ddp_bytes, 0, dict(grad_bytes=500776, ranks=1), "the check was given ranks=1"),
    (dp.q_ddp_bytes, 1.5 * 500776 / 1e6, dict(grad_bytes=500776 / 1e6, ranks=4), "not the gradient bytes"),
    (dp.q_ddp_bytes, 1.5 * 500776, dict(grad_bytes=500776, ranks=0), "the check was given ranks=0"),
    (dp.q_ddp_bytes, 1.5 * 500776, dict(grad_bytes="500776", ranks=4), "the check was given grad_bytes='500776'"),
    # GB each rank sends in a ZeRO-3 step of 7e9 bfloat16 parameters on 64 ranks: 3 x 63/64 x 14 GB
    (sh.q_zero3_volume, 3 * 63 / 64 * 14, {}, "correct!"),
    (sh.q_zero3_volume, 2 * 63 / 64 * 14, {}, "2Ψ is what stages 1 and 2 move"),
    (sh.q_zero3_volume, 4 * 63 / 64 * 14, {}, "reduce-scattered once"),
    (sh.q_zero3_volume, 3, {}, "3 is the volume in units of Ψ, as in the table"),       # copied from the table
    (sh.q_zero3_volume, 3 * 14, {}, "never sends the piece it keeps"),
    (sh.q_zero3_volume, 3 * 63 / 64 * 7, {}, "counts parameters, not bytes"),
    (sh.q_zero3_volume, "three", {}, "the text"),
    (sh.q_zero3_volume, "41.34", {}, "the text"),
    (sh.q_zero3_volume, True, {}, "yes/no"),
    (sh.q_padding, sh.shard_of, {}, "correct!"),
    (sh.q_padding, shm._chunk_shard, {}, "shards have sizes [3, 3, 3, 1]"),
    (sh.q_padding, shm._floor_shard, {}, "belong to no rank"),
    (sh.q_padding, shm._pad_ones, {}, "the padding is off"),
    (sh.q_padding, shm._whole_padded, {}, "the whole tensor or more"),
    (sh.q_padding, lambda flat, rank, n: None, {}, "return a tensor"),
]


@pytest.mark.parametrize("exercise, answer, context, message", VALUES)
def test_value_feedback_names_the_mistake_without_the_answer(exercise, answer, context, message):
    result = exercise.self_test(answer, **context)
    assert message in result.message
    assert "x the right value" not in result.message


def _unwritten(*args):
    raise NotImplementedError("replace this line with your code")


class _Unwritten:
    forward = staticmethod(_unwritten)
    backward = staticmethod(_unwritten)


@pytest.mark.parametrize("exercise, starter", [
    (dp.q_start, _unwritten), (dp.q_average, _unwritten), (dp.q_buckets, _unwritten), (dp.q_overlap, (_unwritten, _unwritten)),
    (dp.q_accumulate, _unwritten), (sh.q_sharded_step, _unwritten), (sh.q_zero3_layer, _Unwritten),
    (sh.q_row_parallel, _unwritten), (sh.q_padding, _unwritten)])
def test_starter_code_is_not_attempted(exercise, starter):
    assert exercise.self_test(starter).status == "not attempted"


def _start_from_parity(model):
    for t in model.state_dict().values():
        dist.broadcast(t, src=dist.get_rank() % 2)  # two camps of ranks, each naming its own source


def test_a_broadcast_whose_ranks_name_different_sources_is_stopped_not_waited_for():
    result = dp.q_start.self_test(_start_from_parity, timeout=8)
    assert result.status == "incorrect" and "rank 1 src=1, rank 2 src=0" in result.message, result.message
    assert "did not finish" not in result.message
    assert dp.q_start.self_test(dp.broadcast_start).status == "correct"      # the ranks are fine afterwards


def _rank0_skips(model):
    import torch.distributed as dist

    if dist.get_rank() != 0:
        dp.allreduce_per_parameter(model)


def test_a_hang_is_reported_within_the_timeout():
    result = dp.q_average.self_test(_rank0_skips, timeout=8)
    assert result.status == "incorrect" and "did not finish within 8 s" in result.message
    assert dp.q_average.self_test(dp.allreduce_per_parameter).status == "correct"     # the group healed


@pytest.mark.parametrize("module", [dp, dp.reference, dp.checks, dpm, dp.questions,
                                    sh, sh.reference, sh.checks, shm, sh.questions], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    import doctest

    assert doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


@pytest.mark.parametrize("context", [dict(grad_bytes=125194, ranks=4), dict(grad_bytes=500776, ranks=2),
                                     dict(grad_bytes=500776, ranks=0), dict(grad_bytes="500776", ranks=4)])
def test_the_bytes_question_refuses_the_wrong_setup_not_the_answer(context):
    result = dp.q_ddp_bytes.self_test(2 * 3 / 4 * 500776, **context)
    assert result.status == "incorrect" and "the check was given" in result.message, result.message
    assert "not a number of bytes" not in result.message and "751164" not in result.message


def test_the_bytes_question_defaults_to_the_notebooks_model():
    import torch

    deep = dp.make_model(dims=dp.DEEP, dtype=torch.float32)
    assert sum(p.numel() * p.element_size() for p in deep.parameters()) == dp.DEEP_GRAD_BYTES


@pytest.mark.parametrize("bucket_bytes", [6000, 1 << 30, 1])
def test_the_bucket_layouts_the_check_accepts_start_with_ddps(bucket_bytes):
    model = dp.make_model()
    ddp_rule = [sum(p.numel() * p.element_size() for p in b) for b in dp.buckets_of(model.parameters(), bucket_bytes)]
    assert dp._layouts(bucket_bytes)[0] == ddp_rule
    assert all(sum(layout) == sum(ddp_rule) for layout in dp._layouts(bucket_bytes) + dp._layouts(bucket_bytes, False))


def _launch_rank0_waits(bucket):
    import torch.distributed as dist

    work = dist.all_reduce(bucket, async_op=True)
    if dist.get_rank() == 0:
        dist.barrier()                       # the others never come: rank 0 hangs inside backward
    return work


def _zero_step_rank0_gathers_twice(params, shards, opt):
    import torch.distributed as dist

    sh._zero_step(params, shards, opt)
    if dist.get_rank() == 0:
        sh.gather_full(shards[0], params[0].shape)


@pytest.mark.parametrize("exercise, answer", [
    (dp.q_overlap, (_launch_rank0_waits, dp._finish_wait)),
    (sh.q_sharded_step, _zero_step_rank0_gathers_twice),
])
def test_an_answer_that_hangs_one_rank_is_reported(exercise, answer):
    result = exercise.self_test(answer, timeout=6)
    assert result.status == "incorrect" and "did not finish within 6 s" in result.message, result.message
    assert "rank 0" in result.message                      # where the stuck rank waits


def _cells_before(notebook: str, marker: str) -> list[str]:
    """The code cells of a notebook above the first one that holds ``marker``."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parent.parent / "notebooks" / notebook).read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return code[:next(i for i, c in enumerate(code) if marker in c)]


def test_no_summary_above_the_bytes_question_shows_what_a_rank_sends():
    for cell in _cells_before("05_data_parallel.ipynb", "q_ddp_bytes.check"):
        last = cell.strip().splitlines()[-1].split("#")[0].strip()     # what a cell shows: its last expression
        assert ".summary()" not in last or 'drop(columns="sent_bytes")' in last, last


def test_the_zero3_question_is_not_the_table_above_it():
    # the notebook's table: volume in units of Psi for 1864 float64 parameters on 4 ranks; the question: bytes
    # per rank for another model on other ranks, so that copying the table's 3 is a mistake with its own message
    assert sh.q_zero3_volume.given["ranks"] != 4 and sh.q_zero3_volume.given["psi"] != 1864
    result = sh.q_zero3_volume.self_test(3)
    assert result.status == "incorrect" and "as in the table" in result.message
