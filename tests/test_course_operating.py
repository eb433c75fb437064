"""Notebook 11's exercises: right answers pass, each mistake is refused, and feedback never gives the answer."""
from __future__ import annotations

import datetime as dt

import pytest

from labcore.exercises import operating as op

QUESTIONS = [op.q_reliable, op.q_workload, op.q_next_stage, op.q_rules, op.q_stack, op.q_exposure]


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.title)
def test_the_right_answer_passes_and_every_mistake_is_refused(q):
    assert q.self_test(q.correct_example).status == "correct"
    assert len(q.wrong_examples) >= 5
    for wrong in q.wrong_examples:
        assert q.evaluate(wrong).status == "incorrect", wrong


def _messages(q):
    return [q.evaluate(w).message for w in q.wrong_examples]


def test_the_classification_feedback_names_no_item_and_no_side():
    for message in _messages(op.q_reliable):
        body = message.split("not quite.", 1)[1]
        named = [k for k in op.ITEMS if k in body]
        assert not named or "have no answer" in body or "are not one of" in body, message


def test_the_matching_feedback_names_no_gap_with_its_harm():
    for message in _messages(op.q_exposure):
        body = message.split("not quite.", 1)[1]
        for gap, harm in op._HARM_OF.items():
            assert not (gap in body and f"'{harm}'" in body) or "are not one of" in body, message
        assert not any(text[:30] in body for text in op.HARMS.values())


def test_the_rules_feedback_names_no_rule():
    for wrong in op.q_rules.wrong_examples:
        body = op.q_rules.evaluate(wrong).message.split("not quite.", 1)[1]
        named = [k for k in op.CANDIDATE_RULES if f"'{k}'" in body]
        assert not named or "not keys" in body, body


def test_the_workload_feedback_never_states_the_ratio():
    want = op.q_workload.expected_value()
    for wrong in op.q_workload.wrong_examples:
        if isinstance(wrong, str):
            continue                        # the learner's own text is echoed back
        message = op.q_workload.evaluate(wrong).message
        for text in (f"{want:.2f}", f"{want:.3g}", f"{1 / want:.2f}"):
            assert text not in message, message


def test_the_workload_ratio_weighs_each_size_by_its_calls():
    g = op.q_workload.given
    assert op.workload_ratio(g["running"], g["candidate"], g["calls"]) > 1 > g["candidate"][8192] / g["running"][8192]
    # the candidate wins the benchmark and loses the step: the point of the exercise
    assert op.q_workload.evaluate(1.0).status == "incorrect"


@pytest.mark.parametrize("stage", op.STAGES)
def test_a_rollout_never_widens_an_unproven_change(stage):
    ref = op.q_next_stage.reference
    assert ref(stage, "inconclusive") == stage and ref(stage, "regression") == "off"
    assert ref(stage, "pass") in op.STAGES and op.STAGES.index(ref(stage, "pass")) >= op.STAGES.index(stage)


def test_the_stack_cases_are_not_decided_by_the_newest_version_or_the_fastest_time():
    ref = op.q_stack.reference
    for (stacks,), _ in op.q_stack.cases:
        newest = max(stacks, key=lambda k: stacks[k]["version"])
        fastest = min(stacks, key=lambda k: stacks[k]["step_ms"])
        assert stacks[ref(stacks)]["gate"] in ("pass", None)
        assert ref(stacks) != newest or stacks[newest]["gate"] == "pass" or len(stacks) == 1
        del fastest
    assert sum(ref(s) == "running" for (s,), _ in op.q_stack.cases) >= 2


def test_rules_table_says_what_a_rule_lacks_and_when_it_is_reviewed():
    table = op.rules_table(op.CANDIDATE_RULES, {"p99_latency": 25.0, "errors": 0, "rollback": float("nan")},
                           today=dt.date(2026, 12, 1))
    assert table.loc["p99_latency", "status"] == "missed" and table.loc["errors", "status"] == "met"
    assert table.loc["rollback", "status"] == "not measured"
    assert table.loc["fast_nccl", "status"] == "not operable: no metric and limit"
    assert table.loc["busbw", "status"] == "not operable: no owner"
    assert table.loc["hangs", "status"] == "not operable: no review cadence"
    assert table.loc["p99_latency", "next review"] == "2026-12-08" and table.loc["hangs", "next review"] == "-"
    floor = op.Rule("busbw >= 0.8", "busbw", 0.8, owner="me", review_days=1, higher_is_better=True)
    assert op.rules_table({"b": floor}, {"b": 0.9}).loc["b", "status"] == "met"
    assert {k for k, r in op.CANDIDATE_RULES.items() if r.operable()} == set(op.q_rules.correct_example)
