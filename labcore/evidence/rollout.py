"""A change rolled out behind the gate: roll out, roll back, or hold and measure more.

Every change to a training job's communication (a bucket size, ``NCCL_ALGO``, a new
cluster) is a hypothesis. Rolled out behind the gate, the evidence decides:

- the gate says **regression** -> **roll back** to the configuration that was running;
- the gate says **pass** (every size shown within the tolerance) -> **roll out**;
- the gate says **inconclusive** -> **hold**: keep what runs now and measure more; an
  unproven change does not go out, and it is not thrown away either.

:func:`decide` reads a gate (:func:`labcore.bench.compare`, or :func:`compare_predictions`
for a model's numbers, which have no noise and so no "inconclusive") and returns a
:class:`Decision`; after a roll-back, gate the restored configuration against the old
baseline once more, so the roll-back is itself shown to have worked.

Example
-------
>>> import pandas as pd
>>> gate = compare_predictions({"25 MiB": 100e-6}, {"25 MiB": 140e-6}, tolerance=0.25)
>>> decide(gate, "NCCL_ALGO=Tree").action
'roll back'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from labcore import validate

ACTIONS = {"regression": "roll back", "pass": "roll out", "inconclusive": "hold: measure more"}
# After a roll-back, the restored configuration is gated against the old baseline once more.
CONFIRMING = {"regression": "still slow: the cause is elsewhere, look further",
              "pass": "roll-back confirmed", "inconclusive": "keep the roll-back; measure more to confirm it"}


@dataclass(frozen=True)
class Decision:
    """What to do with ``change``, and why (``verdict`` is the gate's)."""

    change: str
    verdict: str
    action: str
    reason: str

    def row(self) -> dict:
        """The decision as one row of a roll-out log."""
        return dict(change=self.change, verdict=self.verdict, action=self.action, reason=self.reason)


def decide(result: pd.DataFrame, change: str = "the change", confirming: bool = False) -> Decision:
    """The action the gate's ``result`` calls for (see the module docstring).

    ``confirming=True`` reads a gate of a restored configuration against the baseline it
    restores: "roll-back confirmed", "keep the roll-back; measure more", or "still slow".
    """
    from labcore.evidence.stats import advice, verdict

    if not isinstance(result, pd.DataFrame) or "status" not in result:
        raise ValueError("decide needs a gate's result: the DataFrame of lc.evidence.compare or compare_predictions")
    v = result.attrs.get("verdict", verdict(result))
    reason = advice(result) if "baseline_repeats" in result else _prediction_advice(result)
    return Decision(change, v, (CONFIRMING if confirming else ACTIONS)[v], reason)


def _prediction_advice(result: pd.DataFrame) -> str:
    tol = result.attrs.get("tolerance", 0.25)
    bad = result.loc[result["status"] == "regression", "case"].tolist()
    if bad:
        return f"predicted slower than {1 + tol:g}x the baseline for {', '.join(map(str, bad))}"
    return f"predicted within {1 + tol:g}x the baseline everywhere"


def compare_predictions(baseline: Mapping[str, float], candidate: Mapping[str, float],
                        tolerance: float = 0.25) -> pd.DataFrame:
    """The gate for a model's numbers: each case ``regression`` if candidate > (1 + tolerance) x baseline.

    Parameters
    ----------
    baseline, candidate : ``{case: predicted time}`` (any unit, the same for both; same cases).
    tolerance : slowdown allowed (0.25: up to 1.25x).

    A prediction has no spread, so there is no "inconclusive": the verdict is only as good
    as the model (NCCL's tuner ranks options; it does not promise measured times).
    """
    validate.finite_number(tolerance, "tolerance", at_least=0, below=10,
                           must="the slowdown allowed, as a fraction (0.25 = 25%)")
    if set(baseline) != set(candidate) or not baseline:
        raise ValueError(f"baseline and candidate must predict the same cases; got {sorted(baseline)} "
                         f"and {sorted(candidate)}")
    rows = []
    for case, base in baseline.items():
        cur = candidate[case]
        if not base > 0 or not cur > 0:
            raise ValueError(f"predicted times must be positive; case {case!r} has {base!r} and {cur!r}")
        ratio = cur / base
        rows.append(dict(case=case, baseline=base, candidate=cur, slowdown=ratio,
                         status="regression" if ratio > 1 + tolerance else "pass"))
    out = pd.DataFrame(rows)
    out.attrs.update(tolerance=tolerance, verdict="regression" if (out["status"] == "regression").any() else "pass")
    return out
