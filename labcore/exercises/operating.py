"""Exercises for notebook 11, the operating model: judgement, workloads, rollouts, rules, stacks, gaps.

- :data:`q_reliable`: what the lab's tools decide reliably, and what needs a person's judgement;
- :data:`q_workload`: a protocol that wins the latency benchmark, priced on a training step's calls;
- :data:`q_next_stage`: where a staged rollout goes after each gate (pilot, 10%, 50%, 100%, off);
- :data:`q_incident`: what a team does when a change that passed every gate fails in production;
- :data:`q_rules`: which candidate rules a team can operate (measured, owned, reviewed);
- :data:`q_stack`: the stack to run, chosen on the gate's evidence rather than on a version number;
- :data:`q_exposure`: what each security or observability gap gives an attacker or costs an incident.

:class:`Rule` and :func:`rules_table` are the notebook's operating rules: each has a metric, a
limit, an owner and a review cadence, and is checked against measured numbers.

Example
-------
>>> q_next_stage.check(lambda stage, verdict: stage)
Next stage of a rollout: not quite. For stage='pilot', verdict='pass' you return 'pilot', which is not right (hint() helps).
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass

import pandas as pd

from labcore.exercises.answers import as_items, as_pairs, as_text, spelling, type_name
from labcore.exercises.core import CustomExercise, FunctionExercise, Incorrect
from labcore.exercises.values import StatedValue

__all__ = ["ITEMS", "STAGES", "VERDICTS", "RESPONSES", "Rule", "CANDIDATE_RULES", "rules_table", "STACKS", "GAPS",
           "HARMS", "workload_ratio", "q_reliable", "q_workload", "q_next_stage", "q_incident", "q_rules", "q_stack",
           "q_exposure"]


def _as_mapping(answer, keys, values: dict, what: str) -> dict:
    """The learner's {key: value} answer (a dict, or a list of (key, value) pairs), read as the lab's own
    strings and checked for shape (not for being right); no method of the answer decides it. Keys and
    values are read in any case, with ``-``, ``_`` or a space alike; ``values`` maps each accepted
    spelling to the value it means."""
    pairs = as_pairs(answer)
    if pairs is None:
        raise Incorrect(f"answer with a dict {{{what}}}, one entry per key of the table above (a list of (key, "
                        f"value) pairs will do); you gave {type_name(answer)}.")
    known = {spelling(k): k for k in keys}
    got = {}
    for k, v in pairs:
        text = as_text(k)
        if text is None:
            raise Incorrect("the dict's keys are the table's keys, as strings.")
        key = known.get(spelling(text))
        if key is None:
            raise Incorrect(f"{text!r} is not a key of the table; use its keys (any case).")
        said = as_text(v)
        got[key] = None if said is None else values.get(spelling(said))
    missing = sorted(set(keys) - set(got))
    if missing:
        raise Incorrect(f"{len(missing)} key(s) have no answer yet: {missing}.")
    odd = sorted(k for k, v in got.items() if v is None)
    if odd:
        raise Incorrect(f"the answers for {odd} are not one of {sorted(set(values.values()))} (any case).")
    return got


# -- (1) what the system does reliably, what needs judgement ----------------------------------------
ITEMS = {
    "wrong_check": "the #wrong column: every element of a collective's result compared exactly with the expected sum",
    "clear_regression": "the gate's verdict when a size's whole slowdown interval lies above the tolerance",
    "tolerance": "the tolerance itself: how much slower a change may be before it counts as a regression",
    "stuck_inconclusive": "what to do when the gate has said 'inconclusive' for a week of reruns",
    "cpu_to_gpu": "whether a gain measured on gloo ranks on a laptop will hold on the GPU cluster",
    "rank_restart": "stopping and replacing the ranks after one of them dies",
}
_SIDES = {"wrong_check": "system", "clear_regression": "system", "rank_restart": "system",
          "tolerance": "judgement", "stuck_inconclusive": "judgement", "cpu_to_gpu": "judgement"}


def _check_reliable(answer):
    got = _as_mapping(answer, ITEMS, {"system": "system", "judgement": "judgement", "judgment": "judgement"},
                      "key: 'system' or 'judgement'")
    if set(got.values()) == {"system"}:
        raise Incorrect("everything on the system's side: some of these need a number, or a context, that no "
                        "rule can choose by itself.")
    if set(got.values()) == {"judgement"}:
        raise Incorrect("nothing on the system's side: some of these are done the same way every time, with "
                        "nobody choosing anything.")
    wrong = sum(got[k] != v for k, v in _SIDES.items())
    if wrong:
        raise Incorrect(f"{wrong} of the {len(ITEMS)} {'is' if wrong == 1 else 'are'} on the wrong side. Ask of "
                        "each: could a script decide "
                        "it the same way every time, from the evidence alone?")


q_reliable = CustomExercise(
    "What the system decides, what needs judgement",
    "For each key of ITEMS, answer 'system' (the lab's tools decide it the same way every time, from the "
    "evidence alone) or 'judgement' (a person has to choose, and own the choice). Answer with a dict "
    "{key: 'system' or 'judgement'} (any case, 'judgment' too; a list of (key, answer) pairs will do).",
    checker=_check_reliable,
    hints=["A decision is the system's when its rule needs no number or context that someone has to pick.",
           "Choosing a limit, deciding to stop measuring, and carrying a result to other hardware all need "
           "someone who knows what the job is for."],
    solution="{'wrong_check': 'system', 'clear_regression': 'system', 'rank_restart': 'system',\n"
             " 'tolerance': 'judgement', 'stuck_inconclusive': 'judgement', 'cpu_to_gpu': 'judgement'}",
    correct_example=dict(_SIDES),
    wrong_examples=[{k: "system" for k in ITEMS}, {k: "judgement" for k in ITEMS},
                    {**_SIDES, "tolerance": "system"}, {**_SIDES, "rank_restart": "judgement"},
                    {**_SIDES, "cpu_to_gpu": "system", "clear_regression": "judgement"},
                    ["system"] * 6, {**_SIDES, "tolerance": "maybe"}, {"wrong_check": "system"}],
    expects="a dict {key: 'system' or 'judgement'}",
)


# -- (2) a benchmark win, priced on the workload --------------------------------------------------
def workload_ratio(running: dict, candidate: dict, calls: dict) -> float:
    """Time a workload spends in its calls with ``candidate`` over the time with ``running``.

    ``running`` and ``candidate``: {size: time per call}; ``calls``: {size: calls per step}.

    >>> workload_ratio({1: 1.0, 2: 4.0}, {1: 0.5, 2: 6.0}, {1: 10, 2: 1})
    0.7857142857142857
    """
    return sum(n * candidate[s] for s, n in calls.items()) / sum(n * running[s] for s, n in calls.items())


def _tuner_times() -> dict:
    """NCCL's model (labcore.sim.nccl.tuner, NCCL 2.30.7) of a Ring all_reduce on one DGX H100, per protocol."""
    from labcore.sim import tuner

    machine = tuner.MACHINES["dgx_h100"]
    out = {}
    for size in (8 << 10, 25 << 20):
        table = tuner.cost_table("all_reduce", size, machine)
        ring = table[table["algorithm"] == "Ring"].set_index("protocol")["time_us"]
        out[size] = {p: float(ring[p]) for p in ("LL", "Simple")}
    return out


