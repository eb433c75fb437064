"""Exercises for notebook 10, evidence under real load.

- :data:`q_repeats`: how many repeats a gate needs before it can flag anything (a gate on a
  single run can only guess);
- :data:`q_outlier`: the number a baseline should carry when one repeat met a noisy neighbour;
- :data:`q_gib`: what one training run's un-hidden communication costs, GiB and GB kept apart;
- :data:`q_interval`: reading the gate's intervals: regression, pass, or inconclusive (which is
  not "no regression");
- :data:`q_under_load`: targets written before measuring, answered from the run beside other work.

The repeats and intervals are real: recorded on the lab's 2-core machine by
``benchmarks/bench_gate.py`` (``tests/data/bench_gate_recorded_*.json``, 2026-12-01; the tests
check every number here against those files). Feedback names what is wrong, not the answer.

Example
-------
>>> q_repeats.check(1)                                      # doctest: +ELLIPSIS
Repeats before a gate can flag: not quite. One run per side...
"""
from __future__ import annotations

import math

import numpy as np

from labcore.exercises.answers import as_items, as_one_number, as_pairs, as_text, as_whole, safe_repr
from labcore.exercises.answers import spelling
from labcore.exercises.core import CustomExercise, Exercise, Incorrect, _is_blank, NotAttempted
from labcore.exercises.values import StatedValue

__all__ = ["q_repeats", "q_outlier", "q_gib", "q_interval", "q_under_load", "fewest_repeats", "OUTLIER_REPEATS_US",
           "INTERVAL_ROWS", "LOAD_ROWS", "LOAD_TARGETS", "communication_cost"]


def fewest_repeats(tests: int, alpha: float) -> int:
    """Fewest repeats per side (the same on both) for which ``lc.evidence.compare`` can say
    "regression" at all when it gates ``tests`` sizes and placements at false-alarm rate ``alpha``."""
    from labcore.evidence.stats import smallest_pvalue

    level = alpha / tests
    return next(r for r in range(1, 200) if smallest_pvalue(r, r) <= level)


