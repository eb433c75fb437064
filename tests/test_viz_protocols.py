"""Figures of protocols and channels: built from the tuner's numbers, readable at any width."""
from dataclasses import replace

from labcore.sim import tuner
from labcore.viz import protocols

H100 = tuner.MACHINES["dgx_h100"]


def _responsive(fig):
    assert fig.layout.width is None                      # the browser decides the width
    legend = fig.layout.legend
    assert legend.orientation == "h" or (0 <= legend.x <= 1 and 0 <= legend.y <= 1)


def test_protocol_lines_draws_data_and_flags():
    fig = protocols.protocol_lines()
    _responsive(fig)
    titles = [a.text for a in fig.layout.annotations]
    assert any("LL:" in t for t in titles) and any("120/128" in t for t in titles)
    flags = [t for t in fig.data if t.type == "bar" and t.text and t.text[0] in ("flag", "counter")]
    assert len(flags) == 2 + 1 + 1                        # LL: 2 flags; LL128: 1; Simple: the counter
    widths = {t.text[0]: t.x[0] for t in fig.data if t.type == "bar" and t.text and t.text[0]}
    assert widths["data 4 B"] == 4 and widths["flag"] in (4, 8)


def test_protocol_times_follow_the_tuner():
    sizes = [1 << k for k in range(3, 31)]
    fig = protocols.protocol_times("all_reduce", H100, sizes)
    _responsive(fig)
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"LL", "LL128", "Simple"}
    # Each line is the fastest algorithm with that protocol, as the cost table has it.
    t = tuner.cost_table("all_reduce", 1 << 20, H100)
    best_ll = t[(t["protocol"] == "LL") & t["available"]]["time_us"].min()
    assert lines["LL"].y[list(lines["LL"].x).index(1 << 20)] == best_ll
    marks = [a.text for a in fig.layout.annotations]
    assert marks == [f"{after} from {protocols.format_bytes(s)}"
                     for s, _, after in protocols.protocol_crossovers("all_reduce", H100, 8, 1 << 30)]
    assert protocols.protocol_crossovers("all_reduce", H100) == [(1144836, "LL", "Simple")]


def test_pcie_box_has_no_ll128_line():
    fig = protocols.protocol_times("all_reduce", tuner.MACHINES["pcie_4090"], [1 << k for k in range(3, 28)])
    assert {t.name for t in fig.data if t.mode == "lines"} == {"LL", "Simple"}


def test_channels_by_size_plots_what_nccl_launches():
    sizes = [1 << 10, 64 << 10, 1 << 20, 1 << 30]
    capped = replace(H100, max_ctas=4)
    fig = protocols.channels_by_size("all_reduce", {"default": H100, "max 4": capped}, sizes)
    _responsive(fig)
    got = {t.name: list(t.y) for t in fig.data}
    assert got["default"] == [tuner.launch("all_reduce", s, H100)["channels"] for s in sizes] == [1, 2, 24, 16]
    assert max(got["max 4"]) == 4
