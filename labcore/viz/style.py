"""Shared look of the lab's figures: chunk colours, byte-size axes, the width they are designed for."""
from __future__ import annotations

import math
from typing import Iterable

import plotly.colors as pc

# Qualitative palette, one colour per chunk; cycled when there are more chunks.
CHUNK_COLORS = pc.qualitative.Plotly + pc.qualitative.D3[2:] + pc.qualitative.Set2
TEMPLATE = "plotly_white"
# Figures set no width: plotly sizes them to the notebook's output area. What plotly sizes in pixels
# (markers, buffer cells) is chosen for the narrowest area the lab supports: a 1280 px browser window
# with JupyterLab's file browser open leaves about 800 px for a cell's output.
DESIGN_WIDTH = 800
# Legends sit under the plot, in rows: inside it they cover the data of whichever curve runs there.
# LEGEND_ROOM is the bottom margin (px) the x-axis title and two rows of legend take.
LEGEND_BELOW = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top"}
LEGEND_ROOM = 130


def template_dict() -> dict:
    """The lab's plotly template as plain data, for figures built without validation (which
    would otherwise keep the bare name, and plotly.js only understands the template itself)."""
    import plotly.io as pio

    return pio.templates[TEMPLATE].to_plotly_json()


def chunk_color(chunk: int) -> str:
    """Colour of chunk ``chunk`` in every figure of the lab."""
    return CHUNK_COLORS[chunk % len(CHUNK_COLORS)]


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; binary prefixes like nccl-tests' sizes.

    >>> format_bytes(8), format_bytes(64 << 20)
    ('8 B', '64 MiB')
    """
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    k = 0
    while abs(n) >= 1024 and k < len(units) - 1:
        n /= 1024
        k += 1
    return f"{n:.3g} {units[k]}"


def byte_ticks(sizes: Iterable[float]) -> dict:
    """Axis settings for a log byte axis with readable ticks (powers of 4 or coarser)."""
    sizes = [s for s in sizes if s and s > 0]
    if not sizes:
        return {"type": "log"}
    lo, hi = math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes)))
    step = max(2, 2 * math.ceil((hi - lo) / 16))
    vals = [2.0 ** e for e in range(lo - lo % 2, hi + 1, step)]
    return {"type": "log", "tickvals": vals, "ticktext": [format_bytes(v) for v in vals],
            "title": {"text": "size (bytes)"}}


def facet_titles(fig, unit: str = "bytes"):
    """Name each facet of a plotly express figure by its value, not ``column=value``: sizes in bytes
    (``size=67108864`` -> "64 MiB") or counts with their unit ("ranks=4" -> "4 ranks"). Returns the figure.

    >>> import plotly.express as px
    >>> fig = px.line(x=[1, 2, 1, 2], y=[1, 2, 3, 4], facet_col=[1024, 1024, 8192, 8192],
    ...               labels={"facet_col": "size"})
    >>> [a.text for a in facet_titles(fig).layout.annotations]
    ['1 KiB', '8 KiB']
    """
    def name(a):
        if "=" not in (a.text or ""):
            return
        value = a.text.split("=", 1)[1]
        a.update(text=format_bytes(float(value)) if unit == "bytes" else f"{value} {unit}")
    fig.for_each_annotation(name)
    return fig
