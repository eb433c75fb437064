"""The chunk-flow animation: structure checked against the schedule, for every simulated algorithm."""
import numpy as np
import pytest

import labcore.sim as sim
from labcore.viz import captions, chunk_flow, still
from labcore.viz.chunk_flow import fill_levels
from labcore.viz.style import CHUNK_COLORS

CASES = [(op, alg) for op, table in sorted(sim.ALGORITHMS.items()) for alg in sorted(table)]


def simulate(op, alg, ranks=8):
    # NVLS on nodes of 4 needs a reducing switch in each node: draw it on one node of all the ranks
    nodes_of_4 = ranks % 4 == 0 and alg != "nvls"
    topo = sim.topologies.uniform(ranks, gpus_per_node=4 if nodes_of_4 else None)
    options = {"gpus_per_node": 4} if alg == "hierarchical" else {}
    return sim.simulate(op, algorithm=alg, ranks=ranks, nbytes=ranks * 4096, topology=topo, **options)


def arrows_in(frame):
    """(src, dst, chunk) of every arrow head drawn in a frame."""
    drawn = []
    for trace in frame.data:
        if trace.marker is not None and trace.marker.symbol is None and trace.customdata is not None \
                and trace.marker.size is not None and not isinstance(trace.marker.size, (int, float)):
            for size, custom in zip(trace.marker.size, trace.customdata):
                if size:
                    drawn.append(tuple(int(v) for v in custom))
    return sorted(drawn)


@pytest.mark.parametrize("op,alg", CASES, ids=[f"{o}-{a}" for o, a in CASES])
def test_one_frame_per_step_with_every_transfer_drawn(op, alg):
    trace = simulate(op, alg)
    trace.verify()
    fig = chunk_flow(trace)
    s = trace.per_chunk().schedule              # transfers of several chunks are drawn chunk by chunk
    assert len(fig.frames) == s.n_steps
    assert len(fig.layout.sliders[0].steps) == s.n_steps
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["▶ play", "❚❚ pause"]
    for k, (frame, sl) in enumerate(zip(fig.frames, s.step_slices())):
        want = sorted(zip(s.src[sl].tolist(), s.dst[sl].tolist(), s.chunk[sl].tolist()))
        assert arrows_in(frame) == want, f"step {k}"


@pytest.mark.parametrize("op,alg", CASES, ids=[f"{o}-{a}" for o, a in CASES])
def test_captions_match_the_schedule(op, alg):
    trace = simulate(op, alg)
    s = trace.per_chunk().schedule
    caps = captions(trace)
    assert len(caps) == s.n_steps
    for k, (cap, sl) in enumerate(zip(caps, s.step_slices())):
        assert cap.startswith(f"step {k} of 0–{s.n_steps - 1}" if s.n_steps > 1 else "step 0, the only one")
        if s.phases and s.phases[k]:
            assert f", {s.phases[k]}:" in cap
        n = sl.stop - sl.start
        first = s.steps()[k][0] if n else None                   # channel 0 comes first
        on = f" on channel {first.channel}" if n and s.n_channels > 1 else ""
        if n == 1:
            name = lambda a: f"rank {a}" if a < s.ranks else f"switch {a - s.ranks}"
            channel = f", channel {first.channel}" if s.n_channels > 1 else ""
            assert f"{name(first.src)} sends chunk {first.chunk} to {name(first.dst)} ({first.op}{channel})" in cap
        elif n > 1:
            label = lambda a: str(a) if a < s.ranks else f"S{a - s.ranks}"
            assert f"{label(first.src)}→{label(first.dst)} chunk {first.chunk}" in cap and on in cap
            assert cap.count("→") == min(n, 8)
        assert (f"{n} transfers at once" in cap) == (n > 1)


def test_ring_caption_text_and_time():
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=1 << 20)
    fig = chunk_flow(trace)
    assert captions(trace)[2] == ("step 2 of 0–5, reduce-scatter: 4 transfers at once, each a reduce: "
                                  "0→1 chunk 1, 1→2 chunk 2, 2→3 chunk 3, 3→0 chunk 0")   # all four spelled out
    assert captions(trace)[3].startswith("step 3 of 0–5, all-gather")
    assert [step.label for step in fig.layout.sliders[0].steps] == [str(k) for k in range(6)]
    assert fig.data[-1].text[0].startswith("before step 0")
    text = fig.frames[-1].data[-1].text[0]
    total = f"{trace.time_s * 1e6:.4g} us"
    assert text.endswith(f"simulated time {total} of {total}")