_TIMES = _tuner_times()
# A step of a 1B-parameter model in bf16: ~2 GB of gradients in 25 MiB buckets, plus the small
# all-reduces every step makes (loss, gradient norm, metrics): an example workload, not a measurement.
WORKLOAD_CALLS = {8 << 10: 100, 25 << 20: 76}
_GIVEN = dict(running={s: t["Simple"] for s, t in _TIMES.items()}, candidate={s: t["LL"] for s, t in _TIMES.items()},
              calls=WORKLOAD_CALLS)


def _per_size(running, candidate, calls):
    return [candidate[s] / running[s] for s in calls]


q_workload = StatedValue(
    "A benchmark win, priced on the workload",
    "The running job forces NCCL_PROTO=Simple; the candidate is NCCL_PROTO=LL, which wins the 8 KiB latency "
    "benchmark. With the times per call in q_workload.given['running'] and ['candidate'] (us, by size in bytes) "
    "and the calls a training step makes of each size in ['calls'], how long does a step's communication take "
    "with the candidate, as a multiple of the running job's (candidate / running)?",
    expected=workload_ratio,
    given=_GIVEN,
    rtol=0.01,
    mistakes=[(lambda running, candidate, calls: candidate[8 << 10] / running[8 << 10],
               "That is the benchmark's ratio, at one size; the step makes calls of every size in 'calls'."),
              (lambda running, candidate, calls: sum(_per_size(running, candidate, calls)) / len(calls),
               "That averages the per-size ratios as if each size took the same time; weigh each size by the "
               "time the step spends in it."),
              (lambda running, candidate, calls: 1 / workload_ratio(running, candidate, calls),
               "That is running / candidate: the question asks for candidate / running."),
              (lambda running, candidate, calls: sum(candidate.values()) / sum(running.values()),
               "That adds one call of each size; the step makes many more calls of some sizes than of others.")],
    hints=["A step spends calls[size] x time[size] in each size; add that up for each configuration.",
           "ratio = sum(calls[s] * candidate[s]) / sum(calls[s] * running[s]) over the sizes s."],
    solution="g = q_workload.given\n"
             "sum(n * g['candidate'][s] for s, n in g['calls'].items()) / "
             "sum(n * g['running'][s] for s, n in g['calls'].items())",
    correct_example=workload_ratio(**_GIVEN),
    wrong_examples=[_TIMES[8 << 10]["LL"] / _TIMES[8 << 10]["Simple"],
                    sum(_per_size(**_GIVEN)) / 2, 1 / workload_ratio(**_GIVEN),
                    sum(_GIVEN["candidate"].values()) / sum(_GIVEN["running"].values()), "1.4", 1.0],
)


