"""Notebook 08's exercises: each accepts the right answer and says what is wrong with each mistake."""
import numpy as np
import pytest

from labcore.exercises import nccl as ex
from labcore.exercises.core import ____


def status(q, answer):
    return q.evaluate(answer)


@pytest.mark.parametrize("q", [ex.q_channels, ex.q_transports, ex.q_slowest_hop, ex.q_p2p_disable,
                               ex.q_payload, ex.q_small_channels])
def test_right_blank_and_every_wrong_example(q):
    assert status(q, q.correct_example).status == "correct"
    assert status(q, ____).status == "not attempted"
    for wrong in q.wrong_examples:
        assert status(q, wrong).status == "incorrect", wrong


@pytest.mark.parametrize("q, answer, says", [
    (ex.q_channels, 4, "topology search found"),          # the Pattern line's rings, not the channels
    (ex.q_channels, 2, "p2p channels per peer"),
    (ex.q_channels, 0, "NVLS"),
    (ex.q_transports, {(1, 0): "P2P", (1, 3): "P2P", (0, 2): "NET"}, "different hosts"),
    (ex.q_transports, {(1, 0): "NET", (1, 3): "NET", (0, 2): "NET"}, "share the host"),
    (ex.q_transports, {(1, 0): "SHM", (1, 3): "NET", (0, 2): "NET"}, "read the 'via"),
    (ex.q_transports, {(1, 0): "P2P", (1, 3): "TCP", (0, 2): "NET"}, "not one of"),
    (ex.q_slowest_hop, (14, 13), "is not the slowest of the four"),
    (ex.q_slowest_hop, (0, 1), "pick one of"),
    (ex.q_p2p_disable, {(1, 0): "P2P", (1, 3): "NET"}, "switches the P2P transport off"),
    (ex.q_p2p_disable, {(1, 0): "NET", (1, 3): "NET"}, "only when no transport that stays in the machine"),
    (ex.q_p2p_disable, {(1, 0): "SHM", (1, 3): "SHM"}, "cannot reach another machine"),
    (ex.q_payload, (1.0, 1.0), "LL is not 100% efficient"),
    (ex.q_payload, (0.5, 1.0), "LL128 is not 100% efficient either"),
    (ex.q_payload, (0.9375, 0.5), "wrong way round"),
    (ex.q_payload, (0.25, 0.9375), "LL share is off"),
    (ex.q_small_channels, 24, "more channels is not always faster"),
    (ex.q_small_channels, 16, "NVLS"),
    (ex.q_small_channels, 1, "stops as soon as"),
])
def test_each_mistake_gets_its_own_feedback_without_the_answer(q, answer, says):
    result = status(q, answer)
    assert result.status == "incorrect" and says in result.message, result.message
    right = q.correct_example
    if isinstance(right, int):
        assert f" {right} " not in result.message and not result.message.rstrip(".").endswith(str(right))


@pytest.mark.parametrize("q, answer", [
    (ex.q_channels, "np"), (ex.q_small_channels, "np"), (ex.q_channels, "torch"), (ex.q_slowest_hop, "np"),
])
def test_a_right_answer_as_a_numpy_or_torch_number_passes(q, answer):
    import torch

    right = q.correct_example
    convert = np.int64 if answer == "np" else lambda v: torch.tensor(v)
    given = tuple(convert(v) for v in right) if isinstance(right, tuple) else convert(right)
    assert status(q, given).status == "correct"


@pytest.mark.parametrize("q, answer, says", [
    (ex.q_payload, ("0.5", "0.9375"), "give two fractions in a tuple"),
    (ex.q_payload, {0.5, 0.9375}, "give two fractions in a tuple"),
    (ex.q_payload, (0.94, 0.5), "wrong way round"),
    (ex.q_slowest_hop, (12.9, 4.2), "pair of rank numbers"),
    (ex.q_slowest_hop, ("12", "4"), "pair of rank numbers"),
    (ex.q_channels, 24.5, "whole number"),
])
def test_text_sets_and_fractions_are_not_taken_for_the_answer(q, answer, says):
    result = status(q, answer)
    assert result.status == "incorrect" and says in result.message, result.message


def test_answers_come_from_the_real_logs_and_the_tuner():
    from labcore.readers.nccl_log import recorded
    from labcore.sim import tuner

    h20 = recorded(ex.H20_LOG)
    assert ex.q_channels.correct_example == h20.channels
    assert ex.q_transports.correct_example == {hop: h20.transport(*hop) for hop in ex.HOPS}
    assert recorded(ex.H100_2NODE_LOG).transport(*ex.q_slowest_hop.correct_example) == "NET"
    assert ex.q_small_channels.correct_example == tuner.launch("all_reduce", 64 << 10,
                                                                tuner.MACHINES["dgx_h100"])["channels"]


@pytest.mark.parametrize("q, answer", [
    (ex.q_transports, {(1, 0): "P2P/CUMEM", (1, 3): "NET/IB", (0, 2): "NET/IB"}),   # copied from the log's 'via'
    (ex.q_transports, {(1, 0): "p2p", (1, 3): "net", (0, 2): " NET "}),
    (ex.q_payload, (0.5, 0.94)),                                                       # 120/128 rounded, as in the text
    (ex.q_payload, [0.5, 120 / 128]),
    (ex.q_channels, 8.0),
    (ex.q_slowest_hop, [12, 4]),
])
def test_right_answers_in_another_spelling_pass(q, answer):
    assert status(q, answer).status == "correct", status(q, answer).message


@pytest.mark.parametrize("q, answer, says", [
    (ex.q_payload, (50, 93.75), "not a percentage"),
    (ex.q_payload, (0.5, 0.9), "LL128 share is off"),
    (ex.q_channels, "8", "whole number"),
    (ex.q_channels, True, "whole number"),
    (ex.q_channels, 12, "coll channels"),
    (ex.q_small_channels, "2", "whole number"),
    (ex.q_transports, {(1, 0): "NVLink", (1, 3): "NET", (0, 2): "NET"}, "not one of"),
    (ex.q_slowest_hop, (4, 12), "pick one of"),
    (ex.q_slowest_hop, "12 to 4", "as a pair"),
    (ex.q_p2p_disable, {(1, 0): "SHM", (1, 3): "P2P"}, "cannot reach another machine"),
])
def test_more_mistakes(q, answer, says):
    result = status(q, answer)
    assert result.status == "incorrect" and says in result.message, result.message


@pytest.mark.parametrize("wrong", [hop for hop in ex.CANDIDATES if hop != ex.q_slowest_hop.correct_example])
def test_a_wrong_hop_is_not_told_what_the_slow_one_looks_like(wrong):
    # three of the four candidates stay inside a node: saying that this one does points at the fourth
    message = ex.q_slowest_hop.evaluate(wrong).message
    for clue in ("node", "NVLink", "P2P", "NET", "network", "leaves"):
        assert clue not in message, message