def test_cells_fill_up_to_complete():
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=4096)
    counts, need = fill_levels(trace)
    assert (counts[0] == 1).all() and (counts[-1] == 4).all() and (need == 4).all()
    fig = chunk_flow(trace)
    first = np.array(fig.data[-3].marker.color)
    last = np.array(fig.frames[-1].data[-3].marker.color)
    assert np.allclose(first, 0.25) and np.allclose(last, 1.0)
    # every cell written in a step is outlined in the arriving chunk's colour
    s = trace.schedule
    for frame, sl in zip(fig.frames, s.step_slices()):
        outline = frame.data[-2]
        drawn = sorted(zip(np.array(outline.y, dtype=int).tolist(), np.array(outline.x, dtype=int).tolist()))
        assert drawn == sorted(zip(s.dst[sl].tolist(), s.chunk[sl].tolist()))
        assert list(outline.marker.color) == [CHUNK_COLORS[c] for c in s.chunk[sl].tolist()]


def test_needs_values():
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=4096, values=False)
    with pytest.raises(ValueError, match="values=True"):
        chunk_flow(trace)


def test_still_freezes_a_step():
    fig = chunk_flow(sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=4096))
    frozen = still(fig, 3)
    assert not frozen.frames and not frozen.layout.sliders
    assert frozen.data[-1].text == fig.frames[3].data[-1].text
    with pytest.raises(IndexError):
        still(fig, 6)


@pytest.mark.live            # kaleido renders in a browser process of its own
@pytest.mark.browser
def test_renders_a_frame_to_a_png_that_is_not_blank(tmp_path):
    """Renders through kaleido and the machine's Chromium; checks pixels vary (not a blank page)."""
    import shutil

    pytest.importorskip("kaleido", reason="kaleido (test extra) renders plotly figures to PNG")
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")):
        pytest.skip("no Chromium on this machine: `apt-get install chromium` to run the PNG render test")
    from kaleido.errors import JavascriptError

    fig = chunk_flow(sim.simulate("all_reduce", algorithm="ring", ranks=8, nbytes=1 << 20))
    path = tmp_path / "frame.png"
    # kaleido 1.5 can call its page script before a loaded browser tab has it (on 2 cores with 4 busy loops:
    # "ReferenceError: kaleido_scopes is not defined"); that, and only that, is tried again in a fresh browser
    for attempt in range(3):
        try:
            still(fig, 9).write_image(path, width=900, height=500)
            break
        except JavascriptError as e:
            if "kaleido_scopes is not defined" not in str(e) or attempt == 2:
                raise
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = _decode_png(png)
    assert pixels.shape[:2] == (500, 900)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, "the rendered frame is (nearly) one colour"


def _decode_png(data: bytes) -> np.ndarray:
    """Minimal PNG reader (8-bit RGB/RGBA, as kaleido writes) so the test needs no image library."""
    import struct
    import zlib

    pos, chunks, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6), "expected 8-bit RGB or RGBA"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) % 256
        else:  # filters 1, 3, 4 depend on the left neighbour: decode byte by byte
            cur = np.zeros(stride, dtype=np.int32)
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + pred) % 256
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)


def test_captions_spell_out_up_to_eight_transfers():
    eight = captions(sim.simulate("all_reduce", algorithm="ring", ranks=8, nbytes=8 * 4096))[0]
    assert eight.count("→") == 8 and "more" not in eight
    sixteen = captions(sim.simulate("all_reduce", algorithm="ring", ranks=16, nbytes=16 * 4096))[0]
    assert sixteen.count("→") == 8 and sixteen.endswith(", and 8 more")


def test_the_figure_takes_the_notebook_width_unless_exporting():
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=1, nbytes=4096)
    fig = chunk_flow(trace)
    assert fig.layout.width is None and fig.layout.autosize
    assert " on 1 rank," in fig.layout.title.text
    assert chunk_flow(trace, width=1050).layout.width == 1050


def test_channels_get_their_own_colour_and_legend():
    topo = sim.topologies.multinode(2, 2)
    trace = sim.simulate("all_reduce", "ring", 4, 4096, topology=topo, channels=2)
    fig = chunk_flow(trace)
    named = [t.name for t in fig.data if t.showlegend]
    assert named == ["channel 0", "channel 1"]
    s = trace.schedule
    colours = {t.name: t.line.color for t in fig.data if t.showlegend}
    for frame, sl in zip(fig.frames, s.step_slices()):
        outline = frame.data[-2]
        assert list(outline.marker.color) == [colours[f"channel {c}"] for c in s.channel[sl].tolist()]
    assert " on channel 1" in " ".join(captions(trace))
    single = chunk_flow(sim.simulate("all_reduce", "ring", 4, 4096))
    assert not any(t.showlegend for t in single.data)      # one channel: colours stay the chunks'


def test_multi_chunk_transfers_are_drawn_chunk_by_chunk():
    trace = sim.simulate("all_reduce", "hierarchical", 8, 8 * 4096, topology=sim.topologies.multinode(2, 4),
                         pipeline=2)
    assert trace.schedule.span.max() == 2                  # a block of the node ring is two chunks
    fig = chunk_flow(trace)
    expanded = trace.per_chunk().schedule
    assert sum(len(arrows_in(f)) for f in fig.frames) == expanded.n_transfers > trace.schedule.n_transfers
