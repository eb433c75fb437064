"""Fit the alpha-beta model to measurements and predict them back, with the error per size.

Input: a labcore.bench DataFrame (columns ``op, size, ranks, placement,
time_us`` among others; one row per size x placement). For every rank count
the time of the chosen algorithm's closed form, ``a*alpha + b*beta`` (the
coefficients from :func:`labcore.sim.core.cost.coefficients`), is fitted to the
measured times.

Fit the *relative* error, not the absolute one: sizes span five or more
decades, and a plain least-squares fit lets the largest sizes dominate, leaving
small ones badly predicted (measured on gloo all_reduce, 2 ranks, 1 KiB-256 MiB:
18% median error plain, 3.9% relative). Minimising sum(((model - t) / t)^2) is a
linear least-squares problem in (alpha, beta) after dividing each row by t.

Example
-------
>>> import numpy as np, pandas as pd
>>> sizes = 2.0 ** np.arange(10, 27)
>>> t = [coefficients("all_reduce", "ring", 2, s)[0] * 20e-6 + coefficients("all_reduce", "ring", 2, s)[1] * 1e-9
...      for s in sizes]
>>> df = pd.DataFrame({"op": "all_reduce", "size": sizes, "ranks": 2, "placement": "out-of-place",
...                    "time_us": np.array(t) * 1e6})
>>> cal = calibrate(df)
>>> round(cal.params(2).alpha * 1e6, 3), round(1 / cal.params(2).beta / 1e9, 3)
(20.0, 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labcore import validate
from labcore.sim.core.cost import coefficients

# What the closed forms take (labcore.sim.core.cost.steps); root and order change no cost.
CLOSED_FORM_OPTIONS = {"pipeline", "channels", "gpus_per_node", "root", "order"}


@dataclass(frozen=True)
class Fit:
    """Fitted parameters for one rank count: alpha (s per step), beta (s per byte)."""

    ranks: int
    alpha: float
    beta: float
    points: int
    median_error: float

    @property
    def bandwidth(self) -> float:
        """1/beta in bytes/s."""
        return 1.0 / self.beta if self.beta > 0 else float("inf")


@dataclass
class Calibration:
    """Fits per rank count and the per-size errors (``errors``: ranks, size, measured_us,
    predicted_us, error = predicted/measured - 1)."""

    op: str
    algorithm: str
    fits: dict[int, Fit]
    errors: "object"
    relative: bool = True
    robust: bool = False
    source: str = "measurements"
    options: dict = field(default_factory=dict)

    def params(self, ranks: int | None = None) -> Fit:
        """The fit for ``ranks`` (or the only one)."""
        if ranks is None:
            if len(self.fits) != 1:
                raise ValueError(f"fits exist for ranks {sorted(self.fits)}; say which one with ranks=")
            return next(iter(self.fits.values()))
        if validate.whole(ranks) is None:
            raise TypeError(f"ranks is a whole number of ranks (fitted: {sorted(self.fits)}), not {ranks!r}")
        ranks = int(ranks)
        if ranks not in self.fits:
            raise ValueError(f"no fit for {ranks} ranks; fitted: {sorted(self.fits)}")
        return self.fits[ranks]

    def predict(self, size, ranks: int) -> np.ndarray:
        """Predicted time in seconds for byte count(s) ``size`` on ``ranks`` ranks."""
        f = self.params(ranks)
        size = np.asarray(size, dtype=float)
        if not np.all(np.isfinite(size)) or np.any(size < 0):
            raise ValueError(f"sizes must be finite byte counts >= 0, not {size.ravel()[~np.isfinite(size.ravel()) | (size.ravel() < 0)][0]:g}")
        ab = np.array([coefficients(self.op, self.algorithm, ranks, s, **self.options)[:2] for s in size.ravel()])
        return (ab[:, 0] * f.alpha + ab[:, 1] * f.beta).reshape(size.shape)

    def median_error(self, ranks: int | None = None, min_size: float = 0, max_size: float = float("inf")) -> float:
        """Median of |predicted/measured - 1| over the sizes in [min_size, max_size]."""
        e = self.errors
        keep = (e["size"] >= min_size) & (e["size"] <= max_size)
        if ranks is not None:
            keep &= e["ranks"] == ranks
        return float(np.median(np.abs(e.loc[keep, "error"]))) if keep.any() else float("nan")

    def summary(self):
        """pandas DataFrame, one row per rank count: alpha_us, bandwidth_GBs, median and max error."""
        import pandas as pd

        rows = []
        for r, f in sorted(self.fits.items()):
            err = np.abs(self.errors.loc[self.errors["ranks"] == r, "error"])
            rows.append({"ranks": r, "alpha_us": f.alpha * 1e6, "bandwidth_GBs": f.bandwidth / 1e9,
                         "points": f.points, "median_error": float(np.median(err)), "max_error": float(err.max())})
        return pd.DataFrame(rows)

    def topology(self, ranks: int):
        """A uniform topology with the fitted alpha and bandwidth (see topologies.calibrated)."""
        from labcore.sim.machines.topologies import calibrated

        return calibrated(self, ranks)


def _solve(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with alpha, beta >= 0 (two unknowns: try both, then each alone)."""
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    if np.all(x >= 0):
        return x
    best, best_res = np.zeros(2), np.inf
    for j in range(2):
        col = A[:, j]
        v = max(0.0, float(col @ y) / float(col @ col)) if col @ col > 0 else 0.0
        cand = np.zeros(2)
        cand[j] = v
        res = float(np.sum((A @ cand - y) ** 2))
        if res < best_res:
            best, best_res = cand, res
    return best


