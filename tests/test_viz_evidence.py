"""Notebook 10's figures: what they draw, and that they fit a 1280 px window (no fixed width; legends inside the
figure, over the plot or under it in a bottom margin that holds them, never to its right)."""
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from labcore.evidence.drift import control_table
from labcore.evidence.latency import latency_summary
from labcore.sim.apps.ddp_step import predict_ddp_step
from labcore.sim import price_steps
from labcore.viz.control import control_chart
from labcore.viz.evidence import cost_plot, interval_plot, percentile_plot

DATA = Path(__file__).parent / "data"


def _fits(fig):
    assert fig.layout.width is None                       # sized by the notebook's output area
    legend = fig.layout.legend
    assert legend.x is None or 0 <= legend.x <= 1
    assert legend.y is None or 0 <= legend.y <= 1 or (legend.orientation == "h" and fig.layout.margin.b >= 100)


@pytest.fixture(scope="module")
def recorded_table():
    rows = pd.DataFrame(json.loads((DATA / "bench_gate_recorded_4ranks_busy.json").read_text())["rows"])
    rows = rows[(rows["run"] == "baseline") | rows["run"].str.startswith("rerun")]
    return control_table(rows, 32 << 10, baseline=8)


def test_control_chart_draws_limits_points_by_gate_and_signals(recorded_table):
    fig = control_chart(recorded_table)
    _fits(fig)
    names = [t.name for t in fig.data]
    assert names[:3] == ["upper limit (3 sigma)", "centre", "lower limit (3 sigma)"]
    assert "baseline runs (set the limits)" in names and "gate: regression" in names and "chart signals" in names
    points = sum(len(t.x) for t in fig.data if t.name.startswith(("baseline runs", "gate:")))
    assert points == len(recorded_table)
    signals = next(t for t in fig.data if t.name == "chart signals")
    assert len(signals.x) == (recorded_table["signal"] != "").sum()
    low, high = fig.layout.yaxis.range                    # every interval inside the axis, room for the legend
    assert 10 ** low < recorded_table["low_us"].min() and 10 ** high > recorded_table["high_us"].max()
    with pytest.raises(ValueError, match="control_table"):
        control_chart(recorded_table.drop(columns="signal"))


def test_interval_plot_one_trace_per_condition_side_by_side():
    s = pd.DataFrame(dict(size=[1024, 1 << 20], placement="in-place", median_us=[10.0, 900.0], low_us=[9.0, 850.0],
                          high_us=[12.0, 990.0], repeats=5))
    fig = interval_plot({"idle": s, "busy": s.assign(median_us=s.median_us * 2, high_us=s.high_us * 2)})
    _fits(fig)
    assert [t.name for t in fig.data] == ["idle", "busy"]
    assert fig.data[0].x[0] < 1024 < fig.data[1].x[0]      # drawn apart at the same size
    assert list(fig.data[1].error_y.array) == pytest.approx([24.0 - 20.0, 1980.0 - 1800.0])
    with pytest.raises(ValueError, match="summarize"):
        interval_plot({"idle": s.drop(columns="low_us")})


def test_percentile_plot_draws_an_unbounded_end_to_the_top():
    few = latency_summary(list(range(1, 101)), label="100 calls")       # p99 has no upper bound
    many = latency_summary(list(range(1, 1001)), label="1000 calls")
    fig = percentile_plot(pd.concat([few, many], ignore_index=True))
    _fits(fig)
    unbounded = fig.data[0]
    assert math.isinf(few["high"].iloc[1]) and "no upper bound" in unbounded.text[1]
    assert all(math.isfinite(v) for v in unbounded.error_y.array)
    with pytest.raises(ValueError, match="latency_summary"):
        percentile_plot(few.drop(columns="high"))


def test_cost_plot_stacks_waiting_on_compute():
    steps = [predict_ddp_step(1 << 30, "multinode", compute_s=0.02),
             predict_ddp_step(1 << 30, "multinode", compute_s=0.02, cap_bytes=1 << 20, first_cap_bytes=None)]
    costs = price_steps(steps, 8.0, n_steps=100).assign(label=["25 MiB", "1 MiB"])
    fig = cost_plot(costs)
    _fits(fig)
    compute, waiting = fig.data
    assert [c + w for c, w in zip(compute.x, waiting.x)] == pytest.approx(costs["usd"].tolist())
    assert "100 steps" in fig.layout.title.text
    with pytest.raises(ValueError, match="label"):
        cost_plot(costs.drop(columns="label"))