# -- (3) the next stage of a rollout ------------------------------------------------------------------
STAGES = ("pilot", "10%", "50%", "100%")
VERDICTS = ("pass", "inconclusive", "regression")


def _next_stage(stage: str, verdict: str) -> str:
    if verdict == "regression":
        return "off"
    if verdict == "inconclusive":
        return stage
    return STAGES[min(STAGES.index(stage) + 1, len(STAGES) - 1)]


q_next_stage = FunctionExercise(
    "Next stage of a rollout",
    "A change goes out in stages STAGES = ('pilot', '10%', '50%', '100%'), with the evidence gate at each. "
    "Write next_stage(stage, verdict) -> the stage the change runs at next: after 'pass' it widens one step "
    "(and stays at '100%' once there), after 'inconclusive' it holds where it is while more is measured, and "
    "after 'regression' it is rolled back everywhere: return 'off'.",
    reference=_next_stage,
    cases=[(s, v) for s in STAGES for v in VERDICTS],
    hints=["Only 'pass' moves the change forward; an unproven change neither widens nor is thrown away.",
           "A regression at any stage, the pilot included, sends the change back to 'off': every stage "
           "returns to the configuration that was running before."],
    solution="def next_stage(stage, verdict):\n"
             "    if verdict == 'regression':\n"
             "        return 'off'\n"
             "    if verdict == 'inconclusive':\n"
             "        return stage\n"
             "    i = STAGES.index(stage)\n"
             "    return STAGES[min(i + 1, len(STAGES) - 1)]",
    wrong_examples=[
        lambda stage, verdict: STAGES[min(STAGES.index(stage) + 1, 3)],                    # widens on anything
        lambda stage, verdict: "off" if verdict != "pass" else _next_stage(stage, verdict),  # inconclusive = roll back
        lambda stage, verdict: (STAGES[max(STAGES.index(stage) - 1, 0)] if verdict == "regression"
                                else _next_stage(stage, verdict)),                         # steps back one stage
        lambda stage, verdict: ("done" if stage == "100%" and verdict == "pass"
                                else _next_stage(stage, verdict)),                         # leaves the stages
        lambda stage, verdict: (_next_stage(stage, "pass") if verdict == "inconclusive"
                                else _next_stage(stage, verdict)),                         # widens unproven
    ],
)


