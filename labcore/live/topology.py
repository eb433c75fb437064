"""How this machine's devices are connected: ``nvidia-smi topo -m`` as a matrix, or a CPU summary.

The link between two GPUs (NVLink, a PCIe switch, the CPU's host bridge, the
link between sockets) decides which transport NCCL can use and how fast a
collective can go. ``nvidia-smi topo -m`` prints that as a text matrix; this
module turns it into a DataFrame. Without GPUs it describes what the ranks
share instead: CPU cores, NUMA nodes and memory.

Example
-------
>>> from labcore.live.topology import parse_topo
>>> topo = parse_topo("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\n"
...                   "GPU0\\t X \\tNV4\\t0-7\\t0\\nGPU1\\tNV4\\t X \\t0-7\\t0\\n")
>>> topo.matrix.loc["GPU0", "GPU1"], topo.describe("NV4")
('NV4', 'NVLink (4 links bonded)')
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
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


def cpu_summary() -> dict:
    """What ranks on this machine share when there is no GPU: cores, NUMA nodes, memory."""
    import platform

    import psutil

    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.M)
        model = found.group(1).strip() if found else model
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    mem = psutil.virtual_memory()
    return {
        "cpu": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "numa_nodes": max(1, len(nodes)),
        "memory_total_gib": round(mem.total / 2**30, 1),
        "memory_available_gib": round(mem.available / 2**30, 1),
        "transport": "gloo over loopback TCP: every byte crosses the kernel's network stack "
                     "and competes with the ranks for the same cores",
    }


def machine_topology(timeout: float = 10.0):
    """The GPU :class:`TopoMatrix` from ``nvidia-smi topo -m`` when it works, else :func:`cpu_summary`."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                                 timeout=timeout, check=True).stdout
            return parse_topo(out)
        except (subprocess.SubprocessError, OSError, ValueError):
            pass
    return cpu_summary()
