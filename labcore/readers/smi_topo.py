"""How a machine's GPUs are connected: the text of ``nvidia-smi topo -m`` read into a matrix.

The link between two GPUs (NVLink, a PCIe switch, the CPU's host bridge, the
link between sockets) decides which transport NCCL can use and how fast a
collective can go. ``nvidia-smi topo -m`` prints that as a text matrix; this
module turns it into a DataFrame (this machine's own, run live, is
:func:`labcore.live.sysinfo.machine_topology`).

Example
-------
>>> from labcore.readers.smi_topo import parse_topo
>>> topo = parse_topo("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\n"
...                   "GPU0\\t X \\tNV4\\t0-7\\t0\\nGPU1\\tNV4\\t X \\t0-7\\t0\\n")
>>> topo.matrix.loc["GPU0", "GPU1"], topo.describe("NV4")
('NV4', 'NVLink (4 links bonded)')
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from labcore.files import MAX_TEXT_BYTES, check_text_limited, read_text_limited

# The meaning of each code, in the words of nvidia-smi's own legend (printed under the matrix).
LEGEND = {
    "X": "self",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes, i.e. between CPU sockets (e.g. QPI/UPI)",
    "NODE": "PCIe and the interconnect between PCIe host bridges within a NUMA node",
    "PHB": "PCIe and a PCIe host bridge (typically the CPU)",
    "PXB": "several PCIe bridges, without the PCIe host bridge",
    "PIX": "at most a single PCIe bridge",
    "NV#": "a bonded set of # NVLinks",
}
# Fastest first: what a learner should expect from a pair of devices.
RANKING = ["X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"]

_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")


@dataclass
class TopoMatrix:
    """A parsed ``nvidia-smi topo -m``.

    Attributes
    ----------
    matrix : DataFrame of link codes (``NV12``, ``PIX``, ``SYS``, ``X``...), devices on both axes.
    affinity : DataFrame with the remaining columns per device (CPU Affinity, NUMA Affinity, ...).
    nics : NIC label -> device name from the "NIC Legend" (e.g. ``NIC0 -> mlx5_0``).
    """

    matrix: pd.DataFrame
    affinity: pd.DataFrame
    nics: dict = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.matrix.index if d.startswith("GPU")]

    @staticmethod
    def describe(code: str) -> str:
        """Plain words for one link code."""
        code = code.strip()
        if m := re.fullmatch(r"NV(\d+)", code):
            return f"NVLink ({m.group(1)} links bonded)"
        return LEGEND.get(code, f"unknown link {code!r}")

    def gpu_links(self) -> pd.DataFrame:
        """One row per GPU pair: link code, plain words, and its rank from fastest (0) to slowest."""
        rows = []
        gpus = self.gpus
        for i, a in enumerate(gpus):
            for b in gpus[i + 1:]:
                code = self.matrix.loc[a, b]
                kind = "NV" if code.startswith("NV") else code
                rows.append(dict(a=a, b=b, link=code, meaning=self.describe(code),
                                 speed_rank=RANKING.index(kind) if kind in RANKING else len(RANKING)))
        return pd.DataFrame(rows, columns=["a", "b", "link", "meaning", "speed_rank"])


def parse_topo(text) -> TopoMatrix:
    """Parse the text of ``nvidia-smi topo -m`` (or a ``pathlib.Path`` of a file holding it).

    Reads what current drivers print: the header underlined with terminal escapes
    (``\x1b[4m ... \x1b[0m`` on a TTY), a "GPU NUMA ID" column, the tabs nvidia-smi puts after
    some values to line them up (two after NUMA Affinity), and copies whose tabs were turned
    into spaces. At most :data:`labcore.files.MAX_TEXT_BYTES` are read.

    Raises
    ------
    ValueError
        When the text holds no device matrix (e.g. an error message from nvidia-smi), or is
        too large, or the path is not a regular file.
    """
    text = _text(text)
    lines = _ESCAPES.sub("", text).splitlines()
    head = next((i for i, line in enumerate(lines) if "GPU0" in line.split()), None)
    if head is None:
        raise ValueError("no GPU matrix found: pass the output of `nvidia-smi topo -m`")
    tabbed = "\t" in lines[head]
    columns = _cells(lines[head], tabbed)
    devices = [c for c in columns if _DEVICE.match(c)]
    extra = [c for c in columns if c and not _DEVICE.match(c)]
    links, other = {}, {}
    for line in lines[head + 1:]:
        cells = _cells(line, tabbed)
        if not cells or not _DEVICE.match(cells[0]):
            if links and not line.strip():
                break
            continue
        name, values = cells[0], cells[1:]
        links[name] = values[: len(devices)]
        # nvidia-smi pads some values with extra tabs (and a NIC row has none): the values that
        # are there fill the columns in order.
        given = [v for v in values[len(devices):] if v]
        other[name] = (given + [""] * len(extra))[: len(extra)]
    matrix = pd.DataFrame.from_dict(links, orient="index", columns=devices)
    affinity = pd.DataFrame.from_dict(other, orient="index", columns=extra)
    nics = dict(_NIC_LEGEND.findall("\n".join(lines)))
    return TopoMatrix(matrix, affinity, nics)


# Terminal escapes (SGR: underline, reset) and what is left of them when a copy loses the ESC.
_ESCAPES = re.compile(r"\x1b?\[[0-9;]{0,12}m")
_NIC_LEGEND = re.compile(r"^[ \t]*(NIC\d+)[ \t]*:[ \t]*(\S+)", re.M)
_SPACES = re.compile(r" {2,}")


def _cells(line: str, tabbed: bool) -> list[str]:
    """The cells of one matrix line: split at tabs, or at runs of spaces where the tabs were expanded."""
    if tabbed:
        cells = [c.strip() for c in line.split("\t")]
    else:
        cells = [c.strip() for c in _SPACES.split(line.strip())] if line.strip() else []
    return cells[1:] if cells and cells[0] == "" and tabbed else cells


def _text(source) -> str:
    """The text of ``source`` (a str, or a Path read as a bounded regular file)."""
    if isinstance(source, Path):
        return read_text_limited(source, MAX_TEXT_BYTES, "a file of `nvidia-smi topo -m` output",
                                 fix="save the output of `nvidia-smi topo -m` to a file and pass that")
    if not isinstance(source, str):
        raise TypeError(f"parse_topo takes the text of `nvidia-smi topo -m` (or a Path), not {type(source).__name__}")
    return check_text_limited(source, MAX_TEXT_BYTES, "the text given", "pass the output of `nvidia-smi topo -m`")