# -- (3b) when a change that passed every gate fails: roll back, log it, widen the safeguards ---------------------
RESPONSES = {
    "A": "keep the change: it passed the gate at every stage",
    "B": "roll the change back on every job now, through the roll-back path prepared before the rollout",
    "C": "raise the gate's tolerance, so that the next rollout is not held up by noise",
    "D": "add the incident to the decision log: what happened, its evidence (the flight recorder's dumps), what was "
         "done",
    "E": "delete the change's earlier rows from the decision log: their verdicts turned out wrong",
    "F": "add a job of the size that failed (512 ranks) to the pilot's workload and to the gate, before the change "
         "goes out again",
}
_DO = {"B", "D", "F"}
_WHY_NOT = {
    "A": "the gates passed on jobs of up to 64 ranks: they are no evidence about a 512-rank job, and a hang that "
         "comes back on a rerun is evidence against the change",
    "C": "a wider tolerance lets more through at every stage; the gates did not fail, they never saw this job",
    "E": "the log is the team's memory of what was decided on which evidence; its old rows were right about "
         "what they measured",
}


def _check_incident(answer):
    kind = type(answer)
    items = (list(set.__iter__(answer)) if issubclass(kind, set) else
             list(frozenset.__iter__(answer)) if issubclass(kind, frozenset) else as_items(answer))
    letters = [as_text(x) for x in items] if items is not None else None
    if letters is None or None in letters:
        raise Incorrect("answer with a list of letters of RESPONSES, e.g. ['A', 'C'] (any case).")
    picked = {x.strip().upper() for x in letters}
    unknown = sorted(picked - set(RESPONSES))
    if unknown:
        raise Incorrect(f"{unknown} are not letters of RESPONSES.")
    wrong = sorted(picked - _DO)
    if wrong:
        raise Incorrect(f"not {wrong[0]}: {_WHY_NOT[wrong[0]]}.")
    missing = len(_DO - picked)
    if missing:
        raise Incorrect(f"every step you picked belongs in the response, but {missing} more do{'es' if missing == 1 else ''}: "
                        "think of the jobs running now, of the team's memory, and of the next rollout.")
    return None


q_incident = CustomExercise(
    "A change that passed every gate",
    "A new NCCL version went out through the stages of section 3 (pilot, 10%, 50%, 100%) and passed the gate at "
    "each; the pilot and the gates ran jobs of 2 to 64 ranks. A week after it reached 100%, a 512-rank job hangs "
    "in its first all-reduce, and again on a rerun; with the old version it ran. Which of RESPONSES does the team "
    "do? Answer with a list of their letters (any order, any case).",
    checker=_check_incident,
    hints=["A gate's pass is evidence about the jobs it measured, and only those.",
           "Three of the six: one for the jobs running now, one for what the team will know later, one for the "
           "next rollout."],
    solution="['B', 'D', 'F']: roll back through the prepared path, log the incident with its evidence, and widen the "
             "pilot and the gate to the job that failed before going out again. Not A (no gate saw a 512-rank job), "
             "not C (a looser gate hides more), not E (the log keeps what was decided on what evidence).",
    correct_example=["B", "D", "F"],
    wrong_examples=[["A"], ["B"], ["B", "D"], ["B", "F"], ["B", "D", "F", "C"], ["B", "D", "F", "E"],
                    list(RESPONSES), "B", ["B", "D", "G"]],
    expects="a list of letters of RESPONSES",
)


