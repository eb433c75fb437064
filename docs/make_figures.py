"""Render the README's picture: one frame of the 8-rank ring all-reduce animation.

Run ``python docs/make_figures.py`` (needs kaleido and Chromium, as the PNG test does).
"""
from pathlib import Path

import labcore.sim as sim
from labcore.viz import chunk_flow, still

HERE = Path(__file__).parent

if __name__ == "__main__":
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=8, nbytes=64 << 20,
                         topology=sim.topologies.nvswitch(8))
    # a fixed size for the picture (in a notebook the figure takes the page's width); steps count from 0
    fig = chunk_flow(trace, width=1050, height=560,
                     title="Ring all-reduce on 8 GPUs (NVSwitch model), 64 MiB: step 9 of 0–13")
    out = HERE / "ring_allreduce_frame.png"
    still(fig, 9).write_image(out, width=1050, height=560)
    print(out)
