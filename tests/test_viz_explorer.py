"""Explorer: controls re-simulate and update the same FigureWidget in place."""
from labcore.viz import Explorer, captions


def test_controls_update_the_same_figure_and_numbers():
    ex = Explorer(ranks=4, nbytes=1 << 16, timeline=True)
    figure, timeline = ex.figure, ex.timeline
    before = ex.numbers.value
    assert "simulated time" in before and "alpha-beta closed form" in before
    ex.controls["ranks"].value = 8
    assert ex.figure is figure and ex.timeline is timeline
    assert ex.trace.schedule.ranks == 8 and len(figure.data[2].x) == 8     # the rank markers
    assert ex.numbers.value != before
    assert ex.controls["step"].max == ex.trace.schedule.n_steps == 14
    ex.controls["algorithm"].value = "double_tree"
    assert ex.trace.schedule.algorithm == "double_tree" and ex.figure is figure
    used = {int(l) for l in ex.trace.links.ravel() if l >= 0}
    assert len(timeline.layout.yaxis.ticktext) == len(used)


def test_step_slider_shows_that_step():
    ex = Explorer(ranks=4, nbytes=4096, timeline=False)
    caps = captions(ex.trace)
    ex.controls["step"].value = 2
    assert ex.figure.data[-1].text[0].startswith(caps[1].split(":")[0])
    ex.controls["step"].value = 0
    assert ex.figure.data[-1].text[0].startswith("before step 0")


def test_hierarchical_gets_a_node_size_and_bad_settings_say_why():
    ex = Explorer(algorithm="hierarchical", ranks=8, timeline=False)
    assert ex.trace.schedule.algorithm == "hierarchical" and ex.message.value == ""
    ex.controls["ranks"].value = 6
    assert ex.trace.schedule.ranks == 6 and ex.message.value == ""
    ex.controls["algorithm"].value = "in_network"
    ex.controls["topology"].value = "ring"         # a ring of links has no reducing switch
    assert "switch" in ex.message.value
    assert ex.trace.schedule.algorithm == "in_network"   # the last good run stays on screen