# -- (4) operating rules: measured, owned, reviewed ------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """An operating rule: a metric with a limit, an owner who acts on it, and how often it is reviewed.

    ``higher_is_better``: the limit is a floor (busbw) rather than a ceiling (latency, cost).
    """

    text: str
    metric: str = ""
    limit: float | None = None
    unit: str = ""
    owner: str = ""
    review_days: int | None = None
    higher_is_better: bool = False

    def operable(self) -> bool:
        """Whether a team can run it: measured (metric and limit), owned, and reviewed on a cadence."""
        return bool(self.metric) and self.limit is not None and bool(self.owner) and bool(self.review_days)


CANDIDATE_RULES = {
    "p99_latency": Rule("the p99 of a 64 KiB all_reduce stays under 20 ms", "p99 64 KiB all_reduce", 20.0, "ms",
                        "training platform team", 7),
    "fast_nccl": Rule("NCCL must be fast", owner="infrastructure team", review_days=30),
    "rollback": Rule("a roll-back restores the previous configuration within 15 minutes", "roll-back minutes", 15,
                     "min", "on-call engineer", 90),
    "busbw": Rule("busbw at 25 MiB stays above 80% of the NIC's line rate", "busbw / line rate", 0.8, "",
                  higher_is_better=True, review_days=30),
    "hangs": Rule("no more than 1 collective timeout per 1,000 GPU-hours", "timeouts per 1,000 GPU-hours", 1.0, "",
                  "reliability team"),
    "errors": Rule("#wrong is 0 in every nightly sweep", "#wrong elements", 0, "", "cluster team", 7),
}


def rules_table(rules: dict, measured: dict, today: _dt.date | None = None) -> pd.DataFrame:
    """Each rule against its measured value: met, missed, not measured, or "not operable" (and why).

    ``measured``: {rule key: value}; ``today`` sets the next review date (default: today).

    >>> rules_table({"r": Rule("x <= 1", "x", 1.0, owner="me", review_days=7)}, {"r": 0.5},
    ...             _dt.date(2026, 1, 1))[["status", "next review"]].values.tolist()
    [['met', '2026-01-08']]
    """
    today = today or _dt.date.today()
    rows = []
    for key, r in rules.items():
        lacks = [what for what, ok in (("a metric and limit", bool(r.metric) and r.limit is not None),
                                       ("an owner", bool(r.owner)), ("a review cadence", bool(r.review_days)))
                 if not ok]
        value = measured.get(key)
        if lacks:
            status = "not operable: no " + ", no ".join(w.removeprefix("a ").removeprefix("an ") for w in lacks)
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            status = "not measured"
        else:
            good = value >= r.limit if r.higher_is_better else value <= r.limit
            status = "met" if good else "missed"
        rows.append({"rule": r.text, "owner": r.owner or "-", "measured": value, "limit": r.limit, "status": status,
                     "next review": (today + _dt.timedelta(days=r.review_days)).isoformat() if r.review_days else "-"})
    return pd.DataFrame(rows, index=list(rules))


def _picked_keys(answer) -> set:
    """The keys in a list, tuple or set of strings, read with the base types' own methods."""
    kind = type(answer)
    items = (list(set.__iter__(answer)) if issubclass(kind, set) else
             list(frozenset.__iter__(answer)) if issubclass(kind, frozenset) else as_items(answer))
    if items is None:
        raise Incorrect(f"answer with a list of keys of CANDIDATE_RULES (strings); you gave {type_name(answer)}.")
    keys = [as_text(k) for k in items]
    if None in keys:
        raise Incorrect(f"the list holds something that is not a string ({type_name(items[keys.index(None)])}); "
                        "answer with the keys of CANDIDATE_RULES.")
    unknown = sorted(set(keys) - set(CANDIDATE_RULES))
    if unknown:
        raise Incorrect(f"{unknown} are not keys of CANDIDATE_RULES.")
    return set(keys)


