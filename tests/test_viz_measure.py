"""Measurement figures built from bench-shaped DataFrames."""
import numpy as np
import pandas as pd
import pytest

from labcore.viz import crossover_plot, measurement_plot, topology_heatmap


def bench_frame(ranks=4, backend="gloo", scale=1.0):
    sizes = [8 * 4 ** k for k in range(8)]
    rows = []
    for placement in ("out-of-place", "in-place"):
        for s in sizes:
            t = scale * (20 + s / 500.0)
            algbw = s / t / 1e3
            rows.append(dict(op="all_reduce", size=s, count=s // 4, type="float", redop="sum",
                             root=-1, ranks=ranks, backend=backend, placement=placement,
                             time_us=t, algbw=algbw, busbw=algbw * 2 * (ranks - 1) / ranks, wrong=0))
    return pd.DataFrame(rows)


def test_runs_overlaid_with_prediction():
    runs = {"laptop": bench_frame(), "server": bench_frame(scale=0.5)}
    fig = measurement_plot(runs, prediction={"model": lambda n: 20e-6 + n / 5e8})
    names = [t.name for t in fig.data]
    assert names.count("laptop") == 2 and names.count("server") == 2 and names.count("model") == 2
    model_time = [t for t in fig.data if t.name == "model"][0]
    assert model_time.line.dash == "dash"
    assert np.allclose(model_time.y, bench_frame()["time_us"][:8])  # same model as the run
    model_busbw = [t for t in fig.data if t.name == "model"][1]
    assert np.allclose(model_busbw.y, bench_frame()["busbw"][:8])
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert len(fig.data[0].x) == 8  # only out-of-place rows


def test_one_frame_with_two_rank_counts_splits_into_lines():
    df = pd.concat([bench_frame(2), bench_frame(4)])
    fig = measurement_plot(df, placement=None)
    assert sorted({t.name for t in fig.data}) == ["ranks=2", "ranks=4"]
    assert len(fig.data[0].x) == 16


def test_missing_columns_say_what_to_pass():
    with pytest.raises(ValueError, match="labcore.bench.sweep"):
        measurement_plot(pd.DataFrame({"size": [1]}))


def test_crossover_marks_the_winner_changes():
    sizes = np.logspace(2, 8, 13)
    p = pd.concat([
        pd.DataFrame({"size": sizes, "algorithm": "tree", "protocol": "LL", "time_us": 5 + sizes / 1e4}),
        pd.DataFrame({"size": sizes, "algorithm": "ring", "protocol": "simple", "time_us": 30 + sizes / 5e4}),
    ])
    fig = crossover_plot(p)
    star = [t for t in fig.data if t.name == "fastest"][0]
    assert list(star.text[:2]) == ["tree/LL", "tree/LL"] and star.text[-1] == "ring/simple"
    assert [a.text for a in fig.layout.annotations] == ["tree/LL", "ring/simple"]
    legend = fig.layout.legend                      # under the plot, clear of the curves, inside the figure
    assert legend.orientation == "h" and legend.y < 0 and fig.layout.margin.b >= 100


def test_crossover_labels_close_together_go_on_separate_rows():
    sizes = np.logspace(2, 8, 61)
    flip = (sizes > 1e6) & (sizes < 1.3e6)              # a narrow band where another choice wins
    p = pd.concat([
        pd.DataFrame({"size": sizes, "algorithm": "ring", "protocol": "simple", "time_us": 10.0}),
        pd.DataFrame({"size": sizes, "algorithm": "tree", "protocol": "LL128", "time_us": np.where(flip, 5.0, 20.0)}),
    ])
    labels = sorted(((a.x, a.y) for a in crossover_plot(p).layout.annotations))
    assert len(labels) == 3 and len({y for _, y in labels[1:]}) == 2     # the two close labels stack


def test_topology_heatmap_numbers_and_codes():
    bw = pd.DataFrame([[np.nan, 300.0], [300.0, np.nan]], index=["g0", "g1"], columns=["g0", "g1"])
    fig = topology_heatmap(bw)
    assert fig.data[0].text[0][1] == "300" and list(fig.data[0].x) == ["g0", "g1"]
    codes = topology_heatmap([["X", "NV12", "SYS"], ["NV12", "X", "PIX"], ["SYS", "PIX", "X"]])
    z = np.array(codes.data[0].z)
    assert z[0, 1] < z[1, 2] < z[0, 2]  # NVLink closer than PCIe switch, closer than SYS
    with pytest.raises(ValueError, match="square"):
        topology_heatmap([[1, 2]])


def test_busbw_goes_logarithmic_when_the_runs_lie_far_apart():
    def run(scale):
        return pd.DataFrame({"op": "all_reduce", "size": [1024, 1 << 20], "ranks": 4, "placement": "in-place",
                             "time_us": [20.0, 400.0], "busbw": [0.1 * scale, 2.0 * scale]})
    near = measurement_plot({"a": run(1), "b": run(3)}, placement="in-place")
    far = measurement_plot({"cluster": run(200), "this machine": run(1)}, placement="in-place")
    assert near.layout.yaxis2.type != "log" and far.layout.yaxis2.type == "log"     # the slower run stays visible

