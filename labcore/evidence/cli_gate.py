"""The evidence gate of ``python -m labcore bench --baseline FILE``: a run against a saved baseline.

The bench's command line (:mod:`labcore.bench.cli`) measures; this module, handed to it by
``python -m labcore``, checks that the baseline fits the run before anything is measured and, after,
compares the run with it (:func:`labcore.evidence.compare`) and words the verdict as the table's
comment lines.
"""
from __future__ import annotations

from labcore.evidence import stats

__all__ = ["fits", "judge"]


def fits(base, planned, source: str, compare_from: int) -> None:
    """Refuse (one ValueError naming ``source``) a baseline of another collective, type, reduction or
    rank count, or with no size in common with the ``planned`` rows."""
    stats.check_comparable(base, planned, source, compare_from)


def judge(base, df, tolerance: float, alpha: float, compare_from: int, source: str) -> tuple[str, list[str]]:
    """(verdict, the gate's lines for the table): "regression", "pass" or "inconclusive"."""
    result = stats.compare(base, df, tolerance, alpha, compare_from, name=source)
    a = result.attrs
    lines = [f"# evidence gate against {source}: a size regresses when slower than {1 + a['tolerance']:g}x "
             f"its baseline; false-alarm rate {a['alpha']:g} ({a['level']:.2g} per size, permutation "
             f"test on {a['time']} over repeats)",
             f"# {'size':>10}  {'placement':>12}  {'base us':>9} {'(n)':>4}  {'now us':>9} {'(n)':>4}  "
             f"{'slowdown':>8}  {'interval':>15}  {'p':>7}  status"]
    for _, r in result.iterrows():
        lines.append(f"# {int(r['size']):>10}  {r['placement']:>12}  {r['baseline_us']:9.2f} "
                     f"{int(r['baseline_repeats']):>4}  {r['current_us']:9.2f} {int(r['current_repeats']):>4}  "
                     f"{r['slowdown']:8.2f}  {r['slowdown_low']:6.2f}..{r['slowdown_high']:<7.2f}  "
                     f"{r['p_slower']:7.3g}  {r['status']}")
    lines.append(f"# evidence gate: {stats.advice(result)}")
    return a["verdict"], lines