def _check_rules(answer):
    picked = _picked_keys(answer)
    want = {k for k, r in CANDIDATE_RULES.items() if r.operable()}
    lacking = {"cannot be measured": lambda r: not r.metric or r.limit is None, "has no owner": lambda r: not r.owner,
               "is never reviewed": lambda r: not r.review_days}
    for why, test in lacking.items():
        bad = [k for k in picked if test(CANDIDATE_RULES[k])]
        if bad:
            raise Incorrect(f"{len(bad)} of your picks {why}, and a rule like that is a wish, not a rule a team "
                            "can run.")
    if picked != want:
        raise Incorrect(f"every rule you picked can be run, but {len(want - picked)} more can: look again at "
                        "the ones you left out.")


q_rules = CustomExercise(
    "Rules a team can operate",
    "Which of CANDIDATE_RULES can a team operate: measured (a metric with a limit), owned (somebody acts "
    "when it is missed) and reviewed on a cadence? Answer with a list of their keys.",
    checker=_check_rules,
    hints=["Ask of each rule: what number says it is met, who acts when it is missed, and when is it looked at "
           "again?",
           "Three of the six have a metric with a limit, an owner and a review cadence."],
    solution="[k for k, r in CANDIDATE_RULES.items() if r.operable()]   # ['p99_latency', 'rollback', 'errors']",
    correct_example=["p99_latency", "rollback", "errors"],
    wrong_examples=[list(CANDIDATE_RULES), ["p99_latency", "rollback"], ["p99_latency", "rollback", "errors", "busbw"],
                    ["p99_latency", "rollback", "errors", "hangs"], ["fast_nccl"], "p99_latency", [],
                    ["p99", "rollback"]],
    expects="a list of keys of CANDIDATE_RULES",
)


# -- (5) the stack, chosen on evidence ---------------------------------------------------------------
def _choose_stack(stacks: dict) -> str:
    passing = [k for k, s in stacks.items() if s["gate"] == "pass"]
    return min(passing, key=lambda k: stacks[k]["step_ms"]) if passing else "running"


def _stack(version, gate, step_ms):
    return dict(version=version, gate=gate, step_ms=step_ms)


# Candidates against the running stack, as a team would gate them (the gate's verdict is against
# "running"; step_ms the median step time measured in the pilot).
STACKS = {
    "running": _stack((2, 27, 5), None, 412.0),
    "newest": _stack((2, 27, 7), "regression", 455.0),
    "patch": _stack((2, 27, 6), "pass", 405.0),
}
_STACK_CASES = [
    STACKS,
    {"running": _stack((2, 21, 5), None, 300.0), "a": _stack((2, 23, 4), "pass", 290.0),
     "b": _stack((2, 26, 2), "pass", 281.0), "c": _stack((2, 27, 3), "inconclusive", 250.0)},
    {"running": _stack((2, 18, 3), None, 90.0), "new": _stack((2, 21, 5), "inconclusive", 80.0)},
    {"running": _stack((2, 26, 2), None, 120.0), "x": _stack((2, 27, 7), "regression", 130.0),
     "y": _stack((2, 26, 5), "pass", 119.0), "z": _stack((2, 27, 5), "pass", 121.0)},
    {"running": _stack((2, 20, 3), None, 50.0)},
]


