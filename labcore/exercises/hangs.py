"""Exercises for notebook 09, the hang clinic: name the culprit rank and the cause.

Each question is a case from :mod:`labcore.exercises.hang_cases` with the culprit
hidden. ``q.run(cluster)`` runs it live on the ranks, with the flight recorder on,
and prints what a person on call would have: the lab's hang report (each rank's state,
without the first line, which names who diverged), torch's flight-recorder analysis, then
the same call rerun with more time (every case gets one, so having one says nothing). The
answer is ``(rank, cause)`` with a cause from :data:`CAUSES`, or
``(None, "straggler")`` when no rank has a bug.

The questions' names and prompts say nothing of their cause (the notebook asks them as
cases 1, 2 and 3): :data:`q_case_1` has mismatched tensor lengths (a rank that finished is
not the culprit), :data:`q_case_2` a rank that skipped the collective, :data:`q_case_3` a
rank that is only slow (nothing hangs). ``q_shapes``, ``q_skip`` and ``q_straggler`` are the
same questions under their earlier names.

Before ``run``, a question is about its default case (culprit as in the notebook's
own demonstration), so ``check`` always has something to check against.

Example
-------
>>> q_case_2.check((2, "skipped collective"))
Hang clinic, case 2: correct!
>>> q_case_2.evaluate((0, "skipped collective")).status
'incorrect'
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from labcore.exercises.answers import as_items, as_text, as_whole, safe_repr, spelling
from labcore.exercises.core import Exercise, Incorrect, NotAttempted, _is_blank

__all__ = ["CAUSES", "Mystery", "q_case_1", "q_case_2", "q_case_3", "q_shapes", "q_skip", "q_straggler"]

#: The causes an answer may name (the clinic's cases).
CAUSES = ("mismatched ops", "mismatched shapes", "skipped collective", "wrong order",
          "p2p deadlock", "crashed", "straggler")


@dataclass
class Mystery:
    """One case with its truth (for the check) and what the ranks produced (for the learner).

    Attributes
    ----------
    cause : str
        The case's cause, one of :data:`CAUSES`.
    culprit : int or None
        The rank whose code has the bug; None when no rank has one (a straggler).
    slow : int or None
        The rank that is merely slow (straggler case).
    finished : list[int]
        Ranks that returned before the deadline in the run that hung.
    evidence : list[str]
        What the learner reads: hang report, flight-recorder analysis, rerun.
    live : bool
        Whether the evidence was produced on the ranks (False: the default case).
    """

    cause: str
    culprit: int | None = field(repr=False)
    finished: list = field(default_factory=list)
    slow: int | None = None
    evidence: list = field(default_factory=list)
    live: bool = False

    def __str__(self) -> str:
        return "\n\n".join(self.evidence) if self.evidence else "(the default case: run q.run(cluster))"


def _check_cluster(cluster) -> None:
    if cluster.world_size < 3:
        raise ValueError(f"the clinic's questions need at least 3 ranks (an odd one out among "
                         f"others), this cluster has {cluster.world_size}: use lc.Cluster(4, ...)")
    if not cluster.env.get("TORCH_FR_BUFFER_SIZE"):
        raise ValueError("the questions show torch's flight recorder: create the cluster with "
                         "lc.Cluster(4, env=labcore.live.flight.ENV)")


RERUN_S = 10.0   # the rerun's timeout: long enough for a slow rank to catch up (3 s late), on a busy machine too


def _scrub(text: str, case) -> str:
    """What the learner reads of a case: its function (whose name is its cause) called ``train_step``, and
    no file or line of the lab's, which the notebook printed earlier under the case's own name."""
    text = re.sub(rf"\b{case.__name__}\b", "train_step", text)
    text = re.sub(r"\(\S*hang_cases\.py, line \d+\)", "(the training script)", text)
    return re.sub(r"\S*hang_cases\.py(:\d+|, line \d+)?", "the training script", text)


def _evidence(fa, case) -> list[str]:
    """What the learner reads: the hang report's per-rank states and the flight recorder, each
    without the lab's verdict (the report's first line names who diverged, which is the answer)."""
    parts = []
    if fa.error is not None:
        report = getattr(fa.error, "report", None)
        parts.append(f"The call raised {type(fa.error).__name__}:\n{report.describe(verdict=False)}"
                     if report is not None else f"The call raised {type(fa.error).__name__}: {fa.error}")
    parts.append(fa.describe(verdict=False))
    return [_scrub(part, case) for part in parts]


def _rerun(cluster, case, kwargs: dict) -> str:
    """The same call once more with :data:`RERUN_S` seconds: what more time changes (every case gets one, so
    that having a rerun says nothing about the case)."""
    import time

    from labcore.live.errors import ClusterError

    start = time.monotonic()
    try:
        cluster.call(case, kwargs=kwargs, timeout=RERUN_S)
    except ClusterError as err:
        report = getattr(err, "report", None)          # its headline names who diverged: not shown
        if report is None:
            return f"Rerun with timeout={RERUN_S:g} s: it raised {type(err).__name__} again."
        return (f"Rerun with timeout={RERUN_S:g} s: {len(report.stuck)} of {cluster.world_size} ranks had still "
                f"not returned (finished: {report.finished or 'none'}).")
    return (f"Rerun with timeout={RERUN_S:g} s: every rank returned after {time.monotonic() - start:.1f} s, and "
            "every rank's all-reduced values agree.")


def _cause(text: str) -> str | None:
    """The cause a learner's text names: one of :data:`CAUSES` up to case, ``-``/``_`` for spaces and a
    final "s" ("Mismatched-Shape", "mismatched_ops"); None if it names none."""
    said = spelling(text)
    for cause in CAUSES:
        if said in (cause, cause.removesuffix("s"), cause + "s", cause.replace(" ", "")):
            return cause
    return None


class _Diagnosis(Exercise):
    """Name ``(rank, cause)`` for a case run live (``run``) or for its default case."""

    expects = "a pair (rank, cause), e.g. (1, 'wrong order')"

    def __init__(self, title: str, prompt: str, *, cause: str, default: Mystery, case_kwargs: dict,
                 timeout_s: float, **kwargs):
        super().__init__(title, prompt, **kwargs)
        self.cause = cause
        self.mystery = default
        self.case_kwargs = case_kwargs
        self.timeout_s = timeout_s

    def run(self, cluster, seed: int | None = None) -> None:
        """Run the case on ``cluster``'s ranks with a hidden culprit, then once more with more time; print the
        evidence. The case and its truth are kept in ``self.mystery`` for the check.
        """
        from labcore.exercises import hang_cases
        from labcore.live import flight

        _check_cluster(cluster)
        rank = random.Random(seed).randrange(1, cluster.world_size)
        case = hang_cases.CASES[self.cause]
        kwargs = dict(self.case_kwargs, culprit=rank)
        fa = flight.capture(cluster, case, timeout=self.timeout_s, **kwargs)
        finished = list(getattr(getattr(fa.error, "report", None), "finished", []))
        evidence = _evidence(fa, case) + [_rerun(cluster, case, kwargs)]
        self.mystery = (Mystery(self.cause, None, finished, slow=rank, evidence=evidence, live=True)
                        if self.cause == "straggler" else
                        Mystery(self.cause, rank, finished, evidence=evidence, live=True))
        print(self.mystery)

    def _parse(self, answer):
        if _is_blank(answer):
            raise NotAttempted()
        items = as_items(answer) if issubclass(type(answer), (tuple, list)) else None
        if items is None or len(items) != 2:
            raise Incorrect(f"answer with a pair (rank, cause), e.g. (1, 'wrong order'); got {safe_repr(answer)}.")
        rank, cause = items
        if _is_blank(rank) or _is_blank(cause):
            raise NotAttempted()
        text = as_text(cause)
        name = None if text is None else _cause(text)
        if name is None:
            raise Incorrect(f"the cause must be one of {', '.join(repr(c) for c in CAUSES)} (any case; a plural or "
                            f"singular, '-' or '_' for a space will do); got {safe_repr(cause)}.")
        whole = None if rank is None else as_whole(rank)
        if rank is not None and whole is None:
            raise Incorrect(f"the rank must be a whole number (or None if no rank has a bug); got {safe_repr(rank)}.")
        return whole, name

    def _check(self, answer, **context):
        rank, cause = self._parse(answer)
        m = self.mystery
        if rank == m.culprit and cause == m.cause:
            return None
        self._diagnose(rank, cause, m)
        if rank != m.culprit:
            raise Incorrect("not that rank: read the evidence again.")
        if rank is None:
            raise Incorrect(f"(None, {cause!r}) does not fit together: None says that no rank has a bug, and "
                            f"{cause!r} is a bug, which some rank has.")
        raise Incorrect(f"right rank, wrong cause: {cause!r} is not what the evidence shows.")

    def _diagnose(self, rank, cause, m: Mystery) -> None:
        """Raise a targeted :class:`Incorrect` for a known mistake (subclasses)."""


class _ShapesDiagnosis(_Diagnosis):
    def _diagnose(self, rank, cause, m):
        if rank is not None and rank != m.culprit and rank in m.finished:
            raise Incorrect(f"rank {rank} returned from the call. Finishing first is not the same as "
                            "being wrong: compare what each rank passed to the collective "
                            "(the flight recorder's input sizes).")
        if rank is None:
            raise Incorrect("something does hang here: the hang report shows a rank that never returned.")
        if rank == m.culprit and cause in ("skipped collective", "crashed", "straggler"):
            raise Incorrect(f"rank {rank} did enter the all_reduce (see the flight recorder) and is "
                            "still in it: look at what it entered with.")


class _SkipDiagnosis(_Diagnosis):
    def _diagnose(self, rank, cause, m):
        if rank is None:
            raise Incorrect("something does hang here: ranks wait in a collective that never completes.")
        if rank != m.culprit and rank not in m.finished:
            raise Incorrect(f"rank {rank} is waiting inside the all_reduce, like most ranks: a waiting "
                            "rank is a victim. Which rank is not in it?")
        if rank == m.culprit and cause == "crashed":
            raise Incorrect(f"rank {rank} did not die: the cluster would have raised RankDied at once. "
                            "What does the hang report say it did?")
        if rank == m.culprit and cause == "straggler":
            raise Incorrect(f"rank {rank} is not busy elsewhere: the hang report lists it as finished. "
                            "More time would not help.")


class _StragglerDiagnosis(_Diagnosis):
    def _diagnose(self, rank, cause, m):
        if rank is not None and rank == m.slow:
            raise Incorrect(f"rank {rank} is slow, not stuck: in the first run it was still computing "
                            "(its stack is not in a collective), and with more time it joined. "
                            "Is there a bug to fix in any rank's code?")
        if rank is not None:
            raise Incorrect(f"rank {rank} waited in the all_reduce like the others, and it completed "
                            "in the rerun.")


q_case_1 = _ShapesDiagnosis(
    "Hang clinic, case 1",
    "Run q_case_1.run(cl): a call on the ranks, with the hang report and torch's flight-recorder analysis, "
    "then the same call rerun with more time. Answer (rank, cause): the rank whose code must change, or None "
    "if no rank's code has a bug, and the cause, one of labcore.exercises.hangs.CAUSES.",
    cause="mismatched shapes", default=Mystery("mismatched shapes", 3, [0, 1, 2]),
    case_kwargs=dict(length=8), timeout_s=3.0,
    hints=["Which ranks returned is a symptom of gloo's algorithm, not of who is wrong.",
           "The flight recorder lists, per rank, the collective it last entered and with what input "
           "sizes. Is one rank unlike the others?"],
    solution="The odd one out: the rank whose all_reduce input sizes differ from every other rank's "
             "(the flight recorder's 'input sizes'; torch's analyzer reports SIZE_OR_SYNTAX_MISMATCH "
             "with 'Culprit rank N'). Answer (that rank, 'mismatched shapes'). On gloo the ranks with "
             "the shorter tensor may return, with wrong values, while the longer one waits for data "
             "that never comes.",
    correct_example=(3, "mismatched shapes"),
    wrong_examples=[(0, "mismatched shapes"), (3, "skipped collective"), (None, "straggler")],
)

q_case_2 = _SkipDiagnosis(
    "Hang clinic, case 2",
    "Run q_case_2.run(cl): a call on the ranks, with the hang report and torch's flight-recorder analysis, "
    "then the same call rerun with more time. Answer (rank, cause): the rank whose code must change, or None "
    "if no rank's code has a bug, and the cause, one of labcore.exercises.hangs.CAUSES.",
    cause="skipped collective", default=Mystery("skipped collective", 2, [2]),
    case_kwargs={}, timeout_s=3.0,
    hints=["Most ranks are inside the same all_reduce. Which rank is not, and where is it?",
           "torch's analyzer says 'Not all ranks joining collective' and lists the missing ranks; the "
           "hang report says whether that rank died, is still busy, or returned."],
    solution="The missing rank of fr_trace's 'Not all ranks joining collective' is the culprit; the hang "
             "report lists it as finished (not dead: no RankDied; not busy: it returned), so it skipped "
             "the collective: (that rank, 'skipped collective'). The fix: decide collectively (e.g. "
             "all-reduce the token count first) or always call the collective.",
    correct_example=(2, "skipped collective"),
    wrong_examples=[(0, "skipped collective"), (2, "crashed"), (2, "straggler"), (None, "straggler")],
)

q_case_3 = _StragglerDiagnosis(
    "Hang clinic, case 3",
    "Run q_case_3.run(cl): a call on the ranks, with the hang report and torch's flight-recorder analysis, "
    "then the same call rerun with more time. Answer (rank, cause): the rank whose code must change, or None "
    "if no rank's code has a bug, and the cause, one of labcore.exercises.hangs.CAUSES.",
    cause="straggler", default=Mystery("straggler", None, [], slow=3),
    case_kwargs=dict(delay_s=3.0), timeout_s=2.0,
    hints=["In the first run, where is the rank the others wait for: inside a collective, or not?",
           "What changed in the rerun besides the timeout?"],
    solution="(None, 'straggler'): the slow rank was computing (its stack is in time.sleep, not in a "
             "collective), the flight recorder shows it had not yet entered the all_reduce, and with a "
             "longer timeout every rank returned the right sum. Nothing to fix in the code; find why "
             "that rank is slow (data loading, a throttled or shared core) or allow more time.",
    correct_example=(None, "straggler"),
    wrong_examples=[(3, "skipped collective"), (3, "straggler"), (0, "mismatched ops")],
)

# the same questions under their earlier names
q_shapes, q_skip, q_straggler = q_case_1, q_case_2, q_case_3
