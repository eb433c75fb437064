"""Notebook 07's exercises: each accepts its right answer, and each learner's mistake gets its own message."""
import pytest

from labcore.exercises import ____
from labcore.exercises import scaling as q

GiB = 1 << 30


@pytest.mark.parametrize("exercise", [q.q_hierarchical_bytes, q.q_sharp_bytes, q.q_nic_gbytes, q.q_sharp_gain,
                                      q.q_nic_per_gpu, q.q_small_message], ids=lambda e: e.title)
def test_right_wrong_and_untouched(exercise):
    assert exercise.evaluate(exercise.correct_example).status == "correct"
    for wrong in exercise.wrong_examples:
        assert exercise.evaluate(wrong).status == "incorrect", wrong
    assert exercise.evaluate(____).status == "not attempted"


@pytest.mark.parametrize("answer, says", [
    (2 * 3 / 4 * GiB, "whole buffer"),                 # forgot the 1/g of the hierarchical slice
    (2 * 31 / 32 * GiB, "flat ring"),
    (3 / 4 * GiB / 8, "all-gather"),
])
def test_hierarchical_mistakes(answer, says):
    assert says in q.q_hierarchical_bytes.evaluate(answer).message


def test_sharp_mistakes_are_named():
    assert "ring's count" in q.q_sharp_bytes.evaluate(2 * 15 / 16 * (1 << 20)).message   # 2(n-1)/n for SHARP
    assert "two directions" in q.q_sharp_bytes.evaluate(2.0 * (1 << 20)).message
    assert "halving" in q.q_sharp_gain.evaluate(2.0).message                          # "SHARP doubles busbw"
    assert "fraction" in q.q_sharp_gain.evaluate(100 / 380).message


def test_unit_mistakes_are_named():
    assert "gigabits" in q.q_nic_gbytes.evaluate(320.0).message                       # Gbit for GByte
    assert "line rate" in q.q_nic_gbytes.evaluate(50.0).message
    assert "GPUs per node" in q.q_nic_per_gpu.evaluate(380 * 7 / 31).message
    assert "NCCL's rings" in q.q_nic_per_gpu.evaluate(380 / 8).message                # the rings' figure, not this one


def test_small_message_answer_comes_from_the_simulator():
    assert q.fastest_small_message() == "double_tree"
    assert "1022 steps" in q.q_small_message.evaluate("ring").message                  # flat ring at 64 nodes
    assert q.q_small_message.evaluate("Double-Tree").status == "correct"
    assert "with text" in q.q_small_message.evaluate(3).message


@pytest.mark.parametrize("exercise, answer, says", [
    (q.q_hierarchical_bytes, 2 * GiB / 8, "never sends the piece a node keeps"),      # n for n-1
    (q.q_hierarchical_bytes, 2 * 3 / 4 * 1e9 / 8, "not 1e9"),                         # GB for GiB
    (q.q_nic_gbytes, 40e9 / 2 ** 30, "GiB/s"),
    (q.q_sharp_gain, 100 * 100 / 380, "in percent"),
    (q.q_nic_per_gpu, 380 * 3 / 7, "n is not the GPUs per node"),
    (q.q_nic_per_gpu, 380 * 3 / 32, "one factor of your formula is off"),             # off by one
])
def test_more_mistakes_are_named(exercise, answer, says):
    result = exercise.evaluate(answer)
    assert result.status == "incorrect" and says in result.message, result.message


def test_a_tight_tolerance_is_stated_as_it_is():
    message = q.q_sharp_bytes.evaluate(12345.0).message
    assert "within 0%" not in message and "within 0.1% of the right value" in message, message
    assert "within 0.1% of the right value counts as right" in repr(q.q_sharp_bytes)


@pytest.mark.parametrize("exercise", [q.q_hierarchical_bytes, q.q_sharp_bytes, q.q_nic_gbytes, q.q_sharp_gain,
                                      q.q_nic_per_gpu], ids=lambda e: e.title)
def test_text_and_yes_no_are_not_numbers(exercise):
    for bad in (str(exercise.correct_example), True, None):
        assert exercise.evaluate(bad).status == "incorrect", bad


def test_a_near_miss_is_not_told_its_last_step():
    message = q.q_nic_per_gpu.evaluate(380 * 3 / 32).message              # n where n-1 belongs
    for step in ("n-1", "n - 1", "denominator", "Nearly"):
        assert step not in message, message


@pytest.mark.parametrize("wrong", ["ring", "hierarchical"])
def test_a_wrong_algorithm_is_not_told_which_of_the_other_two_wins(wrong):
    message = q.q_small_message.evaluate(wrong).message.lower()
    others = {"ring": ["hierarch", "tree"], "hierarchical": ["ring", "tree"]}[wrong]
    assert not any(name in message for name in others), message