q_stack = FunctionExercise(
    "The stack to run",
    "Write choose(stacks) -> the key of the stack a training job should run next. stacks maps keys to "
    "dict(version=(major, minor, patch), gate=the evidence gate's verdict against the running stack, or None for "
    "'running' itself, step_ms=the median step time measured in the pilot); STACKS is one example. A candidate "
    "replaces 'running' only when its gate passes; among those, the fastest wins.",
    reference=_choose_stack,
    cases=[(c,) for c in _STACK_CASES],
    describe=lambda args, kwargs: f"stacks={sorted(args[0])} (case {_STACK_CASES.index(args[0]) + 1} of "
                                  f"{len(_STACK_CASES)}: q_stack.cases holds them)",
    hints=["Keep only the candidates the evidence has cleared; a version number is no evidence.",
           "passing = [k for k, s in stacks.items() if s['gate'] == 'pass']; none passing means no change."],
    solution="def choose(stacks):\n"
             "    passing = [k for k, s in stacks.items() if s['gate'] == 'pass']\n"
             "    return min(passing, key=lambda k: stacks[k]['step_ms']) if passing else 'running'",
    wrong_examples=[
        lambda stacks: max(stacks, key=lambda k: stacks[k]["version"]),                       # the newest
        lambda stacks: min(stacks, key=lambda k: stacks[k]["step_ms"]),                       # fastest, any gate
        lambda stacks: "running",                                                             # never change
        lambda stacks: next((k for k, s in stacks.items() if s["gate"] == "pass"), "running"),  # first that passes
        lambda stacks: min((k for k, s in stacks.items() if s["gate"] != "regression"),
                           key=lambda k: stacks[k]["step_ms"]),                               # unproven counts
        lambda stacks: max((k for k, s in stacks.items() if s["gate"] in ("pass", None)),
                           key=lambda k: stacks[k]["version"]),                               # newest that passes
    ],
)


# -- (6) security and observability gaps --------------------------------------------------------------------
GAPS = {
    "open_store": "the rendezvous (torch's TCPStore) listens on every interface, with no authentication",
    "pickled_dump": "a debug dump from another machine is loaded with pickle.load",
    "no_flight_recorder": "the flight recorder is off (TORCH_FR_BUFFER_SIZE unset)",
    "no_timeout": "the process group's timeout is set to a year",
}
# listed in another order than GAPS: matching them is the exercise, not reading them off in turn
HARMS = {
    "A": "a stuck job holds its GPUs, billed, until someone notices",
    "B": "after a hang nobody can say which collective each rank last entered: the incident is debugged by "
         "rerunning it",
    "C": "anyone who reaches the port reads and rewrites the job's keys: join as a rank, or feed ranks wrong "
         "addresses",
    "D": "code of the file's author runs with the job's permissions the moment it is opened",
}
_HARM_OF = {"open_store": "C", "pickled_dump": "D", "no_flight_recorder": "B", "no_timeout": "A"}


def _check_exposure(answer):
    got = _as_mapping(answer, GAPS, {letter.lower(): letter for letter in HARMS}, "gap: harm letter")
    if len(set(got.values())) < len(got):
        raise Incorrect("two gaps share one harm: each gap here does a different kind of damage.")
    wrong = sum(got[k] != v for k, v in _HARM_OF.items())
    if wrong:
        raise Incorrect(f"{wrong} of the {len(GAPS)} gaps {'is' if wrong == 1 else 'are'} matched with another "
                        "gap's harm.")


q_exposure = CustomExercise(
    "What each gap costs",
    "Match each gap in GAPS with what it gives an attacker or costs in an incident (a letter of HARMS). "
    "Answer with a dict {gap key: letter} (any case; a list of (gap, letter) pairs will do).",
    checker=_check_exposure,
    hints=["Two of the gaps are security gaps (someone else's code or data gets in); two are observability or "
           "reliability gaps (you cannot see, or cannot stop, what went wrong).",
           "The store is a key-value server: what does a server with no password give whoever connects?"],
    solution="{'open_store': 'C', 'pickled_dump': 'D', 'no_flight_recorder': 'B', 'no_timeout': 'A'}",
    correct_example=dict(_HARM_OF),
    wrong_examples=[{"open_store": "D", "pickled_dump": "C", "no_flight_recorder": "B", "no_timeout": "A"},
                    {"open_store": "C", "pickled_dump": "D", "no_flight_recorder": "A", "no_timeout": "B"},
                    {k: "A" for k in GAPS}, {"open_store": "C"}, ["C", "D", "B", "A"],
                    {**_HARM_OF, "no_timeout": "E"},
                    dict(zip(GAPS, HARMS))],                                         # the listing order
    expects="a dict {gap key: letter of HARMS}",
)