def _least_median(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least median of squares (Rousseeuw 1984): the (alpha, beta) through two of the points
    that leaves the smallest median residual. With two unknowns, trying every pair is exact."""
    best, best_med = _solve(A, y), np.inf
    for i in range(len(y)):
        for j in range(i + 1, len(y)):
            pair = A[[i, j]]
            if abs(np.linalg.det(pair)) < 1e-12:
                continue
            x = np.linalg.solve(pair, y[[i, j]])
            if np.any(x < 0):
                continue
            med = float(np.median(np.abs(A @ x - y)))
            if med < best_med:
                best, best_med = x, med
    return best


def _fit(A: np.ndarray, y: np.ndarray, robust: bool) -> np.ndarray:
    """Least squares; or (robust) least median of squares, which lets up to half the sizes sit
    off the line (a regime the model lacks, such as a backend switching algorithm at some
    size, or cores shared with other work)."""
    return _least_median(A, y) if robust and len(y) > 2 else _solve(A, y)


def calibrate(df, op: str | None = None, algorithm: str = "ring", placement: str | None = "out-of-place",
              min_size: float = 0, max_size: float = float("inf"), relative: bool = True, robust: bool = False,
              time: str = "time_us", **options) -> Calibration:
    """Fit alpha and beta per rank count from a labcore.bench DataFrame.

    Parameters
    ----------
    df : DataFrame with columns ``op, size, ranks, time_us`` (and ``placement``).
    op : which collective's rows to use; default the only one in ``df``.
    algorithm : whose closed form to fit (the one the backend runs; gloo's all_reduce
        on CPU is ring-like for large sizes).
    placement : keep only these rows (None keeps all).
    min_size, max_size : bytes; fit only sizes in this range.
    relative : minimise relative error (recommended) instead of absolute error.
    robust : fit the line that most sizes agree with (least median of squares), so that disturbed sizes and regimes the model lacks
        (gloo changing algorithm at some size; ranks sharing cores) pull the fit less.
    time : the column of microseconds to fit: ``time_us`` (nccl-tests' mean per call) or
        ``median_us`` (the median call, which a stalled call does not move).
    **options : for the closed form (``pipeline``, ``gpus_per_node``).

    Returns
    -------
    Calibration, with ``fits``, ``errors`` per size (over every size, not only the
    fitted ones), ``predict``, ``median_error``, ``summary`` and ``topology``.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"calibrate takes a DataFrame of measurements (labcore.bench.sweep's or read_nccl_tests' "
                        f"output), not {type(df).__name__}")
    missing = {"size", "ranks", time} - set(df.columns)
    if missing:
        raise ValueError(f"the DataFrame lacks columns {sorted(missing)}; pass labcore.bench.sweep's output")
    if df.empty:
        raise ValueError("the DataFrame has no rows: measure first (labcore.bench.sweep)")
    unknown = sorted(set(options) - CLOSED_FORM_OPTIONS)
    if unknown:
        raise TypeError(f"calibrate's closed form takes {', '.join(sorted(CLOSED_FORM_OPTIONS))}, not {unknown}")
    data = _numeric(df, time)
    if "op" in data.columns:
        ops = sorted(data["op"].unique())
        if op is None:
            if len(ops) != 1:
                raise ValueError(f"the DataFrame holds several ops {ops}; choose one with op=")
            op = ops[0]
        data = data[data["op"] == op]
    if op is None:
        raise ValueError("say which collective the times are for: op='all_reduce'")
    if placement is not None and "placement" in data.columns:
        data = data[data["placement"] == placement]
    data = data[data[time] > 0]
    if data.empty:
        raise ValueError(f"no positive times for op={op!r}, placement={placement!r}")
    fits, frames = {}, []
    for ranks, group in data.groupby("ranks"):
        ranks = int(ranks)
        if ranks < 0:
            raise ValueError(f"rows with ranks {ranks} are of an unknown rank count (read_nccl_tests could not "
                             "tell): pass read_nccl_tests(..., ranks=N)")
        if ranks < 2:
            raise ValueError(f"rows of {ranks} rank(s) move no data, so they say nothing of alpha and beta: "
                             "keep rows of 2 ranks or more")
        size = group["size"].to_numpy(float)
        t = group[time].to_numpy(float) * 1e-6
        ab = np.array([coefficients(op, algorithm, ranks, s, **options)[:2] for s in size], dtype=float)
        use = (size >= min_size) & (size <= max_size)
        if len(set(size[use])) < 2:
            raise ValueError(f"{ranks} ranks: need at least two different sizes in [{min_size}, {max_size}] to fit "
                             f"(alpha and beta), found {len(set(size[use]))}")
        w = 1.0 / t[use] if relative else np.ones(use.sum())
        # scale columns so that alpha (~1e-5) and beta (~1e-9) are solved with equal precision
        A = ab[use] * w[:, None]
        scale = np.where(np.abs(A).max(axis=0) > 0, np.abs(A).max(axis=0), 1.0)
        x = _fit(A / scale, t[use] * w, robust) / scale
        pred = ab @ x
        err = pred / t - 1
        fits[ranks] = Fit(ranks, float(x[0]), float(x[1]), int(use.sum()), float(np.median(np.abs(err[use]))))
        frames.append(pd.DataFrame({"ranks": ranks, "size": size, "measured_us": t * 1e6, "predicted_us": pred * 1e6,
                                    "error": err, "fitted": use}))
    errors = pd.concat(frames, ignore_index=True).sort_values(["ranks", "size"], ignore_index=True)
    return Calibration(op, algorithm, fits, errors, relative=relative, robust=robust, options=options)


def _numeric(df, time: str):
    """``df`` with size, ranks and ``time`` checked: numbers, sizes finite and >= 0, whole rank
    counts, no infinite time (NaN and non-positive times are dropped later, as unmeasured)."""
    import pandas as pd

    out = df.copy()
    for col in ("size", "ranks", time):
        values = pd.to_numeric(out[col], errors="coerce")
        bad = out[col][values.isna() & out[col].notna()]
        if len(bad):
            raise ValueError(f"column {col!r} holds {bad.iloc[0]!r}, not a number")
        out[col] = values
    bad = out.loc[~np.isfinite(out["size"]) | (out["size"] < 0), "size"]
    if len(bad):
        raise ValueError(f"sizes must be finite byte counts >= 0, not {bad.iloc[0]}")
    ranks = out["ranks"]
    if (~np.isfinite(ranks) | (ranks != ranks.round())).any():
        raise ValueError(f"ranks must be whole numbers, not {ranks[~np.isfinite(ranks) | (ranks != ranks.round())].iloc[0]}")
    if np.isinf(out[time]).any():
        raise ValueError(f"{time} holds an infinite time (size {out.loc[np.isinf(out[time]), 'size'].iloc[0]:g}); "
                         "drop that row or measure it again")
    return out


def synthetic_sweep(op: str = "all_reduce", algorithm: str = "ring", ranks=(2, 4), alpha: float = 30e-6,
              beta: float = 1e-9, noise: float = 0.03, min_bytes: int = 1 << 10, max_bytes: int = 256 << 20,
              seed: int = 0):
    """A bench-style DataFrame generated from known alpha and beta, with multiplicative noise:
    for testing :func:`calibrate` and for teaching without a cluster.

    Example
    -------
    >>> df = synthetic_sweep(ranks=(2,), noise=0.0)
    >>> round(calibrate(df).params(2).alpha * 1e6, 6)
    30.0
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for r in ranks:
        size = float(min_bytes)
        while size <= max_bytes:
            a, b, _ = coefficients(op, algorithm, r, size)
            t = (a * alpha + b * beta) * (1 + noise * rng.standard_normal())
            rows.append({"op": op, "size": int(size), "ranks": r, "placement": "out-of-place",
                         "time_us": t * 1e6})
            size *= 2
    return pd.DataFrame(rows)