class _RepeatsExercise(Exercise):
    """The fewest repeats per side that let the gate reach its Bonferroni level."""

    expects = "a whole number of repeats"

    def __init__(self, *args, sizes: int, placements: int, alpha: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.sizes, self.placements, self.alpha = sizes, placements, alpha

    def _check(self, answer, **context):
        from labcore.evidence.stats import smallest_pvalue

        number = as_one_number(answer)
        r = None if number is None else as_whole(number)
        if r is None:
            raise Incorrect(f"answer with a whole number of repeats per side, not {safe_repr(answer)}.")
        tests = self.sizes * self.placements
        level = self.alpha / tests
        want = fewest_repeats(tests, self.alpha)
        if r < 1:
            raise Incorrect("a side needs at least one repeat to be measured at all.")
        if r == 1:
            raise Incorrect("One run per side gives the permutation test two ways to label the data, so no "
                            "p-value can be below 1/2: a gate on a single run can never flag a regression, "
                            "whatever the slowdown.")
        best = smallest_pvalue(r, r)
        if r == want:
            return None
        if best <= level:
            raise Incorrect(f"{r} repeats per side are enough (their smallest p-value, {best:.2g}, is below the "
                            "level), but not the fewest: try fewer.")
        if best <= self.alpha:
            raise Incorrect(f"{r} repeats reach {self.alpha:g} for one test, but the gate tests each of the "
                            f"{tests} sizes and placements at alpha / {tests} (Bonferroni), so a single size "
                            "must reach that lower level.")
        raise Incorrect(f"with {r} repeats per side the smallest p-value the test can give is {best:.2g}, above "
                        f"the level each size is tested at (alpha / {tests}).")


q_repeats = _RepeatsExercise(
    "Repeats before a gate can flag",
    "You gate an all-reduce sweep of 6 sizes, both placements (12 tests), at alpha = 0.01 with "
    "lc.evidence.compare. What is the fewest repeats per side (baseline and run alike) for which the gate "
    "can call a size a regression at all, however large the slowdown? "
    "(lc.evidence.smallest_pvalue(r, r) gives the smallest p-value r against r repeats can reach.)",
    sizes=6, placements=2, alpha=0.01,
    hints=["compare tests each size at alpha divided by the number of sizes and placements (Bonferroni).",
           "Try r = 2, 3, ...: the first r with smallest_pvalue(r, r) <= 0.01 / 12. The slowest quarter of "
           "each side is left out, so the sequence is not monotonic: check each r."],
    solution="level = 0.01 / 12\n"
             "r = next(r for r in range(1, 100) if lc.evidence.smallest_pvalue(r, r) <= level)   # 10",
    correct_example=10, wrong_examples=[1, 6, 9, 11, 20, 0, 2.5, "10"],
)

# The 11 repeats of a 1 KiB out-of-place all_reduce on 2 gloo ranks (median call of each, us),
# run "rerun07" of tests/data/bench_gate_recorded_2ranks.json (benchmarks/bench_gate.py, 2026-12-01).
OUTLIER_REPEATS_US = (197.6, 182.1, 190.5, 185.0, 190.1, 1581.1, 186.4, 187.9, 194.0, 189.5, 190.7)


def _kept_mean(times, dropped: int = 1):
    """The mean of the repeats with the ``dropped`` slowest left out by hand."""
    return float(np.mean(sorted(times)[:-dropped]))


class _OutlierExercise(StatedValue):
    """The median (to 0.1%: the hand-trimmed summaries lie within 1% of it), with those caught first."""

    def _check(self, answer, **context):
        value = as_one_number(answer)
        if value is not None:
            times = self.given["times"]
            trimmed = [_kept_mean(times, k) for k in (1, 2, 3)] + [float(np.median(sorted(times)[:-1]))]
            if (any(math.isclose(value, t, rel_tol=5e-4) for t in trimmed)
                    and not math.isclose(value, float(np.median(times)), rel_tol=self.rtol)):
                raise Incorrect(_HAND_TRIMMED)
        return super()._check(answer, **context)


_HAND_TRIMMED = ("You left slow repeats out by hand before summarising the rest: close, but which repeats to "
                 "drop becomes a choice made after seeing the data. Give the summary of all of them that needs "
                 "no such choice.")

q_outlier = _OutlierExercise(
    "One outlier in the baseline",
    "These are the 11 repeats of one size of a real baseline sweep (each repeat's median call, in us), "
    "measured on the lab's shared 2-core machine; during one of them another job was busy:\n"
    "    {times}\n"
    "What time (us) should the baseline's table carry for this size, so that one repeat a neighbour "
    "disturbed does not decide it?",
    expected=lambda times: float(np.median(times)),
    given=dict(times=OUTLIER_REPEATS_US), unit="us", rtol=1e-3, form="a number of us (to 4 significant figures)",
    mistakes=[(lambda times: float(np.mean(times)),
               "That is the mean: the one disturbed repeat pulls it far above the ten others, so every "
               "ordinary rerun would look faster than the baseline. Which summary does one repeat barely move?"),
              (lambda times: float(np.max(times)), "That is the slowest repeat, the one the neighbour disturbed."),
              (lambda times: float(np.min(times)),
               "That is the luckiest repeat: a baseline built from it makes ordinary runs look slow.")],
    hints=["The gate's tables (lc.evidence.summarize) use a summary that a single repeat cannot drag.",
           "Half the repeats are above it, half below."],
    solution="import numpy as np\nnp.median(times)   # 190.1 us; the mean is 315.9 us",
    correct_example=float(np.median(OUTLIER_REPEATS_US)),
    wrong_examples=[float(np.mean(OUTLIER_REPEATS_US)), 1581.1, 182.1, _kept_mean(OUTLIER_REPEATS_US),
                    250.0, "190"],
)


def communication_cost(grad_gib: float, ranks: int, busbw_gbps: float, usd_per_gpu_hour: float,
                       steps: int) -> float:
    """Dollars of ``steps`` steps' all-reduce time on every GPU when none of it is hidden.

    time of one all-reduce = S x 2(n-1)/n / busbw (busbw = algbw x 2(n-1)/n, nccl-tests
    doc/PERFORMANCE.md); S in bytes (GiB x 2**30), busbw in bytes/s (GB/s x 1e9).
    """
    seconds = grad_gib * 2 ** 30 * 2 * (ranks - 1) / ranks / (busbw_gbps * 1e9)
    return seconds * steps * ranks * usd_per_gpu_hour / 3600


def _cost_with(**change):
    def value(grad_gib, ranks, busbw_gbps, usd_per_gpu_hour, steps):
        args = dict(grad_gib=grad_gib, ranks=ranks, busbw_gbps=busbw_gbps, usd_per_gpu_hour=usd_per_gpu_hour,
                    steps=steps)
        factor = change.get("factor", 1.0)
        if callable(factor):
            factor = factor(**args)
        return communication_cost(**args) * factor
    return value


q_gib = StatedValue(
    "What the waiting costs",
    "A data-parallel job all-reduces {grad_gib} GiB of gradients every step on {ranks} GPUs; nccl-tests "
    "measured an all_reduce busbw of {busbw_gbps} GB/s on that cluster. Suppose none of the all-reduce is "
    "hidden behind compute. At ${usd_per_gpu_hour:.3f} per GPU-hour (an example price, not a quote), what do "
    "{steps} steps of that communication cost, in dollars, over all GPUs?",
    expected=communication_cost,
    given=dict(grad_gib=13.0, ranks=32, busbw_gbps=180.0, usd_per_gpu_hour=63.296 / 8, steps=1000),
    unit="dollars", rtol=1e-2,
    mistakes=[(_cost_with(factor=1e9 / 2 ** 30),
               "Your bytes count a GiB as 10^9 bytes. The gradients are in GiB (2^30 bytes each) while the "
               "bandwidth is in GB/s (10^9 bytes per second): convert one unit system into the other first."),
              (_cost_with(factor=lambda ranks, **_: ranks / (2 * (ranks - 1))),
               "You divided the bytes by busbw as if it were the buffer's bytes per second. busbw is algbw "
               "times the all-reduce's factor: turn it back into algbw first (notebook 04)."),
              (_cost_with(factor=lambda ranks, **_: (ranks / (2 * (ranks - 1))) ** 2),
               "You applied the all-reduce's factor the wrong way round: algbw is busbw divided by it."),
              (_cost_with(factor=lambda ranks, **_: 1 / ranks),
               "That is what one GPU's waiting costs; every GPU of the job waits, and each is paid for."),
              (_cost_with(factor=3600), "The price is per hour and the time in seconds: convert one of them."),
              (_cost_with(factor=lambda steps, **_: 1 / steps), "That is one step; the question asks for all of them."),
              (_cost_with(factor=lambda ranks, **_: ranks / (ranks - 1)),
               "You used 2 where the all-reduce's factor is 2(n-1)/n: close, but not for this n.")],
    hints=["One all-reduce takes S / algbw seconds, and algbw = busbw / (2(n-1)/n).",
           "S = GiB x 2**30 bytes; busbw = GB/s x 1e9 bytes per second; dollars = seconds x GPUs x price / 3600."],
    solution="S = 13.0 * 2**30                        # bytes (GiB, not GB)\n"
             "t = S * 2 * (32 - 1) / 32 / 180e9       # seconds per step: 0.150\n"
             "t * 1000 * 32 * (63.296 / 8) / 3600     # $10.54 for 1000 steps",
    correct_example=communication_cost(13.0, 32, 180.0, 63.296 / 8, 1000),
    wrong_examples=[_cost_with(factor=1e9 / 2 ** 30)(13.0, 32, 180.0, 63.296 / 8, 1000),
                    _cost_with(factor=1 / 32)(13.0, 32, 180.0, 63.296 / 8, 1000),
                    _cost_with(factor=3600)(13.0, 32, 180.0, 63.296 / 8, 1000), 1.0, "ten dollars"],
)

# Rows of real gates (lc.evidence.compare, tolerance 0.25, alpha 0.05 over 6 sizes and placements):
# the median slowdown and the gate's interval for it, and the gate's status. Sources, in
# tests/data: A and D "baseline" vs "rerun19" of bench_gate_recorded_4ranks_busy.json (32 KiB and
# 1 KiB, in-place), B "rerun00" vs "rerun01" of bench_gate_recorded_4ranks.json (1 KiB,
# out-of-place), C "rerun09" vs "rerun10" of the same file (1 MiB, in-place).
INTERVAL_ROWS = (
    dict(row="A", size=32768, placement="in-place", slowdown=1.8026, low=1.5674, high=2.3459, status="regression"),
    dict(row="B", size=1024, placement="out-of-place", slowdown=0.9132, low=0.7582, high=1.0488, status="pass"),
    dict(row="C", size=1048576, placement="in-place", slowdown=1.1924, low=0.8548, high=1.3425,
         status="inconclusive"),
    dict(row="D", size=1024, placement="in-place", slowdown=2.2268, low=1.0569, high=2.8011, status="inconclusive"),
)
_WORDS = {"regression": "regression", "pass": "pass", "within tolerance": "pass", "inconclusive": "inconclusive"}


class _IntervalExercise(Exercise):
    """One word per row of the gate's table: what its interval allows you to say."""

    expects = "a list of words, one per row"

    def __init__(self, *args, rows, tolerance: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows, self.tolerance = rows, tolerance

    def _prompt_text(self) -> str:
        lines = [f"  {r['row']}: {r['size']:>8} B {r['placement']:<12} slowdown {r['slowdown']:.2f}x, "
                 f"interval {r['low']:.2f}..{r['high']:.2f}" for r in self.rows]
        return self.prompt + "\n" + "\n".join(lines)

    def _words(self, answer) -> list:
        """The learner's words in row order: a list of words, or a dict (or pairs) keyed by the rows' letters."""
        letters = [r["row"] for r in self.rows]
        pairs = as_pairs(answer)
        if pairs:
            keyed = {}
            for key, word in pairs:
                text = as_text(key)
                letter = None if text is None else text.strip().upper()
                if letter not in letters:
                    raise Incorrect(f"{safe_repr(key)} is not a row of the table: key your answer by the rows' "
                                    f"letters {letters}, or give a list of words in that order.")
                keyed[letter] = word
            return [keyed.get(letter) for letter in letters] if len(keyed) == len(letters) else list(keyed.values())
        words = as_items(answer)
        if words is None:
            raise Incorrect(f"answer with a list of {len(self.rows)} words, one per row (A first), "
                            f"e.g. ['pass', 'pass', 'pass', 'pass'], or a dict keyed by the rows' letters; "
                            f"got {safe_repr(answer)}.")
        return words

    def _check(self, answer, **context):
        words = self._words(answer)
        if any(_is_blank(w) for w in words):
            raise NotAttempted()
        if len(words) != len(self.rows):
            raise Incorrect(f"the table has {len(self.rows)} rows (A to {self.rows[-1]['row']}); give one word for "
                            f"each, not {len(words)}.")
        limit = 1 + self.tolerance
        for r, w in zip(self.rows, words):
            text = as_text(w)
            said = None if text is None else _WORDS.get(spelling(text))
            if said is None:
                raise Incorrect(f"row {r['row']}: {safe_repr(w)} is not one of the gate's answers; use 'regression', "
                                "'pass' (within the tolerance) or 'inconclusive' (any case).")
            if said == r["status"]:
                continue
            # say what the learner's word claims and what it would need, never where this row's interval lies
            # (that is the row's answer)
            if said == "pass":
                raise Incorrect(f"row {r['row']}: 'pass' needs the row's whole interval at or below {limit:g}x, "
                                "shown within the tolerance; 'not flagged' is not 'pass'. Read this row's interval "
                                "again, both ends.")
            if said == "regression":
                raise Incorrect(f"row {r['row']}: 'regression' needs the row's whole interval above {limit:g}x; a "
                                "large median alone does not make one. Read this row's interval again, both ends.")
            raise Incorrect(f"row {r['row']}: the evidence does settle this row; compare its whole interval "
                            f"with {limit:g}x.")
        return None


q_interval = _IntervalExercise(
    "Reading the gate's intervals",
    "Rows of real gates (tolerance 0.25: up to 1.25x the baseline). For each, the median slowdown "
    "(run / baseline) and the interval the gate computed for it. For each row A-D, in order, say what "
    "the evidence allows: 'regression' (slower than 1.25x beyond doubt), 'pass' (within the tolerance "
    "beyond doubt) or 'inconclusive'. Answer with a list of the four words, A first (or a dict keyed by "
    "'A' to 'D'; any case).",
    rows=INTERVAL_ROWS, tolerance=0.25,
    hints=["Compare the whole interval, not the median, with 1.25.",
           "An interval on both sides of 1.25 settles nothing: it is neither a regression nor shown to be within "
           "the tolerance."],
    solution="['regression', 'pass', 'inconclusive', 'inconclusive']: A lies above 1.25, B below, C and D "
             "straddle it (C's median is below 1.25 and D's far above: neither decides).",
    correct_example=["regression", "pass", "inconclusive", "inconclusive"],
    wrong_examples=[["regression", "pass", "pass", "regression"], ["regression", "pass", "pass", "inconclusive"],
                    ["regression", "pass", "inconclusive", "regression"],
                    ["regression", "inconclusive", "inconclusive", "inconclusive"],
                    ["regression", "pass", "inconclusive"], "inconclusive", ["regression", "ok", "x", "y"]],
)


# -- targets under real load ------------------------------------------------------------------------------------
# The 4-rank recording of tests/data/bench_gate_recorded_4ranks_busy.json (benchmarks/bench_gate.py, 2026-12-01):
# run "baseline" (the machine's own load, about 2) and run "neighbours" (two busy processes beside the ranks,
# another job on the same machine), in-place; each size's median call and the 95% interval of
# lc.evidence.summarize, in us.
LOAD_ROWS = (
    dict(condition="quiet", size=1024, median_us=4630.0, low_us=4467.0, high_us=5111.0),
    dict(condition="quiet", size=32768, median_us=4949.0, low_us=4597.0, high_us=5362.0),
    dict(condition="beside another job", size=1024, median_us=12148.0, low_us=8815.0, high_us=16185.0),
    dict(condition="beside another job", size=32768, median_us=10797.0, low_us=7925.0, high_us=13603.0),
)
# written before measuring: the median call of an all_reduce on 4 ranks stays under a limit (us)
LOAD_TARGETS = {"1KiB_5ms": (1024, 5000.0), "32KiB_7ms": (32768, 7000.0), "32KiB_10ms": (32768, 10000.0)}
_LOAD_WORDS = {"met": "met", "missed": "missed", "not met": "missed", "inconclusive": "inconclusive",
               "measure more": "inconclusive"}


def _target_answer(condition: str, by_median: bool = False) -> dict:
    """Each target's answer from one condition's rows: met (whole interval under the limit), missed (whole
    interval over it) or inconclusive; ``by_median`` reads the median alone (the mistake)."""
    rows = {r["size"]: r for r in LOAD_ROWS if r["condition"] == condition}
    out = {}
    for key, (size, limit) in LOAD_TARGETS.items():
        r = rows[size]
        if by_median:
            out[key] = "met" if r["median_us"] <= limit else "missed"
        else:
            out[key] = "met" if r["high_us"] <= limit else "missed" if r["low_us"] > limit else "inconclusive"
    return out


def _check_under_load(answer) -> str | None:
    pairs = as_pairs(answer)
    if pairs is None:
        raise Incorrect("answer with a dict {target key: 'met', 'missed' or 'inconclusive'} with a key for each of "
                        f"{list(LOAD_TARGETS)}.")
    got = {}
    for key, word in pairs:
        name, text = as_text(key), as_text(word)
        if name not in LOAD_TARGETS:
            raise Incorrect(f"{safe_repr(key)} is not a key of LOAD_TARGETS {list(LOAD_TARGETS)}.")
        said = None if text is None else _LOAD_WORDS.get(spelling(text))
        if said is None:
            raise Incorrect(f"the answer for {name!r} is not one of 'met', 'missed' or 'inconclusive' (any case).")
        got[name] = said
    missing = [k for k in LOAD_TARGETS if k not in got]
    if missing:
        raise Incorrect(f"{len(missing)} target(s) have no answer yet: {missing}.")
    want = _target_answer("beside another job")
    if got == want:
        return None
    if got == _target_answer("quiet"):
        raise Incorrect("those are the quiet machine's answers. The job runs beside other work, so the evidence "
                        "for its targets is the run measured beside another job: a benchmark on a quiet machine "
                        "answers a question nobody asked.")
    if got == _target_answer("beside another job", by_median=True):
        raise Incorrect("you compared each median with its limit. A target is met or missed only when its whole "
                        "interval lies on one side of the limit; an interval across it is 'inconclusive'.")
    wrong = sum(got[k] != v for k, v in want.items())
    raise Incorrect(f"{wrong} of the {len(LOAD_TARGETS)} answers do not follow from the run beside another job: "
                    "compare each target's limit with that row's whole interval.")


q_under_load = CustomExercise(
    "Targets under real load",
    "The team wrote LOAD_TARGETS before measuring: the median call of an all_reduce on 4 ranks stays under a "
    "limit, {key: (size in bytes, limit in us)}. The job will run on a machine it shares with other work. "
    "LOAD_ROWS are real measurements of the same sweep on the lab's 2-core machine, quiet and beside another "
    "job (median call, 95% interval, us). For each target, what does the evidence answer for this job: 'met', "
    "'missed' or 'inconclusive'? Answer with a dict {target key: word} (any case; a list of pairs will do).",
    checker=_check_under_load,
    hints=["Which of the two conditions is the one the job will meet?",
           "Met: the whole interval under the limit; missed: the whole interval over it; otherwise inconclusive."],
    solution="{'1KiB_5ms': 'missed', '32KiB_7ms': 'missed', '32KiB_10ms': 'inconclusive'}   # from the rows measured "
             "beside another job; quiet, the 32 KiB targets would both be met",
    correct_example=_target_answer("beside another job"),
    wrong_examples=[_target_answer("quiet"), _target_answer("beside another job", by_median=True),
                    {"1KiB_5ms": "missed", "32KiB_7ms": "inconclusive", "32KiB_10ms": "inconclusive"},
                    {"1KiB_5ms": "missed"}, ["missed", "missed", "inconclusive"],
                    {"1KiB_5ms": "missed", "32KiB_7ms": "missed", "32KiB_10ms": "unknown"}],
    expects="a dict {target key: 'met', 'missed' or 'inconclusive'}",
)
